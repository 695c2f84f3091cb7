"""`pit convert-check`: how much of a teacher each PIT teacher init keeps, before any training step.

For a teacher of any supported family (pit/models/any_model.py) with input embedding E0 = U H (thin polar), output
head W0 (= E0 when tied) and each requested `t_init` (pit.core.interfaces.teacher_factor; `power` once per exponent
a), the teacher is converted with `convert_teacher` and compared with the teacher and with TT (the conversion that
keeps E0; for an untied teacher TT drops W0, so TT is the teacher only when tied):

    val_loss          mean next-token loss of the converted model on the first N non-overlapping windows of the
                      validation file (pit.analysis.side_effects.next_token_side_effects, float64)
    minus_teacher     val_loss - the teacher's loss on the same windows
    minus_tt          val_loss - TT's loss (TT is the teacher exactly, so the two losses agree)
    kl                mean KL(p_teacher || p_converted) per position
    embedding_error   ||E - E0||_F / ||E0||_F
    head_error        ||W_out - W0^T||_F / ||W0||_F           (W_out as the interface holds it)
    head_error_folded ||beta W_out - W0^T||_F / ||W0||_F      (beta: the scalar `power` folds into the final norm,
                                                               measured as its output's gain; 1 otherwise)
    delta_ti          ||W_out E - I||_F

The result also holds the singular values of E0 in summary (`spectrum`): how anisotropic the teacher is.
"""

from __future__ import annotations

import torch

from pit.analysis.side_effects import next_token_side_effects
from pit.core.interfaces import T_INITS, InterfaceConfig
from pit.core.linalg import gram, single_thread
from pit.errors import PitError
from pit.models.access import final_norm, interface_matrices
from pit.models.any_model import convert_teacher

FORMULAS = {
    "identity": "T = I",
    "inverse_h": "T = H^-1",
    "head": "T = H",
    "power": "T = sigma^-(1+a) H^a, final norm x sigma^2",
}


def init_configs(t_inits=None, t_powers=None) -> list[InterfaceConfig]:
    """One PIT InterfaceConfig per init (default: all of T_INITS), `power` once per exponent in `t_powers`
    (default: the config's default exponent)."""
    configs = []
    for t_init in t_inits or T_INITS:
        if t_init == "power" and t_powers:
            configs += [InterfaceConfig(kind="pit", t_init=t_init, t_power=a) for a in t_powers]
        else:
            configs.append(InterfaceConfig(kind="pit", t_init=t_init))
    return configs


def init_label(cfg: InterfaceConfig) -> str:
    return f"power(a={cfg.t_power:g})" if cfg.t_init == "power" else cfg.t_init


@torch.no_grad()
def embedding_spectrum(E0: torch.Tensor) -> dict:
    """Singular values of E0 in summary (from the eigenvalues of E0^T E0, float64)."""
    with single_thread():
        s = torch.linalg.eigvalsh(gram(E0)).clamp(min=0).sqrt()
    return {
        "s_min": s.min().item(),
        "s_max": s.max().item(),
        "s_geomean": s.log().mean().exp().item(),
        "s_rms": s.square().mean().sqrt().item(),
        "condition": (s.max() / s.min()).item(),
    }


@torch.no_grad()
def final_norm_gain(model, teacher) -> float:
    """beta = ||norm_model(x)|| / ||norm_teacher(x)|| on seeded random x: the scalar the conversion folded into the
    final norm (any norm type: LayerNorm gain and bias, RMSNorm gain, Gemma's (1 + w))."""
    norm_m, norm_t = final_norm(model), final_norm(teacher)
    x = torch.randn(8, model.interface.dim, generator=torch.Generator().manual_seed(0))
    return (norm_m(x).norm() / norm_t(x).norm()).item()


@torch.no_grad()
def interface_errors(model, teacher) -> dict:
    """Relative Frobenius errors of the converted model's E and W_out against the teacher's E0 and W0 (float64)."""
    E, W = interface_matrices(model, float64=True)
    E0, W0_t = interface_matrices(teacher, float64=True)
    beta = final_norm_gain(model, teacher)
    return {
        "embedding_error": (torch.linalg.matrix_norm(E - E0) / torch.linalg.matrix_norm(E0)).item(),
        "head_error": (torch.linalg.matrix_norm(W - W0_t) / torch.linalg.matrix_norm(W0_t)).item(),
        "head_error_folded": (torch.linalg.matrix_norm(beta * W - W0_t) / torch.linalg.matrix_norm(W0_t)).item(),
        "ln_f_scale": beta,
        "delta_ti": torch.linalg.matrix_norm(W @ E - torch.eye(E.shape[1], dtype=E.dtype)).item(),
    }


