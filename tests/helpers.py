"""What the workflow tests share: running Snakemake on the repository's workflow, reading its dry runs,
writing edited profiles, and the one reduced pipeline run the end-to-end tests share (fixture
`pipeline_project` in conftest.py).

The shared run: a temporary project (a git repository holding a copy of the workflow, the code and the DVC
files) runs the default DAG on a reduced profile: one teacher slot with a stand-in teacher, one scratch
slot, PIT and TT, LoRA on MBPP with HumanEval as the out-of-domain set, tables, figures, report. The run is
SIGKILLed (Snakemake and its jobs) once the first training job has finished, then resumed with
--rerun-incomplete, so every test that reads its results also reads the results of a resumed pipeline.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from pit.training.allocator import environment

ROOT = Path(__file__).resolve().parents[1]

# A small real corpus: the first 60 files of this interpreter's standard library (pit data download's spec).
STDLIB_CORPUS = {
    "name": "stdlib",
    "source": "local",
    "glob": "@stdlib/**/*.py",
    "exclude": ["site-packages/*"],
    "max_documents": 60,
    "max_bytes": None,
    "val_fraction": 0.2,
    "seed": 0,
    "shard_documents": 25,
}
SNAKEFILE = ROOT / "workflow/Snakefile"
DEFAULT_CONFIG = "config/config.yaml"  # the embedded default profile, relative to a project's root
PAPER_CONFIG = ROOT / "config/paper.yaml"

# What a clone of the repository holds that the pipeline and DVC need (dvc.yaml's deps included).
PROJECT_FILES = ["workflow", "config", "pit", "dvc.yaml", ".dvc/config", ".dvc/.gitignore", ".dvcignore"]
LOCAL_PROFILE = "workflow/profiles/local"
GIT_ID = {
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@example.org",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@example.org",
}


# --- Snakemake on the repository's workflow, in a temporary directory --------------------------------


def snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = os.environ | {"HF_HUB_OFFLINE": "1"}  # the data stage of the default profile needs no network
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def job_counts(dry_run_output: str) -> dict[str, int]:
    """{rule: jobs} from the `Job stats` table of a dry run."""
    table = dry_run_output.split("Job stats:")[1].split("total")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def write_config(path: Path, edit) -> Path:
    """The default profile, changed by `edit(config)`, written to `path`."""
    config = yaml.safe_load((ROOT / DEFAULT_CONFIG).read_text())
    edit(config)
    path.write_text(yaml.safe_dump(config))
    return path


# --- The shared reduced pipeline run in a temporary project -------------------------------------------


def reduced(config: dict) -> dict:
    """The default profile cut to minutes: two slots, two interfaces (and the teacher arm pit-head), a few steps, one
    post-training task for the teacher slot's runs."""
    config["context_length"] = 32
    config["corpus"]["max_documents"] = 60
    config["tokenizers"]["bpe32k"]["vocab_size"] = 2000
    p = config["pretrain"]
    p["interfaces"] = ["pit", "tt"]
    p["teacher_slots"] = {"256m": {"stand_in": "gpt2-tiny"}}
    p["scratch_slots"] = {"303m": {"model": "scratch-tiny"}}
    p["train"].update(
        global_batch_tokens=128,
        micro_batch_size=4,
        max_steps=3,
        warmup_steps=1,
        checkpoint_every=2,
        eval_batches=1,
        final_loss_window=2,
    )
    p["mode_train"] = {"teacher": {"lr": 1.0e-3}, "scratch": {}}
    p["stand_in_teacher"] = {"max_steps": 4}
    post = config["posttrain"]
    post["interfaces"] = ["pit", "tt"]  # the teacher arm pit-head is pretrained, not post-trained
    post["modes"] = ["teacher"]  # scratch models' LoRA: tests/test_lora.py (here 4 processes, ~40 CPU seconds)
    post["tasks"] = {"mbpp": ["humaneval"]}
    post["lora"].update(max_steps=2, batch_size=2, seq_len=64, checkpoint_every=1, side_effect_windows=2, limit=16)
    post["evaluate"].update(limit=2, max_new_tokens=8)
    return config


