"""What the file system and damaged sidecars do to a command (issue 65, items 15, 17 and 18).

- A full disk (ENOSPC) and a read-only destination (EROFS), from the real kernel: a tiny tmpfs in a user and mount
  namespace (`unshare`), remounted read-only. Each writing command is one line naming the path and the cause, exit
  2, and leaves nothing half-written: no temporaries, no partial files; a training run that cannot write its next
  checkpoint keeps the previous one intact, and metrics.jsonl never ends in half a row. One subprocess runs every
  command in turn (imports paid once).
- Damaged sidecars (an adapter's pit_base.json, run.json, summary.json, diagnostics.json, a tokenizer's meta.json, a
  checkpoint's config.json as a JSON list, a line of an MLflow export, a recorded file `pit verify` compares), `pit
  export` of a plain model, an absurd LoRA rank, `pit verify --cores 0`: one line, exit 2, nothing written.
"""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from pit.commands import main

pytestmark = pytest.mark.xdist_group("io_errors")  # its module fixture (a checkpoint) is built once, on one worker

# Runs inside the namespace, with the tmpfs mounted at MNT (argv: MNT, a JSON object of input paths). Prints one JSON
# object: {scenario: {command: [exit code or the exception, the last stderr line]}, "files": {scenario: [...]}}.
SCRIPT = r"""
import contextlib, io, json, os, subprocess, sys
from pathlib import Path
from pit.commands import main

mnt, inp = Path(sys.argv[1]), json.loads(sys.argv[2])
ckpt, tok, val, man, db = inp["ckpt"], inp["tok"], inp["val"], inp["manifest"], inp["db"]
import mlflow  # a store outside the tmpfs with one run: `pit mlflow export` has something to write
mlflow.set_tracking_uri(db)
with mlflow.start_run(experiment_id=mlflow.create_experiment("ex")):
    mlflow.log_param("p", 1)


def pit(argv):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            rc = main(argv)
    except BaseException as e:  # a traceback is what the test forbids: recorded, not raised
        return [f"{type(e).__name__}", str(e)[:300]]
    lines = err.getvalue().strip().splitlines()
    return [rc, lines[-1] if lines else ""]


def fill(leave=0):
    # a file that takes all of the tmpfs but `leave` bytes
    free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize - leave
    with open(mnt / f".filler{leave}", "wb") as f:
        with contextlib.suppress(OSError):
            while free > 0:
                free -= f.write(b"\0" * min(free, 1 << 16))


def files():
    return sorted(str(p.relative_to(mnt)) for p in mnt.rglob("*") if p.is_file() and ".filler" not in p.name)


def commands(d):
    lim = ["--limit", "1", "--max-new-tokens", "2"]
    return {
        "export": ["export", ckpt, f"{d}/exp"],
        "evaluate": ["evaluate", "gsm8k", "--model", ckpt, *lim, "--out", f"{d}/ev.json"],
        "table": ["table", "table3", "--profile", "default", "--out", f"{d}/t3"],
        "diagnose": ["diagnose", ckpt, "--val-data", val, "--positions", "2", "--seq-len", "8", "--bigram-tokens", "99",
                     "--out", f"{d}/d.json"],
        "data tokenize": ["data", "tokenize", "--corpus", man, "--split", "val", "--tokenizer", tok, "--out", f"{d}/v"],
        "mlflow export": ["mlflow", "export", "--experiment", "ex", "--tracking-uri", db, "--out", f"{d}/runs.jsonl"],
    }


train = ["train", "--spec-file", inp["train"], "--out", str(mnt / "run")]
out = {"first": pit([*train, "--set", "stop_after_steps=1"])}  # checkpoint step 1, on a roomy tmpfs
fill(leave=1_500_000)  # the next checkpoint's weights fit, its trainer state does not
out["partial"] = {"train": pit(train)}
out["files"] = {"partial": files()}
metrics = mnt / "metrics.jsonl"  # a page of rows but 96 bytes: the next row fills it and needs a page more
metrics.write_text("".join(f'{{"step": {i}, "pad": "{"x" * 76}"}}\n' for i in range(10, 50)))  # 40 x 100 bytes
fill()
from pit.training.run_folder import MetricsLog
log, before = MetricsLog(metrics, None, (), every=None), metrics.read_bytes()
try:
    log.write({"step": 50, "pad": "x" * 500})
except OSError as e:
    out["metrics"] = [e.errno, metrics.read_bytes() == before]
log.close()  # (a file open for writing keeps the remount read-only below from happening)
out["full"] = {"train": pit(train), **{k: pit(v) for k, v in commands(mnt / "full").items()}}
out["files"]["full"] = files()
(mnt / "ro").mkdir()  # the destinations' folder exists: the writes themselves are refused
subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
out["read-only"] = {"train": pit(train), **{k: pit(v) for k, v in commands(mnt / "ro").items()}}
out["files"]["read-only"] = files()
from pit.training.run_folder import RunFolder
RunFolder.read_checkpoint(mnt / "run" / "checkpoints" / "step-000001")  # raises when damaged
from pit.io import read_jsonl
read_jsonl(mnt / "run" / "metrics.jsonl")  # raises at a half-written row
print(json.dumps(out))
"""


