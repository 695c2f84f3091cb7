"""The paper's reported numbers (pit/reporting/paper_values.yaml), cited to table and row."""

from __future__ import annotations

import functools
from importlib import resources

import yaml


@functools.cache
def paper_values() -> dict:
    """paper_values.yaml: table -> mode -> slot -> method -> value (Table 3: model name -> row)."""
    return yaml.safe_load(resources.files("pit.reporting").joinpath("paper_values.yaml").read_text())


def paper_value(table: str, mode: str, slot: str, kind: str) -> dict:
    """The paper's values of one row of Table 1, 2 or 4; {} where the paper has none."""
    return paper_values()[table].get(mode, {}).get(slot, {}).get(kind, {})
