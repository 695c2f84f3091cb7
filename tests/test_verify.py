"""`pit verify`'s comparison (pit/tracking/verify.py): which files are compared, and each kind of number against
its stated tolerance. The rerun itself, on a pulled clone, is tested in test_share.py."""

from __future__ import annotations

import json
import logging
import math
import re
import subprocess
import sys

from pit.tracking.verify import compare_file, compare_trees, compared, tolerance, verdict


def write(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value) if not isinstance(value, str) else value)
    return path


def lines(diffs):
    return [(d.where, d.kind, d.within) for d in diffs]


def test_each_kind_of_number_has_its_tolerance():
    kinds = {
        "val_loss": "loss", "final_train_loss": "loss", "lens_ce_bits": "loss", "kl_bits": "loss",
        "val_ppl": "perplexity", "lora/mbpp/pass_at_1": "score", "base/gsm8k/accuracy": "score",
        "in_final_agreement": "score", "raw_angle": "rounding", "delta_ti": "rounding", "grad_norm": "metric",
        "polar_cosine": "rounding", "raw.procrustes_error": "rounding", "kl": "metric",
        "runtime_s": "machine", "tokens_per_s": "machine", "peak_memory_mb": "machine", "time_s": "machine",
    }  # fmt: skip
    assert {key: tolerance(key).kind for key in kinds} == kinds
    assert tolerance("runtime_s").rel is None and tolerance("val_loss").rel == 1e-3


def test_json_numbers_within_and_out_of_tolerance(tmp_path):
    recorded = {
        "delta_ti": 2.0e-6, "raw": {"principal_angle": 1.0e-7}, "lens": {"ce_bits": [14.0, 13.9]},
        "val_loss": 5.0, "val_ppl": 148.4, "runtime_s": 3.0, "steps": 30, "interface": "pit",
    }  # fmt: skip
    rerun = {
        "delta_ti": 9.0e-6, "raw": {"principal_angle": 4.0e-6}, "lens": {"ce_bits": [14.001, 13.9]},
        "val_loss": 5.01, "val_ppl": 148.4, "runtime_s": 9.0, "steps": 31, "interface": "tt",
    }  # fmt: skip
    rel = "results/diagnostics/scratch/303m/pit/diagnostics.json"
    diffs = compare_file(rel, write(tmp_path / "a" / rel, recorded), write(tmp_path / "b" / rel, rerun))
    assert lines(diffs) == [
        # structural zeros: float32 rounding noise that differs between CPUs (2e-6 on one, 9e-6 on another),
        # under the floors of the float32 bounds at d = 2,048 (pit/core/rounding.py: 1.7e-2 and 3.2e-5)
        ("delta_ti", "rounding", True),
        ("raw.principal_angle", "rounding", True),
        ("lens.ce_bits[0]", "loss", True),  # rel 7e-5 < 1e-3
        ("val_loss", "loss", False),  # rel 2e-3 > 1e-3
        ("steps", "count", False),
        ("interface", "text", False),
    ]  # runtime_s is not compared, equal numbers give no line
    assert diffs[3].line() == (f"{rel} val_loss: recorded 5, rerun 5.01 (diff 0.01, rel 0.002) [loss] OUT OF TOLERANCE")


def test_csv_rows_are_named_and_a_changed_layout_is_one_difference(tmp_path):
    rel = "results/tables/table2.csv"
    a = write(tmp_path / "a" / rel, "# note\nmode,slot,method,delta_ti,lens_ce_bits\nteacher,256m,PIT,1e-8,7.54\n")
    b = write(tmp_path / "b" / rel, "mode,slot,method,delta_ti,lens_ce_bits\nteacher,256m,PIT,0.5,7.5401\n")
    diffs = compare_file(rel, a, b)
    assert lines(diffs) == [
        ("row 1 (teacher 256m PIT) delta_ti", "rounding", False),  # 0.5: far above any rounding
        ("row 1 (teacher 256m PIT) lens_ce_bits", "loss", True),
    ]
    c = write(tmp_path / "c" / rel, "mode,slot,method,delta_ti\nteacher,256m,PIT,1e-8\n")
    assert lines(compare_file(rel, a, c)) == [("layout", "text", False)]


def test_data_files_are_bit_exact_and_renderings_are_not_compared(tmp_path):
    rel = "results/data/gpt2/train.bin"
    (tmp_path / "a" / rel).parent.mkdir(parents=True)
    (tmp_path / "b" / rel).parent.mkdir(parents=True)
    (tmp_path / "a" / rel).write_bytes(bytes(range(10)))
    (tmp_path / "b" / rel).write_bytes(bytes(range(9)) + b"\xff")
    (diff,) = compare_file(rel, tmp_path / "a" / rel, tmp_path / "b" / rel)
    assert (diff.where, diff.kind, diff.within) == ("sha256", "data: bit-exact", False)
    skipped = [
        "results/tables/table2.md", "results/pretrain/scratch/303m/pit/final/config.json", "results/logs/x.log",
        "results/pretrain/scratch/303m/pit/run.json", "results/mlflow/runs.jsonl", "results/REPORT.md",
    ]  # fmt: skip
    assert [f for f in skipped if compared(f)] == []
    assert compared("results/pretrain/scratch/303m/pit/summary.json") and compared("resources/corpus/manifest.json")
    diffs, done, missing = compare_trees(
        tmp_path / "a", tmp_path / "b", [rel, "results/tables/table2.md", "results/x.json"]
    )
    assert (len(diffs), done, missing) == (1, [rel], ["results/x.json"])