def unshare_works() -> bool:
    """Whether this machine lets a process mount a tmpfs and remount it read-only in its own user and mount namespace
    (the mounts are private to it: nothing outside sees them)."""
    if shutil.which("unshare") is None:
        return False
    where = tempfile.gettempdir()
    mounts = f'mount -t tmpfs -o size=64k none "{where}" && mount -o remount,ro "{where}"'
    probe = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", mounts]
    return subprocess.run(probe, capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def checkpoint(tiny_data, tmp_path_factory):
    """A tiny PIT checkpoint with the bpe2k tokenizer."""
    from transformers import AutoTokenizer

    from pit.core.interfaces import InterfaceConfig
    from pit.data.reader import TokenFile
    from pit.models import build_model
    from pit.models.checkpoint import save_pretrained_atomic

    bpe = tiny_data["bpe2k"]
    path = tmp_path_factory.mktemp("ckpt") / "ckpt"
    model = build_model(
        "scratch-tiny", InterfaceConfig(kind="pit"), vocab_size=TokenFile(bpe["val"]).meta["vocab_size"]
    )
    save_pretrained_atomic(model, path, AutoTokenizer.from_pretrained(bpe["tokenizer"]))
    return path


def train_spec(tiny_data, **kw) -> dict:
    bpe = tiny_data["bpe2k"]
    return dict(mode="scratch", model="scratch-tiny", interface={"kind": "tt"}, train_data=bpe["train"],
                val_data=bpe["val"], tokenizer=bpe["tokenizer"], seq_len=32, global_batch_tokens=256,
                micro_batch_size=4, max_steps=3, warmup_steps=1, checkpoint_every=1, mlflow={"enabled": False},
                **kw)  # fmt: skip


@pytest.mark.slow
@pytest.mark.skipif(not unshare_works(), reason="needs `unshare --user --map-root-user --mount` (user namespaces)")
def test_a_full_or_read_only_file_system_is_one_line_and_leaves_nothing_half_written(tiny_data, checkpoint, tmp_path):
    """Issue 65 item 17: ENOSPC and EROFS of train (its checkpoint), export, evaluate, table, diagnose, data tokenize
    and mlflow export were tracebacks."""
    bpe = tiny_data["bpe2k"]
    (tmp_path / "train.json").write_text(json.dumps(train_spec(tiny_data)))
    inputs = {"ckpt": str(checkpoint), "tok": bpe["tokenizer"], "val": bpe["val"],
              "train": str(tmp_path / "train.json"),
              "manifest": str(Path(bpe["tokenizer"]).parents[1] / "corpus" / "manifest.json"),
              "db": f"sqlite:///{tmp_path / 'mlflow.db'}"}  # fmt: skip
    (tmp_path / "script.py").write_text(textwrap.dedent(SCRIPT))
    (mnt := tmp_path / "mnt").mkdir()
    shell = f'mount -t tmpfs -o size=8m none "$1" && exec "{sys.executable}" "$2" "$1" "$3"'
    argv = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", shell, "sh", str(mnt)]
    proc = subprocess.run([*argv, str(tmp_path / "script.py"), json.dumps(inputs)], capture_output=True, text=True,
                          cwd=Path(__file__).parents[1], timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["first"][0] == 0, out["first"]
    cause = {"partial": "No space left on device (ENOSPC)", "full": "No space left on device (ENOSPC)",
             "read-only": "Read-only file system (EROFS)"}  # fmt: skip
    run_files = ["run/checkpoints/step-000001/checksums.sha256", "run/checkpoints/step-000001/model/config.json",
                 "run/checkpoints/step-000001/model/generation_config.json",
                 "run/checkpoints/step-000001/model/model.safetensors",
                 "run/checkpoints/step-000001/trainer_state.pt", "run/metrics.jsonl", "run/run.json"]  # fmt: skip
    assert out["metrics"] == [errno.ENOSPC, True]  # a row the disk could not take is cut back off: no half row
    head = {s: f"cannot write '{mnt / ('ro' if s == 'read-only' else 'full')}/" for s in cause}
    wrong = [
        (scenario, command, rc, line)
        for scenario in cause
        for command, (rc, line) in out[scenario].items()
        if rc != 2
        or not line.startswith(f"pit {command.split()[0]}: error: " + (f"cannot write '{mnt}/run" if command == "train"
                                                                      else head[scenario]))
        or cause[scenario] not in line
        or "nothing half-written was kept" not in line
    ]  # fmt: skip
    assert wrong == []
    assert out["files"]["partial"] == run_files
    for scenario in ("full", "read-only"):
        assert out["files"][scenario] == sorted([*run_files, "metrics.jsonl"]), scenario  # no temporary, no half file


def test_a_temporary_is_named_by_its_destination():
    from pit.commands import destination_of

    assert destination_of("/r/.exp.pit-tmp-12-ab_cd3f9.tmp/exp/model.safetensors") == "/r/exp/model.safetensors"
    assert destination_of("/r/.t3.md.pit-tmp-7-abcdefgh.tmp") == "/r/t3.md"
    assert destination_of("/r/plain/.name.tmp") == "/r/plain/.name.tmp"


def run_pit(capsys, *argv) -> tuple[int, list[str]]:
    capsys.readouterr()
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as err:
        rc = err.code
    return rc, capsys.readouterr().err.strip().splitlines()


def test_verify_refuses_cores_below_one_at_once(tmp_path, capsys, monkeypatch):
    """Issue 65 item 15: `pit verify --cores 0` ran Snakemake with no cores: it waited forever."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text("profile: x\n")
    for cores, shown in (("0", "0"), ("-2", "-2"), ("1.5", "'1.5'"), ("many", "'many'")):
        rc, err = run_pit(capsys, "verify", "--configfile", "config.yaml", "--cores", cores)
        assert rc == 2 and err == [f"pit verify: error: --cores {shown}: expected 'all' or a whole number >= 1"], err
    assert list(tmp_path.iterdir()) == [tmp_path / "config.yaml"]  # no scratch folder made


# command -> its arguments ({ckpt}, {adapter}, {run}, {tok}: the copies `damaged` makes; {tmp}: a folder for outputs)
READERS = {
    "lora merge": ["lora", "merge", "--base", "{ckpt}", "--adapter", "{adapter}", "--out", "{tmp}/merged"],
    "mlflow sync": ["mlflow", "sync", "{run}", "--tracking-uri", "sqlite:///{tmp}/mlflow.db"],
    "figure": ["figure", "transition", "--checkpoint", "{run}/final", "--label", "m", "--prompt", "def f(x):",
               "--profile", "default", "--out", "{tmp}/fig.png"],
    "data tokenize": ["data", "tokenize", "--corpus", "{manifest}", "--split", "val", "--tokenizer", "{tok}", "--out",
                      "{tmp}/val.bin"],
    "export": ["export", "{ckpt}", "{tmp}/exp"],
}  # fmt: skip
RUN_JSON = '{"experiment": "e", "run_name": "r", "params": {}, "tags": {}}'
# case -> (command, the file damaged, its new content, how the error line after "pit COMMAND: error: " starts)
DAMAGED = {
    "pit_base.json not JSON": ("lora merge", "adapter/pit_base.json", "{",
                               "'{adapter}/pit_base.json' is not valid JSON"),
    "pit_base.json a list": ("lora merge", "adapter/pit_base.json", "[1, 2]",
                             "'{adapter}/pit_base.json' holds an array; expected the pit_base.json"),
    "pit_base.json no hash": ("lora merge", "adapter/pit_base.json", '{"base": "b"}',
                              "'{adapter}/pit_base.json' has no key 'base_sha256'; expected"),
    "pit_base.json hash a number": ("lora merge", "adapter/pit_base.json", '{"base": "b", "base_sha256": 5}',
                                    "'{adapter}/pit_base.json': base_sha256 5 is an integer; expected a string"),
    "run.json not JSON": ("mlflow sync", "run/run.json", "{", "'{run}/run.json' is not valid JSON"),
    "run.json a list": ("mlflow sync", "run/run.json", "[]", "'{run}/run.json' holds an array; expected the run.json"),
    "run.json no experiment": ("mlflow sync", "run/run.json", '{"run_name": "r", "params": {}}',
                               "'{run}/run.json' has no key 'experiment'; expected"),
    "run.json tags a string": ("mlflow sync", "run/run.json", RUN_JSON.replace('"tags": {}', '"tags": "x"'),
                               "'{run}/run.json': tags \"x\" is a string; expected an object"),
    "summary.json a list": ("mlflow sync", "run/summary.json", "[1]", "'{run}/summary.json' holds an array; expected"),
    "run.json of a figure's checkpoint a list": ("figure", "run/run.json", "[]", "'{run}/run.json' holds an array"),
    "run.json params.train a string": ("figure", "run/run.json", '{"params": {"train": "x"}}',
                                       "'{run}/run.json' params: train \"x\" is a string; expected an object"),
    "meta.json a list": ("data tokenize", "tok/meta.json", "[]", "'{tok}/meta.json' holds an array; expected"),
    "meta.json no hash": ("data tokenize", "tok/meta.json", '{"name": "t"}',
                          "'{tok}/meta.json' has no key 'tokenizer_sha256'"),
    "config.json a list": ("export", "ckpt/config.json", "[1, 2]", "'{ckpt}/config.json' holds an array; expected"),
}  # fmt: skip


@pytest.fixture
def copies(checkpoint, tiny_data, tmp_path) -> dict[str, str]:
    """Copies of valid inputs whose sidecars a test damages: a checkpoint, an adapter folder (what `lora merge` reads
    before any weights), a finished run folder with the checkpoint as final/, a tokenizer folder."""
    bpe = tiny_data["bpe2k"]
    shutil.copytree(checkpoint, tmp_path / "ckpt")
    shutil.copytree(checkpoint, tmp_path / "run" / "final")
    shutil.copytree(bpe["tokenizer"], tmp_path / "tok")
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text("{}")
    (tmp_path / "adapter" / "pit_base.json").write_text('{"base": "b", "base_sha256": "0"}')
    (tmp_path / "run" / "run.json").write_text(RUN_JSON)
    (tmp_path / "run" / "summary.json").write_text('{"steps": 1}')
    (tmp_path / "run" / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    (tmp_path / "out").mkdir()
    names = {k: str(tmp_path / k) for k in ("ckpt", "adapter", "run", "tok")}
    return {
        **names,
        "tmp": str(tmp_path / "out"),
        "manifest": str(Path(bpe["tokenizer"]).parents[1] / "corpus" / "manifest.json"),
    }


def fill(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_a_damaged_sidecar_is_one_line_naming_it(case, copies, tmp_path, capsys, monkeypatch):
    """Issue 65 item 18: sidecars of the wrong shape were tracebacks where a value was first used."""
    monkeypatch.chdir(Path(__file__).parents[1])  # config/config.yaml of the checkout (figure)
    command, damaged, content, expected = DAMAGED[case]
    (tmp_path / damaged).write_text(content)
    rc, err = run_pit(capsys, *(fill(a, copies) for a in READERS[command]))
    assert rc == 2 and err and err[-1].startswith(f"pit {command.split()[0]}: error: {fill(expected, copies)}"), err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) in ([], ["mlflow.db"]), "an output was written"


def test_a_run_json_whose_fingerprint_is_not_a_string_is_one_line(tiny_data, tmp_path, capsys):
    """Issue 65 item 18: a finished run folder whose run.json records a number as its fingerprint: a traceback where
    the message shortened it."""
    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    (run / "summary.json").write_text('{"val_loss": 1.0}')
    (run / "run.json").write_text('{"fingerprint": 5}')
    spec = json.dumps(train_spec(tiny_data))
    rc, err = run_pit(capsys, "train", "--spec", spec, "--out", run)
    assert rc == 2 and err[-1].startswith(f"pit train: error: {str(run)!r} holds a finished run with other settings "
                                          "(fingerprint unknown; "), err  # fmt: skip


def test_export_of_a_plain_model_is_one_line(tiny_data, tmp_path, capsys):
    """Issue 65 item 18: `pit export` of a plain transformers model (no interface) was an AttributeError."""
    from pit.models import build_model

    build_model("gpt2-tiny", vocab_size=300, seed=0).save_pretrained(tmp_path / "plain")
    rc, err = run_pit(capsys, "export", tmp_path / "plain", tmp_path / "out")
    assert rc == 2 and err == [
        f"pit export: error: {str(tmp_path / 'plain')!r} holds a plain 'gpt2' model, not a project checkpoint "
        "(model_type pit_*: PIT/TT/untied interface); it is already a plain transformers model (`pit convert` makes a "
        "project checkpoint)"
    ]
    assert not (tmp_path / "out").exists()


def test_a_lora_rank_beyond_the_models_dimensions_is_one_line_before_any_work(checkpoint, tmp_path, capsys):
    """Issue 65 item 18: `--set rank=1000000` built adapters of a million rows per module until memory ran out."""
    spec = dict(base=str(checkpoint), task="mbpp", limit=2, max_steps=1, batch_size=2, seq_len=48)
    args = ["lora", "train", "--spec", json.dumps(spec), "--set", "rank=1000000", "--out", tmp_path / "run"]
    rc, err = run_pit(capsys, *args)
    assert rc == 2 and err[-1] == ("pit lora: error: lora config: rank 1000000; expected at most 64, the largest rank "
                                   "an update of the target modules can have (layers.0.attn.q_proj: a weight of shape "
                                   "(64, 64))"), err  # fmt: skip
    assert not (tmp_path / "run").exists()


SUMMARY = {"first_step_loss": 7.0, "final_train_loss": 6.0, "final_train_ppl": 403.4, "val_loss": 6.1, "runtime_s": 1.0}
ANCHORS = {"cosine_distance": 0.1, "procrustes_error": 0.2, "principal_angle": 0.3}
# case -> (table, its --runs below the results root, the file damaged, its new content, how the error line continues)
TABLE_READS = {
    "table1 summary.json a list": ("table1", "pretrain", "pretrain/scratch/303m/pit/summary.json", "[]",
                                   " holds an array; expected a run's summary.json"),
    "table1 summary.json val_loss a string": ("table1", "pretrain", "pretrain/scratch/303m/pit/summary.json",
                                              json.dumps({**SUMMARY, "val_loss": "6.1"}),
                                              ": val_loss \"6.1\" is a string; expected a number or null"),
    "table2 diagnostics.json raw a list": ("table2", "diagnostics", "diagnostics/scratch/303m/pit/diagnostics.json",
                                           '{"delta_ti": 0.1, "raw": [], "polar": {}}',
                                           ": raw [] is an array; expected an object"),
    "table2 diagnostics.json context_free a list": ("table2", "diagnostics",
                                                    "diagnostics/scratch/303m/pit/diagnostics.json",
                                                    json.dumps({"delta_ti": 0.1, "raw": ANCHORS, "polar": ANCHORS,
                                                                "context_free": []}),
                                                    ": context_free [] is an array; expected an object or null"),
    "stability summary.json not JSON": ("stability", "", "pretrain/scratch/303m/pit/summary.json", "{",
                                        " is not valid JSON"),  # was skipped: a table without that run
    "stability summary.json diverged a number": ("stability", "", "pretrain/scratch/303m/pit/summary.json",
                                                 json.dumps({**SUMMARY, "diverged": 3}),
                                                 ": diverged 3 is an integer; expected true or false or a string"),
}  # fmt: skip


def test_a_stopped_runs_summary_with_its_reason_reads_in_every_table(tmp_path, capsys):
    """`pit train` writes why a diverged run was stopped as `diverged` (a string): the study's tables refused it
    ("is a string; expected true or false") and stopped the study's reporting rules."""
    run = tmp_path / "pretrain/scratch/303m/pit"
    run.mkdir(parents=True)
    why = "stopped after 20 consecutive non-finite steps from step 62"
    (run / "summary.json").write_text(json.dumps({**SUMMARY, "val_loss": None, "diverged": why}))
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 7.0}\n')
    for table in ("table1", "stability"):
        argv = ["table", table, "--runs", tmp_path / ("pretrain" if table == "table1" else ""), "--profile", "p"]
        assert run_pit(capsys, *argv, "--out", tmp_path / "out" / table)[0] == 0
    import pandas as pd

    assert pd.read_csv(tmp_path / "out" / "stability.csv")["diverged"].tolist() == [1]  # counted as diverged


@pytest.mark.parametrize("case", sorted(TABLE_READS))
def test_a_damaged_run_record_is_one_line_in_a_table(case, tmp_path, capsys):
    """Issue 65 item 18: tables read summary.json and diagnostics.json of any shape (tracebacks), and a claims or study
    table left out a run whose summary.json was not JSON."""
    run, diag = tmp_path / "pretrain/scratch/303m/pit", tmp_path / "diagnostics/scratch/303m/pit"
    run.mkdir(parents=True)
    diag.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(SUMMARY))
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 7.0}\n')
    (diag / "diagnostics.json").write_text(json.dumps({"delta_ti": 0.1, "raw": ANCHORS, "polar": ANCHORS}))
    table, runs, damaged, content, expected = TABLE_READS[case]
    argv = ["table", table, "--runs", tmp_path / runs, "--profile", "p", "--out", tmp_path / "out" / "t"]
    assert run_pit(capsys, *argv)[0] == 0  # the records as written
    (tmp_path / damaged).write_text(content)
    rc, err = run_pit(capsys, *argv[:-1], tmp_path / "out2" / "t")
    assert rc == 2 and err[-1].startswith(f"pit table: error: {str(tmp_path / damaged)!r}{expected}"), err
    assert not (tmp_path / "out2").exists()


