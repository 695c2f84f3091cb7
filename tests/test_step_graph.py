"""The loss step has no host sync and no graph break: torch.compile sees NextTokenLoss + backward as one graph.

On CPU, Dynamo is the witness: a host sync such as `int(valid.sum())` or `bool(grad_loss != 1)` in the loss (forward
or the autograd.Function's backward, which Dynamo traces too) is a graph break, so `torch._dynamo.explain` must
count none, and a `fullgraph=True` compile must run forward and backward and give eager's values. On CUDA
(marker `cuda`), `torch.cuda.set_sync_debug_mode("error")` around a training step must raise nothing.
"""

import math
import re

import pytest
import torch
from tolerances import loss_bound, within

from pit.core.interfaces import InterfaceConfig
from pit.models import build_model
from pit.models.access import interface_of
from pit.training.objective import NextTokenLoss
from pit.training.optim import optimizer_update, param_groups

KINDS = {"pit": InterfaceConfig(kind="pit"), "tt": InterfaceConfig(kind="tt"), "untied": InterfaceConfig(kind="untied")}
V = 300


def loss_and_batch(kind, device="cpu", ignore_all=False):
    model = build_model("scratch-tiny", KINDS[kind], vocab_size=V, seed=0).to(device).train()
    batch = torch.randint(0, V, (2, 17), generator=torch.Generator().manual_seed(0)).to(device)
    targets = batch[:, 1:].clone()
    targets[:, :: 1 if ignore_all else 5] = -100  # ignored rows (LoRA's prompt and padding positions)
    return NextTokenLoss(model), batch[:, :-1], targets


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("kind", list(KINDS))
def test_next_token_loss_traces_as_one_graph(kind):
    loss_fn, inputs, targets = loss_and_batch(kind)
    explanation = torch._dynamo.explain(loss_fn)(inputs, targets)
    assert explanation.graph_break_count == 0, [str(b.reason) for b in explanation.break_reasons]
    assert explanation.graph_count == 1
    # RoPE's cos and sin are read from the model's table, not computed in the step: Inductor would fuse the
    # computation into every kernel that reads q or k and redo it per element (6.6 ms per step on an H100)
    calls = {getattr(n.target, "__name__", str(n.target)) for n in explanation.graphs[0].graph.nodes}
    assert not calls & {"cos", "sin", "pow"}, calls & {"cos", "sin", "pow"}


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16_autocast"])
def test_trace_needs_no_autocast_availability_query(autocast, monkeypatch):
    """Dynamo of torch 2.11 (the GPU machines' version) cannot trace `torch.amp.is_autocast_available`: asking it in
    `compute_dtype` broke the graph in every block and in the loss, and the resumed frames recompiled until Dynamo's
    limit (a compiled step at half its speed, seen on an H200). torch 2.13 traces it, so the query is made a graph
    break here, as there: the compiled step must never ask it."""
    available = torch.amp.is_autocast_available

    def untraceable(device_type):
        torch._dynamo.graph_break()
        return available(device_type)

    monkeypatch.setattr(torch.amp, "is_autocast_available", untraceable)
    loss_fn, inputs, targets = loss_and_batch("pit")
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        explanation = torch._dynamo.explain(loss_fn)(inputs, targets)
    assert explanation.graph_break_count == 0, [str(b.reason) for b in explanation.break_reasons]