def test_a_score_files_provenance_is_not_compared(tmp_path):
    """A rerun's score file differs from the record in when and by which code it was made (its protocol's date and
    commit, lm-eval's date and git_hash): not a difference; the rest of the protocol must be equal."""
    rel = "results/posttrain/teacher/256m/pit/mbpp/eval/mbpp.lm_eval.json"
    protocol = {"date": "2026-11-28T10:00:00+00:00", "commit": "a" * 40, "decoding": {"max_new_tokens": 32}}
    recorded = {"date": 1.0, "git_hash": "a" * 40, "protocol": protocol}
    rerun = {"date": 2.0, "git_hash": "b" * 40, "protocol": {**protocol, "date": "2026-11-29T09:00:00+00:00",
                                                              "commit": "b" * 40}}  # fmt: skip
    assert compare_file(rel, write(tmp_path / "a" / rel, recorded), write(tmp_path / "b" / rel, rerun)) == []
    rerun["protocol"]["decoding"] = {"max_new_tokens": 16}
    diffs = compare_file(rel, tmp_path / "a" / rel, write(tmp_path / "b" / rel, rerun))
    assert lines(diffs) == [("protocol.decoding.max_new_tokens", "count", False)]


# Snakemake 9's log of a run (two jobs at once, one failing), as `pit verify` reads it line by line
SNAKEMAKE_LOG = """Building DAG of jobs...
Job stats:
job        count
-------  -------
diagnose       2
table2         1
total          3

Select jobs to execute...
[Sat Nov 28 16:18:54 2026]
rule diagnose:
    input: results/pretrain/scratch/303m/pit/final
    output: results/diagnostics/scratch/303m/pit/diagnostics.json
    log: results/logs/diagnostics/scratch-303m-pit.log
    jobid: 2
    wildcards: mode=scratch, slot=303m, interface=pit
[Sat Nov 28 16:18:54 2026]
rule diagnose:
    output: results/diagnostics/scratch/303m/tt/diagnostics.json
    jobid: 3
[Sat Nov 28 16:19:04 2026]
Finished jobid: 3 (Rule: diagnose)
1 of 3 steps (33%) done
[Sat Nov 28 16:19:05 2026]
Finished jobid: 2 (Rule: diagnose)
2 of 3 steps (67%) done
[Sat Nov 28 16:19:05 2026]
localrule table2:
    output: results/tables/table2.md, results/tables/table2.csv, results/tables/table2.json
    jobid: 1
[Sat Nov 28 16:19:06 2026]
Error in rule table2:
    jobid: 1
"""


def test_verify_names_each_job_as_snakemake_finishes_it():
    """`pit verify`'s progress (pit.tracking.share.JobLines on pit.progress.Steps): the job count once Snakemake has
    planned the run, then one plain line per job as it finishes (its rule and first output), a failed job named,
    no carriage returns where stderr is not a terminal."""
    import io

    from pit.progress import Steps
    from pit.tracking.share import JobLines

    log = io.StringIO()  # not a terminal, as stderr redirected to a file
    feed = JobLines(Steps("pit verify", unit="job", file=log))
    for line in SNAKEMAKE_LOG.splitlines():
        feed(line)
    assert [re.sub(r" \(\d+:\d\d\)$", "", x) for x in log.getvalue().splitlines()] == [
        "pit verify: [0/3] snakemake plans 3 jobs",
        "pit verify: [1/3] diagnose results/diagnostics/scratch/303m/tt/diagnostics.json",
        "pit verify: [2/3] diagnose results/diagnostics/scratch/303m/pit/diagnostics.json",
        "pit verify: [2/3] table2 FAILED",
    ]
    assert "\r" not in log.getvalue()


