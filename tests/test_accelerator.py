"""bf16 autocast training, on CPU here and on CUDA where a GPU is present (marker `cuda`).

Each test runs once per device: `cpu` always, `cuda` only where torch sees a CUDA device (conftest.py deselects
the `cuda` cases elsewhere and says so in the header; `pytest -m cuda` on a GPU machine runs just those). What
they check is what the paper's GPU runs rely on: under bf16 autocast PIT's T/L work stays FP32 (the stored L and Z
are float32), W_out E = I holds to 1e-4 over 50 optimizer steps, and a run killed mid-way and resumed writes the
same losses and weights as an uninterrupted one (bit for bit on CPU; on CUDA, whose attention backward is not
deterministic, to 1e-3 in the loss: a tolerance not yet measured on a GPU).
"""

import json
import math

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from test_train import kill_at_step_8_then_resume, rows, spec
from tolerances import run_bound, within

from pit.training.args import PretrainArgs
from pit.training.objective import NextTokenLoss
from pit.training.pretrain import (
    REQUIRED_OUTPUTS,
    STALE_OUTPUTS,
    forward_backward,
    loss_module,
    setup,
    start_processes,
    train,
    train_step,
)
from pit.training.run_folder import claim
from pit.training.runtime import read_scalars

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def bf16_spec(data, device, **kw):
    return spec(data, device=device, precision="bf16", **kw)


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_training_keeps_pit_in_fp32_and_consistent_for_50_steps(device, tiny_data, tmp_path):
    s = bf16_spec(tiny_data, device, max_steps=50, warmup_steps=5, eval_every=25)
    summary = train(PretrainArgs.from_dict(s), tmp_path)
    params = json.loads((tmp_path / "run.json").read_text())["params"]
    assert params["bf16"] is True and params["device"] == device
    metrics = rows(tmp_path)
    assert [r["step"] for r in metrics] == list(range(1, 51))
    # ||W_out E - I||_F: the interface stays float32 under bf16 autocast: the float32 bound (tests/tolerances.py)
    assert within(max(r["delta_ti"] for r in metrics), run_bound(tmp_path), "bf16 run delta_ti")
    assert metrics[-1]["loss"] < metrics[0]["loss"] and summary["val_loss"] < metrics[0]["loss"]
    with safe_open(tmp_path / "final" / "model.safetensors", framework="pt") as f:
        dtypes = {k: f.get_slice(k).get_dtype() for k in f.keys() if k.startswith("interface.")}  # noqa: SIM118
    assert dtypes and set(dtypes.values()) == {"F32"}, dtypes  # Z, L's off-diagonal and log-diagonal


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_run_killed_and_resumed_matches_the_uninterrupted_run(device, tiny_data, tmp_path):
    s = bf16_spec(tiny_data, device, max_steps=12, checkpoint_every=4, eval_every=6)
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "killed"
    train(PretrainArgs.from_dict(s), ref_dir)

    kill_at_step_8_then_resume(s, run_dir)
    ref, resumed = rows(ref_dir), rows(run_dir)
    assert [r["step"] for r in resumed] == [r["step"] for r in ref] == list(range(1, 13))
    w_ref, w_run = (load_file(d / "final" / "model.safetensors") for d in (ref_dir, run_dir))
    assert w_ref.keys() == w_run.keys()
    if device == "cpu":  # CPU kernels are deterministic: bit for bit
        assert [(r["loss"], r.get("val_loss")) for r in resumed] == [(r["loss"], r.get("val_loss")) for r in ref]
        assert all(torch.equal(w_ref[k], w_run[k]) for k in w_ref)
    else:  # CUDA's attention backward adds in no fixed order: two uninterrupted runs differ at round-off too
        assert all(abs(a["loss"] - b["loss"]) <= 1e-3 for a, b in zip(ref, resumed)), (ref, resumed)
        assert all(torch.allclose(w_ref[k], w_run[k], rtol=1e-3, atol=1e-4) for k in w_ref)


