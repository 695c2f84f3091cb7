"""A validated profile's names, arms, seeds and runs (docs/workflow.md), and the checks across keys that the
schema cannot express. The workflow, the report and `pit config check` read a profile through this one class."""

from __future__ import annotations

from pathlib import Path

from pit.arms import arm_kind, mode_arms, slot_tokenizer
from pit.pipeline.layout import (
    diagnostics_file,
    final_eval_dir,
    final_model,
    generation_file,
    lora_file,
    materialized_teacher,
    run_file,
    stand_in_file,
    table_stem,
    teacher_eval_dir,
    token_file,
    tokenizer_dir,
)

SPLITS = ["train", "val"]
LOSS_FIGURES = {"3": "scratch", "4": "teacher"}  # Figure number -> the mode whose loss curves it shows
CLAIM_GROUPS = ["interface", "training", "stability", "layerwise", "side_effects", "posttrain"]  # a figure each
TABLES = ["claims", "table1", "table2", "table3", "table4_scores", "table4_side_effects"]  # claims: a verdict each
DECISION_TABLES = ["trajectory", "parity", "final_scores"]  # a profile's `decision` (pit/reporting/decision.py)
DECISION_DEFAULTS = {"thresholds": [0.05, 0.1, 0.25], "tasks": ["humaneval"], "prompts": [], "max_new_tokens": 48}
ROLES = ("stand_in", "teacher", "scratch")  # whose data a run reads (pretrain.domains)
ARM_KEYS = ("train", "seeds")  # the keys of an arm entry that are not `interface` overrides
ARM_INTERFACE_KEYS = {"tt": ("tt_init",), "untied": ()}  # the interface overrides of a non-PIT arm (PIT: any)
# What `transformers` reads of a checkpoint's tokenizer (fast or slow, BPE or SentencePiece), where present
TOKENIZER_SOURCE_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)


