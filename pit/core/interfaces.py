"""Token interfaces: how token ids enter the model and how hidden states leave it as logits.

Three interfaces share one contract (`TokenInterface`):

* `PITTying`: Pseudo-Inverse Tying (paper Section 4). A shared memory Z (V x d, Z^T Z = I_d)
  and an SPD transform T = L L^T (L lower-triangular, diag(L) = exp(l)) give
      E = Z T^{-1}            (embedding, Eq. 4 and 13; T^{-1} = L^{-T} L^{-1} from one d x d triangular solve)
      W_out = T Z^T           (output projection, Eq. 4 and 11-12: logits = (h T) Z^T)
  so W_out E = T Z^T Z T^{-1} = I_d exactly (Eq. 6). Neither E nor W_out is materialised in
  the forward pass; all T/L arithmetic runs in FP32, also under autocast.
* `TransposeTying` (TT): one table W (V x d); E = W, W_out = W^T.
* `UntiedHead`: independent E (V x d) and head (V x d, stored like `nn.Linear`); W_out = head^T.

Teacher mode (`init_from_teacher_`): Z = U of the teacher's E0 = U H (thin polar) and T from `t_init`
(`teacher_factor`: identity, inverse_h, head, power). Scratch mode: Z a seeded Stiefel matrix, T = t_scale I.

Every interface offers `embed(ids)`, `logits(h)`, `input_embedding()` (E, V x d) and
`output_projection()` (W_out, d x V), and `after_optimizer_step()` (PIT's polar retraction of a
trainable Z; a no-op elsewhere).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

from pit.core.linalg import (
    at_least_fp32,
    compute_dtype,
    gram,
    inverse_sqrt_minus_identity,
    polar,
    random_stiefel,
    single_thread,
    spd_geometric_mean,
    spd_power,
)
from pit.core.metrics import delta_ti
from pit.errors import PitError

INTERFACE_KINDS = ("pit", "tt", "untied")
T_INITS = ("identity", "inverse_h", "head", "power")  # PIT teacher mode (docs/models.md, `teacher_factor`)
TT_INITS = ("teacher", "polar")  # TT teacher mode: the teacher's table, or its polar factor (`init_from_teacher_`)
RETRACTION_CHUNK = 2048  # rows of Z per in-place retraction update (see `PITTying.retract_`)


def _real(name: str, value, lo: float, hi: float, lo_open: bool) -> float:
    """`value` as a float in [lo, hi] ((lo, hi] when `lo_open`), or a PitError naming it."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (lo < value if lo_open else lo <= value) and value <= hi
    if not ok:
        interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        raise PitError(f"{name} {value!r} is invalid; expected a number in {interval}")
    return float(value)


