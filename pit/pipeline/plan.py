"""The bill before the run (`pit plan`, docs/plan.md): every job of a profile's DAG with its parameters, tokens,
FLOPs, peak memory per device, disk and wall time on a named device kind at a stated MFU, the totals, the DAG's wall
time on N devices, and each job's SLURM runtime from its planned time with a stated margin.

The jobs are those of the workflow's rules, enumerated from the profile (pit.pipeline.profile.Profile) with the specs
the rules pass (pit.pipeline.specs), resolved by pit's own run arguments; their costs: pit.pipeline.cost. Training
jobs are planned from their FLOPs; post-training, evaluation and diagnosis from their token and sample counts with
rougher constants (`Job.rough`); data and report jobs from measured rates of this project's runs.
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, field, replace

from pit.errors import PitError
from pit.pipeline import cost, specs
from pit.pipeline.cost import DEVICES
from pit.pipeline.layout import run_path
from pit.pipeline.profile import DECISION_TABLES, SPLITS, Profile

# Test-set sizes of the evaluated tasks (pit/evaluation/tasks.py, standins.py): hub and offline stand-ins.
TEST_SET_SIZES = {
    "hub": {"humaneval": 164, "mbpp": 500, "gsm8k": 1319, "svamp": 300},
    "offline": {"humaneval": 164, "mbpp": 100, "gsm8k": 200, "svamp": 100},
}
CODE_TASKS = ("humaneval", "mbpp")
SANDBOX_S = 0.15  # CPU seconds per scored code sample (0.076 s wall on 2 workers, benchmarks/RESULTS.md sec. 14)
REPORT_S = 5.0  # a table, figure or report job: 1.5 job-minutes for 16-27 of them (docs/real.md, study README)
HUB_BYTES_S = 50e6  # the corpus download from the hub (assumed; the network decides)
LOCAL_CORPUS_S = 10.0  # a local corpus (the standard library: 24 s for the whole data stage, docs/study.md)
LOCAL_CORPUS_BYTES = 31.5e6  # a local corpus's text where the profile does not bound it (the standard library's)
BPE_BYTES_S = 3.5e6  # the BPE trainer: 9 s for 31.5 MB of text (docs/study.md)
TOKENIZE_BYTES_S = 8e6  # `pit data tokenize` per worker (10.3 MB/s streaming, 1.5-1.7x on 2 workers, docs/data.md)
BYTES_PER_TOKEN = 4.5  # text bytes per token (FineWeb-Edu: 45 GB for ~10 B GPT-2 tokens, docs/data.md)
MATERIALIZE_BYTES_S = 12e6  # float32 teacher weights per second (both real teachers: 2.3 job-minutes, docs/real.md)
HOST_CORES_PER_GPU = 16  # CPU cores beside each GPU for the CPU jobs of a GPU profile (the lent H200 machine)
RUNTIME_FLOOR = 10  # minutes: the least SLURM runtime a planned job asks for


@dataclass
class Job:
    """One job of the DAG and its planned cost; `deps` are the ids of the jobs it waits for."""

    rule: str
    name: str
    device: str  # the device kind it runs on
    width: int  # GPUs, or CPU threads, it holds
    seconds: float
    deps: list[str] = field(default_factory=list)
    params: int | None = None
    tokens: int | None = None
    flops: float | None = None
    memory: float | None = None  # peak bytes per device
    disk: float = 0.0  # bytes it leaves
    disk_peak: float = 0.0  # bytes it holds while running beyond `disk` (trainer checkpoints, merged models)
    rough: bool = False  # from token / sample counts with rougher constants
    note: str = ""

    @property
    def id(self) -> str:
        return f"{self.rule}:{self.name}"

    def device_hours(self) -> float:
        """Device-hours (GPU-hours; CPU: thread-hours) = seconds x width / 3600."""
        return self.seconds * self.width / 3600


@dataclass
class Plan:
    """Every job of one profile on the chosen devices, and the assumptions behind the numbers."""

    profile: str
    gpu: cost.Device
    cpu: cost.Device
    devices: int  # GPUs (a profile without GPU jobs: CPU cores)
    mfu: dict  # device kind -> the MFU its training jobs were planned at
    jobs: list[Job]

    def job(self, rule: str, name: str) -> Job:
        """The job of `rule` named `name`; a PitError where the plan has none."""
        if not hasattr(self, "_index"):
            self._index = {j.id: j for j in self.jobs}
        found = self._index.get(f"{rule}:{name}")
        if found is None:
            raise PitError(f"the plan of profile {self.profile!r} has no job {rule} {name}")
        return found

    def uses_gpu(self) -> bool:
        return any(cost.DEVICES[j.device].gpu for j in self.jobs)

    def pools(self) -> dict[str, int]:
        """Slots per pool: the GPUs, and the CPU threads (all cores of a CPU-only plan; else HOST_CORES_PER_GPU per
        GPU for the CPU jobs)."""
        if not self.uses_gpu():
            return {"cpu": self.devices}
        return {"gpu": self.devices, "cpu": self.devices * HOST_CORES_PER_GPU}

    def wall_seconds(self) -> float:
        """The DAG's makespan on `pools()` (`schedule`)."""
        return schedule(self.jobs, self.pools())

    def totals(self) -> dict:
        """Sums over the jobs: FLOPs, device-hours per device kind, disk kept and at the peak (the largest run's
        temporaries on top), the largest memory per device and its job, the wall time."""
        hours: dict[str, float] = {}
        for j in self.jobs:
            hours[j.device] = hours.get(j.device, 0.0) + j.device_hours()
        kept, biggest = sum(j.disk for j in self.jobs), max(self.jobs, key=lambda j: j.memory or 0)
        return {
            "jobs": len(self.jobs),
            "flops": sum(j.flops or 0 for j in self.jobs),
            "device_hours": hours,
            "job_seconds": sum(j.seconds for j in self.jobs),
            "wall_seconds": self.wall_seconds(),
            "disk": kept,
            "disk_peak": kept + max((j.disk_peak for j in self.jobs), default=0),
            "memory": biggest.memory or 0,
            "memory_job": {
                "job": biggest.id,
                "device": biggest.device,
                "device_memory": DEVICES[biggest.device].memory,
            },
        }


