"""Run arguments as dataclasses, one docstring per field (litgpt's `args.py`). The keys of the workflow
config's `pretrain.train` and `posttrain.lora` sections are these fields; `from_dict` rejects unknown and
missing keys, and every value is checked when the object is made, before any work.

Each field's type is its annotation, its bounds are its metadata (`arg(default, ge=..., gt=..., lt=...,
choices=...)`) and its help is the docstring under it: this is the one place they live. `pit train --help`
lists them (`field_docs`, `bounds_text`), and the workflow's config schema takes its `train_settings` and
`posttrain.lora` properties from them (`profile_schema`, used by pit/pipeline/config.py); the workflow also
builds these objects from every resolved spec when it reads the config (pit/pipeline/specs.py), so the checks
across fields run there too. Importing this module imports no torch (the help path stays fast)."""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import json
import math
import operator
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path

from pit.errors import PitError, config_from_dict

PRECISIONS = ("auto", "fp32", "bf16")
# torch.compile's modes (Inductor); the last two replay the compiled graphs as CUDA graphs (docs/performance.md)
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs", "reduce-overhead", "max-autotune")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
DEVICES = ("auto", "cpu", "cuda")
MODES = ("scratch", "teacher", "continue")  # pretraining modes (docs/training.md, "Modes")
BOUNDS = ("ge", "gt", "le", "lt")  # metadata keys: >=, >, <=, <
TYPE_WORDS = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "true or false",
    dict: "an object",
    list: "an array",
}
JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", dict: "object", list: "array"}
SCHEMA_BOUNDS = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}
# every integer setting is a 64-bit integer: a larger one would pass the checks and overflow later (a step count in a
# progress bar, a seed in a generator), after the run folder was written
INT_MIN, INT_MAX = -(2**63), 2**63 - 1


class ArgsError(PitError):
    """A bad run argument; `fields` names the fields the message is about (the workflow maps them to config lines)."""

    def __init__(self, message: str, fields: tuple[str, ...] = ()):
        super().__init__(message)
        self.fields = fields


def arg(default=dataclasses.MISSING, *, factory=None, choices=None, **bounds):
    """A dataclass field with its bounds (ge, gt, le, lt: numbers) and allowed values (choices) as metadata."""
    unknown = set(bounds) - set(BOUNDS)
    assert not unknown, unknown
    meta = {k: v for k, v in bounds.items() if v is not None}
    if choices is not None:
        meta["choices"] = tuple(choices)
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def inherit(cls, name: str, default):
    """The field `name` of `cls` with another default (same bounds): a subclass's own default."""
    return arg(default, **cls.__dataclass_fields__[name].metadata)


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def field_type(cls, name: str) -> tuple[type, bool]:
    """(type, optional) of a field from its annotation: `int`, `float | None`, ..."""
    hint = _hints(cls)[name]
    args = typing.get_args(hint)
    if type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return inner, True
    return hint, False


def _type_ok(value, kind: type) -> bool:
    """bool is not an int; an int is a float (kept as given, so the fingerprint of `alpha: 16` is unchanged)."""
    if kind is bool:
        return isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def bounds_text(meta: dict, kind: type) -> str:
    """The bounds of a field in words: '> 0', '>= 0 and < 1', "one of 'log', 'skip', 'stop'"."""
    if "choices" in meta:
        return "one of " + ", ".join(repr(c) for c in meta["choices"])
    signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    if kind is int and meta.get("ge") == 1 and "gt" not in meta:
        meta = {**meta, "gt": 0}
        meta.pop("ge")
    return " and ".join(f"{signs[k]} {meta[k]}" for k in BOUNDS if k in meta)


def _in_bounds(value, meta: dict) -> bool:
    tests = {"ge": operator.ge, "gt": operator.gt, "le": operator.le, "lt": operator.lt}
    return all(tests[k](value, meta[k]) for k in BOUNDS if k in meta)


