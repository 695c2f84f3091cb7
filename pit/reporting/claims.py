"""The paper's claims put to the test (`pit table claims`): one row per claim x cell x PIT arm, and a verdict that
says what kind of evidence it is (docs/study.md, "The claims table").

Every number comes from the per-seed table (pit.reporting.per_seed, written beside the claims table as
`<out>_seeds.csv`), so the table can be recomputed from it alone (scripts/check_claims.py). A row compares one PIT arm
with TT in one cell (mode, slot, LoRA task) over the seeds both ran (paired by seed: same data order):

- per arm the mean over seeds and its 95% Student-t half-width; the paired difference arm - TT with its 95% interval,
  its t-test p, the Holm-Bonferroni adjusted p over every tested row of the table, and where n >= 6 the exact
  sign-flip permutation p (pit.reporting.stats);
- the untied control, untied - TT, the same way (and for the early rise the no-re-warm control, tt-norewarm - TT);
- a verdict, decided in this order:
  `holds by construction` (the claim's metric is PIT's construction, e.g. Delta_TI; no test), `not testable: <why>`
  (both arms 0 by construction, every seed reads one constant, the premise is absent), `not measured: <what>`,
  `n = 1, no interval`, `degenerate: <arm>: <why>` (an arm whose validation loss is at or above the unigram entropy
  of its validation split, or within 0.1 nats of ln V; for the early rise also a first loss within 0.1 nats of
  ln V), then on the Holm-adjusted p at 0.05: `supported` / `contradicted` (the paper's side or the other), else
  `inconclusive`; a supported consistency claim whose untied control shows the same effect (untied - TT, p <= 0.05
  unadjusted, same sign) becomes `not specific to PIT: ...`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from pit.reporting.stats import holm, sign_flip_p, t_interval, t_test_p
from pit.reporting.tables import method_order, slot_key

GROUPS = ("interface", "training", "stability", "layerwise", "side_effects", "posttrain")
ALPHA = 0.05  # family-wise level of the Holm-adjusted verdicts
NEAR_UNIFORM = 0.1  # nats: a loss within this of ln V is a model that predicts (almost) nothing
CONTROL_ARMS = {"early_rise_excess": "tt-norewarm"}  # a claim's extra control beside untied


@dataclass(frozen=True)
class Claim:
    """One claim of the paper: its words (`quote`, from `where`), a short `title`, the metric that measures it here
    (`key` in the per-seed table, shown as `metric`, computed as `how`), the modes it speaks of, the sign the paper
    gives to PIT - TT (`direction`), the kind of evidence (`evidence`: test | construction | construction_both),
    whether the untied control can make it `not specific to PIT` (`control`), which slots it reads (`scope`:
    main = the slots that are not sweeps; sweep = every slot of a learning-rate sweep group; group = one row per
    sweep group), and `readings`: the one-sentence reading per overall verdict for the summary."""

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
    degenerate_rule: bool = True  # False where not learning is the outcome measured (divergence, lr sensitivity)
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
    "not specific to PIT": "the untied control, which has no tying at all, shows the same reduction against TT, so "
    "it measures TT's tied lens (layer 0 decodes the input token), not PIT's consistency",
    "supported": "PIT's intermediate layers decode closer to its last layer than TT's, relative to how far the last "
    "layer is from uniform, and the untied control does not share the effect",
}
_SIDE_READ = {
    "inconclusive": "at matched adaptation the updates of PIT and TT change held-out predictions by amounts the seeds "
    "cannot tell apart",
    "not specific to PIT": "the untied control shows the same difference against TT",
}

CLAIMS = [
    Claim("interface_max_delta_ti", "interface", "Pseudo-inverse consistency: Delta_TI", *_CONSISTENT,
          "max Delta_TI", "max over logged steps of ||W_out E - I||_F (metrics.jsonl)", "max_delta_ti", _BOTH, -1,
          "construction", readings={"holds by construction": "W_out E = I is PIT's definition (FP32 rounding ~1e-6); "
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
          "loss increase) does not occur here",
          readings={"not testable": "TT's continued pretraining shows no early loss increase above the batch noise, "
                    "so there is nothing for PIT to be more stable than"}),
    Claim("teacher_val_loss", "training", "Teacher mode: PIT reaches a lower loss (Fig. 4)",
          "PIT performs more stable than TT, and obtained lower loss", "Figure 4 caption; Section 5.4", "val loss",
          "validation loss at the end of continued pretraining (summary.json)", "val_loss", ("teacher",), -1,
          readings={"contradicted": "every PIT arm that converts the teacher ends above TT, which keeps the teacher's "
                    "head as it is"}),
    Claim("scratch_val_loss", "training", "Scratch mode: TT keeps a lower loss (Fig. 3)",
          "TT keep a lower level of loss in the whole process", "Figure 3 caption; Section 5.4", "val loss",
          "validation loss at the end of pretraining (summary.json)", "val_loss", ("scratch",), 1,
          readings={"supported": "the paper's own negative scratch-mode finding: PIT trained from scratch ends above "
                    "TT"}),
    Claim("stability_divergence", "stability", "Fewer diverged runs, per learning rate", *_STABLE, "diverged",
          "1 when the run ends with a non-finite validation loss or one no lower than its first loss, else 0",
          "diverged", ("scratch",), -1, scope="sweep", degenerate_rule=False),
    Claim("stability_spikes", "stability", "Fewer loss spikes, per learning rate", *_STABLE, "loss spikes",
          "episodes of finite steps whose loss exceeds the median of the previous 20 by 5 noise sigmas, after warmup "
          "(pit/analysis/curves.py)", "spikes", ("scratch",), -1, scope="sweep",
          readings={"not testable": "no arm spikes at any learning rate of the sweep"}),
    Claim("stability_lr_sensitivity", "stability", "Less sensitive to the learning rate", *_STABLE,
          "lr sensitivity (nats)", "worst minus best final validation loss over the sweep's learning rates, per seed; "
          "a diverged run counts with the loss of predicting nothing, ln V", "lr_sensitivity", ("scratch",), -1,
          scope="group", degenerate_rule=False),
    Claim("lens_kl_ratio", "layerwise", "Layerwise consistency: lens KL, normalised", *_LAYER, "lens KL ratio",
          "mean over layers l < L of KL(p_L || p_l) / KL(p_L || uniform): 0 = every layer decodes like the last, 1 = "
          "as far off as the uniform distribution (diagnostics.json lens.kl_ratio)", "lens_kl_ratio", _BOTH, -1,
          control=True, readings=_LENS),
    Claim("lens_ce_gap", "layerwise", "Layerwise consistency: lens cross-entropy, normalised", *_LAYER,
          "lens CE gap", "mean over layers l < L of (CE_l - CE_L) / (log2 V - CE_L): the fraction of the last layer's "
          "gain over uniform that layer l lacks (diagnostics.json lens.ce_gap)", "lens_ce_gap", _BOTH, -1,
          control=True, readings=_LENS),
    Claim("side_effect_kl_per_gain", "side_effects", "Side effects per nat of adaptation: KL", *_SIDE,
          "KL per nat of gain", "KL(p_before || p_after) on held-out pretraining text divided by the in-domain gain "
          "(reference NLL before - after) of the same LoRA", "kl_per_gain", _BOTH, -1, control=True,
          readings=_SIDE_READ),
    Claim("side_effect_val_per_gain", "side_effects", "Side effects per nat of adaptation: held-out loss", *_SIDE,
          "val-loss change per nat of gain", "validation loss after - before the LoRA divided by its in-domain gain",
          "val_change_per_gain", _BOTH, -1, control=True, readings=_SIDE_READ),
    Claim("side_effect_kl_matched", "side_effects", "Side effects at matched adaptation: KL on the frontier", *_SIDE,
          "KL at matched gain", "KL interpolated at one in-domain gain shared by every arm of the cell, on each run's "
          "KL-vs-gain curve over the LoRA learning rates (posttrain.frontier_lrs and lora.lr)", "kl_at_matched_gain",
          _BOTH, -1, control=True, readings=_SIDE_READ),
    Claim("teacher_posttrain_gain", "posttrain", "Teacher mode: PIT adapts better in-domain (Table 4)", *_TEACHER,
          "in-domain NLL change", "reference NLL after - before the LoRA on its own task (eval/, base/)",
          "indomain_nll_change", ("teacher",), -1),
    Claim("teacher_transfer_nll", "posttrain", "Teacher mode: PIT transfers better (HumanEval, SVAMP)", *_TEACHER,
          "transfer NLL change", "reference NLL after - before the LoRA on its out-of-domain task (HumanEval after "
          "MBPP, SVAMP after GSM8K)", "transfer_nll_change", ("teacher",), -1),
    Claim("teacher_posttrain_score", "posttrain", "Teacher mode: PIT scores higher in-domain", *_TEACHER,
          "in-domain score (%)", "pass@1 / exact match of the LoRA model on its own task", "indomain_score",
          ("teacher",), 1),
    Claim("teacher_transfer_score", "posttrain", "Teacher mode: PIT scores higher on transfer", *_TEACHER,
          "transfer score (%)", "pass@1 / exact match on the out-of-domain task", "transfer_score", ("teacher",), 1),
    Claim("scratch_posttrain_gain", "posttrain", "Scratch mode: TT adapts slightly better (Table 4)", *_SCRATCH,
          "in-domain NLL change", "reference NLL after - before the LoRA on its own task", "indomain_nll_change",
          ("scratch",), 1),
    Claim("scratch_transfer_nll", "posttrain", "Scratch mode: TT transfers slightly better", *_SCRATCH,
          "transfer NLL change", "reference NLL after - before the LoRA on its out-of-domain task",
          "transfer_nll_change", ("scratch",), 1),
    Claim("scratch_posttrain_score", "posttrain", "Scratch mode: TT scores slightly higher in-domain", *_SCRATCH,
          "in-domain score (%)", "pass@1 / exact match of the LoRA model on its own task", "indomain_score",
          ("scratch",), -1),
    Claim("scratch_transfer_score", "posttrain", "Scratch mode: TT scores slightly higher on transfer", *_SCRATCH,
          "transfer score (%)", "pass@1 / exact match on the out-of-domain task", "transfer_score", ("scratch",), -1),
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
    """The per-seed table as values[(mode, slot, lora, metric)][arm][seed] and each (mode, slot)'s sweep group."""

    def __init__(self, seeds: pd.DataFrame):
        self.values: dict[tuple, dict[str, dict]] = {}
        self.group: dict[tuple[str, str], str] = {}
        for r in seeds.itertuples(index=False):
            cell = self.values.setdefault((r.mode, r.slot, r.lora, r.metric), {})
            cell.setdefault(r.arm, {})[int(r.seed)] = float(r.value)
            self.group.setdefault((r.mode, r.slot), r.group)

    def runs(self, mode: str, slot: str, lora: str, metric: str) -> dict[str, dict]:
        return self.values.get((mode, slot, lora, metric), {})

    def slots(self, mode: str, scope: str) -> list[str]:
        """The slots of a mode a claim of `scope` reads, in size order."""
        slots = {s for (m, s) in self.group if m == mode}
        if scope == "main":
            slots = {s for s in slots if self.group[(mode, s)] == s}
        return sorted(slots, key=slot_key)

    def tasks(self, mode: str, slot: str, metric: str) -> list[str]:
        return sorted({k[2] for k in self.values if k[:2] == (mode, slot) and k[3] == metric})


