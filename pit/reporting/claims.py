"""The paper's claims put to the test (`pit table claims`): per claim one declared primary test in the paper's own
configuration, exploratory secondary rows beside it, and a verdict that says what kind of evidence it is
(docs/study.md, "The claims table").

Every number comes from the per-seed table (pit.reporting.per_seed, written beside the claims table as
`<out>_seeds.csv`), so the table can be recomputed from it alone (scripts/check_claims.py). The design is declared
before the run (the profile's `claims` key, `Design`): the arm of each mode in the paper's configuration and, in
teacher mode, the matched-start control. A row compares one arm with a reference arm in one cell:

- role `primary`: the claim's declared test: the primary arm (`pit`: Z frozen, T = I) against TT, or in teacher mode
  for the loss claim against the matched-start control (TT at the teacher's polar factor, the same function as PIT at
  step 0), in every main slot; for the side-effect claims the mean over the LoRA tasks. Every other arm and cell is
  `secondary`: reported, exploratory, never the claim's verdict;
- kind `paired`: the exact sign-flip test of the paired differences over seeds (pit.reporting.stats.sign_flip), its
  exact 95% interval and the interval at the Bonferroni level alpha / m of the row's family; `fisher`: one learning
  rate's diverged runs, Fisher's exact test of the two proportions; `group`: a learning-rate sweep's measure made per
  seed over the rates both arms ran (diverged rates, spikes, lr sensitivity), then tested like `paired`; `slope`:
  the slope of the validation-loss gap over the constant-rate tail (nats per 100 steps), tested like `paired`;
- runs that diverged are outcomes, not numbers: loss-based rows compare finite runs only and count the seeds dropped;
  the spike rows count only runs that trained their whole length (a diverged run's outcome is the divergence row);
- Holm-Bonferroni over each claim's tested primary rows (its family), and separately over its secondary rows; a row
  whose verdict is degenerate, not testable or not measured is not in its family;
- verdicts, decided in this order: `holds by construction` (the metric is PIT's definition), `not testable: <why>`
  (both arms 0 by construction, every seed reads one constant, the premise is absent, a score's resolution is coarser
  than the paper's effect), `not measured: <what>`, `n = 1, no interval`, `degenerate: <arm>: <why>` (an arm that
  learned no more than token frequencies, where that alone would decide the claim), then on the Holm-adjusted p at
  alpha: `supported` / `contradicted`, else `inconclusive` (with the smallest effect the design detects with 80%
  power, `mde`); a supported consistency claim is `not specific to PIT` where a valid untied control (measurably
  untied: polar cosine distance of E and W_out^T >= CONTROL_MIN_POLAR) shows the same effect and PIT does no better
  than it;
- `fragile`: for every decided row, whether its verdict changes when any one seed is dropped from its family;
  `two_drops`: whether it changes when any two seeds are (with n = 8 paired seeds an exact test over a two-row
  family has one seed of slack: a decided row that survives every two-seed drop does not rest on one or two runs).
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pit.errors import PitError
from pit.reporting.stats import fisher_p, holm, min_detectable, sign_flip, t_interval
from pit.reporting.tables import method_order, slot_key

GROUPS = ("interface", "training", "stability", "layerwise", "side_effects", "posttrain")
NEAR_UNIFORM = 0.1  # nats: a loss within this of ln V is a model that predicts (almost) nothing
CONTROL_ARMS = {"early_rise_excess": "tt-norewarm"}  # a claim's extra control beside untied
CONTROL_MIN_POLAR = 0.5  # an untied control is valid where E and W_out^T differ this much (polar cosine distance)
PAPER_SCORE_EFFECT = 1.3  # points: the largest PIT - TT score difference of the paper's Table 4 (0.4 to 1.3)
POOLED = "mean"  # the `lora` of a row over the mean of the LoRA tasks
PRIMARY_ARM = "pit"  # the paper's configuration (Z frozen, T = I) unless the design names another arm
LOSS_KEYS = ("val_loss", "early_rise_excess")  # measures a diverged run does not have (NaN in the per-seed table)


@dataclass(frozen=True)
class Design:
    """The declared design (the profile's `claims` key; docs/study.md): per mode the arm in the paper's configuration
    (`primary`), the teacher-mode matched-start control (`matched`, '' for none), the family-wise level `alpha` and
    the `power` at which inconclusive rows report their minimal detectable effect."""

    primary: dict = field(default_factory=lambda: {"teacher": "pit", "scratch": "pit"})
    matched: str = ""
    alpha: float = 0.05
    power: float = 0.8

    @classmethod
    def from_dict(cls, d: dict | None) -> Design:
        d = dict(d or {})
        return cls(
            primary={"teacher": "pit", "scratch": "pit", **d.get("primary", {})},
            matched=d.get("matched_control") or "",
            alpha=float(d.get("alpha", 0.05)),
            power=float(d.get("power", 0.8)),
        )

    def to_dict(self) -> dict:
        return {"primary": self.primary, "matched_control": self.matched, "alpha": self.alpha, "power": self.power}


def parse_design(text: str | None) -> dict:
    """The declared design from a command's --design (the profile's `claims` key as JSON; {} for the default)."""
    if not text:
        return {}
    try:
        design = json.loads(text)
    except json.JSONDecodeError as err:
        raise PitError(f"--design {text!r} is not JSON ({err.msg}); expected the profile's `claims` key") from None
    if not isinstance(design, dict) or set(design) - {"primary", "matched_control", "alpha", "power"}:
        raise PitError(f"--design {text!r}: expected an object with keys primary, matched_control, alpha, power")
    return design


@dataclass(frozen=True)
class Claim:
    """One claim of the paper: its words (`quote`, from `where`), a short `title`, the metric that measures it here
    (`key` in the per-seed table, shown as `metric`, computed as `how`), the modes it speaks of, the sign the paper
    gives to PIT - reference (`direction`), the kind of evidence (`evidence`: test | construction |
    construction_both), whether the untied control can make it `not specific to PIT` (`control`), which slots it reads
    (`scope`: main = the slots that are not sweeps; sweep = a learning-rate sweep group, one `group` row of `measure`
    and one row per rate; group = only the group row), `role` (primary: the claim's metric; secondary: another
    metric of the same claim, exploratory), `pool` (the primary cell is the mean over LoRA tasks), `resolution` (a
    score: tested only where one problem is smaller than the paper's effect), `binary` (per-rate rows by Fisher's
    exact test), `measure` (the group row's per-seed measure: count | sum | range), and `readings`: sentences that
    explain a verdict (never a number)."""

    id: str
    group: str
    title: str
    quote: str
    where: str
    metric: str
    how: str
    key: str
    modes: tuple[str, ...]
    direction: int
    evidence: str = "test"
    control: bool = False
    scope: str = "main"
    premise: str = ""  # a claim whose premise is an effect in TT: the TT values must show it
    degenerate_rule: bool = True  # False where not learning is the outcome measured (losses, divergence)
    role: str = "primary"
    pool: bool = False
    resolution: bool = False
    binary: bool = False
    measure: str = ""
    readings: dict = field(default_factory=dict)


_CONSISTENT = ("guaranteeing a pseudo-inverse-consistent interface throughout training", "Abstract; Section 5.5")
_STABLE = ("consistently observe improved training stability", "Abstract; Section 1")
_SIDE = ("substantially reduced side effects", "Abstract; Section 5.6")
_LAYER = ("stronger layerwise semantic consistency", "Abstract; Figure 2; Section 5.5")
_TEACHER = ("In teacher-mode, PIT is modestly better in most cells, with the largest gains appearing on harder "
            "transfer settings such as HumanEval and SVAMP", "Table 4 discussion, Section 5.6")  # fmt: skip
_SCRATCH = ("In scratch-mode, TT is slightly better across the board", "Table 4 discussion, Section 5.6")
_BOTH = ("teacher", "scratch")
_LENS = {
    "not specific to PIT": "a valid untied control, with no tying at all, shows the same reduction against TT and PIT "
    "does no better than it, so the reduction is untying TT's lens, not PIT's consistency",
}
_SCORE = {"not testable": "a score on these sets moves in steps larger than the paper's differences"}

CLAIMS = [
    Claim("interface_max_delta_ti", "interface", "Pseudo-inverse consistency: Delta_TI", *_CONSISTENT,
          "max Delta_TI", "max over logged steps of ||W_out E - I||_F (metrics.jsonl)", "max_delta_ti", _BOTH, -1,
          "construction", readings={"holds by construction": "W_out E = I is PIT's definition (up to FP32 rounding); "
          "TT is not built to satisfy it, so this confirms the implementation, not a hypothesis"}),
    Claim("interface_raw_cosine", "interface", "Consistent anchors, raw reading (Eqs. 1-2)", *_CONSISTENT,
          "raw cosine distance", "Table 2 cosine distance of the raw anchors B_in = E, B_out = pinv(W_out) at the end "
          "of training (diagnostics.json)", "raw_cosine", _BOTH, -1, "construction",
          readings={"holds by construction": "pinv(T Z^T) = Z T^-1 = E exactly, so PIT reads 0 by construction; "
                    "the claim depends on this raw reading"}),
    Claim("interface_polar_cosine", "interface", "Consistent anchors, polar reading (Section 5.5)", *_CONSISTENT,
          "polar cosine distance", "Table 2 cosine distance of the polar factors of E and W_out^T (diagnostics.json)",
          "polar_cosine", _BOTH, -1, "construction_both",
          readings={"not testable": "exact transpose tying gives E and W_out^T the same polar factor, so TT reads 0 "
                    "as well: under the paper's own Section 5.5 reading there is no difference to find"}),
    Claim("teacher_early_rise", "training", "Teacher mode: PIT more stable early (Fig. 4)",
          "PIT is more stable early on, while TT exhibits a brief loss increase", "Section 5.4; Figure 4",
          "early rise (nats above noise)", "max over the first 10% of steps of the smoothed loss (trailing mean of 10 "
          "steps) above its first smoothed value, minus the 95% noise floor of flat curves with the run's own per-step "
          "noise; 0 when below it (pit/analysis/curves.py)", "early_rise_excess", ("teacher",), -1,
          premise="TT shows no early rise above its noise floor in any seed: the premise of the claim (TT's brief "
          "loss increase) does not occur here"),
    Claim("teacher_val_loss", "training", "Teacher mode: PIT reaches a lower loss (Fig. 4)",
          "PIT performs more stable than TT, and obtained lower loss", "Figure 4 caption; Section 5.4", "val loss",
          "validation loss at the end of continued pretraining (summary.json); primary reference: the matched-start "
          "TT control, so that the test is of PIT's training, not of its conversion", "val_loss", ("teacher",), -1,
          degenerate_rule=False),
    Claim("scratch_val_loss", "training", "Scratch mode: TT keeps a lower loss (Fig. 3)",
          "TT keep a lower level of loss in the whole process", "Figure 3 caption; Section 5.4", "val loss",
          "validation loss at the end of pretraining (summary.json)", "val_loss", ("scratch",), 1,
          degenerate_rule=False),
    Claim("stability_divergence", "stability", "Fewer diverged runs", *_STABLE, "diverged",
          "group row: per seed, the number of the sweep's learning rates at which the run diverged (ended with a "
          "non-finite validation loss, one no lower than its first loss, or stuck in non-finite steps); per-rate rows: "
          "1 / 0 per run, Fisher's exact test", "diverged", ("scratch",), -1, scope="sweep", degenerate_rule=False,
          binary=True, measure="count"),
    Claim("stability_spikes", "stability", "Fewer loss spikes", *_STABLE, "loss spikes",
          "episodes of finite steps whose loss exceeds the median of the previous 20 by 5 noise sigmas, after warmup "
          "(pit/analysis/curves.py); undefined for a run that diverged before the count starts; group row: per seed, "
          "the sum over the rates where both arms are defined", "spikes", ("scratch",), -1, scope="sweep",
          measure="sum", degenerate_rule=False),
    Claim("stability_lr_sensitivity", "stability", "Less sensitive to the learning rate", *_STABLE,
          "lr sensitivity (nats)", "per seed, worst minus best final validation loss over the sweep's learning rates "
          "at which both arms' runs are finite (no loss is imputed for a diverged run)", "val_loss", ("scratch",), -1,
          scope="group", degenerate_rule=False, measure="range"),
    Claim("lens_kl_ratio", "layerwise", "Layerwise consistency: lens KL, normalised", *_LAYER, "lens KL ratio",
          "mean over layers l < L of KL(p_L || p_l) / KL(p_L || uniform): 0 = every layer decodes like the last, 1 = "
          "as far off as the uniform distribution (diagnostics.json lens.kl_ratio)", "lens_kl_ratio", _BOTH, -1,
          control=True, readings=_LENS),
    Claim("lens_ce_gap", "layerwise", "Layerwise consistency: lens cross-entropy, normalised", *_LAYER,
          "lens CE gap", "mean over layers l < L of (CE_l - CE_L) / (log2 V - CE_L): the fraction of the last layer's "
          "gain over uniform that layer l lacks (diagnostics.json lens.ce_gap)", "lens_ce_gap", _BOTH, -1,
          control=True, role="secondary", readings=_LENS),
    Claim("side_effect_kl_matched", "side_effects", "Side effects at matched adaptation: KL on the frontier", *_SIDE,
          "KL at matched gain", "KL interpolated at one in-domain gain shared by every arm of the cell, on each run's "
          "KL-vs-gain curve over the LoRA learning rates (posttrain.frontier_lrs and lora.lr); primary: the mean over "
          "the LoRA tasks", "kl_at_matched_gain", _BOTH, -1, control=True, pool=True),
    Claim("side_effect_kl_per_gain", "side_effects", "Side effects per nat of adaptation: KL", *_SIDE,
          "KL per nat of gain", "KL(p_before || p_after) on held-out pretraining text divided by the in-domain gain "
          "(reference NLL before - after) of the same LoRA", "kl_per_gain", _BOTH, -1, control=True,
          role="secondary"),
    Claim("side_effect_val_per_gain", "side_effects", "Side effects per nat of adaptation: held-out loss", *_SIDE,
          "val-loss change per nat of gain", "validation loss after - before the LoRA divided by its in-domain gain",
          "val_change_per_gain", _BOTH, -1, control=True, role="secondary"),
    Claim("teacher_posttrain_gain", "posttrain", "Teacher mode: PIT adapts better in-domain (Table 4)", *_TEACHER,
          "in-domain NLL change", "reference NLL after - before the LoRA on its own task (eval/, base/)",
          "indomain_nll_change", ("teacher",), -1),
    Claim("teacher_transfer_nll", "posttrain", "Teacher mode: PIT transfers better (HumanEval, SVAMP)", *_TEACHER,
          "transfer NLL change", "reference NLL after - before the LoRA on its out-of-domain task (HumanEval after "
          "MBPP, SVAMP after GSM8K)", "transfer_nll_change", ("teacher",), -1),
    Claim("teacher_posttrain_score", "posttrain", "Teacher mode: PIT scores higher in-domain", *_TEACHER,
          "in-domain score (%)", "pass@1 / exact match of the LoRA model on its own task", "indomain_score",
          ("teacher",), 1, resolution=True, readings=_SCORE),
    Claim("teacher_transfer_score", "posttrain", "Teacher mode: PIT scores higher on transfer", *_TEACHER,
          "transfer score (%)", "pass@1 / exact match on the out-of-domain task", "transfer_score", ("teacher",), 1,
          resolution=True, readings=_SCORE),
    Claim("scratch_posttrain_gain", "posttrain", "Scratch mode: TT adapts slightly better (Table 4)", *_SCRATCH,
          "in-domain NLL change", "reference NLL after - before the LoRA on its own task", "indomain_nll_change",
          ("scratch",), 1),
    Claim("scratch_transfer_nll", "posttrain", "Scratch mode: TT transfers slightly better", *_SCRATCH,
          "transfer NLL change", "reference NLL after - before the LoRA on its out-of-domain task",
          "transfer_nll_change", ("scratch",), 1),
    Claim("scratch_posttrain_score", "posttrain", "Scratch mode: TT scores slightly higher in-domain", *_SCRATCH,
          "in-domain score (%)", "pass@1 / exact match of the LoRA model on its own task", "indomain_score",
          ("scratch",), -1, resolution=True, readings=_SCORE),
    Claim("scratch_transfer_score", "posttrain", "Scratch mode: TT scores slightly higher on transfer", *_SCRATCH,
          "transfer score (%)", "pass@1 / exact match on the out-of-domain task", "transfer_score", ("scratch",), -1,
          resolution=True, readings=_SCORE),
]  # fmt: skip
CLAIM_BY_ID = {c.id: c for c in CLAIMS}


def is_pit_arm(arm: str) -> bool:
    return arm == "pit" or arm.startswith("pit-")


def finite(values: dict) -> dict:
    """seed -> value of the seeds whose value is finite."""
    return {s: v for s, v in values.items() if v is not None and math.isfinite(v)}


def paired(arm: dict, ref: dict) -> list[float]:
    """arm - ref for every seed both have finite, in seed order."""
    a, r = finite(arm), finite(ref)
    return [a[s] - r[s] for s in sorted(set(a) & set(r))]


def _mean(values: dict) -> float:
    v = list(finite(values).values())
    return sum(v) / len(v) if v else math.nan


# ---- the per-seed table, indexed ----------------------------------------------------------------------------------
class Index:
    """The per-seed table as values[(mode, slot, lora, metric)][arm][seed] and each (mode, slot)'s sweep group;
    `without(seed)` is the same table with one seed left out (the leave-one-seed-out check)."""

    def __init__(self, seeds: pd.DataFrame):
        self.values: dict[tuple, dict[str, dict]] = {}
        self.group: dict[tuple[str, str], str] = {}
        self.dropped: frozenset = frozenset()
        for r in seeds.itertuples(index=False):
            cell = self.values.setdefault((r.mode, r.slot, r.lora, r.metric), {})
            cell.setdefault(r.arm, {})[int(r.seed)] = float(r.value)
            self.group.setdefault((r.mode, r.slot), r.group)

    def without(self, seed: int) -> Index:
        view = object.__new__(Index)
        view.values, view.group, view.dropped = self.values, self.group, self.dropped | {seed}
        return view

    def runs(self, mode: str, slot: str, lora: str, metric: str) -> dict[str, dict]:
        cell = self.values.get((mode, slot, lora, metric), {})
        if not self.dropped:
            return cell
        return {arm: {s: v for s, v in by.items() if s not in self.dropped} for arm, by in cell.items()}

    def slots(self, mode: str, scope: str) -> list[str]:
        """The slots of a mode: main = those that are their own group; groups = the groups with more than one slot."""
        slots = {s for (m, s) in self.group if m == mode}
        if scope == "main":
            slots = {s for s in slots if self.group[(mode, s)] == s}
        if scope == "groups":
            slots = {g for g in {self.group[(mode, s)] for s in slots} if len(self.group_slots(mode, g)) > 1}
        return sorted(slots, key=slot_key)

    def group_slots(self, mode: str, group: str) -> list[str]:
        """The slots of a sweep group in learning-rate order."""
        slots = [s for (m, s), g in self.group.items() if m == mode and g == group]
        return sorted(slots, key=lambda s: (_mean(self.runs(mode, s, "", "lr").get("tt", {})), slot_key(s)))

    def tasks(self, mode: str, slot: str, metric: str) -> list[str]:
        return sorted({k[2] for k in self.values if k[:2] == (mode, slot) and k[3] == metric})

    def seeds(self) -> list[int]:
        return sorted({s for cell in self.values.values() for by in cell.values() for s in by} - self.dropped)


# ---- the rows of a claim: cells ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    """One row's place: mode, slot (a sweep group's name for kind `group`), LoRA task ('' or POOLED), the arm and its
    reference, the role (primary | secondary) and the kind of test (paired | fisher | group | slope)."""

    mode: str
    slot: str
    lora: str
    arm: str
    ref: str
    role: str
    kind: str


def primary_ref(claim: Claim, mode: str, design: Design) -> str:
    """The primary reference: in teacher mode the declared matched-start control (PIT's training from the same
    function), wherever one is declared; TT otherwise."""
    return design.matched if mode == "teacher" and design.matched else "tt"


def _arms(index: Index, mode: str, slot: str, lora: str, key: str) -> list[str]:
    lora = "" if lora == POOLED else lora
    return sorted((a for a in index.runs(mode, slot, lora, key) if is_pit_arm(a)), key=method_order)


def _role(claim: Claim, arm: str, ref: str, mode: str, design: Design, primary_cell: bool) -> str:
    main = claim.role == "primary" and primary_cell and arm == design.primary.get(mode)
    return "primary" if main and ref == primary_ref(claim, mode, design) else "secondary"


def main_cells(claim: Claim, index: Index, design: Design, mode: str) -> list[Cell]:
    """Cells of a claim in the main slots: every PIT arm against TT (and the primary arm against the matched control
    where the claim's primary reference is it), per LoRA task, plus the pooled cell of a `pool` claim."""
    out = []
    for slot in index.slots(mode, "main"):
        tasks = index.tasks(mode, slot, claim.key)
        pooled = claim.pool and len(tasks) > 1
        for task in ([POOLED] if pooled else []) + tasks:
            arms = _arms(index, mode, slot, task, claim.key) or [design.primary.get(mode, "pit")]
            ref = primary_ref(claim, mode, design)
            primary_cell = task == POOLED or not pooled
            pairs = [(a, "tt") for a in arms]
            if ref != "tt":
                pairs = [(design.primary.get(mode, "pit"), ref)] + pairs
                if claim.key == "val_loss" and primary_cell:
                    pairs.append((design.primary.get(mode, "pit"), f"slope:{ref}"))
            for arm, r in pairs:
                kind = "slope" if r.startswith("slope:") else "paired"
                r = r.removeprefix("slope:")
                role = "secondary" if kind == "slope" else _role(claim, arm, r, mode, design, primary_cell)
                out.append(Cell(mode, slot, task, arm, r, role, kind))
    return out


def sweep_cells(claim: Claim, index: Index, design: Design, mode: str) -> list[Cell]:
    """Cells of a stability claim: per sweep group one `group` row per PIT arm (the primary arm's is primary), and
    for scope `sweep` one row per learning rate and arm (secondary)."""
    out = []
    for group in index.slots(mode, "groups"):
        slots = index.group_slots(mode, group)
        arms = sorted({a for s in slots for a in index.runs(mode, s, "", claim.key) if is_pit_arm(a)}, key=method_order)
        for arm in arms or [design.primary.get(mode, "pit")]:
            out.append(Cell(mode, group, "", arm, "tt", _role(claim, arm, "tt", mode, design, True), "group"))
        if claim.scope == "sweep":
            for slot in slots:
                kind = "fisher" if claim.binary else "paired"
                out += [
                    Cell(mode, slot, "", a, "tt", "secondary", kind) for a in _arms(index, mode, slot, "", claim.key)
                ]
    return out


def cells(claim: Claim, index: Index, design: Design) -> list[Cell]:
    out = []
    for mode in claim.modes:
        out += (
            main_cells(claim, index, design, mode) if claim.scope == "main" else sweep_cells(claim, index, design, mode)
        )
    return out


# ---- per-seed values of a cell -------------------------------------------------------------------------------------
def outcome_values(claim: Claim, index: Index, mode: str, slot: str, lora: str, arm: str) -> dict:
    """seed -> an arm's value of the claim's metric; for the spike rows only the runs that trained their whole length
    (a run that diverged has its divergence as its outcome, counted by the divergence rows, not a spike count)."""
    values = index.runs(mode, slot, lora, claim.key).get(arm, {})
    if claim.key != "spikes":
        return values
    diverged = index.runs(mode, slot, "", "diverged").get(arm, {})
    return {s: math.nan if diverged.get(s) == 1 else v for s, v in values.items()}


def cell_values(claim: Claim, index: Index, cell: Cell) -> tuple[dict, dict, int, str]:
    """(arm seed -> value, reference seed -> value, seeds dropped, a note) of a paired, group or slope cell. Dropped:
    seeds that ran both arms but leave no finite pair (a diverged run, an undefined measure)."""
    if cell.kind == "group":
        return group_values(claim, index, cell)
    if cell.kind == "slope":
        return slope_values(index, cell)
    if cell.lora == POOLED:
        tasks = index.tasks(cell.mode, cell.slot, claim.key)
        runs = [index.runs(cell.mode, cell.slot, t, claim.key) for t in tasks]
        a, r = (_pooled([x.get(arm, {}) for x in runs]) for arm in (cell.arm, cell.ref))
    else:
        a, r = (outcome_values(claim, index, cell.mode, cell.slot, cell.lora, arm) for arm in (cell.arm, cell.ref))
    both = set(a) & set(r)
    n = len(set(finite(a)) & set(finite(r)))
    return a, r, len(both) - n, ""


def _pooled(per_task: list[dict]) -> dict:
    """seed -> mean over the tasks (NaN unless every task has a finite value)."""
    seeds = set.intersection(*(set(d) for d in per_task)) if per_task else set()
    return {s: float(np.mean([d[s] for d in per_task])) for s in seeds}


def group_values(claim: Claim, index: Index, cell: Cell) -> tuple[dict, dict, int, str]:
    """Per seed at which both arms ran every learning rate of the group (a seed missing a rate is dropped: a count
    over fewer rates is not the same measure): count = diverged rates; sum = spikes over the rates where both are
    defined; range = max - min of the validation loss over the rates where both are finite (at least two). NaN for a
    seed where the measure is undefined (dropped)."""
    slots = index.group_slots(cell.mode, cell.slot)
    ran = {s: index.runs(cell.mode, s, "", "diverged") for s in slots}
    arms = (cell.arm, cell.ref)
    vals = {s: {arm: outcome_values(claim, index, cell.mode, s, "", arm) for arm in arms} for s in slots}
    a, r, left_out, partial = {}, {}, 0, 0
    for seed in sorted(set().union(*(set(ran[s].get(cell.arm, {})) for s in slots))):
        rates = [s for s in slots if seed in ran[s].get(cell.arm, {}) and seed in ran[s].get(cell.ref, {})]
        if len(rates) < len(slots):
            a[seed], r[seed], partial = math.nan, math.nan, partial + 1
            continue
        pairs = [(vals[s].get(cell.arm, {}).get(seed, math.nan), vals[s].get(cell.ref, {}).get(seed, math.nan))
                 for s in rates]  # fmt: skip
        usable = [(x, y) for x, y in pairs if math.isfinite(x) and math.isfinite(y)]
        left_out += len(pairs) - len(usable)
        if (claim.measure == "range" and len(usable) < 2) or (claim.measure != "count" and not usable):
            a[seed], r[seed] = math.nan, math.nan
            continue
        xs, ys = np.array(usable).T
        a[seed], r[seed] = {"count": (xs.sum(), ys.sum()), "sum": (xs.sum(), ys.sum()),
                            "range": (np.ptp(xs), np.ptp(ys))}[claim.measure]  # fmt: skip
    notes = [f"{left_out} (seed, rate) pairs left out: a run diverged or the measure is undefined" if left_out else "",
             f"{partial} seeds without every rate of the group left out" if partial else ""]  # fmt: skip
    return a, r, sum(not math.isfinite(v) for v in a.values()), "; ".join(x for x in notes if x)


def run_slope(index: Index, cell: Cell, arm: str, seed: int) -> float:
    """One run's least-squares slope (nats per 100 steps) of its finite validation losses at steps >= its own
    tail_start; NaN with fewer than 3 such points or no tail."""
    tail = index.runs(cell.mode, cell.slot, "", "tail_start").get(arm, {}).get(seed, math.nan)
    points = []
    for key, by_arm in index.values.items():
        if key[:3] == (cell.mode, cell.slot, "") and key[3].startswith("val_loss@"):
            step, value = int(key[3].split("@")[1]), by_arm.get(arm, {}).get(seed, math.nan)
            if math.isfinite(tail) and step >= tail and math.isfinite(value) and seed not in index.dropped:
                points.append((step, value))
    if len(points) < 3:
        return math.nan
    steps, values = np.array(sorted(points)).T
    return 100 * float(np.polyfit(steps, values, 1)[0])


def slope_values(index: Index, cell: Cell) -> tuple[dict, dict, int, str]:
    """Per seed the validation loss's slope over each run's constant-rate tail (`run_slope`), of the arm and of the
    reference: their difference is the gap's slope. Seeds of both arms without a slope are dropped."""
    runs = index.runs(cell.mode, cell.slot, "", "tail_start")
    a = {s: run_slope(index, cell, cell.arm, s) for s in runs.get(cell.arm, {})}
    r = {s: run_slope(index, cell, cell.ref, s) for s in runs.get(cell.ref, {})}
    both = set(a) & set(r)
    dropped = len(both) - len(set(finite(a)) & set(finite(r)))
    note = "" if finite(a) else "no constant-rate tail with 3 validation points"
    return a, r, dropped, note


# ---- one row ------------------------------------------------------------------------------------------------------
def degenerate(claim: Claim, index: Index, mode: str, slot: str, arms: list[str]) -> str:
    """'' or '<arm>: <why>' for the first of `arms` that learned no more than its interface can express without
    context: no finite validation loss at any seed (diverged), a mean validation loss at or above its context-free
    bound or at or above ln V - NEAR_UNIFORM, or (early rise) a first loss at or above ln V - NEAR_UNIFORM. The bound
    is `span_entropy` (the best unigram fit within the span of the run's output matrix, diagnostics.json; for a
    frozen Z the span of Z), and the unigram entropy of the validation split for runs diagnosed without it."""
    for arm in arms:
        runs = index.runs(mode, slot, "", "val_loss").get(arm, {})
        val = _mean(runs)
        entropy, bound_name = context_free_bound(index, mode, slot, arm)
        log_v = _mean(index.runs(mode, slot, "", "log_vocab").get(arm, {}))
        first = _mean(index.runs(mode, slot, "", "first_loss").get(arm, {}))
        if runs and not finite(runs):
            return f"{arm}: no finite validation loss at any of its {len(runs)} seeds (diverged)"
        if math.isfinite(val) and math.isfinite(entropy) and val >= entropy:
            return f"{arm}: validation loss {val:.3f} >= {bound_name} {entropy:.3f}"
        if math.isfinite(val) and math.isfinite(log_v) and val >= log_v - NEAR_UNIFORM:
            return f"{arm}: validation loss {val:.3f} >= ln V - {NEAR_UNIFORM} = {log_v - NEAR_UNIFORM:.3f}"
        if claim.key == "early_rise_excess" and math.isfinite(first) and first >= log_v - NEAR_UNIFORM:
            return (
                f"{arm}: starts at loss {first:.3f} >= ln V - {NEAR_UNIFORM} = {log_v - NEAR_UNIFORM:.3f}: a curve "
                "that starts at the uniform loss cannot rise"
            )
    return ""


def context_free_bound(index: Index, mode: str, slot: str, arm: str) -> tuple[float, str]:
    """(the loss of the best context-free model the arm's interface can express, its name): the mean `span_entropy`
    where every finite run of the arm has one, else the mean unigram entropy of the validation split (which
    span_entropy is never below)."""
    span = index.runs(mode, slot, "", "span_entropy").get(arm, {})
    runs = index.runs(mode, slot, "", "val_loss").get(arm, {})
    if finite(runs) and set(finite(span)) >= set(finite(runs)):
        return _mean(span), "its context-free bound (the unigram fit within the span of its output matrix)"
    entropy = _mean(index.runs(mode, slot, "", "unigram_entropy").get(arm, {}))
    return entropy, "the unigram entropy of its validation split"


def resolution(claim: Claim, index: Index, cell: Cell) -> str:
    """'' or why a score row cannot show the paper's effect: one problem is worth more than PAPER_SCORE_EFFECT."""
    key = "indomain_problems" if claim.key == "indomain_score" else "transfer_problems"
    runs = index.runs(cell.mode, cell.slot, cell.lora, key)
    counts = [v for arm in (cell.arm, cell.ref) for v in finite(runs.get(arm, {})).values()]
    n = min(counts, default=math.nan)  # the coarsest evaluation set of the row
    if not math.isfinite(n) or n <= 0 or 100 / n <= PAPER_SCORE_EFFECT:
        return ""
    return (
        f"not testable at this resolution: {n:.0f} problems, one problem = {100 / n:.2g} points, more than the paper's "
        f"largest difference ({PAPER_SCORE_EFFECT} points)"
    )


def precheck(claim: Claim, cell: Cell, a: dict, r: dict, index: Index) -> str:
    """The verdict of a row that gets no test ('' when it is tested)."""
    if claim.evidence == "construction_both":
        return "not testable: PIT and exact TT both read 0 by construction under this reading"
    if not a:
        return f"not measured: {claim.metric} of {cell.arm}"
    if claim.evidence == "construction":
        return "holds by construction" if finite(a) else f"not measured: {claim.metric} of {cell.arm}"
    if not r:
        return f"not measured: {claim.metric} of {cell.ref}"
    if claim.resolution and resolution(claim, index, cell):
        return resolution(claim, index, cell)
    fisher = cell.kind == "fisher"
    n = min(len(a), len(r)) if fisher else len(set(finite(a)) & set(finite(r)))
    if n == 0:
        return f"not testable: no seed has finite values of both {cell.arm} and {cell.ref}"
    constant = set(finite(a).values()) | set(finite(r).values())
    if len(constant) == 1:
        return f"not testable: every seed of both arms reads {constant.pop():g}"
    if (len(a) == len(r) == 1) if fisher else n == 1:
        return "n = 1, no interval"
    if claim.premise and all(v <= 0 for v in finite(r).values()):
        return f"not testable: {claim.premise}"
    return ""


def _base(claim: Claim, cell: Cell, index: Index) -> dict:
    lr = _mean(index.runs(cell.mode, cell.slot, "", "lr").get("tt", {})) if cell.kind != "group" else math.nan
    return {
        "claim": claim.id, "group": claim.group, "role": cell.role, "paper": f'"{claim.quote}" ({claim.where})',
        "metric": claim.metric if cell.kind != "slope" else "gap slope over the tail (nats / 100 steps)",
        "direction": f"PIT - ref {'<' if claim.direction < 0 else '>'} 0", "test": _test_name(cell), "mode": cell.mode,
        "slot": cell.slot, "lr": lr, "lora": cell.lora, "arm": cell.arm, "ref": cell.ref, "kind": cell.kind,
    }  # fmt: skip


def _test_name(cell: Cell) -> str:
    return "Fisher exact" if cell.kind == "fisher" else "exact sign-flip"


def fisher_row(claim: Claim, index: Index, cell: Cell) -> dict:
    """A per-rate divergence row: k / n diverged runs of the arm against the reference's, Fisher's exact p."""
    runs = index.runs(cell.mode, cell.slot, "", claim.key)
    a, r = finite(runs.get(cell.arm, {})), finite(runs.get(cell.ref, {}))
    verdict = precheck(claim, cell, a, r, index)
    ka, kr = sum(a.values()), sum(r.values())
    ra, rr = (ka / len(a) if a else math.nan), (kr / len(r) if r else math.nan)
    p = fisher_p(int(ka), len(a), int(kr), len(r)) if not verdict else math.nan
    return {**_base(claim, cell, index), "n": min(len(a), len(r)), "dropped": 0, "arm_mean": ra,
            "arm_ci": math.nan, "ref_mean": rr, "ref_ci": math.nan, "diff": ra - rr, "diff_ci_low": math.nan,
            "diff_ci_high": math.nan, "p": p, "verdict": verdict or "pending",
            "note": f"{ka:.0f} of {len(a)} {cell.arm} and {kr:.0f} of {len(r)} {cell.ref} runs diverged"}  # fmt: skip


def claim_row(claim: Claim, index: Index, cell: Cell, alpha: float) -> dict:
    """One row before the family's Holm adjustment (`verdict` final for untested rows, `pending` for tested ones)."""
    if cell.kind == "fisher":
        return fisher_row(claim, index, cell)
    a, r, dropped, note = cell_values(claim, index, cell)
    verdict = precheck(claim, cell, a, r, index)
    diffs = paired(a, r)
    test = sign_flip(diffs, alpha)
    arm_mean, arm_ci = t_interval(list(finite(a).values()))
    ref_mean, ref_ci = t_interval(list(finite(r).values()))
    why = ""
    if not verdict and claim.degenerate_rule and cell.kind == "paired":
        why = degenerate(claim, index, cell.mode, cell.slot, [cell.arm, cell.ref])
    return {
        **_base(claim, cell, index), "n": test.n, "dropped": dropped, "arm_mean": arm_mean, "arm_ci": arm_ci,
        "ref_mean": ref_mean, "ref_ci": ref_ci, "diff": test.mean, "diff_ci_low": test.low, "diff_ci_high": test.high,
        "p": test.p if not verdict else math.nan, "note": note,
        "verdict": verdict or (f"degenerate: {why}" if why else "pending"),
    }  # fmt: skip


# ---- controls -----------------------------------------------------------------------------------------------------
def same_start_control(claim: Claim, cell: Cell, design: Design) -> str:
    """The non-PIT arm that starts from the same function as the row's arm: in teacher mode the declared matched
    control, for the primary arm's paired rows against TT (the paper's comparison, conversion included); '' else."""
    primary = design.primary.get("teacher", PRIMARY_ARM)
    teacher_tt = cell.mode == "teacher" and cell.ref == "tt" and cell.arm == primary and cell.kind == "paired"
    return design.matched if teacher_tt and claim.evidence == "test" and design.matched else ""


def control_stats(prefix: str, claim: Claim, index: Index, cell: Cell, control: str, alpha: float) -> dict:
    """A control arm C in a row's cell: C - ref (does a non-PIT arm show the effect?) and arm - C (does PIT go beyond
    it?), exact sign-flip; `<prefix>_decides`: C has a finite value at every seed of the row (a control with fewer
    seeds than the row is descriptive: it is reported and never sets the verdict)."""
    other = Cell(cell.mode, cell.slot, cell.lora, control, cell.ref, cell.role, "paired")
    c, r, _, _ = cell_values(claim, index, other)
    a = cell_values(claim, index, cell)[0]
    ct, ac = sign_flip(paired(c, r), alpha), sign_flip(paired(a, c), alpha)
    seeds = set(finite(a)) & set(finite(r))
    return {f"{prefix}_n": ct.n, f"{prefix}_diff": ct.mean, f"{prefix}_ci_low": ct.low, f"{prefix}_ci_high": ct.high,
            f"{prefix}_p": ct.p, f"arm_{prefix}_diff": ac.mean, f"arm_{prefix}_p": ac.p,
            f"{prefix}_decides": bool(seeds) and seeds <= set(finite(c))}  # fmt: skip


def matched_columns(claim: Claim, index: Index, cell: Cell, design: Design) -> dict:
    """The matched-start control of a teacher-mode row PIT - TT (`same_start_control`): `matched` (its name) and
    its `control_stats` ({} for every other row)."""
    control = same_start_control(claim, cell, design)
    if not control:
        return {}
    return {"matched": control} | control_stats("matched", claim, index, cell, control, design.alpha)


def control_columns(claim: Claim, index: Index, cell: Cell, alpha: float) -> dict:
    """The untied control of a consistency claim (`control_stats`), and whether it is valid: measurably untied (mean
    polar cosine distance of E and W_out^T >= CONTROL_MIN_POLAR)."""
    polar = _mean(index.runs(cell.mode, cell.slot, "", "polar_cosine").get("untied", {}))
    out = control_stats("untied", claim, index, cell, "untied", alpha)
    return out | {"untied_polar": polar, "untied_valid": math.isfinite(polar) and polar >= CONTROL_MIN_POLAR}


def arm_control_columns(claim: Claim, index: Index, cell: Cell, alpha: float) -> dict:
    """A claim's own control arm (CONTROL_ARMS: the early rise's no-re-warm TT) against the row's reference: `control`,
    `control_diff` and its exact interval, where that arm ran in the cell ({} elsewhere); descriptive."""
    control = CONTROL_ARMS.get(claim.key, "")
    runs = index.runs(cell.mode, cell.slot, cell.lora, claim.key)
    if control not in runs or cell.ref not in runs:
        return {}
    c = sign_flip(paired(runs[control], runs[cell.ref]), alpha)
    return {"control": control, "control_diff": c.mean, "control_ci_low": c.low, "control_ci_high": c.high}


def control_verdict(claim: Claim, row: dict, alpha: float) -> tuple[str, str]:
    """(verdict, note) of a supported row that has a control (module docstring): the matched-start control where the
    row has one, else the untied control. `not specific to PIT` where the control decides (it has the row's seeds;
    the untied one is also measurably untied), shows the same effect against the reference (p <= alpha, same sign),
    and PIT does not go beyond it (PIT - control not significant in the claim's direction)."""
    prefix = "matched" if isinstance(row.get("matched"), str) and row["matched"] else "untied"
    name = row["matched"] if prefix == "matched" else "untied"
    label = f"the matched-start control {name}" if prefix == "matched" else "the untied control"
    if not math.isfinite(row.get(f"{prefix}_p", math.nan)):
        return "supported", f"{label} is not measured in this cell"
    if not row[f"{prefix}_decides"]:
        return "supported", (
            f"{label} is descriptive: it lacks seeds of this row ({int(row[f'{prefix}_n'])} paired seeds with "
            f"{row['ref']}, the row {int(row['n'])})"
        )
    if prefix == "untied" and not row["untied_valid"]:
        return "supported", (
            f"no valid untied control here: its E and W_out^T stay nearly tied (polar cosine distance "
            f"{row['untied_polar']:.3g} < {CONTROL_MIN_POLAR})"
        )
    same = (row[f"{prefix}_diff"] > 0) == (row["diff"] > 0) and row[f"{prefix}_p"] <= alpha
    beyond = row[f"arm_{prefix}_p"] <= alpha and (row[f"arm_{prefix}_diff"] > 0) == (claim.direction > 0)
    versus = f"PIT - {name} = {row[f'arm_{prefix}_diff']:.3g} (p = {row[f'arm_{prefix}_p']:.2g})"
    if same and not beyond:
        effect = (f"{name} - {row['ref']} = {row[f'{prefix}_diff']:.3g} [{row[f'{prefix}_ci_low']:.3g}, "
                  f"{row[f'{prefix}_ci_high']:.3g}]")  # fmt: skip
        return f"not specific to PIT: {effect} shows the same effect, and {versus}", ""
    return "supported", f"beyond {label}: {versus}"


# ---- a family: Holm, verdicts, intervals at the family's level, leave-one-seed-out -------------------------------
TESTED = ("pending",)  # a degenerate row keeps its verdict and leaves the family (its p is still reported)


def is_tested(row: dict) -> bool:
    return row["verdict"].startswith(TESTED) and math.isfinite(row["p"])


def decide(claim: Claim, row: dict, alpha: float) -> str:
    """The verdict of a tested row from its Holm-adjusted p (module docstring); degenerate rows keep theirs."""
    if not row["verdict"].startswith("pending"):
        return row["verdict"]
    if row["p_holm"] > alpha:
        return "inconclusive"
    if (row["diff"] > 0) != (claim.direction > 0):
        return "contradicted"
    if claim.control or row.get("matched"):
        verdict, note = control_verdict(claim, row, alpha)
        row["note"] = "; ".join(x for x in (row["note"], note) if x)
        return verdict
    return "supported"


def family_rows(claim: Claim, index: Index, family: list[Cell], design: Design) -> list[dict]:
    """The rows of one family (a claim's primary or secondary cells), Holm-adjusted and decided."""
    rows = [claim_row(claim, index, c, design.alpha) for c in family]
    for row, c in zip(rows, family):
        if c.kind != "paired":
            continue
        row.update(matched_columns(claim, index, c, design))
        if claim.control:
            row.update(control_columns(claim, index, c, design.alpha))
        row.update(arm_control_columns(claim, index, c, design.alpha))  # the early rise's no-re-warm control
    for row in rows:
        row["tested"] = is_tested(row)
    m = sum(r["tested"] for r in rows)
    for row, p in zip(rows, holm([r["p"] if r["tested"] else math.nan for r in rows])):
        row.update({"family": m, "p_holm": p})
        row["verdict"] = decide(claim, row, design.alpha)
    return rows


def add_family_levels(claim: Claim, index: Index, family: list[Cell], rows: list[dict], design: Design) -> None:
    """The interval at the family's Bonferroni level alpha / m, and for inconclusive primary rows the minimal
    detectable effect at that level."""
    for row, cell in zip(rows, family):
        row.update({"adj_ci_low": math.nan, "adj_ci_high": math.nan, "mde": math.nan})
        if cell.kind == "fisher" or not row["tested"]:
            continue
        a, r, _, _ = cell_values(claim, index, cell)
        diffs = paired(a, r)
        level = design.alpha / max(1, row["family"])
        adj = sign_flip(diffs, level)
        row.update({"adj_ci_low": adj.low, "adj_ci_high": adj.high})
        if row["verdict"] == "inconclusive" and row["role"] == "primary":
            row["mde"] = min_detectable(len(diffs), float(np.std(diffs, ddof=1)), level, design.power)


def verdict_kind(verdict: str) -> str:
    """The kind of a row's verdict (its text up to the reason)."""
    return next((k for k in KIND_ORDER if verdict.startswith(k)), verdict)


DECIDED = ("supported", "contradicted", "not specific to PIT")


def fragility(claim: Claim, index: Index, family: list[Cell], rows: list[dict], design: Design) -> None:
    """`fragile` of every decided row: the first seed whose removal from the family changes its verdict's kind
    ('no' when none does; '-' for rows that are not decided); `two_drops` the same for the first pair of seeds, in
    order (a row fragile to one seed is fragile to two: the pair is that seed and the first other)."""
    decided = [i for i, r in enumerate(rows) if verdict_kind(r["verdict"]) in DECIDED]
    for r in rows:
        r["fragile"] = r["two_drops"] = "-"  # not decided: nothing to be fragile
    if not decided:
        return
    for i in decided:
        rows[i]["fragile"] = rows[i]["two_drops"] = "no"
    seeds = index.seeds()
    for drop in [(s,) for s in seeds] + list(itertools.combinations(seeds, 2)):
        column = "fragile" if len(drop) == 1 else "two_drops"
        open_rows = [i for i in decided if rows[i][column] == "no"]
        if not open_rows:
            continue
        view = index
        for seed in drop:
            view = view.without(seed)
        again = family_rows(claim, view, family, design)
        for i in open_rows:
            kind = verdict_kind(again[i]["verdict"])
            if kind != verdict_kind(rows[i]["verdict"]):
                which = f"seed {drop[0]}" if len(drop) == 1 else f"seeds {drop[0]} and {drop[1]}"
                rows[i][column] = f"yes: without {which} it is {kind}"


def claim_rows(claim: Claim, index: Index, design: Design) -> list[dict]:
    """Every row of a claim: its primary family, then its secondary family, each adjusted on its own."""
    every = cells(claim, index, design)
    out = []
    for role in ("primary", "secondary"):
        family = [c for c in every if c.role == role]
        rows = family_rows(claim, index, family, design)
        add_family_levels(claim, index, family, rows, design)
        fragility(claim, index, family, rows, design)
        out += rows
    settle(claim, out, design.alpha)
    return out


UNSETTLED = ", not settled at this budget"


def settle(claim: Claim, rows: list[dict], alpha: float) -> None:
    """A decided loss row whose gap still closes is decided at this budget only: where the row's slope row (the
    gap's slope over the constant-rate tail, same cell and arms) has exact p <= alpha and the sign opposite to the
    gap, the verdict reads '<kind>, not settled at this budget: ...' (its kind unchanged)."""
    slopes = {(r["mode"], r["slot"], r["arm"], r["ref"]): r for r in rows if r["kind"] == "slope"}
    for row in rows:
        slope = slopes.get((row["mode"], row["slot"], row["arm"], row["ref"]))
        if row["kind"] != "paired" or slope is None or verdict_kind(row["verdict"]) not in DECIDED:
            continue
        closing = math.isfinite(slope["p"]) and slope["p"] <= alpha and (slope["diff"] > 0) != (row["diff"] > 0)
        if closing:
            kind = verdict_kind(row["verdict"])
            row["verdict"] = (
                f"{kind}{UNSETTLED}: the gap moves {slope['diff']:.3g} nats per 100 steps over the constant-rate tail "
                f"[{slope['diff_ci_low']:.3g}, {slope['diff_ci_high']:.3g}], exact p = {slope['p']:.2g}"
                + row["verdict"].removeprefix(kind)
            )


def evidence(row: dict) -> str:
    """What kind of evidence a row is."""
    kind = verdict_kind(row["verdict"])
    if kind == "holds by construction":
        return "construction"
    if kind in ("not measured", "not testable", "n = 1"):
        return "none"
    where = f"Holm over the claim's {row['family']} {row['role']} rows"
    if kind == "degenerate":
        return f"degenerate model ({row['n']} seeds; its p is reported, not in the claim's Holm family)"
    if row["test"] == "Fisher exact":
        return f"Fisher exact test, {row['n']} runs per arm or more, {where}"
    return f"exact sign-flip test, {row['n']} paired seeds, {where}"


def about(claim: Claim, row: dict, design: Design) -> str:
    """What a row's evidence is about (docs/study.md): PIT's construction (a property true by definition), PIT's
    training from the same function as its reference (teacher mode against the matched control), PIT's training with
    its conversion of the teacher (teacher mode against TT), or PIT's training from scratch in its construction (a
    frozen random Z, T = I at the start)."""
    if claim.evidence != "test":
        return "construction"
    if row["mode"] == "teacher" and design.matched and row["ref"] == design.matched:
        return "training (same start)"
    if row["mode"] == "teacher":
        return "training + conversion"
    return "training from scratch (frozen random Z)" if row["arm"] == PRIMARY_ARM else "training from scratch"


COLUMNS = [
    "claim", "group", "role", "paper", "metric", "direction", "kind", "test", "mode", "slot", "lr", "lora", "arm",
    "ref", "n",
    "dropped", "arm_mean", "arm_ci", "ref_mean", "ref_ci", "diff", "diff_ci_low", "diff_ci_high", "p", "family",
    "p_holm", "adj_ci_low", "adj_ci_high", "mde", "untied_n", "untied_diff", "untied_ci_low", "untied_ci_high",
    "untied_p", "arm_untied_diff", "arm_untied_p", "untied_polar", "untied_valid", "untied_decides", "matched",
    "matched_n", "matched_diff", "matched_ci_low", "matched_ci_high", "matched_p", "arm_matched_diff",
    "arm_matched_p", "matched_decides", "control", "control_diff", "control_ci_low", "control_ci_high", "evidence",
    "about", "verdict", "fragile", "two_drops", "note",
]  # fmt: skip
OPTIONAL = {"control": "control", "matched": "matched"}  # column -> prefix of the columns dropped where it is empty


def claims_from_seeds(seeds: pd.DataFrame, design: Design | None = None) -> pd.DataFrame:
    """The claims table from the per-seed table (module docstring)."""
    design = design or Design()
    index = Index(seeds)
    rows = [r for c in CLAIMS for r in claim_rows(c, index, design)]
    for r in rows:
        r["evidence"] = evidence(r)
        r["about"] = about(CLAIM_BY_ID[r["claim"]], r, design)
        del r["tested"]
    table = pd.DataFrame(rows).reindex(columns=COLUMNS)
    for column, prefix in OPTIONAL.items():  # no row has that control (no tt-norewarm, no matched control)
        if len(table) and not table[column].notna().any():
            drop = [c for c in table.columns if c == column or c.startswith(f"{prefix}_") or c == f"arm_{prefix}_diff"
                    or c == f"arm_{prefix}_p"]  # fmt: skip
            table = table.drop(columns=drop)
    return table


def claims_table(results, design: Design | None = None) -> pd.DataFrame:
    """The claims table of the runs under `results` (pretrain/, diagnostics/, posttrain/)."""
    from pit.reporting.per_seed import per_seed_table

    return claims_from_seeds(per_seed_table(results), design)


# ---- sentences from the numbers: the summary, the reading, the notes ----------------------------------------------
KIND_ORDER = ["holds by construction", "supported", "contradicted", "not specific to PIT", "inconclusive",
              "degenerate", "n = 1", "not testable", "not measured"]  # fmt: skip
GENERIC_READINGS = {
    "holds by construction": "true of PIT by definition: it confirms the implementation, not a hypothesis",
    "not measured": "the runs that measure it are missing",
}


def overall(kinds: list[str]) -> str:
    """One verdict for a claim from its primary rows' kinds."""
    if not kinds:
        return "not measured"
    if all(k == "holds by construction" for k in kinds):
        return "holds by construction"
    if "supported" in kinds and "contradicted" in kinds:
        return "mixed"
    for kind in ("supported", "contradicted", "not specific to PIT", "inconclusive", "degenerate", "n = 1"):
        if kind in kinds:
            return kind
    return "not testable" if "not testable" in kinds else "not measured"


def _g(x: float) -> str:
    return "inf" if x == math.inf else "-inf" if x == -math.inf else f"{x:.3g}"


def where_text(row) -> str:
    """`mode slot[, LoRA task][, lr x]` of a row."""
    parts = [row["mode"], row["slot"]]
    if isinstance(row["lora"], str) and row["lora"]:
        parts.append("mean over the LoRA tasks" if row["lora"] == POOLED else f"LoRA {row['lora']}")
    if isinstance(row["lr"], float) and math.isfinite(row["lr"]) and row["claim"].startswith("stability"):
        parts.append(f"lr {row['lr']:g}")
    return " ".join(parts[:2]) + "".join(f", {p}" for p in parts[2:])


def row_sentence(row) -> str:
    """One row's result in words, every number from the row: the effect, both intervals, p, n, drops, and what the
    verdict rests on (fragility, the minimal detectable effect, the reason a row is not tested)."""
    kind = verdict_kind(row["verdict"])
    head = f"{row['arm']} - {row['ref']} ({where_text(row)})"
    if kind == "n = 1":
        return f"{head} = {_g(row['diff'])} ({row['verdict']})" if math.isfinite(row["diff"]) else f"{head}: n = 1"
    if kind in ("not testable", "not measured", "holds by construction"):
        value = f" = {_g(row['diff'])}, n = {int(row['n'])}" if math.isfinite(row["diff"]) else ""
        return f"{head}{value}: {row['verdict']}"
    if row["test"] == "Fisher exact":
        text = f"{head}: {row['note']}; Fisher p = {row['p']:.2g} (Holm over {row['family']}: {row['p_holm']:.2g})"
    elif kind == "degenerate":  # not in the claim's family: no family-level interval, no Holm
        text = (
            f"{head} = {_g(row['diff'])}, exact 95% [{_g(row['diff_ci_low'])}, {_g(row['diff_ci_high'])}]; exact p = "
            f"{row['p']:.2g} (not in the claim's Holm family); n = {int(row['n'])}"
        )
    else:
        text = (
            f"{head} = {_g(row['diff'])}, exact 95% [{_g(row['diff_ci_low'])}, {_g(row['diff_ci_high'])}], at the "
            f"family's level ({row['family']} rows) [{_g(row['adj_ci_low'])}, {_g(row['adj_ci_high'])}]; exact p = "
            f"{row['p']:.2g}, Holm {row['p_holm']:.2g}; n = {int(row['n'])}"
        )
        dropped = int(row["dropped"])
        text += f", {dropped} seed{'s' * (dropped != 1)} dropped (diverged or undefined)" if dropped else ""
    if kind == "degenerate":
        text += f"; {row['verdict']}"
    if kind == "inconclusive" and row["role"] == "primary":
        mde = row["mde"]
        text += (
            f"; with {int(row['n'])} seeds the exact test cannot reach the family's level: no effect is detectable"
            if mde == math.inf
            else f"; the smallest effect this design detects with 80% power: {_g(mde)}"
            if math.isfinite(mde)
            else ""
        )
    if isinstance(row["fragile"], str) and row["fragile"] not in ("", "-"):
        text += "; robust to dropping any one seed" if row["fragile"] == "no" else f"; fragile ({row['fragile']})"
    two = row.get("two_drops") if hasattr(row, "get") else None
    if isinstance(two, str) and two not in ("", "-"):
        text += "; survives every two-seed drop" if two == "no" else f"; not every two-seed drop ({two})"
    if UNSETTLED in row["verdict"]:
        text += f"; {row['verdict'].removeprefix(kind + ', ').split('; not specific')[0]}"
    if kind == "not specific to PIT":
        text += f"; not specific to PIT: {row['verdict'].split('not specific to PIT: ', 1)[1]}"
    about = row.get("about") if hasattr(row, "get") else None
    if kind in DECIDED and isinstance(about, str) and about:
        text += f"; evidence about PIT's {about}"
    if isinstance(row["note"], str) and row["note"] and row["test"] != "Fisher exact":
        text += f"; {row['note']}"
    return text


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per claim: its verdict (from its primary rows), whether it is fragile, the primary rows in words and the
    secondary rows counted by kind."""
    out = []
    for claim in CLAIMS:
        rows = table[table["claim"] == claim.id]
        if rows.empty:
            continue
        prim = rows[rows["role"] == "primary"]
        if claim.role == "secondary":  # a secondary metric: its rows of the primary arms against TT, in words
            prim = rows[[a == PRIMARY_ARM and ref == "tt" for a, ref in zip(rows["arm"], rows["ref"])]]
        kinds = [verdict_kind(v) for v in prim["verdict"]]
        kind = overall(kinds) if claim.role == "primary" else "exploratory"
        fragile = any(isinstance(f, str) and f.startswith("yes") for f in prim["fragile"])
        unsettled = any(UNSETTLED in v for v in prim["verdict"])
        sec = [verdict_kind(v) for v in rows[rows["role"] == "secondary"]["verdict"]]
        counts = ", ".join(f"{k} {sec.count(k)}" for k in KIND_ORDER if k in sec)
        reading = claim.readings.get(kind) or GENERIC_READINGS.get(kind, "")
        out.append({"group": claim.group, "claim": claim.id, "title": claim.title, "where": claim.where,
                    "verdict": kind, "fragile": fragile, "unsettled": unsettled,
                    "primary": [row_sentence(r) for _, r in prim.iterrows()],
                    "secondary": f"secondary rows ({len(sec)}): {counts}" if sec else "",
                    "reading": reading})  # fmt: skip
    return pd.DataFrame(out)


def effect_text(row) -> str:
    """A primary row's effect with its exact 95% interval (or what stands in for it), for the compact table."""
    if not math.isfinite(row["diff"]):
        return "-"
    if row["test"] == "Fisher exact" or not math.isfinite(row["diff_ci_low"]) and int(row["n"]) < 2:
        return _g(row["diff"])
    return f"{_g(row['diff'])} [{_g(row['diff_ci_low'])}, {_g(row['diff_ci_high'])}]"


def compact_markdown(table: pd.DataFrame) -> str:
    """The claims in one table, one line per primary row: claim, row (arm - ref, cell), effect with its exact 95%
    interval, n, the row's verdict, and the claim's verdict on its first line (REPORT.md's claims section opens with
    it; the prose per claim follows)."""
    s = summary(table).set_index("claim")
    head = "| claim | primary row | effect [exact 95%] | n | row verdict | claim verdict |"
    lines = [head, "|---|---|---|---|---|---|"]
    for claim in s.index:
        rows = table[(table["claim"] == claim) & (table["role"] == "primary")]
        if s.loc[claim, "verdict"] == "exploratory" or rows.empty:
            continue
        verdict = s.loc[claim, "verdict"] + (" (fragile)" if s.loc[claim, "fragile"] else "")
        verdict += " (not settled at this budget)" if s.loc[claim, "unsettled"] else ""
        for i, (_, r) in enumerate(rows.iterrows()):
            title = s.loc[claim, "title"] if i == 0 else ""
            lines.append(f"| {title} | {r['arm']} - {r['ref']} ({where_text(r)}) | {effect_text(r)} | {int(r['n'])} "
                         f"| {verdict_kind(r['verdict'])} | {verdict if i == 0 else ''} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def summary_markdown(table: pd.DataFrame) -> str:
    """The summary as Markdown: the compact table (`compact_markdown`), then one bullet per claim, grouped (REPORT.md
    and docs/study.md open with it)."""
    lines = [compact_markdown(table)]
    s = summary(table)
    for group in GROUPS:
        part = s[s["group"] == group]
        if part.empty:
            continue
        lines += [f"**{group.replace('_', ' ').capitalize()}**", ""]
        for r in part.itertuples(index=False):
            tag = (" (fragile)" if r.fragile else "") + (" (not settled at this budget)" if r.unsettled else "")
            if r.verdict == "exploratory":
                label, head = "secondary metric, exploratory", "The primary arm's rows"
            else:
                label, head = f"**{r.verdict}**{tag}", "Primary"
            text = "; ".join(r.primary) if r.primary else "none: the primary arm did not run"
            extra = "".join(f" {x[:1].upper()}{x[1:]}." for x in (r.reading, r.secondary) if x)
            lines.append(f"- {r.title} ({r.where}): {label}. {head}: {text}.{extra}")
        lines.append("")
    return "\n".join(lines).strip() + "\n"


def reading_markdown(table: pd.DataFrame) -> str:
    """The reading of the table, by verdict (docs/study.md): every claim under its verdict with its primary effect;
    every number and count comes from the table."""
    s = summary(table)
    s = s[s["verdict"] != "exploratory"]
    lines = []
    for kind in ["supported", "contradicted", "mixed", "not specific to PIT", "inconclusive", "degenerate",
                 "not testable", "n = 1", "holds by construction", "not measured"]:  # fmt: skip
        part = s[s["verdict"] == kind]
        if part.empty:
            continue
        fragile = int(part["fragile"].sum())
        note = f"; {fragile} of them fragile: one seed fewer changes the verdict" if fragile else ""
        lines.append(f"- **{kind.capitalize()}** ({len(part)} claim{'s' * (len(part) != 1)}{note}):")
        for r in part.itertuples(index=False):
            lines.append(f"  - {r.title}: {'; '.join(r.primary)}.")
    decided = table[(table["role"] == "secondary") & table["verdict"].map(lambda v: verdict_kind(v) in DECIDED)]
    lines.append(
        f"- **Secondary rows** (variants, other cells and metrics; exploratory, Holm within each claim's secondary "
        f"rows): {len(decided)} of {int((table['role'] == 'secondary').sum())} decided; they never set a claim's "
        "verdict."
    )
    return "\n".join(lines) + "\n"


def table_notes(design: Design | None = None) -> list[str]:
    """How each verdict is reached and each metric computed (printed under the Markdown table)."""
    design = design or Design()
    seen = {}
    for c in CLAIMS:
        seen.setdefault(c.metric, c.how)
    primary = ", ".join(f"{m}: `{a}`" for m, a in design.primary.items())
    matched = f"; teacher-mode loss: against `{design.matched}`" if design.matched else ""
    return [
        f"Design, declared before the run: primary rows are the paper's configuration ({primary}; Z frozen, T = I) "
        f"against TT{matched}; every other row is `secondary` (exploratory). Tests: exact sign-flip over paired seeds "
        "(Fisher's exact test for one rate's diverged runs); `diff_ci_*` its exact 95% interval, `adj_ci_*` the "
        f"interval at alpha / m of the row's family (m = `family`); `p_holm`: Holm over the claim's "
        f"primary rows, and separately over its secondary rows, at alpha = {design.alpha}. Verdicts, in the order "
        "they are decided: `holds by construction`; `not testable` / `not measured` / `n = 1, no interval`; "
        f"`degenerate: <arm>: <why>` (validation loss at or above the unigram entropy of its split, within "
        f"{NEAR_UNIFORM} nats of ln V, or no finite loss; not for loss and stability claims, where not learning is the "
        "outcome); `supported` / `contradicted`; `inconclusive` (`mde`: the smallest effect the design detects with "
        f"{design.power:.0%} power at the family's level); `not specific to PIT` where a valid untied control (polar "
        f"cosine distance >= {CONTROL_MIN_POLAR}) shows the same effect. `fragile`: whether dropping one seed from the "
        "family changes a decided verdict. Diverged runs are dropped from loss rows (`dropped`), never imputed.",
        "\n".join(f"- `{metric}`: {how}." for metric, how in seen.items()),
    ]


def read_claims(tables):
    """The claims table (tables/claims.csv) as `pit table claims` wrote it, or None where it did not run."""
    from pathlib import Path

    csv = Path(tables) / "claims.csv"
    if not csv.is_file():
        return None
    table = pd.read_csv(csv, keep_default_na=False, na_values=[""])
    table["lora"] = ["" if pd.isna(x) else x for x in table["lora"]]  # a profile without LoRA: an empty column
    return table