def check_field(label: str, cls, f: dataclasses.Field, value) -> None:
    """Type, finiteness, bounds and choices of one field's value; an ArgsError naming the field otherwise."""
    kind, optional = field_type(cls, f.name)
    shown = json.dumps(value, default=repr)
    if value is None and optional:
        return
    if not _type_ok(value, kind):
        got = "null" if value is None else TYPE_WORDS.get(type(value), type(value).__name__)
        want = TYPE_WORDS[kind] + (" or null" if optional else "")
        raise ArgsError(f"{label}: {f.name} {shown} is {got}; expected {want}", (f.name,))
    if kind is float and not math.isfinite(value):
        raise ArgsError(f"{label}: {f.name} {shown}; expected a finite number", (f.name,))
    if kind is int and not INT_MIN <= value <= INT_MAX:
        raise ArgsError(f"{label}: {f.name} {shown}; expected a 64-bit integer (at most 2**63 - 1 = {INT_MAX})",
                        (f.name,))  # fmt: skip
    meta = dict(f.metadata)
    if "choices" in meta and value not in meta["choices"] or not _in_bounds(value, meta):
        raise ArgsError(f"{label}: {f.name} {shown}; expected {bounds_text(meta, kind)}", (f.name,))


@functools.cache
def _class_docs(path: str) -> dict[str, dict[str, str]]:
    """class name -> {field: docstring} of a module's source: the string literal right after an annotated
    assignment (Python keeps no attribute docstrings at run time, so they are read with ast, without importing)."""
    docs = {}
    for node in ast.parse(Path(path).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef):
            docs[node.name] = {
                a.target.id: " ".join(b.value.value.split())
                for a, b in zip(node.body, node.body[1:])
                if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name) and isinstance(b, ast.Expr)
                and isinstance(b.value, ast.Constant) and isinstance(b.value.value, str)
            }  # fmt: skip
    return docs


def field_docs(cls) -> dict[str, str]:
    """{field: its docstring} of a dataclass; a field a subclass redefines without one keeps its base's."""
    docs = {}
    for base in reversed(cls.__mro__):
        if dataclasses.is_dataclass(base):
            docs.update(_class_docs(sys.modules[base.__module__].__file__).get(base.__name__, {}))
    return docs


def field_default(f: dataclasses.Field):
    """A field's default value (a fresh one from its factory), or dataclasses.MISSING for a required field."""
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def schema_property(cls, f: dataclasses.Field) -> dict:
    """A field as a JSON-schema property: its type (`[type, "null"]` when optional) or its choices (`enum`), bounds
    as minimum / exclusiveMinimum / maximum / exclusiveMaximum, and its docstring as the description."""
    kind, optional = field_type(cls, f.name)
    meta = dict(f.metadata)
    if "choices" in meta:
        prop = {"enum": [*meta["choices"], *([None] if optional else [])]}
    else:
        prop = {"type": [JSON_TYPES[kind], "null"] if optional else JSON_TYPES[kind]}
    prop.update({SCHEMA_BOUNDS[k]: v for k, v in meta.items() if k in SCHEMA_BOUNDS})
    if kind is int:  # 64-bit, as check_field checks
        prop.setdefault("minimum", INT_MIN)
        prop.setdefault("maximum", INT_MAX)
    prop["description"] = field_docs(cls).get(f.name, "")
    return prop


def profile_schema(cls) -> dict:
    """The JSON-schema properties of the fields a workflow profile may set: every field but `cls.not_profile_keys`
    (those the workflow sets itself, or that only the command line gives)."""
    return {f.name: schema_property(cls, f) for f in dataclasses.fields(cls) if f.name not in cls.not_profile_keys}


WARMUP_CAP = 10  # the default warmup, in steps, of runs of 100 steps or more


