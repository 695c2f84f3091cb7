"""Inputs that cannot slip through (issue 14, class 3): damaged checkpoints, bad run specs, bad data, a tokenizer of
another model, an unreachable MLflow store, bad config files, conflicting config values. Each is refused before
any work, with one line naming it; valid input is unchanged (an int where a float is expected stays as given).

The config schema takes its run-setting properties from the run-argument dataclasses (tests/test_settings.py).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import socket
from pathlib import Path

import pytest
import torch
from helpers import ROOT, STDLIB_CORPUS, snakemake, write_config
from safetensors.torch import load_file, save_file

from pit.commands import main
from pit.core.interfaces import InterfaceConfig
from pit.errors import PitError
from pit.models import build_model
from pit.models.checkpoint import load_model
from pit.training.args import LoraArgs, PretrainArgs


def run_pit(capsys, *argv: str) -> tuple[int, list[str], str]:
    """`pit ARGV` in this process: (exit code, stderr lines, stdout)."""
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as err:  # argparse's usage errors
        rc = err.code
    out, err = capsys.readouterr()
    return rc, err.strip().splitlines(), out


# --- Checkpoints: every weight the config implies, and no other ------------------------------------------------


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A scratch PIT checkpoint and a plain tied GPT-2 (a stand-in teacher: lm_head saved once, as wte)."""
    root = tmp_path_factory.mktemp("ckpt")
    build_model("scratch-tiny", InterfaceConfig(kind="pit"), vocab_size=300, seed=0).save_pretrained(root / "pit")
    build_model("gpt2-tiny", vocab_size=300, seed=0).save_pretrained(root / "gpt2")
    return root


def damaged(src: Path, dst: Path, drop: str | None = None, **config) -> Path:
    """A copy of checkpoint `src` without tensor `drop`, or with config.json values changed."""
    shutil.copytree(src, dst)
    if drop is not None:
        state = load_file(dst / "model.safetensors")
        del state[drop]
        save_file(state, dst / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((dst / "config.json").read_text())
    for key, value in config.items():
        cfg[key] = {**cfg[key], **value} if isinstance(value, dict) else value
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"drop": "layers.0.mlp.down_proj.weight"}, r"missing tensors 1 \(layers.0.mlp.down_proj.weight\)"),
        ({"num_hidden_layers": 3}, r"missing tensors 9 \(layers.2."),
        ({"num_hidden_layers": 1}, r"unexpected tensors 9 \(layers.1."),
        ({"interface": {"kind": "tt"}}, r"missing tensors 1 \(interface.weight\); unexpected tensors 3"),
        ({"intermediate_size": 100}, r"tensors of another shape 6 .*where config.json needs \(64, 100\)"),
    ],
)
def test_checkpoint_that_does_not_match_its_config_is_refused(checkpoints, tmp_path, edit, message):
    path = damaged(checkpoints / "pit", tmp_path / "ck", **edit)
    with pytest.raises(PitError, match=message):
        load_model(path)


def test_tied_gpt2_loads_and_a_teacher_missing_a_tensor_is_refused(checkpoints, tmp_path):
    from pit.models.teacher import load_teacher

    model = load_model(checkpoints / "gpt2")  # wte saved once for wte and lm_head: not missing
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    path = damaged(checkpoints / "gpt2", tmp_path / "t", drop="transformer.h.1.mlp.c_fc.weight")
    with pytest.raises(PitError, match=r"missing tensors 1 \(transformer.h.1.mlp.c_fc.weight\)"):
        load_teacher(str(path))


def test_export_is_byte_identical_and_refuses_a_damaged_checkpoint(checkpoints, tmp_path, capsys):
    for out in ("a", "b"):
        assert run_pit(capsys, "export", checkpoints / "pit", tmp_path / out)[0] == 0
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert "model.safetensors" in files
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)
    bad = damaged(checkpoints / "pit", tmp_path / "bad", drop="layers.1.attn.q_proj.weight")
    rc, err, _ = run_pit(capsys, "export", bad, tmp_path / "c")
    assert rc == 2 and len(err) == 1 and "missing tensors 1 (layers.1.attn.q_proj.weight)" in err[0]
    assert not (tmp_path / "c").exists()


