"""Chunked fused linear + cross-entropy: the same loss and gradients as the naive path, no N x V tensor."""

import pytest
import torch

from pit.core.interfaces import InterfaceConfig, make_interface
from pit.core.loss import chunk_rows, linear_cross_entropy, naive_linear_cross_entropy
from pit.errors import PitError
from pit.models import build_model
from pit.training.objective import NextTokenLoss

ARMS = {
    "pit": InterfaceConfig(kind="pit"),
    "pit_trainable_z": InterfaceConfig(kind="pit", trainable_z=True),
    "tt": InterfaceConfig(kind="tt"),
    "untied": InterfaceConfig(kind="untied"),
}
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def interface(arm, V=700, d=24, dtype=torch.float32):
    iface = make_interface(ARMS[arm], V, d)
    iface.reset_parameters(0)
    iface.to(dtype)
    if arm == "pit":  # move T away from I so the PIT path is really exercised
        with torch.no_grad():
            iface.L_offdiag.normal_(std=0.05)
            iface.log_diag.normal_(std=0.1)
    return iface


def loss_and_grads(iface, loss_fn, ids, targets, mix):
    """A loss through both ends of the interface (embedding and head), scaled by 3 so that the backward
    pass sees a non-unit upstream gradient; returns the loss and every gradient."""
    iface.zero_grad(set_to_none=True)
    h = torch.tanh(iface.embed(ids) @ mix)
    loss = loss_fn(*iface.head_input(h), targets)
    (3 * loss).backward()
    return loss.detach(), {n: p.grad.clone() for n, p in iface.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("pad", [False, True], ids=["cpu_path", "padded_table"])  # padded_table: CUDA's path
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("arm", list(ARMS))
def test_loss_and_gradients_equal_naive(arm, dtype, pad):
    iface = interface(arm, dtype=dtype)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 700, (3, 100), generator=g)
    targets = torch.randint(0, 700, (3, 100), generator=g)
    targets[:, ::7] = -100  # ignored rows, in every chunk
    mix = torch.randn(24, 24, generator=g, dtype=dtype) / 24**0.5 * 4
    ref_loss, ref = loss_and_grads(iface, naive_linear_cross_entropy, ids, targets, mix)
    loss, grads = loss_and_grads(
        iface, lambda g_, M, y: linear_cross_entropy(g_, M, y, chunk_size=64, pad_table=pad), ids, targets, mix
    )
    assert loss.dtype == ref_loss.dtype
    assert rel(loss, ref_loss) <= TOL[dtype]
    assert grads.keys() == ref.keys() and ("Z" in grads) == (arm == "pit_trainable_z")
    for name in ref:
        assert rel(grads[name], ref[name]) <= TOL[dtype], name


@pytest.mark.parametrize("pad", [False, True])
def test_all_ignored_gives_nan_loss_and_zero_gradients_like_cross_entropy(pad):
    g = torch.randn(10, 8, requires_grad=True)
    M = torch.randn(50, 8, requires_grad=True)
    targets = torch.full((10,), -100)
    loss = linear_cross_entropy(g, M, targets, chunk_size=4, pad_table=pad)
    loss.backward()
    assert torch.isnan(loss) and torch.isnan(naive_linear_cross_entropy(g, M, targets))
    assert torch.equal(g.grad, torch.zeros_like(g)) and torch.equal(M.grad, torch.zeros_like(M))


def test_no_tokens_by_vocabulary_tensor_is_saved_and_frozen_table_gets_no_gradient():
    N, V, d = 512, 1000, 16
    g = torch.randn(N, d, requires_grad=True)
    M = torch.randn(V, d)  # frozen, as PIT's Z
    targets = torch.randint(0, V, (N,))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        loss = linear_cross_entropy(g, M, targets, chunk_size=128)
    loss.backward()
    assert max(saved) <= N * d < N * V  # only dg is kept: no logits, and no dM for a frozen table
    assert rel(g.grad, torch.autograd.grad(naive_linear_cross_entropy(g, M, targets), g)[0]) <= 1e-5


