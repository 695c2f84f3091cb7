"""Post-training stage (Table 4): LoRA on every pretrained run x {mbpp, gsm8k}, evaluation in-domain
and out-of-domain, the base models' scores for the gains, and the side effects of every update.

Folders: results/posttrain/<mode>/<slot>/<interface>/
    <lora task>/                     one `pit lora train` run: adapter/, merged/, side_effects.json, summary.json
                                     (and frontier.json with posttrain.frontier_lrs)
    <lora task>/eval/<task>.json     the merged model in-domain and out-of-domain (rule evaluate)
    <lora task>/base/<task>.json     the pretrained model on the same sets: the gains' reference (rule evaluate)
docs/posttraining.md describes every setting.
A profile's `decision` (docs/real.md) adds <run>/final-eval/<task>.json in the same folders (each final model of its
arm and reference scored as it is, rule evaluate_final) and results/posttrain/generations/<name>.json (rule
generate).
"""


rule lora:
    input:
        base=final_model(RUN),
        val=run_val_tokens,
    output:
        **({"frontier": lora_file(RUN, "{task}", "frontier.json")} if FRONTIER_LRS else {}),
        summary=lora_file(RUN, "{task}", "summary.json"),
        side_effects=lora_file(RUN, "{task}", "side_effects.json"),
        adapter=directory(lora_file(RUN, "{task}", "adapter")),
        merged=merged_output(directory(lora_file(RUN, "{task}", "merged"))),
    log:
        run_log("posttrain", RUN, "lora_{task}_"),
    conda:
        ENV
    threads: POST_RES["threads"]
    resources:
        **job_resources(POST_RES, planned_runtime("lora", task_job)),
    params:
        spec=lambda wc: json_arg(lora_spec(run_of(wc), wc.task)),
        out=lambda wc: lora_dir(run_of(wc), wc.task),
    shell:
        logged("pit lora train --spec {params.spec} --out {params.out} --threads {threads} --overwrite")


rule evaluate:
    """The LoRA-updated model and, for the gains, its base on the task (in-domain) and the task's
    out-of-domain sets; one process, two model loads."""
    input:
        model=lora_file(RUN, "{task}", "merged"),
        base=final_model(RUN),
    output:
        lora=directory(lora_file(RUN, "{task}", "eval")),
        base=directory(lora_file(RUN, "{task}", "base")),
    log:
        run_log("posttrain", RUN, "evaluate_{task}_"),
    conda:
        ENV
    threads: POST_RES["threads"]
    resources:
        **job_resources(POST_RES, planned_runtime("evaluate", task_job)),
    params:
        tasks=lambda wc: evaluate_tasks(wc.task),
        spec=lambda wc: json_arg(evaluate_spec(run_of(wc), wc.task)),
    shell:
        logged(
            "pit evaluate {params.tasks} --model {input.model} --out-dir {output.lora} --label lora"
            " --model {input.base} --out-dir {output.base} --label base --spec {params.spec}"
        )


rule evaluate_teacher:
    """A real teacher's own checkpoint (a GGUF slot, before any continued pretraining) on every evaluated task."""
    input:
        model=lambda wc: teacher_source(wc.slot),
    output:
        directory(teacher_eval_dir("{slot}")),
    log:
        log_path("posttrain", "evaluate_teacher_{slot}"),
    wildcard_constraints:
        slot=name_pattern(GGUF_SLOTS),
    conda:
        ENV
    threads: POST_RES["threads"]
    resources:
        **job_resources(POST_RES, planned_runtime("evaluate_teacher", slot_job)),
    params:
        tasks=" ".join(EVALUATED_TASKS),
        spec=lambda wc: json_arg(teacher_evaluate_spec(wc.slot)),
    shell:
        logged(
            "pit evaluate {params.tasks} --model {input.model} --out-dir {output} --label teacher --spec {params.spec}"
        )


rule evaluate_final:
    """A pretraining run's final model as it is (no LoRA) on the decision's tasks."""
    input:
        model=final_model(RUN),
    output:
        directory(final_eval_dir(RUN)),
    log:
        run_log("posttrain", RUN, "evaluate_final_"),
    conda:
        ENV
    threads: POST_RES["threads"]
    resources:
        **job_resources(POST_RES, planned_runtime("evaluate_final", run_job)),
    params:
        tasks=" ".join(DECISION.get("tasks", [])),
        spec=lambda wc: json_arg(evaluate_spec(run_of(wc), "final-" + "-".join(DECISION["tasks"]))),
    shell:
        logged(
            "pit evaluate {params.tasks} --model {input.model} --out-dir {output} --label final --spec {params.spec}"
        )


rule generate:
    """The decision's prompts continued greedily by one model (the teacher, or an arm's first seed)."""
    input:
        model=lambda wc: P.generated_model(wc.name),
    output:
        generation_file("{name}"),
    log:
        log_path("posttrain", "generate_{name}"),
    wildcard_constraints:
        name=name_pattern(list(P.generated_runs())),
    conda:
        ENV
    threads: POST_RES["threads"]
    resources:
        **job_resources(POST_RES, planned_runtime("generate", lambda wc: wc.name)),
    params:
        prompts=" ".join(f"--prompt {shlex.quote(p)}" for p in DECISION.get("prompts", [])),
        new=DECISION.get("max_new_tokens", 1),
    shell:
        logged("pit generate {input.model} {params.prompts} --max-new-tokens {params.new} --out {output}")


rule posttrain_all:
    """Target: every LoRA run and its evaluations (`snakemake --cores all posttrain_all`)."""
    input:
        posttrain_outputs(),