@dataclass
class InterfaceConfig:
    """How the token interface is built; stored in every model config (`config.interface`).

    The fields after `init_std` are newer than the first checkpoints: a config without them reads as their
    defaults (the paper), and `to_dict` leaves them out while they hold their defaults, so a default model's
    config.json is the same as before they existed."""

    kind: Literal["pit", "tt", "untied"] = "pit"
    trainable_z: bool = False  # PIT: Z frozen after init (the paper's default) or trained + retracted
    t_init: Literal["identity", "inverse_h", "head", "power"] = "identity"  # PIT teacher mode (`teacher_factor`)
    diag_clamp: tuple[float, float] | None = None  # PIT: optional (min, max) for diag(L)
    retraction_eps: float = 0.0  # PIT: ridge in Z <- Z (Z^T Z + eps I)^{-1/2}
    init_std: float = 0.02  # TT / untied scratch init: N(0, init_std^2)
    t_power: float = 1.0  # PIT teacher mode, t_init "power": the exponent a of T = c H^a, -1 <= a <= 1
    t_scale: float = 1.0  # PIT scratch init: T = t_scale I (L = sqrt(t_scale) I); 1 = the paper
    tt_init: Literal["teacher", "polar"] = (
        "teacher"  # TT teacher mode: W = E0, or W = U of E0 = U H (`init_from_teacher_`)
    )

    OMITTED_AT_DEFAULT = ("t_power", "t_scale", "tt_init")  # left out of to_dict while at their defaults

    def __post_init__(self):
        if self.kind not in INTERFACE_KINDS:
            raise PitError(f"interface kind {self.kind!r} is unknown; expected one of {INTERFACE_KINDS}")
        if self.t_init not in T_INITS:
            raise PitError(f"t_init {self.t_init!r} is unknown; expected one of {T_INITS}")
        if self.tt_init not in TT_INITS:
            raise PitError(f"tt_init {self.tt_init!r} is unknown; expected one of {TT_INITS}")
        self.t_power = _real("t_power", self.t_power, -1.0, 1.0, lo_open=False)
        self.t_scale = _real("t_scale", self.t_scale, 0.0, math.inf, lo_open=True)
        if self.diag_clamp is not None:
            lo, hi = self.diag_clamp
            if not 0 < lo < hi:
                raise PitError(f"diag_clamp {self.diag_clamp!r} is invalid; expected (min, max) with 0 < min < max")
            self.diag_clamp = (float(lo), float(hi))
        if self.retraction_eps < 0:
            raise PitError(f"retraction_eps {self.retraction_eps!r} must be >= 0")

    def to_dict(self, omit_defaults: bool = True) -> dict:
        """The config as JSON-ready values; `omit_defaults` leaves out OMITTED_AT_DEFAULT while at their defaults
        (a model's config.json), False gives every field (a run's resolved settings, pit/training/args.py)."""
        d = asdict(self)
        d["diag_clamp"] = list(self.diag_clamp) if self.diag_clamp is not None else None
        for name in self.OMITTED_AT_DEFAULT if omit_defaults else ():
            if d[name] == self.__dataclass_fields__[name].default:
                del d[name]
        return d

    @classmethod
    def from_dict(cls, d: dict | None) -> InterfaceConfig:
        d = dict(d or {})
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise PitError(
                f"interface config has unknown keys {sorted(unknown)}; expected {sorted(cls.__dataclass_fields__)}"
            )
        if d.get("diag_clamp") is not None:
            d["diag_clamp"] = tuple(d["diag_clamp"])
        return cls(**d)


def _check_ids(ids: torch.Tensor) -> None:
    if ids.dtype not in (torch.int64, torch.int32):
        raise PitError(f"token ids have dtype {ids.dtype}; expected an integer tensor (int64 or int32)")


def _inverse_from_cholesky(L: torch.Tensor) -> torch.Tensor:
    """T^{-1} = L^{-T} L^{-1} from the Cholesky factor L of T (lower-triangular, positive diagonal)."""
    L_inv = torch.linalg.solve_triangular(L, torch.eye(L.shape[0], dtype=L.dtype, device=L.device), upper=False)
    return L_inv.T @ L_inv


def _fp32_region(device: torch.device):
    """Context in which autocast is off, so T/L work stays in FP32."""
    return torch.autocast(device_type=device.type, enabled=False)


