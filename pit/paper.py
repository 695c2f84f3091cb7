"""The paper's reported numbers (pit/resources/paper_values.yaml), cited to table and row."""

from __future__ import annotations

import functools
from importlib import resources

import yaml


@functools.cache
def paper_values() -> dict:
    return yaml.safe_load(resources.files("pit").joinpath("resources/paper_values.yaml").read_text())