def wait_for(check, timeout: float, what: str):
    """Call `check` until it returns something true and return that; fail after `timeout` seconds naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def mlflow_store_ready(base: str, proc: subprocess.Popen, timeout: float = 120, log: Path | None = None) -> None:
    """Wait until the MLflow server at `base` (the process `proc`, writing `log` if given) answers a request that
    reads its tracking store. An open port is not enough: on an idle 2-core machine the app answered /health 0.9 s
    after the port opened, and on a loaded one the first requests can take longer than the 5 s a training run's
    tracker waits (pit.tracking.tracker) before it gives up on the server, as a test once saw."""
    url = f"{base}/api/2.0/mlflow/experiments/get-by-name?experiment_name=Default"

    def answers() -> bool:
        if proc.poll() is not None:
            tail = log.read_text()[-2000:] if log is not None and log.is_file() else ""
            raise AssertionError(f"the MLflow server at {base} exited with {proc.returncode}\n{tail}")
        try:
            urllib.request.urlopen(url, timeout=60).close()
        except urllib.error.HTTPError:
            return True  # the store answered (an error about the experiment is still an answer)
        except OSError:
            return False  # not listening yet, or not answering yet
        return True

    wait_for(answers, timeout, f"the MLflow server at {base} to answer from its store")


def stop_group(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """Stop the process group `proc` leads (started with start_new_session=True): SIGTERM, SIGKILL after `timeout`."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run(cmd: list[str], cwd: Path, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


def snakemake_cmd(*args: str) -> list[str]:
    """Snakemake as a project runs it from its root (it finds workflow/Snakefile itself)."""
    return [sys.executable, "-m", "snakemake", "--profile", LOCAL_PROFILE, *args]


