"""What every command module shares: reading a `--spec` (a JSON object, or a file holding one) or a `--config`
(a YAML or JSON mapping), and letting explicit flags override its keys."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pit.errors import PitError, yaml_error_text
from pit.io import check_output, load_yaml


def _read_file(value: str, flag: str, what: str) -> str:
    """The text of the file a flag names; a missing file, a folder or unreadable bytes are one PitError."""
    path = Path(value)
    if not path.exists():
        raise PitError(f"{flag} {value!r}: no such file; expected {what}")
    if not path.is_file():
        raise PitError(f"{flag} {value!r} is a folder (or not a regular file); expected {what}")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise PitError(f"{flag} {value!r} cannot be read ({err}); expected {what}") from None


def spec_path(value: str | None) -> str | None:
    """The file a `--spec` names (None for an inline JSON object or no --spec): one of the command's sources."""
    return value if value is not None and not value.lstrip().startswith("{") else None


def read_spec(value: str | None, flag: str = "--spec") -> dict[str, Any]:
    """A JSON object given inline (`{...}`) or as the path of a JSON file; {} for None."""
    if value is None:
        return {}
    text = value
    if not value.lstrip().startswith("{"):
        text = _read_file(value, flag, "a JSON object or the path of a JSON file")
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as err:
        raise PitError(f"{flag} {value[:80]!r}: not valid JSON ({err}); expected a JSON object") from None
    if not isinstance(spec, dict):
        raise PitError(f"{flag} {value[:80]!r}: expected a JSON object, got {type(spec).__name__}")
    return spec


def read_config(value: str, flag: str = "--config", what: str = "the pipeline config", loader=None) -> dict[str, Any]:
    """A mapping given inline as a JSON object (`{...}`) or as the path of a YAML or JSON file; a missing file, a
    syntax error (with its line and column) or a value that is not a mapping is one PitError."""
    import yaml

    inline = value.lstrip().startswith("{")
    text = value if inline else _read_file(value, flag, f"{what} (a JSON object, or a YAML/JSON file)")
    shown = "the inline JSON" if inline else repr(value)
    try:
        config = json.loads(text) if inline else load_yaml(text, loader)
    except json.JSONDecodeError as err:
        raise PitError(f"{flag} {shown}: not valid JSON ({err}); expected a JSON object") from None
    except yaml.YAMLError as err:
        mark, problem = yaml_error_text(err)
        where = f" line {mark[0]}, column {mark[1]}:" if mark else ""
        raise PitError(f"{flag} {shown}:{where} YAML syntax error: {problem}") from None
    if not isinstance(config, dict):
        raise PitError(f"{flag} {shown}: expected a mapping ({what}), got {type(config).__name__}")
    return config


def sqlite_file(uri: str | None) -> str | None:
    """The database file of an MLflow `sqlite:///PATH` store URI (None for another kind of store)."""
    return uri[len("sqlite:///") :] if isinstance(uri, str) and uri.startswith("sqlite:///") else None


RESULT_STAGES = ("pretrain", "diagnostics", "posttrain", "teachers")  # what a reader of the results root reads


def stage_folders(root: str | None) -> list[str]:
    """The folders a reader of the whole results root (`--runs results`: the claims, the study's tables) reads: its
    sources for the output rule, so that it may write results/tables beside them."""
    return [str(Path(root) / stage) for stage in RESULT_STAGES] if root else []


def check_outputs(outputs, *sources, flag: str = "--out") -> None:
    """The output rule (pit.io.check_output) for each of a command's `outputs` against every source it reads:
    paths, lists of paths or None (skipped)."""
    flat = [p for s in sources for p in (s if isinstance(s, (list, tuple)) else [s]) if p is not None]
    for out in outputs:
        if out is not None:
            check_output(out, flat, flag)


def _spec_type_ok(value, kind: type) -> bool:
    """A spec value of the flag's type: bool is not an int, an int is a float."""
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def merge_spec(
    args: argparse.Namespace,
    spec: dict[str, Any],
    defaults: dict[str, Any],
    types: dict[str, type] | None = None,
) -> argparse.Namespace:
    """Fill `args` from `spec`, then from `defaults`: a flag given on the command line wins over the spec, the spec
    over the default. The flags named in `defaults` must be declared with `default=None`; a spec key that is not
    one of them is an error naming it, and so is a spec value not of the key's type (`types[key]`, else the
    type of its default; null only where the default is None; an int is accepted for a float, as a float)."""
    unknown = sorted(set(spec) - set(defaults))
    if unknown:
        raise PitError(f"--spec has unknown keys {unknown}; expected a subset of {sorted(defaults)}")
    types = types or {}
    for key, value in spec.items():
        kind = types.get(key) or type(defaults[key])
        if value is None and defaults[key] is None or kind is type(None):
            continue
        if not _spec_type_ok(value, kind):
            raise PitError(f"--spec key {key!r}: {json.dumps(value)} is not of type {kind.__name__}")
        if kind is float:
            spec = {**spec, key: float(value)}
    for key, default in defaults.items():
        if getattr(args, key, None) is None:
            setattr(args, key, spec.get(key, default))
    return args


def add_spec_argument(parser: argparse.ArgumentParser, keys: str) -> None:
    parser.add_argument(
        "--spec", default=None, help=f"settings as a JSON object or a JSON file (keys: {keys}); explicit flags win"
    )
