"""Interface diagnostics (paper Sections 3 and 5.5, Table 2, Figure 2): how consistent are the input
anchors (rows of E) and the output anchors (pinv(W_out)) of a checkpoint? All math in float64.

* Delta_TI = ||W_out E - I_d||_F (Eq. 14).
* Anchor agreement between B_in and B_out (both V x d), in two variants:
      raw:   B_in = E,           B_out = pinv(W_out)           (Eqs. 1-2)
      polar: B_in = polar(E),    B_out = polar(W_out^T)        (Section 5.5's wording)
  measured by the mean cosine distance of matching rows, the relative orthogonal-Procrustes error
  and the largest principal angle between the column spaces.
* The direct path A = E W_out (V x V, the token-to-logit path that skips every block): its relative
  asymmetry ||A - A^T||_F / ||A||_F and how well A[a, b] tracks the empirical bigram log p(b | a).
* Layerwise consistency (Figure 2): each residual state decoded through B_in (nearest input anchor
  by cosine) and through B_out (the logit lens), compared with each other and with the final prediction.

No V x V matrix is ever formed. Formulas and conventions: docs/diagnostics.md.

    pit diagnose results/pretrain/teacher/1.3b/pit/final --val-data results/data/gpt2/val.bin --json
"""

from __future__ import annotations

import argparse
import copy
import json
import math

import numpy as np
import torch

from pit.checkpoint import load_model
from pit.data.reader import TokenFile
from pit.errors import PitError
from pit.io import write_json
from pit.models.scratch import PitForCausalLM
from pit.train import interface_matrices as stored_interface_matrices
from pit.tying import single_thread


