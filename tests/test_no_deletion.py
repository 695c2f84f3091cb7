"""The output rule (pit/io.py, docs/reproducibility.md) across every command with an output (issues 29 and 58).

- Each `pit` command that takes `--out` is run with valid inputs onto a folder of results it did not write (a
  finished run's `final/`, `metrics.jsonl` and a note): it exits 2 with one line and the folder is exactly as it
  was, or (`table`, which writes OUT.md, OUT.csv, ... beside OUT) leaves it untouched.
- Each is run with a destination that holds its source (is it, contains it, or lies inside it): one line, exit 2,
  the source untouched, with or without --force (`pit export SRC DST --force` replaced the folder holding SRC).
- Each command that writes files is run where an unrelated file of the same name lies (a user's CSV at
  `pit evaluate --out`, a user's train.json where `pit data tokenize` puts its sidecar, another model's samples of
  the same columns in `pit evaluate --out-dir`): refused, file unchanged.
- The folder holding the sources is also spelled through a symbolic link and `..` (`link_to_a_source_dir/..`,
  which the kernel resolves link first): refused the same way (issue 65). A spec or config file given as --out is
  refused as a source too.
- The output folders hold a user's files (PRECIOUS: also a `.lock`, a `.next/`, another tool's
  `checkpoints/step-100000/`, a hub data set's Parquet shard, a live writer's temporary): a command that writes
  beside them leaves them as they were.

`test_every_out_command_is_covered` fails when a command gains `--out` without a row in each table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from helpers import ROOT, STDLIB_CORPUS, write_tiny_gguf

from pit.commands import COMMANDS, build_parser, main

BPE = {"kind": "bpe", "vocab_size": 300, "min_frequency": 2, "seed": 0, "sample_bytes": None}
PRECIOUS = {
    "final/model.safetensors": b"weights",
    "metrics.jsonl": b'{"step": 1}\n',
    "NOTE.txt": b"keep",
    ".next/draft.txt": b"not a staged run",  # names a run folder uses, a user's here (issue 65)
    "checkpoints/step-100000/weights.bin": b"another tool's checkpoint",
    "train-00000-of-00001.parquet": b"PAR1 a hub data set's shard",
    ".notes.json.pit-tmp-1-abcdefgh.tmp": b"a temporary of a live writer (pid 1)",
}
REFUSED = "did not write|is a folder|no run.json|exists and is not empty"


def js(obj: dict, **kw) -> str:
    return json.dumps({**obj, **kw})


# command -> (arguments with {P} the precious folder, the other names below; what the error line says, or None
# when the command writes beside --out and exits 0)
CASES = {
    "data download": (["--spec", js(STDLIB_CORPUS, glob="{TEXTS}/*.py", max_documents=3, val_fraction=0.3)], REFUSED),
    "data tokenizer": (["--name", "b", "--spec", js(BPE), "--corpus", "{MAN}"], REFUSED),
    "data tokenize": (["--corpus", "{MAN}", "--split", "val", "--tokenizer", "{TOK}"], REFUSED),
    "data prepare": (["{TEXTS}", "--tokenizer", "gpt2", "--val-fraction", "0.3"], REFUSED),
    "train": (["--spec-file", "{TRAIN}"], REFUSED),
    "lora train": (["--spec-file", "{LORA}"], REFUSED),
    "lora merge": (["--base", "{CKPT}", "--adapter", "{ADAPTER}"], REFUSED),
    "evaluate": (["gsm8k", "--model", "{CKPT}", "--limit", "1", "--max-new-tokens", "2"], REFUSED),
    "generate": (["{CKPT}", "--prompt", "def f(x):", "--max-new-tokens", "2"], REFUSED),
    "diagnose": (["{CKPT}", "--val-data", "{VAL}", "--positions", "4", "--seq-len", "16"], REFUSED),
    "side-effects": (["{CKPT}", "{CKPT}", "--val-data", "{VAL}", "--windows", "1", "--seq-len", "16"], REFUSED),
    "convert-check": (["{TEACHER}", "--val-data", "{GPT2VAL}", "--windows", "1", "--seq-len", "16"], REFUSED),
    "table": (["table3", "--profile", "default"], None),
    "figure": (
        ["transition", "--checkpoint", "{CKPT}", "--label", "m", "--prompt", "def f(x):", "--profile", "default"],
        REFUSED,
    ),
    "report": (["--config", "config/config.yaml", "--tables", "{TABLES}"], REFUSED),
    "mlflow summary": (
        ["--config-file", "{CONFIG}", "--tables", "{TABLES}", "--figures", "{FIGS}", "--report", "{REPORT}"]
        + ["--tracking-uri", "{DB}"],
        REFUSED,
    ),
    "mlflow export": (["--experiment", "ex", "--tracking-uri", "{DB}"], REFUSED),
    "fixtures fineweb-edu": (["--glob", "{TEXTS}/*.py", "--max-bytes", "20000"], REFUSED),
    "fixtures teacher": (["--model", "cerebras-gpt-256m"], REFUSED),
    "export": (["{CKPT}"], REFUSED),  # `pit export SRC DST`: DST is positional
    "teacher materialize": (["{GGUF}"], REFUSED),
    "teacher pack": (["{GTEACHER}", "--piece-mb", "0.05"], REFUSED),
    "teacher unpack": (["{STAGE}"], REFUSED),
    "plan": (["--configfile", "config/config.yaml"], "expected a file name ending in .csv or .json"),
}


# command -> (its arguments as in CASES, or its own; the destination, which holds one of its sources). Commands that
# read no file (table3, a random teacher) cannot hold a source: `table` is run as table1 on a results folder.
HOLDS = {
    **{command: (args, "{CKPT}/out.json") for command, (args, _) in CASES.items()},
    "data download": (CASES["data download"][0], "{TEXTS}/corpus/manifest.json"),  # inside the glob's root
    "data tokenizer": (CASES["data tokenizer"][0], "{CORPUS}"),  # is the corpus folder
    "data tokenize": (CASES["data tokenize"][0], "{TOK}/val.bin"),  # inside the tokenizer folder
    "data prepare": (CASES["data prepare"][0], "{TEXTS}/prepared"),  # inside the folder of texts it reads
    "train": (CASES["train"][0], "{TOK}/run"),
    "lora train": (CASES["lora train"][0], "{CKPT}/lora"),
    "lora merge": (CASES["lora merge"][0], "{CKPT}"),  # the base itself: merge replaced it
    "convert-check": (CASES["convert-check"][0], "{TEACHER}/check.json"),
    "table": (["table1", "--runs", "{TABLES}", "--profile", "default"], "{TABLES}/table1"),
    "figure": (CASES["figure"][0], "{CKPT}/transition.png"),
    "report": (CASES["report"][0], "{TABLES}/REPORT.md"),
    "mlflow summary": (CASES["mlflow summary"][0], "{TABLES}/summary.json"),
    "mlflow export": (CASES["mlflow export"][0], "{DBFILE}"),  # the store's database itself
    "fixtures fineweb-edu": (CASES["fixtures fineweb-edu"][0], "{TEXTS}"),
    "export": (["{HELD}", "--force"], "{HOLDER}"),  # DST contains SRC, with --force
    "convert": (["{HELD}", "--kind", "tt", "--force"], "{HOLDER}"),
    "teacher materialize": (CASES["teacher materialize"][0], "{GGUF}"),  # the GGUF file itself
    "teacher pack": (CASES["teacher pack"][0], "{GTEACHER}/stage"),
    "teacher unpack": (CASES["teacher unpack"][0], "{STAGE}/teacher"),
    "plan": (["--configfile", "{CONFIG}"], "{CONFIG}"),  # the profile it reads
}
del HOLDS["fixtures teacher"]  # random weights: it reads nothing

# command -> (arguments as in CASES, the file it writes (or "--out-dir"), {a user's file of the same name there: bytes})
SAMPLES = b'{"task_id": "gsm8k/0", "completion": "another model\'s answer"}\n'
UNRELATED = {
    "evaluate": (CASES["evaluate"][0], "data.csv", {"data.csv": b"id,label\n1,cat\n"}),
    "evaluate --out-dir": (CASES["evaluate"][0], "--out-dir", {"gsm8k.samples.jsonl": SAMPLES}),  # same columns
    "data tokenize": (CASES["data tokenize"][0], "train.bin", {"train.json": b'{"lr": 0.001, "max_steps": 10}\n'}),
    "data download": (
        CASES["data download"][0],
        "manifest.json",
        {"manifest.json": b'{"name": "mine", "files": ["a.txt"]}\n'},
    ),
    "table": (CASES["table"][0], "notes", {"notes.md": b"# My notes\n\nKeep these.\n"}),
    "report": (CASES["report"][0], "REPORT.md", {"REPORT.md": b"# Our own report\n"}),
    "diagnose": (CASES["diagnose"][0], "diag.json", {"diag.json": b'["a", "list"]\n'}),
    "mlflow export": (CASES["mlflow export"][0], "runs.jsonl", {"runs.jsonl": b'{"who": "me"}\n'}),
}
HOLDS_SOURCE = r"is its source|contains its source|lies inside its source"


def out_commands() -> set[str]:
    """Every command (and step of a command) whose parser has --out."""
    found = set()

    def walk(parser: argparse.ArgumentParser, prefix: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*prefix, name])
            elif "--out" in action.option_strings and prefix:
                found.add(" ".join(prefix))

    for name in COMMANDS:
        sub = next(a for a in build_parser([name])._actions if isinstance(a, argparse._SubParsersAction))
        walk(sub.choices[name], [name])
    return found


def test_every_out_command_is_covered():
    assert out_commands() == set(CASES) - {"export"}  # export's DST is positional, covered too
    assert set(HOLDS) == set(CASES) - {"fixtures teacher"} | {"convert"}  # convert's OUT is positional


@pytest.fixture(scope="module")
def inputs(tiny_data, tmp_path_factory):
    """Valid inputs of every command: a checkpoint, its LoRA adapter, a GPT-2 teacher, a corpus, tables, a store."""
    import mlflow
    from transformers import AutoTokenizer

    from pit.core.interfaces import InterfaceConfig
    from pit.data.reader import TokenFile
    from pit.models import build_model
    from pit.models.checkpoint import save_pretrained_atomic
    from pit.training.args import LoraArgs
    from pit.training.lora import train_lora

    root = tmp_path_factory.mktemp("inputs")
    bpe, gpt2 = tiny_data["bpe2k"], tiny_data["gpt2"]
    vocab = TokenFile(bpe["val"]).meta["vocab_size"]
    ckpt = root / "ckpt"
    model = build_model("scratch-tiny", InterfaceConfig(kind="tt"), vocab_size=vocab, seed=0)
    save_pretrained_atomic(model, ckpt, AutoTokenizer.from_pretrained(bpe["tokenizer"]))
    teacher = build_model("gpt2-tiny", vocab_size=TokenFile(gpt2["val"]).meta["vocab_size"], seed=0)
    teacher.save_pretrained(root / "teacher")
    (root / "texts").mkdir()
    for name in ("__init__.py", "decoder.py", "encoder.py"):
        shutil.copy(Path(json.__file__).parent / name, root / "texts" / name)
    train = dict(mode="scratch", model="scratch-tiny", interface={"kind": "tt"}, train_data=bpe["train"],
                 val_data=bpe["val"], tokenizer=bpe["tokenizer"], seq_len=32, global_batch_tokens=256,
                 micro_batch_size=4, max_steps=2, warmup_steps=1, mlflow={"enabled": False})  # fmt: skip
    lora = dict(base=str(ckpt), task="mbpp", limit=8, rank=2, alpha=4, max_steps=1, batch_size=2, seq_len=64,
                warmup_steps=0, val_data=bpe["val"], side_effect_windows=1, side_effect_seq_len=16,
                mlflow={"enabled": False})  # fmt: skip
    (root / "train.json").write_text(json.dumps(train))
    (root / "config.json").write_text(json.dumps(yaml.safe_load((ROOT / "config/config.yaml").read_text())))
    (root / "lora.json").write_text(json.dumps(lora))
    train_lora(LoraArgs.from_dict(lora), root / "lora-run")
    assert main(["table", "table3", "--profile", "default", "--out", str(root / "tables" / "table3")]) == 0
    (root / "figures").mkdir()
    report = ["report", "--config", str(ROOT / "config/config.yaml"), "--tables", str(root / "tables")]
    assert main([*report, "--figures", str(root / "figures"), "--out", str(root / "REPORT.md")]) == 0
    write_tiny_gguf(root / "tiny.gguf")
    assert main(["teacher", "materialize", str(root / "tiny.gguf"), "--out", str(root / "gteacher")]) == 0
    assert main(["teacher", "pack", str(root / "gteacher"), "--out", str(root / "stage"), "--piece-mb", "0.05"]) == 0
    db = f"sqlite:///{root / 'mlflow.db'}"
    mlflow.set_tracking_uri(db)
    mlflow.create_experiment("ex")
    return {
        "TEXTS": root / "texts",
        "CORPUS": Path(bpe["tokenizer"]).parents[1] / "corpus",
        "DBFILE": root / "mlflow.db",
        "CKPT": ckpt,
        "ADAPTER": root / "lora-run" / "adapter",
        "TEACHER": root / "teacher",
        "MAN": Path(bpe["tokenizer"]).parents[1] / "corpus" / "manifest.json",
        "TOK": bpe["tokenizer"],
        "VAL": bpe["val"],
        "GPT2VAL": gpt2["val"],
        "TRAIN": root / "train.json",
        "LORA": root / "lora.json",
        "TABLES": root / "tables",
        "FIGS": root / "figures",
        "REPORT": root / "REPORT.md",
        "CONFIG": root / "config.json",
        "DB": db,
        "GGUF": root / "tiny.gguf",
        "GTEACHER": root / "gteacher",
        "STAGE": root / "stage",
    }


def fill(arg: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        arg = arg.replace("{" + key + "}", value)
    return arg


def contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("command", sorted(CASES))
def test_no_command_replaces_a_folder_it_did_not_write(command, inputs, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # config/config.yaml of the checkout
    precious = tmp_path / "results"
    for name, data in PRECIOUS.items():
        (precious / name).parent.mkdir(parents=True, exist_ok=True)
        (precious / name).write_bytes(data)
    args, refused = CASES[command]
    values = {**{k: str(v) for k, v in inputs.items()}, "P": str(precious)}
    argv = [*command.split(), *(fill(a, values) for a in args)]
    argv += [str(precious)] if command == "export" else ["--out", str(precious)]
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert contents(precious) == PRECIOUS, command
    if refused is None:
        assert rc == 0 and (tmp_path / "results.md").is_file()
    else:
        assert rc == 2 and err and re.search(refused, err[-1]) and str(precious) in err[-1], (command, err)


def tree(path: Path) -> dict[str, str]:
    """{relative path: sha256} of a file, or of every file under a folder."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path.parent)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def through_link(dst: Path, links: Path) -> str:
    """`dst` spelled through a symbolic link and '..', which the kernel resolves link first while os.path.abspath
    collapses `link/..` lexically (to `links`, outside every source): `LINK/..` with LINK -> a folder inside `dst`,
    else `LINK/../NAME/REST` with LINK -> NAME, the nearest existing folder at or above `dst`."""
    links.mkdir(exist_ok=True)
    link = links / f"link{len(list(links.iterdir()))}"
    inner = next((p for p in sorted(dst.iterdir()) if p.is_dir()), None) if dst.is_dir() else None
    if inner is not None:
        link.symlink_to(inner)
        return f"{link}/.."
    folder = next(p for p in [dst, *dst.parents] if p.is_dir())
    link.symlink_to(folder)
    return str(Path(f"{link}/..") / folder.name / dst.relative_to(folder))


