"""`pit verify`'s comparison (pit/tracking/verify.py): which files are compared, and each kind of number against
its stated tolerance. The rerun itself, on a pulled clone, is tested in test_share.py."""

from __future__ import annotations

import json
import subprocess
import sys

from pit.tracking.verify import compare_file, compare_trees, compared, tolerance


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
        "in_final_agreement": "score", "raw_angle": "metric", "delta_ti": "metric", "grad_norm": "metric",
        "runtime_s": "machine", "tokens_per_s": "machine", "peak_memory_mb": "machine", "time_s": "machine",
    }  # fmt: skip
    assert {key: tolerance(key).kind for key in kinds} == kinds
    assert tolerance("runtime_s").rel is None and tolerance("val_loss").rel == 1e-3


def test_json_numbers_within_and_out_of_tolerance(tmp_path):
    recorded = {
        "delta_ti": 1.0e-8, "raw": {"principal_angle": 1.0e-15}, "lens": {"ce_bits": [14.0, 13.9]},
        "val_loss": 5.0, "val_ppl": 148.4, "runtime_s": 3.0, "steps": 30, "interface": "pit",
    }  # fmt: skip
    rerun = {
        "delta_ti": 1.5e-8, "raw": {"principal_angle": 3.0e-15}, "lens": {"ce_bits": [14.001, 13.9]},
        "val_loss": 5.01, "val_ppl": 148.4, "runtime_s": 9.0, "steps": 31, "interface": "tt",
    }  # fmt: skip
    rel = "results/diagnostics/scratch/303m/pit/diagnostics.json"
    diffs = compare_file(rel, write(tmp_path / "a" / rel, recorded), write(tmp_path / "b" / rel, rerun))
    assert lines(diffs) == [
        ("delta_ti", "metric", True),  # structural zero: float noise under the absolute floor 1e-6
        ("raw.principal_angle", "metric", True),
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
        ("row 1 (teacher 256m PIT) delta_ti", "metric", False),
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
