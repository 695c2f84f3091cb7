"""Everything the stage files share: config validation, the wildcard constraints, every path, every
`pit` spec, resources, and the final targets (get_final_output). docs/workflow.md has the list.

The stage files (data, pretrain, diagnostics, posttrain, report, tracking) hold only rules; each rule
wires files to one `pit` subcommand and takes its paths and settings from the helpers below.
"""

import json
import os
import re
import shlex
import sys
from pathlib import Path

import jsonschema
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

CHECKOUT = Path(workflow.basedir).resolve().parent  # the clone this Snakefile belongs to
DEFAULT_CONFIG_FILE = CHECKOUT / "config" / "config.yaml"


def check_checkout():
    """Refuse (one line) when the imported `pit` is another clone's different code, and export this checkout to
    the jobs (PIT_CHECKOUT), whose `pit` makes the same check (pit/checkout.py, docs/install.md)."""
    os.environ["PIT_CHECKOUT"] = str(CHECKOUT.resolve())  # pit.checkout.CHECKOUT_ENV
    try:
        from pit.checkout import checkout_mismatch
    except ImportError:  # pit only in the jobs' conda env: each job checks itself
        return
    reason = checkout_mismatch(CHECKOUT)
    if reason:
        raise WorkflowError(reason)


def job_environment():
    """Defaults for the jobs' environment: their `pit` is the one of the environment Snakemake runs in (its
    interpreter's folder goes first on PATH, so `.venv/bin/snakemake` needs no activated venv; a job's conda env,
    activated later, still comes first), caches of derived files go to .snakemake/cache/ of the working
    directory, not the user's home, and MLflow sends no telemetry (docs/install.md); a value already set wins."""
    path = os.environ.get("PATH", "").split(os.pathsep)
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), *path])
    cache = Path(".snakemake", "cache").resolve()
    os.environ.setdefault("MPLCONFIGDIR", str(cache / "matplotlib"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache / "torchinductor"))
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


check_checkout()
job_environment()


def check_working_directory():
    """Refuse (one line) a run whose working directory is inside workflow/ (e.g. `cd workflow && snakemake -s
    Snakefile`): Snakemake would plan every path relative to it and leave workflow/.snakemake/ behind."""
    cwd, inside = Path.cwd().resolve(), Path(workflow.basedir).resolve()
    if cwd == inside or inside in cwd.parents:
        raise WorkflowError(
            f"the working directory {cwd} is inside the workflow folder {inside}; run snakemake from the "
            f"checkout root ({inside.parent}), or pass --directory FOLDER"
        )


check_working_directory()


def config_files():
    """The config files this run read: the --configfile files, else the embedded default profile."""
    return [Path(f) for f in workflow.overwrite_configfiles] or [DEFAULT_CONFIG_FILE]


