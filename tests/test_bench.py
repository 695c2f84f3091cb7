"""`pit bench`: the shape of its JSON (a tiny run; no speed is asserted) and named errors for bad input."""

import json
import subprocess
import sys

import pytest
from tolerances import loss_bound, within

from pit.commands import main
from pit.core.interfaces import InterfaceConfig
from pit.core.loss import CHUNK_SIZE
from pit.errors import PitError
from pit.models import build_model
from pit.training.bench import (
    CPU_FP32,
    SECTIONS,
    SIZES,
    Size,
    acceptance,
    flops_per_token,
    head_loss_probe,
    train_section,
)

STEP_KEYS = {
    "model",
    "layers",
    "d_model",
    "batch",
    "vocab",
    "arm",
    "tokens_per_step",
    "loss_chunk_rows",
    "step_s",
    "tokens_per_s",
    "flop_per_token",
    "flop_per_s",
    "gemm_flop_per_s",
    "mfu",
    "mfu_vs_peak",
}


def pit_bench(*args):
    # the timeout only stops a hang: a compiling bench took > 300 s on 2 cores shared with 12 other processes
    return subprocess.run([sys.executable, "-m", "pit", "bench", *args], capture_output=True, text=True, timeout=1800)


@pytest.mark.slow
def test_json_schema_is_stable():
    """Every key of `pit bench --json`. The run takes `--loss-chunk-rows 7` (37 chunks of the tiny size's 256 tokens,
    the last one short): the setting is recorded, and the head + loss probe at that chunk still equals the naive head
    in value and gradient (the default chunk is checked in the bf16 run below)."""
    run = pit_bench("--json", "--size", "tiny", "--rounds", "1", "--loss-chunk-rows", "7")
    assert run.returncode == 0, run.stderr[-2000:]
    r = json.loads(run.stdout)
    assert set(r) == {
        "schema",
        "machine",
        "settings",
        "gemm_peak",
        "train",
        "reference",
        "head_memory",
        "generate",
        "section_s",
        "acceptance",
    }
    assert r["schema"] == "pit-bench/9"
    assert set(r["section_s"]) == set(SECTIONS)  # each section's wall time: models built, warm-ups, timed rounds
    assert r["section_s"]["train"] > sum(row["step_s"] for row in r["train"])
    assert r["section_s"]["reference"] > sum(row["step_s"] for row in r["reference"])
    assert r["section_s"]["head_memory"] > 0 and r["section_s"]["generate"] > 0
    assert set(r["machine"]) == {
        "torch",
        "threads",
        "cpu",
        "python",
        "malloc",
        "device",
        "precision",
        "bf16_peak_flop_per_s",
    }
    assert r["machine"]["malloc"] == "retain"  # `pit` keeps freed memory (pit/training/allocator.py)
    assert r["machine"]["precision"] == "fp32" and r["machine"]["bf16_peak_flop_per_s"] is None  # CPU default
    assert r["gemm_peak"]["dtype"] == "float32" and r["gemm_peak"]["flop_per_s"] > 0
    assert [row["arm"] for row in r["train"]] == ["pit", "pit_trainable_z", "tt", "untied"]
    assert all(set(row) == STEP_KEYS | {"time_ratio_to_tt"} for row in r["train"])
    assert all(row["mfu_vs_peak"] is None for row in r["train"] + r["reference"])  # no peak known for a CPU
    assert [row["arm"] for row in r["reference"]] == ["hf_gpt2", "ours_tt", "ours_pit"]
    assert [row["model"] for row in r["reference"]] == ["GPT2LMHeadModel", "PitGPT2LMHeadModel", "PitGPT2LMHeadModel"]
    assert all(set(row) == STEP_KEYS | {"time_ratio_to_tt"} for row in r["reference"])
    assert [(row["interface"], row["loss"]) for row in r["head_memory"]] == [
        ("pit", "naive"),
        ("pit", "chunked"),
        ("tt", "naive"),
        ("tt", "chunked"),
    ]
    assert all(
        set(row)
        == {"interface", "loss", "tokens", "vocab", "dim", "loss_chunk_rows", "peak_mb", "ratio_to_naive", "loss_s"}
        | {"time_ratio_to_naive"}
        | {"loss_abs_diff_to_naive", "grad_rel_diff_to_naive", "table_grad_rel_diff_to_naive"}
        for row in r["head_memory"]
    )
    # ours equals naive in FP32 (value and the gradients of the hidden states and of TT's table), with ignored rows
    # within the float32 bound of a cross-entropy at the row's d and vocabulary (tests/tolerances.py)
    rows = r["head_memory"]
    assert all(within(row["loss_abs_diff_to_naive"], loss_bound(row["dim"], row["vocab"], 10.0)) for row in rows)
    assert all(within(row["grad_rel_diff_to_naive"], loss_bound(row["dim"], row["vocab"])) for row in rows)
    assert [row["table_grad_rel_diff_to_naive"] is None for row in rows] == [True, True, False, False]
    assert all(within(row["table_grad_rel_diff_to_naive"], loss_bound(row["dim"], row["vocab"])) for row in rows[2:])
    assert [row["arm"] for row in r["generate"]] == ["pit", "tt", "untied"]
    assert all(
        set(row) == {"arm", "model", "layers", "vocab", "batch", "prompt", "new_tokens", "tokens_per_s"}
        for row in r["generate"]
    )
    assert set(r["acceptance"]) == {
        "pit_over_tt_time_v50257",
        "pit_over_tt_time_v32000",
        "pit_trainable_z_over_tt_time_v50257",
        "ours_tt_over_hf_gpt2_tokens_per_s",
        "ours_pit_over_ours_tt_time_reference",
        "mfu_133m_v50257",
        "mfu_vs_peak_133m_v50257",
        "mfu_vs_peak_reference",
        "chunked_over_naive_head_memory",
        "chunked_over_naive_head_time",
        "best_batch_133m_v50257",
        "mfu_best_batch_133m_v50257",
        "mfu_vs_peak_best_batch_133m_v50257",
        "pit_over_tt_time_best_batch_v50257",
    }
    assert r["settings"]["compile"] is r["settings"]["compile_mode"] is None
    assert r["settings"]["loss_chunk_rows"] == 7
    assert [row["loss_chunk_rows"] for row in r["train"] + r["reference"]] == [7] * 4 + [None, 7, 7]  # hf's own loss
    assert [row["loss_chunk_rows"] for row in r["head_memory"]] == [None, 7, None, 7]
    assert r["settings"]["sections"] == list(SECTIONS)
    assert r["settings"]["arms"] == ["pit", "pit_trainable_z", "tt", "untied"] and r["settings"]["vocabs"] == []
    # progress on stderr as each timed group and section ends, so a run cut off by a time limit still says something
    lines = [line for line in run.stderr.splitlines() if line.startswith("pit.bench: ")]
    rates = ", ".join(f"{row['arm']} {row['tokens_per_s']:.0f} tokens/s" for row in r["train"])
    assert lines[0] == f"pit.bench: train scratch-tiny, V = 1000, batch 2 x 32: {rates}", lines
    assert [line.split()[2].rstrip(":") for line in lines[1:] if "bench: section " in line] == list(SECTIONS), lines