def default_warmup(max_steps: int) -> int:
    """The warmup of a spec that leaves `warmup_steps` out: 10% of the run, at most WARMUP_CAP steps (always
    < max_steps, so a short run such as `max_steps: 5` needs no warmup setting)."""
    return min(WARMUP_CAP, max_steps // 10)


MLFLOW_KEYS = {"tracking_uri": (str, type(None)), "experiment": (str,), "enabled": (bool,)}
# a run's `mlflow` block as resolved: a key left out has this value (tracking_uri None: $MLFLOW_TRACKING_URI, else
# sqlite:///mlflow.db, read when the run starts: pit.tracking.tracker.tracking_uri)
MLFLOW_DEFAULTS = {"tracking_uri": None, "experiment": "pit", "enabled": True}


def mlflow_problem(block: dict) -> str | None:
    """What is wrong with a run's `mlflow` block ({tracking_uri: str | null, experiment: str, enabled: bool}, every
    key optional), or None."""
    unknown = sorted(set(block) - set(MLFLOW_KEYS))
    if unknown:
        return f"unknown key(s) {unknown}; expected some of {sorted(MLFLOW_KEYS)}"
    for key, kinds in MLFLOW_KEYS.items():
        if key in block and not isinstance(block[key], kinds):
            want = {"enabled": "true or false", "experiment": "a string", "tracking_uri": "a string or null"}[key]
            return f"{key} {json.dumps(block[key])} is not {want}"
    if isinstance(block.get("experiment"), str) and not block["experiment"].strip():
        return "experiment '': expected a name"
    return None


@dataclass(kw_only=True)
class RunArgs:
    """What every training run shares (pretraining and LoRA): the optimizer, the schedule, the runtime, the
    trainer checkpoints and the MLflow identity."""

    max_steps: int = arg(100, ge=1)
    """Optimizer steps of the run."""
    seq_len: int = arg(256, ge=1)
    """Tokens per training window (pretraining) or per example, prompt + target (LoRA)."""
    lr: float = arg(3e-3, gt=0)
    """Peak learning rate, reached after `warmup_steps` (linear warmup, then cosine decay to `min_lr`)."""
    min_lr: float = arg(3e-4, ge=0)
    """Learning rate at `max_steps`; 0 <= min_lr <= lr."""
    decay_steps: int | None = arg(None, ge=1)
    """Step at which the cosine decay reaches `min_lr`, after which the rate stays at `min_lr` (a constant tail);
    warmup_steps < decay_steps <= max_steps. None: max_steps (decay to the end, no tail)."""
    warmup_steps: int = arg(10, ge=0)
    """Steps of linear warmup; 0 <= warmup_steps < max_steps. A spec that leaves it out (`from_dict`) gets
    `default_warmup(max_steps)` = min(10, max_steps // 10): 10 from 100 steps on, and a valid value for any run."""
    weight_decay: float = arg(0.1, ge=0)
    """AdamW decoupled weight decay (on the decayed parameter group only)."""
    beta1: float = arg(0.9, ge=0, lt=1)
    """AdamW beta1."""
    beta2: float = arg(0.95, ge=0, lt=1)
    """AdamW beta2."""
    grad_clip: float = arg(1.0, gt=0)
    """Clip the global gradient norm to this value."""
    seed: int = arg(0, ge=0)
    """Seed of the initialisation and of the data order (step s reads numpy.random.default_rng([seed, s]))."""
    precision: str = arg("auto", choices=PRECISIONS)
    """auto (bf16 autocast on CUDA, FP32 on CPU) | fp32 | bf16. PIT's T/L work stays FP32 in any case."""
    device: str = arg("auto", choices=DEVICES)
    """auto (CUDA when available) | cpu | cuda (an error when CUDA is not available, before any work)."""
    threads: int | None = arg(None, ge=1, le=1024)
    """CPU threads (None: torch's default); restored when the run returns. At most 1024 (torch makes one OpenMP
    thread each: tens of thousands exhaust memory)."""
    checkpoint_every: int = arg(0, ge=0)
    """Steps between trainer checkpoints (0: none; a finished run keeps only its final outputs)."""
    keep_checkpoints: int = arg(2, ge=1)
    """Newest trainer checkpoints kept."""
    stop_after_steps: int | None = arg(None, ge=0)
    """End the process after this step (resume tests, time-boxed jobs); the checkpoints allow a resume."""
    run_name: str | None = None
    """MLflow run name (default: the run folder's name)."""
    tags: dict = arg(factory=dict)
    """Extra MLflow tags."""
    mlflow: dict = arg(factory=dict)
    """{tracking_uri, experiment, enabled} (docs/reproducibility.md)."""

    label = "run config"  # the prefix of every error message about these arguments (class attributes, not fields)
    input_fields = ()  # the fields that name the files and folders a run reads (`input_paths`)
    fingerprint_excludes = ("threads", "stop_after_steps", "run_name", "tags", "mlflow")  # not the trajectory
    omitted_at_default = ("decay_steps",)  # newer than the first runs: in the fingerprint only when set
    # fields no profile sets: the workflow sets them for each run (pit/pipeline/specs.py), or only the command line
    not_profile_keys = ("run_name", "tags", "mlflow", "threads", "stop_after_steps")

    def checks(self) -> list[tuple[bool, str, tuple[str, ...]]]:
        """(condition, message, fields) across fields, after each field's own type and bounds; each message names
        the bad values and what was expected."""
        return [
            (
                mlflow_problem(self.mlflow) is None,
                f"mlflow {json.dumps(self.mlflow)}: {mlflow_problem(self.mlflow)}",
                ("mlflow",),
            ),  # fmt: skip
            (
                self.min_lr <= self.lr,
                f"lr {self.lr}, min_lr {self.min_lr}; expected 0 <= min_lr <= lr",
                ("min_lr", "lr"),
            ),
            (
                self.decay_steps is None or self.warmup_steps < self.decay_steps <= self.max_steps,
                f"decay_steps {self.decay_steps}; expected warmup_steps = {self.warmup_steps} < decay_steps <= "
                f"max_steps = {self.max_steps}, or null (decay to max_steps)",
                ("decay_steps", "warmup_steps", "max_steps"),
            ),
            (
                self.warmup_steps < self.max_steps,
                f"warmup_steps {self.warmup_steps}; expected 0 <= warmup < max_steps = {self.max_steps} (set "
                f"warmup_steps below max_steps, e.g. {default_warmup(self.max_steps)}, or leave it out: the default is "
                "min(10, max_steps // 10))",
                ("warmup_steps", "max_steps"),
            ),
        ]

    def input_paths(self) -> dict[str, str]:
        """{field: path} of the `input_fields` that name an existing file or folder (a scratch model's name, a
        hub id or 'offline' is none): what a run reads, fixed at its start (pit/training/run_folder.py)."""
        values = {name: getattr(self, name) for name in self.input_fields}
        return {name: v for name, v in values.items() if isinstance(v, str) and v and Path(v).exists()}

    def __post_init__(self):
        for f in dataclasses.fields(self):
            check_field(self.label, type(self), f, getattr(self, f.name))
        for ok, msg, fields in self.checks():
            if not ok:
                raise ArgsError(f"{self.label}: {msg}", fields)
        self.mlflow = {**MLFLOW_DEFAULTS, **self.mlflow}  # resolved: --print-config shows where the run logs

    @classmethod
    def from_dict(cls, d: dict):
        if not isinstance(d, dict):
            raise PitError(f"{cls.label}: expected a JSON object of settings, got {type(d).__name__}")
        steps = d.get("max_steps", cls.__dataclass_fields__["max_steps"].default)
        if "warmup_steps" not in d and _type_ok(steps, int) and steps >= 1:
            d = {**d, "warmup_steps": default_warmup(steps)}  # scales with the run; explicit values stay as given
        return config_from_dict(cls, d, cls.label)

    def fingerprint(self, **extra) -> str:
        """sha256 of the settings that define the trajectory (plus `extra`): which checkpoints belong to a run."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        d = {
            k: v
            for k, v in dataclasses.asdict(self).items()
            if k not in self.fingerprint_excludes and not (k in self.omitted_at_default and v == defaults[k])
        }
        return hashlib.sha256(json.dumps({**d, **extra}, sort_keys=True).encode()).hexdigest()


@dataclass(kw_only=True)
class PretrainArgs(RunArgs):
    """One pretraining run (`pit train`): teacher or scratch mode; PIT, TT or untied."""

    mode: str = arg(choices=MODES)
    """scratch | teacher | continue (docs/training.md, "Modes")."""
    model: str
    """Scratch mode: a scratch-family or stand-in name (pit/models/configs.py). Teacher mode: a hub id or folder of a
    plain causal LM, converted to `interface`. Continue mode: a folder with a token interface (written by `pit
    convert`, by `pit train`: its final/, or by `pit lora merge`), trained on as it is, interface included."""
    train_data: str
    """Training token file (.bin with its sidecar)."""
    val_data: str
    """Validation token file, tokenized with the same tokenizer."""
    tokenizer: str = ""
    """Tokenizer folder, copied into the final checkpoint. Required, except in continue mode, where '' takes the
    model folder's own tokenizer (the one the token files' sidecars must name)."""
    interface: dict = arg(factory=dict)
    """The token interface (pit.core.interfaces.InterfaceConfig as a dict, docs/models.md): kind (pit | tt | untied),
    trainable_z, t_init, diag_clamp, retraction_eps, init_std, t_power, t_scale; one key: `--set interface.kind=tt`.
    Continue mode: the model folder's interface; a key given here must have the folder's value."""
    global_batch_tokens: int = arg(4096, ge=1)
    """Tokens per optimizer step over all ranks; a multiple of micro_batch_size x seq_len x world size."""
    micro_batch_size: int = arg(8, ge=1)
    """Windows per forward/backward pass (gradient accumulation makes up the global batch)."""
    transform_lr_scale: float = arg(1.0, gt=0)
    """Learning-rate multiplier for PIT's L (beyond the paper; 1 = off)."""
    adam_eps: float = arg(1e-8, gt=0)
    """AdamW epsilon."""
    optimizer: str = arg("adamw", choices=("adamw", "sgd"))
    """adamw | sgd (plain SGD, no momentum and no state: only where AdamW's 8 bytes/parameter do not fit)."""
    compile: bool = False
    """Wrap the loss module in torch.compile."""
    compile_mode: str = arg("default", choices=COMPILE_MODES)
    """torch.compile's mode when `compile` is true. reduce-overhead and max-autotune replay the step as CUDA graphs
    (no wait for kernel launches; on CPU they compile as default): only where a step is one micro-batch on one
    process, since a replay overwrites the last one's gradients before accumulation could read them."""
    loss_chunk_rows: int | None = arg(None, ge=1)
    """Rows of logits per chunk of the fused loss (pit/core/loss.py). None: 1024 up to 16384 rows per micro-batch,
    past that the micro-batch in 16 chunks (`chunk_rows`: 4096 rows at 64 windows of 1024). The loss holds about
    rows x V x 2-8 bytes at once. Larger chunks mean fewer, larger GEMMs and fewer passes over the table's
    gradient; results differ only at round-off (the order of the sums), so it is outside the fingerprint."""
    log_every: int = arg(1, ge=1)
    """Steps between MLflow metric uploads (metrics.jsonl gets every step)."""
    interface_every: int = arg(1, ge=1)
    """Steps between Delta_TI measurements."""
    consistency_every: int = arg(0, ge=0)
    """Steps between the Table 2 metrics (raw/polar anchors); 0 = only at the end."""
    eval_batches: int = arg(8, ge=1)
    """Validation windows per evaluation = eval_batches x micro_batch_size."""
    eval_every: int = arg(0, ge=0)
    """Steps between validation losses in metrics.jsonl (`val_loss`; the learning curve); 0 = only at the end."""
    final_loss_window: int = arg(10, ge=1)
    """The final training loss is the mean loss of the last N steps."""
    spike_factor: float = arg(3.0, gt=1)
    """A loss above spike_factor x its running mean is a spike."""
    on_spike: str = arg("log", choices=("log", "skip", "stop"))
    """log | skip (skip the update) | stop."""
    on_nonfinite: str = arg("skip", choices=("skip", "stop"))
    """skip | stop."""
    max_skipped_fraction: float = arg(0.5, ge=0, le=1)
    """A run that skipped more than this fraction of its steps (non-finite loss or gradient) has diverged."""
    stop_after_nonfinite: int = arg(0, ge=0)
    """End the run after this many consecutive non-finite steps (0: never). Skipped steps leave the weights as they
    are, so such a run is stuck; with allow_divergence it is recorded as diverged at the first of those steps
    (`diverged_at_step` in summary.json), and costs only those steps. A learning-rate sweep sets it."""
    allow_divergence: bool = False
    """Record a diverged run (final weights not finite, or too many skipped steps) as finished with `diverged: true`
    in its summary; False: it ends with an error and is not marked finished (a learning-rate sweep sets True: there
    divergence is the outcome measured)."""

    label = "train config"
    omitted_at_default = RunArgs.omitted_at_default + ("stop_after_nonfinite",)
    input_fields = ("train_data", "val_data", "tokenizer", "model")  # model: a teacher folder (teacher mode)
    not_profile_keys = RunArgs.not_profile_keys + (
        "mode", "model", "train_data", "val_data", "tokenizer", "interface", "seq_len",
    )  # fmt: skip
    fingerprint_excludes = RunArgs.fingerprint_excludes + (
        "log_every", "compile", "compile_mode", "loss_chunk_rows", "max_skipped_fraction", "allow_divergence",
    )  # fmt: skip

    def checks(self) -> list[tuple[bool, str, tuple[str, ...]]]:
        per_micro = self.micro_batch_size * self.seq_len
        return [
            *super().checks(),
            (
                bool(self.tokenizer) or self.mode == "continue",
                f"tokenizer {self.tokenizer!r} in mode {self.mode!r}; expected a tokenizer folder (only mode "
                "'continue' may leave it out, to take the model folder's own)",
                ("tokenizer",),
            ),
            (
                self.global_batch_tokens % per_micro == 0,
                f"global_batch_tokens {self.global_batch_tokens} is not a multiple of micro_batch_size x seq_len = "
                f"{self.micro_batch_size} x {self.seq_len} = {per_micro}",
                ("global_batch_tokens", "micro_batch_size"),
            ),
            (
                self.compile or self.compile_mode == "default",
                f"compile_mode {self.compile_mode!r} with compile false; expected compile: true, or compile_mode "
                "'default'",
                ("compile_mode", "compile"),
            ),
            (
                self.compile_mode not in CUDA_GRAPH_MODES or self.global_batch_tokens == per_micro,
                f"compile_mode {self.compile_mode!r} replays CUDA graphs, which needs one micro-batch per step; "
                f"global_batch_tokens {self.global_batch_tokens} is {self.global_batch_tokens / per_micro:g} "
                f"micro-batches of micro_batch_size x seq_len = {per_micro}: expected global_batch_tokens "
                f"{per_micro}, or a mode without CUDA graphs ({COMPILE_MODES[0]!r}, {COMPILE_MODES[1]!r})",
                ("compile_mode", "global_batch_tokens"),
            ),
        ]

    def __post_init__(self):
        from pit.core.interfaces import InterfaceConfig  # torch: not on the path of `pit train --help`

        super().__post_init__()
        try:
            interface = InterfaceConfig.from_dict(self.interface)
        except (TypeError, ValueError) as err:  # a PitError, or a value of the wrong type in the dict
            raise ArgsError(f"{self.label}: interface {json.dumps(self.interface)}: {err}", ("interface",)) from None
        folder = folder_interface(self.model) if self.mode != "scratch" else None
        if self.mode == "continue":
            interface = continued_interface(self.label, self.model, folder, interface, set(self.interface))
        elif folder is not None and folder[1] is not None:
            kind = folder[1].get("kind")
            raise ArgsError(
                f"{self.label}: model {self.model!r} is a {folder[0]} folder that already has a {kind} interface "
                "(written by pit convert, pit train or pit lora merge); mode 'teacher' converts a plain causal LM: "
                "set mode: continue to train this folder as it is",
                ("mode", "model"),
            )
        self.interface = interface.to_dict(omit_defaults=False)  # every key, defaults filled in: one form per run

    def accumulation(self, world_size: int) -> int:
        """Micro-batches per optimizer step on each rank; the global batch must divide evenly."""
        if world_size > 1 and self.compile_mode in CUDA_GRAPH_MODES:
            raise PitError(
                f"compile_mode {self.compile_mode!r} (CUDA graphs) on {world_size} processes; expected one process, or "
                f"a mode without CUDA graphs ({COMPILE_MODES[0]!r}, {COMPILE_MODES[1]!r})"
            )
        per_micro = self.micro_batch_size * self.seq_len * world_size
        if self.global_batch_tokens % per_micro:
            raise PitError(
                f"global_batch_tokens {self.global_batch_tokens} is not a multiple of micro_batch_size x "
                f"seq_len x world_size = {self.micro_batch_size} x {self.seq_len} x {world_size} = {per_micro}"
            )
        return self.global_batch_tokens // per_micro


