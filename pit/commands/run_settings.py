"""The settings of the training commands (`pit train`, `pit lora train`): a YAML or JSON file (`--config`; `--spec`
also takes a JSON object inline), `--set KEY=VALUE` overrides, `--print-config`, and their help generated from the
dataclass fields of pit/training/args.py (type, default, bounds, docstring: the one place they live)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib.util
import json
import re
import textwrap
from pathlib import Path
from typing import Any

from pit.commands.common import read_config, read_spec
from pit.errors import PitError, yaml_error_text
from pit.io import load_yaml
from pit.training.args import ArgsError, bounds_text, field_default, field_docs, field_type


@functools.cache
def settings_loader():
    """PyYAML's safe loader that also reads `1e-3` as a number (YAML 1.2; PyYAML's YAML 1.1 wants `1.0e-3` and
    reads `1e-3` as a string), for run settings given in a file or with --set."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    exponent = re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$")
    Loader.add_implicit_resolver("tag:yaml.org,2002:float", exponent, list("-+0123456789."))
    return Loader


def module_doc(module: str) -> str:
    """A module's docstring read from its source, without importing it (a command's help stays free of torch)."""
    origin = importlib.util.find_spec(module).origin
    return ast.get_docstring(ast.parse(Path(origin).read_text(encoding="utf-8"))) or ""


def settings_help(args_class) -> str:
    """Every setting of a run, from the dataclass fields: name, type, default (or `required`), bounds, docstring."""
    docs, lines = field_docs(args_class), [f"settings ({args_class.__name__}, pit/training/args.py):"]
    for f in dataclasses.fields(args_class):
        kind, optional = field_type(args_class, f.name)
        default = field_default(f)
        facts = [kind.__name__ + (" | null" if optional else "")]
        facts.append("required" if default is dataclasses.MISSING else f"default {json.dumps(default)}")
        facts += [b for b in [bounds_text(dict(f.metadata), kind)] if b]
        lines.append(f"  {f.name} ({'; '.join(facts)})")
        lines += textwrap.wrap(docs.get(f.name, ""), 100, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)


def add_run_arguments(p: argparse.ArgumentParser, args_class) -> None:
    """The arguments of every training command: the settings (--config, --spec or --spec-file, then --set), and
    --print-config, --out, --threads, --overwrite; every setting is listed in the help (settings_help)."""
    src = p.add_mutually_exclusive_group()
    src.add_argument("--config", metavar="FILE", help="the run settings as a YAML or JSON file (a mapping)")
    src.add_argument("--spec", help="the run settings as a JSON object, or the path of a JSON file")
    src.add_argument("--spec-file", help="the run settings as a JSON file (same as --spec FILE)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting after the file, VALUE read as YAML: lr=1e-3, compile=true, interface.kind=tt "
        "(a dotted key sets one key of a mapping); repeatable",
    )
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved settings (every one, defaults filled in) as YAML and exit: a --config file",
    )
    p.add_argument("--out", help="run folder (required unless --print-config)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (overrides the settings)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a finished run with other settings in --out (the old result stays until the new one is "
        "complete), or start over an unfinished one with other settings or changed inputs; without it such a folder "
        "is refused, one that holds this run finished is left as it is, and this run unfinished is resumed",
    )
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = settings_help(args_class)
    p.set_defaults(run_settings=args_class)  # a flag named as a setting (--max-steps 5) gets the hint --set max_steps=5


def parse_override(text: str) -> tuple[list[str], Any]:
    """`--set KEY=VALUE` as (the dotted key's parts, the value read as YAML: `1e-3` a number, `true` a bool,
    `null` None, `[a, b]` a list)."""
    import yaml

    key, sep, raw = text.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise PitError(f"--set {text!r}: expected KEY=VALUE, e.g. lr=1e-3 or interface.kind=tt")
    try:
        return parts, load_yaml(raw, settings_loader())
    except yaml.YAMLError as err:
        raise PitError(f"--set {text!r}: the value is not valid YAML ({yaml_error_text(err)[1]})") from None


def apply_override(spec: dict, args_class, text: str) -> str:
    """Set one `--set KEY=VALUE` in `spec` (in place); a dotted key reaches into a mapping setting, starting from
    its default. Returns the top-level key."""
    parts, value = parse_override(text)
    fields = {f.name: f for f in dataclasses.fields(args_class)}
    if parts[0] not in fields:
        raise PitError(f"--set {text!r}: unknown setting {parts[0]!r}; expected one of {sorted(fields)}")
    node = spec
    for depth, key in enumerate(parts[:-1]):
        if key not in node:
            node[key] = field_default(fields[key]) if depth == 0 else {}
        if not isinstance(node[key], dict):
            raise PitError(f"--set {text!r}: {'.'.join(parts[: depth + 1])} is not a mapping")
        node = node[key]
    node[parts[-1]] = value
    return parts[0]


def run_settings(args: argparse.Namespace, args_class):
    """The checked settings of a training command: the file (--config, --spec or --spec-file), each --set in
    order, then --threads; a bad value a --set gave is one error line naming that --set."""
    if args.config is not None:
        spec = read_config(args.config, "--config", "the run settings", settings_loader())
    else:
        spec = read_spec(args.spec_file or args.spec, "--spec-file" if args.spec_file else "--spec")
    given = {apply_override(spec, args_class, text): text for text in args.set}
    if args.threads is not None:
        spec["threads"] = args.threads
    try:
        return args_class.from_dict(spec)
    except ArgsError as err:
        named = [given[f] for f in err.fields if f in given]
        if named:
            raise ArgsError(f"--set {named[0]!r}: {err}", err.fields) from None
        raise


def print_config(settings) -> int:
    """The resolved settings as YAML, in field order, every one with its default filled in (the interface's keys
    and the MLflow block's too): read back with --config, they give the same settings. `mlflow.tracking_uri: null`
    is resolved when the run starts; a comment says where that is now."""
    import yaml

    from pit.tracking.tracker import tracking_uri

    text = yaml.safe_dump(dataclasses.asdict(settings), sort_keys=False, default_flow_style=False)
    if settings.mlflow["tracking_uri"] is None:
        note = f"  tracking_uri: null  # $MLFLOW_TRACKING_URI, else the default; now: {tracking_uri()}"
        text = re.sub(r"^(mlflow:\n(?:  .*\n)*?)  tracking_uri: null$", lambda m: m[1] + note, text, flags=re.M)
    print(text, end="")
    return 0