def shown(path):
    """A path as the user would type it: relative to the working directory when it lies below it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def load_default_config():
    """The embedded default profile (when no --configfile is given), as the `configfile:` directive reads it;
    a YAML syntax error is one line `FILE:LINE:COLUMN: ...` (Snakemake's own loader names neither)."""
    try:
        yaml.safe_load(DEFAULT_CONFIG_FILE.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or " ".join(str(err).split())
        context, start = getattr(err, "context", None), getattr(err, "context_mark", None)
        if context and start is not None:
            problem += f" ({context} at line {start.line + 1})"
        raise WorkflowError(
            f"{shown(DEFAULT_CONFIG_FILE)}{where}: YAML syntax error in the config: {problem}"
        ) from None
    except OSError as err:
        raise WorkflowError(f"config file {shown(DEFAULT_CONFIG_FILE)}: {err.strerror}") from None
    workflow.configfile(DEFAULT_CONFIG_FILE)


def key_line(node, keys):
    """(0-based line of the deepest key on the path `keys` in a YAML node tree, whether the whole path is there)."""
    line = node.start_mark.line
    for key in keys:
        if isinstance(node, yaml.MappingNode):
            item = next(((k, v) for k, v in node.value if k.value == str(key)), None)
            node, mark = (item[1], item[0].start_mark) if item else (None, None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            mark = node.start_mark
        else:
            node = None
        if node is None:
            return line, False
        line = mark.line
    return line, True


def config_line(keys):
    """'FILE:LINE' of the config key at `keys` (keys and list indices) in the last config file that sets it, else
    of its nearest parent; '' when no config file has either (e.g. a value given with --config)."""
    exact = parent = ""
    for path in config_files():
        try:
            root = yaml.compose(Path(path).read_text())
        except (OSError, yaml.YAMLError):
            continue
        if root is not None:
            line, whole = key_line(root, keys)
            if whole:
                exact = f"{shown(path)}:{line + 1}"
            else:
                parent = f"{shown(path)}:{line + 1}"
    return exact or parent


def config_error(keys, message):
    """One WorkflowError line, as a compiler prints one: `FILE:LINE: invalid config at KEY: what is wrong`."""
    where = ".".join(str(k) for k in keys) or "(top level)"
    line = config_line(keys)
    return WorkflowError((f"{line}: " if line else "") + f"invalid config at {where}: {message}")


def validate_config(config):
    """Validate against the schema; a bad key or value stops the run with one line naming it, its file and line."""
    try:
        validate(config, "../schemas/config.schema.yaml", set_default=False)
    except WorkflowError as err:
        cause = err.__context__  # snakemake raises from inside `except ValidationError`
        if not isinstance(cause, jsonschema.ValidationError):
            raise
        raise config_error(list(cause.absolute_path), cause.message) from None


if not workflow.overwrite_configfiles:
    load_default_config()
validate_config(config)

ENV = "../envs/pit.yaml"  # conda env of every rule (paths in rules are relative to their .smk)


# --- Shell commands ---------------------------------------------------------------------------------


def json_arg(value):
    """A config value as one shell-quoted JSON argument: `--spec {params.spec}`."""
    return shlex.quote(json.dumps(value, sort_keys=True))


def logged(command):
    """A rule's shell command with its output to {log}; on failure the log's last line (the error) is shown."""
    return f"{command} > {{log}} 2>&1 || (tail -n 1 {{log}} >&2; exit 1)"


def log_path(stage, name):
    """The log file of one job: results/logs/<stage>/<name>.log."""
    return f"results/logs/{stage}/{name}.log"


def run_log(stage, run, prefix=""):
    """The log of a job on one run: results/logs/<stage>/<prefix><mode>_<slot>_<interface>[_seed<k>].log."""
    return log_path(stage, prefix + "_".join(run[:3]) + ("" if run[3] is None else f"_seed{run[3]}"))


def name_pattern(names):
    """A wildcard constraint matching exactly `names` (and nothing when empty)."""
    return "|".join(re.escape(n) for n in names) or "(?!)"


# --- The profile's names ----------------------------------------------------------------------------

PROFILE = config["profile"]
CORPUS = config["corpus"]["name"]
TOKENIZERS = sorted(config["tokenizers"])
SPLITS = ["train", "val"]
PRETRAIN = config["pretrain"]
TEACHER_SLOTS = list(PRETRAIN["teacher_slots"])
SCRATCH_SLOTS = list(PRETRAIN["scratch_slots"])
STAND_IN_SLOTS = [s for s in TEACHER_SLOTS if "stand_in" in PRETRAIN["teacher_slots"][s]]
INTERFACES = list(PRETRAIN["interfaces"])
MODES = {"teacher": TEACHER_SLOTS, "scratch": SCRATCH_SLOTS}
# more arms of each mode's slots (pretrain.teacher_arms, pretrain.scratch_arms): name -> {`interface` overrides
# (PIT arms), train: run-setting overrides, seeds: a subset of `seeds`}; the name's prefix is the arm's kind. An
# entry named like an arm of `interfaces` (pit, tt, untied) sets only that arm's train and seeds.
ARM_ENTRIES = {mode: PRETRAIN.get(f"{mode}_arms", {}) for mode in MODES}
EXTRA_ARMS = {mode: {a: e for a, e in ARM_ENTRIES[mode].items() if a not in INTERFACES} for mode in MODES}
ARM_KEYS = ("train", "seeds")  # the keys of an arm entry that are not `interface` overrides


def arm_kind(arm):
    """The interface kind of an arm: its name up to the first '-' (pit-head -> pit, tt-norewarm -> tt)."""
    return arm.split("-", 1)[0]


MODE_ARMS = {  # the arms of each mode's slots; a mode's extra arms sit right after the arm of their kind
    mode: [a for i in INTERFACES for a in [i, *(x for x in EXTRA_ARMS[mode] if arm_kind(x) == i)]] for mode in MODES
}
ARMS = list(dict.fromkeys(MODE_ARMS["teacher"] + MODE_ARMS["scratch"]))
PRETRAIN_RES = PRETRAIN["resources"]  # threads, gpus, mem_mb, runtime (partition) of training and diagnostics jobs
POST = config["posttrain"]
POST_ARMS = POST.get("interfaces", ARMS)  # the pretraining arms that get LoRA post-training
for _mode, _arms in ARM_ENTRIES.items():
    for _arm, _entry in _arms.items():
        if _arm in INTERFACES and set(_entry) - set(ARM_KEYS):
            raise config_error(
                ["pretrain", f"{_mode}_arms", _arm],
                f"{sorted(set(_entry) - set(ARM_KEYS))}: an entry for the arm {_arm} of pretrain.interfaces takes only "
                f"{list(ARM_KEYS)} (its interface is pretrain.interface)",
            )
        if arm_kind(_arm) not in INTERFACES:
            raise config_error(
                ["pretrain", f"{_mode}_arms", _arm],
                f"a {arm_kind(_arm)} arm: pretrain.interfaces must hold {arm_kind(_arm)}",
            )
        if arm_kind(_arm) != "pit" and set(_entry) - set(ARM_KEYS):
            raise config_error(
                ["pretrain", f"{_mode}_arms", _arm],
                f"{sorted(set(_entry) - set(ARM_KEYS))}: interface settings are for PIT arms (pit-*); a "
                f"{arm_kind(_arm)} arm takes only {list(ARM_KEYS)}",
            )
if set(POST_ARMS) - set(ARMS):
    raise config_error(
        ["posttrain", "interfaces"],
        f"{sorted(set(POST_ARMS) - set(ARMS))}: not a pretraining arm of this profile (expected some of {ARMS})",
    )
POST_RES = POST["resources"]  # ... of the LoRA and evaluation jobs
LORA_TASKS = list(POST["tasks"])  # LoRA task -> its out-of-domain evaluation tasks
FRONTIER_LRS = POST.get("frontier_lrs", [])  # more LoRA learning rates: the side-effect frontier (rule lora)
LOSS_FIGURES = {"3": "scratch", "4": "teacher"}  # Figure number -> the mode whose loss curves it shows
SEEDS = [str(s) for s in config.get("seeds", [])]  # seeds of every arm (study profile); none: one run per arm
# One run of an arm, as rule wildcards: (mode, slot, interface, seed); seed None without `seeds` (today's paths).
RUN = ("{mode}", "{slot}", "{interface}", "{seed}" if SEEDS else None)
DOMAINS = config["corpus"].get("domains", {})  # named parts of a local corpus, by document path
DATA_ROLES = PRETRAIN.get("domains", {})  # stand_in | teacher | scratch -> the domain its runs read (none: all)


def slot_entry(mode, slot):
    return PRETRAIN[f"{mode}_slots"][slot]


def run_seeds(mode, slot, arm):
    """The seeds of one (mode, slot, arm): the arm's `seeds`, else the slot's, else the profile's."""
    entry = ARM_ENTRIES[mode].get(arm, {})
    seeds = entry.get("seeds", slot_entry(mode, slot).get("seeds"))
    return SEEDS if seeds is None else [str(s) for s in seeds]


def check_seed_subsets():
    """A slot's or an arm's `seeds` are some of the profile's `seeds` (one line naming the others)."""
    places = [(["pretrain", f"{m}_slots", s], e) for m in MODES for s, e in PRETRAIN[f"{m}_slots"].items()]
    places += [(["pretrain", f"{m}_arms", a], e) for m in MODES for a, e in ARM_ENTRIES[m].items()]
    for keys, entry in places:
        extra = [s for s in entry.get("seeds", []) if str(s) not in SEEDS]
        if extra:
            raise config_error(keys + ["seeds"], f"{extra}: not among the profile's seeds {SEEDS or '(none)'}")
    for name in [d for d in DATA_ROLES.values() if d is not None]:
        if name not in DOMAINS:
            raise config_error(
                ["pretrain", "domains"], f"{name!r}: not a corpus domain (corpus.domains: {list(DOMAINS)})"
            )
    for mode in MODES:
        for slot, entry in PRETRAIN[f"{mode}_slots"].items():
            if entry.get("sweep_of") is not None and entry["sweep_of"] not in MODES[mode]:
                raise config_error(
                    ["pretrain", f"{mode}_slots", slot, "sweep_of"],
                    f"{entry['sweep_of']!r}: not a {mode} slot (expected one of {MODES[mode]})",
                )


check_seed_subsets()


def tokenizers_of_kind(kind):
    return [name for name in TOKENIZERS if config["tokenizers"][name]["kind"] == kind]


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


# --- Paths: data ------------------------------------------------------------------------------------


def corpus_spec():
    """`pit data download`: the corpus section without its domains (they select documents when tokenizing, so the
    download and its manifest do not depend on them)."""
    return {k: v for k, v in config["corpus"].items() if k != "domains"}


def corpus_manifest():
    return f"resources/corpus/{CORPUS}/manifest.json"


def tokenizer_dir(tokenizer):
    return f"results/tokenizers/{tokenizer}"


def token_file(tokenizer, split, domain=None):
    """The flat token file of one split (read it with pit.data.reader.TokenFile), or of one corpus domain's part
    of it: results/data/<tokenizer>/[<domain>/]<split>.bin."""
    return f"results/data/{tokenizer}/" + ("" if domain is None else f"{domain}/") + f"{split}.bin"


def token_sidecar(tokenizer, split, domain=None):
    """The JSON sidecar of a token file."""
    return token_file(tokenizer, split, domain)[: -len(".bin")] + ".json"


def mode_tokenizer(mode):
    """The tokenizer of a mode's runs (teacher: the teachers' GPT-2, scratch: the trained BPE)."""
    return PRETRAIN["tokenizer"][mode]


def role_data(role):
    """(tokenizer, domain) of the token files a role's runs read: role stand_in | teacher | scratch; the stand-in
    teachers use the teacher tokenizer; domain None = the whole corpus (pretrain.domains)."""
    return mode_tokenizer("teacher" if role == "stand_in" else role), DATA_ROLES.get(role)


def token_files():
    """Every token file of the profile: each tokenizer's whole splits, and the domains the runs read."""
    files = [token_file(t, s) for t in TOKENIZERS for s in SPLITS]
    used = {role_data(role) for role in ("stand_in", "teacher", "scratch")}
    return files + [token_file(t, s, d) for t, d in sorted(used, key=str) if d is not None for s in SPLITS]


def val_tokens(mode):
    """The validation token file of a mode's runs."""
    return token_file(*role_data(mode)[:1], "val", role_data(mode)[1])


# --- Paths: pretraining -----------------------------------------------------------------------------

RESULTS_ROOT = "results"  # every stage's folder lies below it
PRETRAIN_ROOT = f"{RESULTS_ROOT}/pretrain"


def run_of(wildcards):
    """The run (mode, slot, interface, seed) a job's wildcards name."""
    return (wildcards.mode, wildcards.slot, wildcards.interface, wildcards.get("seed"))


def run_path(run):
    """<mode>/<slot>/<interface>, and /seed<k> below it in a profile with `seeds`: a run's place in every stage."""
    mode, slot, interface, seed = run
    return f"{mode}/{slot}/{interface}" + ("" if seed is None else f"/seed{seed}")


def run_dir(run):
    return f"{PRETRAIN_ROOT}/{run_path(run)}"


def run_file(run, name):
    """A file or folder of a pretraining run folder (summary.json, final, ...)."""
    return f"{run_dir(run)}/{name}"


def final_model(run):
    """The final checkpoint of a pretraining run: what diagnostics and post-training start from."""
    return run_file(run, "final")


def pretrain_runs():
    """(mode, slot, interface, seed) of every pretraining run in this profile: each arm once per seed (run_seeds)."""
    return [
        (m, s, i, k)
        for m, slots in MODES.items()
        for s in slots
        for i in MODE_ARMS[m]
        for k in (run_seeds(m, s, i) or [None])
    ]


def sweep_of(run):
    """The slot whose run settings a sweep slot varies (`sweep_of: <slot>`, e.g. a learning-rate sweep), else None:
    a sweep slot's runs are pretrained and compared in the stability claims, not diagnosed or post-trained."""
    return slot_entry(*run[:2]).get("sweep_of")


def diagnosed_runs():
    """The pretraining runs `pit diagnose` reads: those of every slot that is not a sweep slot."""
    return [run for run in pretrain_runs() if not sweep_of(run)]


def posttrain_runs():
    """The pretraining runs that get LoRA post-training (posttrain.interfaces), in slots that are not sweep slots."""
    return [run for run in diagnosed_runs() if run[2] in POST_ARMS]


def arm_interface(mode, interface):
    """The `interface` settings of a mode's arm: the profile's PIT settings, an extra PIT arm's overrides, its kind."""
    overrides = {k: v for k, v in EXTRA_ARMS[mode].get(interface, {}).items() if k not in ARM_KEYS}
    return {**PRETRAIN["interface"], **overrides, "kind": arm_kind(interface)}


def run_summaries():
    """The summary.json of every pretraining arm: the pretraining stage's final outputs."""
    return [run_file(run, "summary.json") for run in pretrain_runs()]


STAND_IN_ROOT = "results/teachers"


def stand_in_dir(slot):
    return f"{STAND_IN_ROOT}/{slot}"


def stand_in_file(slot, name):
    return f"{stand_in_dir(slot)}/{name}"


def teacher_source(slot):
    """A slot's teacher: the final checkpoint of its stand-in, or a hub id / local folder."""
    entry = PRETRAIN["teacher_slots"][slot]
    return stand_in_file(slot, "final") if "stand_in" in entry else entry["teacher"]


def run_inputs(role):
    """A training run's data: the train and val token files of its role (role_data) and the tokenizer folder."""
    tokenizer, domain = role_data(role)
    inputs = {split: token_file(tokenizer, split, domain) for split in SPLITS}
    inputs["tokenizer"] = tokenizer_dir(tokenizer)
    return inputs


def pretrain_inputs(wildcards):
    """Inputs of one pretraining arm: its data, and the stand-in teacher the pipeline trains first."""
    inputs = run_inputs(wildcards.mode)
    if wildcards.mode == "teacher" and wildcards.slot in STAND_IN_SLOTS:
        inputs["teacher"] = teacher_source(wildcards.slot)
    return inputs


# --- Paths: diagnostics, post-training --------------------------------------------------------------

DIAGNOSTICS_ROOT = "results/diagnostics"
POSTTRAIN_ROOT = "results/posttrain"


def diagnostics_file(run):
    return f"{DIAGNOSTICS_ROOT}/{run_path(run)}/diagnostics.json"


def diagnostics_files():
    return [diagnostics_file(run) for run in diagnosed_runs()]


def lora_dir(run, task):
    """One `pit lora train` run: adapter/, merged/, side_effects.json, summary.json, eval/, base/."""
    return f"{POSTTRAIN_ROOT}/{run_path(run)}/{task}"


def lora_file(run, task, name):
    return f"{lora_dir(run, task)}/{name}"


def merged_output(path):
    """A LoRA run's merged model: kept (the default), or with `posttrain.keep_merged: false` a temporary output
    that Snakemake deletes once its evaluation has read it (base + adapter rebuild it: pit lora merge)."""
    return path if POST.get("keep_merged", True) else temp(path)


def posttrain_outputs():
    """Every LoRA run's evaluations and side effects (and its frontier, with posttrain.frontier_lrs): the
    post-training stage's final outputs."""
    return [
        lora_file(run, t, leaf)
        for run in posttrain_runs()
        for t in LORA_TASKS
        for leaf in ("eval", "base", "side_effects.json")
    ]


# --- Paths: tables, figures, report -----------------------------------------------------------------

TABLES_DIR = "results/tables"
FIGURES_DIR = "results/figures"
REPORT_FILE = "results/REPORT.md"
MLFLOW_SUMMARY_FILE = "results/mlflow/summary.json"
TABLES = ["claims", "table1", "table2", "table3", "table4_scores", "table4_side_effects"]  # claims: a verdict each
STUDY_TABLES = ["stability", "teacher_gap", "frontier"] if SEEDS else []  # the study's supporting tables
TABLES += STUDY_TABLES
CLAIM_GROUPS = ["interface", "training", "stability", "layerwise", "side_effects", "posttrain"]  # a figure per group
STUDY_FIGURES = ["study_frontier", "study_teacher_gap"] if SEEDS else []  # pit figure claims --study
FIGURES = [
    *(f"figure{n}_{mode}_loss" for n, mode in LOSS_FIGURES.items()),
    "interface_drift",
    "figure2_transition",
    "side_effects",
    *(["stand_in_teachers"] if STAND_IN_SLOTS else []),  # their learning curves
    *(f"claims_{group}" for group in CLAIM_GROUPS),
    *STUDY_FIGURES,
]
TABLE_SUFFIXES = ("md", "csv", "tex", "json", "html")


def table_stem(name):
    """results/tables/<name>: `pit table` writes <stem>.md, .csv, .tex, .json (caption, units) and .html."""
    return f"{TABLES_DIR}/{name}"


def table_outputs(name):
    """The files of one table; the HTML page goes into the HTML report with its caption (a browser opens it
    inline, where a CSV link only downloads)."""
    stem = table_stem(name)
    outputs = {suffix: f"{stem}.{suffix}" for suffix in TABLE_SUFFIXES}
    outputs["html"] = report(outputs["html"], caption=f"../report/{name}.rst", category="Tables")
    return outputs


def table_files():
    """The Markdown file of every table."""
    return [f"{table_stem(name)}.md" for name in TABLES]


def figure_file(name):
    return f"{FIGURES_DIR}/{name}.png"


def figure_output(name, caption):
    """A figure, in the HTML report with the caption workflow/report/<caption>.rst."""
    return report(figure_file(name), caption=f"../report/{caption}.rst", category="Figures")


def figure_files():
    return [figure_file(name) for name in FIGURES]


def transition_runs():
    """The final checkpoints the Figure 2-style trace compares: the transition slot's scratch arms."""
    seed = SEEDS[0] if SEEDS else None  # a seeded profile traces its first seed
    return [final_model(("scratch", config["report"]["transition_slot"], i, seed)) for i in INTERFACES]


def transition_args():
    """`--checkpoint C --label L` per traced run, then `--prompt P` per prompt: the text itself, shell-quoted
    (line breaks and leading spaces included), not its JSON."""
    checkpoints = [f"--checkpoint {r} --label {i.upper()}" for r, i in zip(transition_runs(), INTERFACES)]
    prompts = [f"--prompt {shlex.quote(p)}" for p in config["report"]["transition_prompts"]]
    return " ".join(checkpoints + prompts)


# --- Specs: the JSON object each `pit ... --spec` gets ----------------------------------------------


def tokenize_spec(split, domain=None):
    """`pit data tokenize`: the train split is cut to the token budget, the val split never is; with a corpus
    domain, only its documents. (`--workers` is the job's threads, passed as its own flag: it does not change the
    file.)"""
    spec = {
        "batch_documents": config["tokenize"]["batch_documents"],
        "token_budget": config["tokenize"]["token_budget"] if split == "train" else None,
        "context_length": config["context_length"],
    }
    if domain is not None:
        spec["domain"] = {"name": domain, "include": None, "exclude": [], **DOMAINS[domain]}
    return spec


def run_name(run, prefix=""):
    """A run's MLflow name: <prefix><mode>-<slot>-<interface>[-s<seed>]."""
    return prefix + "-".join(run[:3]) + ("" if run[3] is None else f"-s{run[3]}")


def seed_settings(run, tags):
    """A seeded run's `seed` (initialisation, data order; LoRA initialisation and example order) and its tags."""
    if run[3] is None:
        return {"tags": tags}
    return {"seed": int(run[3]), "tags": {**tags, "seed": run[3]}}


def train_spec(run):
    """`pit train` of one pretraining run (docs/training.md); arms with the same seed see the same data order."""
    mode, slot, interface, _ = run
    data = run_inputs(mode)
    spec = {
        **PRETRAIN["train"],
        **PRETRAIN["mode_train"].get(mode, {}),
        **PRETRAIN[f"{mode}_slots"][slot].get("train", {}),
        **ARM_ENTRIES[mode].get(interface, {}).get("train", {}),
    }
    spec.update(
        mode=mode,
        model=teacher_source(slot) if mode == "teacher" else PRETRAIN["scratch_slots"][slot]["model"],
        interface=arm_interface(mode, interface),
        train_data=data["train"],
        val_data=data["val"],
        tokenizer=data["tokenizer"],
        seq_len=config["context_length"],
        run_name=run_name(run),
        mlflow=config["mlflow"],
        **seed_settings(
            run, {"slot": slot, "profile": PROFILE, **({"sweep_of": sweep_of(run)} if sweep_of(run) else {})}
        ),
    )
    return spec


def stand_in_spec(slot):
    """`pit train` of the tied GPT-2 stand-in teacher of a slot."""
    data = run_inputs("stand_in")
    spec = {**PRETRAIN["train"], **PRETRAIN["stand_in_teacher"]}
    spec.update(
        mode="scratch",
        model=PRETRAIN["teacher_slots"][slot]["stand_in"],
        interface={"kind": "tt"},
        train_data=data["train"],
        val_data=data["val"],
        tokenizer=data["tokenizer"],
        seq_len=config["context_length"],
        run_name=f"stand-in-teacher-{slot}",
        tags={"slot": slot, "profile": PROFILE, "role": "stand-in-teacher"},
        mlflow=config["mlflow"],
    )
    return spec


def diagnose_spec():
    """`pit diagnose` (docs/diagnostics.md): positions, seq_len, bigram_tokens, seed."""
    return dict(config["diagnostics"])


def lora_spec(run, task):
    """`pit lora train` of one pretrained run on one task (docs/posttraining.md); with posttrain.frontier_lrs the
    run also trains its LoRA at those rates (the side-effect frontier, measured on the problems `pit evaluate`
    scores)."""
    mode, slot = run[:2]
    spec = dict(POST["lora"])
    if FRONTIER_LRS:
        spec.update(frontier_lrs=FRONTIER_LRS, frontier_eval_limit=POST["evaluate"]["limit"])
    spec.update(
        base=final_model(run),
        task=task,
        source=POST["data_source"],
        val_data=val_tokens(mode),
        side_effect_seq_len=config["context_length"],
        run_name=run_name(run, f"lora-{task}-"),
        mlflow=config["mlflow"],
        **seed_settings(run, {"slot": slot, "mode": mode, "profile": PROFILE}),
    )
    return spec


def evaluate_tasks(task):
    """A LoRA task and its out-of-domain evaluation tasks, as `pit evaluate` arguments."""
    return " ".join([task, *POST["tasks"][task]])


def evaluate_spec(run, task):
    """`pit evaluate` of one LoRA run and its base; with MLflow on, the scores are one run
    eval-<task>-<mode>-<slot>-<interface>[-s<seed>] in the profile's experiment."""
    spec = {"source": POST["data_source"], **POST["evaluate"]}
    mlflow = config["mlflow"]
    if mlflow["enabled"]:
        spec.update(
            run_name=run_name(run, f"eval-{task}-"),
            experiment=mlflow["experiment"],
            tracking_uri=mlflow["tracking_uri"],
            tags=seed_settings(
                run, {"mode": run[0], "slot": run[1], "interface": run[2], "task": task, "profile": PROFILE}
            )["tags"],
        )
    return spec


# --- Every resolved spec, checked by pit's own run arguments ------------------------------------------


def spec_field_keys(kind, field, overrides):
    """The config key a field of a resolved run spec comes from (`overrides`: the sections that override
    pretrain.train for this run, last wins: mode_train.<mode>, <mode>_slots.<slot>.train and <mode>_arms.<arm>.train,
    or stand_in_teacher)."""
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
        section = PRETRAIN
        for key in override[1:]:
            section = section.get(key, {})
        if field in section:
            return [*override, field]
    return ["pretrain", "train", field]


def check_run_specs():
    """Build pit.training.args.PretrainArgs / LoraArgs from every resolved run spec: the checks `pit train` and
    `pit lora train` make (types, finite values, min_lr <= lr, warmup_steps < max_steps, a global batch that is
    a multiple of micro_batch_size x context_length) fail here, when the config is read, not in the first job."""
    try:
        from pit.errors import PitError
        from pit.training.args import LoraArgs, PretrainArgs
    except ImportError as err:  # pit only in the jobs' conda env: the jobs check their specs themselves
        from snakemake.logging import logger

        logger.warning(f"run specs not checked when reading the config (cannot import pit: {err})")
        return
    specs = [
        (
            "train",
            train_spec(run),
            [
                ["pretrain", "mode_train", run[0]],
                ["pretrain", f"{run[0]}_slots", run[1], "train"],
                ["pretrain", f"{run[0]}_arms", run[2], "train"],
            ],
        )
        for run in pretrain_runs()
    ]
    specs += [("train", stand_in_spec(s), [["pretrain", "stand_in_teacher"]]) for s in STAND_IN_SLOTS]
    specs += [("lora", lora_spec(run, t), None) for run in posttrain_runs() for t in LORA_TASKS]
    for kind, spec, override in specs:
        try:
            (LoraArgs if kind == "lora" else PretrainArgs).from_dict(spec)
        except PitError as err:
            fields = getattr(err, "fields", ())
            keys = spec_field_keys(kind, fields[0], override) if fields else []
            raise config_error(keys, f"run {spec['run_name']}: {err}") from None


if workflow.is_main_process:  # (a job's own Snakemake process, e.g. on a SLURM node, was checked by the main one)
    check_run_specs()


# --- Resources ----------------------------------------------------------------------------------


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
        return "torchrun --standalone --nproc_per_node {resources.gpus} -m pit"
    return "pit"


# --- Targets ------------------------------------------------------------------------------------


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
