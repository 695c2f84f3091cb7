"""Chunked fused linear + cross-entropy: the language-model loss without the (tokens x V) logits.

Every head is logits = g M^T with g (N x d) and a table M (V x d) (`TokenInterface.head_input`:
PIT g = h T, M = Z; TT M = E; untied M = W_out^T). With targets y and n rows whose target is not
`ignore_index`, the loss of `F.cross_entropy(g @ M.T, y, ignore_index=...)` (mean reduction) and its
gradients are
    loss = (1/n) sum_{i valid} (logsumexp_j z_ij - z_{i,y_i}),        z = g M^T
    dz   = w (softmax(z) - onehot(y)),     w_i = [y_i valid] / max(n, 1)   (zero on ignored rows)
    dg   = dz M,        dM = dz^T g
`linear_cross_entropy` walks over chunks of rows and, in the forward pass, computes the logits of one
chunk, its loss terms, dz (in place of the logits) and both gradient products, so no N x V tensor is
ever stored; the backward pass only scales dg and dM by the incoming gradient. Under torch.compile each chunk's
loss terms and dz are one expression instead (`_compiled_chunk`), which Inductor makes one pass over the logits.
dM is computed only when M requires a gradient: PIT with a frozen Z skips that (V x N x d) GEMM entirely. Under a
half compute dtype (bf16 autocast) the GEMMs run in it, and dM is summed over the chunks in FP32 (`accumulate_mm`), so
its rounding does not grow with the number of chunks; it is returned in FP32 (an FP32 master table takes it as is).

No host sync: n stays a tensor (the loss is a sum divided by n, 0/0 = nan with no valid row, as
F.cross_entropy; the row weights w zero the ignored rows in the same pass that casts dz for the GEMMs), and
backward multiplies by grad_loss unconditionally. So the forward and backward trace as one graph under
torch.compile (tests/test_step_graph.py) and a CUDA step never waits for the host.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from pit.core.linalg import compute_dtype
from pit.errors import PitError

CHUNK_SIZE = 1024  # rows of logits per chunk up to 16384 rows: 1024 x 50257 FP32 = 206 MB (benchmarks/RESULTS.md)
MAX_CHUNKS = 16  # at most this many chunks where no chunk is given: larger inputs get larger chunks (`chunk_rows`)
ROW_ALIGN = 16  # logits rows are stored with a stride padded to 16 elements (64 bytes): GEMMs writing rows of odd
# length (V = 50257) are slower (benchmarks/RESULTS.md); the padding columns hold -inf, so softmax gives them 0
TABLE_ALIGN = 64  # with `pad_table` (the default on CUDA) M is copied into V rounded up to 64 zero rows


def chunk_rows(n: int, rows: int | None = None) -> int:
    """Rows per chunk of the loss over n rows: `rows` where given; else CHUNK_SIZE x ceil(n / (MAX_CHUNKS x
    CHUNK_SIZE)), the smallest multiple of CHUNK_SIZE that covers n in at most MAX_CHUNKS chunks. Up to 16384 rows
    that is CHUNK_SIZE; 65536 rows (64 windows of 1024) take 16 chunks of 4096. So the loss holds about 1/16 of the
    logits at once at any size past 16384 rows, and its graph under torch.compile, where every chunk is unrolled,
    stops growing with the batch (compile time and the GPU's speed per chunk: benchmarks/RESULTS.md)."""
    if rows is not None:
        return rows
    return CHUNK_SIZE * max(1, -(-n // (MAX_CHUNKS * CHUNK_SIZE)))


def _gemm_table(M: torch.Tensor, dtype: torch.dtype, pad: bool) -> torch.Tensor:
    """The table the GEMMs read: M itself (no padding), or one copy of M in `dtype` with zero rows up to a multiple
    of TABLE_ALIGN (the cast to the compute dtype and the padding in one pass)."""
    if not pad:
        return M.to(dtype)
    V, d = M.shape
    Mg = M.new_empty(-(-V // TABLE_ALIGN) * TABLE_ALIGN, d, dtype=dtype)
    Mg[:V].copy_(M)
    Mg[V:].zero_()
    return Mg


def _chunk_gradients(p, zc, gc, wc, Mg, dgc, dMg, first: bool) -> None:
    """dg_c = diag(w_c) P M into dgc and dM (+)= P^T diag(w_c) g_c into dMg (None: not needed), P = softmax - onehot
    of the chunk (rows x W, in place of its logits). The row weights w (1/n, 0 on ignored rows) go where they are
    free: into the pass that casts P to a half compute dtype (written into the logits buffer zc, as the naive
    head's backward rounds dz), else (FP32: no cast pass) onto the (rows x d) operands, never as an extra pass
    over P."""
    if p.dtype != zc.dtype:
        _gradient_gemms(torch.mul(p, wc, out=zc), gc, Mg, dgc, dMg, first)
        return
    if dgc is not None:
        torch.mm(p, Mg, out=dgc).mul_(wc)
    if dMg is not None:
        dMg.addmm_(p.T, gc * wc, beta=0 if first else 1)


def _gradient_gemms(dz, gc, Mg, dgc, dMg, first: bool) -> None:
    """dg_c = dz M into dgc, dM (+)= dz^T g_c into dMg, for a chunk's dz already weighted (rows x W)."""
    if dgc is not None:
        torch.mm(dz, Mg, out=dgc)
    if dMg is not None:
        accumulate_mm(dMg, dz.T, gc, 0.0 if first else 1.0)


def table_grad_buffer(Mg: torch.Tensor, acc: torch.dtype) -> torch.Tensor:
    """dM's buffer: the GEMM table's shape in the accumulation dtype `acc` (FP32 at least), where `accumulate_mm`
    sums the chunks' products."""
    return torch.empty_like(Mg, dtype=acc)


@torch.library.custom_op("pit::accumulate_mm", mutates_args=("out",))
def accumulate_mm(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, beta: float) -> None:
    """out = beta out + a b, in place (beta = 0: out's old values, even nan, are ignored), with `out` in FP32 when a
    and b are a half type: the products run in the half type, the sum over chunks in FP32 (on CUDA one GEMM with an
    FP32 output, `addmm(..., out_dtype=float32)`; where torch has none, `half_gemm_into_fp32`, as on CPU, a GEMM of
    FP32 copies of a and b). A sum kept in bf16 would be rounded to 8 bits after every chunk: its error grows with the
    number of chunks (at 64 chunks about 4x the naive bf16 head's, tests/test_loss.py). An op of its own because
    torch.compile turns `out.addmm_(a, b)` into an out-of-place addmm into a new buffer, and ATen's CUDA addmm first
    copies `out` there: one copy of the (V x d) table gradient per chunk of the loss. Inductor keeps a custom op's
    mutation in place (tests/test_step_graph.py), as eager `addmm_` is."""
    if out.dtype == a.dtype:
        out.addmm_(a, b, beta=beta)
    elif half_gemm_into_fp32(out.device.type):
        torch.addmm(out, a, b, out_dtype=out.dtype, beta=beta, out=out)
    else:
        out.addmm_(a.to(out.dtype), b.to(out.dtype), beta=beta)


@functools.cache
def half_gemm_into_fp32(device_type: str) -> bool:
    """Whether torch has, on this device type, a GEMM of bf16 operands that adds into an FP32 output (`addmm` with
    `out_dtype=torch.float32`: CUDA, in recent versions; torch 2.11 has it). Tried once on 2 x 2 matrices; without it
    `accumulate_mm` multiplies FP32 copies of the operands, the same sum at more cost."""
    if device_type != "cuda":
        return False
    c = torch.zeros(2, 2, device=device_type)
    a = torch.ones(2, 2, device=device_type, dtype=torch.bfloat16)
    try:
        torch.addmm(c, a, a, out_dtype=torch.float32, out=c)
    except (RuntimeError, TypeError):
        return False
    return bool((c == 2).all())  # one host sync, once per process


def fused_chunk_form() -> bool:
    """Whether a chunk's loss and dz are written as one expression (`_compiled_chunk`): under torch.compile. Eager,
    the in-place form (softmax into the chunk's buffer, `scatter_add_` of the onehot) makes no temporaries, where
    the expression would make several (benchmarks patch this to time one form against the other)."""
    return torch.compiler.is_compiling()


def _compiled_chunk(zc, tc, wc, acc, need_dz: bool):
    """A chunk's loss sum and weighted dz (in zc's dtype) written as one expression for torch.compile: Inductor
    reads the logits (in the compute dtype) in its reductions and writes dz straight from them, where the eager
    form's in-place softmax and `scatter_add_` (an ATen fallback) make it store an FP32 copy of the chunk and read
    it back (rows x W x 8 bytes more traffic per chunk in bf16). Same equations as the module docstring:
    lse = max z + log sum exp(z - max z), dz = w (exp(z - lse) - onehot(y))."""
    z = zc.to(acc)
    top = z.amax(1, keepdim=True)
    lse = top + (z - top).exp().sum(1, keepdim=True).log()
    loss = torch.where(wc > 0, lse - z.gather(1, tc), 0).sum()
    if not need_dz:
        return loss, None
    onehot = torch.arange(z.shape[1], device=z.device) == tc
    return loss, (((z - lse).exp() - onehot.to(acc)) * wc).to(zc.dtype)


class _LinearCrossEntropy(torch.autograd.Function):
    """Forward computes the loss and dg, dM (chunk by chunk); backward multiplies them by grad_loss. The count n
    stays a tensor (1/n enters dz as a row weight): no host sync, no graph break under torch.compile."""

    @staticmethod
    def forward(ctx, g, M, targets, ignore_index, chunk_size, pad_table):
        need_g, need_M = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        acc = torch.promote_types(g.dtype, torch.float32)  # softmax and loss in at least FP32
        valid = targets != ignore_index
        count = valid.sum()  # n, a tensor; no valid row: loss 0/0 = nan and zero gradients, as F.cross_entropy
        weight = (valid.to(acc) / count.clamp(min=1)).unsqueeze(1)  # dz row weights: 1/n, 0 on ignored rows
        t = targets.masked_fill(~valid, 0).unsqueeze(1)
        V, Mg = M.shape[0], _gemm_table(M, g.dtype, pad_table)
        W = Mg.shape[0]  # columns the GEMMs read and write: V, or V padded to TABLE_ALIGN
        z = torch.empty(
            min(chunk_size, g.shape[0]),
            W if pad_table else -(-V // ROW_ALIGN) * ROW_ALIGN,
            dtype=g.dtype,
            device=g.device,
        )
        loss = torch.zeros((), dtype=acc, device=g.device)
        dg = torch.empty_like(g) if need_g else None
        dMg = table_grad_buffer(Mg, acc) if need_M else None  # the first chunk's product overwrites it (beta = 0)
        with torch.autocast(g.device.type, enabled=False):
            for s in range(0, g.shape[0], chunk_size):
                gc, tc, wc = g[s : s + chunk_size], t[s : s + chunk_size], weight[s : s + chunk_size]
                zc = z[: len(gc)]
                torch.mm(gc, Mg.T, out=zc[:, :W])  # padded table: all of zc, contiguous and aligned
                zc[:, V:] = -math.inf
                dgc = dg[s : s + chunk_size] if need_g else None
                if fused_chunk_form():
                    terms, dz = _compiled_chunk(zc[:, :W], tc, wc, acc, need_g or need_M)
                    loss += terms
                    if dz is not None:
                        _gradient_gemms(dz, gc, Mg, dgc, dMg, s == 0)
                    continue
                p = zc.to(acc)  # zc itself unless g is a half type
                target_logit = p.gather(1, tc)
                top = p.amax(1, keepdim=True)
                torch.ops.aten._softmax.out(p, 1, False, out=p)  # in place: p = softmax(z)
                lse = top - p.amax(1, keepdim=True).log()  # logsumexp z = max z - log max softmax(z)
                loss += torch.where(wc > 0, lse - target_logit, 0).sum()
                if need_g or need_M:
                    p.scatter_add_(1, tc, torch.full_like(tc, -1, dtype=acc))  # p - onehot(y)
                    _chunk_gradients(p[:, :W], zc[:, :W], gc, wc, Mg, dgc, dMg, s == 0)
        ctx.save_for_backward(dg, dMg)
        ctx.vocab = V
        return loss / count

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss):
        # unconditionally scaled: `grad_loss != 1` would be a host sync. In place (a second backward through the
        # same graph fails loudly), except a padded table's dM: a slice of dMg, whose in-place change AOTAutograd
        # (torch.compile, CUDA) refuses in a custom function's backward; it is scaled into a new tensor
        dg, dMg = ctx.saved_tensors
        if dg is not None:
            dg.mul_(grad_loss)
        if dMg is None or dMg.shape[0] == ctx.vocab:
            dM = None if dMg is None else dMg.mul_(grad_loss)
        else:
            dM = dMg[: ctx.vocab] * grad_loss
        return dg, dM, None, None, None, None


def linear_cross_entropy(
    g: torch.Tensor,
    M: torch.Tensor,
    targets: torch.Tensor,
    ignore_index: int = -100,
    chunk_size: int | None = None,
    pad_table: bool | None = None,
) -> torch.Tensor:
    """mean_i CE(g_i M^T, y_i) over rows with y_i != ignore_index, equal to `naive_linear_cross_entropy` in value
    and gradients, computed chunk by chunk (module docstring). g (..., d), M (V, d), targets (...). Under autocast
    the GEMMs run in the autocast dtype, as the naive head matmul would; softmax and loss stay in FP32.
    `pad_table` (default: on CUDA, and under torch.compile, whose Dynamo refuses a non-contiguous `out=`) copies M,
    cast to the compute dtype, into a buffer of V rounded up to 64 rows (zeros past V), so that every GEMM reads and
    writes contiguous, aligned memory; otherwise (CPU eager) M is used as it is and the logits GEMM writes a view of a
    buffer whose rows are padded to 16. `chunk_size`: rows of logits per chunk (None: `chunk_rows`'s choice for the
    number of rows)."""
    if chunk_size is not None and chunk_size < 1:
        raise PitError(f"chunk_size {chunk_size}; expected an integer >= 1 or None (rows of logits per chunk)")
    g = g.to(compute_dtype(g)).reshape(-1, g.shape[-1])
    pad = (g.is_cuda or torch.compiler.is_compiling()) if pad_table is None else pad_table
    rows = chunk_rows(g.shape[0], chunk_size)
    return _LinearCrossEntropy.apply(g, M, targets.reshape(-1), ignore_index, rows, pad)


def naive_linear_cross_entropy(
    g: torch.Tensor, M: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100
) -> torch.Tensor:
    """The reference: full (N x V) logits g M^T, then `F.cross_entropy` in at least FP32."""
    logits = g.reshape(-1, g.shape[-1]) @ M.to(g.dtype).T
    return F.cross_entropy(
        logits.to(torch.promote_types(logits.dtype, torch.float32)), targets.reshape(-1), ignore_index=ignore_index
    )
