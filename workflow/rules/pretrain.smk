"""Pretraining stage (Table 1, Figures 3-4): stand-in teachers, then every slot x interface arm.

Run folders: results/pretrain/<mode>/<slot>/<interface>/ and results/teachers/<slot>/ for the
stand-in teachers the pipeline pretrains itself (docs/training.md). The jobs pass --overwrite: a run
folder is the rule's, and Snakemake runs a job again only after removing its outputs (other settings,
code or inputs), so an unfinished run there with other settings or inputs is started over, not refused
(the same run is still resumed); posttrain.smk's lora rule does the same.
"""


rule pretrain_stand_in_teacher:
    input:
        unpack(lambda wc: run_inputs("stand_in", wc.slot)),
    output:
        summary=stand_in_file("{slot}", "summary.json"),
        model=directory(stand_in_file("{slot}", "final")),
    log:
        log_path("pretrain", "stand_in_teacher_{slot}"),
    wildcard_constraints:
        slot=name_pattern(STAND_IN_SLOTS),
    priority: 10  # first: every teacher-mode job waits for it, scratch jobs fill the other cores meanwhile
    conda:
        ENV
    threads: PRETRAIN_RES["threads"]
    resources:
        **job_resources(PRETRAIN_RES, planned_runtime("pretrain_stand_in_teacher", slot_job)),
    params:
        spec=lambda wc: json_arg(stand_in_spec(wc.slot)),
        out=lambda wc: stand_in_dir(wc.slot),
    shell:
        logged(
            pit_launcher(PRETRAIN_RES)
            + " train --spec {params.spec} --out {params.out} --threads {threads} --overwrite"
        )


rule pretrain:
    input:
        unpack(pretrain_inputs),
    output:
        summary=run_file(RUN, "summary.json"),
        model=directory(final_model(RUN)),
    log:
        run_log("pretrain", RUN),
    conda:
        ENV
    threads: PRETRAIN_RES["threads"]
    resources:
        **job_resources(PRETRAIN_RES, planned_runtime("pretrain", run_job)),
    params:
        spec=lambda wc: json_arg(train_spec(run_of(wc))),
        out=lambda wc: run_dir(run_of(wc)),
    shell:
        logged(
            pit_launcher(PRETRAIN_RES)
            + " train --spec {params.spec} --out {params.out} --threads {threads} --overwrite"
        )


rule pretrain_all:
    """Target: every pretraining run of the profile (`snakemake --cores all pretrain_all`)."""
    input:
        run_summaries(),
