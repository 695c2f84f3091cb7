"""Every `pit` subcommand given a bad argument exits non-zero with one line naming it.

A table of bad inputs per subcommand (missing file, a folder for a file, bad JSON, unknown key, negative
number, wrong type, ...), each run in this process through `pit.commands.main`. What counts as one line:

- a bad value the command itself finds: exactly one stderr line `pit COMMAND: error: ...`, exit code 2;
- a usage error argparse finds (a missing required flag, an invalid int, a choice not offered): argparse's
  standard output, the usage block then one line `pit COMMAND: error: ...` naming the argument, exit code 2.

Both name the bad value or argument (the expected text of each row). `test_every_subcommand_is_swept` fails
when a subcommand (or a step of `data`, `lora`, `mlflow`) has no row.
"""

from __future__ import annotations

import argparse
import json
import re

import pytest
from helpers import ROOT, STDLIB_CORPUS

from pit.commands import COMMANDS, build_parser, main

TRAIN = {
    "mode": "scratch",
    "model": "scratch-tiny",
    "train_data": "t.bin",
    "val_data": "v.bin",
    "tokenizer": "tok",
    "seq_len": 32,
    "global_batch_tokens": 256,
    "micro_batch_size": 4,
    "max_steps": 8,
    "warmup_steps": 2,
}
LORA = {"base": "base", "task": "mbpp"}
BPE = {"kind": "bpe", "vocab_size": 500, "min_frequency": 2, "seed": 0, "sample_bytes": None}
TOK = ["--corpus", "c", "--split", "train", "--tokenizer", "t", "--out", "x.bin"]  # `data tokenize`, files missing


def js(obj: dict, **kw) -> str:
    return json.dumps({**obj, **kw})


