import json
import os
import sys
from pathlib import Path

import pytest
import torch
from helpers import STDLIB_CORPUS, killed_and_resumed

from pit.training.allocator import environment

# Determinism and a quiet, offline environment for every test.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Commands run by name (`pit`, `snakemake`, `dvc`) are this interpreter's, e.g. the checkout's .venv (docs/install.md).
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def pytest_configure(config):
    """Set here, in the process that starts the xdist workers, so the workers and every program the tests start
    get it (both are read only when a process starts):
    - pit's host memory policy (pit/training/allocator.py), which `pit train` gives itself: in-process tests that
      allocate large tensors (the XL interface tests, in-process training) no longer page-fault them in afresh at
      every allocation. Numerics are untouched. A test that wants glibc's defaults sets PIT_MALLOC=system or builds
      its child's environment itself (tests/test_allocator.py).
    - OMP_WAIT_POLICY=PASSIVE, unless set: OpenMP threads that wait for work sleep instead of spinning. Two workers
      on two cores each run torch with its default thread count (the resume tests compare in-process runs with
      `pit train` processes bit for bit, so the count must stay torch's default); spinning threads take the cores
      the other worker's threads need. Results do not change, only how idle threads wait.
    - PIT_SANDBOX=weak where bubblewrap cannot run: the suite's explicit opt-in to the weak sandbox (without it the
      evaluator refuses to score code; docs/evaluation.md). Its scores then record "weak (opted in)"; the tests of
      the isolation itself are skipped there (`isolated()`)."""
    if not hasattr(config, "workerinput"):  # the controller, or a run without xdist (xdist gives workers this)
        os.environ.update(environment())
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        from pit.evaluation.sandbox import isolated

        if not isolated():
            os.environ.setdefault("PIT_SANDBOX", "weak")


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject.toml's addopts): one worker more than the cores this process may run on, at most
    `--maxprocesses`. Several long tests mostly wait: the SLURM test on the scheduler's status polls, others on
    servers they start and on the processes they run. With one worker per core the cores were ~11% idle over a run;
    a third worker on 2 cores fills that time (the measurements: benchmarks/RESULTS.md, section 26)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores + 1


def pytest_collection_modifyitems(config, items):
    """Tests marked `cuda` need a CUDA device: without one they are deselected (listed as such), not skipped.
    Tests marked `slow` run first (a stable sort): pytest-xdist hands out tests in this order, so the long ones
    start while the short ones can still fill in behind them, and the workers finish together instead of one
    running a long test alone at the end."""
    if not torch.cuda.is_available():
        keep = [item for item in items if item.get_closest_marker("cuda") is None]
        if len(keep) < len(items):
            config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("cuda")])
            items[:] = keep
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_report_header(config):
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none; tests marked cuda deselected"
    sandbox = "weak (opted in: no bubblewrap here)" if os.environ.get("PIT_SANDBOX") == "weak" else "bubblewrap"
    return [f"CUDA: {device}", f"sandbox of code samples: {sandbox}"]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory, worker_id):
    """Real text, small: 60 stdlib files -> GPT-2 and a 2k BPE tokenizer -> train/val token files. Built once per
    test session: the first xdist worker to need it builds it under a file lock, the others read its paths (the
    pytest-xdist recipe for a session fixture; each worker built its own copy before, ~6 s each)."""
    if worker_id == "master":  # no xdist
        return build_tiny_data(tmp_path_factory.mktemp("tiny_data"))
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp().parent / "tiny_data"  # the session's folder, shared by its workers
    with FileLock(f"{root}.lock"):
        done = root / "paths.json"
        if not done.is_file():
            paths = build_tiny_data(root)
            done.write_text(json.dumps(paths))
        return json.loads(done.read_text())


def build_tiny_data(root: Path) -> dict:
    from pit.data.download import download
    from pit.data.tokenize import tokenize_split
    from pit.data.tokenizers import build_tokenizer

    corpus = STDLIB_CORPUS | {"shard_documents": 30}
    manifest = root / "corpus" / "manifest.json"
    download(corpus, manifest)
    build_tokenizer("gpt2", {"kind": "gpt2", "source": "package"}, root / "tok" / "gpt2")
    build_tokenizer(
        "bpe2k",
        {"kind": "bpe", "vocab_size": 2000, "min_frequency": 2, "seed": 0, "sample_bytes": None},
        root / "tok" / "bpe2k",
        corpus=str(manifest),
    )
    paths = {}
    for tok in ("gpt2", "bpe2k"):
        paths[tok] = {"tokenizer": str(root / "tok" / tok)}
        for split in ("train", "val"):
            out = root / "data" / tok / f"{split}.bin"
            tokenize_split(manifest, split, root / "tok" / tok, out, workers=1, batch_documents=16)
            paths[tok][split] = str(out)
    return paths


@pytest.fixture(scope="session")
def pipeline_project(tmp_path_factory):
    """The reduced pipeline run, killed once and resumed, that the end-to-end modules share (tests/helpers.py)."""
    return killed_and_resumed(tmp_path_factory.mktemp("pipeline"))