def test_tokenizer_of_another_vocabulary_is_refused(tiny_data, tmp_path):
    from transformers import AutoTokenizer

    from pit.data.reader import TokenFile
    from pit.models.checkpoint import check_tokenizer

    vocab = TokenFile(tiny_data["bpe2k"]["val"]).meta["vocab_size"]
    model = build_model("scratch-tiny", InterfaceConfig(kind="tt"), vocab_size=vocab)
    model.save_pretrained(tmp_path / "ck")
    own = AutoTokenizer.from_pretrained(tiny_data["bpe2k"]["tokenizer"])
    own.save_pretrained(tmp_path / "ck")
    check_tokenizer(model, own, tiny_data["bpe2k"]["tokenizer"], checkpoint=tmp_path / "ck")
    gpt2 = AutoTokenizer.from_pretrained(tiny_data["gpt2"]["tokenizer"])
    with pytest.raises(PitError, match=rf"has 50257 tokens but the model's vocabulary has {vocab}"):
        check_tokenizer(model, gpt2, tiny_data["gpt2"]["tokenizer"])


# --- Run specs: one validation, the same bounds as the config schema -----------------------------------------


def train_spec(**kw):
    base = dict(
        mode="scratch",
        model="scratch-tiny",
        train_data="t.bin",
        val_data="v.bin",
        tokenizer="tok",
        seq_len=32,
        global_batch_tokens=256,
        micro_batch_size=4,
        max_steps=8,
        warmup_steps=2,
    )
    return base | kw


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"grad_clip": -1}, "grad_clip -1; expected > 0"),
        ({"lr": math.inf}, "lr Infinity; expected a finite number"),
        ({"lr": math.nan}, "lr NaN; expected a finite number"),
        ({"final_loss_window": 0}, "final_loss_window 0; expected > 0"),
        ({"eval_batches": 0}, "eval_batches 0; expected > 0"),
        ({"interface_every": 0}, "interface_every 0; expected > 0"),
        ({"max_steps": "10"}, 'max_steps "10" is a string; expected an integer'),
        ({"max_steps": 10.0}, "max_steps 10.0 is a number; expected an integer"),
        ({"compile": 1}, "compile 1 is an integer; expected true or false"),
        ({"micro_batch_size": True}, "micro_batch_size true is true or false; expected an integer"),
        ({"beta2": 1.0}, "beta2 1.0; expected >= 0 and < 1"),
        ({"on_spike": "ignore"}, "on_spike \"ignore\"; expected one of 'log', 'skip', 'stop'"),
        ({"device": "tpu"}, "device \"tpu\"; expected one of 'auto', 'cpu', 'cuda'"),
        ({"tags": ["a"]}, 'tags ["a"] is an array; expected an object'),
        ({"interface": {"kind": "tied"}}, 'interface {"kind": "tied"}: interface kind \'tied\' is unknown'),
        ({"min_lr": 0.5, "lr": 0.1}, "lr 0.1, min_lr 0.5; expected 0 <= min_lr <= lr"),
        ({"warmup_steps": 8}, "warmup_steps 8; expected 0 <= warmup < max_steps = 8"),
        ({"global_batch_tokens": 200}, "global_batch_tokens 200 is not a multiple of micro_batch_size x seq_len"),
        ({"compile_mode": "fast"}, "compile_mode \"fast\"; expected one of 'default', 'max-autotune-no-cudagraphs', "),
        ({"compile_mode": "max-autotune"}, "compile_mode 'max-autotune' with compile false; expected compile: true"),
        ({"loss_chunk_rows": 0}, "loss_chunk_rows 0; expected > 0"),
        (  # CUDA graphs: a replay would overwrite the gradients accumulated from the last micro-batch
            {"compile": True, "compile_mode": "reduce-overhead"},
            "compile_mode 'reduce-overhead' replays CUDA graphs, which needs one micro-batch per step; "
            "global_batch_tokens 256 is 2 micro-batches of micro_batch_size x seq_len = 128: expected "
            "global_batch_tokens 128, or a mode without CUDA graphs ('default', 'max-autotune-no-cudagraphs')",
        ),
    ],
)
def test_bad_train_spec_is_refused_naming_the_field(bad, message):
    with pytest.raises(PitError, match="train config: " + re_escape(message)):
        PretrainArgs.from_dict(train_spec(**bad))


