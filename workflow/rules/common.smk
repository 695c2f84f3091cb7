"""Everything the stage files share: the wildcard constraints, every path, every `pit` spec, resources, and the
final targets (get_final_output). docs/workflow.md has the list.

The library logic lives in `pit.pipeline` (config loading and validation, the profile's names, arms, seeds and
runs, the path layout, the spec builders, the jobs' shell pieces and resources); this file binds it to the
workflow: Snakemake's `config`, `report()`, `temp()` and wildcards. The stage files hold only rules; each rule
wires files to one `pit` subcommand.
"""

import os
import shlex
import sys
from functools import partial
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

CHECKOUT = Path(workflow.basedir).resolve().parent  # the clone this Snakefile belongs to


def check_checkout():
    """Refuse (one line) when the imported `pit` is another clone's different code, and export this checkout to
    the jobs (PIT_CHECKOUT), whose `pit` makes the same check (pit/checkout.py, docs/install.md). Where Snakemake's
    Python has no `pit` (jobs in a conda env only), the checkout's own pit/ is imported: pit.pipeline needs only
    PyYAML and jsonschema, Snakemake's own dependencies."""
    os.environ["PIT_CHECKOUT"] = str(CHECKOUT)  # pit.checkout.CHECKOUT_ENV
    try:
        from pit.checkout import checkout_mismatch
    except ImportError:
        sys.path.append(str(CHECKOUT))
        return
    reason = checkout_mismatch(CHECKOUT)
    if reason:
        raise WorkflowError(reason)


check_checkout()

from pit.errors import PitError
from pit.pipeline import config as pipeline_config, layout, specs
from pit.pipeline import plan as pipeline_plan
from pit.pipeline.jobs import job_environment, job_resources, json_arg, logged, name_pattern, pit_launcher
from pit.pipeline.jobs import working_directory_problem
from pit.pipeline.layout import DIAGNOSTICS_ROOT, FIGURES_DIR, MLFLOW_SUMMARY_FILE, POSTTRAIN_ROOT, PRETRAIN_ROOT
from pit.pipeline.layout import REPORT_FILE, RESULTS_ROOT, STAND_IN_ROOT, TABLES_DIR, diagnostics_file, figure_file
from pit.pipeline.layout import final_model, log_path, lora_dir, lora_file, run_dir, run_file, run_log, stand_in_dir
from pit.pipeline.layout import final_eval_dir, generation_file
from pit.pipeline.layout import materialized_teacher
from pit.pipeline.layout import stand_in_file, table_stem, teacher_eval_dir, token_file, token_sidecar, tokenizer_dir
from pit.pipeline.profile import CLAIM_GROUPS, LOSS_FIGURES, SPLITS
from pit.reporting.captions import caption_name

job_environment()
if working_directory_problem(workflow.basedir):
    raise WorkflowError(working_directory_problem(workflow.basedir))


def load_config():
    """The checked profile: the embedded default (config/config.yaml) unless --configfile gave others, validated
    against the schema, across keys, and (main process) every run spec built into pit's run arguments."""
    files = [Path(f) for f in workflow.overwrite_configfiles] or [CHECKOUT / "config" / "config.yaml"]
    try:
        if not workflow.overwrite_configfiles:
            pipeline_config.read_profile(files[0])  # a YAML syntax error with its line (Snakemake names none)
            workflow.configfile(files[0])
        profile = pipeline_config.load_profile(config, files, CHECKOUT)
        pipeline_config.check_packaged_teachers(profile, files)  # a real teacher's package, before 80 jobs are planned
        if workflow.is_main_process:  # (a job's own Snakemake process, e.g. on a SLURM node, was checked already)
            pipeline_config.check_run_specs(profile, files)
    except PitError as err:
        raise WorkflowError(str(err)) from None
    except ImportError as err:  # torch only in the jobs' conda env: the jobs check their specs themselves
        logger.warning(f"run specs not checked when reading the config (cannot import pit: {err})")
    return profile


P = load_config()
ENV = "../envs/pit.yaml"  # conda env of every rule (paths in rules are relative to their .smk)