@pytest.mark.parametrize("spelling", ["plain", "link/.."])
@pytest.mark.parametrize("command", sorted(HOLDS))
def test_no_command_writes_where_it_reads(command, spelling, inputs, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    holder = tmp_path / "runs"
    shutil.copytree(inputs["CKPT"], holder / "a" / "final")  # a run folder and its sibling, under one folder
    (holder / "b").mkdir()
    (holder / "b" / "metrics.jsonl").write_text('{"step": 1}\n')
    values = {**{k: str(v) for k, v in inputs.items()}, "HELD": str(holder / "a" / "final"), "HOLDER": str(holder)}
    args, dst = HOLDS[command]
    dst = fill(dst, values) if spelling == "plain" else through_link(Path(fill(dst, values)), tmp_path / "links")
    argv = [*command.split(), *(fill(a, values) for a in args)]
    argv += [dst] if command in ("export", "convert") else ["--out", dst]
    watched = [Path(v) for v in values.values() if Path(v).exists() and not v.startswith("sqlite")]
    before = {str(p): tree(p) for p in watched}
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err and re.search(HOLDS_SOURCE, err[-1]) and dst in err[-1], (command, err)
    assert {str(p): tree(p) for p in watched} == before, f"{command} changed one of its inputs"


# command -> (its arguments, with {SPEC} a spec or config file it reads): `--out {SPEC}` is refused as its source
SPEC_FILES = {
    "diagnose": ["{CKPT}", "--spec", "{SPEC}"],
    "evaluate": ["gsm8k", "--model", "{CKPT}", "--spec", "{SPEC}"],
    "data download": ["--spec", "{SPEC}"],
    "data tokenizer": ["--name", "b", "--spec", "{SPEC}", "--corpus", "{MAN}"],
    "data tokenize": ["--corpus", "{MAN}", "--split", "val", "--tokenizer", "{TOK}", "--spec", "{SPEC}"],
    "data prepare": ["{TEXTS}", "--tokenizer", "gpt2", "--spec", "{SPEC}"],
    "train": ["--spec-file", "{SPEC}"],
    "plan": ["--configfile", "{SPEC}"],
    "report": ["--config", "{SPEC}", "--tables", "{TABLES}"],
    "mlflow summary": [
        "--config-file",
        "{SPEC}",
        "--tables",
        "{TABLES}",
        "--figures",
        "{FIGS}",
        "--report",
        "{REPORT}",
    ],
}


@pytest.mark.parametrize("command", sorted(SPEC_FILES))
def test_no_command_writes_onto_its_spec_file(command, inputs, tmp_path, capsys):
    """`pit diagnose --spec S.json --out S.json` replaced the spec it read (issue 65): every file a command reads,
    its --spec/--spec-file/--config file included, is a source for the output rule."""
    spec = tmp_path / "spec.json"
    spec.write_text(inputs["TRAIN"].read_text() if command == "train" else "{}\n")
    values = {**{k: str(v) for k, v in inputs.items()}, "SPEC": str(spec)}
    before = spec.read_bytes()
    capsys.readouterr()
    rc = main([*command.split(), *(fill(a, values) for a in SPEC_FILES[command]), "--out", str(spec)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err and re.search(HOLDS_SOURCE, err[-1]), (command, err)
    assert spec.read_bytes() == before


@pytest.mark.parametrize("command", sorted(UNRELATED))
def test_no_command_replaces_an_unrelated_file_of_the_same_name(command, inputs, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    args, out, theirs = UNRELATED[command]
    for name, data in theirs.items():
        (tmp_path / name).write_bytes(data)
    values = {k: str(v) for k, v in inputs.items()}
    capsys.readouterr()
    dst = ["--out-dir", str(tmp_path)] if out == "--out-dir" else ["--out", str(tmp_path / out)]
    rc = main([*command.split(" --")[0].split(), *(fill(a, values) for a in args), *dst])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err and "did not write" in err[-1], (command, err)
    assert {name: (tmp_path / name).read_bytes() for name in theirs} == theirs
    assert not list(tmp_path.glob(".*.tmp")), "temporaries left behind"


# command -> its destination inside {P}, a folder of a user's files (PRECIOUS): it writes there, exit 0
BESIDE = {
    "data download": "{P}/manifest.json",
    "data tokenize": "{P}/val.bin",
    "evaluate": "{P}/gsm8k.json",
    "generate": "{P}/generations.json",
    "side-effects": "{P}/side.json",
    "table": "{P}/table3",
    "figure": "{P}/transition.png",
    "report": "{P}/REPORT.md",
    "mlflow export": "{P}/runs.jsonl",
}


@pytest.mark.parametrize("command", sorted(BESIDE))
def test_no_command_touches_the_files_beside_its_output(command, inputs, tmp_path, capsys, monkeypatch):
    """A command that writes into a folder of a user's files (PRECIOUS: a hub data set's Parquet shard next to a
    download's manifest, a live writer's temporary, ...) writes its own files there and leaves theirs alone."""
    monkeypatch.chdir(ROOT)
    precious = tmp_path / "results"
    for name, data in PRECIOUS.items():
        (precious / name).parent.mkdir(parents=True, exist_ok=True)
        (precious / name).write_bytes(data)
    values = {**{k: str(v) for k, v in inputs.items()}, "P": str(precious)}
    argv = [*command.split(), *(fill(a, values) for a in CASES[command][0]), "--out", fill(BESIDE[command], values)]
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 0, (command, err[-3:])
    assert {name: data for name, data in contents(precious).items() if name in PRECIOUS} == PRECIOUS, command


@pytest.mark.parametrize("command", ["train", "lora train"])
def test_run_commands_keep_a_lock_file_they_did_not_write(command, inputs, tmp_path, capsys):
    """`pit train --out DIR` truncated, then removed, a user's DIR/.lock (issue 65)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").write_bytes(b"my lock\n")
    values = {k: str(v) for k, v in inputs.items()}
    capsys.readouterr()
    rc = main([*command.split(), *(fill(a, values) for a in CASES[command][0]), "--out", str(run)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err and "holds .lock, which pit did not write" in err[-1], err
    assert contents(run) == {".lock": b"my lock\n"}


def test_a_destination_through_a_link_and_dotdot_is_where_the_kernel_puts_it(tmp_path):
    """`atomic_path('lnk/..')` took '..' for the destination's name: it wrote into the link's target, then failed
    with EBUSY (a traceback, files left). Now the destination is the folder `lnk/..` resolves to, with its rules."""
    from pit.errors import PitError
    from pit.io import atomic_path

    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "lnk").symlink_to(tmp_path / "d" / "sub")
    refused = pytest.raises(PitError, match=r"'.*lnk/\.\.' is a folder this command did not write")
    with refused, atomic_path(tmp_path / "lnk" / "..") as tmp:
        tmp.mkdir()
        (tmp / "new.txt").write_text("x")
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["sub"] and not any((tmp_path / "d" / "sub").iterdir())