def re_escape(text: str) -> str:
    return re.escape(text)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"rank": 0}, "rank 0; expected > 0"),
        ({"dropout": 1.0}, "dropout 1.0; expected >= 0 and < 1"),
        ({"grad_clip": -1.0}, "grad_clip -1.0; expected > 0"),
        ({"lr": math.inf}, "lr Infinity; expected a finite number"),
        ({"seq_len": 1}, "seq_len 1; expected >= 2"),
        ({"limit": "all"}, 'limit "all" is a string; expected an integer or null'),
        ({"min_lr": 1.0}, "lr 0.0002, min_lr 1.0; expected 0 <= min_lr <= lr"),
    ],
)
def test_bad_lora_spec_is_refused_naming_the_field(bad, message):
    with pytest.raises(PitError, match="lora config: " + re_escape(message)):
        LoraArgs.from_dict({"base": "b", "task": "mbpp", **bad})


def test_valid_specs_are_kept_as_given():
    args = PretrainArgs.from_dict(train_spec(transform_lr_scale=1, lr=1, min_lr=0))
    graphs = PretrainArgs.from_dict(train_spec(compile=True, compile_mode="reduce-overhead", global_batch_tokens=128))
    assert graphs.accumulation(1) == 1
    with pytest.raises(PitError, match=re_escape("compile_mode 'reduce-overhead' (CUDA graphs) on 2 processes;")):
        graphs.accumulation(2)  # DDP: one micro-batch per rank and step, but the processes are not one graph
    assert (args.transform_lr_scale, args.lr) == (1, 1) and type(args.lr) is int  # fingerprints unchanged
    assert LoraArgs.from_dict({"base": "b", "task": "mbpp", "alpha": 16}).alpha == 16


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_without_cuda_is_one_line_before_any_work(tmp_path, capsys):
    rc, err, _ = run_pit(capsys, "train", "--spec", json.dumps(train_spec(device="cuda")), "--out", tmp_path / "run")
    assert rc == 2 and err == [
        "pit train: error: device 'cuda': CUDA is not available on this machine; expected cpu (or auto)"
    ]
    assert not (tmp_path / "run").exists()


# --- Data -------------------------------------------------------------------------------------------------------


def copy_token_file(src: str, dst: Path, **sidecar) -> Path:
    shutil.copy(src, dst)
    meta = json.loads(Path(src).with_suffix(".json").read_text())
    dst.with_suffix(".json").write_text(json.dumps(meta | sidecar))
    return dst


def test_token_ids_beyond_the_sidecar_vocabulary_are_refused(tiny_data, tmp_path):
    from pit.data.reader import TokenFile

    data = TokenFile(tiny_data["bpe2k"]["val"])
    top = int(data.tokens.max())
    bad = copy_token_file(tiny_data["bpe2k"]["val"], tmp_path / "v.bin", vocab_size=top)
    with pytest.raises(PitError, match=rf"holds token id {top} .* vocab_size = {top}; expected every id < {top}"):
        TokenFile(bad)


def test_sidecar_of_another_vocabulary_and_half_written_sidecar_are_refused(tiny_data, tmp_path):
    from pit.data.reader import TokenFile

    src = tiny_data["bpe2k"]["val"]
    bigger = copy_token_file(src, tmp_path / "big.bin", vocab_size=4000)
    TokenFile(bigger)  # ids fit: only the tokenizer tells the vocabulary is wrong
    with pytest.raises(PitError, match=r"records vocab_size 4000 but the tokenizer in .* has 2000"):
        TokenFile(bigger).check_tokenizer(tiny_data["bpe2k"]["tokenizer"])
    TokenFile(src).check_tokenizer(tiny_data["bpe2k"]["tokenizer"])
    half = copy_token_file(src, tmp_path / "half.bin")
    half.with_suffix(".json").write_text(half.with_suffix(".json").read_text()[:40])
    with pytest.raises(PitError, match=r"half.json' is not valid JSON"):
        TokenFile(half)


