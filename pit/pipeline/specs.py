"""The JSON object each rule's `pit ... --spec` gets (docs/workflow.md, "Rules and --spec"), built from a profile,
and the check of every resolved run spec by pit's own run arguments when the config is read."""

from __future__ import annotations

from pit.pipeline.layout import final_model, run_name
from pit.pipeline.profile import Profile, arm_kind


def corpus_spec(p: Profile) -> dict:
    """`pit data download`: the corpus section without its domains (they select documents when tokenizing, so the
    download and its manifest do not depend on them)."""
    return {k: v for k, v in p.config["corpus"].items() if k != "domains"}


def tokenize_spec(p: Profile, split: str, domain: str | None = None) -> dict:
    """`pit data tokenize`: the train split is cut to the token budget, the val split never is; with a corpus
    domain, only its documents. (`--workers` is the job's threads, passed as its own flag: it does not change the
    file.)"""
    tokenize = p.config["tokenize"]
    spec = {
        "batch_documents": tokenize["batch_documents"],
        "token_budget": tokenize["token_budget"] if split == "train" else None,
        "context_length": p.config["context_length"],
    }
    if domain is not None:
        spec["domain"] = {"name": domain, "include": None, "exclude": [], **p.domains[domain]}
    return spec


def seed_settings(run: tuple, tags: dict) -> dict:
    """A seeded run's `seed` (initialisation, data order; LoRA initialisation and example order) and its tags."""
    if run[3] is None:
        return {"tags": tags}
    return {"seed": int(run[3]), "tags": {**tags, "seed": run[3]}}


def train_overrides(run: tuple) -> list[list]:
    """The config sections that override pretrain.train for one run, last wins."""
    mode, slot, arm, _ = run
    return [["pretrain", "mode_train", mode], ["pretrain", f"{mode}_slots", slot, "train"],
            ["pretrain", f"{mode}_arms", arm, "train"]]  # fmt: skip


def section(p: Profile, keys: list) -> dict:
    """The mapping at `keys` below the config ({} where a key is absent)."""
    node = p.config
    for key in keys:
        node = node.get(key, {})
    return node


def train_spec(p: Profile, run: tuple) -> dict:
    """`pit train` of one pretraining run (docs/training.md); arms with the same seed see the same data order."""
    mode, slot, interface, _ = run
    data = p.run_inputs(mode, slot)
    spec = {**p.pretrain["train"]}
    for keys in train_overrides(run):
        spec.update(section(p, keys))
    sweep = p.sweep_of(run)
    spec.update(
        mode=mode,
        model=p.teacher_source(slot) if mode == "teacher" else p.pretrain["scratch_slots"][slot]["model"],
        interface=p.arm_interface(mode, interface),
        train_data=data["train"],
        val_data=data["val"],
        tokenizer=data["tokenizer"],
        seq_len=p.config["context_length"],
        run_name=run_name(run),
        mlflow=p.config["mlflow"],
        **seed_settings(
            run, {"slot": slot, "arm": interface, "profile": p.name, **({"sweep_of": sweep} if sweep else {})}
        ),
    )
    return spec


def stand_in_spec(p: Profile, slot: str) -> dict:
    """`pit train` of the tied GPT-2 stand-in teacher of a slot."""
    data = p.run_inputs("stand_in", slot)
    spec = {**p.pretrain["train"], **p.pretrain["stand_in_teacher"]}
    spec.update(
        mode="scratch",
        model=p.pretrain["teacher_slots"][slot]["stand_in"],
        interface={"kind": "tt"},
        train_data=data["train"],
        val_data=data["val"],
        tokenizer=data["tokenizer"],
        seq_len=p.config["context_length"],
        run_name=f"stand-in-teacher-{slot}",
        tags={"slot": slot, "mode": "stand-in", "arm": "tt", "profile": p.name, "role": "stand-in-teacher"},
        mlflow=p.config["mlflow"],
    )
    return spec


def diagnose_spec(p: Profile) -> dict:
    """`pit diagnose` (docs/diagnostics.md): positions, seq_len, bigram_tokens, seed."""
    return dict(p.config["diagnostics"])


