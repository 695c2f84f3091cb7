"""Post-training stage (Table 4): LoRA on every pretrained run x {mbpp, gsm8k}, evaluation in-domain
and out-of-domain, the base models' scores for the gains, and the side effects of every update.

Folders: results/posttrain/<mode>/<slot>/<interface>/
    <lora task>/                     one `pit lora train` run: adapter/, merged/, side_effects.json, summary.json
    <lora task>/eval/<task>.json     the merged model in-domain and out-of-domain (rule evaluate)
    <lora task>/base/<task>.json     the pretrained model on the same sets: the gains' reference (rule evaluate)
docs/posttraining.md describes every setting.
"""

POST = config["posttrain"]
LORA_TASKS = list(POST["tasks"])  # LoRA task -> its out-of-domain evaluation tasks
POST_RES = POST["resources"]


def post_dir(mode, slot, interface):
    return f"results/posttrain/{mode}/{slot}/{interface}"


def lora_spec(mode, slot, interface, task):
    spec = dict(POST["lora"])
    spec.update(
        base=run_dir(mode, slot, interface) + "/final",
        task=task,
        source=POST["data_source"],
        val_data=token_file(PRETRAIN["tokenizer"][mode], "val"),
        side_effect_seq_len=config["context_length"],
        run_name=f"lora-{task}-{mode}-{slot}-{interface}",
        tags={"slot": slot, "mode": mode, "profile": config["profile"]},
        mlflow=config["mlflow"],
    )
    return spec


def evaluate_args():
    e, m = POST["evaluate"], config["mlflow"]
    limit = f" --limit {e['limit']}" if e["limit"] is not None else ""
    tracking = (f" --experiment {m['experiment']}" + (f" --tracking-uri {m['tracking_uri']}" if m["tracking_uri"] else "")
                if m["enabled"] else "")
    return (f"--source {POST['data_source']}{limit} --max-new-tokens {e['max_new_tokens']} --batch-size "
            f"{e['batch_size']} --timeout {e['timeout']} --memory-mb {e['memory_mb']} --workers {e['workers']} "
            f"--device {e['device']}{tracking}")


POST_CONSTRAINTS = dict(mode="teacher|scratch", slot=name_pattern(TEACHER_SLOTS + SCRATCH_SLOTS),
                        interface=name_pattern(INTERFACES))


rule lora:
    input:
        base=run_dir("{mode}", "{slot}", "{interface}") + "/final",
        val=lambda wc: token_file(PRETRAIN["tokenizer"][wc.mode], "val"),
    output:
        summary=post_dir("{mode}", "{slot}", "{interface}") + "/{task}/summary.json",
        side_effects=post_dir("{mode}", "{slot}", "{interface}") + "/{task}/side_effects.json",
        adapter=directory(post_dir("{mode}", "{slot}", "{interface}") + "/{task}/adapter"),
        merged=directory(post_dir("{mode}", "{slot}", "{interface}") + "/{task}/merged"),
    wildcard_constraints:
        task=name_pattern(LORA_TASKS),
        **POST_CONSTRAINTS,
    params:
        spec=lambda wc: json_arg(lora_spec(wc.mode, wc.slot, wc.interface, wc.task)),
        out=lambda wc: f"{post_dir(wc.mode, wc.slot, wc.interface)}/{wc.task}",
    threads: POST_RES["threads"]
    resources:
        **job_resources(POST_RES),
    log:
        log_path("posttrain", "lora_{task}_{mode}_{slot}_{interface}"),
    conda:
        ENV
    shell:
        logged("pit lora train --spec {params.spec} --out {params.out} --threads {threads}")


rule evaluate:
    """The LoRA-updated model and, for the gains, its base on the task (in-domain) and the task's
    out-of-domain sets; one process, two model loads."""
    input:
        model=post_dir("{mode}", "{slot}", "{interface}") + "/{task}/merged",
        base=run_dir("{mode}", "{slot}", "{interface}") + "/final",
    output:
        lora=directory(post_dir("{mode}", "{slot}", "{interface}") + "/{task}/eval"),
        base=directory(post_dir("{mode}", "{slot}", "{interface}") + "/{task}/base"),
    wildcard_constraints:
        task=name_pattern(LORA_TASKS),
        **POST_CONSTRAINTS,
    params:
        tasks=lambda wc: " ".join([wc.task, *POST["tasks"][wc.task]]),
        run_name=lambda wc: f"--run-name eval-{wc.task}-{wc.mode}-{wc.slot}-{wc.interface}" if config["mlflow"]["enabled"] else "",
        args=evaluate_args(),
    threads: POST_RES["threads"]
    resources:
        **job_resources(POST_RES),
    log:
        log_path("posttrain", "evaluate_{task}_{mode}_{slot}_{interface}"),
    conda:
        ENV
    shell:
        logged("pit evaluate {params.tasks} --model {input.model} --out-dir {output.lora} --label lora "
               "--model {input.base} --out-dir {output.base} --label base {params.run_name} {params.args}")


POSTTRAIN_OUTPUTS = [f"{post_dir(m, s, i)}/{leaf}" for m, s, i in pretrain_runs()
                     for t in LORA_TASKS for leaf in (f"{t}/eval", f"{t}/base", f"{t}/side_effects.json")]


rule posttrain_all:
    """Target: every LoRA run and its evaluations (`snakemake --cores all posttrain_all`)."""
    input:
        POSTTRAIN_OUTPUTS,