def test_verify_names_a_recorded_file_that_is_not_json(tmp_path):
    """Issue 65 item 18: `pit verify` compared a half-written recorded JSON file with a traceback."""
    from pit.errors import PitError
    from pit.tracking.verify import compare_file

    (tmp_path / "recorded.json").write_text('{"val_loss": 1.')
    (tmp_path / "rerun.json").write_text('{"val_loss": 1.0}')
    with pytest.raises(PitError, match=r"recorded\.json' is not valid JSON .*expected one JSON value"):
        compare_file("results/pretrain/x/summary.json", tmp_path / "recorded.json", tmp_path / "rerun.json")


def test_an_export_line_of_the_wrong_shape_is_one_line_before_the_store_is_touched(tmp_path, capsys):
    """Issue 65 item 18: `pit mlflow sync runs.jsonl` with a line whose tags are a list, or whose metric points are not
    [step, timestamp, value], was a traceback after the runs before it were imported."""
    run = {"experiment": "e", "run_id": "a1", "run_name": "r", "status": "FINISHED", "start_time": 1, "end_time": 2,
           "tags": {}, "params": {}, "metrics": {"loss": [[1, 5, 0.5]]}}  # fmt: skip
    for bad, expected in (({"tags": []}, ": tags [] is an array; expected an object"),
                          ({"metrics": {"loss": [[1, 0.5]]}}, ": metric 'loss' is not a list of [step, timestamp, "
                                                              "value] points")):  # fmt: skip
        (tmp_path / "runs.jsonl").write_text(json.dumps(run) + "\n" + json.dumps({**run, "run_id": "b2", **bad}) + "\n")
        rc, err = run_pit(
            capsys, "mlflow", "sync", tmp_path / "runs.jsonl", "--tracking-uri", f"sqlite:///{tmp_path}/s.db"
        )
        assert rc == 2 and err[-1].startswith(f"pit mlflow: error: {str(tmp_path / 'runs.jsonl')!r} line 2{expected}")
        assert not (tmp_path / "s.db").exists()