def lora_spec(p: Profile, run: tuple, task: str) -> dict:
    """`pit lora train` of one pretrained run on one task (docs/posttraining.md); with posttrain.frontier_lrs the
    run also trains its LoRA at those rates (the side-effect frontier, measured on the problems `pit evaluate`
    scores)."""
    mode, slot = run[:2]
    spec = dict(p.post["lora"])
    if p.frontier_lrs:
        spec.update(frontier_lrs=p.frontier_lrs, frontier_eval_limit=p.post["evaluate"]["limit"])
    spec.update(
        base=final_model(run),
        task=task,
        source=p.post["data_source"],
        val_data=p.val_tokens(mode, slot),
        side_effect_seq_len=p.config["context_length"],
        run_name=run_name(run, f"lora-{task}-"),
        mlflow=p.config["mlflow"],
        **seed_settings(run, {"slot": slot, "mode": mode, "arm": run[2], "profile": p.name}),
    )
    return spec


def evaluate_tasks(p: Profile, task: str) -> str:
    """A LoRA task and its out-of-domain evaluation tasks, as `pit evaluate` arguments."""
    return " ".join([task, *p.post["tasks"][task]])


def evaluate_spec(p: Profile, run: tuple, task: str) -> dict:
    """`pit evaluate` of one LoRA run and its base; with MLflow on, the scores are one run
    eval-<task>-<mode>-<slot>-<interface>[-s<seed>] in the profile's experiment. A real teacher's own scores: the run
    (teacher, <slot>, teacher, None), named eval-<tasks>-teacher-<slot>-teacher."""
    spec = {"source": p.post["data_source"], **p.post["evaluate"]}
    mlflow = p.config["mlflow"]
    if mlflow["enabled"]:
        tags = {
            "mode": run[0],
            "slot": run[1],
            "arm": run[2],
            "interface": arm_kind(run[2]),
            "task": task,
            "profile": p.name,
        }
        spec.update(
            run_name=run_name(run, f"eval-{task}-"),
            experiment=mlflow["experiment"],
            tracking_uri=mlflow["tracking_uri"],
            tags=seed_settings(run, tags)["tags"],
        )
    return spec


def teacher_evaluate_spec(p: Profile, slot: str) -> dict:
    """`pit evaluate` of a real teacher's own checkpoint on every evaluated task."""
    return evaluate_spec(p, ("teacher", slot, "teacher", None), "-".join(p.evaluated_tasks()))


# --- Every resolved spec, checked by pit's own run arguments ------------------------------------------------


def spec_field_keys(p: Profile, kind: str, field: str, overrides: list[list]) -> list:
    """The config key a field of a resolved run spec comes from (`overrides`: the sections that override
    pretrain.train for this run, last wins; see train_overrides, or stand_in_teacher)."""
    if field == "side_effect_seq_len" or (kind == "train" and field == "seq_len"):
        return ["context_length"]
    if field == "mlflow":
        return ["mlflow"]
    if kind == "lora":
        if field in ("frontier_lrs", "frontier_eval_limit"):
            return ["posttrain", "frontier_lrs"] if field == "frontier_lrs" else ["posttrain", "evaluate", "limit"]
        return ["posttrain", "data_source"] if field == "source" else ["posttrain", "lora", field]
    if field in ("interface", "tokenizer"):
        return ["pretrain", field]
    for override in reversed(overrides):
        if field in section(p, override):
            return [*override, field]
    return ["pretrain", "train", field]


def run_spec_problem(p: Profile) -> tuple[list, str] | None:
    """(config keys, message) of the first resolved run spec that pit.training.args.PretrainArgs / LoraArgs refuse,
    else None: the checks `pit train` and `pit lora train` make (types, finite values, min_lr <= lr, warmup_steps <
    max_steps, a global batch that is a multiple of micro_batch_size x context_length) fail when the config is
    read, not in the first job. Needs torch (InterfaceConfig): an ImportError where it is missing."""
    from pit.errors import PitError
    from pit.training.args import LoraArgs, PretrainArgs

    specs = [("train", train_spec(p, run), train_overrides(run)) for run in p.pretrain_runs()]
    specs += [("train", stand_in_spec(p, s), [["pretrain", "stand_in_teacher"]]) for s in p.stand_in_slots]
    specs += [("lora", lora_spec(p, run, t), []) for run in p.posttrain_runs() for t in p.lora_tasks]
    for kind, spec, overrides in specs:
        try:
            (LoraArgs if kind == "lora" else PretrainArgs).from_dict(spec)
        except PitError as err:
            fields = getattr(err, "fields", ())
            keys = spec_field_keys(p, kind, fields[0], overrides) if fields else []
            return keys, f"run {spec['run_name']}: {err}"
    return None
