"""The tags that tell runs apart in the MLflow UI, `pit runs --stage/--mode/--arm`, and the link of a LoRA or
evaluation run to its pretraining run.

Every run carries `stage` (pretrain, lora, evaluate, summary: `STAGES`, the pipeline's order) and, where it belongs
to an arm of the study,
`mode` (teacher, scratch, or stand-in for the GPT-2 stand-in teachers the pipeline pretrains first), `slot` and
`arm`: the pretraining arm's name (pit, pit-head, tt, tt-norewarm, untied). `interface` stays the token interface
kind (pit for both pit and pit-head), so `arm` is what separates a PIT-head run from a PIT run.

A spec's explicit `arm` / `mode` tags win. Without them they come from what the run already carries:
- a stand-in teacher (`role=stand-in-teacher`) is trained from scratch, but is not a scratch-mode arm: mode stand-in;
- `arm` is the part of the workflow's run name after `<mode>-<slot>-` (and before `-s<seed>`), the run-name
  pattern `[<prefix>-]<mode>-<slot>-<arm>[-s<seed>]` of every pretraining, LoRA and evaluation run
  (docs/reproducibility.md); a run named otherwise gets its `interface` as `arm`.

Runs are not nested: MLflow's UI lists a nested run under its parent, so a filter on one stage
(`tags.stage = "evaluate"`) showed the pretraining runs, folded, instead of the evaluation runs. A LoRA or evaluation
run names its pretraining run in the tag `PRETRAIN_RUN_TAG` (its run id) instead; the UI lists each stage on its
own, and groups by the tag `stage`.
"""

from __future__ import annotations

import re

STAGES = ("pretrain", "lora", "evaluate", "summary")  # the value of the tag `stage`, in the pipeline's order
PRETRAIN_RUN_TAG = "pit.pretrain_run"  # a LoRA or evaluation run: the run id of the pretraining run of its arm
PARENT_TAG = "mlflow.parentRunId"  # MLflow's nesting, which runs of earlier versions carry (an import rewrites it)
LINK_TAGS = (PRETRAIN_RUN_TAG, PARENT_TAG)  # tags holding another run's id
STAND_IN_ROLE = "stand-in-teacher"
STAND_IN_MODE = "stand-in"
LINKED_STAGES = ("lora", "evaluate")  # the stages whose runs name the pretraining run of their arm
# the tags that name one pretraining run of an arm: a LoRA or evaluation run's pretraining run has the same values
ARM_KEYS = ("mode", "slot", "arm", "seed")


def arm_from_name(run_name: str, tags: dict) -> str | None:
    """The arm in a run name `[<prefix>-]<mode>-<slot>-<arm>[-s<seed>]`, given the run's mode, slot (and seed) tags;
    None when the name does not have that form."""
    mode, slot = tags.get("mode"), tags.get("slot")
    if not mode or not slot:
        return None
    seed = f"-s{tags['seed']}" if tags.get("seed") not in (None, "") else ""
    match = re.search(rf"(?:^|-){re.escape(f'{mode}-{slot}-')}(.+){re.escape(seed)}$", run_name)
    return match[1] if match else None


def run_tags(run_name: str, tags: dict | None) -> dict[str, str]:
    """`tags` (as strings) with `mode` of a stand-in teacher and `arm` filled in where the spec did not give them."""
    out = {k: str(v) for k, v in (tags or {}).items()}
    if out.get("role") == STAND_IN_ROLE:
        out["mode"] = STAND_IN_MODE
    if "arm" not in out and out.get("stage") != "summary":
        arm = arm_from_name(run_name, out) or out.get("interface")
        if arm:
            out["arm"] = arm
    return out


def stage_order(stage) -> int:
    """A stage's place in the pipeline (`STAGES`); other values after them."""
    return STAGES.index(stage) if stage in STAGES else len(STAGES)


def pretrain_run_filter(tags: dict) -> str | None:
    """The MLflow search filter of the pretraining run a LoRA or evaluation run belongs to (same mode, slot, arm
    and seed); None for other runs, or when a value cannot be written in a filter."""
    if tags.get("stage") not in LINKED_STAGES or not all(tags.get(k) for k in ARM_KEYS[:3]):
        return None
    values = {k: tags[k] for k in ARM_KEYS if tags.get(k) not in (None, "")}
    if any("'" in v for v in values.values()):
        return None
    return " and ".join(["tags.stage = 'pretrain'", *(f"tags.{k} = '{v}'" for k, v in values.items())])