# The profile's names (pit/pipeline/profile.py) and spec builders (pit/pipeline/specs.py), as the rules use them.
PROFILE, CORPUS, TOKENIZERS, PRETRAIN, POST, SEEDS = P.name, P.corpus, P.tokenizers, P.pretrain, P.post, P.seeds
TEACHER_SLOTS, SCRATCH_SLOTS, STAND_IN_SLOTS, MODES = P.teacher_slots, P.scratch_slots, P.stand_in_slots, P.modes
GGUF_SLOTS = P.gguf_slots  # teacher slots declared as a GGUF model: materialised in the data stage
INTERFACES, ARMS, LORA_TASKS, FRONTIER_LRS, DOMAINS = P.interfaces, P.arms, P.lora_tasks, P.frontier_lrs, P.domains
TABLES, FIGURES, STUDY_FIGURES = P.tables, P.figures, P.study_figures
DECISION = P.decision  # a profile's one comparison a user decides by (docs/real.md); {} for none
PRETRAIN_RES = PRETRAIN["resources"]  # threads, gpus, mem_mb, runtime (partition) of training and diagnostics jobs
POST_RES = POST["resources"]  # ... of the LoRA and evaluation jobs


def planned_runtime(rule, name_of):
    """A rule's `runtime` (minutes): its resources' number (diagnose: none, the executor's default), or with `runtime:
    {device, margin}` a callable giving each job ceil(margin x its planned minutes on that device kind) (`pit plan`,
    pit/pipeline/plan.py, docs/plan.md; the plan is built once, at the first job), a retry attempt x that."""
    runtime = config[pipeline_plan.RUNTIME_SECTIONS[rule]]["resources"]["runtime"]
    if not isinstance(runtime, dict):
        return None if rule == "diagnose" else runtime

    def minutes(wildcards, attempt):
        try:
            return pipeline_plan.planned_runtime(P, rule, name_of(wildcards), attempt)
        except (PitError, ImportError) as err:
            raise WorkflowError(f"the runtime of rule {rule} from the plan (runtime: {runtime}): {err}") from None

    return minutes


def run_job(wildcards):
    """The plan's name of a job on one run (pretrain, diagnose)."""
    return pipeline_plan.run_name(run_of(wildcards))


def task_job(wildcards):
    """The plan's name of a job on one run and task (lora, evaluate)."""
    return pipeline_plan.run_name(run_of(wildcards), wildcards.task)


def slot_job(wildcards):
    """The plan's name of a job on one teacher slot (the stand-in teacher, a real teacher's evaluation)."""
    return wildcards.slot


def diagnose_resources():
    """The diagnosis jobs' resources: memory, and a runtime only where the profile's comes from the plan."""
    runtime = planned_runtime("diagnose", run_job)
    return {"mem_mb": PRETRAIN_RES["mem_mb"], **({} if runtime is None else {"runtime": runtime})}


# One run of an arm, as rule wildcards: (mode, slot, interface, seed); seed None without `seeds` (today's paths).
RUN = ("{mode}", "{slot}", "{interface}", "{seed}" if SEEDS else None)
tokenizers_of_kind, tokenizer_source_files, token_files, val_tokens, run_inputs, tokenizer_spec = (
    P.tokenizers_of_kind,
    P.tokenizer_source_files,
    P.token_files,
    P.val_tokens,
    P.run_inputs,
    P.tokenizer_spec,
)
teacher_source, run_summaries, transition_runs = P.teacher_source, P.run_summaries, P.transition_runs
diagnostics_files, posttrain_outputs, table_files = P.diagnostics_files, P.posttrain_outputs, P.table_files
corpus_spec, tokenize_spec, train_spec = (
    partial(f, P) for f in (specs.corpus_spec, specs.tokenize_spec, specs.train_spec)
)
stand_in_spec, diagnose_spec, lora_spec = (
    partial(f, P) for f in (specs.stand_in_spec, specs.diagnose_spec, specs.lora_spec)
)
evaluate_spec, evaluate_tasks = partial(specs.evaluate_spec, P), partial(specs.evaluate_tasks, P)
teacher_evaluate_spec, EVALUATED_TASKS = partial(specs.teacher_evaluate_spec, P), P.evaluated_tasks()