def folder_interface(model: str) -> tuple[str, dict | None] | None:
    """(model_type, interface or None) of a model folder's config.json, None when `model` is no folder with one (a
    hub id). The interface is the dict `pit convert`, `pit train` and `pit lora merge` store (config.interface)."""
    from pit.io import read_json

    path = Path(model).expanduser() / "config.json"
    if not path.is_file():
        return None
    config = read_json(path)
    if not isinstance(config, dict):
        raise PitError(f"{str(path)!r} is not a JSON object; expected a model's config.json")
    interface = config.get("interface")
    return str(config.get("model_type")), interface if isinstance(interface, dict) else None


def continued_interface(label: str, model: str, folder, given, keys: set[str]):
    """Continue mode: the model folder's interface (an InterfaceConfig), kept exactly. `given` (the run's interface,
    of which `keys` were set) may only repeat it: a key with another value is refused, naming both values."""
    from pit.core.interfaces import InterfaceConfig

    where = "mode 'continue' takes a folder written by pit convert, pit train (its final/) or pit lora merge"
    if folder is None:
        raise ArgsError(f"{label}: model {model!r} is not a model folder (no config.json); {where}", ("model",))
    model_type, stored = folder
    if stored is None:
        raise ArgsError(
            f"{label}: model {model!r} is a plain {model_type!r} model without a token interface; {where} "
            "(convert it with `pit convert`, or train it with mode: teacher)",
            ("model", "mode"),
        )
    kept = InterfaceConfig.from_dict(stored)
    want, have = given.to_dict(omit_defaults=False), kept.to_dict(omit_defaults=False)
    for key in sorted(keys):
        if want[key] != have[key]:
            raise ArgsError(
                f"{label}: interface.{key} {json.dumps(want[key])} contradicts model {model!r}, whose interface has "
                f"{key} {json.dumps(have[key])}; expected {json.dumps(have[key])} or no interface.{key} (mode "
                "'continue' keeps the folder's interface)",
                ("interface",),
            )
    return kept


