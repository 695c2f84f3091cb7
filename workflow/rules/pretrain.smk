"""Pretraining stage (Table 1, Figures 3-4): stand-in teachers, then every slot x interface arm.

Run folders: results/pretrain/<mode>/<slot>/<interface>/ and results/teachers/<slot>/ for the
stand-in teachers the pipeline pretrains itself (docs/training.md).
"""

PRETRAIN = config["pretrain"]
TEACHER_SLOTS = list(PRETRAIN["teacher_slots"])
SCRATCH_SLOTS = list(PRETRAIN["scratch_slots"])
INTERFACES = list(PRETRAIN["interfaces"])
MODES = {"teacher": TEACHER_SLOTS, "scratch": SCRATCH_SLOTS}


def run_dir(mode, slot, interface):
    return f"results/pretrain/{mode}/{slot}/{interface}"


def pretrain_runs():
    """(mode, slot, interface) of every pretraining arm in this profile."""
    return [(m, s, i) for m, slots in MODES.items() for s in slots for i in INTERFACES]


def stand_in_dir(slot):
    return f"results/teachers/{slot}"


def teacher_source(slot):
    """A slot's teacher: the final checkpoint of its stand-in, or a hub id / local folder."""
    entry = PRETRAIN["teacher_slots"][slot]
    return f"{stand_in_dir(slot)}/final" if "stand_in" in entry else entry["teacher"]


def train_spec(mode, slot, interface):
    tokenizer = PRETRAIN["tokenizer"][mode]
    spec = {**PRETRAIN["train"], **PRETRAIN["mode_train"].get(mode, {})}
    spec.update(
        mode=mode,
        model=teacher_source(slot) if mode == "teacher" else PRETRAIN["scratch_slots"][slot]["model"],
        interface={**PRETRAIN["interface"], "kind": interface},
        train_data=token_file(tokenizer, "train"),
        val_data=token_file(tokenizer, "val"),
        tokenizer=tokenizer_dir(tokenizer),
        seq_len=config["context_length"],
        run_name=f"{mode}-{slot}-{interface}",
        tags={"slot": slot, "profile": config["profile"]},
        mlflow=config["mlflow"],
    )
    return spec


def stand_in_spec(slot):
    tokenizer = PRETRAIN["tokenizer"]["teacher"]
    spec = {**PRETRAIN["train"], **PRETRAIN["stand_in_teacher"]}
    spec.update(
        mode="scratch",
        model=PRETRAIN["teacher_slots"][slot]["stand_in"],
        interface={"kind": "tt"},
        train_data=token_file(tokenizer, "train"),
        val_data=token_file(tokenizer, "val"),
        tokenizer=tokenizer_dir(tokenizer),
        seq_len=config["context_length"],
        run_name=f"stand-in-teacher-{slot}",
        tags={"slot": slot, "profile": config["profile"], "role": "stand-in-teacher"},
        mlflow=config["mlflow"],
    )
    return spec


def run_inputs(mode, tokenizer):
    inputs = {split: token_file(tokenizer, split) for split in SPLITS}
    inputs["tokenizer"] = tokenizer_dir(tokenizer)
    return inputs


RES = PRETRAIN["resources"]


rule pretrain_stand_in_teacher:
    input:
        **run_inputs("teacher", PRETRAIN["tokenizer"]["teacher"]),
    output:
        summary=stand_in_dir("{slot}") + "/summary.json",
        model=directory(stand_in_dir("{slot}") + "/final"),
    wildcard_constraints:
        slot=name_pattern([s for s in TEACHER_SLOTS if "stand_in" in PRETRAIN["teacher_slots"][s]]),
    params:
        spec=lambda wc: json_arg(stand_in_spec(wc.slot)),
        out=lambda wc: stand_in_dir(wc.slot),
    threads: RES["threads"]
    resources:
        **job_resources(RES),
    log:
        log_path("pretrain", "stand_in_teacher_{slot}"),
    conda:
        ENV
    shell:
        logged(pit_launcher(RES) + " train --spec {params.spec} --out {params.out} --threads {threads}")


rule pretrain:
    input:
        unpack(lambda wc: {
            **run_inputs(wc.mode, PRETRAIN["tokenizer"][wc.mode]),
            **({"teacher": teacher_source(wc.slot)}
               if wc.mode == "teacher" and "stand_in" in PRETRAIN["teacher_slots"][wc.slot] else {}),
        }),
    output:
        summary=run_dir("{mode}", "{slot}", "{interface}") + "/summary.json",
        model=directory(run_dir("{mode}", "{slot}", "{interface}") + "/final"),
    wildcard_constraints:
        mode="teacher|scratch",
        slot=name_pattern(TEACHER_SLOTS + SCRATCH_SLOTS),
        interface=name_pattern(INTERFACES),
    params:
        spec=lambda wc: json_arg(train_spec(wc.mode, wc.slot, wc.interface)),
        out=lambda wc: run_dir(wc.mode, wc.slot, wc.interface),
    threads: RES["threads"]
    resources:
        **job_resources(RES),
    log:
        log_path("pretrain", "{mode}_{slot}_{interface}"),
    conda:
        ENV
    shell:
        logged(pit_launcher(RES) + " train --spec {params.spec} --out {params.out} --threads {threads}")


ALL_TARGETS += [run_dir(m, s, i) + "/summary.json" for m, s, i in pretrain_runs()]


rule pretrain_all:
    """Target: every pretraining run of the profile (`snakemake --cores all pretrain_all`)."""
    input:
        [run_dir(m, s, i) + "/summary.json" for m, s, i in pretrain_runs()],