def check_inputs(teacher, data, seq_len: int, windows: int) -> None:
    if teacher.config.vocab_size < data.meta["vocab_size"]:  # more rows than ids: the padding of Qwen2, Pythia
        raise PitError(
            f"teacher has vocabulary size {teacher.config.vocab_size}, the validation data {data.meta['vocab_size']}; "
            "expected the data tokenized with the teacher's tokenizer"
        )
    context = teacher.config.max_position_embeddings  # GPT-2: n_positions (transformers' attribute map)
    if not 2 <= seq_len <= context or windows < 1:
        raise PitError(
            f"seq_len {seq_len}, windows {windows}: expected 2 <= seq_len <= {context} "
            "(the teacher's context) and windows >= 1"
        )


@torch.no_grad()
def convert_check(teacher, data, configs=None, windows: int = 16, seq_len: int = 128, batch_size: int = 4) -> dict:
    """The initial loss and interface errors of each PIT teacher init in `configs` (default: `init_configs()`)
    against the teacher and TT, on the first `windows` non-overlapping windows of `data` (a TokenFile)."""
    check_inputs(teacher, data, seq_len, windows)
    teacher.eval()
    E0 = teacher.get_input_embeddings().weight.detach()
    tt = convert_teacher(teacher, InterfaceConfig(kind="tt"))
    base = next_token_side_effects(teacher, tt, data, seq_len, windows, batch_size)
    teacher_loss, tt_loss = base["val_loss_before"], base["val_loss_after"]
    rows = []
    for cfg in configs or init_configs():
        model = convert_teacher(teacher, cfg)
        fx = next_token_side_effects(teacher, model, data, seq_len, windows, batch_size)
        rows.append(
            {
                "init": init_label(cfg),
                "t_init": cfg.t_init,
                "t_power": cfg.t_power if cfg.t_init == "power" else None,
                "formula": FORMULAS[cfg.t_init],
                "val_loss": fx["val_loss_after"],
                "minus_teacher": fx["val_loss_after"] - teacher_loss,
                "minus_tt": fx["val_loss_after"] - tt_loss,
                "kl": fx["kl"],
                **interface_errors(model, teacher),
            }
        )
    return {
        "teacher_val_loss": teacher_loss,
        "tt_val_loss": tt_loss,
        "vocab_size": E0.shape[0],
        "dim": E0.shape[1],
        "spectrum": embedding_spectrum(E0),
        "windows": windows,
        "seq_len": seq_len,
        "positions": base["positions"],
        "inits": rows,
    }


def markdown(result: dict) -> str:
    """The result as a Markdown table (one row per init, the teacher and TT first)."""
    sp = result["spectrum"]
    lines = [
        f"teacher: V = {result['vocab_size']}, d = {result['dim']}; singular values of E0 {sp['s_min']:.3g} .. "
        f"{sp['s_max']:.3g} (geometric mean {sp['s_geomean']:.3g}, condition {sp['condition']:.3g}); "
        f"{result['positions']} positions ({result['windows']} windows of {result['seq_len']})",
        "",
        "| init | formula | val loss | - teacher | - TT | KL | E err | W_out err | folded W_out err | Delta_TI |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| teacher | E0, W0^T | {result['teacher_val_loss']:.4f} | 0 | | | 0 | 0 | 0 | |",
        f"| tt | E = E0, W_out = E0^T | {result['tt_val_loss']:.4f} | "
        f"{result['tt_val_loss'] - result['teacher_val_loss']:.2g} | 0 | | 0 | 0 | 0 | |",
    ]
    for r in result["inits"]:
        lines.append(
            f"| {r['init']} | {r['formula']} | {r['val_loss']:.4f} | {r['minus_teacher']:+.4f} | "
            f"{r['minus_tt']:+.4f} | {r['kl']:.4f} | {r['embedding_error']:.3g} | {r['head_error']:.3g} | "
            f"{r['head_error_folded']:.3g} | {r['delta_ti']:.1e} |"
        )
    return "\n".join(lines)
