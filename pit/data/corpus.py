"""The corpus spec: the profile's `corpus` section, `pit data download --spec` and `pit data prepare`'s settings.

A spec names its source and may leave every other key out; `resolve_spec` fills in CORPUS_DEFAULTS and the source's
defaults (the one place they live: the workflow's schema shows them, pit/pipeline/config.py; docs/data.md lists
them). A spec that states every key, as the profiles in config/ do, comes back unchanged, so its downloads, manifests
and hashes are the same as before there were defaults. Sources:

    local, glob: "texts/**/*.md"   text files matching a glob (`@stdlib` = this interpreter's standard library)
    local, path: "texts"           every text file below a folder (the same as glob "texts/**/*")
    local, path: "data.jsonl"      records: a JSON Lines (or JSON array) file, a Parquet file, or a folder a
                                   `datasets` data set was saved to (`save_to_disk`); `text_field` names the text
    hub, hub_id: "org/name"        a Hugging Face data set, streamed (or a local folder in the hub's layout)

Standard library only: the workflow imports this module while it reads the profile.
"""

from __future__ import annotations

from typing import Any

from pit.errors import PitError

COMMON_KEYS = {"name", "source", "max_documents", "max_bytes", "val_fraction", "seed", "shard_documents"}
SOURCE_KEYS = {"local": {"glob", "path", "exclude", "text_field"}, "hub": {"hub_id", "hub_config", "hub_split",
                                                                            "text_field"}}  # fmt: skip
REQUIRED = {"hub": ("hub_id",)}  # and a local source needs one of glob, path
# every key a spec may leave out, and its value then (docs/data.md, "Configuration keys")
CORPUS_DEFAULTS = {
    "name": "corpus",  # the folder under resources/corpus/
    "max_documents": None,  # no limit
    "max_bytes": None,  # no limit
    "val_fraction": 0.05,  # chance that a document goes to the validation split
    "seed": 0,  # seed of that split
    "shard_documents": 10000,  # documents per Parquet shard (and per resume step of a download)
}
SOURCE_DEFAULTS = {
    "local": {"exclude": []},
    "hub": {"hub_config": None, "hub_split": "train", "text_field": "text"},
}
PATH_DEFAULTS = {"text_field": "text"}  # a local source given by `path` (used when it holds records)


def resolve_spec(spec: Any) -> Any:
    """`spec` with each key it leaves out at its default (CORPUS_DEFAULTS, SOURCE_DEFAULTS, and PATH_DEFAULTS for a
    `path`); a `glob` or `path` of null is dropped (an overlay of config/config.yaml that replaces its glob by a path
    sets `glob: null`). Anything that is not a mapping with a known source comes back as it is, for check_spec."""
    if not isinstance(spec, dict) or spec.get("source") not in SOURCE_KEYS:
        return spec
    out = {k: v for k, v in spec.items() if not (k in ("glob", "path") and v is None)}
    extra = PATH_DEFAULTS if spec["source"] == "local" and "path" in out else {}
    return {**CORPUS_DEFAULTS, **SOURCE_DEFAULTS[spec["source"]], **extra, **out}


def _is_count(value, allow_none: bool) -> bool:
    if value is None:
        return allow_none
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_spec(spec: dict[str, Any]) -> None:
    """Raise PitError unless `spec` is a complete corpus spec (after `resolve_spec`): one line naming the bad key."""
    if not isinstance(spec, dict):
        raise PitError(f"corpus spec: expected a JSON object, got {type(spec).__name__}")
    source = spec.get("source")
    if not isinstance(source, str) or source not in SOURCE_KEYS:
        raise PitError(f"corpus source {source!r}: expected one of {sorted(SOURCE_KEYS)}")
    if missing := sorted(k for k in COMMON_KEYS | set(REQUIRED.get(source, ())) if k not in spec):
        raise PitError(f"corpus spec misses key(s) {missing} for source {source!r}")
    if source == "local" and ("glob" in spec) == ("path" in spec):
        which = "both glob and path" if "glob" in spec else "neither glob nor path"
        raise PitError(f"corpus source 'local' with {which}; expected one of them (in an overlay of a profile that "
                       "sets glob, give path with glob: null)")  # fmt: skip
    if unknown := sorted(spec.keys() - COMMON_KEYS - set().union(*SOURCE_KEYS.values())):
        raise PitError(f"corpus spec has unknown key(s) {unknown}")
    for key in ("name", "glob", "path", "hub_id", "hub_split", "text_field"):
        if key in spec and (not isinstance(spec[key], str) or not spec[key]):
            raise PitError(f"corpus {key} {spec[key]!r}: expected a non-empty string")
    exclude = spec.get("exclude", [])
    if not (isinstance(exclude, list) and all(isinstance(e, str) for e in exclude)):
        raise PitError(f"corpus exclude {exclude!r}: expected a list of fnmatch patterns (may be empty)")
    if not isinstance(spec["seed"], int) or isinstance(spec["seed"], bool) or spec["seed"] < 0:
        raise PitError(f"corpus seed {spec['seed']!r}: expected an integer >= 0")
    for key in ("max_documents", "max_bytes"):
        if not _is_count(spec[key], allow_none=True):
            raise PitError(f"corpus {key} {spec[key]!r}: expected a positive integer or null")
    if not _is_count(spec["shard_documents"], allow_none=False):
        raise PitError(f"corpus shard_documents {spec['shard_documents']!r}: expected a positive integer")
    fraction = spec["val_fraction"]
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not 0 < fraction < 1:
        raise PitError(f"corpus val_fraction {fraction!r}: expected a number in (0, 1)")