def cells(claim: Claim, index: Index) -> list[tuple[str, str, str, str]]:
    """(mode, slot, LoRA task, PIT arm) of every row of a claim: every slot of its scope and modes that has the
    metric, every PIT arm measured there (a placeholder `pit` where none is)."""
    out = []
    for mode in claim.modes:
        for slot in index.slots(mode, claim.scope):
            for task in index.tasks(mode, slot, claim.key):
                arms = [a for a in index.runs(mode, slot, task, claim.key) if is_pit_arm(a)]
                out += [(mode, slot, task, arm) for arm in sorted(arms, key=method_order) or ["pit"]]
    return out


# ---- one row ----------------------------------------------------------------------------------------------------
def degenerate(claim: Claim, index: Index, mode: str, slot: str, arms: list[str]) -> str:
    """'' or '<arm>: <why>' for the first of `arms` whose (mean over seeds) validation loss is at or above the
    unigram entropy of its validation split or within NEAR_UNIFORM of ln V (and, for the early rise, whose first
    loss is within NEAR_UNIFORM of ln V)."""
    for arm in arms:
        val = _mean(index.runs(mode, slot, "", "val_loss").get(arm, {}))
        entropy = _mean(index.runs(mode, slot, "", "unigram_entropy").get(arm, {}))
        log_v = _mean(index.runs(mode, slot, "", "log_vocab").get(arm, {}))
        first = _mean(index.runs(mode, slot, "", "first_loss").get(arm, {}))
        if math.isfinite(val) and math.isfinite(entropy) and val >= entropy:
            return f"{arm}: validation loss {val:.3f} >= the unigram entropy {entropy:.3f} of its validation split"
        if math.isfinite(val) and math.isfinite(log_v) and val >= log_v - NEAR_UNIFORM:
            return f"{arm}: validation loss {val:.3f} within {NEAR_UNIFORM} nats of ln V = {log_v:.3f}"
        if claim.key == "early_rise_excess" and math.isfinite(first) and first >= log_v - NEAR_UNIFORM:
            return (
                f"{arm}: starts at loss {first:.3f}, within {NEAR_UNIFORM} nats of ln V = {log_v:.3f}: a curve that "
                "starts at the uniform loss cannot rise"
            )
    return ""