# command -> [(arguments, text the error line must hold)]; {T} is a temporary folder holding the files below
SWEEP = {
    "data download": [
        (["--spec", "{bad", "--out", "{T}/c/m.json"], "not valid JSON"),
        (["--spec", "{T}", "--out", "{T}/c/m.json"], "is a folder"),
        (["--spec", js(STDLIB_CORPUS, max_documents=-1), "--out", "{T}/c/m.json"], "max_documents -1"),
        (["--spec", js(STDLIB_CORPUS, exclude="site-packages/*"), "--out", "{T}/c/m.json"], "exclude"),
        (["--spec", js(STDLIB_CORPUS, seed="0"), "--out", "{T}/c/m.json"], "seed '0'"),
        (["--spec", js(STDLIB_CORPUS, bogus=1), "--out", "{T}/c/m.json"], "unknown key(s) ['bogus']"),
        (["--spec", js(STDLIB_CORPUS, glob="{T}/nothing/*.txt"), "--out", "{T}/c/m.json"], "matches no files"),
        (["--spec", js(STDLIB_CORPUS, max_documents=2), "--out", "{T}/empty"], "'{T}/empty' is a folder; expected"),
        (["--out", "{T}/c/m.json"], "--spec"),
    ],
    "data tokenizer": [
        (["--name", "b", "--spec", js(BPE, vocab_size=10), "--out", "{T}/tok"], "vocab_size 10"),
        (["--name", "b", "--spec", js(BPE, min_frequency=True), "--out", "{T}/tok"], "min_frequency True"),
        (["--name", "b", "--spec", js(BPE, kind="wordpiece"), "--out", "{T}/tok"], "kind 'wordpiece'"),
        (["--name", "b", "--spec", js(BPE), "--corpus", "{T}/none.json", "--out", "{T}/tok"], "none.json"),
        (["--name", "b", "--spec", "[1, 2]", "--out", "{T}/tok"], "expected a JSON object"),
        (["--name", "b", "--spec", js(BPE), "--corpus", "{T}/notman.json", "--out", "{T}/tok"], "not a manifest"),
        (["--name", "b", "--spec", js(BPE), "--corpus", "{T}/binary.json", "--out", "{T}/tok"], "is not JSON"),
    ],
    "data prepare": [
        (["{T}/no-such-folder", "--tokenizer", "gpt2", "--out", "{T}/p"], "no-such-folder"),
        (["{T}/empty", "--tokenizer", "gpt2", "--val-fraction", "1.5", "--out", "{T}/p"], "1.5"),
        (["{T}/empty", "--tokenizer", "{T}/none", "--out", "{T}/p"], "none"),
    ],
    "data tokenize": [
        (
            ["--corpus", "{T}/none.json", "--split", "train", "--tokenizer", "{T}/empty", "--out", "{T}/x.bin"],
            "none.json",
        ),
        ([*TOK, "--workers", "0"], "workers 0"),
        ([*TOK, "--spec", '{"workers": "2"}'], "'workers'"),
        ([*TOK, "--spec", '{"bogus": 1}'], "'bogus'"),
        ([*TOK, "--context-length", "0"], "--context-length 0"),
        (["--corpus", "c", "--split", "test", "--tokenizer", "t", "--out", "x.bin"], "--split"),
        ([*TOK, "--token-budget", "lots"], "--token-budget"),
        (["--corpus", "{T}/notman.json", *TOK[2:]], "'{T}/notman.json' is not a manifest of `pit data download`"),
        (["--corpus", "{T}/binary.json", *TOK[2:]], "'{T}/binary.json' is not JSON (UnicodeDecodeError)"),
    ],
    "train": [
        (["--spec", js(TRAIN, grad_clip=-1), "--out", "{T}/r"], "grad_clip -1"),
        (["--spec", js(TRAIN, mlflow={"enabled": "yes"}), "--out", "{T}/r"], 'enabled "yes" is not true or false'),
        (["--spec", js(TRAIN, mlflow={"enabled": True, "uri": "x"}), "--out", "{T}/r"], "unknown key(s) ['uri']"),
        (["--spec", js(TRAIN, lr=float("inf")), "--out", "{T}/r"], "lr Infinity"),
        (["--spec", js(TRAIN, final_loss_window=0), "--out", "{T}/r"], "final_loss_window 0"),
        (["--spec", js(TRAIN, eval_batches=0), "--out", "{T}/r"], "eval_batches 0"),
        (["--spec", js(TRAIN, interface_every=0), "--out", "{T}/r"], "interface_every 0"),
        (["--spec", js(TRAIN, max_steps="10"), "--out", "{T}/r"], 'max_steps "10"'),
        (["--spec", js(TRAIN, min_lr=1.0), "--out", "{T}/r"], "min_lr 1.0"),
        (["--spec", js(TRAIN, warmup_steps=8), "--out", "{T}/r"], "warmup_steps 8"),
        (["--spec", js(TRAIN, global_batch_tokens=100), "--out", "{T}/r"], "global_batch_tokens 100"),
        (["--spec", js(TRAIN, lr_max=1), "--out", "{T}/r"], "'lr_max'"),
        (["--spec", js({k: v for k, v in TRAIN.items() if k != "model"}), "--out", "{T}/r"], "['model']"),
        (["--spec", '{"mode": "scratch",', "--out", "{T}/r"], "not valid JSON"),
        (["--spec-file", "{T}", "--out", "{T}/r"], "--spec-file"),
        (["--spec-file", "{T}/none.json", "--out", "{T}/r"], "none.json"),
        (["--spec", js(TRAIN), "--out", "{T}/r", "--threads", "many"], "--threads"),
        (["--spec", js(TRAIN), "--out", "{T}/r", "--threads", "0"], "threads 0"),
        (["--spec", js(TRAIN)], "--out"),
        (["--spec", js(TRAIN), "--set", "lr=fast", "--out", "{T}/r"], "--set 'lr=fast': train config: lr \"fast\""),
        (["--config", "{T}/bad.yaml", "--out", "{T}/r"], "line 3, column 4"),
    ],
    "lora train": [
        (["--spec", js(LORA, rank=0), "--out", "{T}/l"], "rank 0"),
        (["--spec", js(LORA, dropout=1.5), "--out", "{T}/l"], "dropout 1.5"),
        (["--spec", js(LORA, task="humaneval"), "--out", "{T}/l"], "task 'humaneval'"),
        (["--spec", js(LORA, lr=float("nan")), "--out", "{T}/l"], "lr NaN"),
        (["--spec", js(LORA, ranks=4), "--out", "{T}/l"], "'ranks'"),
        (["--spec", js(LORA, targets={"pit_scratch": []}), "--out", "{T}/l"], "targets"),
        (["--spec", "{T}", "--out", "{T}/l"], "is a folder"),
    ],
    "lora merge": [
        (["--base", "{T}/none", "--adapter", "{T}/none2", "--out", "{T}/m"], "none2"),
        (["--base", "{T}/none", "--out", "{T}/m"], "--adapter"),
    ],
    "evaluate": [
        (["nosuchtask", "--samples", "{T}/s.jsonl"], "'nosuchtask'"),
        (["humaneval", "--samples", "{T}/none.jsonl"], "none.jsonl"),
        (["humaneval", "--samples", "s.jsonl", "--timeout", "-1"], "--timeout -1"),
        (["humaneval", "--samples", "s.jsonl", "--timeout", "nan"], "--timeout nan"),
        (["humaneval", "--samples", "s.jsonl", "--memory-mb", "-5"], "--memory-mb -5"),
        (["humaneval", "--samples", "s.jsonl", "--workers", "0"], "--workers 0"),
        (["humaneval", "--samples", "s.jsonl", "--spec", '{"workers": "2"}'], "'workers'"),
        (["humaneval", "--model", "{T}/none", "--out", "{T}/o.json"], "--model '{T}/none'"),
        (["humaneval", "--model", "{T}", "--tokenizer", "{T}/none", "--out", "{T}/o.json"], "--tokenizer"),
        (["humaneval", "--samples", "s.jsonl", "--max-new-tokens", "x"], "--max-new-tokens"),
    ],
    "convert-check": [
        (["{T}/none", "--val-data", "{T}/none.bin"], "none.bin"),
        (["t", "--val-data", "v.bin", "--t-power", "5"], "t_power 5.0"),
        (["t", "--val-data", "v.bin", "--threads", "0"], "--threads 0"),
        (["t", "--val-data", "v.bin", "--t-init", "bogus"], "--t-init"),
        (["t"], "--val-data"),
    ],
    "diagnose": [
        (["{T}/none"], "'{T}/none' does not exist"),
        (["{T}/none", "--positions", "0"], "--positions 0"),
        (["{T}/none", "--seq-len", "1"], "--seq-len 1"),
        (["{T}/none", "--spec", '{"seed": "x"}'], "'seed'"),
        (["{T}/none", "--device", "quantum"], "device 'quantum'"),
        (["{T}/none", "--bigram-tokens", "1e6"], "--bigram-tokens"),
    ],
    "side-effects": [
        (["{T}/none", "{T}/none2", "--val-data", "{T}/none.bin"], "none.bin"),
        (["{T}/none", "{T}/none2", "--val-data", "v.bin", "--windows", "0"], "--windows 0"),
        (["{T}/none", "{T}/none2"], "--val-data"),
    ],
    "table": [
        (["table1", "--profile", "p", "--out", "{T}/t"], "--runs"),
        (["table1", "--runs", "{T}/none", "--profile", "p", "--out", "{T}/t"], "'{T}/none'"),
        (["table1", "--runs", "{T}/runs", "--profile", "p", "--out", "{T}/t"], "summary.json' is not valid JSON"),
        (["table9", "--profile", "p", "--out", "{T}/t"], "table9"),
        (["table4", "--runs", "{T}/runs", "--profile", "p", "--out", "{T}/t"], "table4_scores"),  # now two tables
        (["claims", "--runs", "{T}/empty", "--profile", "p", "--out", "{T}/t"], "no pretrain/, diagnostics/"),
    ],
    "figure": [
        (["loss-curves", "--runs", "{T}/runs", "--profile", "p", "--out", "{T}/f.png"], "--mode"),
        (["transition", "--profile", "p", "--out", "{T}/f.png"], "--checkpoint"),
        (["drift", "--runs", "{T}/none", "--profile", "p", "--out", "{T}/f.png"], "'{T}/none'"),
        (["spiral", "--profile", "p", "--out", "{T}/f.png"], "spiral"),
    ],
    "report": [
        (["--config", "{T}/none.yaml"], "none.yaml"),
        (["--config", "{T}/none.json"], "none.json"),
        (["--config", "{T}/bad.yaml"], "line 3, column 4"),
        (["--config", "{T}"], "is a folder"),
        (["--config", '{"profile": "x"}'], "'pretrain'"),
        (["--config", "[1, 2]"], "'[1, 2]'"),
        (["--config", "{T}/ok.yaml", "--tables", "{T}/none", "--out", "{T}/R.md"], "--tables {T}/none: no tables"),
    ],
    "arch": [
        (["--bogus"], "--bogus"),
    ],
    "fixtures fineweb-edu": [
        (["--out", "{T}/fw", "--glob", "{T}/nothing/*.txt"], "matches no files"),
        (["--out", "{T}/fw", "--max-bytes", "0"], "max_bytes 0"),
        (["--glob", "{T}/*.txt"], "--out"),
    ],
    "fixtures teacher": [
        (["--model", "scratch-133m", "--out", "{T}/t"], "--model 'scratch-133m'"),
        (["--model", "nope", "--out", "{T}/t"], "unknown model name 'nope'"),
        (["--out", "{T}/t"], "--model"),
    ],
    "export": [
        (["{T}/none", "{T}/out"], "'{T}/none' does not exist"),
        (["{T}/empty", "{T}/out"], "no config.json"),  # (DST inside SRC would be refused first: the output rule)
    ],
    "generate": [
        (["{T}/none", "--prompt", "x"], "'{T}/none' does not exist"),
        (["{T}", "--prompt", "x"], "no config.json"),
        (["{T}/none", "--prompt", "x", "--max-new-tokens", "0"], "--max-new-tokens 0"),
        (["{T}/none", "--prompt", "x", "--temperature", "-1"], "--temperature -1.0"),
        (["{T}/none", "--prompt", "x", "--top-p", "1.5"], "--top-p 1.5"),
        (["{T}/none", "--prompt", ""], "--prompt ''"),
        (["{T}/none"], "--prompt"),
    ],
    "chat": [
        (["{T}/none"], "'{T}/none' does not exist"),
        (["{T}/none", "--top-k", "0"], "--top-k 0"),
        (["{T}/none", "--seed", "x"], "--seed"),
    ],
    "bench": [
        (["--threads", "0"], "--threads 0"),
        (["--size", "huge"], "size 'huge'"),
        (["--rounds", "0"], "rounds 0"),
        (["--layers", "two"], "--layers"),
        (["--precision", "fp16"], "--precision"),
        (["--peak-tflops", "-1"], "peak_tflops -1.0"),
    ],
    "mlflow sync": [
        (["{T}/none"], "'{T}/none' is not a run folder"),
        (["{T}/none", "--tracking-uri"], "--tracking-uri"),
        (["{T}/bad.yaml"], "'{T}/bad.yaml' is not a run folder"),
    ],
    "mlflow export": [
        (["--experiment", "x"], "--out"),
        (["--out", "{T}/r.jsonl"], "--experiment"),
        (["--experiment", "x", "--out", "{T}/r.jsonl", "--tracking-uri", "sqlite:///{T}/bad.yaml"], "not an SQLite"),
        (["--experiment", "", "--out", "{T}/r.jsonl"], "--experiment '': expected an experiment name"),
    ],
    "mlflow ui": [
        (["--port", "0"], "--port 0: expected 1 to 65535"),
        (["--port", "x"], "--port"),
        (["--tracking-uri", "sqlite:///{T}/none.db"], "no MLflow store at 'sqlite:///{T}/none.db'"),
        (["--tracking-uri", "sqlite:///{T}/bad.yaml", "--experiment", "x"], "is not an SQLite database"),
    ],
    "mlflow summary": [
        (["--config", "{bad", "--out", "{T}/s.json"], "not valid JSON"),
        (["--config", "profile: x", "--out", "{T}/s.json"], "expected the pipeline config as a JSON object"),
        (["--config-file", "{T}/none.json", "--out", "{T}/s.json"], "none.json"),
        (["--config-file", "{T}/bad.yaml", "--out", "{T}/s.json"], "line 3, column 4"),
        (["--config", "{}"], "--out"),
    ],
    "plan": [
        (["--configfile", "{T}/none.yaml"], "config file none.yaml: No such file or directory"),
        (["--configfile", "{T}/ok.yaml", "--device", "a100"], "unknown device kind 'a100'"),
        (["--configfile", "{T}/ok.yaml", "--devices", "0"], "devices 0"),
        (["--configfile", "{T}/ok.yaml", "--mfu", "0"], "mfu 0.0"),
        (["--configfile", "{T}/ok.yaml", "--out", "{T}/plan.txt"], "--out"),
    ],
    "config check": [
        (["{T}/none.yaml"], "config file none.yaml: No such file or directory"),  # shown relative to the cwd
        (["{T}/bad.yaml"], "bad.yaml:3:4: YAML syntax error in the config"),
        (["{T}/notman.json"], "invalid config at a: unknown key 'a'"),
        ([], "FILE"),
    ],
    "convert": [
        (["{T}/none", "{T}/out"], "cannot load teacher '{T}/none': no such folder"),
        (["{T}/empty", "{T}/out"], "cannot load teacher '{T}/empty'"),
        (["{T}/none", "{T}/out", "--t-power", "3"], "t_power 3.0"),
        (["{T}/none", "{T}/out", "--t-init", "svd"], "--t-init"),
    ],
    "share push": [
        ([], "no dvc.yaml in '{T}'"),
        (["--remote"], "--remote"),
    ],
    "share pull": [
        (["--remote", "x"], "no dvc.yaml in '{T}'"),
    ],
    "verify": [
        (["results/tables/table2.md"], "no dvc.yaml in '{T}'"),
        (["--from"], "--from"),
    ],
    "teacher materialize": [
        (["nosuch", "--out", "{T}/t"], "teacher source 'nosuch': expected one of"),
        (["{T}/bad.gguf", "--out", "{T}/t"], "does not start with the GGUF magic bytes"),
        (["smollm2-135m"], "--out"),
        (["--out", "{T}/t"], "expected a source or --all, not both"),
        (["smollm2-135m", "--all", "--out", "{T}/t"], "expected a source or --all, not both"),
    ],
    "teacher list": [(["--bogus"], "--bogus")],
    "teacher pack": [
        (["{T}/empty", "--out", "{T}/stage"], "no provenance.json"),
        (["{T}/empty", "--out", "{T}/stage", "--piece-mb", "0"], "--piece-mb 0.0: expected a size in MB"),
    ],
    "teacher unpack": [
        (["{T}/empty", "--out", "{T}/t"], "{T}/empty"),
        (["{T}/empty"], "expected --out DIR, or --check alone"),
    ],
    "runs": [
        (["--uri", "sqlite:///{T}/none.db"], "no MLflow store at 'sqlite:///{T}/none.db'"),
        (["--uri", "{T}/mlruns"], "no MLflow store"),
        (["--uri", "sqlite:///{T}/bad.yaml"], "is not an SQLite database"),
        (["--format", "xml", "--uri", "sqlite:///{T}/none.db"], "--format 'xml'"),
    ],
}


