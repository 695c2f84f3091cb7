"""Token interfaces: exact pseudo-inverse consistency, initialisations, training, precision, gradients."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tolerances import U32, U64, delta_ti_bound, orthonormality_bound, product, relative_bound, within

from pit.core.interfaces import InterfaceConfig, PITTying, TransposeTying, UntiedHead, make_interface
from pit.core.linalg import inverse_sqrt_minus_identity, orthonormality_error, polar
from pit.errors import PitError

# (V, d, teacher inits, optimizer steps): the GPT-2 vocabulary at d = 768 (init only: 0 steps); the scratch
# vocabulary at XL width, the widest d, trained. Every float64 V x d x d product takes seconds on a CPU (at XL: a
# step of a trainable Z, its retraction onto the Stiefel manifold, ~8 s, a teacher init's polar decomposition ~7 s,
# each Delta_TI ~4 s). So both shapes check the teacher init whose T is not the identity (inverse_h): identity's Z
# is the same polar factor, with T = I, so its W_out E is Z^T Z, which the orthonormality check of inverse_h's Z
# already bounds (identity itself: test_identity_init_uses_the_polar_factor). XL trains 2 steps of a trainable Z
# (lr 1e-4), a first and a last: Z and L both move, and Delta_TI is checked with both trained. The frozen-Z arm that
# also ran here trained L alone (lr 1e-3); what a frozen Z must do (stay put while L trains, Delta_TI small) is
# checked at a small shape over 20 steps (test_frozen_z_stays_put_while_l_trains). The smaller shapes of
# tests/test_train.py train longer
SIZES = [(50257, 768, ("inverse_h",), 0), (32000, 1600, ("inverse_h",), 2)]


def anisotropic_embedding(V, d, seed=0):
    """A teacher-like embedding: Gaussian rows with a spread of column scales and a mean direction."""
    g = torch.Generator().manual_seed(seed)
    E = torch.randn(V, d, generator=g) * torch.logspace(-2.3, -1, d)
    return E + 0.01 * torch.randn(d, generator=g)


def kappa(iface) -> float:
    """kappa(T), the condition number of the interface's transform (float64 eigenvalues of the SPD T)."""
    w = torch.linalg.eigvalsh(iface.transform().double())
    return (w.max() / w.min()).item()