class Profile:
    """The names of a schema-valid config (config: the mapping Snakemake read)."""

    def __init__(self, config: dict):
        self.config = config
        self.name = config["profile"]
        self.corpus = config["corpus"]["name"]
        self.tokenizers = sorted(config["tokenizers"])
        self.pretrain, self.post = config["pretrain"], config["posttrain"]
        self.teacher_slots = list(self.pretrain["teacher_slots"])
        self.scratch_slots = list(self.pretrain["scratch_slots"])
        self.stand_in_slots = [s for s in self.teacher_slots if "stand_in" in self.pretrain["teacher_slots"][s]]
        self.gguf_slots = [s for s in self.teacher_slots if "gguf" in self.pretrain["teacher_slots"][s]]
        self.interfaces = list(self.pretrain["interfaces"])
        self.modes = {"teacher": self.teacher_slots, "scratch": self.scratch_slots}
        # more arms of each mode's slots: name -> {`interface` overrides (PIT arms), train, seeds}; an entry named
        # like an arm of `interfaces` (pit, tt, untied) sets only that arm's train and seeds
        self.arm_entries = {mode: self.pretrain.get(f"{mode}_arms", {}) for mode in self.modes}
        self.mode_arms = {mode: mode_arms(self.interfaces, self.arm_entries[mode]) for mode in self.modes}
        self.arms = list(dict.fromkeys(self.mode_arms["teacher"] + self.mode_arms["scratch"]))
        self.post_arms = self.post.get("interfaces", self.arms)  # the pretraining arms that get LoRA
        self.post_modes = self.post.get("modes", list(self.modes))  # ... in the slots of these modes
        self.lora_tasks = list(self.post["tasks"])  # LoRA task -> its out-of-domain evaluation tasks
        self.frontier_lrs = self.post.get("frontier_lrs", [])  # more LoRA learning rates: the side-effect frontier
        self.seeds = [str(s) for s in config.get("seeds", [])]  # seeds of every arm; none: one run per arm
        self.domains = config["corpus"].get("domains", {})  # named parts of a local corpus, by document path
        self.data_roles = self.pretrain.get("domains", {})  # role -> the domain its runs read (none: all)
        self.decision = {**DECISION_DEFAULTS, **config["decision"]} if config.get("decision") else {}
        lora = bool(self.posttrain_runs())  # a profile may post-train nothing (posttrain.modes: [])
        self.tables = [t for t in TABLES if lora or not t.startswith("table4")]
        self.tables += ["stability", "teacher_gap", *(["frontier"] * lora)] if self.seeds else []  # + the study's
        self.tables += DECISION_TABLES if self.decision else []
        study = ["study_frontier"] * lora + ["study_teacher_gap"]
        self.study_figures = study if self.seeds else []  # pit figure claims --study
        self.figures = [
            *(f"figure{n}_{mode}_loss" for n, mode in LOSS_FIGURES.items() if self.modes[mode]),  # modes with slots
            "interface_drift",
            "figure2_transition",
            *(["side_effects"] * lora),
            *(["stand_in_teachers"] if self.stand_in_slots else []),  # their learning curves
            *(f"claims_{group}" for group in CLAIM_GROUPS),
            *self.study_figures,
            *(["parity"] if self.decision else []),
        ]

    # --- Checks across keys ---------------------------------------------------------------------------------

    def problems(self) -> list[tuple[list, str]]:
        """(config keys, what is wrong) of every check across keys, in the order they are reported."""
        return self._arm_problems() + self._seed_and_slot_problems() + self._tokenizer_problems()

    def _arm_problems(self) -> list[tuple[list, str]]:
        """An arm's kind is one of pretrain.interfaces; interface settings only in extra PIT arms; posttrain's arms
        are pretraining arms."""
        found, only = [], list(ARM_KEYS)
        for mode, entries in self.arm_entries.items():
            for arm, entry in entries.items():
                keys, extra, kind = ["pretrain", f"{mode}_arms", arm], sorted(set(entry) - set(ARM_KEYS)), arm_kind(arm)
                if arm in self.interfaces and extra:
                    why = f"an entry for the arm {arm} of pretrain.interfaces takes only {only} (its interface is "
                    found.append((keys, f"{extra}: {why}pretrain.interface)"))
                if kind not in self.interfaces:
                    found.append((keys, f"a {kind} arm: pretrain.interfaces must hold {kind}"))
                wrong = sorted(set(extra) - set(ARM_INTERFACE_KEYS.get(kind, extra)))
                if wrong:
                    takes = [*only, *ARM_INTERFACE_KEYS[kind]]
                    why = f"interface settings are for PIT arms, tt_init for TT arms; a {kind} arm takes {takes}"
                    found.append((keys, f"{wrong}: {why}"))
        design = self.config.get("claims") or {}
        for mode, arm in (design.get("primary") or {}).items():
            if mode in self.mode_arms and arm not in self.mode_arms[mode]:
                found.append(
                    (["claims", "primary", mode], f"{arm!r}: not an arm of {mode} mode ({self.mode_arms[mode]})")
                )
        matched = design.get("matched_control")
        if matched and (matched not in self.mode_arms.get("teacher", []) or arm_kind(matched) != "tt"):
            found.append((["claims", "matched_control"], f"{matched!r}: expected a TT arm of teacher mode"))
        elif matched:
            found += self._matched_problems(matched, (design.get("primary") or {}).get("teacher", "pit"))
        decision = self.config.get("decision") or {}
        if decision and decision["slot"] not in self.teacher_slots:
            found.append((["decision", "slot"], f"{decision['slot']!r}: not a teacher slot ({self.teacher_slots})"))
        for key in ("arm", "ref") if decision else ():
            if decision[key] not in self.mode_arms["teacher"]:
                why = f"not an arm of teacher mode ({self.mode_arms['teacher']})"
                found.append((["decision", key], f"{decision[key]!r}: {why}"))
        unknown = sorted(set(self.post_arms) - set(self.arms))
        if unknown:
            why = f"not a pretraining arm of this profile (expected some of {self.arms})"
            found.append((["posttrain", "interfaces"], f"{unknown}: {why}"))
        return found

    def _matched_problems(self, matched: str, primary: str) -> list[tuple[list, str]]:
        """The matched control decides teacher-mode rows (docs/study.md), so it needs every seed of the primary arm
        in every teacher slot, and LoRA wherever the primary arm gets LoRA in teacher mode."""
        found = []
        for slot in self.teacher_slots if primary in self.mode_arms.get("teacher", []) else []:
            missing = sorted(
                set(self.run_seeds("teacher", slot, primary)) - set(self.run_seeds("teacher", slot, matched))
            )
            if missing:
                why = f"lacks seeds {missing} of the primary arm {primary!r} in slot {slot!r} (a deciding control)"
                found.append((["pretrain", "teacher_arms", matched, "seeds"], f"{matched!r} {why}"))
        if "teacher" in self.post_modes and primary in self.post_arms and matched not in self.post_arms:
            why = f"the matched control {matched!r} must get LoRA where the primary arm {primary!r} does"
            found.append((["posttrain", "interfaces"], f"{self.post_arms}: {why}"))
        return found

    def _seed_and_slot_problems(self) -> list[tuple[list, str]]:
        """A slot's or an arm's `seeds` are some of the profile's; a role's domain is a corpus domain; a sweep slot
        varies a slot of its own mode."""
        slots = {m: self.pretrain[f"{m}_slots"] for m in self.modes}
        places = [(["pretrain", f"{m}_slots", s], e) for m in self.modes for s, e in slots[m].items()]
        places += [(["pretrain", f"{m}_arms", a], e) for m in self.modes for a, e in self.arm_entries[m].items()]
        found = [
            (keys + ["seeds"], f"{extra}: not among the profile's seeds {self.seeds or '(none)'}")
            for keys, entry in places
            if (extra := [s for s in entry.get("seeds", []) if str(s) not in self.seeds])
        ]
        found += [
            (["pretrain", "domains"], f"{name!r}: not a corpus domain (corpus.domains: {list(self.domains)})")
            for name in self.data_roles.values()
            if name is not None and name not in self.domains
        ]
        found += [
            (["pretrain", f"{m}_slots", slot, "arms"], f"{extra}: not an arm of {m} mode ({self.mode_arms[m]})")
            for m in self.modes
            for slot, e in slots[m].items()
            if (extra := sorted(set(e.get("arms", [])) - set(self.mode_arms[m])))
        ]
        found += [
            (["pretrain", f"{m}_slots", slot, "sweep_of"], f"{e['sweep_of']!r}: not a {m} slot (expected one of {s})")
            for m, s in self.modes.items()
            for slot, e in slots[m].items()
            if e.get("sweep_of") is not None and e["sweep_of"] not in s
        ]
        return found

    def _tokenizer_problems(self) -> list[tuple[list, str]]:
        """A `teacher` tokenizer names a teacher slot with its own checkpoint (`teacher` or `gguf`, not a stand-in:
        the stand-in is trained on the teacher tokenizer's data); a slot's `tokenizer` is one of `tokenizers`."""
        found = []
        for name in self.tokenizers_of_kind("teacher"):
            slot = self.config["tokenizers"][name]["slot"]
            own = [s for s in self.teacher_slots if s not in self.stand_in_slots]
            if slot not in own:
                why = f"not a teacher slot with its own checkpoint (teacher or gguf; expected one of {own})"
                found.append((["tokenizers", name, "slot"], f"{slot!r}: {why}"))
        for slot in self.teacher_slots:
            name = self.slot_entry("teacher", slot).get("tokenizer")
            if name is not None and name not in self.tokenizers:
                found.append(
                    (["pretrain", "teacher_slots", slot, "tokenizer"], f"{name!r}: not one of {self.tokenizers}")
                )
        return found

    # --- Runs ---------------------------------------------------------------------------------------------

    def slot_entry(self, mode: str, slot: str) -> dict:
        return self.pretrain[f"{mode}_slots"][slot]

    def run_seeds(self, mode: str, slot: str, arm: str) -> list[str]:
        """The seeds of one (mode, slot, arm): the arm's `seeds`, else the slot's, else the profile's."""
        seeds = self.arm_entries[mode].get(arm, {}).get("seeds", self.slot_entry(mode, slot).get("seeds"))
        return self.seeds if seeds is None else [str(s) for s in seeds]

    def slot_arms(self, mode: str, slot: str) -> list[str]:
        """The arms that run in a slot: its `arms`, else every arm of the mode, in the mode's order."""
        chosen = self.slot_entry(mode, slot).get("arms")
        return [a for a in self.mode_arms[mode] if chosen is None or a in chosen]

    def pretrain_runs(self) -> list[tuple]:
        """(mode, slot, interface, seed) of every pretraining run: each arm of the slot once per seed (run_seeds)."""
        return [
            (m, s, i, k)
            for m, slots in self.modes.items()
            for s in slots
            for i in self.slot_arms(m, s)
            for k in (self.run_seeds(m, s, i) or [None])
        ]

    def sweep_of(self, run: tuple) -> str | None:
        """The slot whose run settings a sweep slot varies (`sweep_of: <slot>`, e.g. a learning-rate sweep), else
        None: a sweep slot's runs are pretrained and compared in the stability claims, not diagnosed or post-trained."""
        return self.slot_entry(*run[:2]).get("sweep_of")

    def diagnosed_runs(self) -> list[tuple]:
        """The pretraining runs `pit diagnose` reads: those of every slot that is not a sweep slot."""
        return [run for run in self.pretrain_runs() if not self.sweep_of(run)]

    def posttrain_runs(self) -> list[tuple]:
        """The runs that get LoRA post-training (posttrain.interfaces, posttrain.modes), in slots that are not sweep
        slots."""
        return [run for run in self.diagnosed_runs() if run[0] in self.post_modes and run[2] in self.post_arms]

    def decision_runs(self) -> list[tuple]:
        """The final models the decision scores (`decision`): every seed of its arm and its reference in its slot."""
        d = self.decision
        return [r for r in self.pretrain_runs() if d and r[0] == "teacher" and r[1] == d["slot"] and r[2] in
                (d["arm"], d["ref"])]  # fmt: skip

    def generated_runs(self) -> dict[str, tuple | None]:
        """name -> run of the models whose generations REPORT.md shows side by side: the decision slot's teacher
        (None) and the first seed of its arm and reference; none without `decision.prompts`."""
        d = self.decision
        if not d or not d["prompts"]:
            return {}
        first: dict[str, tuple] = {}
        for run in self.decision_runs():
            first.setdefault(run[2], run)
        return {"teacher": None, d["arm"]: first[d["arm"]], d["ref"]: first[d["ref"]]}

    def generated_model(self, name: str) -> str:
        """The checkpoint folder of one of `generated_runs`."""
        run = self.generated_runs()[name]
        return self.teacher_source(self.decision["slot"]) if run is None else final_model(run)

    def arm_interface(self, mode: str, arm: str) -> dict:
        """The `interface` settings of a mode's arm: the profile's PIT settings, an extra PIT arm's overrides, its
        kind."""
        entry = self.arm_entries[mode].get(arm, {}) if arm not in self.interfaces else {}
        overrides = {k: v for k, v in entry.items() if k not in ARM_KEYS}
        return {**self.pretrain["interface"], **overrides, "kind": arm_kind(arm)}

    # --- Data and models of the runs ----------------------------------------------------------------------

    def tokenizers_of_kind(self, kind: str) -> list[str]:
        return [name for name in self.tokenizers if self.config["tokenizers"][name]["kind"] == kind]

    def tokenizer_spec(self, name: str) -> dict:
        """What `pit data tokenizer` gets for a tokenizer: its entry, where a `teacher` tokenizer (the native
        tokenizer of a teacher slot) becomes the `checkpoint` tokenizer of the slot's teacher folder."""
        spec = dict(self.config["tokenizers"][name])
        if spec["kind"] == "teacher":
            spec.update(kind="checkpoint", source=self.teacher_source(spec.pop("slot")))
        return spec

    def tokenizer_source_files(self, name: str) -> list[str]:
        """The inputs of a tokenizer's copy: the teacher folder a `teacher` tokenizer reads where the pipeline
        materialises it (a GGUF slot); else the tokenizer files of its `source` where that is a local checkpoint
        folder (a changed file reruns the copy and the token files made with it); none for GPT-2's package files, a
        hub id, or a trained BPE."""
        entry = self.config["tokenizers"][name]
        if entry["kind"] == "teacher" and entry["slot"] in self.gguf_slots:
            return [materialized_teacher(entry["slot"])]
        source = self.tokenizer_spec(name).get("source")
        if not isinstance(source, str) or source == "package" or not Path(source).is_dir():
            return []
        return [str(path) for f in TOKENIZER_SOURCE_FILES if (path := Path(source) / f).is_file()]

    def role_data(self, role: str, slot: str | None = None) -> tuple[str, str | None]:
        """(tokenizer, domain) of the token files a role's runs read: role stand_in | teacher | scratch; the
        stand-in teachers use the teacher tokenizer, a teacher slot with its own `tokenizer` (a teacher whose
        tokenizer differs from the other slots', e.g. two real teachers of different families) that one; domain None
        = the whole corpus (pretrain.domains)."""
        return slot_tokenizer(self.pretrain, "teacher" if role == "stand_in" else role, slot), self.data_roles.get(role)

    def token_files(self) -> list[str]:
        """Every token file of the profile: each tokenizer's whole splits, and the domains the runs read."""
        files = [token_file(t, s) for t in self.tokenizers for s in SPLITS]
        used = {self.role_data(role, slot) for role in ROLES for slot in [None, *self.teacher_slots]}
        return files + [token_file(t, s, d) for t, d in sorted(used, key=str) if d is not None for s in SPLITS]

    def val_tokens(self, mode: str, slot: str | None = None) -> str:
        """The validation token file of a mode's runs (of one slot's runs: a teacher slot may have its own)."""
        tokenizer, domain = self.role_data(mode, slot)
        return token_file(tokenizer, "val", domain)

    def run_inputs(self, role: str, slot: str | None = None) -> dict[str, str]:
        """A training run's data: the train and val token files of its role (and slot) and the tokenizer folder."""
        tokenizer, domain = self.role_data(role, slot)
        inputs = {split: token_file(tokenizer, split, domain) for split in SPLITS}
        return {**inputs, "tokenizer": tokenizer_dir(tokenizer)}

    def teacher_source(self, slot: str) -> str:
        """A slot's teacher: the final checkpoint of its stand-in, the folder its GGUF model is materialised
        into, or a hub id / local folder."""
        entry = self.pretrain["teacher_slots"][slot]
        if "stand_in" in entry:
            return stand_in_file(slot, "final")
        return materialized_teacher(slot) if "gguf" in entry else entry["teacher"]

    def run_summaries(self) -> list[str]:
        """The summary.json of every pretraining arm: the pretraining stage's final outputs."""
        return [run_file(run, "summary.json") for run in self.pretrain_runs()]

    def transition_runs(self) -> list[str]:
        """The final checkpoints the Figure 2-style trace compares: the transition slot's arms of `interfaces` (a
        scratch or a teacher slot; a seeded profile traces its first seed)."""
        seed = self.seeds[0] if self.seeds else None
        slot = self.config["report"]["transition_slot"]
        mode = "scratch" if slot in self.scratch_slots else "teacher"
        return [final_model((mode, slot, i, seed)) for i in self.interfaces]

    # --- Final outputs of the stages ----------------------------------------------------------------------

    def diagnostics_files(self) -> list[str]:
        return [diagnostics_file(run) for run in self.diagnosed_runs()]

    def posttrain_outputs(self) -> list[str]:
        """Every LoRA run's evaluations and side effects, and the scores of the real teachers (GGUF slots) on the
        same sets: the post-training stage's final outputs."""
        leaves = ("eval", "base", "side_effects.json")
        runs = [lora_file(run, t, leaf) for run in self.posttrain_runs() for t in self.lora_tasks for leaf in leaves]
        finals = [final_eval_dir(run) for run in self.decision_runs()] if self.decision.get("tasks") else []
        generations = [generation_file(name) for name in self.generated_runs()]
        return runs + [teacher_eval_dir(slot) for slot in self.gguf_slots] + finals + generations

    def evaluated_tasks(self) -> list[str]:
        """Every task `pit evaluate` scores: the LoRA tasks and their out-of-domain sets where a run is post-trained,
        then the decision's tasks, in order."""
        lora = (
            [t for task in self.lora_tasks for t in [task, *self.post["tasks"][task]]] if self.posttrain_runs() else []
        )
        return list(dict.fromkeys(lora + (self.decision.get("tasks", []) if self.decision else [])))

    def table_files(self) -> list[str]:
        """The Markdown file of every table."""
        return [f"{table_stem(name)}.md" for name in self.tables]
