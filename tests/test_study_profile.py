"""The study profile (config/study.yaml, docs/study.md): every arm x mode x seed is one pretraining job, and the
seed is a wildcard of pretraining, LoRA, evaluation and diagnostics (dry runs: nothing is trained here)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile

import numpy as np
import pytest
import yaml
from helpers import ROOT, job_counts, snakemake, write_tiny_gguf

from pit.data.reader import TokenFile, unigram_entropy
from pit.models import gguf
from pit.reporting.report import learned, table_notes

pytestmark = pytest.mark.xdist_group("study_profile")  # its module fixtures are built once, on one worker

STUDY_CONFIG = ROOT / "config/study.yaml"
WORK = ("data", "train", "diagnose", "lora", "evaluate")  # the `pit` commands that do a run's work (not tables)


def pit_commands(dry_run_output: str) -> list[str]:
    """The `pit` command of every job in a dry run with `-p`."""
    return re.findall(r"^(?:Shell command: )?(pit \S+ .*)$", dry_run_output, re.M)


@pytest.fixture(scope="module")
def study():
    return yaml.safe_load(STUDY_CONFIG.read_text())


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> str:
    workdir = tmp_path_factory.mktemp("study")
    proc = snakemake(workdir, "-n", "-p", "--configfile", str(STUDY_CONFIG), "--cores", "1")
    assert not (workdir / "results").exists()
    return proc.stdout


def arms(config: dict) -> dict[str, list[str]]:
    """Each mode's arms: the interfaces, each followed by the extra arms of its kind (the name's prefix)."""
    p = config["pretrain"]
    return {
        m: [
            a
            for i in p["interfaces"]
            for a in [i, *(x for x in p.get(f"{m}_arms", {}) if x.split("-")[0] == i and x != i)]
        ]  # fmt: skip
        for m in ("teacher", "scratch")
    }


def runs(config: dict) -> list[tuple[str, str, str, int]]:
    """(mode, slot, arm, seed) of every pretraining run: the slot's `arms` (default all), each with its seeds, else
    its slot's, else the profile's."""
    p, out = config["pretrain"], []
    for mode, per_mode in arms(config).items():
        for slot, entry in p[f"{mode}_slots"].items():
            for arm in [a for a in per_mode if a in entry.get("arms", per_mode)]:
                seeds = p.get(f"{mode}_arms", {}).get(arm, {}).get("seeds", entry.get("seeds", config["seeds"]))
                out += [(mode, slot, arm, k) for k in seeds]
    return out


def test_study_runs_every_arm_and_mode_once_per_seed(study, dry_run):
    per_mode, every = arms(study), runs(study)
    teacher = {"pit", "tt", "tt-matched", "tt-norewarm"}
    assert teacher <= set(per_mode["teacher"]) and {"pit", "pit-z", "tt", "untied"} <= set(per_mode["scratch"])
    assert all(len({k for m, s, a, k in every if (m, s, a) == run[:3]}) >= 3 for run in every)  # >= 3 seeds each
    sweep = {s for s, e in study["pretrain"]["scratch_slots"].items() if e.get("sweep_of")}
    seeds = {run[:3]: len({k for m, s, a, k in every if (m, s, a) == run[:3]}) for run in every}
    primary = [(m, s, a) for (m, s, a) in seeds if a in ("pit", "tt", "tt-matched") or (m, a) == ("scratch", "untied")]
    assert all(seeds[r] >= 10 for r in primary)  # the power of the primary tests and the deciding controls
    assert study["claims"]["matched_control"] == "tt-matched" and study["claims"]["primary"] == {
        "teacher": "pit", "scratch": "pit"}  # fmt: skip
    lrs = [study["pretrain"]["train"]["lr"], *(study["pretrain"]["scratch_slots"][s]["train"]["lr"] for s in sweep)]
    assert len(lrs) >= 4 and max(lrs) / min(lrs) >= 50  # the stability sweep: the base rate and three above it
    assert study["tokenizers"]["bpe1k"]["vocab_size"] == 1024  # the interface ~15% of the parameters (docs/study.md)
    diagnosed = [r for r in every if r[1] not in sweep]
    post = [r for r in diagnosed if r[2] in study["posttrain"]["interfaces"]]
    counts = job_counts(dry_run)
    assert counts["pretrain"] == len(every) and counts["diagnose"] == len(diagnosed)
    assert counts["lora"] == counts["evaluate"] == len(post) * len(study["posttrain"]["tasks"])
    assert counts["pretrain_stand_in_teacher"] == 1  # the teacher is shared by every seed
    for mode, slot, arm, seed in every:
        assert f"results/pretrain/{mode}/{slot}/{arm}/seed{seed}/summary.json" in dry_run
        diag = f"results/diagnostics/{mode}/{slot}/{arm}/seed{seed}/diagnostics.json"
        assert (diag in dry_run) == (slot not in sweep)
        side = f"results/posttrain/{mode}/{slot}/{arm}/seed{seed}/mbpp/side_effects.json"
        assert (side in dry_run) == ((mode, slot, arm, seed) in post)


def test_a_seed_sets_the_runs_seed_name_data_and_settings(study, dry_run):
    """Every pretraining and LoRA job of seed k trains with seed k (init, data order, LoRA init) under a name
    ending in -s<k>; arms of one seed share it, so their data order is the same. Teacher mode reads the `tests`
    domain, the stand-in teacher `lib`; a sweep slot changes only the learning rate; LoRA jobs train the frontier."""
    specs = [m for m in re.findall(r"--spec '(\{.*?\})'", dry_run) if '"run_name"' in m]
    seeded = [yaml.safe_load(s) for s in specs]
    trained = [s for s in seeded if s["run_name"].startswith(("teacher-", "scratch-", "lora-"))]
    for spec in trained:
        assert spec["run_name"].endswith(f"-s{spec['seed']}") and spec["tags"]["seed"] == str(spec["seed"])
    by_name = {s["run_name"]: s for s in trained}
    assert by_name["scratch-303m-pit-z-s1"]["interface"] == {**by_name["scratch-303m-pit-s1"]["interface"],
                                                             "trainable_z": True}  # fmt: skip
    assert by_name["teacher-256m-tt-matched-s9"]["interface"]["tt_init"] == "polar"
    assert by_name["teacher-256m-pit-s0"]["decay_steps"] < by_name["teacher-256m-pit-s0"]["max_steps"]
    control = by_name["teacher-256m-tt-norewarm-s0"]
    assert control["interface"]["kind"] == "tt" and control["lr"] == control["min_lr"] and control["warmup_steps"] == 0
    assert by_name["teacher-256m-tt-s0"]["train_data"] == "results/data/bpe1k/tests/train.bin"
    assert by_name["scratch-303m-tt-s0"]["train_data"] == "results/data/bpe1k/train.bin"
    stand_in = next(yaml.safe_load(s) for s in specs if '"stand-in-teacher-256m"' in s)
    assert stand_in["train_data"] == "results/data/bpe1k/lib/train.bin"
    sweep, main = by_name["scratch-303m-lr2e-1-tt-s2"], by_name["scratch-303m-tt-s2"]
    assert sweep["tags"]["sweep_of"] == "303m" and sweep["lr"] == 0.2
    varied = ("lr", "min_lr", "allow_divergence", "stop_after_nonfinite", "run_name", "tags")  # a diverged run is
    assert sweep["allow_divergence"] is True and "allow_divergence" not in main  # recorded, and stops when stuck
    assert sweep["stop_after_nonfinite"] == 20
    assert {k: v for k, v in sweep.items() if k not in varied} == {k: v for k, v in main.items() if k not in varied}
    lora = by_name["lora-mbpp-teacher-256m-tt-s3"]
    assert lora["frontier_lrs"] == study["posttrain"]["frontier_lrs"] and lora["val_data"].endswith("tests/val.bin")
    assert "teacher-256m-pit-s9" in by_name and "teacher-256m-tt-norewarm-s3" not in by_name  # its 3 seeds
    assert "lora-mbpp-teacher-256m-tt-matched-s9" in by_name  # the matched control gets LoRA at every seed


def test_profiles_without_seeds_keep_their_paths(tmp_path):
    proc = snakemake(tmp_path, "-n", "--cores", "1")
    assert "results/pretrain/scratch/303m/pit/summary.json" in proc.stdout
    assert "/seed" not in proc.stdout


def test_unigram_entropy_and_the_report_line(tmp_path):
    """The no-context baseline the study's models must beat: H = -sum p ln p of the token frequencies, and the
    report's line saying how far below it a mode's validation losses end."""
    tokens = np.array([0, 1, 1, 2, 2, 2, 2, 3], dtype=np.uint16)
    tokens.tofile(tmp_path / "val.bin")
    meta = {"corpus": "t", "documents": 1, "dtype": "uint16", "eos_id": 0, "split": "val", "tokens": 8}
    (tmp_path / "val.json").write_text(json.dumps({**meta, "vocab_size": 8}))
    p = np.array([1, 2, 4, 1]) / 8
    assert unigram_entropy(TokenFile(tmp_path / "val.bin")) == pytest.approx(-(p * np.log(p)).sum(), abs=1e-12)
    for seed, loss in ((0, 4.0), (1, 4.5)):
        run = tmp_path / "pretrain/scratch/303m/pit" / f"seed{seed}"
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps({"val_loss": loss}))
    line = learned(tmp_path / "pretrain", "scratch", 6.0)
    assert "4.000 to 4.500 nats/token over 2 runs, 1.50 to 2.00 below the unigram entropy" in line


def test_seeded_reports_do_not_say_one_seed():
    for name in ("table1", "table4_scores", "table4_side_effects"):
        assert any("One seed" in n for n in table_notes(name, seeded=False))
        seeded = table_notes(name, seeded=True)
        assert not any("One seed" in n for n in seeded) and any("intervals over seeds" in n for n in seeded)


def test_gpu_study_plans_every_arm_at_realistic_width_and_a_seed_zero_slice(tmp_path):
    """config/study-gpu.yaml (docs/study.md, "On one GPU"): 3 arms x 2 modes x 3 seeds at the Table 3 width on CUDA,
    batches of 32 windows of 1024, one BPE of 32,000 shared by both modes; with `seeds: [0]` laid over it (the slice
    scripts/gpu_check.sh runs) one seed of each."""
    gpu = ROOT / "config/study-gpu.yaml"
    full = snakemake(tmp_path, "-n", "-p", "--configfile", str(gpu), "--cores", "1").stdout
    (tmp_path / "seed0.yaml").write_text("seeds: [0]\n")
    seed0 = str(tmp_path / "seed0.yaml")
    slice_ = snakemake(tmp_path, "-n", "-p", "--configfile", str(gpu), seed0, "--cores", "1").stdout
    assert job_counts(full)["pretrain"] == 18 and job_counts(slice_)["pretrain"] == 6
    assert job_counts(full)["pretrain_stand_in_teacher"] == job_counts(slice_)["pretrain_stand_in_teacher"] == 1
    # the whole study after the slice (scripts/gpu_check.sh, GPU_CHECK_SEEDS=0,1,2) reuses the slice's finished jobs:
    # each of them is a job of the whole study with the same command (Snakemake reruns a job whose params changed)
    work = [c for c in pit_commands(slice_) if c.split()[1] in WORK]
    assert len(work) == 8 + 7 + 6 + 4 + 4  # data, train (the stand-in's too), diagnose, lora, evaluate
    assert set(work) <= set(pit_commands(full))
    specs = [yaml.safe_load(s) for s in re.findall(r"--spec '(\{.*?\})'", full) if '"run_name"' in s]
    runs = {s["run_name"]: s for s in specs if s["run_name"].startswith(("teacher-", "scratch-", "stand-in-"))}
    assert len(runs) == 19
    for spec in runs.values():
        assert (spec["device"], spec["precision"], spec["seq_len"]) == ("cuda", "auto", 1024)
        assert spec["global_batch_tokens"] == 32 * 1024 and spec["micro_batch_size"] == 32
        assert spec["train_data"].startswith("results/data/bpe32k/")  # one BPE for both modes and the stand-in
    assert {s.get("model") for n, s in runs.items() if n.startswith("scratch-")} == {"scratch-133m"}
    assert runs["stand-in-teacher-124m"]["model"] == "gpt2-small"


def test_gpu_check_runs_the_study_at_the_seeds_it_is_given_and_the_real_teacher_study(tmp_path):
    """scripts/gpu_check.sh's GPU_CHECK_SEEDS (docs/performance.md): the study step plans config/study-gpu.yaml at
    those seeds (here on CPU, `--cpu-smoke`: planned only, with the other steps left out) and the summary names
    them; a malformed value (or compile mode, or loss chunk) stops the script before it does anything, naming it.
    GPU_CHECK_REAL=1 (docs/study.md, "The real teachers on one GPU"): the teacher's stage carried in .stage/ (here a
    tiny GGUF teacher's, `pit teacher pack`, under the packaged name of the profile's slot) is unpacked into the real
    study's folder byte for byte, config/real-gpu.yaml is planned there (17 runs at 16 x 1024 tokens on CUDA, the
    teacher not materialised again) and its small files come back in one archive; `--receive` (the calls that bring
    pieces) refuses a damaged piece in one line."""
    for part in ("config", "workflow"):
        shutil.copytree(ROOT / part, tmp_path / part)
    (tmp_path / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts/gpu_check.sh", tmp_path / "scripts")
    (tmp_path / "no-wheels").mkdir()
    write_tiny_gguf(tmp_path / "tiny.gguf")
    gguf.materialize(str(tmp_path / "tiny.gguf"), tmp_path / "teacher")
    gguf.pack(tmp_path / "teacher", tmp_path / ".stage/smollm2-135m", 25_000)  # 3 pieces
    env = os.environ | {"PYTHON": sys.executable, "GPU_CHECK_WHEELS": "no-wheels", "GPU_CHECK_REAL": "1",
                        "GPU_CHECK_SKIP": "tests,bench_eager,bench_compiled"}  # fmt: skip
    check = [str(tmp_path / "scripts/gpu_check.sh"), "--cpu-smoke"]
    proc = subprocess.run([*check, "out"], cwd=tmp_path, env=env | {"GPU_CHECK_SEEDS": "0,1,2"}, capture_output=True,
                          text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    assert summary["study_seeds"] == [0, 1, 2] and summary["steps"]["study"]["exit"] == 0
    assert yaml.safe_load((tmp_path / "out/seeds.yaml").read_text()) == {"seeds": [0, 1, 2]}
    assert job_counts((tmp_path / "out/study.log").read_text())["pretrain"] == 18
    assert summary["steps"]["teacher_smollm2"]["exit"] == summary["steps"]["real"]["exit"] == 0
    unpacked = tmp_path / "runs/real-gpu/resources/teachers/smollm2"
    files = sorted(f.name for f in (tmp_path / "teacher").iterdir())
    assert sorted(f.name for f in unpacked.iterdir()) == files
    assert all((unpacked / f).read_bytes() == (tmp_path / "teacher" / f).read_bytes() for f in files)
    real = (tmp_path / "out/real.log").read_text()
    counts = job_counts(real)
    assert (counts["pretrain"], counts["diagnose"], counts["lora"]) == (17, 17, 15)  # LoRA: pit, tt, tt-matched
    assert "materialize_teacher" not in counts  # the unpacked folder is the slot's teacher
    specs = [yaml.safe_load(s) for s in re.findall(r"--spec '(\{.*?\})'", real) if '"run_name"' in s]
    runs = {s["run_name"]: s for s in specs if s["run_name"].startswith("teacher-")}  # the pretraining runs
    assert len(runs) == 17 and sum(re.fullmatch(r"teacher-smollm2-pit-s\d", n) is not None for n in runs) == 6
    for spec in runs.values():
        assert (spec["device"], spec["precision"], spec["seq_len"]) == ("cuda", "auto", 1024)
        assert (spec["global_batch_tokens"], spec["micro_batch_size"], spec["max_steps"]) == (16384, 16, 250)
    with tarfile.open(tmp_path / "out/real-gpu.tgz") as archive:
        assert "resources/teachers/smollm2/provenance.json" in archive.getnames()
    piece = tmp_path / ".stage/smollm2-135m/tiny.gguf.part01"
    piece.write_bytes(piece.read_bytes()[1:])
    receive = subprocess.run([str(tmp_path / "scripts/gpu_check.sh"), "--receive"], cwd=tmp_path, env=env,
                             capture_output=True, text=True)  # fmt: skip
    assert receive.returncode == 2 and "piece 'tiny.gguf.part01'" in receive.stderr.strip().splitlines()[-1]
    bad = subprocess.run([*check, "bad"], cwd=tmp_path, env=env | {"GPU_CHECK_SEEDS": "0;1"}, capture_output=True,
                         text=True)  # fmt: skip
    assert bad.returncode == 2 and "GPU_CHECK_SEEDS='0;1'" in bad.stderr and not (tmp_path / "bad").exists()
    bad = subprocess.run([*check, "bad"], cwd=tmp_path, env=env | {"GPU_CHECK_COMPILE_MODE": "fast"},
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 2 and "GPU_CHECK_COMPILE_MODE='fast'" in bad.stderr and not (tmp_path / "bad").exists()
    bad = subprocess.run([*check, "bad"], cwd=tmp_path, env=env | {"GPU_CHECK_LOSS_CHUNK_ROWS": "0"},
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 2 and "GPU_CHECK_LOSS_CHUNK_ROWS='0'" in bad.stderr and not (tmp_path / "bad").exists()