class Project:
    """A temporary project; HOME points into the temporary folder, so the default DVC remote
    (~/.cache/pit-repro/dvc-remote in .dvc/config) is the test's own."""

    def __init__(self, root: Path, home: Path):
        self.root, self.home = root, home
        self.env = os.environ | GIT_ID | {"HF_HUB_OFFLINE": "1", "DVC_NO_ANALYTICS": "1"}
        self.dvc_env = self.env | {"HOME": str(home)}

    @property
    def remote(self) -> Path:
        return self.home / ".cache/pit-repro/dvc-remote"

    def snakemake(self, *args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
        return run(snakemake_cmd(*args), cwd or self.root, self.env, check)


def make_project(root: Path, home: Path) -> Project:
    root.mkdir(parents=True)
    for name in PROJECT_FILES:
        src, dst = ROOT / name, root / name
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    config = reduced(yaml.safe_load((ROOT / DEFAULT_CONFIG).read_text()))
    (root / DEFAULT_CONFIG).write_text(yaml.safe_dump(config, sort_keys=False))
    shutil.copy2(ROOT / ".gitignore", root / ".gitignore")
    project = Project(root, home)
    run(["git", "init", "-q"], root)
    run(["git", "add", "-A"], root)
    run(["git", "commit", "-qm", "project"], root, project.env)
    return project


JOB_RE = re.compile(
    r"^\s*(?:local)?rule (\w+):\n(?:\s+\w+: .*\n)*?\s+output: (.*)\n(?:\s+\w+: .*\n)*?\s+jobid: (\d+)$", re.M
)


def job_outputs(log: str) -> dict[int, tuple[str, list[str]]]:
    """{jobid: (rule, outputs)} of the jobs a Snakemake log started."""
    return {int(m[3]): (m[1], [p.strip() for p in m[2].split(",")]) for m in JOB_RE.finditer(log)}


def finished_jobs(log: str) -> list[int]:
    return [int(n) for n in re.findall(r"Finished jobid: (\d+) ", log)]


def files_under(root: Path, paths: list[str]) -> list[Path]:
    """The files of `paths` (files, or folders walked recursively), relative to `root`, in sorted order."""
    out = []
    for p in paths:
        path = root / p
        out += [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.is_file())
    return out


def mtimes(root: Path, paths: list[str]) -> dict[str, int]:
    return {str(f.relative_to(root)): f.stat().st_mtime_ns for f in files_under(root, paths)}


def killed_and_resumed(tmp: Path) -> Project:
    """The shared run: started, SIGKILLed once the first training job finished, resumed to the end.
    `project.killed` records what had finished (and its files' mtimes), `project.resumed` the second run."""
    project = make_project(tmp / "project", tmp / "home")
    log_path = tmp / "first.log"
    with open(log_path, "w") as log:
        first = subprocess.Popen(
            snakemake_cmd(),
            cwd=project.root,
            env=project.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 600
    try:
        while not re.search(r"Finished jobid: \d+ \(Rule: pretrain", log_path.read_text()):
            assert first.poll() is None, f"the pipeline ended before any training job finished:\n{log_path.read_text()}"
            assert time.monotonic() < deadline, "no training job finished in 10 minutes"
            time.sleep(0.2)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # Snakemake and every job it started: a crash, no clean-up
        first.wait()
    first_log = log_path.read_text()
    started = job_outputs(first_log)
    done = [started[j] for j in finished_jobs(first_log)]
    done_outputs = [p for _, outputs in done for p in outputs]
    project.killed = {"log": first_log, "finished": done, "mtimes": mtimes(project.root, done_outputs)}
    project.total_jobs = sum(job_counts(first_log).values())  # the whole DAG, printed when the run started

    project.snakemake("--unlock")  # a SIGKILLed Snakemake leaves its lock
    project.resumed = project.snakemake("--rerun-incomplete")
    return project


# --- A crash at a chosen point ------------------------------------------------------------------------------------

_KILL_HOOK = """
import os, runpy, signal, sys
def _kill_at(event, args, _event={event!r}, _match={match!r}):
    if event == _event and any(str(a) == _match for a in args):
        os.kill(os.getpid(), signal.SIGKILL)
sys.addaudithook(_kill_at)
"""


def killed_at(event: str, match: str, argv: list[str]) -> subprocess.CompletedProcess:
    """Run `python ARGV` (`-m MODULE ARGS...` or `-c CODE ARGS...`) in a child that SIGKILLs itself when the audit
    event `event` first fires with an argument equal to `match` (e.g. `os.rename` onto a given path, before the
    rename happens; `shutil.rmtree` of a given folder): a crash at an exact point of the real code, no timing."""
    hook = _KILL_HOOK.format(event=event, match=match)
    if argv[0] == "-m":
        body = f"sys.argv = {argv[1:]!r}\nrunpy.run_module({argv[1]!r}, run_name='__main__', alter_sys=True)\n"
    else:
        body = f"sys.argv = ['-c', *{argv[2:]!r}]\nexec(compile({argv[1]!r}, '<killed_at>', 'exec'))\n"
    # started as `pit` re-executes itself (pit/training/allocator.py), so the hook lives in the process that runs
    env = environment()
    return subprocess.run([sys.executable, "-c", hook + body], capture_output=True, text=True, env=env)


def write_tiny_gguf(path: Path, seed: int = 0):
    """A tiny tied Llama written as llama.cpp writes a GGUF file (the `gguf` package's GGUFWriter): 1 block, d = 32,
    a byte-level BPE tokenizer of 262 tokens (<|endoftext|> as unknown, <s>, </s>, the 256 bytes, 3 merges) that
    puts <s> before every text; every tensor F32 but ffn_up in Q8_0, q/k permuted as llama.cpp's converter does.
    Returns the transformers model it holds (ffn_up as the GGUF dequantises it), whose logits the materialised
    folder must reproduce."""
    import gguf
    import torch
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import AutoConfig, AutoModelForCausalLM

    tokens = ["<|endoftext|>", "<s>", "</s>", *sorted(ByteLevel.alphabet()), "Ġt", "he", "Ġthe"]
    V, D, F, H, KV = len(tokens), 32, 64, 4, 2
    config = dict(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=1, num_attention_heads=H,
                  num_key_value_heads=KV, max_position_embeddings=64, tie_word_embeddings=True, bos_token_id=1,
                  eos_token_id=2, rms_norm_eps=1e-5)  # fmt: skip
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **config)).eval()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    for add, value in [(w.add_block_count, 1), (w.add_context_length, 64), (w.add_embedding_length, D),
                       (w.add_feed_forward_length, F), (w.add_head_count, H), (w.add_head_count_kv, KV),
                       (w.add_layer_norm_rms_eps, 1e-5), (w.add_rope_freq_base, 10000.0),
                       (w.add_rope_dimension_count, D // H), (w.add_vocab_size, V),
                       (w.add_file_type, gguf.LlamaFileType.MOSTLY_Q8_0), (w.add_tokenizer_model, "gpt2"),
                       (w.add_tokenizer_pre, "default"), (w.add_token_list, tokens),
                       (w.add_token_types, [gguf.TokenType.CONTROL] * 3 + [gguf.TokenType.NORMAL] * (V - 3)),
                       (w.add_token_merges, ["Ġ t", "h e", "Ġt he"]), (w.add_bos_token_id, 1),
                       (w.add_eos_token_id, 2), (w.add_unk_token_id, 0), (w.add_add_bos_token, True)]:  # fmt: skip
        add(value)
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    for hf, name in {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                     "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                     "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
                     "post_attention_layernorm": "ffn_norm"}.items():  # fmt: skip
        names[f"model.layers.0.{hf}.weight"] = f"blk.0.{name}.weight"
    for hf, name in names.items():
        x = model.get_parameter(hf).detach().numpy()
        heads = {"blk.0.attn_q.weight": H, "blk.0.attn_k.weight": KV}.get(name)
        if heads:  # llama.cpp's rotary layout of q and k
            x = x.reshape(heads, 2, x.shape[0] // heads // 2, x.shape[1]).swapaxes(1, 2).reshape(x.shape)
        if name == "blk.0.ffn_up.weight":
            q8 = gguf.GGMLQuantizationType.Q8_0
            x = gguf.quants.quantize(x, q8)
            with torch.no_grad():
                model.get_parameter(hf).copy_(torch.from_numpy(gguf.quants.dequantize(x, q8)))
            w.add_tensor(name, x, raw_dtype=q8)
        else:
            w.add_tensor(name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model