DEFAULT_LORA_TARGETS = {
    "pit_scratch": ["q_proj", "k_proj", "v_proj", "o_proj"],  # attention of the parallel block
    "pit_gpt2": ["attn.c_attn", "attn.c_proj"],
}  # GPT-2 attention (Conv1D)


@dataclass(kw_only=True)
class LoraArgs(RunArgs):
    """One LoRA run (`pit lora train`, paper Section 5.6): the same config for every method at a scale."""

    base: str
    """Checkpoint folder of a pretrained run (its final/), with its tokenizer."""
    task: str
    """Training task: mbpp | gsm8k."""
    source: str = "offline"
    """offline | hub | a JSON/JSONL file of records."""
    limit: int | None = arg(None, ge=1)
    """Use only the first N training records."""
    rank: int = arg(8, ge=1)
    """LoRA rank r."""
    alpha: float = arg(16.0, gt=0)
    """LoRA alpha (the update is scaled by alpha / r)."""
    dropout: float = arg(0.05, ge=0, lt=1)
    """LoRA dropout."""
    targets: dict = arg(factory=lambda: dict(DEFAULT_LORA_TARGETS))
    """model_type -> names of the modules that get adapters."""
    train_interface: bool = False
    """Also train the interface (PIT: L, and Z if trainable_z, retracted after every step; TT its table)."""
    batch_size: int = arg(8, ge=1)
    """Examples per step."""
    seq_len: int = arg(256, ge=2)
    """Tokens per example, prompt + target (at least 2: one input and one target)."""
    lr: float = inherit(RunArgs, "lr", 2e-4)
    min_lr: float = inherit(RunArgs, "min_lr", 2e-5)
    weight_decay: float = inherit(RunArgs, "weight_decay", 0.0)
    beta2: float = inherit(RunArgs, "beta2", 0.999)
    val_data: str | None = None
    """Held-out token file for the side effects (None: no side effects measured)."""
    side_effect_windows: int = arg(16, ge=1)
    """Held-out windows the side effects are measured on."""
    side_effect_seq_len: int = arg(128, ge=2)
    """Length of those windows."""
    frontier_lrs: list = arg(factory=list)
    """More learning rates: once the run is finished, `pit lora train` trains the same LoRA (same examples, order
    and initialisation) at each in memory and writes their in-domain gain and side effects to frontier.json
    (pit/training/frontier.py; the side-effect frontier). Needs val_data. Empty: none."""
    frontier_eval_limit: int | None = arg(None, ge=1)
    """The first N problems of the task's test split the frontier's gains are measured on (None: all)."""

    label = "lora config"
    input_fields = ("base", "val_data", "source")  # source: a task data file (else 'offline' or 'hub')
    not_profile_keys = RunArgs.not_profile_keys + (
        "base", "task", "source", "val_data", "side_effect_seq_len",
        "frontier_lrs", "frontier_eval_limit",  # posttrain.frontier_lrs, posttrain.evaluate.limit
    )  # fmt: skip
    fingerprint_excludes = RunArgs.fingerprint_excludes + (
        "checkpoint_every",
        "keep_checkpoints",
        "val_data",
        "side_effect_windows",
        "side_effect_seq_len",
        "base",
        "frontier_lrs",
        "frontier_eval_limit",
    )

    def checks(self) -> list[tuple[bool, str, tuple[str, ...]]]:
        from pit.evaluation.tasks import SPECS

        trainable = sorted(k for k, v in SPECS.items() if v.target is not None)
        targets_ok = all(
            isinstance(v, list) and v and all(isinstance(n, str) and n for n in v) for v in self.targets.values()
        )
        return [
            (self.task in trainable, f"task {self.task!r}; expected one of {trainable}", ("task",)),
            *super().checks(),
            (
                targets_ok,
                f"targets {json.dumps(self.targets)}; expected a mapping model_type -> non-empty list of module names",
                ("targets",),
            ),
            (
                all(_type_ok(x, float) and math.isfinite(x) and x > 0 for x in self.frontier_lrs),
                f"frontier_lrs {json.dumps(self.frontier_lrs)}; expected a list of positive learning rates",
                ("frontier_lrs",),
            ),
            (
                not self.frontier_lrs or self.val_data is not None,
                "frontier_lrs without val_data; expected val_data (the frontier measures side effects on it)",
                ("frontier_lrs", "val_data"),
            ),
        ]