def precheck(claim: Claim, arm: str, runs: dict[str, dict]) -> str:
    """The verdict of a row that gets no test ('' when it is tested)."""
    if claim.evidence == "construction_both":
        return "not testable: PIT and exact TT both read 0 by construction under this reading"
    if arm not in runs or not finite(runs[arm]):
        return f"not measured: {claim.metric} of {arm}"
    if claim.evidence == "construction":
        return "holds by construction"
    if "tt" not in runs or not finite(runs["tt"]):
        return f"not measured: {claim.metric} of TT"
    diffs = paired(runs[arm], runs["tt"])
    if not diffs:
        return f"not testable: no seed ran both {arm} and TT"
    constant = set(finite(runs[arm]).values()) | set(finite(runs["tt"]).values())
    if len(constant) == 1:
        return f"not testable: every seed of both arms reads {constant.pop():g}"
    if len(diffs) == 1:
        return "n = 1, no interval"
    if claim.premise and all(v <= 0 for v in finite(runs["tt"]).values()):
        return f"not testable: {claim.premise}"
    return ""


def compare(arm: dict, ref: dict) -> dict:
    """The paired comparison arm - ref: n, mean, 95% interval, t-test p and (n >= 6) sign-flip p."""
    diffs = paired(arm, ref)
    mean, half = t_interval(diffs)
    return {"n": len(diffs), "diff": mean, "low": mean - half, "high": mean + half, "p": t_test_p(diffs),
            "p_perm": sign_flip_p(diffs)}  # fmt: skip