def test_bad_scratch_folder_is_one_error_line(tmp_path):
    (tmp_path / "config.yaml").write_text("profile: x\n")
    (tmp_path / "scratch").mkdir()
    (tmp_path / "scratch" / "old.txt").write_text("x")
    proc = subprocess.run(
        [sys.executable, "-m", "pit", "verify", "--configfile", "config.yaml", "--scratch", "scratch"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip() == "pit verify: error: --scratch 'scratch' holds files: expected a new or empty folder"


def test_a_non_finite_recorded_value_matches_only_itself(tmp_path):
    """Issue 58: a recorded `inf` accepted any rerun value (|rerun - inf| <= abs + rel * inf)."""
    rel = "results/pretrain/scratch/303m/pit/summary.json"
    recorded = {"val_loss": math.inf, "delta_ti": -math.inf, "grad_norm": math.nan, "kl": 0.5, "val_ppl": math.inf}
    rerun = {"val_loss": 5.0, "delta_ti": -math.inf, "grad_norm": math.nan, "kl": math.inf, "val_ppl": math.inf}
    diffs = compare_file(rel, write(tmp_path / "a" / rel, recorded), write(tmp_path / "b" / rel, rerun))
    assert lines(diffs) == [("val_loss", "loss: not finite", False), ("kl", "metric: not finite", False)]
    csv_rel = "results/tables/table1.csv"
    a = write(tmp_path / "a" / csv_rel, "mode,val_loss\nscratch,inf\n")
    b = write(tmp_path / "b" / csv_rel, "mode,val_loss\nscratch,3.25\n")
    assert lines(compare_file(csv_rel, a, b)) == [("row 1 (scratch) val_loss", "loss: not finite", False)]


def test_a_recorded_file_that_is_missing_fails_verification(tmp_path):
    """Issue 58: `pit verify` passed ("0 differences") when a recorded file had been deleted from the checkout."""
    rel = "results/diagnostics/scratch/303m/pit/diagnostics.json"
    write(tmp_path / "b" / rel, {"delta_ti": 1e-8})
    (tmp_path / "a").mkdir()
    diffs, done, missing = compare_trees(tmp_path / "a", tmp_path / "b", [rel])
    printed, status = verdict(diffs, done, missing)
    assert status == 1 and printed == [
        f"{rel}: MISSING from this checkout (the rerun wrote it; deleted, or never made or pulled here): not verified",
        "verified 0 files: 0 differences, 0 out of tolerance, 1 recorded files missing",
    ]
    write(tmp_path / "a" / rel, {"delta_ti": 1e-8})
    assert verdict(*compare_trees(tmp_path / "a", tmp_path / "b", [rel])) == (
        ["verified 1 files: 0 differences, 0 out of tolerance"],
        0,
    )


def test_share_pull_fails_on_content_that_differs_from_dvc_lock(tmp_path, monkeypatch, capsys):
    """Issue 58: `pit share pull` from a remote whose content was edited reported "Snakemake sees every output up to
    date" (DVC checks a file output's hash as it fetches it, not the files of a folder output, and `dvc status` then
    trusted what it had written). A tiny DVC project: one file output, one folder output, pushed to a folder remote,
    cloned; the remote's copies of one file of each edited."""
    from dvc.repo import Repo

    from pit.commands import main

    # An earlier in-process DVC call in this worker (dvc.logger.setup) set handlers on that test's captured stderr, now
    # closed, on each of DVC's three loggers.
    for name in ("dvc", "dvc_objects", "dvc_data"):
        monkeypatch.setattr(logging.getLogger(name), "handlers", [])
    origin, clone, remote = tmp_path / "origin", tmp_path / "clone", tmp_path / "remote"
    subprocess.run(["git", "init", "-q", str(origin)], check=True)
    write(origin / "results/table.csv", "a,b\n1,2\n")
    write(origin / "results/run/summary.json", {"val_loss": 3.0})
    write(origin / "results/run/metrics.jsonl", '{"step": 1}\n')
    write(origin / "config.yaml", "profile: tiny\n")
    write(origin / "dvc.yaml", "vars:\n  - configfile: config.yaml\nstages:\n  s:\n    cmd: 'true'\n    outs:\n"
                               "      - results/table.csv\n      - results/run\n")  # fmt: skip
    Repo.init(str(origin)).close()
    (origin / ".dvc/config").write_text(f"[core]\n    remote = shared\n['remote \"shared\"']\n    url = {remote}\n")
    with Repo(str(origin)) as repo:
        repo.commit(None, force=True)
        repo.push()
    subprocess.run(["git", "-C", str(origin), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(origin), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "r"],
                   check=True)  # fmt: skip
    subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
    edited_file = "results/table.csv"
    edited = {edited_file: b"a,b\n1,3\n", "results/run/summary.json": b'{"val_loss": 2.0}'}
    for rel, data in edited.items():
        obj = remote / "files/md5" / _md5_of(origin / rel)[:2] / _md5_of(origin / rel)[2:]
        obj.chmod(0o644)
        obj.write_bytes(data)
    monkeypatch.chdir(clone)
    capsys.readouterr()
    assert main(["share", "pull"]) == 1
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 3 and "2 differ from dvc.lock or are missing" in printed[2], printed
    folder, file = sorted(printed[:2])  # a folder output's file DVC wrote; a file output's, which DVC dropped
    assert folder.startswith("results/run/summary.json: md5 ") and "the one dvc.lock records" in folder
    assert file == f"results/table.csv: missing after the pull (dvc.lock records md5 {_md5_of(origin / edited_file)})"
    assert not (clone / ".snakemake").exists()  # nothing marked up to date


def _md5_of(path) -> str:
    import hashlib

    return hashlib.md5(path.read_bytes()).hexdigest()