class TokenInterface(nn.Module):
    """The contract every interface implements."""

    kind: str

    def __init__(self, vocab_size: int, dim: int):
        super().__init__()
        self.vocab_size, self.dim = vocab_size, dim

    @classmethod
    def from_scratch(cls, vocab_size: int, dim: int, seed: int = 0, **kwargs) -> TokenInterface:
        """Allocate and initialise from scratch with a seed."""
        interface = cls(vocab_size, dim, **kwargs)
        interface.reset_parameters(seed)
        return interface

    def reset_parameters(self, seed: int = 0) -> None:
        raise NotImplementedError

    def embed(self, ids: torch.Tensor) -> torch.Tensor:  # (...,) -> (..., d)
        raise NotImplementedError

    def logits(self, h: torch.Tensor) -> torch.Tensor:  # (..., d) -> (..., V)
        raise NotImplementedError

    def input_embedding(self) -> torch.Tensor:  # E, (V, d)
        raise NotImplementedError

    def output_projection(self) -> torch.Tensor:  # W_out, (d, V)
        raise NotImplementedError

    def head_input(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(g, M) with logits = g @ M^T, M of shape (V, d): lets a loss chunk over the vocabulary."""
        raise NotImplementedError

    @torch.no_grad()
    def after_optimizer_step(self) -> None:
        """Called once after every optimizer step (PIT: retraction of a trainable Z)."""

    def delta_ti(self) -> float:
        """Delta_TI = ||W_out E - I_d||_F (Eq. 14), in float64."""
        return delta_ti(self.input_embedding(), self.output_projection())

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, dim={self.dim}"


class PITTying(TokenInterface):
    """Pseudo-Inverse Tying: E = Z T^{-1}, W_out = T Z^T, T = L L^T (paper Eq. 4, 10-13).

    The constructor only allocates (it is safe on the meta device); values come from
    `from_scratch`, `from_teacher`, `from_tensors` or a checkpoint.
    """

    kind = "pit"

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        *,
        trainable_z: bool = False,
        diag_clamp: tuple[float, float] | None = None,
        retraction_eps: float = 0.0,
        t_scale: float = 1.0,
    ):
        if vocab_size < dim:
            raise PitError(f"vocabulary size {vocab_size} < model dimension {dim}; PIT needs V >= d")
        super().__init__(vocab_size, dim)
        self.Z = nn.Parameter(torch.empty(vocab_size, dim), requires_grad=trainable_z)
        # Unconstrained parameters of L: strictly-lower entries and l = log diag(L). L = I at zero.
        self.L_offdiag = nn.Parameter(torch.zeros(dim, dim))
        self.log_diag = nn.Parameter(torch.zeros(dim))
        self.diag_clamp = diag_clamp
        self.retraction_eps = retraction_eps
        self.t_scale = t_scale  # scratch init T = t_scale I (`reset_parameters`)
        self._inference_factors = None  # ((diag_clamp, L_offdiag, log_diag) as used, L, T, T^-1): `_factors`

    # ---- values -------------------------------------------------------------------------------
    @torch.no_grad()
    def set_(self, Z: torch.Tensor, L: torch.Tensor | None = None) -> PITTying:
        """Set Z (checked orthonormal) and L (lower-triangular, positive diagonal; None = I)."""
        V, d = self.vocab_size, self.dim
        if tuple(Z.shape) != (V, d):
            raise PitError(f"Z has shape {tuple(Z.shape)}; expected ({V}, {d})")
        # a 1e-3 gate: the chunked Gram (FP32 products summed in float64) is ample and half the cost
        err = torch.linalg.matrix_norm(gram(Z) - torch.eye(d, dtype=torch.float64, device=Z.device)).item()
        if err > 1e-3:
            raise PitError(
                f"Z is not orthonormal: ||Z^T Z - I||_F = {err:.3g}; expected Z^T Z = I_d "
                "(take Z from PITTying.from_scratch / from_teacher, or a polar factor)"
            )
        L = torch.eye(d) if L is None else L.detach().float()
        if tuple(L.shape) != (d, d):
            raise PitError(f"L has shape {tuple(L.shape)}; expected ({d}, {d})")
        diag = torch.diagonal(L)
        if not bool((diag > 0).all()):
            raise PitError("L has a non-positive diagonal entry; expected a Cholesky factor with diag(L) > 0")
        self.Z.copy_(Z)
        self.L_offdiag.copy_(torch.tril(L, -1))
        self.log_diag.copy_(diag.log())
        return self

    def reset_parameters(self, seed: int = 0) -> None:
        """Scratch init (Algorithm 1, lines 6-7 and 16): Z = Q of a seeded Gaussian, L = I (T = I). With
        `t_scale` c != 1 (beyond the paper): T = c I, i.e. L = sqrt(c) I (log_diag = log(c) / 2), so
        E = Z / c and W_out = c Z^T (docs/models.md, "Scratch init and t_scale")."""
        self.set_(random_stiefel(self.vocab_size, self.dim, seed))
        if self.t_scale != 1.0:
            with torch.no_grad():
                self.log_diag.fill_(math.log(self.t_scale) / 2)

    @classmethod
    def from_tensors(cls, Z: torch.Tensor, L: torch.Tensor | None = None, **kwargs) -> PITTying:
        if Z.ndim != 2:
            raise PitError(f"Z has shape {tuple(Z.shape)}; expected a matrix (V, d)")
        return cls(*Z.shape, **kwargs).set_(Z, L)

    @classmethod
    def from_teacher(cls, E0: torch.Tensor, t_init: str = "identity", t_power: float = 1.0, **kwargs) -> PITTying:
        """Teacher mode: E0 = U H (thin polar), Z = U, T from `t_init` (`teacher_factor`). The head-side
        scalar of `power` is not applied here (it belongs to the model's final norm: `init_from_teacher_`)."""
        if E0.ndim != 2:
            raise PitError(f"teacher embedding has shape {tuple(E0.shape)}; expected (V, d)")
        m = cls(*E0.shape, **kwargs)
        init_from_teacher_(m, E0, t_init, t_power)
        return m

    # ---- the transform ------------------------------------------------------------------------
    def cholesky_factor(self) -> torch.Tensor:
        """L = tril(L_offdiag, -1) + diag(exp(l)), in FP32 (diag optionally clamped)."""
        if self._differentiable():
            return self._cholesky_factor()
        return self._factors()[0].clone()

    def transform(self) -> torch.Tensor:
        """T = L L^T (SPD), FP32."""
        if self._differentiable():
            L = self._cholesky_factor()
            return L @ L.T
        return self._factors()[1].clone()

    def inverse_transform(self) -> torch.Tensor:
        """T^{-1} = L^{-T} L^{-1} (SPD), FP32: one d x d triangular solve for L^{-1} and one d x d product.
        The embedding multiplies by it (`embed`) instead of solving with L and L^T for every token: one (N x d x d)
        GEMM forward and one backward, where two solves cost two triangular solves forward and two more plus two
        GEMMs backward (benchmarks/RESULTS.md, section 17); its forward error stays at the solves' order."""
        if self._differentiable():
            return _inverse_from_cholesky(self._cholesky_factor())
        return self._factors()[2].clone()

    def _cholesky_factor(self) -> torch.Tensor:
        log_diag = at_least_fp32(self.log_diag)
        if self.diag_clamp is not None:
            log_diag = log_diag.clamp(math.log(self.diag_clamp[0]), math.log(self.diag_clamp[1]))
        return torch.tril(at_least_fp32(self.L_offdiag), -1) + torch.diag_embed(log_diag.exp())

    def _differentiable(self) -> bool:
        return torch.is_grad_enabled() and (self.L_offdiag.requires_grad or self.log_diag.requires_grad)

    @torch.no_grad()
    def _factors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(L, T, T^{-1}) without autograd (inference: decoding computes h T and z T^{-1} once per token, and T and
        T^{-1} cost d^3 each),
        kept while diag_clamp and the values of L_offdiag and log_diag are those they were computed from
        (compared by value, O(d^2), so every way of changing L is seen); bitwise equal to a fresh computation.
        The public methods hand out copies, so no caller can change the kept ones."""
        key = (self.diag_clamp, self.L_offdiag, self.log_diag)
        kept = self._inference_factors
        if (
            kept is None
            or kept[0][0] != key[0]
            or not all(
                a.device == b.device and a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(kept[0][1:], key[1:])
            )
        ):
            L = self._cholesky_factor()
            used = (key[0], *(p.detach().clone() for p in key[1:]))
            kept = self._inference_factors = (used, L, L @ L.T, _inverse_from_cholesky(L))
        return kept[1], kept[2], kept[3]

    # ---- the contract -------------------------------------------------------------------------
    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """e_t = z_t T^{-1}, T^{-1} = L^{-T} L^{-1} (`inverse_transform`), FP32 (Eq. 13)."""
        _check_ids(ids)
        with _fp32_region(self.Z.device):
            T_inv = self.inverse_transform()
            z = F.embedding(ids.reshape(-1), at_least_fp32(self.Z)).to(T_inv.dtype)
            e = z @ T_inv
        return e.reshape(*ids.shape, self.dim)

    def head_input(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """g = h T in FP32 (Eq. 12); the vocabulary matmul g Z^T follows autocast like any head."""
        with _fp32_region(h.device):
            T = self.transform()
            g = at_least_fp32(h).to(T.dtype) @ T
        g = g.to(compute_dtype(g))  # the vocabulary GEMM in autocast's dtype while it is on; else g stays FP32
        return g, self.Z

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """logits = (h T) Z^T (Eq. 11-12)."""
        g, Z = self.head_input(h)
        return g @ Z.to(g.dtype).T

    def input_embedding(self) -> torch.Tensor:
        with _fp32_region(self.Z.device):
            T_inv = self.inverse_transform()
            return at_least_fp32(self.Z).to(T_inv.dtype) @ T_inv

    def output_projection(self) -> torch.Tensor:
        with _fp32_region(self.Z.device):
            T = self.transform()
            return T @ at_least_fp32(self.Z).to(T.dtype).T

    @torch.no_grad()
    def after_optimizer_step(self) -> None:
        if self.Z.requires_grad:
            self.retract_()

    @torch.no_grad()
    def retract_(self) -> None:
        """Polar retraction Z <- Z (Z^T Z + eps I)^{-1/2} (Eq. 18), applied as Z + Z (S - I) so
        that FP32 rounding touches only the small correction. Rows are independent, so the update runs
        in place over row chunks through one small buffer: no V x d temporary, and bitwise equal to the whole
        product (benchmarks/RESULTS.md has the timing)."""
        G = gram(self.Z) + self.retraction_eps * torch.eye(self.dim, dtype=torch.float64, device=self.Z.device)
        S = inverse_sqrt_minus_identity(G).to(self.Z.dtype)
        buf = self.Z.new_empty(min(RETRACTION_CHUNK, self.vocab_size), self.dim)
        for rows in self.Z.split(RETRACTION_CHUNK):
            correction = buf[: len(rows)]
            torch.mm(rows, S, out=correction)
            rows.add_(correction)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, trainable_z={self.Z.requires_grad}, diag_clamp={self.diag_clamp}"


class TransposeTying(TokenInterface):
    """Classic weight tying: E = W, W_out = W^T (T = I in PIT terms)."""

    kind = "tt"

    def __init__(self, vocab_size: int, dim: int, *, init_std: float = 0.02):
        super().__init__(vocab_size, dim)
        self.init_std = init_std
        self.weight = nn.Parameter(torch.empty(vocab_size, dim))

    @torch.no_grad()
    def reset_parameters(self, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.weight.copy_(torch.randn(self.vocab_size, self.dim, generator=g) * self.init_std)

    @classmethod
    def from_tensors(cls, weight: torch.Tensor, **kwargs) -> TransposeTying:
        if weight.ndim != 2:
            raise PitError(f"embedding has shape {tuple(weight.shape)}; expected (V, d)")
        m = cls(*weight.shape, **kwargs)
        with torch.no_grad():
            m.weight.copy_(weight)
        return m

    def embed(self, ids):
        _check_ids(ids)
        return F.embedding(ids, self.weight)

    def head_input(self, h):
        return h, self.weight

    def logits(self, h):
        return F.linear(h, self.weight)

    def input_embedding(self):
        return self.weight

    def output_projection(self):
        return self.weight.T


class UntiedHead(TokenInterface):
    """Independent embedding E (V x d) and head (V x d, like nn.Linear); W_out = head^T."""

    kind = "untied"

    def __init__(self, vocab_size: int, dim: int, *, init_std: float = 0.02):
        super().__init__(vocab_size, dim)
        self.init_std = init_std
        self.embedding = nn.Parameter(torch.empty(vocab_size, dim))
        self.head = nn.Parameter(torch.empty(vocab_size, dim))

    @torch.no_grad()
    def reset_parameters(self, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.embedding.copy_(torch.randn(self.vocab_size, self.dim, generator=g) * self.init_std)
        self.head.copy_(torch.randn(self.vocab_size, self.dim, generator=g) * self.init_std)

    @classmethod
    def from_tensors(cls, embedding: torch.Tensor, head: torch.Tensor, **kwargs) -> UntiedHead:
        if embedding.ndim != 2 or head.shape != embedding.shape:
            raise PitError(f"embedding {tuple(embedding.shape)} and head {tuple(head.shape)} must both be (V, d)")
        m = cls(*embedding.shape, **kwargs)
        with torch.no_grad():
            m.embedding.copy_(embedding)
            m.head.copy_(head)
        return m

    def embed(self, ids):
        _check_ids(ids)
        return F.embedding(ids, self.embedding)

    def head_input(self, h):
        return h, self.head

    def logits(self, h):
        return F.linear(h, self.head)

    def input_embedding(self):
        return self.embedding

    def output_projection(self):
        return self.head.T


def make_interface(cfg: InterfaceConfig, vocab_size: int, dim: int) -> TokenInterface:
    """Allocate (do not initialise) the interface described by `cfg`; safe on the meta device."""
    if cfg.kind == "pit":
        return PITTying(
            vocab_size,
            dim,
            trainable_z=cfg.trainable_z,
            diag_clamp=cfg.diag_clamp,
            retraction_eps=cfg.retraction_eps,
            t_scale=cfg.t_scale,
        )
    cls = TransposeTying if cfg.kind == "tt" else UntiedHead
    return cls(vocab_size, dim, init_std=cfg.init_std)


def teacher_factor(H: torch.Tensor, t_init: str, t_power: float = 1.0) -> tuple[torch.Tensor | None, float]:
    """(L, beta) for a teacher with thin polar E0 = U H (float64 H): L = chol(T) (None: T = I) and the scalar
    beta the caller folds into the head side (the final LayerNorm's gain and bias; 1 = nothing to fold).
    With Z = U, PIT's E = U T^-1 and W_out = T U^T, while the teacher has E0 = U H and E0^T = H U^T:

    * identity   T = I                    E = U = E0 H^-1,        W_out = U^T = H^-1 E0^T    (the paper)
    * inverse_h  T = H^-1                 E = E0 exactly,         W_out = H^-2 E0^T = pinv(E0) (Alg. 1, l. 14)
    * head       T = H                    E = U H^-1 = E0 H^-2,   W_out = E0^T exactly
    * power      T = sigma^-(1+a) H^a,    beta = sigma^2, with sigma = det(H)^(1/d) (the geometric mean of the
                 singular values of E0) and Hn = H / sigma (det Hn = 1), a = `t_power` in [-1, 1]:
                 E = sigma U Hn^-a = E0 Hn^-(1+a),  beta W_out = sigma Hn^a U^T = Hn^-(1-a) E0^T.
                 Both scalar parts match the teacher (E's singular values have E0's geometric mean; the folded
                 head has E0^T's); only the shape Hn is split, a = 1 making the head exact, a = -1 the input,
                 a = 0 sharing it evenly. A teacher with H = s I (isotropic) is kept exactly for every a.
    """
    if t_init not in T_INITS:
        raise PitError(f"t_init {t_init!r} is unknown; expected one of {T_INITS}")
    if t_init == "identity":
        return None, 1.0
    with single_thread():
        if t_init == "inverse_h":
            return torch.linalg.cholesky(torch.linalg.inv(H)), 1.0
        if t_init == "head":
            return torch.linalg.cholesky(H), 1.0
        sigma = spd_geometric_mean(H)
        T = spd_power(H, t_power) * sigma ** -(1 + t_power)
        return torch.linalg.cholesky((T + T.T) / 2), sigma**2


@torch.no_grad()
def init_from_teacher_(
    interface: TokenInterface,
    E0: torch.Tensor,
    t_init: str = "identity",
    t_power: float = 1.0,
    tt_init: str = "teacher",
) -> float:
    """Teacher mode: PIT takes the polar factor of E0 and T from `t_init` (`teacher_factor`), TT uses E0 as is
    (`tt_init` teacher) or its polar factor U of E0 = U H (`tt_init` polar: E = U, W_out = U^T, at step 0 the same
    function as PIT with T = I, the matched-start control of docs/study.md), and the untied head starts both E and
    the head from E0. Returns the scalar beta that the model must fold into its final norm's gain and bias for the
    head to be the one `teacher_factor` describes (1.0 unless t_init is `power`)."""
    if tuple(E0.shape) != (interface.vocab_size, interface.dim):
        raise PitError(
            f"teacher embedding has shape {tuple(E0.shape)}; expected ({interface.vocab_size}, {interface.dim})"
        )
    if isinstance(interface, PITTying):
        if t_init not in T_INITS:
            raise PitError(f"t_init {t_init!r} is unknown; expected one of {T_INITS}")
        if interface.t_scale != 1.0:
            raise PitError(
                f"t_scale {interface.t_scale!r} applies to scratch init only; expected 1 in teacher mode, "
                "where T comes from t_init"
            )
        U, H = polar(E0, method="gram", check_rank=True)
        L, beta = teacher_factor(H, t_init, t_power)
        interface.set_(U.float(), L)
        return beta
    if isinstance(interface, TransposeTying):
        if tt_init not in TT_INITS:
            raise PitError(f"tt_init {tt_init!r} is unknown; expected one of {TT_INITS}")
        interface.weight.copy_(E0 if tt_init == "teacher" else polar(E0, method="gram", check_rank=True)[0])
    else:
        interface.embedding.copy_(E0)
        interface.head.copy_(E0)
    return 1.0