@pytest.mark.slow
def test_bf16_run_reads_mfu_against_a_given_peak():
    """The GPU code path on CPU: bf16 autocast steps, a bf16 GEMM, MFU also against --peak-tflops."""
    bf16 = (
        "--precision",
        "bf16",
        "--peak-tflops",
        "0.5",
        "--arms",
        "pit,tt",
        "--sections",
        "train,reference,head_memory",
    )
    run = pit_bench("--json", "--size", "tiny", "--rounds", "1", *bf16)
    assert run.returncode == 0, run.stderr[-2000:]
    r = json.loads(run.stdout)
    assert (r["machine"]["precision"], r["machine"]["bf16_peak_flop_per_s"]) == ("bf16", 0.5e12)
    assert r["settings"]["loss_chunk_rows"] is None  # none given: the library's choice for each call's rows
    # the rows of each loss's largest chunk: up to 16384 rows, chunks of CHUNK_SIZE (1024), so one chunk here
    assert all(row["loss_chunk_rows"] == min(CHUNK_SIZE, row["tokens_per_step"]) for row in r["train"])
    assert [row["loss_chunk_rows"] for row in r["reference"]] == [None, 64, 64]  # hf_gpt2: transformers' own loss
    assert [row["loss_chunk_rows"] for row in r["head_memory"]] == [None, 256, None, 256]
    assert r["gemm_peak"]["dtype"] == "bfloat16"
    for row in r["train"] + r["reference"]:
        assert row["mfu_vs_peak"] == pytest.approx(row["flop_per_s"] / 0.5e12)
    assert set(r["acceptance"]["mfu_vs_peak_reference"]) == {"hf_gpt2", "ours_tt", "ours_pit"}
    assert all(row["loss_s"] > 0 and row["peak_mb"] > 0 for row in r["head_memory"])


@pytest.mark.parametrize(
    "args,message",
    [
        (["--size", "huge"], "bench size 'huge' is unknown; expected one of ['default', 'gpu', 'tiny']"),
        (["--rounds", "0"], "bench rounds 0; expected an integer >= 1"),
        (["--layers", "-1"], "bench layers -1; expected an integer >= 1"),
        (["--threads", "0"], "--threads 0; expected an integer >= 1"),
        (["--peak-tflops", "0"], "bench peak_tflops 0.0; expected a number > 0 (TFLOP/s)"),
        (["--device", "cuda:99"], "device 'cuda:99': "),  # no CUDA here, or fewer than 100 GPUs
        (["--batches", "8,x"], "--batches '8,x'; expected integers separated by commas, e.g. 8,16,32"),
        (["--batches", "0"], "bench batches [0]; expected integers >= 1"),
        (["--sections", "train,speed"], "bench sections ['train', 'speed']; expected some of ['train', "),
        (["--arms", "pit,tied"], "bench arms ['pit', 'tied']; expected some of ['pit', 'pit_trainable_z', "),
        (["--size", "tiny", "--vocabs", "50257"], "bench vocabs [50257]; expected some of [1000] (the vocabularies of"),
        (["--vocabs", "big"], "--vocabs 'big'; expected integers separated by commas"),
        (["--compile-mode", "max-autotune"], "bench compile mode 'max-autotune' without compile; expected a backend"),
        (["--compile", "--compile-mode", "fast"], "compile mode 'fast'; expected one of ['default', 'max-autotune-no"),
        (["--compile", "aot_eager", "--compile-mode", "reduce-overhead"], "modes other than 'default' need 'inductor'"),
        (["--loss-chunk-rows", "0"], "bench loss_chunk_rows 0; expected an integer >= 1 (rows of logits per chunk)"),
    ],
)
def test_bad_input_is_named(args, message, capsys):
    assert main(["bench", *args]) == 2
    assert message in capsys.readouterr().err