@pytest.mark.cuda
def test_cuda_graph_step_trains_as_the_default_compile(tiny_data, tmp_path):
    """compile_mode reduce-overhead replays the compiled loss (forward and backward) as CUDA graphs: every graph is
    captured (Inductor skips none, e.g. for an input the graph mutates), and the run's losses and PIT's consistency
    are those of compile's default mode, whose kernels it replays (to 1e-3: attention's backward is not
    deterministic on CUDA)."""
    s = bf16_spec(tiny_data, "cuda", max_steps=12, eval_every=6, compile=True, global_batch_tokens=256)
    s["micro_batch_size"] = 8  # 8 x 32 tokens: one micro-batch per step, as CUDA graphs need
    skips = torch._dynamo.utils.counters["inductor"]
    runs = {}
    for mode in ("default", "reduce-overhead"):
        torch._dynamo.reset()
        skips["cudagraph_skips"] = 0
        train(PretrainArgs.from_dict({**s, "compile_mode": mode}), tmp_path / mode)
        runs[mode] = rows(tmp_path / mode)
    assert skips["cudagraph_skips"] == 0
    default, graphs = runs["default"], runs["reduce-overhead"]
    assert [r["step"] for r in graphs] == list(range(1, 13))
    assert all(abs(a["loss"] - b["loss"]) <= 1e-3 for a, b in zip(default, graphs)), (default, graphs)
    assert within(max(r["delta_ti"] for r in graphs), run_bound(tmp_path / "reduce-overhead"), "graphs delta_ti")


@pytest.mark.parametrize("device", DEVICES)
def test_pit_train_step_accumulates_on_the_device_and_syncs_once(device, tiny_data, tmp_path):
    """`pit train`'s step over 4 micro-batches: the batches' copies, forward, backward and the loss sum, then
    clipping, are queued with no host sync (on CUDA, `set_sync_debug_mode("error")` raises at any); the step's one
    sync is `read_scalars` of the loss and the gradient norm. The loss it reads is the mean over the micro-batches of
    the model's loss on the step's windows, summed in float64 on the device."""
    args = PretrainArgs.from_dict(bf16_spec(tiny_data, device, global_batch_tokens=512))  # 4 x (4 x 32 tokens)
    dev, d = start_processes(args)
    with claim(tmp_path, args.fingerprint(), STALE_OUTPUTS, REQUIRED_OUTPUTS) as folder:
        run = setup(args, folder, dev, d)
        step_loss = loss_module(run)
        assert run.accum == 4
        train_step(run, step_loss, 0)  # warm-up: lazy initialisation (cuBLAS handles, optimizer state) may sync
        sync_mode = torch.cuda.set_sync_debug_mode if dev.type == "cuda" else lambda mode: None
        sync_mode("error")
        try:
            loss = forward_backward(run, step_loss, 1)
            norm = torch.nn.utils.clip_grad_norm_(run.model.parameters(), args.grad_clip)
        finally:
            sync_mode("default")
        assert loss.dtype == torch.float64 and loss.device.type == dev.type
        value, grad_norm = read_scalars(loss, norm)
        run.optimizer.zero_grad(set_to_none=True)
        again = forward_backward(run, step_loss, 1).item()  # the same windows (drawn from [seed, step]), same weights
        per_batch = []
        with torch.no_grad(), run.autocast:
            starts = run.train_data.random_starts(16, args.seq_len, np.random.default_rng([args.seed, 1]))
            for i in range(4):
                batch = run.train_data.windows(starts[4 * i : 4 * i + 4], args.seq_len).to(dev)
                per_batch.append(NextTokenLoss(run.model)(batch[:, :-1], batch[:, 1:]).item())
    assert math.isfinite(grad_norm) and grad_norm > 0
    # CPU: deterministic kernels, exact. CUDA: bf16 kernels may differ between a grad and a no-grad forward (SDPA's
    # backend choice); 1e-2 in a loss of ~7 still tells a mean from a sum (a factor of 4) or a lost micro-batch
    tol = 0 if dev.type == "cpu" else 1e-2
    assert abs(value - again) <= tol
    assert abs(value - sum(per_batch) / 4) <= 1e-6 + tol, (value, per_batch)