def claim_row(claim: Claim, index: Index, mode: str, slot: str, task: str, arm: str) -> dict:
    """One row, before the Holm adjustment (`verdict` is final for untested rows, `pending` for tested ones)."""
    runs = index.runs(mode, slot, task, claim.key)
    lr = _mean(index.runs(mode, slot, "", "lr").get("tt", {}))
    arm_mean, arm_ci = t_interval(list(finite(runs.get(arm, {})).values()))
    tt_mean, tt_ci = t_interval(list(finite(runs.get("tt", {})).values()))
    test = compare(runs.get(arm, {}), runs.get("tt", {}))
    untied = compare(runs.get("untied", {}), runs.get("tt", {}))
    control = CONTROL_ARMS.get(claim.key, "")
    extra = compare(runs.get(control, {}), runs.get("tt", {})) if control in runs else None
    control = control if extra else ""
    verdict = precheck(claim, arm, runs)
    why = "" if verdict or not claim.degenerate_rule else degenerate(claim, index, mode, slot, [arm, "tt"])
    return {
        "claim": claim.id, "group": claim.group, "paper": f'"{claim.quote}" ({claim.where})', "metric": claim.metric,
        "direction": f"PIT - TT {'<' if claim.direction < 0 else '>'} 0", "mode": mode, "slot": slot, "lr": lr,
        "lora": task, "arm": arm, "n": test["n"], "arm_mean": arm_mean, "arm_ci": arm_ci, "tt_mean": tt_mean,
        "tt_ci": tt_ci, "diff": test["diff"], "diff_ci_low": test["low"], "diff_ci_high": test["high"],
        "p": test["p"] if not verdict else math.nan, "p_holm": math.nan, "p_perm": test["p_perm"],
        "untied_diff": untied["diff"], "untied_ci_low": untied["low"], "untied_ci_high": untied["high"],
        "untied_p": untied["p"], "control": control,
        "control_diff": extra["diff"] if extra else math.nan,
        "control_ci_low": extra["low"] if extra else math.nan, "control_ci_high": extra["high"] if extra else math.nan,
        "evidence": evidence(claim, verdict or ("degenerate" if why else ""), test["n"]),
        "verdict": verdict or (f"degenerate: {why}" if why else "pending"),
    }  # fmt: skip


