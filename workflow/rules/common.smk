"""Configuration and helpers shared by every stage's rules.

Each stage file (workflow/rules/<stage>.smk) adds its final outputs to ALL_TARGETS; `rule all`
in the Snakefile is defined after every include, so it sees them all.
"""

import json
import re
import shlex
from pathlib import Path

import jsonschema
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

# The embedded default profile; `--configfile FILE` replaces it (it is not merged into it).
if not workflow.overwrite_configfiles:
    configfile: Path(workflow.basedir) / "config.yaml"


def validate_config(config):
    """Validate against the schema; a bad key or value stops the run with one line naming it."""
    try:
        validate(config, "../schemas/config.schema.yaml", set_default=False)
    except WorkflowError as err:
        cause = err.__context__  # snakemake raises from inside `except ValidationError`
        if not isinstance(cause, jsonschema.ValidationError):
            raise
        where = ".".join(str(p) for p in cause.absolute_path) or "(top level)"
        raise WorkflowError(f"invalid config at {where}: {cause.message}") from None


validate_config(config)

ENV = "../../envs/pit.yaml"  # conda env of every rule (paths in rules are relative to their .smk)
ALL_TARGETS = []  # final outputs of every stage, built by `rule all`


def json_arg(value):
    """A config value as one shell-quoted JSON argument: `--spec {params.spec}`."""
    return shlex.quote(json.dumps(value, sort_keys=True))


def logged(command):
    """A rule's shell command with its output to {log}; on failure the log's last line (the error) is shown."""
    return f"{command} > {{log}} 2>&1 || (tail -n 1 {{log}} >&2; exit 1)"


def log_path(stage, name):
    """The log file of one job: results/logs/<stage>/<name>.log."""
    return f"results/logs/{stage}/{name}.log"


def name_pattern(names):
    """A wildcard constraint matching exactly `names` (and nothing when empty)."""
    return "|".join(re.escape(n) for n in names) or "(?!)"


# Paths of the data stage's products, for later stages to use as inputs.
CORPUS = config["corpus"]["name"]
TOKENIZERS = sorted(config["tokenizers"])
SPLITS = ["train", "val"]


def corpus_manifest():
    return f"resources/corpus/{CORPUS}/manifest.json"


def tokenizer_dir(tokenizer):
    return f"results/tokenizers/{tokenizer}"


def tokenizers_of_kind(kind):
    return [name for name in TOKENIZERS if config["tokenizers"][name]["kind"] == kind]


def token_file(tokenizer, split):
    """The flat token file of one split (read it with pit.data.reader.TokenFile)."""
    return f"results/data/{tokenizer}/{split}.bin"


def token_sidecar(tokenizer, split):
    """The JSON sidecar of a token file."""
    return f"results/data/{tokenizer}/{split}.json"


def job_resources(res):
    """Snakemake `resources:` of a job from a config `resources` section ({threads, gpus, mem_mb,
    runtime, partition}): `gpus` for local runs, and the names snakemake-executor-plugin-slurm reads
    (`gpu` -> --gpus, `slurm_partition` -> --partition; mem_mb and runtime (minutes) as they are)."""
    resources = {"gpus": res["gpus"], "gpu": res["gpus"], "mem_mb": res["mem_mb"], "runtime": res["runtime"]}
    if res.get("partition"):
        resources["slurm_partition"] = res["partition"]
    return resources


def pit_launcher(res):
    """The command a GPU job runs `pit` with: plain `pit`, or, when the config asks for more than one
    GPU, `torchrun` with one process per GPU (DDP; `pit train` and the checkpoints are unchanged)."""
    if res["gpus"] > 1:
        return "torchrun --standalone --nproc_per_node {resources.gpus} -m pit.cli"
    return "pit"