def test_a_chunk_of_zero_rows_is_refused_by_the_loss():
    with pytest.raises(PitError, match="chunk_size 0; expected an integer >= 1"):
        head_loss_probe("pit", "chunked", 64, 100, 16, chunk_rows=0)


def test_model_flops_follow_the_palm_count():
    """6 N + 6 V d + 12 L d T for TT; the frozen Z of PIT drops the weight-gradient GEMM (4 V d) and adds 12 d^2."""
    tt = build_model("scratch-tiny", InterfaceConfig(kind="tt"), vocab_size=1000)
    pit = build_model("scratch-tiny", InterfaceConfig(kind="pit"), vocab_size=1000)
    body = sum(p.numel() for n, p in tt.named_parameters() if not n.startswith("interface."))
    assert flops_per_token(tt, 128) == 6 * body + 6 * 1000 * 64 + 12 * 2 * 64 * 128
    assert flops_per_token(pit, 128) == 6 * body + 4 * 1000 * 64 + 12 * 2 * 64 * 128 + 12 * 64 * 64


@pytest.mark.slow
def test_compiled_tiny_bench_runs():
    """`pit bench --compile` (inductor) on CPU: the step's loss module compiled (one arm: about 30 s of compiling
    with a cold cache on 2 cores), the rows as in eager. In mode reduce-overhead: on CPU Inductor compiles it as the
    default mode (CUDA graphs are for CUDA tensors), and each step first marks a new step for CUDA graphs."""
    args = ("--json", "--size", "tiny", "--rounds", "1", "--compile", "--compile-mode", "reduce-overhead")
    run = pit_bench(*args, "--sections", "train", "--arms", "pit")
    assert run.returncode == 0, run.stderr[-2000:]
    r = json.loads(run.stdout)
    assert (r["settings"]["compile"], r["settings"]["compile_mode"]) == ("inductor", "reduce-overhead")
    assert r["settings"]["sections"] == ["train"]
    assert r["settings"]["arms"] == [row["arm"] for row in r["train"]] == ["pit"]
    assert all(row["step_s"] > 0 for row in r["train"])
    assert r["reference"] == r["head_memory"] == r["generate"] == []
    seconds = r["section_s"]  # the train section's time holds the compiling: more than its timed steps
    assert seconds["reference"] is seconds["head_memory"] is seconds["generate"] is None
    assert seconds["train"] > 3 * sum(row["step_s"] for row in r["train"])


def test_batch_sweep_reports_the_best_batch_and_pit_over_tt_there():
    """The 133M group at every batch of the sweep (here 1 layer, 2 x 16 and 3 x 16 tokens); acceptance picks the
    batch of PIT's best MFU and reads every arm's MFU and PIT/TT there."""
    assert SIZES["gpu"].sweep() == (8, 16, 32) and SIZES["tiny"].sweep() == (SIZES["tiny"].batch,)
    groups = (("scratch-133m", 0, 50257, ("pit", "tt")), ("scratch-133m", 0, 32000, ("pit", "tt")))
    size = Size(256, groups, 2, 16, 2, 16, (1, 64, 4, 1000), (8, 50, 8), (1, 2, 2))
    rows = train_section(size, 1, 1, 1, CPU_FP32, batches=(2, 3), vocabs=(50257,))  # the V = 32000 group left out
    assert [(row["arm"], row["batch"], row["tokens_per_step"]) for row in rows] == [
        ("pit", 2, 32),
        ("tt", 2, 32),
        ("pit", 3, 48),
        ("tt", 3, 48),
    ]
    acc = acceptance({"train": rows, "reference": [], "head_memory": []})
    best = max((row for row in rows if row["arm"] == "pit"), key=lambda row: row["mfu"])
    at_best = {row["arm"]: row for row in rows if row["batch"] == best["batch"]}
    assert acc["best_batch_133m_v50257"] == best["batch"]
    assert acc["mfu_best_batch_133m_v50257"] == {arm: row["mfu"] for arm, row in at_best.items()}
    assert acc["pit_over_tt_time_best_batch_v50257"] == best["time_ratio_to_tt"]
    assert acc["mfu_133m_v50257"] == {row["arm"]: row["mfu"] for row in rows[:2]}  # the first batch of the sweep
    assert acc["mfu_vs_peak_best_batch_133m_v50257"] is None  # no BF16 peak on CPU