def train_steps(iface, steps=50, tokens=64, seed=0, lr=1e-3):
    """Fused AdamW (as `pit train`) on a random LM loss through both ends of the interface; returns
    Delta_TI after the last step and the worst ||Z^T Z - I||_F of a trainable Z at the first, middle and
    last step (a frozen Z cannot move: the caller checks it is unchanged)."""
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(iface.dim, iface.dim, generator=g) / iface.dim**0.5
    params = [p for p in iface.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, fused=True)
    worst_orth = 0.0
    for step in range(steps):
        ids = torch.randint(0, iface.vocab_size, (tokens,), generator=g)
        targets = torch.randint(0, iface.vocab_size, (tokens,), generator=g)
        h = torch.tanh(iface.embed(ids) @ mix)
        loss = F.cross_entropy(iface.logits(h), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        iface.after_optimizer_step()
        if isinstance(iface, PITTying) and iface.Z.requires_grad and step in (0, steps // 2, steps - 1):
            worst_orth = max(worst_orth, orthonormality_error(iface.Z))
    return iface.delta_ti(), worst_orth


@pytest.mark.slow
@pytest.mark.parametrize("V,d,t_inits,steps", SIZES)
def test_pseudo_inverse_holds_through_init_and_training(V, d, t_inits, steps):
    """Every bound is the float32 rounding bound at this d (tests/tolerances.py): Delta_TI <= 3 u d^(3/2) kappa(T)
    (at d = 1,600 and T ~ I: 1.1e-2; an interface that is not a pseudo-inverse pair reads O(1) and more) and
    ||Z^T Z - I||_F <= u d (9.5e-5)."""
    scratch = PITTying.from_scratch(V, d, seed=0)
    assert torch.equal(scratch.transform(), torch.eye(d))  # T = I: W_out E = Z^T Z, Delta_TI is Z's orthonormality
    assert within(orthonormality_error(scratch.Z), orthonormality_bound(d), f"scratch Z orth d={d}")
    Z0 = scratch.Z.detach().clone()

    E0 = anisotropic_embedding(V, d)
    for t_init in t_inits:
        teacher = PITTying.from_teacher(E0, t_init)
        assert within(teacher.delta_ti(), delta_ti_bound(d, kappa(teacher)), f"{t_init} delta_ti d={d}"), t_init
        assert within(orthonormality_error(teacher.Z), orthonormality_bound(d), f"{t_init} Z orth d={d}"), t_init

    if not steps:
        return
    # Adam moves every coordinate by ~lr while Z's entries are ~V^-1/2: lr 1e-4 is already a 2-6 % step
    trainable = PITTying.from_tensors(Z0, trainable_z=True)
    delta, orth = train_steps(trainable, steps, lr=1e-4)
    assert within(delta, delta_ti_bound(d, kappa(trainable)), f"trained delta_ti d={d}")
    assert within(orth, orthonormality_bound(d), f"trained Z orth d={d}")
    assert (trainable.Z - Z0).abs().max() > 1e-5, "a trainable Z must move"
    assert not torch.allclose(trainable.cholesky_factor(), torch.eye(d)), "L must train"


def test_frozen_z_stays_put_while_l_trains():
    V, d = 4000, 256
    Z0 = PITTying.from_scratch(V, d, seed=0).Z.detach().clone()
    frozen = PITTying.from_tensors(Z0)
    delta, _ = train_steps(frozen, 20)
    assert within(delta, delta_ti_bound(d, kappa(frozen)), "frozen Z delta_ti d=256")
    assert torch.equal(frozen.Z, Z0), "a frozen Z must not move"
    assert not torch.allclose(frozen.cholesky_factor(), torch.eye(d)), "L must train"


def test_tt_and_untied_are_not_pseudo_inverse_consistent():
    for cls in (TransposeTying, UntiedHead):
        iface = cls.from_scratch(5000, 64, seed=0)
        assert iface.delta_ti() > 1.0


def test_inverse_h_reproduces_teacher_embedding_and_pinv():
    V, d = 50257, 768
    E0 = anisotropic_embedding(V, d, seed=3)
    iface = PITTying.from_teacher(E0, "inverse_h")
    E = iface.input_embedding().double()
    rel = torch.linalg.matrix_norm(E - E0.double()) / torch.linalg.matrix_norm(E0.double())
    bound = relative_bound(d, depth=2, kappa=kappa(iface))  # T^-1 from L, then Z T^-1: two d-term products
    assert within(rel.item(), bound, "inverse_h E = E0")
    # pinv(E0) = (E0^T E0)^{-1} E0^T (full column rank), with NumPy, independently of our polar code
    A = E0.double().numpy()
    pinv = torch.from_numpy(np.linalg.solve(A.T @ A, A.T))
    W = iface.output_projection().double()
    assert within((torch.linalg.matrix_norm(W - pinv) / torch.linalg.matrix_norm(pinv)).item(), bound, "inverse_h W")


def test_identity_init_uses_the_polar_factor():
    E0 = anisotropic_embedding(3000, 48, seed=4)
    iface = PITTying.from_teacher(E0, "identity")
    U, H = polar(E0)
    # Z is the float64 polar factor rounded to float32: |Z - U| <= u |U| entrywise
    assert within((iface.Z.double() - U).abs().max().item(), U.abs().max().item() * 2 * product(1), "polar Z")
    assert torch.equal(iface.transform(), torch.eye(48))  # T = I is set, not computed
    # U H in float64 reproduces E0 to float64 rounding: the SVD behind the polar factors, U = P Q^T, H = Q S Q^T and
    # U H are 48-term products (relative to E0's largest entry)
    scale = E0.abs().max().item()
    assert within(((U @ H) - E0.double()).abs().max().item(), scale * relative_bound(48, 4, u=U64), "U H = E0")


def test_embedding_is_two_triangular_solves_not_an_inverse():
    iface = PITTying.from_scratch(2000, 32, seed=0)
    with torch.no_grad():
        iface.L_offdiag.normal_(std=0.1)
        iface.log_diag.normal_(std=0.2)
    ids = torch.randint(0, 2000, (4, 7))
    T = iface.transform().double()
    expected = iface.Z.double()[ids] @ torch.linalg.inv(T)
    got = iface.embed(ids).double()
    bound = relative_bound(32, depth=2, kappa=kappa(iface))  # T^-1 from L, then z T^-1 in float32
    assert within(((got - expected).norm() / expected.norm()).item(), bound, "embed = z T^-1")
    h = torch.randn(4, 7, 32)
    ref = h.double() @ T @ iface.Z.double().T
    got = iface.logits(h).double()
    assert within(((got - ref).norm() / ref.norm()).item(), relative_bound(32, depth=2, kappa=kappa(iface)), "(hT)Z^T")


def test_bf16_autocast_keeps_transform_in_fp32_and_logits_close():
    iface = PITTying.from_scratch(8000, 256, seed=0)
    with torch.no_grad():
        iface.L_offdiag.normal_(std=0.02)
        iface.log_diag.normal_(std=0.1)
    h = torch.randn(64, 256)
    ids = torch.randint(0, 8000, (64,))
    ref_logits, ref_embed = iface.logits(h), iface.embed(ids)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = iface.logits(h)
        emb = iface.embed(ids)
    assert emb.dtype == torch.float32, "the embedding (z T^-1) must stay FP32 under autocast"
    assert torch.isfinite(logits).all()
    rel = (logits.float() - ref_logits).norm() / ref_logits.norm()
    assert rel < 1e-2
    assert torch.equal(emb, ref_embed)


class _Method(torch.nn.Module):
    """Calls one interface method as `forward`, so torch.func.functional_call can swap parameters."""

    def __init__(self, iface, method):
        super().__init__()
        self.iface, self.method = iface, method

    def forward(self, x):
        return getattr(self.iface, self.method)(x)


def test_gradcheck_float64_wrt_L_and_trainable_Z():
    iface = PITTying.from_scratch(40, 6, seed=0, trainable_z=True).double()
    with torch.no_grad():
        iface.L_offdiag.normal_(std=0.1)
        iface.log_diag.normal_(std=0.1)
    names = ("iface.L_offdiag", "iface.log_diag", "iface.Z")
    inputs = tuple(p.detach().clone().requires_grad_() for p in (iface.L_offdiag, iface.log_diag, iface.Z))
    for method, x in (("embed", torch.randint(0, 40, (5,))), ("logits", torch.randn(3, 6, dtype=torch.float64))):
        wrapper = _Method(iface, method)

        def f(*params, wrapper=wrapper, x=x):
            return torch.func.functional_call(wrapper, dict(zip(names, params)), (x,))

        assert f(*inputs).dtype == torch.float64
        assert torch.autograd.gradcheck(f, inputs), method


def test_diag_clamp_bounds_the_diagonal():
    iface = PITTying.from_scratch(500, 8, diag_clamp=(0.5, 2.0))
    with torch.no_grad():
        iface.log_diag.copy_(torch.linspace(-3, 3, 8))
    diag = torch.diagonal(iface.cholesky_factor())
    assert diag.min() >= 0.5 * (1 - U32) and diag.max() <= 2.0 * (1 + U32)  # exp(log 0.5) rounds by at most u
    assert within(iface.delta_ti(), delta_ti_bound(8, kappa(iface)), "clamped delta_ti")


def test_retraction_restores_orthonormality():
    iface = PITTying.from_scratch(4000, 64, trainable_z=True)
    with torch.no_grad():
        iface.Z.add_(1e-3 * torch.randn_like(iface.Z))
    assert orthonormality_error(iface.Z) > 1e-3
    iface.after_optimizer_step()
    assert within(orthonormality_error(iface.Z), orthonormality_bound(64), "retraction d=64")


def test_inverse_sqrt_matches_eigendecomposition():
    G = torch.randn(30, 30, dtype=torch.float64)
    for A in (torch.eye(30, dtype=torch.float64) + 0.01 * (G + G.T), G @ G.T + torch.eye(30, dtype=torch.float64)):
        evals, evecs = np.linalg.eigh(A.numpy())
        ref = (evecs / np.sqrt(evals)) @ evecs.T
        S = inverse_sqrt_minus_identity(A).numpy()
        got = S + np.eye(30)
        if np.linalg.norm(A.numpy() - np.eye(30)) < 0.5:  # the binomial series, in float32 on the small correction S
            bound = relative_bound(30, depth=4) * np.abs(S).max()
        else:  # a float64 eigendecomposition: rounding of d-term products, amplified by kappa(A)
            bound = relative_bound(30, depth=3, kappa=evals.max() / evals.min(), u=U64) * np.abs(ref).max()
        assert within(np.abs(got - ref).max(), bound, "A^-1/2")


@pytest.mark.parametrize("kind", ["pit", "tt", "untied"])
def test_contract_shapes(kind):
    iface = make_interface(InterfaceConfig(kind=kind), 300, 16)
    iface.reset_parameters(0)
    ids = torch.randint(0, 300, (2, 5))
    assert iface.embed(ids).shape == (2, 5, 16)
    assert iface.logits(torch.randn(2, 5, 16)).shape == (2, 5, 300)
    assert iface.input_embedding().shape == (300, 16)
    assert iface.output_projection().shape == (16, 300)
    E, W = iface.input_embedding(), iface.output_projection()
    emb = iface.embed(ids)
    assert within(((emb - E[ids]).norm() / E[ids].norm()).item(), relative_bound(16, depth=2), f"{kind} embed")
    h = torch.randn(3, 16)
    ref = h @ W
    assert within(((iface.logits(h) - ref).norm() / ref.norm()).item(), relative_bound(16, depth=2), f"{kind} head")


def test_bad_input_is_named():
    with pytest.raises(PitError, match=r"not orthonormal"):
        PITTying.from_tensors(torch.randn(100, 8))
    with pytest.raises(PitError, match=r"L has shape \(4, 4\); expected \(8, 8\)"):
        PITTying.from_tensors(torch.linalg.qr(torch.randn(100, 8))[0], torch.eye(4))
    with pytest.raises(PitError, match=r"V >= d"):
        PITTying(4, 8)
    with pytest.raises(PitError, match=r"teacher embedding has shape \(100, 8\); expected \(100, 16\)"):
        from pit.core.interfaces import init_from_teacher_

        init_from_teacher_(PITTying(100, 16), torch.randn(100, 8))
    with pytest.raises(PitError, match=r"t_init 'inverse'"):
        InterfaceConfig(t_init="inverse")
    with pytest.raises(PitError, match=r"interface kind 'tied'"):
        InterfaceConfig(kind="tied")
    with pytest.raises(PitError, match=r"token ids have dtype torch.float32"):
        PITTying.from_scratch(100, 8).embed(torch.zeros(3))
    with pytest.raises(PitError, match=r"rank deficient"):
        PITTying.from_teacher(torch.ones(100, 8))