@pytest.mark.parametrize("ignore_all", [False, True], ids=["some_ignored", "all_ignored"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_fullgraph_compiled_loss_and_backward_equal_eager(kind, ignore_all):
    """fullgraph=True raises at any graph break, forward or backward; aot_eager runs the traced graphs with eager
    kernels, so values agree to FP32 round-off (tests/tolerances.py, loss_bound); all rows ignored: nan loss,
    zero gradients."""
    loss_fn, inputs, targets = loss_and_batch(kind, ignore_all=ignore_all)
    params = [p for p in loss_fn.parameters() if p.requires_grad]
    compiled = torch.compile(loss_fn, backend="aot_eager", fullgraph=True)
    out = []
    for fn in (loss_fn, compiled):
        loss = fn(inputs, targets)
        out.append((loss.detach(), torch.autograd.grad(3 * loss, params)))
    (ref, ref_grads), (loss, grads) = out
    if ignore_all:
        assert torch.isnan(ref) and torch.isnan(loss)
        assert all(torch.count_nonzero(g) == 0 for g in grads)
        return
    bound = loss_bound(64, V)  # scratch-tiny: d = 64 (tests/tolerances.py)
    assert within(abs(loss - ref).item(), bound * ref.abs().item(), f"{kind} compiled loss")
    for a, b in zip(grads, ref_grads):
        assert within(((a - b).norm() / b.norm()).item(), bound, f"{kind} compiled grad")


def test_compiled_bf16_loss_keeps_no_fp32_copy_of_a_chunk():
    """Inductor's code for the chunked loss in bf16 (forward and backward) allocates no FP32 buffer of a chunk's
    logits size: each chunk's softmax, loss and dz are read from the bf16 logits and written back as bf16 dz in one
    pass (`pit.core.loss._compiled_chunk`). The eager form's in-place softmax and `scatter_add_` made Inductor store
    an FP32 copy of every chunk and read it back: 8 bytes of traffic per logit more, a few ms per step on a GPU."""
    from torch._inductor.utils import run_and_get_code

    from pit.core.loss import linear_cross_entropy

    rows, V = 32, 1000  # the padded table: 1024 columns
    g = torch.randn(96, 16, dtype=torch.bfloat16, requires_grad=True)
    M = torch.randn(V, 16, requires_grad=True)
    targets = torch.randint(0, V, (96,))
    fn = torch.compile(lambda *a: linear_cross_entropy(*a, chunk_size=rows), dynamic=False)
    _, code = run_and_get_code(lambda: fn(g, M, targets).backward())
    allocations = re.findall(r"empty_strided_cpu\(\(([\d, ]+)\),[^)]*\), torch\.(\w+)\)", "\n".join(code))
    sizes = {(math.prod(int(n) for n in shape.replace(",", " ").split()), dtype) for shape, dtype in allocations}
    assert (rows * 1024, "bfloat16") in sizes, sizes  # the logits buffer: the parse sees the allocations
    assert not [size for size, dtype in sizes if dtype == "float32" and size >= rows * 1024], sizes
    assert g.grad is not None and M.grad is not None and torch.isfinite(M.grad).all()


def compiled_loss_ops(device, chunks=4, rows=64, dtype=torch.bfloat16):
    """ATen ops and, on CUDA, device activities (name -> calls) of one compiled forward and backward of a TT-like loss
    (M trained, hidden states in `dtype`) in `chunks` chunks, after a warm-up call that compiles it."""
    from torch.profiler import ProfilerActivity, profile

    from pit.core.loss import linear_cross_entropy

    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(0)
    g = torch.randn(chunks * rows, 32, generator=gen).to(device, dtype).requires_grad_()
    M = torch.randn(1000, 32, generator=gen).to(device).requires_grad_()
    targets = torch.randint(0, 1000, (chunks * rows,), generator=gen).to(device)
    fn = torch.compile(lambda *a: linear_cross_entropy(*a, chunk_size=rows), dynamic=False)
    fn(g, M, targets).backward()
    with profile(activities=[ProfilerActivity.CPU, *[ProfilerActivity.CUDA] * (device == "cuda")]) as prof:
        fn(g, M, targets).backward()
        if device == "cuda":
            torch.cuda.synchronize()
    return {e.key: e.count for e in prof.key_averages()}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_compiled_loss_accumulates_the_table_gradient_without_copies(device, monkeypatch):
    """Every chunk adds its dz^T g to dM in place (`pit.core.loss.accumulate_mm`, which Inductor keeps in place).
    Written as `dM.addmm_(...)` (patched back in below), the compiled code runs an out-of-place addmm per chunk,
    and ATen's addmm first copies dM into its output: one copy per chunk after the first (counted on CPU as
    `aten::copy_`, on a GPU as the device's `Memcpy DtoD` of the whole V x d gradient: 31 per step of the 133M model
    at batch 32 on one H200, 1.1 ms, benchmarks/RESULTS.md section 28). In FP32 on CPU, where the op is `addmm_`
    (CPU has no bf16 GEMM with an FP32 output, so there the op's casts would be counted as copies too); in bf16 on a
    GPU, where it is one addmm with an FP32 output into dM."""
    import pit.core.loss as loss_module

    chunks, dtype = 4, torch.bfloat16 if device == "cuda" else torch.float32
    copy = "Memcpy DtoD (Device -> Device)" if device == "cuda" else "aten::copy_"
    in_place = compiled_loss_ops(device, chunks, dtype=dtype)
    monkeypatch.setattr(
        loss_module, "accumulate_mm", lambda out, a, b, beta: out.addmm_(a.to(out.dtype), b.to(out.dtype), beta=beta)
    )
    copied = compiled_loss_ops(device, chunks, dtype=dtype)
    assert copied.get("aten::addmm", 0) == chunks, copied
    assert copied.get(copy, 0) - in_place.get(copy, 0) == chunks - 1, (copied, in_place)
    in_place_op = "aten::addmm" if device == "cuda" else "aten::addmm_"  # CUDA: addmm(..., out_dtype, out=dM)
    assert in_place.get(in_place_op, 0) == chunks, in_place


@pytest.mark.cuda
@pytest.mark.parametrize("kind", list(KINDS))
def test_cuda_training_step_does_not_sync_with_the_host(kind):
    """bf16 autocast forward, chunked loss, backward, clipping and fused AdamW, as `pit train`'s step. PIT with a
    trainable Z is not here: its retraction (pit/core/linalg.py) decides its method on the host once per step."""
    loss_fn, inputs, targets = loss_and_batch(kind, "cuda")
    model = loss_fn.model
    optimizer = torch.optim.AdamW(param_groups(model, 0.1, 1e-4), lr=1e-4, fused=True)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer_update(optimizer, interface_of(model))
        return loss.detach()

    step()  # warm-up: lazy initialisation (cuBLAS handles, optimizer state) may sync once
    torch.cuda.synchronize()
    before = [p.detach().clone() for p in model.parameters() if p.requires_grad]
    torch.cuda.set_sync_debug_mode("error")  # any host sync in the two steps below raises RuntimeError
    try:
        losses = [step(), step()]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert all(torch.isfinite(loss).item() for loss in losses)
    after = [p.detach() for p in model.parameters() if p.requires_grad]
    assert any(not torch.equal(a, b) for a, b in zip(after, before)), "the steps must update the weights"


def test_autocast_block_reads_bf16_and_fp32_is_untouched():
    """Under bf16 autocast every projection of a scratch block reads a bf16 input (the normed input is cast once per
    block, q and k stay bf16 through RoPE) and SDPA gets bf16 q, k, v; without autocast nothing changes (FP32)."""
    model = build_model("scratch-tiny", KINDS["pit"], vocab_size=V, seed=0)
    seen = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda m, args, out, name=name: seen.append((name, args[0].dtype)))
    ids = torch.randint(0, V, (2, 9), generator=torch.Generator().manual_seed(0))
    sdpa_dtypes, sdpa = [], torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        sdpa_dtypes.append((q.dtype, k.dtype, v.dtype))
        return sdpa(q, k, v, **kw)

    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
        model(ids, use_cache=False)
    assert seen and {dtype for _, dtype in seen} == {torch.bfloat16}, seen
    assert sdpa_dtypes and set(sdpa_dtypes) == {(torch.bfloat16,) * 3}
    seen.clear()
    h32 = model.hidden_states(ids)[0]
    assert {dtype for _, dtype in seen} == {torch.float32} and h32.dtype == torch.float32
