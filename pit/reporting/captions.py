"""Which caption file, workflow/report/<name>.rst, captions a figure: one rule for the HTML report (the workflow's
`figure_output`) and REPORT.md (`pit report`). Standard library only, so the workflow imports it cheaply."""

from __future__ import annotations

import re

SHARED = {"figure2_transition": "transition", "interface_drift": "drift"}


def caption_name(stem: str) -> str:
    """The caption of figure `stem` (its file name without .png): one per claim group's figures (`claims`), one for
    the loss curves of every figure number and mode, study figures by their name without `study_`."""
    if stem.startswith("claims_"):
        return "claims"
    if re.fullmatch(r"figure\d+_\w+_loss", stem):
        return "loss_curves"
    return SHARED.get(stem, stem.removeprefix("study_"))
