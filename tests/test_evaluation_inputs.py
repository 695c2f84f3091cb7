"""`pit evaluate` on partial and damaged inputs: a samples file that covers part of the benchmark is scored over the
whole benchmark (missing tasks fail) and says its coverage; one sample that is not valid Unicode fails alone; bad
sandbox limits (a negative --memory-mb that used to switch the limit off, a zero, negative or NaN --timeout) are
one-line errors, as flags and in --spec."""

import json

import pytest

from pit.commands import main
from pit.errors import PitError
from pit.evaluation.sandbox import Limits
from pit.evaluation.tasks import load_task


@pytest.fixture(scope="module")
def humaneval():
    return load_task("humaneval")


def evaluate(capsys, *args):
    code = main(["evaluate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_partial_samples_file_is_scored_over_the_benchmark(tmp_path, humaneval, capsys):
    first = next(iter(humaneval.records))
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"task_id": first, "completion": humaneval.records[first]["canonical_solution"]}))
    code, out, _ = evaluate(capsys, "humaneval", "--samples", str(path))
    assert code == 0 and out.strip().startswith("humaneval: pass@1 = 0.0061 (1/164), covered 1/164, sandbox: ")
    code, out, _ = evaluate(capsys, "humaneval", "--samples", str(path), "--json")
    result = json.loads(out)
    assert (result["pass@1"], result["n"], result["passed"], result["covered"]) == (1 / 164, 164, 1, 1)
    assert len(result["results"]) == 164 and result["results"][first]["status"] == "passed"
    assert sum(r["status"] == "missing" for r in result["results"].values()) == 163


@pytest.mark.parametrize("bad", ["a lone surrogate escape", "bytes that are not UTF-8"])
def test_a_sample_that_is_not_unicode_fails_alone(tmp_path, humaneval, capsys, bad):
    ids = list(humaneval.records)[:2]
    if bad == "a lone surrogate escape":
        line = f'{{"task_id": "{ids[0]}", "completion": "    return \\"\\ud800\\"\\n"}}'.encode()
    else:
        line = f'{{"task_id": "{ids[0]}", "completion": "    return 1 # '.encode() + b'\xff\xfe"}'
    right = json.dumps({"task_id": ids[1], "completion": humaneval.records[ids[1]]["canonical_solution"]})
    path = tmp_path / "bad.jsonl"
    path.write_bytes(line + b"\n" + right.encode() + b"\n")
    code, out, err = evaluate(capsys, "humaneval", "--samples", str(path), "--json", "--limit", "2")
    assert code == 0, err
    results = json.loads(out)["results"]
    assert results[ids[1]]["passed"]
    assert results[ids[0]]["status"] == "failed" and "surrogates not allowed" in results[ids[0]]["detail"], results


@pytest.mark.parametrize(
    "args, named",
    [
        (["--memory-mb", "-5"], "--memory-mb -5"),
        (["--memory-mb", "0"], "--memory-mb 0"),
        (["--timeout", "0"], "--timeout 0"),
        (["--timeout", "-1"], "--timeout -1"),
        (["--timeout", "nan"], "--timeout nan"),
        (["--timeout", "inf"], "--timeout inf"),
        (["--spec", '{"memory_mb": -5}'], "--memory-mb -5"),
        (["--spec", '{"timeout": 0}'], "--timeout 0"),
        (["--spec", '{"timeout": NaN}'], "--timeout nan"),
    ],
)
def test_bad_sandbox_limits_are_one_line_errors(tmp_path, humaneval, capsys, args, named):
    path = tmp_path / "s.jsonl"
    first = next(iter(humaneval.records))
    path.write_text(json.dumps({"task_id": first, "completion": "    return None\n"}))
    code, out, err = evaluate(capsys, "humaneval", "--samples", str(path), *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and named in err, (code, out, err)


def test_bad_limits_are_refused_by_the_sandbox_too():
    for bad in ({"memory_mb": -5}, {"timeout": 0.0}, {"timeout": float("nan")}, {"timeout": -1}, {"nproc": 0}):
        with pytest.raises(PitError, match=next(iter(bad))):
            Limits(**bad)