def leaf_commands() -> list[str]:
    """Every subcommand, with the steps of those that have them (`data download`, `lora train`, ...)."""
    leaves = []
    for name in COMMANDS:
        parser = build_parser([name])
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
        nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
        leaves += [f"{name} {step}" for step in nested[0].choices] if nested else [name]
    return leaves


def test_every_subcommand_is_swept():
    assert sorted(SWEEP) == sorted(leaf_commands())


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The files the rows point at: a YAML file with a syntax error (line 3), a half-written summary."""
    root = tmp_path_factory.mktemp("sweep")
    (root / "bad.yaml").write_text("profile: x\ncorpus: [a\n  b: c\n")
    run = root / "runs" / "scratch" / "303m" / "pit"
    run.mkdir(parents=True)
    (run / "summary.json").write_text('{"final_loss": 3.1, "val_lo')
    (root / "notman.json").write_text('{"a": 1}')  # JSON, not a corpus manifest
    (root / "binary.json").write_bytes(bytes(range(128, 256)))  # not text
    (root / "empty").mkdir()
    (root / "bad.gguf").write_text("not a GGUF file")
    (root / "ok.yaml").write_text((ROOT / "config" / "config.yaml").read_text())
    return root


ROWS = [(command, args, expected) for command, rows in SWEEP.items() for args, expected in rows]


@pytest.mark.parametrize(("command", "args", "expected"), ROWS, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(ROWS)])
def test_bad_argument_is_one_line_naming_it(files, capsys, monkeypatch, command, args, expected):
    monkeypatch.chdir(files)
    argv = command.split() + [a.replace("{T}", str(files)) for a in args]
    try:
        rc = main(argv)
    except SystemExit as err:  # argparse
        rc = err.code
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2, (rc, out, err)
    error = re.compile(rf"^pit( {re.escape(command.split()[0])}( \S+)?)?: error: ")
    if lines and lines[0].startswith("usage: "):  # argparse: the usage block, then its one error line
        assert all(not error.match(line) for line in lines[:-1]), err
    else:
        assert len(lines) == 1, err
    assert error.match(lines[-1]), err
    assert expected.replace("{T}", str(files)) in lines[-1], err
    assert not (files / "mlflow.db").exists() and not (files / "mlruns").exists()