# ---- linear algebra (float64, tall V x d matrices, d x d factorizations) -------------------------
def thin_svd(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A = U diag(S) Vh for a tall A (V x d): thin QR A = Q R, then the SVD of the small R."""
    Q, R = torch.linalg.qr(A)
    with single_thread():
        Ur, S, Vh = torch.linalg.svd(R)
    return Q @ Ur, S, Vh


def pinv_of_wide(W: torch.Tensor) -> torch.Tensor:
    """pinv(W) (V x d) of a wide W (d x V) from the thin SVD W^T = U S Vh: pinv(W) = U S^-1 Vh.
    Singular values below max(V, d) * eps * s_max count as zero (numpy/torch's default cutoff)."""
    U, S, Vh = thin_svd(W.T)
    cutoff = max(W.shape) * torch.finfo(S.dtype).eps * S.max()
    S_inv = torch.where(S > cutoff, 1 / S, torch.zeros_like(S))
    return (U * S_inv) @ Vh


def polar(A: torch.Tensor) -> torch.Tensor:
    """Orthonormal polar factor U Vh of A = U S Vh (A = (U Vh)(Vh^T S Vh), Eq. 7); SVD-based, so it
    stays accurate for badly conditioned A (unlike the eigh of A^T A)."""
    U, _, Vh = thin_svd(A)
    return U @ Vh


def cosine_distance(B_in: torch.Tensor, B_out: torch.Tensor) -> float:
    """mean_i (1 - cos(B_in[i], B_out[i])); a zero row against a zero row counts as cos = 1,
    a zero row against a non-zero row as cos = 0."""
    n_in, n_out = B_in.norm(dim=1), B_out.norm(dim=1)
    both = (n_in > 0) & (n_out > 0)
    cos = torch.where(both, (B_in * B_out).sum(1) / torch.where(both, n_in * n_out, 1.0),
                      ((n_in == 0) & (n_out == 0)).to(B_in.dtype))
    return (1 - cos.clamp(-1.0, 1.0)).mean().item()  # |cos| <= 1; the clamp removes round-off beyond it


def procrustes_error(B_in: torch.Tensor, B_out: torch.Tensor) -> float:
    """min_{R orthogonal} ||B_in R - B_out||_F / ||B_out||_F with R = U Vh from the SVD of the
    d x d matrix B_in^T B_out = U S Vh. The residual is evaluated directly (one V x d x d product):
    the identity ||B_in||^2 + ||B_out||^2 - 2 ||B_in^T B_out||_* cancels to ~1e-8 relative at best."""
    with single_thread():
        U, _, Vh = torch.linalg.svd(B_in.T @ B_out)
    return (torch.linalg.matrix_norm(B_in @ (U @ Vh) - B_out) / torch.linalg.matrix_norm(B_out)).item()


def principal_angle(B_in: torch.Tensor, B_out: torch.Tensor) -> float:
    """Largest principal angle (radians) between the column spaces, from the sine side:
    sin(theta_max) = ||(I - Q_out Q_out^T) Q_in||_2 with Q_in, Q_out from thin QRs, the projection
    applied as Q_in - Q_out (Q_out^T Q_in); the spectral norm is that of its (small) R factor."""
    Q_in, Q_out = torch.linalg.qr(B_in).Q, torch.linalg.qr(B_out).Q
    residual_R = torch.linalg.qr(Q_in - Q_out @ (Q_out.T @ Q_in)).R
    with single_thread():
        sin = torch.linalg.matrix_norm(residual_R, ord=2).item()
    return math.asin(min(max(sin, 0.0), 1.0))


def anchor_agreement(B_in: torch.Tensor, B_out: torch.Tensor) -> dict:
    return {"cosine_distance": cosine_distance(B_in, B_out), "procrustes_error": procrustes_error(B_in, B_out),
            "principal_angle": principal_angle(B_in, B_out)}


def direct_path_asymmetry(E: torch.Tensor, W_out: torch.Tensor) -> float:
    """||A - A^T||_F / ||A||_F for A = E W_out, without forming A: with the thin QR
    [E, W_out^T] = Q [R1, R2] (V x 2d), A = Q (R1 R2^T) Q^T, so both norms are those of the
    2d x 2d core C = R1 R2^T (equal to the trace formulas of docs/diagnostics.md, without their
    cancellation)."""
    d = E.shape[1]
    R = torch.linalg.qr(torch.cat([E, W_out.T], dim=1)).R
    C = R[:, :d] @ R[:, d:].T
    return (torch.linalg.matrix_norm(C - C.T) / torch.linalg.matrix_norm(C)).item()


def _as_float64(E, W_out) -> tuple[torch.Tensor, torch.Tensor]:
    E, W_out = torch.as_tensor(E).detach().double(), torch.as_tensor(W_out).detach().double()
    if not (torch.isfinite(E).all() and torch.isfinite(W_out).all()):
        raise PitError("the interface has non-finite entries (a diverged run?); its metrics are undefined")
    if E.ndim != 2 or W_out.ndim != 2 or W_out.shape != (E.shape[1], E.shape[0]):
        raise PitError(f"input embedding E has shape {tuple(E.shape)} and output projection W_out has shape "
                       f"{tuple(W_out.shape)}; expected E (V, d) and W_out (d, V)")
    return E, W_out


@torch.no_grad()
def interface_metrics(E, W_out) -> dict:
    """Delta_TI, raw and polar anchor agreement, and the direct path's asymmetry for E (V x d), W_out (d x V)."""
    E, W_out = _as_float64(E, W_out)
    d = E.shape[1]
    return {
        "delta_ti": torch.linalg.matrix_norm(W_out @ E - torch.eye(d, dtype=E.dtype, device=E.device)).item(),
        "raw": anchor_agreement(E, pinv_of_wide(W_out)),
        "polar": anchor_agreement(polar(E), polar(W_out.T)),
        "asymmetry": direct_path_asymmetry(E, W_out),
    }


def interface_matrices(model) -> tuple[torch.Tensor, torch.Tensor]:
    """(E, W_out) in float64. An interface is evaluated in float64 from its stored parameters (PIT:
    E = Z T^{-1}, W_out = T Z^T with float64 solves), so the metrics see the interface the checkpoint
    defines rather than its FP32 materialisation; plain HF models give their wte / lm_head upcast."""
    if hasattr(model, "interface"):
        iface = copy.deepcopy(model.interface).double()
        return iface.input_embedding().detach(), iface.output_projection().detach()
    return tuple(m.detach().double() for m in stored_interface_matrices(model))


# ---- the direct path against bigram statistics ---------------------------------------------------
@torch.no_grad()
def bigram_fit(E, W_out, tokens, chunk: int = 16384) -> dict:
    """Pearson correlation, over the distinct bigrams (a, b) observed in `tokens`, between the
    empirical log p(b | a) = log n(a, b) - log n(a, .) and the direct-path score A[a, b] = E[a] . W_out[:, b].
    Only the needed rows of E and columns of W_out are gathered."""
    E, W_out = _as_float64(E, W_out)
    V = E.shape[0]
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.size < 2:
        raise PitError(f"bigram fit needs at least 2 tokens; got {tokens.size}")
    if tokens.min() < 0 or tokens.max() >= V:
        raise PitError(f"token ids span [{tokens.min()}, {tokens.max()}]; expected ids in [0, {V - 1}]")
    pairs, counts = np.unique(tokens[:-1] * V + tokens[1:], return_counts=True)
    a, b = pairs // V, pairs % V
    log_p = np.log(counts) - np.log(np.bincount(tokens[:-1], minlength=V)[a])
    a, b = torch.from_numpy(a).to(E.device), torch.from_numpy(b).to(E.device)
    score = torch.cat([(E[a[i:i + chunk]] * W_out[:, b[i:i + chunk]].T).sum(1) for i in range(0, len(a), chunk)])
    score = score.cpu().numpy()
    pearson = None if len(pairs) < 2 or log_p.std() == 0 or score.std() == 0 else float(np.corrcoef(log_p, score)[0, 1])
    return {"pearson": pearson, "bigrams": int(len(pairs)), "tokens": int(tokens.size)}


# ---- layerwise consistency (Figure 2) ------------------------------------------------------------
def final_norm(model) -> torch.nn.Module:
    return model.norm if isinstance(model, PitForCausalLM) else model.transformer.ln_f


def residual_states(model, ids: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The last position's residual state after the embedding and after each block, final norm
    applied (L + 1 tensors of shape (B, d)), and the model's own logits there (B, V).

    Scratch models return un-normed states; HF GPT-2 returns ln_f(h) as its last hidden state
    (and the un-normed stream before it), so ln_f is applied to all but that one."""
    norm = final_norm(model)
    if isinstance(model, PitForCausalLM):
        h, states = model.hidden_states(ids, output_hidden_states=True)
        states = [norm(s[:, -1]) for s in states]
        logits = model.interface.logits(h[:, -1])
    else:
        out = model(ids, output_hidden_states=True, use_cache=False)
        *inner, last = out.hidden_states
        states = [norm(s[:, -1]) for s in inner] + [last[:, -1]]
        logits = out.logits[:, -1]
    return states, logits


def window_starts(data: TokenFile, positions: int, seq_len: int, seed: int) -> np.ndarray:
    """`positions` distinct non-overlapping windows of seq_len + 1 tokens, drawn with a seeded RNG."""
    starts = data.sequential_starts(seq_len)
    return np.sort(np.random.default_rng(seed).choice(starts, size=min(positions, len(starts)), replace=False))


@torch.no_grad()
def layerwise_consistency(model, data: TokenFile, positions: int = 512, seed: int = 0, seq_len: int = 128,
                          batch_size: int = 16) -> list[dict]:
    """Per layer l (0 = embedding output, l = block l): decode the normed state f_l at the last
    position of each window (a) through B_in: argmax_i cos(f_l, E[i]), (b) through B_out: argmax_i
    (f_l W_out)[i]; report the agreement rates (a) = (b), (a) = final, (b) = final, where final is
    the argmax of the model's own logits."""
    check_vocab(model, data)
    seq_len = min(seq_len, model.config.max_position_embeddings)
    E, W_out = interface_matrices(model)
    E_unit = E / E.norm(dim=1, keepdim=True).clamp(min=torch.finfo(E.dtype).tiny)
    device = E.device
    starts = window_starts(data, positions, seq_len, seed)
    hits = None
    for i in range(0, len(starts), batch_size):
        ids = data.windows(starts[i:i + batch_size], seq_len)[:, :-1].to(device)
        states, logits = residual_states(model, ids)
        final = logits.argmax(-1)
        batch = []
        for f in states:
            f = f.double()
            via_in, via_out = (f @ E_unit.T).argmax(-1), (f @ W_out).argmax(-1)
            batch.append(torch.stack([via_in == via_out, via_in == final, via_out == final]).sum(1))
        hits = torch.stack(batch) if hits is None else hits + torch.stack(batch)
    rates = (hits.double() / len(starts)).tolist()
    return [{"layer": l, "in_out_agreement": r[0], "in_final_agreement": r[1], "out_final_agreement": r[2]}
            for l, r in enumerate(rates)]


def check_vocab(model, data: TokenFile) -> None:
    V = model.config.vocab_size
    if data.meta.get("vocab_size") != V:
        raise PitError(f"token file {str(data.path)!r} was tokenized with vocabulary size "
                       f"{data.meta.get('vocab_size')} (tokenizer {data.meta.get('tokenizer')!r}); "
                       f"the checkpoint has vocabulary size {V}")


# ---- one checkpoint ------------------------------------------------------------------------------
def interface_kind(model) -> str:
    """The interface's kind; a plain HF model is 'tt' when wte and lm_head share their storage."""
    if hasattr(model, "interface"):
        return model.interface.kind
    tied = model.get_input_embeddings().weight.data_ptr() == model.get_output_embeddings().weight.data_ptr()
    return "tt" if tied else "untied"


@torch.no_grad()
def diagnose(checkpoint, val_data=None, positions: int = 512, bigram_tokens: int = 1_000_000, seed: int = 0,
             seq_len: int = 128, device: str = "cpu") -> dict:
    """All diagnostics of one checkpoint; the validation-data parts are None without `val_data`."""
    model = load_model(checkpoint, device=device)
    E, W_out = interface_matrices(model)
    metrics = interface_metrics(E, W_out)
    out = {
        "checkpoint": str(checkpoint), "model": type(model).__name__, "interface": interface_kind(model),
        "vocab_size": E.shape[0], "dim": E.shape[1], "delta_ti": metrics["delta_ti"],
        "raw": metrics["raw"], "polar": metrics["polar"],
        "direct_path": {"asymmetry": metrics["asymmetry"], "bigram": None},
        "val": None, "layerwise": None,
    }
    if val_data is not None:
        data = TokenFile(val_data)
        check_vocab(model, data)
        out["direct_path"]["bigram"] = bigram_fit(E, W_out, data.tokens[:bigram_tokens])
        out["layerwise"] = layerwise_consistency(model, data, positions, seed, seq_len)
        seq_len = min(seq_len, model.config.max_position_embeddings)
        out["val"] = {"path": str(val_data), "positions": len(window_starts(data, positions, seq_len, seed)),
                      "seq_len": seq_len, "seed": seed, "bigram_tokens": min(bigram_tokens, len(data))}
    return out


def summary(d: dict) -> str:
    lines = [f"{d['checkpoint']}: {d['model']}, interface {d['interface']}, V = {d['vocab_size']}, d = {d['dim']}",
             f"  Delta_TI = ||W_out E - I||_F          {d['delta_ti']:.3e}"]
    for variant in ("raw", "polar"):
        m = d[variant]
        lines.append(f"  {variant:<5}  cosine distance {m['cosine_distance']:.3e}   procrustes {m['procrustes_error']:.3e}"
                     f"   principal angle {m['principal_angle']:.3e} rad")
    lines.append(f"  direct path A = E W_out: asymmetry ||A - A^T|| / ||A|| = {d['direct_path']['asymmetry']:.3e}")
    if (bigram := d["direct_path"]["bigram"]) is not None:
        r = "n/a" if bigram["pearson"] is None else f"{bigram['pearson']:.4f}"
        lines.append(f"  bigram fit: pearson(A[a, b], log p(b | a)) = {r} over {bigram['bigrams']} bigrams "
                     f"({bigram['tokens']} tokens)")
    if d["layerwise"] is not None:
        lines.append(f"  layerwise consistency over {d['val']['positions']} positions (seq_len {d['val']['seq_len']}):")
        lines.append("    layer   B_in=B_out   B_in=final   B_out=final")
        for r in d["layerwise"]:
            lines.append(f"    {r['layer']:>5}   {r['in_out_agreement']:>10.3f}   {r['in_final_agreement']:>10.3f}"
                         f"   {r['out_final_agreement']:>11.3f}")
    return "\n".join(lines)


def cmd_diagnose(args: argparse.Namespace) -> int:
    if args.positions < 1 or args.bigram_tokens < 2:
        raise PitError(f"--positions {args.positions} and --bigram-tokens {args.bigram_tokens}: expected >= 1 and >= 2")
    result = diagnose(args.checkpoint, args.val_data, args.positions, args.bigram_tokens, args.seed, args.seq_len,
                      args.device)
    if args.out:
        write_json(args.out, result)
    print(json.dumps(result, indent=2, sort_keys=True) if args.json else summary(result))
    return 0


def register(sub) -> None:
    p = sub.add_parser("diagnose", help="interface diagnostics of a checkpoint (Delta_TI, anchor agreement, Figure 2)",
                       description="Delta_TI, raw and polar anchor agreement (cosine distance, Procrustes error, "
                                   "largest principal angle), direct-path asymmetry and bigram fit, and layerwise "
                                   "semantic consistency of one checkpoint, all in float64 (docs/diagnostics.md).")
    p.add_argument("checkpoint", help="checkpoint folder (save_pretrained)")
    p.add_argument("--val-data", default=None, help="validation token file (e.g. results/data/gpt2/val.bin) for the "
                                                     "bigram fit and layerwise consistency")
    p.add_argument("--positions", type=int, default=512, help="held-out windows (one last-token position each)")
    p.add_argument("--seq-len", type=int, default=128, help="window length (capped at the model's context)")
    p.add_argument("--bigram-tokens", type=int, default=1_000_000, help="bigrams from the first N tokens")
    p.add_argument("--seed", type=int, default=0, help="seed of the window draw")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--out", default=None, help="also write the JSON to this file (atomically)")
    p.set_defaults(func=cmd_diagnose)
