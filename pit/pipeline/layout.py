"""Where every stage writes, relative to the working directory (docs/workflow.md): one function per kind of
file, so that no rule and no spec spells a path. A run is the tuple (mode, slot, interface, seed); seed None in a
profile without `seeds`."""

from __future__ import annotations

RESULTS_ROOT = "results"  # every stage's folder lies below it
PRETRAIN_ROOT = f"{RESULTS_ROOT}/pretrain"
STAND_IN_ROOT = f"{RESULTS_ROOT}/teachers"
DIAGNOSTICS_ROOT = f"{RESULTS_ROOT}/diagnostics"
POSTTRAIN_ROOT = f"{RESULTS_ROOT}/posttrain"
FINAL_EVAL = "final-eval"  # a run's final model scored as it is, in its post-training folder
TABLES_DIR = f"{RESULTS_ROOT}/tables"
FIGURES_DIR = f"{RESULTS_ROOT}/figures"
REPORT_FILE = f"{RESULTS_ROOT}/REPORT.md"
MLFLOW_SUMMARY_FILE = f"{RESULTS_ROOT}/mlflow/summary.json"


def log_path(stage: str, name: str) -> str:
    """The log file of one job: results/logs/<stage>/<name>.log."""
    return f"{RESULTS_ROOT}/logs/{stage}/{name}.log"


def run_log(stage: str, run: tuple, prefix: str = "") -> str:
    """The log of a job on one run: results/logs/<stage>/<prefix><mode>_<slot>_<interface>[_seed<k>].log."""
    return log_path(stage, prefix + "_".join(run[:3]) + ("" if run[3] is None else f"_seed{run[3]}"))


def corpus_manifest(corpus: str) -> str:
    return f"resources/corpus/{corpus}/manifest.json"


def materialized_teacher(slot: str) -> str:
    """The folder a teacher slot declared as a GGUF model (`gguf:`) is materialised into: resources/teachers/<slot>
    (an input the pipeline brings in, beside the corpus; `pit teacher materialize`)."""
    return f"resources/teachers/{slot}"


def tokenizer_dir(tokenizer: str) -> str:
    return f"{RESULTS_ROOT}/tokenizers/{tokenizer}"


def token_file(tokenizer: str, split: str, domain: str | None = None) -> str:
    """The flat token file of one split (read it with pit.data.reader.TokenFile), or of one corpus domain's part
    of it: results/data/<tokenizer>/[<domain>/]<split>.bin."""
    return f"{RESULTS_ROOT}/data/{tokenizer}/" + ("" if domain is None else f"{domain}/") + f"{split}.bin"


def token_sidecar(tokenizer: str, split: str, domain: str | None = None) -> str:
    """The JSON sidecar of a token file."""
    return token_file(tokenizer, split, domain)[: -len(".bin")] + ".json"


def run_path(run: tuple) -> str:
    """<mode>/<slot>/<interface>, and /seed<k> below it in a profile with `seeds`: a run's place in every stage."""
    mode, slot, interface, seed = run
    return f"{mode}/{slot}/{interface}" + ("" if seed is None else f"/seed{seed}")


def run_dir(run: tuple) -> str:
    return f"{PRETRAIN_ROOT}/{run_path(run)}"


def run_file(run: tuple, name: str) -> str:
    """A file or folder of a pretraining run folder (summary.json, final, ...)."""
    return f"{run_dir(run)}/{name}"


def final_model(run: tuple) -> str:
    """The final checkpoint of a pretraining run: what diagnostics and post-training start from."""
    return run_file(run, "final")


def stand_in_dir(slot: str) -> str:
    return f"{STAND_IN_ROOT}/{slot}"


def stand_in_file(slot: str, name: str) -> str:
    return f"{stand_in_dir(slot)}/{name}"


def teacher_eval_dir(slot: str) -> str:
    """The scores of a real teacher slot's own checkpoint (before any continued pretraining)."""
    return f"{STAND_IN_ROOT}/{slot}/eval"


def final_eval_dir(run: tuple) -> str:
    """`pit evaluate` of a pretraining run's final model as it is, without LoRA (the profile's `decision.tasks`):
    beside the run's LoRA tasks in the post-training stage."""
    return f"{POSTTRAIN_ROOT}/{run_path(run)}/{FINAL_EVAL}"


def generation_file(name: str) -> str:
    """The greedy continuations of `decision.prompts` by one model (teacher, or an arm's first seed)."""
    return f"{POSTTRAIN_ROOT}/generations/{name}.json"


def diagnostics_file(run: tuple) -> str:
    return f"{DIAGNOSTICS_ROOT}/{run_path(run)}/diagnostics.json"


def lora_dir(run: tuple, task: str) -> str:
    """One `pit lora train` run: adapter/, merged/, side_effects.json, summary.json, eval/, base/."""
    return f"{POSTTRAIN_ROOT}/{run_path(run)}/{task}"


def lora_file(run: tuple, task: str, name: str) -> str:
    return f"{lora_dir(run, task)}/{name}"


def table_stem(name: str) -> str:
    """results/tables/<name>: `pit table` writes <stem>.md, .csv, .tex, .json (caption, units) and .html."""
    return f"{TABLES_DIR}/{name}"


def figure_file(name: str) -> str:
    return f"{FIGURES_DIR}/{name}.png"


def run_name(run: tuple, prefix: str = "") -> str:
    """A run's MLflow name: <prefix><mode>-<slot>-<interface>[-s<seed>]."""
    return prefix + "-".join(run[:3]) + ("" if run[3] is None else f"-s{run[3]}")