def test_binary_and_non_utf8_files_are_skipped_and_counted_with_an_empty_exclude(tmp_path, capsys):
    files = tmp_path / "files"
    files.mkdir()
    for i in range(8):
        (files / f"ok{i}.txt").write_text(f"document {i}\n" * 20)
    (files / "nul.txt").write_bytes(b"\x00" * 4096)
    (files / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    spec = STDLIB_CORPUS | {"glob": f"{files}/*.txt", "exclude": [], "max_documents": None, "val_fraction": 0.4}
    out = tmp_path / "corpus" / "manifest.json"
    rc, _, printed = run_pit(capsys, "data", "download", "--spec", json.dumps(spec), "--out", out)
    assert rc == 0
    manifest = json.loads(out.read_text())
    assert manifest["documents"] == 8
    assert manifest["skipped_files"] == [
        {"path": "latin1.txt", "reason": "not UTF-8"},
        {"path": "nul.txt", "reason": "NUL bytes"},
    ]
    assert "skipped 2 files that are not text (1 NUL bytes, 1 not UTF-8;" in printed


# --- MLflow store: fail fast, never create one when listing ------------------------------------------------------


def test_runs_on_a_missing_store_or_a_refused_port_is_one_line_and_creates_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    rc, err, _ = run_pit(capsys, "runs")
    assert rc == 2 and len(err) == 1 and "no MLflow store at 'sqlite:///mlflow.db'" in err[0]
    assert list(tmp_path.iterdir()) == []
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, err, _ = run_pit(capsys, "runs", "--uri", f"http://127.0.0.1:{port}")
    assert rc == 2 and err == [
        f"pit runs: error: cannot reach the MLflow server 'http://127.0.0.1:{port}': " + err[0].split(": ", 3)[3]
    ]
    assert "Connection refused" in err[0]
    assert list(tmp_path.iterdir()) == []


# --- Config files and run folders read by the reporting commands: one line, with the line number ---------------


def test_report_config_errors_are_one_line(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("profile: x\ncorpus: [a\n  b: c\n")
    cases = [
        (tmp_path / "missing.yaml", "no such file"),
        (tmp_path / "missing.json", "no such file"),
        (tmp_path, "is a folder"),
        ("{'profile': 1}", "not valid JSON"),
        (tmp_path / "bad.yaml", "line 3, column 4: YAML syntax error"),
        ('{"profile": "x"}', "config has no 'pretrain'"),
    ]
    for config, message in cases:
        rc, err, _ = run_pit(capsys, "report", "--config", config, "--out", tmp_path / "R.md")
        assert rc == 2 and len(err) == 1 and err[0].startswith("pit report: error: ") and message in err[0], err
    assert not (tmp_path / "R.md").exists()


def test_table_on_a_half_written_summary_names_the_file(tmp_path, capsys):
    run = tmp_path / "runs" / "scratch" / "303m" / "pit"
    run.mkdir(parents=True)
    (run / "summary.json").write_text('{"final_loss": 3.1, "val_lo')
    rc, err, _ = run_pit(
        capsys, "table", "table1", "--runs", tmp_path / "runs", "--profile", "p", "--out", tmp_path / "t"
    )
    assert rc == 2 and len(err) == 1 and f"{str(run / 'summary.json')!r} is not valid JSON" in err[0]


# --- The workflow: conflicting values and YAML errors when the config is read ------------------------------------


@pytest.mark.parametrize(
    ("edit", "key", "message"),
    [
        (
            lambda c: c["pretrain"]["mode_train"]["teacher"].update(min_lr=0.5),
            "pretrain.mode_train.teacher.min_lr",
            "train config: lr 0.001, min_lr 0.5; expected 0 <= min_lr <= lr",
        ),
        (
            lambda c: c["pretrain"]["train"].update(global_batch_tokens=1000),
            "pretrain.train.global_batch_tokens",
            "train config: global_batch_tokens 1000 is not a multiple of micro_batch_size x seq_len = 8 x 128 = 1024",
        ),
        (
            lambda c: c["pretrain"]["stand_in_teacher"].update(lr=math.inf),
            "pretrain.stand_in_teacher.lr",
            "train config: lr Infinity; expected a finite number",
        ),
        (
            lambda c: c["posttrain"]["lora"].update(warmup_steps=8),
            "posttrain.lora.warmup_steps",
            "lora config: warmup_steps 8; expected 0 <= warmup < max_steps = 8 (set warmup_steps below max_steps, "
            "e.g. 0, or leave it out: the default is min(10, max_steps // 10))",
        ),
    ],
)
def test_conflicting_config_values_stop_the_workflow_with_file_and_line(tmp_path, edit, key, message):
    config = write_config(tmp_path / "config.yaml", edit)
    proc = snakemake(tmp_path, "-n", "--configfile", str(config), check=False)
    assert proc.returncode != 0
    line = re.compile(
        rf"^(?:.*/)?config\.yaml:(\d+): invalid config at {re.escape(key)}: run [\w.-]+: {re.escape(message)}$"
    )
    found = [m for m in map(line.match, (proc.stdout + proc.stderr).splitlines()) if m]
    assert len(found) == 1, proc.stdout[-2000:]
    named = config.read_text().splitlines()[int(found[0][1]) - 1]  # the line named holds the key
    assert named.strip().startswith(key.split(".")[-1] + ":")
    assert not (tmp_path / "results").exists()


def test_yaml_syntax_error_in_the_default_config_names_its_line(tmp_path):
    project = tmp_path / "project"
    for name in ("workflow", "config"):
        shutil.copytree(ROOT / name, project / name)
    config = project / "config" / "config.yaml"
    config.write_text(config.read_text().replace("  max_documents: 400", "  max_documents: [400"))
    proc = snakemake(project, "-n", "--snakefile", str(project / "workflow/Snakefile"), check=False)
    assert proc.returncode != 0
    assert any(
        line.startswith("config/config.yaml:") and "YAML syntax error in the config" in line
        for line in (proc.stdout + proc.stderr).splitlines()
    ), proc.stderr[-2000:]


# --- YAML a parser turns into a traceback, integers that overflow later: one line at validation (issue 58) ------


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        ("profile: " + "[" * 5000 + "]" * 5000 + "\n", (1, 109), "nested deeper than 100 levels"),
        ("profile: x\nreport: &r\n  loop: *r\n", (3, 9), "found a recursive alias *r (a node that contains itself)"),
    ],
    ids=["5000-deep", "recursive-alias"],
)
def test_deep_or_self_containing_yaml_is_one_line(tmp_path, capsys, text, where, problem):
    """A 5000-deep YAML was a RecursionError traceback in `pit config check` and `pit train --config`; a recursive
    alias one of "Circular reference detected"."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    rc, err, _ = run_pit(capsys, "config", "check", path)
    assert rc == 2 and len(err) == 1 and err[0].endswith(f"c.yaml:{where[0]}:{where[1]}: YAML syntax error in the "
                                                         f"config: {problem}"), err  # fmt: skip
    for argv in (["train", "--config", path, "--out", tmp_path / "run"], ["train", "--config", path, "--print-config"]):
        rc, err, _ = run_pit(capsys, *argv)
        assert rc == 2 and err == [f"pit train: error: --config {str(path)!r}: line {where[0]}, column {where[1]}: "
                                   f"YAML syntax error: {problem}"]  # fmt: skip
    rc, err, _ = run_pit(capsys, "train", "--config", path, "--set", "interface=&a {kind: *a}", "--print-config")
    assert rc == 2 and len(err) == 1 and "YAML syntax error" in err[0], err
    rc, err, _ = run_pit(capsys, "lora", "train", "--set", "targets=&a {x: *a}", "--print-config")
    assert rc == 2 and err == ["pit lora: error: --set 'targets=&a {x: *a}': the value is not valid YAML (found a "
                               "recursive alias *a (a node that contains itself))"]  # fmt: skip
    assert not (tmp_path / "run").exists()


def test_an_integer_beyond_64_bits_is_refused_at_validation(tiny_data, tmp_path, capsys):
    """`--set max_steps=99999999999999999999` passed validation and died with OverflowError after writing run.json;
    the profile's key the same way."""
    spec = dict(mode="scratch", model="scratch-tiny", train_data=tiny_data["bpe2k"]["train"],
                val_data=tiny_data["bpe2k"]["val"], tokenizer=tiny_data["bpe2k"]["tokenizer"], seq_len=32,
                global_batch_tokens=128, micro_batch_size=4, max_steps=2, mlflow={"enabled": False})  # fmt: skip
    (tmp_path / "train.json").write_text(json.dumps(spec))
    huge = "99999999999999999999"
    rc, err, _ = run_pit(capsys, "train", "--spec-file", tmp_path / "train.json", "--set", f"max_steps={huge}",
                         "--out", tmp_path / "run")  # fmt: skip
    assert rc == 2 and err == [
        f"pit train: error: --set 'max_steps={huge}': train config: max_steps {huge}; expected a 64-bit integer "
        f"(at most 2**63 - 1 = {2**63 - 1})"
    ]
    assert not (tmp_path / "run").exists()
    config = write_config(tmp_path / "config.yaml", lambda c: c["pretrain"]["train"].update(max_steps=int(huge)))
    rc, err, _ = run_pit(capsys, "config", "check", config)
    assert rc == 2 and len(err) == 1 and "invalid config at pretrain.train.max_steps" in err[0], err
    assert huge in err[0] and "greater than the maximum" in err[0]