def evidence(claim: Claim, verdict: str, n: int) -> str:
    """What kind of evidence a row is."""
    if claim.evidence.startswith("construction"):
        return "construction"
    if verdict == "" and not claim.degenerate_rule:
        return f"paired test, {n} seeds, Holm-adjusted (a run that does not learn is an outcome here)"
    if verdict.startswith(("not measured", "not testable", "n = 1")):
        return "none"
    if verdict == "degenerate":
        return f"degenerate model ({n} seeds; tested, in the Holm family)"
    return f"paired test, {n} seeds, Holm-adjusted"


def final_verdict(claim: Claim, row: dict) -> str:
    """The verdict of a tested row from its Holm-adjusted p, then the untied control (module docstring)."""
    if row["p_holm"] > ALPHA:
        return "inconclusive"
    paper_side = (row["diff"] > 0) == (claim.direction > 0)
    if not paper_side:
        return "contradicted"
    same = (row["untied_diff"] > 0) == (row["diff"] > 0)
    if claim.control and row["untied_p"] <= ALPHA and same:
        return (
            f"not specific to PIT: untied - TT = {row['untied_diff']:.3g} [{row['untied_ci_low']:.3g}, "
            f"{row['untied_ci_high']:.3g}] shows the same effect"
        )
    return "supported"


def claims_from_seeds(seeds: pd.DataFrame) -> pd.DataFrame:
    """The claims table from the per-seed table (module docstring): every row, Holm over the tested ones."""
    index = Index(seeds)
    rows = [claim_row(c, index, *cell) for c in CLAIMS for cell in cells(c, index)]
    tested = [r["p"] if r["verdict"] == "pending" or r["verdict"].startswith("degenerate") else math.nan for r in rows]
    for r, p in zip(rows, holm(tested)):
        r["p_holm"] = p
        if r["verdict"] == "pending":
            r["verdict"] = final_verdict(CLAIM_BY_ID[r["claim"]], r)
    table = pd.DataFrame(rows)
    if len(table) and not table["control"].any():  # no row has an extra control (a profile without tt-norewarm)
        table = table.drop(columns=[c for c in table.columns if c.startswith("control")])
    return table


def claims_table(results) -> pd.DataFrame:
    """The claims table of the runs under `results` (pretrain/, diagnostics/, posttrain/)."""
    from pit.reporting.per_seed import per_seed_table

    return claims_from_seeds(per_seed_table(results))


# ---- the summary: one line per claim ----------------------------------------------------------------------------
GENERIC_READINGS = {
    "holds by construction": "true of PIT by definition: it confirms the implementation, not a hypothesis",
    "supported": "the paired difference lies on the paper's side after the Holm adjustment over every tested row",
    "contradicted": "the paired difference lies on the other side of the paper's claim after the Holm adjustment",
    "mixed": "rows disagree across arms or cells: read them in the table",
    "not specific to PIT": "the untied control shows the same effect, so it is not evidence for PIT's interface",
    "inconclusive": "the seeds do not resolve the difference after the Holm adjustment: not 'no effect', not enough "
    "evidence at this scale",
    "degenerate": "an arm that learned no more than token frequencies (validation loss at or above the unigram "
    "entropy, or near ln V) takes part in every tested row, so the comparison says nothing about the claim",
    "not testable": "nothing to compare at this scale (see the rows' reasons)",
    "n = 1": "one seed: no interval, no verdict",
    "not measured": "the runs that measure it are missing",
}
KIND_ORDER = ["holds by construction", "supported", "contradicted", "not specific to PIT", "inconclusive",
              "degenerate", "n = 1", "not testable", "not measured"]  # fmt: skip


def verdict_kind(verdict: str) -> str:
    """The kind of a row's verdict (its text up to the reason)."""
    return next((k for k in KIND_ORDER if verdict.startswith(k)), verdict)


