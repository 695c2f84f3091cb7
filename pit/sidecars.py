"""Reading the JSON sidecars one command writes and another reads: an adapter's pit_base.json, a run folder's
run.json and summary.json, a tokenizer's meta.json, a checkpoint's config.json.

The rule: a sidecar that is damaged or hand-edited into another shape (not JSON, not a JSON object, a key missing
or holding a value of another type) is one PitError naming the file, the key and what was expected, before any
value of it is used; never a traceback where the value is first used (`meta["base_sha256"]` of a list).
"""

from __future__ import annotations

import json
import os

from pit.errors import PitError
from pit.io import read_json

Kinds = type | tuple[type, ...]
TYPE_WORDS = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    dict: "an object",
    list: "an array",
    type(None): "null",
}

# run.json (pit.training.run_folder.RunFolder.start_tracking): the keys its readers use, and their types
RUN_JSON = {
    "run_name": str,
    "experiment": str,
    "tags": dict,
    "params": dict,
    "metric_keys": dict,
    "fingerprint": str,
    "mlflow_run_id": (str, type(None)),
}


def kind_word(value) -> str:
    """What a JSON value is, in words: 'an array', 'null', ..."""
    return TYPE_WORDS.get(type(value), type(value).__name__)


def _words(kinds: Kinds) -> str:
    return " or ".join(TYPE_WORDS.get(k, k.__name__) for k in (kinds if isinstance(kinds, tuple) else (kinds,)))


def is_kind(value, kinds: Kinds) -> bool:
    """Whether a JSON value has one of `kinds`: true/false is not an integer, an integer is a number."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if isinstance(value, bool):
        return bool in kinds
    return isinstance(value, kinds) or (float in kinds and isinstance(value, int))


def check_object(
    value, label: str, what: str, required: dict[str, Kinds] | None = None, optional: dict[str, Kinds] | None = None
) -> dict:
    """`value` when it is a JSON object whose `required` keys are present and whose `required` and `optional` keys
    hold values of the kinds given; else a PitError naming `label` (the file), the key and `what` was expected."""
    required, optional = required or {}, optional or {}
    if not isinstance(value, dict):
        raise PitError(f"{label} holds {kind_word(value)}; expected {what} (a JSON object): a damaged or edited file?")
    for key, kinds in {**optional, **required}.items():
        if key not in value:
            if key in required:
                raise PitError(f"{label} has no key {key!r}; expected {what} with {key!r} ({_words(kinds)})")
            continue
        if not is_kind(value[key], kinds):
            shown = json.dumps(value[key], default=repr)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise PitError(f"{label}: {key} {shown} is {kind_word(value[key])}; expected {_words(kinds)} ({what})")
    return value


def read_object(path: str | os.PathLike, what: str, required: dict | None = None, optional: dict | None = None) -> dict:
    """The JSON object in the file `path`, checked by `check_object` (a missing, unreadable or invalid file is
    pit.io.read_json's PitError)."""
    return check_object(read_json(path), repr(str(path)), what, required, optional)


def read_run_record(path: str | os.PathLike, required: tuple[str, ...] = ()) -> dict:
    """A run folder's run.json: a JSON object whose RUN_JSON keys have their types (the `required` ones present),
    with `params.train` (a pretraining run's settings) an object where present, its `tags` an object, its `model` and
    `val_data` strings."""
    record = read_object(
        path,
        "the run.json of `pit train` or `pit lora train`",
        {k: RUN_JSON[k] for k in required},
        {k: v for k, v in RUN_JSON.items() if k not in required},
    )
    label = repr(str(path))
    params = check_object(record.get("params", {}), f"{label} params", "the run's settings", optional={"train": dict})
    train = {"tags": dict, "model": str, "val_data": (str, type(None))}
    check_object(params.get("train", {}), f"{label} params.train", "a pretraining run's settings", optional=train)
    return record
