"""Which caption file, workflow/report/<name>.rst, captions a figure: one rule for the HTML report (the workflow's
`figure_output`) and REPORT.md (`pit report`). Standard library only, so the workflow imports it cheaply."""

from __future__ import annotations

import re

SHARED = {"figure2_transition": "transition", "interface_drift": "drift"}


def caption_name(stem: str) -> str:
    """The caption of figure `stem` (its file name without .png, or the workflow's wildcard pattern of it): one for
    every claim group's figure (`claims`), one for the loss curves of every figure number and mode, study figures by
    their name without `study_`."""
    if stem.startswith("claims_"):
        return "claims"
    if re.fullmatch(r"figure(\d+|\{number\})_(\w+|\{mode\})_loss", stem):  # a file, or the workflow's pattern
        return "loss_curves"
    return SHARED.get(stem, stem.removeprefix("study_"))