@pytest.mark.parametrize("pad", [False, True])
def test_autocast_bf16_matches_naive_under_autocast(pad):
    """bf16 GEMMs, FP32 softmax: value and gradients within 1e-2 relative (norm) of the naive head under the same
    autocast (bf16 keeps 8 bits: one rounding of a product is up to 2^-8 = 0.4%); FP32 leaves get FP32 gradients."""
    g = torch.randn(64, 32, requires_grad=True)
    M = torch.randn(300, 32, requires_grad=True)
    targets = torch.randint(0, 300, (64,))
    targets[::5] = -100
    grads = []
    for fn in (lambda *a: linear_cross_entropy(*a, chunk_size=24, pad_table=pad), naive_linear_cross_entropy):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = fn(g, M, targets)
        grads.append((loss.float(), *torch.autograd.grad(3 * loss, (g, M))))
    assert grads[0][0].dtype == torch.float32
    assert grads[0][1].dtype == grads[0][2].dtype == torch.float32
    for a, b in zip(*grads):
        assert rel(a.float(), b.float()) <= 1e-2


@pytest.mark.parametrize(
    ("device", "pad"), [("cpu", False), ("cpu", True), pytest.param("cuda", True, marks=pytest.mark.cuda)]
)
def test_bf16_table_gradient_is_summed_over_chunks_in_fp32(device, pad):
    """Under bf16 autocast each chunk's dz^T g is a bf16 GEMM and dM is their sum over 64 chunks (the 133M model at
    64 windows of 1024 tokens, chunks of 1024 rows). Summed in FP32 (`pit.core.loss.accumulate_mm`), dM is at least
    as close to the FP32 reference as the naive bf16 head's (one GEMM over all rows): here 2.1e-3 against 2.7e-3. A
    sum kept in bf16, rounded to 8 bits after every chunk, was 1.0e-2 away (3.8x the naive head's). On CUDA the sum is
    one GEMM with an FP32 output per chunk (`half_gemm_into_fp32`)."""
    gen = torch.Generator().manual_seed(0)
    N, V, d = 8192, 1000, 32
    g = torch.randn(N, d, generator=gen).to(device)
    M = (0.05 * torch.randn(V, d, generator=gen)).to(device).requires_grad_()
    targets = torch.randint(0, V, (N,), generator=gen).to(device)
    targets[::7] = -100

    def table_grad(fn, bf16):
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            return torch.autograd.grad(fn(g, M, targets), M)[0]

    ref = table_grad(naive_linear_cross_entropy, False)
    naive = rel(table_grad(naive_linear_cross_entropy, True), ref)
    chunked = table_grad(lambda *a: linear_cross_entropy(*a, chunk_size=N // 64, pad_table=pad), True)
    assert chunked.dtype == torch.float32
    assert rel(chunked, ref) <= naive, (rel(chunked, ref), naive)
    if device == "cuda":
        from pit.core.loss import half_gemm_into_fp32

        assert half_gemm_into_fp32("cuda"), "torch has no bf16 GEMM into FP32 here: the loss multiplies FP32 copies"


@pytest.mark.parametrize("trainable_table", [False, True], ids=["frozen_table", "trained_table"])
@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16_autocast"])
def test_compiled_form_equals_naive(autocast, trainable_table):
    """Under torch.compile each chunk's loss and dz are one expression (`_compiled_chunk`), not the eager in-place
    form: traced (aot_eager: the traced graph on eager kernels, fullgraph so a break fails), with ignored rows in
    every chunk, it gives the naive head's loss and gradients to 1e-5 in FP32 and 1e-2 under bf16 autocast (the
    tolerances of the eager tests above)."""
    gen = torch.Generator().manual_seed(2)
    g = torch.randn(64, 32, generator=gen, requires_grad=True)
    M = torch.randn(300, 32, generator=gen, requires_grad=trainable_table)
    targets = torch.randint(0, 300, (64,), generator=gen)
    targets[::5] = -100
    chunked = torch.compile(lambda *a: linear_cross_entropy(*a, chunk_size=24), backend="aot_eager", fullgraph=True)
    leaves = (g, M) if trainable_table else (g,)
    out = []
    for fn in (chunked, naive_linear_cross_entropy):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = fn(g, M, targets)
        out.append((loss.float(), *torch.autograd.grad(3 * loss, leaves)))
    for a, b in zip(*out):
        assert rel(a.float(), b.float()) <= (1e-2 if autocast else 1e-5)


def test_padded_table_path_gives_the_cpu_path_values():
    """The CUDA path (M copied into V rounded up to 64 rows, contiguous GEMMs) and the CPU path (strided logits
    view): the same loss and gradients to FP32 round-off (1e-6 relative), with ignored rows."""
    g = torch.randn(200, 16, dtype=torch.float32, requires_grad=True)
    M = torch.randn(333, 16, requires_grad=True)  # 333 rows: 27 padding rows on the padded path
    targets = torch.randint(0, 333, (200,))
    targets[::3] = -100
    out = []
    for pad in (False, True):
        loss = linear_cross_entropy(g, M, targets, chunk_size=64, pad_table=pad)
        out.append((loss, *torch.autograd.grad(loss, (g, M))))
    assert out[1][2].shape == M.shape
    for a, b in zip(*out):
        assert rel(a, b) <= 1e-6


def test_second_backward_through_the_same_graph_fails_loudly():
    g = torch.randn(8, 4, requires_grad=True)
    loss = linear_cross_entropy(g, torch.randn(20, 4), torch.randint(0, 20, (8,)))
    (2 * loss).backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_large_inputs_take_at_most_sixteen_larger_chunks():
    """With no chunk given, up to 16384 rows go in chunks of 1024; past that in at most 16 chunks, each a multiple of
    1024 rows (65536 rows: 16 of 4096). The loss over 16385 rows then runs 9 chunks of 2048 (9 logits GEMMs, 8 full
    and one of a single row) and equals the naive loss and gradients, with ignored rows; a given chunk is kept."""
    sizes = (1, 1024, 16384, 16385, 32768, 65536, 131072)
    assert [chunk_rows(n) for n in sizes] == [1024, 1024, 1024, 2048, 2048, 4096, 8192]
    assert chunk_rows(65536, 1024) == 1024 and chunk_rows(10, 7) == 7
    gen = torch.Generator().manual_seed(0)
    g = torch.randn(16385, 8, generator=gen, requires_grad=True)
    M = torch.randn(40, 8, generator=gen, requires_grad=True)
    targets = torch.randint(0, 40, (16385,), generator=gen)
    targets[::5] = -100
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        loss = linear_cross_entropy(g, M, targets)
    # the forward GEMMs that write logits: (rows x 8) (8 x 40); the gradient GEMMs multiply by (40 x 8)
    mms = [e.input_shapes for e in prof.events() if e.name == "aten::mm"]
    logits_gemms = [shapes[0][0] for shapes in mms if shapes[1] == [8, 40]]
    assert logits_gemms == [2048] * 8 + [1]
    grads = torch.autograd.grad(loss, (g, M))
    ref = naive_linear_cross_entropy(g, M, targets)
    for a, b in zip((loss, *grads), (ref, *torch.autograd.grad(ref, (g, M)))):
        assert rel(a, b) <= 1e-5


def test_bad_chunk_size_is_named():
    with pytest.raises(PitError, match=r"chunk_size 0; expected an integer >= 1"):
        linear_cross_entropy(torch.randn(4, 2), torch.randn(5, 2), torch.zeros(4, dtype=torch.long), chunk_size=0)


@pytest.mark.parametrize(
    "name,kind", [("scratch-tiny", "pit"), ("scratch-tiny", "tt"), ("scratch-tiny", "untied"), ("gpt2-tiny", None)]
)
def test_training_loss_of_every_model_equals_logits_cross_entropy(name, kind):
    model = build_model(name, InterfaceConfig(kind=kind) if kind else None, vocab_size=500, seed=0).train()
    batch = torch.randint(0, 500, (2, 33), generator=torch.Generator().manual_seed(0))
    params = [p for p in model.parameters() if p.requires_grad]
    loss = NextTokenLoss(model)(batch[:, :-1], batch[:, 1:])
    grads = torch.autograd.grad(loss, params)
    logits = model(batch[:, :-1], use_cache=False).logits
    ref = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
    ref_grads = torch.autograd.grad(ref, params)
    assert rel(loss, ref) <= 1e-6
    for a, b in zip(grads, ref_grads):
        assert rel(a, b) <= 1e-5


def test_converted_teacher_trains_like_the_teacher():
    """PitGPT2LMHeadModel (TT; fused GELU backward, chunked loss) against transformers' GPT2LMHeadModel on the
    same weights: equal loss and gradients."""
    from pit.models import convert_teacher

    teacher = build_model("gpt2-tiny", vocab_size=500, seed=0).train()
    ours = convert_teacher(teacher, InterfaceConfig(kind="tt")).train()
    batch = torch.randint(0, 500, (2, 33), generator=torch.Generator().manual_seed(0))
    ref = torch.nn.functional.cross_entropy(teacher(batch[:, :-1]).logits.flatten(0, 1), batch[:, 1:].flatten())
    ref.backward()
    loss = NextTokenLoss(ours)(batch[:, :-1], batch[:, 1:])
    loss.backward()
    assert rel(loss, ref) <= 1e-6
    grads = dict(ours.named_parameters())
    for name, p in teacher.named_parameters():
        mine = grads["interface.weight" if name == "transformer.wte.weight" else name].grad
        assert rel(mine, p.grad) <= 1e-5, name