# The domain of every wildcard, for all rules. Two places narrow it further, because there the value
# chooses between rules with the same output pattern: the tokenizer rules (by tokenizer kind) and the
# stand-in teachers (slots with `stand_in`).
wildcard_constraints:
    mode=name_pattern(MODES),
    slot=name_pattern(TEACHER_SLOTS + SCRATCH_SLOTS),
    interface=name_pattern(ARMS),
    task=name_pattern(LORA_TASKS),
    tokenizer=name_pattern(TOKENIZERS),
    split=name_pattern(SPLITS),
    number=name_pattern(LOSS_FIGURES),
    seed=name_pattern(SEEDS),
    domain=name_pattern(DOMAINS),


# --- Paths that need the profile or Snakemake (wildcards, report(), temp()); the rest: pit/pipeline/layout.py


def corpus_manifest():
    return layout.corpus_manifest(CORPUS)


def run_of(wildcards):
    """The run (mode, slot, interface, seed) a job's wildcards name."""
    return (wildcards.mode, wildcards.slot, wildcards.interface, wildcards.get("seed"))


def pretrain_inputs(wildcards):
    """Inputs of one pretraining arm: its data, and the teacher the pipeline makes first (a stand-in it trains, or
    a GGUF model it materialises)."""
    inputs = run_inputs(wildcards.mode, wildcards.slot if wildcards.mode == "teacher" else None)
    if wildcards.mode == "teacher" and wildcards.slot in STAND_IN_SLOTS + GGUF_SLOTS:
        inputs["teacher"] = teacher_source(wildcards.slot)
    return inputs


def gguf_file_input(slot):
    """A GGUF slot's input: its .gguf file where `gguf` is a path (a changed file remakes the folder); none for a
    packaged model (its package's version is pinned, its sha256 checked)."""
    source = PRETRAIN["teacher_slots"][slot]["gguf"]
    return [source] if source.endswith(".gguf") else []


def run_val_tokens(wildcards):
    """The validation token file of one run (a teacher slot may read its own tokenizer's)."""
    return val_tokens(wildcards.mode, wildcards.slot if wildcards.mode == "teacher" else None)


def merged_output(path):
    """A LoRA run's merged model: kept (the default), or with `posttrain.keep_merged: false` a temporary output
    that Snakemake deletes once its evaluation has read it (base + adapter rebuild it: pit lora merge)."""
    return path if POST.get("keep_merged", True) else temp(path)


def table_outputs(name):
    """The files of one table (`pit table` writes .md, .csv, .tex, .json and .html); the HTML page goes into the
    HTML report with its caption (a browser opens it inline, where a CSV link only downloads)."""
    outputs = {suffix: f"{table_stem(name)}.{suffix}" for suffix in ("md", "csv", "tex", "json", "html")}
    outputs["html"] = report(outputs["html"], caption=f"../report/{name}.rst", category="Tables")
    return outputs


def figure_output(name):
    """A figure, in the HTML report with its caption workflow/report/<caption_name(name)>.rst (REPORT.md's too)."""
    return report(figure_file(name), caption=f"../report/{caption_name(name)}.rst", category="Figures")


def figure_files():
    return [figure_file(name) for name in FIGURES]


def transition_args():
    """`--checkpoint C --label L` per traced run, then `--prompt P` per prompt: the text itself, shell-quoted
    (line breaks and leading spaces included), not its JSON."""
    checkpoints = [f"--checkpoint {r} --label {i.upper()}" for r, i in zip(transition_runs(), INTERFACES)]
    prompts = [f"--prompt {shlex.quote(p)}" for p in config["report"]["transition_prompts"]]
    return " ".join(checkpoints + prompts)


def get_final_output():
    """The default target's inputs: the token files, every pretraining arm and its diagnostics, the
    tables, figures and REPORT.md, and the MLflow summary run (post-training comes in through
    Table 4 and the side-effects figure)."""
    return [
        *token_files(),
        *run_summaries(),
        *diagnostics_files(),
        *table_files(),
        *figure_files(),
        REPORT_FILE,
        MLFLOW_SUMMARY_FILE,
    ]