# --- The schedule -------------------------------------------------------------------------------------------


def schedule(jobs: list[Job], pools: dict[str, int]) -> float:
    """Makespan of a greedy list schedule: whenever slots are free, start the ready job with the longest path to the
    end of the DAG (its seconds plus its longest chain of dependents) that fits its pool; a job holds `width` slots
    of its pool (GPU jobs the GPU pool, the others the CPU pool), at most the whole pool."""
    by_id = {j.id: j for j in jobs}
    children: dict[str, list[str]] = {j.id: [] for j in jobs}
    for j in jobs:
        for d in j.deps:
            children[d].append(j.id)
    tail = _longest_tails(jobs, children)
    pool = {j.id: "gpu" if cost.DEVICES[j.device].gpu and "gpu" in pools else "cpu" for j in jobs}
    need = {j.id: min(j.width, pools[pool[j.id]]) for j in jobs}
    waiting = {j.id: len(j.deps) for j in jobs}
    ready = [(-tail[i], i) for i, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    free, running, now = dict(pools), [], 0.0
    while ready or running:
        held = []
        while ready:
            item = heapq.heappop(ready)
            if need[item[1]] <= free[pool[item[1]]]:
                free[pool[item[1]]] -= need[item[1]]
                heapq.heappush(running, (now + by_id[item[1]].seconds, item[1]))
            else:
                held.append(item)
        for item in held:
            heapq.heappush(ready, item)
        now, done = heapq.heappop(running)
        free[pool[done]] += need[done]
        for child in children[done]:
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, (-tail[child], child))
    return now


def _longest_tails(jobs: list[Job], children: dict[str, list[str]]) -> dict[str, float]:
    """Each job's seconds plus the longest chain of its dependents (the critical-path priority)."""
    seconds, tail = {j.id: j.seconds for j in jobs}, {}

    def visit(i: str) -> float:
        if i not in tail:
            tail[i] = seconds[i] + max((visit(c) for c in children[i]), default=0.0)
        return tail[i]

    for j in jobs:
        visit(j.id)
    return tail


# --- Building the plan --------------------------------------------------------------------------------------


def build(
    p: Profile, gpu: str = "h100", devices: int | None = None, mfu: float | None = None, cpu_peak: float | None = None
) -> Plan:
    """The plan of profile `p` with its GPU jobs on device kind `gpu` (`cpu`: every job on CPU threads), on
    `devices` GPUs (a plan without GPU jobs: CPU cores; default 1 GPU, 2 cores: the reference machine), at `mfu`
    (default: the device kind's measured MFU, eager or compiled as each run is); `cpu_peak`: the FP32 GEMM FLOP/s of
    one thread of another CPU (default the reference's): its compute scales with it, the fixed costs do not."""
    if devices is not None and devices < 1:
        raise PitError(f"devices {devices}: expected a number of devices >= 1")
    if cpu_peak is not None and not cpu_peak > 0:
        raise PitError(f"cpu_peak {cpu_peak}: expected FLOP/s of one thread > 0")
    planner = Planner(p, cost.device(gpu), mfu, cpu_peak)
    jobs = planner.jobs()
    devices = devices or (1 if any(cost.DEVICES[j.device].gpu for j in jobs) else 2)
    return Plan(p.name, planner.gpu, cost.DEVICES["cpu"], devices, planner.mfu_used, jobs)


