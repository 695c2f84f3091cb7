"""What a newcomer meets first: `pit evaluate --model` printing its scores without writing files, stand-in
data announced, short LoRA runs without a warmup setting, damaged JSON files named, and the workflow run
from the wrong folder or with a missing --configfile."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from helpers import ROOT
from test_lora import make_base

from pit.commands import main
from pit.errors import PitError
from pit.io import read_json, read_jsonl
from pit.training.args import LoraArgs, PretrainArgs
from pit.training.optim import lr_lambda


def tiny_gpt2(folder):
    from transformers import GPT2Config, GPT2LMHeadModel

    from pit.data.tokenizers import build_tokenizer

    build_tokenizer("gpt2", {"kind": "gpt2", "source": "package"}, folder)
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, n_positions=512)).save_pretrained(folder)
    return folder


def test_evaluate_without_out_prints_the_scores_and_writes_nothing(tmp_path, capsys, monkeypatch):
    ckpt = tiny_gpt2(tmp_path / "ckpt")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    args = ["evaluate", "gsm8k", "svamp", "--model", str(ckpt), "--limit", "3", "--max-new-tokens", "4"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert f"{ckpt}: gsm8k-standin: accuracy = " in out and f"{ckpt}: svamp-standin: accuracy = " in out
    notices = [line for line in err.splitlines() if "STAND-IN" in line]
    assert len(notices) == 2 and all(line.startswith("pit evaluate: ") for line in notices)
    assert not list(work.iterdir()) and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "work"]


def test_short_lora_run_needs_no_warmup_setting_and_names_its_standin_data(tiny_data, tmp_path, capsys):
    """max_steps 3 without warmup_steps: the default warmup scales with the run (0 here) instead of failing."""
    base = make_base(tiny_data, tmp_path / "base", "scratch", "pit")
    spec = dict(base=str(base), task="gsm8k", limit=8, rank=2, max_steps=3, batch_size=2, seq_len=48)
    spec.update(mlflow={"enabled": False})
    assert main(["lora", "train", "--spec", json.dumps(spec), "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if "STAND-IN" in line] == [
        "pit lora train: task gsm8k: training on offline STAND-IN data (seeded records with the real data set's "
        "fields; source 'offline', the default, reads no hub data): not the paper's training set"
    ]
    args = LoraArgs.from_dict(spec)
    assert args.warmup_steps == 0
    logged = [row["lr"] for row in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "lr" in row]
    assert logged == pytest.approx([args.lr * lr_lambda(args)(s) for s in range(3)], rel=1e-6)
    assert (tmp_path / "run" / "merged" / "README.md").is_file()


@pytest.mark.parametrize(("max_steps", "warmup"), [(1, 0), (5, 0), (50, 5), (99, 9), (100, 10), (2000, 10)])
def test_default_warmup_scales_with_the_run_and_explicit_values_stay(max_steps, warmup):
    lora = {"base": "b", "task": "mbpp"}
    assert LoraArgs.from_dict({**lora, "max_steps": max_steps}).warmup_steps == warmup
    assert LoraArgs.from_dict({**lora, "max_steps": 2000, "warmup_steps": 50}).warmup_steps == 50
    train = dict(mode="scratch", model="m", train_data="t", val_data="v", tokenizer="k", max_steps=max_steps)
    assert PretrainArgs.from_dict(train).warmup_steps == warmup


def test_too_long_warmup_names_the_fix():
    with pytest.raises(PitError, match=r"warmup_steps 10; expected .* max_steps = 5 \(set warmup_steps below"):
        LoraArgs.from_dict({"base": "b", "task": "mbpp", "max_steps": 5, "warmup_steps": 10})


def test_damaged_json_files_are_named(tmp_path):
    (tmp_path / "a.json").write_text('{"final_loss": 3.1, "val')
    (tmp_path / "m.jsonl").write_text('{"step": 1}\n\n{"step": 2, "lo\n')
    with pytest.raises(PitError, match=r"a\.json' is not valid JSON .*expected one JSON value"):
        read_json(tmp_path / "a.json")
    with pytest.raises(PitError, match=r"m\.jsonl' line 3 is not valid JSON .*expected one JSON value per line"):
        read_jsonl(tmp_path / "m.jsonl")
    with pytest.raises(PitError, match=r"none\.jsonl' does not exist; expected a JSON Lines file"):
        read_jsonl(tmp_path / "none.jsonl")
    samples = tmp_path / "s.jsonl"
    samples.write_text('{"task_id": "gsm8k/0", "completion": "1"\n')
    assert main(["evaluate", "gsm8k", "--samples", str(samples)]) == 2


def snakemake_in(cwd, *args):
    cmd = [sys.executable, "-m", "snakemake", "-n", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)


def test_workflow_run_from_inside_workflow_is_refused_in_one_line(tmp_path):
    project = tmp_path / "project"
    for name in ("workflow", "config"):
        shutil.copytree(ROOT / name, project / name)
    for cwd, snakefile in [(project / "workflow", "Snakefile"), (project / "workflow" / "rules", "../Snakefile")]:
        proc = snakemake_in(cwd, "-s", snakefile)
        assert proc.returncode != 0
        lines = [line for line in (proc.stdout + proc.stderr).splitlines() if "inside the workflow folder" in line]
        assert lines == [
            f"the working directory {cwd} is inside the workflow folder {project / 'workflow'}; run snakemake from "
            f"the checkout root ({project}), or pass --directory FOLDER"
        ]
        assert not (cwd / ".snakemake").exists()


def test_missing_configfile_is_named_by_snakemake_before_the_snakefile_runs(tmp_path):
    """Snakemake 9 reads --configfile while parsing its arguments, before our Snakefile: its traceback (not
    ours to shorten) ends in one line naming the file, and nothing is written (docs/training.md)."""
    proc = snakemake_in(tmp_path, "-s", str(ROOT / "workflow" / "Snakefile"), "--configfile", "nope.yaml")
    assert proc.returncode != 0
    last = (proc.stdout + proc.stderr).strip().splitlines()[-1]
    assert last == "FileNotFoundError: [Errno 2] No such file or directory: 'nope.yaml'"
    assert not list(tmp_path.iterdir())