def overall(kinds: list[str]) -> str:
    """One verdict for a claim from its rows' kinds."""
    if all(k == "holds by construction" for k in kinds):
        return "holds by construction"
    if "supported" in kinds and "contradicted" in kinds:
        return "mixed"
    for kind in ("supported", "contradicted", "not specific to PIT", "inconclusive", "degenerate", "n = 1"):
        if kind in kinds:
            return kind
    return "not testable" if "not testable" in kinds else "not measured"


def headline(rows: pd.DataFrame, kind: str) -> pd.Series:
    """The row that shows a claim's overall verdict best: of its kind (any row for `mixed`), the smallest
    adjusted p, else the first."""
    of_kind = rows if kind == "mixed" else rows[[verdict_kind(v) == kind for v in rows["verdict"]]]
    of_kind = of_kind if len(of_kind) else rows
    return of_kind.sort_values("p_holm", na_position="last").iloc[0]


def effect_text(row: pd.Series) -> str:
    """`arm (mode, cell): PIT - TT = d [lo, hi], n = k` for the summary."""
    where = [row["mode"], row["slot"]]
    if isinstance(row["lora"], str) and row["lora"]:
        where.append(f"LoRA {row['lora']}")
    if row["claim"].startswith("stability_spikes") and math.isfinite(row["lr"]):
        where.append(f"lr {row['lr']:g}")
    if not math.isfinite(row["diff"]):
        return f"{row['arm']} ({', '.join(where)})"
    interval = (
        "" if not math.isfinite(row["diff_ci_low"]) else f" [{row['diff_ci_low']:.3g}, {row['diff_ci_high']:.3g}]"
    )
    return f"{row['arm']} ({', '.join(where)}): {row['arm']} - TT = {row['diff']:.3g}{interval}, n = {int(row['n'])}"


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per claim: its overall verdict, how its rows split, the headline row's effect and the reading."""
    out = []
    for claim in CLAIMS:
        rows = table[table["claim"] == claim.id]
        if rows.empty:
            continue
        kinds = [verdict_kind(v) for v in rows["verdict"]]
        kind = overall(kinds)
        counts = ", ".join(f"{k} {kinds.count(k)}" for k in KIND_ORDER if k in kinds)
        top = headline(rows, kind)
        reading = claim.readings.get(kind) or GENERIC_READINGS.get(kind, "")
        if kind == "not testable" and not claim.readings.get(kind):
            reading = top["verdict"].removeprefix("not testable: ")
        out.append({"group": claim.group, "claim": claim.id, "title": claim.title, "where": claim.where,
                    "verdict": kind, "rows": f"{len(rows)} rows: {counts}", "effect": effect_text(top),
                    "reading": reading})  # fmt: skip
    return pd.DataFrame(out)


def summary_markdown(table: pd.DataFrame) -> str:
    """The summary as Markdown: one bullet per claim, grouped (REPORT.md and docs/study.md open with it)."""
    lines = []
    s = summary(table)
    for group in GROUPS:
        part = s[s["group"] == group]
        if part.empty:
            continue
        lines.append(f"**{group.replace('_', ' ').capitalize()}**")
        lines.append("")
        for r in part.itertuples(index=False):
            reading = r.reading[:1].upper() + r.reading[1:]
            lines.append(f"- {r.title} ({r.where}): **{r.verdict}** ({r.rows}). {r.effect}. {reading}.")
        lines.append("")
    return "\n".join(lines).strip() + "\n"


def table_notes() -> list[str]:
    """How each verdict is reached and each metric computed (printed under the Markdown table)."""
    seen = {}
    for c in CLAIMS:
        seen.setdefault(c.metric, c.how)
    return [
        "Verdicts, in the order they are decided: `holds by construction` (the metric is PIT's definition; no test); "
        "`not testable` / `not measured` / `n = 1, no interval`; `degenerate: <arm>: <why>` (validation loss at or "
        f"above the unigram entropy of its split, or within {NEAR_UNIFORM} nats of ln V); then on the Holm-adjusted p "
        f"(`p_holm`, over every tested row) at {ALPHA}: `supported` / `contradicted` (the paper's side of `direction` "
        "or the other), else `inconclusive` (not resolved at this scale and seed count, not 'no effect'); a supported "
        "consistency claim whose untied control shows the same effect (untied - TT, p <= 0.05) is `not specific to "
        "PIT`. Intervals: 95% paired Student-t over seeds; `p_perm`: exact sign-flip p where n >= 6.",
        "\n".join(f"- `{metric}`: {how}." for metric, how in seen.items()),
    ]