class Planner:
    """Jobs of one profile; model costs are cached by (source, interface, vocabulary, window)."""

    def __init__(self, p: Profile, gpu: cost.Device, mfu: float | None, cpu_peak: float | None = None):
        if mfu is not None and not 0 < mfu <= 1:
            raise PitError(f"mfu {mfu}: expected a fraction of the peak in (0, 1]")
        self.p, self.gpu, self.mfu = p, gpu, mfu
        ref = cost.DEVICES["cpu"]  # another CPU: FP32 and FP64 rates scaled by its GEMM peak, start-up unchanged
        scale = 1.0 if cpu_peak is None else cpu_peak / ref.peak
        self.cpu = replace(ref, peak=ref.peak * scale, fp64=ref.fp64 * scale)
        self.mfu_used: dict[str, float] = {}
        self._costs: dict = {}

    def jobs(self) -> list[Job]:
        """Every job of the DAG (the rules' order), each with the ids of the jobs it waits for."""
        data = self.data_jobs()
        training = self.stand_in_jobs() + self.pretrain_jobs()
        later = self.diagnose_jobs() + self.post_jobs()
        return data + training + later + self.report_jobs([j.id for j in training + later])

    # --- where a job runs, and how fast

    def placement(self, res: dict, spec_device: str | None) -> tuple[cost.Device, int]:
        """(device kind, width) of a job: the GPU kind where its resources ask for GPUs (device auto) or its spec
        asks for cuda, else CPU threads (`res['threads']`); with the GPU kind `cpu`, every job on CPU threads."""
        on_gpu = spec_device == "cuda" or (spec_device in (None, "auto") and res["gpus"] > 0)
        if on_gpu and self.gpu.gpu:
            return self.gpu, max(1, res["gpus"])
        return self.cpu, res["threads"]

    def rate(self, dev: cost.Device, width: int, compiled: bool = False) -> float:
        """Model FLOP/s of a job: width x peak x MFU (the override for the planned kind, else its measured MFU)."""
        mfu = self.mfu if self.mfu is not None and dev.kind == self.gpu.kind else dev.mfu(compiled)
        self.mfu_used.setdefault(f"{dev.kind} {'compiled' if compiled else 'eager'}" if dev.gpu else dev.kind, mfu)
        return width * dev.peak * mfu

    def metric_seconds(self, c: cost.ModelCost, units: float, dev: cost.Device, width: int) -> float:
        """`units` x V d^2 float64 FLOP (Delta_TI: 2 each; the Table 2 metrics, a conversion: cost.METRIC_VD2)."""
        return units * c.vocab * c.width**2 / (dev.fp64 * width)

    # --- models

    def vocab(self, tokenizer: str, data: str | None = None) -> int:
        """The vocabulary of a tokenizer's token files: the data stage's sidecar where it exists, else the
        profile's: a BPE's requested size (a small corpus gives fewer), GPT-2's, a checkpoint's config."""
        meta = cost.token_sidecar(data) if data else None
        if meta:
            return int(meta["vocab_size"])
        entry = self.p.config["tokenizers"][tokenizer]
        if entry["kind"] == "bpe":
            return entry["vocab_size"]
        if entry["kind"] == "gpt2":
            from pit.models import TeacherSpec

            return TeacherSpec.vocab_size  # GPT-2's BPE, V = 50257
        if entry["kind"] == "teacher":
            return self.slot_config(entry["slot"]).vocab_size
        return cost.teacher_config(entry["source"]).vocab_size

    def slot_config(self, slot: str):
        """The architecture of a teacher slot's teacher: a stand-in at its data's vocabulary, a GGUF model (its
        materialised folder where the data stage made it), a hub id or folder."""
        from pit.models import get_spec, gpt2_config

        entry = self.p.pretrain["teacher_slots"][slot]
        if "stand_in" in entry:
            data = self.p.run_inputs("stand_in", slot)
            vocab = self.vocab(data["tokenizer"].rsplit("/", 1)[-1], data["train"])
            return gpt2_config(get_spec(entry["stand_in"]), vocab)
        if "gguf" in entry:
            folder = self.p.teacher_source(slot)
            return cost.teacher_config(folder if _has_config(folder) else entry["gguf"], gguf=True)
        return cost.teacher_config(entry["teacher"])

    def run_cost(self, spec: dict, slot: str | None = None, seq_len: int | None = None) -> cost.ModelCost:
        """The model of a `pit train` spec (teacher mode: the slot's teacher converted), counted at `seq_len`."""
        from pit.core.interfaces import InterfaceConfig

        interface = InterfaceConfig.from_dict(spec["interface"]).to_dict()
        vocab = self.vocab(spec["tokenizer"].rsplit("/", 1)[-1], spec["train_data"])
        seq = seq_len or spec["seq_len"]
        key = (spec["mode"], spec["model"], slot, json.dumps(interface, sort_keys=True), vocab, seq)
        if key not in self._costs:
            if spec["mode"] == "scratch":
                model = cost.named_model(spec["model"], interface, vocab, spec["seq_len"])
            else:  # teacher: the slot's teacher converted; continue: the folder's model
                config = self.slot_config(slot) if spec["mode"] == "teacher" else cost.teacher_config(spec["model"])
                model = cost.interface_model(config, interface)
            self._costs[key] = cost.model_cost(model, seq)
        return self._costs[key]

    # --- the data stage

    def data_jobs(self) -> list[Job]:
        """The corpus, the GGUF teachers, the tokenizers and every token file (measured rates; rough)."""
        p, corpus = self.p, self.p.config["corpus"]
        size = corpus.get("max_bytes") if corpus["source"] == "hub" else None
        seconds = self.cpu.start_s + (size / HUB_BYTES_S if size else LOCAL_CORPUS_S)
        why = f"{size / 1e9:g} GB at {HUB_BYTES_S / 1e6:g} MB/s (assumed)" if size else "a local corpus"
        note = f"{why}; disk: the text's bytes, an upper bound (Parquet compresses)"
        jobs = [Job("download_corpus", p.corpus, "cpu", 1, seconds, disk=size or 0, rough=True, note=note)]
        for slot in p.gguf_slots:
            stored = cost.model_cost(cost.interface_model(self.slot_config(slot), {"kind": "tt"}), 1).stored
            seconds = self.cpu.start_s + stored / MATERIALIZE_BYTES_S
            note = f"float32 weights at {MATERIALIZE_BYTES_S / 1e6:g} MB/s (docs/real.md)"
            jobs.append(Job("materialize_teacher", slot, "cpu", 1, seconds, disk=stored, rough=True, note=note))
        jobs += [self.tokenizer_job(name, jobs[0].id) for name in p.tokenizers]
        return jobs + [self.token_job(path, jobs[0].id) for path in p.token_files()]

    def tokenizer_job(self, name: str, corpus_id: str) -> Job:
        entry = self.p.config["tokenizers"][name]
        if entry["kind"] != "bpe":
            deps = [f"materialize_teacher:{entry['slot']}"] if entry.get("slot") in self.p.gguf_slots else []
            return Job("copy_tokenizer", name, "cpu", 1, self.cpu.start_s, deps=deps)
        sample = entry.get("sample_bytes") or self.p.config["corpus"].get("max_bytes") or LOCAL_CORPUS_BYTES
        seconds = self.cpu.start_s + sample / BPE_BYTES_S
        note = f"{sample / 1e6:g} MB of text at {BPE_BYTES_S / 1e6:g} MB/s (docs/study.md)"
        return Job("train_bpe_tokenizer", name, "cpu", 1, seconds, deps=[corpus_id], rough=True, note=note)

    def token_job(self, path: str, corpus_id: str) -> Job:
        """One token file: its tokens (the sidecar where made, else the budget or the corpus's bound), their disk."""
        from pit.data.tokenize import token_dtype

        tokenizer, split, domain = split_token_path(path)
        tokens, workers = self.token_count(path, split, domain), self.p.config["tokenize"]["workers"]
        seconds = self.cpu.start_s + (tokens or 0) * BYTES_PER_TOKEN / (TOKENIZE_BYTES_S * workers)
        kind = self.p.config["tokenizers"][tokenizer]["kind"]
        deps = [corpus_id, f"{'train_bpe_tokenizer' if kind == 'bpe' else 'copy_tokenizer'}:{tokenizer}"]
        disk = (tokens or 0) * token_dtype(self.vocab(tokenizer, path)).itemsize
        rate = f"{BYTES_PER_TOKEN} bytes of text each at {TOKENIZE_BYTES_S / 1e6:g} MB/s per worker"
        note = "tokens: " + ("the profile does not bound them (a local corpus)" if tokens is None else rate)
        name = path.removeprefix("results/data/")
        rule = "tokenize" if domain is None else "tokenize_domain"
        return Job(rule, name, "cpu", workers, seconds, deps, tokens=tokens, disk=disk, rough=True, note=note)

    def token_count(self, path: str, split: str, domain: str | None) -> int | None:
        """A token file's tokens: measured (its sidecar), else the train budget or the hub corpus's byte bound."""
        meta = cost.token_sidecar(path)
        if meta:
            return int(meta["tokens"])
        corpus, budget = self.p.config["corpus"], self.p.config["tokenize"]["token_budget"]
        if split == "train" and budget is not None:
            return budget
        if domain is not None or not (corpus["source"] == "hub" and corpus.get("max_bytes")):
            return None
        share = corpus["val_fraction"] if split == "val" else 1 - corpus["val_fraction"]
        return int(corpus["max_bytes"] * share / BYTES_PER_TOKEN)

    # --- pretraining

    def stand_in_jobs(self) -> list[Job]:
        return [
            self.training_job(
                "pretrain_stand_in_teacher",
                slot,
                specs.stand_in_spec(self.p, slot),
                None,
                self.token_deps("stand_in", slot),
            )
            for slot in self.p.stand_in_slots
        ]

    def pretrain_jobs(self) -> list[Job]:
        jobs = []
        for run in self.p.pretrain_runs():
            mode, slot = run[:2]
            deps = self.token_deps(mode, slot if mode == "teacher" else None)
            if mode == "teacher" and slot in self.p.stand_in_slots:
                deps.append(f"pretrain_stand_in_teacher:{slot}")
            if mode == "teacher" and slot in self.p.gguf_slots:
                deps.append(f"materialize_teacher:{slot}")
            spec = specs.train_spec(self.p, run)
            jobs.append(self.training_job("pretrain", run_name(run), spec, slot if mode == "teacher" else None, deps))
        return jobs

    def token_deps(self, role: str, slot: str | None) -> list[str]:
        data = self.p.run_inputs(role, slot)
        return [self.token_id(data[split]) for split in SPLITS]

    @staticmethod
    def token_id(path: str) -> str:
        rule = "tokenize" if split_token_path(path)[2] is None else "tokenize_domain"
        return f"{rule}:{path.removeprefix('results/data/')}"

    def training_job(self, rule: str, name: str, spec: dict, slot: str | None, deps: list[str]) -> Job:
        """A `pit train` run: FLOPs = tokens x flops_per_token; validation a third of that per token; the interface
        metrics, the teacher's conversion, compiling, loading and saving as fixed costs (module cost)."""
        from pit.training.args import PretrainArgs

        args = PretrainArgs.from_dict(spec)
        c = self.run_cost(spec, slot)
        dev, width = self.placement(self.p.pretrain["resources"], args.device)
        tokens = args.max_steps * args.global_batch_tokens
        evals = (args.max_steps // args.eval_every if args.eval_every else 0) + 1
        val_tokens = evals * args.eval_batches * args.micro_batch_size * args.seq_len
        flops = c.flops_per_token * (tokens + val_tokens / 3)
        deltas = args.max_steps // args.interface_every + 1
        tables = (args.max_steps // args.consistency_every if args.consistency_every else 0) + 1
        polar = args.mode == "teacher" and (args.interface["kind"] == "pit" or args.interface.get("tt_init") == "polar")
        units = 2 * deltas + cost.METRIC_VD2 * tables + cost.POLAR_VD2 * polar
        fixed = dev.start_s + cost.COMPILE_S * args.compile + 2 * c.stored / cost.DISK_BYTES_S
        rate = self.rate(dev, width, args.compile)
        seconds = fixed + flops / rate + self.metric_seconds(c, units, dev, width)
        keep = args.keep_checkpoints if args.checkpoint_every and args.checkpoint_every <= args.max_steps else 0
        memory = cost.training_memory(c, args.micro_batch_size * args.seq_len, args.optimizer, dev.gpu)
        return Job(
            rule,
            name,
            dev.kind,
            width,
            seconds,
            deps,
            params=c.params,
            tokens=tokens,
            flops=flops,
            memory=memory["total"],
            disk=c.stored,
            disk_peak=keep * cost.checkpoint_bytes(c, args.optimizer),
            note=self.training_note(args, rate / (width * dev.peak), memory),
        )

    @staticmethod
    def training_note(args, mfu: float, memory: dict) -> str:
        """The assumptions beside a training job's numbers: MFU, optimizer, compiling, micro-batch, memory parts."""
        mode = "compiled" if args.compile else "eager"
        parts = ", ".join(f"{k} {v / cost.GIB:.1f}" for k, v in memory.items() if k != "total" and v)
        batch = f"micro-batch {args.micro_batch_size} x {args.seq_len}"
        return f"MFU {mfu:.1%} ({mode}), {args.optimizer}, {batch}; GiB: {parts}"

    # --- diagnosis, post-training

    def diagnose_jobs(self) -> list[Job]:
        """`pit diagnose` on CPU: the layerwise windows forward (a third of the training FLOPs per token), the
        logit lens (2 x 2 V d per layer and position), the Table 2 metrics, the load (rough)."""
        diag, jobs = specs.diagnose_spec(self.p), []
        threads = self.p.pretrain["resources"]["threads"]
        for run in self.p.diagnosed_runs():
            c = self.run_cost(specs.train_spec(self.p, run), run[1] if run[0] == "teacher" else None)
            tokens = diag["positions"] * diag["seq_len"]
            flops = tokens * c.flops_per_token / 3 + diag["positions"] * c.layers * 4 * c.vocab * c.width
            seconds = self.cpu.start_s + c.stored / cost.DISK_BYTES_S + flops / self.rate(self.cpu, threads)
            seconds += self.metric_seconds(c, cost.METRIC_VD2, self.cpu, threads)
            memory = cost.inference_memory(c, diag["positions"], gpu=False)
            note = f"{diag['positions']} windows of {diag['seq_len']} forward, Table 2 metrics"
            deps = [f"pretrain:{run_name(run)}"]
            job = Job("diagnose", run_name(run), "cpu", threads, seconds, deps, params=c.params, tokens=tokens)
            jobs.append(replace(job, flops=flops, memory=memory, rough=True, note=note))
        return jobs

    def post_jobs(self) -> list[Job]:
        jobs = []
        for run in self.p.posttrain_runs():
            for task in self.p.lora_tasks:
                jobs += [self.lora_job(run, task), self.evaluate_job(run, task)]
        jobs += [self.teacher_evaluate_job(slot) for slot in self.p.gguf_slots]
        return jobs + self.decision_jobs()

    def decision_jobs(self) -> list[Job]:
        """The decision's final models scored as they are (`evaluate_final`) and the side-by-side generations."""
        d, jobs = self.p.decision, []
        for run in self.p.decision_runs() if d and d["tasks"] else []:
            c = self.run_cost(specs.train_spec(self.p, run), run[1])
            jobs.append(
                self.scoring_job("evaluate_final", run_name(run), c, d["tasks"], 1, f"pretrain:{run_name(run)}")
            )
        for name, run in self.p.generated_runs().items():
            c = cost.model_cost(cost.interface_model(self.slot_config(d["slot"]), {"kind": "tt"}), 1)
            steps = len(d["prompts"]) * d["max_new_tokens"]
            seconds = self.cpu.start_s + c.stored / cost.DISK_BYTES_S + steps * c.layers * self.cpu.layer_step_s
            seconds += steps * c.flops_per_token / 3 / self.rate(self.cpu, self.p.post["resources"]["threads"])
            teacher = [f"materialize_teacher:{d['slot']}"] if d["slot"] in self.p.gguf_slots else []
            after = teacher if run is None else [f"pretrain:{run_name(run)}"]
            note = f"{len(d['prompts'])} prompts x <= {d['max_new_tokens']} new tokens, greedy"
            threads = self.p.post["resources"]["threads"]
            jobs.append(Job("generate", name, "cpu", threads, seconds, after, rough=True, note=note))
        return jobs

    def lora_job(self, run: tuple, task: str) -> Job:
        """`pit lora train`: (1 + frontier rates) x tokens x 2/3 flops_per_token (forward and input gradients
        through frozen weights), the side effects' two forward passes, load, merge and save (rough)."""
        from pit.training.args import LoraArgs
        from pit.training.lora import lora_targets

        args = LoraArgs.from_dict(specs.lora_spec(self.p, run, task))
        slot = run[1] if run[0] == "teacher" else None
        c = self.run_cost(specs.train_spec(self.p, run), slot, args.seq_len)
        dev, width = self.placement(self.p.post["resources"], args.device)
        rates, tokens = 1 + len(args.frontier_lrs), args.max_steps * args.batch_size * args.seq_len
        side = 2 * args.side_effect_windows * args.side_effect_seq_len
        flops = c.flops_per_token * (2 / 3 * tokens + side / 3) * rates
        targets = lora_targets("pit_" + c.model_type.removeprefix("pit_"), args.targets)
        adapter = cost.lora_parameters(c, targets, args.rank)
        seconds = dev.start_s + 3 * c.stored / cost.DISK_BYTES_S + flops / self.rate(dev, width)
        memory = cost.training_memory(c, args.batch_size * args.seq_len, "adamw", dev.gpu)
        memory = memory["total"] - memory["gradients"] - memory["optimizer"] + 16 * adapter
        merged = c.stored if self.p.post.get("keep_merged", True) else 0  # else deleted once evaluated
        job = Job("lora", run_name(run, task), dev.kind, width, seconds, [f"pretrain:{run_name(run)}"])
        note = f"rank {args.rank}, {rates} learning rate(s); params: the adapter's"
        return replace(
            job,
            params=adapter,
            tokens=tokens * rates,
            flops=flops,
            memory=memory,
            disk=4 * adapter + merged,
            disk_peak=c.stored - merged,
            rough=True,
            note=note,
        )

    def generation(self, c: cost.ModelCost, dev: cost.Device, width: int, tasks: list[str], models: int) -> tuple:
        """(seconds, FLOPs, samples) of `pit evaluate` on `tasks` with `models` models: greedy decoding of
        max_new_tokens per problem (an upper bound: stops end it earlier), each step layers x layer_step_s plus its
        FLOPs (a third of flops_per_token per token), and the sandbox for code samples (rough)."""
        ev = self.p.post["evaluate"]
        sizes = TEST_SET_SIZES.get(self.p.post["data_source"], TEST_SET_SIZES["offline"])
        seconds = flops = samples = 0
        for task in tasks:
            size = sizes.get(task, ev["limit"] or 100)  # a task file's records: unknown here
            n = min(ev["limit"] or size, size)
            steps = math.ceil(n / ev["batch_size"]) * ev["max_new_tokens"]
            step_flops = n * ev["max_new_tokens"] * c.flops_per_token / 3
            sandbox = n * SANDBOX_S / ev["workers"] if task in CODE_TASKS else 0
            seconds += models * (steps * c.layers * dev.layer_step_s + step_flops / self.rate(dev, width) + sandbox)
            flops, samples = flops + models * step_flops, samples + models * n
        return seconds, flops, samples

    def evaluate_job(self, run: tuple, task: str) -> Job:
        c = self.run_cost(specs.train_spec(self.p, run), run[1] if run[0] == "teacher" else None)
        tasks = [task, *self.p.post["tasks"][task]]
        return self.scoring_job("evaluate", run_name(run, task), c, tasks, 2, f"lora:{run_name(run, task)}")

    def teacher_evaluate_job(self, slot: str) -> Job:
        c = cost.model_cost(
            cost.interface_model(self.slot_config(slot), {"kind": "tt"}), self.p.config["context_length"]
        )
        return self.scoring_job("evaluate_teacher", slot, c, self.p.evaluated_tasks(), 1, f"materialize_teacher:{slot}")

    def scoring_job(self, rule: str, name: str, c: cost.ModelCost, tasks: list[str], models: int, after: str) -> Job:
        """A `pit evaluate` job: `models` models (a LoRA model and its base, or a teacher) loaded and scored on
        `tasks` (`generation`), each loaded from disk once."""
        dev, width = self.placement(self.p.post["resources"], self.p.post["evaluate"]["device"])
        seconds, flops, samples = self.generation(c, dev, width, tasks, models)
        seconds += dev.start_s + models * c.stored / cost.DISK_BYTES_S
        new = self.p.post["evaluate"]["max_new_tokens"]
        return Job(
            rule,
            name,
            dev.kind,
            width,
            seconds,
            [after],
            params=c.params,
            tokens=samples * new,
            flops=flops,
            memory=4 * c.params,
            rough=True,
            note=f"{samples} samples{' (LoRA and base)' if models == 2 else ''} of <= {new} new tokens, greedy",
        )

    # --- tables, figures, the report

    def report_jobs(self, upstream: list[str]) -> list[Job]:
        """One job per table, per figure rule (the claims figures are one job), the report and the MLflow summary;
        REPORT_S each on one CPU thread."""
        named = [(TABLE_RULES.get(t, t), t) for t in self.p.tables]
        named += [(rule, f) for f in self.p.figures if (rule := FIGURE_RULES.get(f.split("_")[0], FIGURE_RULES.get(f)))]
        named.append(("figure_claims", "claims figures"))
        jobs = [Job(rule, name, "cpu", 1, REPORT_S, list(upstream)) for rule, name in named]
        report = Job("report_md", "REPORT.md", "cpu", 1, REPORT_S, [j.id for j in jobs])
        summary = Job("mlflow_summary", "summary", "cpu", 1, REPORT_S, [report.id])
        return jobs + [report, summary]


# table name (Profile.tables) -> its rule; figure name (Profile.figures, or its first word) -> its rule
TABLE_RULES = {name: f"table_{name}" for name in ("stability", "teacher_gap", "frontier", *DECISION_TABLES)}
FIGURE_RULES = {
    "figure3": "figure_loss_curves",
    "figure4": "figure_loss_curves",
    "interface_drift": "figure_drift",
    "figure2_transition": "figure_transition",
    "side_effects": "figure_side_effects",
    "stand_in_teachers": "figure_stand_in_teachers",
    "parity": "figure_parity",
}


def _has_config(folder: str) -> bool:
    from pathlib import Path

    return (Path(folder) / "config.json").is_file()


# --- SLURM runtimes -----------------------------------------------------------------------------------------

# The rules whose jobs get a `runtime` resource, and the profile section whose `resources` set it
RUNTIME_SECTIONS = {
    "pretrain_stand_in_teacher": "pretrain",
    "pretrain": "pretrain",
    "diagnose": "pretrain",
    "lora": "posttrain",
    "evaluate": "posttrain",
    "evaluate_teacher": "posttrain",
    "evaluate_final": "posttrain",
    "generate": "posttrain",
}


def runtime_minutes(seconds: float, margin: float, attempt: int = 1) -> int:
    """A job's SLURM runtime: ceil(margin x attempt x planned minutes), at least RUNTIME_FLOOR minutes (a retry,
    attempt 2, gets twice the time: it resumes from the last trainer checkpoint, docs/reproducibility.md)."""
    return max(RUNTIME_FLOOR, math.ceil(margin * attempt * seconds / 60))


_PLANS: dict = {}


def planned_runtime(p: Profile, rule: str, name: str, attempt: int = 1) -> int:
    """The runtime (minutes) the workflow gives one job of a profile whose resources say `runtime: {device, margin
    [, mfu]}`: its planned seconds on that device kind (the plan built once per profile and kind) x margin."""
    runtime = p.config[RUNTIME_SECTIONS[rule]]["resources"]["runtime"]
    key = (id(p), runtime["device"], runtime.get("mfu"))
    if key not in _PLANS:
        _PLANS[key] = build(p, runtime["device"], mfu=runtime.get("mfu"))
    return runtime_minutes(_PLANS[key].job(rule, name).seconds, runtime["margin"], attempt)


def requested_runtime(p: Profile, job: Job, plan: Plan) -> int | None:
    """The runtime (minutes) a job asks SLURM for: the profile's number (diagnose: none, the executor's default), or
    with `runtime: {device, margin}` its planned seconds x margin (on this plan's device kind)."""
    section = RUNTIME_SECTIONS.get(job.rule)
    if section is None:
        return None
    runtime = p.config[section]["resources"]["runtime"]
    if isinstance(runtime, dict):
        return runtime_minutes(job.seconds, runtime["margin"])
    return None if job.rule == "diagnose" else runtime


def split_token_path(path: str) -> tuple[str, str, str | None]:
    """(tokenizer, split, domain) of a token file path of pit.pipeline.layout.token_file."""
    parts = path.split("/")
    tokenizer, rest = parts[2], parts[3:]
    split = rest[-1].removesuffix(".bin")
    if split not in SPLITS:
        raise PitError(f"not a token file path: {path!r}")
    return tokenizer, split, rest[0] if len(rest) == 2 else None


def run_name(run: tuple, task: str | None = None) -> str:
    """A job's name in the plan: the run's folder path (<mode>/<slot>/<arm>[/seed<k>]) [+ /<task>]."""
    return run_path(run) + ("" if task is None else f"/{task}")


# --- Output -------------------------------------------------------------------------------------------------

COLUMNS = ("rule", "job", "device", "width", "params", "tokens", "flops", "memory_gib", "disk_gb", "disk_running_gb")
COLUMNS += ("hours", "device_hours", "runtime_min", "rough", "assumption")


def job_rows(p: Profile, plan: Plan) -> list[dict]:
    """One row per job: the numbers and the assumption beside them (COLUMNS)."""
    return [
        {
            "rule": j.rule,
            "job": j.name,
            "device": j.device,
            "width": j.width,
            "params": j.params,
            "tokens": j.tokens,
            "flops": j.flops,
            "memory_gib": None if j.memory is None else j.memory / cost.GIB,
            "disk_gb": j.disk / 1e9,
            "disk_running_gb": j.disk_peak / 1e9,
            "hours": j.seconds / 3600,
            "device_hours": j.device_hours(),
            "runtime_min": requested_runtime(p, j, plan),
            "rough": j.rough,
            "assumption": j.note,
        }
        for j in plan.jobs
    ]


def stage_totals(plan: Plan) -> dict[str, dict]:
    """Per rule: jobs, FLOPs, device-hours and the device kind."""
    out: dict[str, dict] = {}
    for j in plan.jobs:
        row = out.setdefault(j.rule, {"jobs": 0, "flops": 0.0, "device_hours": 0.0, "device": j.device})
        row["jobs"] += 1
        row["flops"] += j.flops or 0
        row["device_hours"] += j.device_hours()
    return out


def assumptions(plan: Plan) -> list[str]:
    """Every assumption the numbers rest on, in words, with its source."""
    devices = [plan.gpu] if not plan.uses_gpu() or plan.gpu.kind == "cpu" else [plan.gpu, plan.cpu]
    mfu = ", ".join(f"{k} {v:.1%}" for k, v in plan.mfu.items())
    return [
        "training FLOPs = tokens x (6 N + (6 | 4) V d + 12 L d_attn T (+ 12 d^2 PIT)), N the non-embedding "
        "parameters, the head's GEMM counted as 6 V d (trained table) or 4 V d (PIT's frozen Z), attention 12 L d_attn "
        "T (PaLM App. B; pit bench's flops_per_token); validation, diagnosis, side effects and generation a third of "
        "it per token, LoRA two thirds",
        f"time = FLOPs / (devices x peak x MFU) + fixed costs; MFU used: {mfu}",
        *(
            f"{d.kind}: peak {d.peak / 1e12:g} TFLOP/s per device; {d.source}"
            if d.gpu
            else f"{d.kind}: peak {d.peak / 1e9:g} GFLOP/s per thread; {d.source}"
            for d in devices
        ),
        "memory per device = 4 P weights + 4 P_t gradients + 8 P_t AdamW + 2 P bf16 copies (CUDA) + "
        f"{cost.ACT_BYTES} b T L d activations (bf16; x2 FP32) + the loss's logits chunk (chunk rows x V x "
        f"{cost.LOGIT_BYTES} B) + {cost.CUDA_CONTEXT / cost.GIB:g} GiB CUDA context",
        "disk = final weights (FP32 safetensors) per run, the LoRA adapters and merged models, token files, the "
        "corpus; peak adds the newest keep_checkpoints trainer checkpoints (weights + AdamW state) of the largest run",
        f"wall time: the DAG scheduled greedily (longest path first) on {plan.devices} "
        + (
            f"{plan.gpu.kind} GPU(s), one job per GPU, CPU jobs on {HOST_CORES_PER_GPU} cores per GPU"
            if plan.uses_gpu()
            else "CPU cores, each job on its threads"
        ),
        "rough: post-training, evaluation, diagnosis and data jobs from token / sample counts and measured rates "
        "(generation to max_new_tokens, an upper bound)",
    ]


def to_json(p: Profile, plan: Plan) -> dict:
    """The whole plan: its devices and MFU, totals, per-rule totals, assumptions and every job's row."""
    totals = plan.totals()
    return {
        "profile": plan.profile,
        "device": plan.gpu.kind if plan.uses_gpu() else "cpu",  # the kind the devices are
        "devices": plan.devices,
        "mfu": plan.mfu,
        "totals": totals,
        "stages": stage_totals(plan),
        "assumptions": assumptions(plan),
        "jobs": job_rows(p, plan),
    }
