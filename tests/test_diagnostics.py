"""Interface diagnostics: every metric against an independent NumPy / SciPy computation."""

import json

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize
import scipy.special
import scipy.stats
import torch
from tolerances import interface_bound, relative_bound, within

from pit.analysis.context_free import fit_context_free
from pit.analysis.diagnostics import context_free, diagnose, summary
from pit.analysis.layerwise import layerwise_consistency, lens_metrics
from pit.commands import main
from pit.core import linalg
from pit.core.interfaces import InterfaceConfig, PITTying
from pit.core.metrics import anchor_agreement, bigram_fit, interface_metrics
from pit.data.reader import TokenFile, token_counts, unigram_entropy
from pit.errors import PitError
from pit.models import build_model
from pit.models.access import head_bias, interface_matrices
from pit.models.checkpoint import load_model, save_pretrained_atomic
from pit.reporting.per_seed import diagnostics_metrics

V, D = 300, 16


def np_metrics(B_in: np.ndarray, B_out: np.ndarray) -> dict:
    """The three anchor metrics, written out independently."""
    cos = (B_in * B_out).sum(1) / (np.linalg.norm(B_in, axis=1) * np.linalg.norm(B_out, axis=1))
    R, _ = scipy.linalg.orthogonal_procrustes(B_in, B_out)
    return {
        "cosine_distance": np.mean(1 - cos),
        "procrustes_error": np.linalg.norm(B_in @ R - B_out) / np.linalg.norm(B_out),
        "principal_angle": scipy.linalg.subspace_angles(B_in, B_out).max(),
    }


def np_polar(A: np.ndarray) -> np.ndarray:
    U, _, Vh = np.linalg.svd(A, full_matrices=False)
    return U @ Vh


def pit_exact(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """A float64 PIT interface with a random SPD transform: E = Z T^{-1}, W_out = T Z^T."""
    g = torch.Generator().manual_seed(seed)
    L = torch.tril(torch.randn(D, D, generator=g) * 0.3, -1) + torch.diag(torch.rand(D, generator=g) + 0.5)
    iface = PITTying.from_scratch(V, D, seed=seed)
    iface.set_(iface.Z.detach(), L)
    iface = iface.double()
    iface.retract_()  # Z orthonormal to float64 precision (the stored one is FP32-rounded)
    return iface.input_embedding().detach(), iface.output_projection().detach()


def anisotropic(seed: int = 2) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(V, D, generator=g, dtype=torch.float64) * torch.logspace(-2, 1, D, dtype=torch.float64)


def test_pit_exact_interface_scores_zero():
    E, W = pit_exact()
    np.testing.assert_allclose(np.linalg.pinv(W.numpy()), E.numpy(), atol=1e-12)  # pinv(T Z^T) = Z T^{-1}
    m = interface_metrics(E, W)
    assert m["delta_ti"] < 1e-12
    for variant in ("raw", "polar"):
        assert abs(m[variant]["cosine_distance"]) < 1e-12
        assert m[variant]["procrustes_error"] < 1e-12
        assert m[variant]["principal_angle"] < 1e-7
    assert m["asymmetry"] < 1e-12


def test_metrics_match_numpy_on_an_untied_pair():
    g = torch.Generator().manual_seed(3)
    E = torch.randn(V, D, generator=g, dtype=torch.float64)
    W = E.T + 0.3 * torch.randn(D, V, generator=g, dtype=torch.float64)  # related but untied
    m = interface_metrics(E, W)
    En, Wn = E.numpy(), W.numpy()
    assert m["delta_ti"] == pytest.approx(np.linalg.norm(Wn @ En - np.eye(D)), rel=1e-10)
    for variant, (B_in, B_out) in {"raw": (En, np.linalg.pinv(Wn)), "polar": (np_polar(En), np_polar(Wn.T))}.items():
        for key, expected in np_metrics(B_in, B_out).items():
            assert m[variant][key] == pytest.approx(expected, rel=1e-8), (variant, key)
    A = En @ Wn
    assert m["asymmetry"] == pytest.approx(np.linalg.norm(A - A.T) / np.linalg.norm(A), rel=1e-10)
    assert 0.01 < m["raw"]["principal_angle"] < np.pi / 2


def test_small_angles_keep_their_digits_through_the_joint_frame():
    """Angles of 1e-6 rad between the two column spaces: the coordinates in joint_frame's basis keep the
    sine side's accuracy (a cosine-side computation would read ~1e-8 noise as much as the angle)."""
    E = anisotropic()
    g = torch.Generator().manual_seed(4)
    W = (E + 1e-8 * torch.randn(V, D, generator=g, dtype=torch.float64)).T
    m = interface_metrics(E, W)
    En, Wn = E.numpy(), W.numpy()
    expected = scipy.linalg.subspace_angles(En, Wn.T).max()
    assert 1e-7 < expected < 1e-5
    for variant in ("raw", "polar"):
        assert m[variant]["principal_angle"] == pytest.approx(expected, rel=1e-6)
    B_out = np.linalg.pinv(Wn)
    assert m["raw"]["procrustes_error"] == pytest.approx(np_metrics(En, B_out)["procrustes_error"], rel=1e-6)
    A = En @ Wn
    assert m["asymmetry"] == pytest.approx(np.linalg.norm(A - A.T) / np.linalg.norm(A), rel=1e-6)


def test_gesvd_equals_torchs_svd_near_the_identity():
    """The fallback driver on the kind of matrix gesdd once failed on (polar(E)^T polar(W_out^T) of a PIT
    interface: the identity plus a small perturbation): same factorization as torch's to round-off."""
    g = torch.Generator().manual_seed(5)
    A = torch.eye(64, dtype=torch.float64) + 1e-9 * torch.randn(64, 64, generator=g, dtype=torch.float64)
    U, S, Vh = linalg.svd_gesvd(A)
    assert U.dtype == S.dtype == Vh.dtype == torch.float64
    torch.testing.assert_close(S, torch.linalg.svdvals(A), rtol=0, atol=1e-14)
    torch.testing.assert_close((U * S) @ Vh, A, rtol=0, atol=1e-14)
    torch.testing.assert_close(U @ Vh, torch.linalg.svd(A).U @ torch.linalg.svd(A).Vh, rtol=0, atol=1e-8)
    torch.testing.assert_close(U.T @ U, torch.eye(64, dtype=torch.float64), rtol=0, atol=1e-14)


@pytest.mark.parametrize(
    ("failure", "message"),
    [("raises", "The algorithm failed to converge"), ("wrong", "the factors are off (orthonormality")],
)
def test_metrics_survive_a_failed_svd(monkeypatch, caplog, failure, message):
    """LAPACK's gesdd failing to converge (scratch-1.17b, PIT) or returning factors that are not an SVD (Cerebras-
    GPT-1.3B, TT: a Procrustes error of 0.046 where the exact one is 0), both seen in the paper smoke run: the
    metrics come from gesvd instead, with a warning. Neither failure can be produced on demand with a small matrix,
    so torch's SVD is made to fail here."""
    g = torch.Generator().manual_seed(3)
    E = torch.randn(V, D, generator=g, dtype=torch.float64)
    W = E.T + 0.3 * torch.randn(D, V, generator=g, dtype=torch.float64)
    expected = interface_metrics(E, W)
    svd = torch.linalg.svd

    def failing(A, *args, **kwargs):
        if failure == "raises":
            raise torch.linalg.LinAlgError("linalg.svd: The algorithm failed to converge (error code: 1).")
        U, S, Vh = svd(A)
        return U + 0.1, S, Vh

    monkeypatch.setattr(torch.linalg, "svd", failing)
    with caplog.at_level("WARNING", logger="pit.core.linalg"):
        m = interface_metrics(E, W)
    assert f"SVD of a ({D}, {D}) matrix: {message}" in caplog.text
    assert "using LAPACK's gesvd instead" in caplog.text
    for variant in ("raw", "polar"):
        for key in ("cosine_distance", "procrustes_error", "principal_angle"):
            assert m[variant][key] == pytest.approx(expected[variant][key], rel=1e-9, abs=1e-13), (variant, key)
    assert m["asymmetry"] == pytest.approx(expected["asymmetry"], rel=1e-12)


def test_transpose_tying_polar_is_zero_raw_is_not():
    W = anisotropic()
    m = interface_metrics(W, W.T)
    assert abs(m["polar"]["cosine_distance"]) < 1e-12 and m["polar"]["procrustes_error"] < 1e-12
    expected = np_metrics(W.numpy(), np.linalg.pinv(W.numpy().T))  # pinv(W^T) = W (W^T W)^-1
    assert m["raw"]["cosine_distance"] == pytest.approx(expected["cosine_distance"], rel=1e-8)
    assert m["raw"]["cosine_distance"] > 0.5
    assert m["raw"]["principal_angle"] < 1e-7  # pinv(W^T) spans the columns of W: only the angle misses it
    assert m["asymmetry"] < 1e-12  # A = W W^T


def test_rotation_has_zero_procrustes_error_but_nonzero_cosine_distance():
    B = anisotropic()
    R = torch.from_numpy(scipy.stats.ortho_group.rvs(D, random_state=0))
    m = anchor_agreement(B, B @ R)
    assert m["procrustes_error"] < 1e-12 and m["principal_angle"] < 1e-7
    assert m["cosine_distance"] == pytest.approx(np_metrics(B.numpy(), (B @ R).numpy())["cosine_distance"], rel=1e-10)
    assert m["cosine_distance"] > 0.1
    # the same through an interface: W_out = pinv(E R), so B_out = pinv(W_out) = E R
    raw = interface_metrics(B, torch.from_numpy(np.linalg.pinv((B @ R).numpy())))["raw"]
    assert raw["procrustes_error"] < 1e-10 and raw["cosine_distance"] > 0.1


def test_zero_rows_in_cosine_distance():
    B = torch.eye(4, 2, dtype=torch.float64)  # rows 2, 3 are zero
    other = B.clone()
    other[2] = torch.tensor([1.0, 0.0])  # zero vs non-zero: cos = 0
    assert anchor_agreement(B, B)["cosine_distance"] == 0.0  # zero vs zero: cos = 1
    assert anchor_agreement(B, other)["cosine_distance"] == pytest.approx(0.25)


def test_bigram_fit_matches_explicit_direct_path():
    g = torch.Generator().manual_seed(4)
    n = 12
    E, W = torch.randn(n, 3, generator=g, dtype=torch.float64), torch.randn(3, n, generator=g, dtype=torch.float64)
    tokens = np.random.default_rng(0).integers(0, n, size=400)
    A = (E @ W).numpy()
    counts = np.zeros((n, n))
    np.add.at(counts, (tokens[:-1], tokens[1:]), 1)
    a, b = np.nonzero(counts)
    log_p = np.log(counts[a, b] / counts.sum(1)[a])
    fit = bigram_fit(E, W, tokens)
    assert fit["bigrams"] == len(a) and fit["tokens"] == 400
    assert fit["pearson"] == pytest.approx(np.corrcoef(log_p, A[a, b])[0, 1], rel=1e-10)
    with pytest.raises(PitError, match=r"ids in \[0, 11\]"):
        bigram_fit(E, W, np.array([0, 12]))


def test_mismatched_shapes_are_named():
    with pytest.raises(PitError, match=r"\(300, 16\).*\(16, 299\)"):
        interface_metrics(torch.zeros(V, D), torch.zeros(D, V - 1))


# ---- the best context-free model in span(W) (pit/analysis/context_free.py) ----------------------
# Tolerances: everything is float64. Newton stops at ||Q^T (p - q)|| < 1e-9; near the optimum the objective is
# within ~||g||^2 / (2 lambda_min) ~ 1e-16 of its minimum, and logsumexp over V = 300 terms rounds at ~V eps ~ 1e-13,
# so H_span == H(q) holds to 1e-9 where it is exact. SciPy's BFGS (an independent optimiser, gtol 1e-10) reaches the
# same minimum only to its own line-search accuracy, hence 1e-6 there.


def zipf_like(n: int, seed: int, zeros: int = 0) -> np.ndarray:
    """A Zipf-like distribution (exponent 1.1, shuffled) over n tokens, the last `zeros` of them never seen."""
    rng = np.random.default_rng(seed)
    q = rng.permutation(1 / np.arange(1, n + 1) ** 1.1)
    q[n - zeros :] = 0
    return q / q.sum()


def entropy(q: np.ndarray) -> float:
    return float(-(q[q > 0] * np.log(q[q > 0])).sum())


def random_orthonormal(n: int, d: int, seed: int) -> torch.Tensor:
    return torch.from_numpy(scipy.stats.ortho_group.rvs(n, random_state=seed)[:, :d].copy())


def np_objective(u, W, q, b):
    """logsumexp(W u + b) - q^T (W u + b) and its gradient W^T (p - q), written out in NumPy."""
    z = W @ u + b
    lse = scipy.special.logsumexp(z)
    return lse - q @ z, W.T @ (np.exp(z - lse) - q)


@pytest.mark.parametrize("square", ["orthonormal", "gaussian"])
def test_context_free_full_rank_reaches_the_unigram_entropy(square):
    n = 64  # d = V: every log q is in span(W), so H_span = H(q)
    g = torch.Generator().manual_seed(0)
    W = random_orthonormal(n, n, 0) if square == "orthonormal" else torch.randn(n, n, generator=g).double() * 3
    q = zipf_like(n, 1)
    fit = fit_context_free(W, q)
    assert fit.rank == n and fit.grad_norm < 1e-9 and fit.unigram_entropy == entropy(q)
    assert fit.span_entropy == pytest.approx(entropy(q), abs=1e-9)
    np.testing.assert_allclose(fit.probs.numpy(), q, atol=1e-9)
    # unseen tokens: pushed towards probability 0, never reaching it (the infimum is H(q), not attained); the gap is
    # the mass left on them, ~ sqrt(5) ||g|| <= ~2.3e-9 at the stop (8.2e-10 measured), hence 1e-8
    zeros = fit_context_free(W, zipf_like(n, 1, zeros=5))
    assert zeros.grad_norm < 1e-9 and zeros.span_entropy == pytest.approx(zeros.unigram_entropy, abs=1e-8)


@pytest.mark.parametrize("case", ["orthonormal", "anisotropic_bias", "rank_deficient"])
def test_context_free_in_a_subspace_matches_bfgs(case):
    Q = random_orthonormal(V, D, 2)
    b = np.zeros(V)
    W = Q
    if case == "anisotropic_bias":  # the same span, stretched, and a head bias
        W = Q @ torch.from_numpy(np.diag(np.logspace(-1, 1, D)) @ scipy.stats.ortho_group.rvs(D, random_state=3))
        b = np.random.default_rng(4).normal(0, 0.5, V)
    elif case == "rank_deficient":  # 2D columns spanning D dimensions
        W = torch.cat([Q, Q @ torch.randn(D, D, generator=torch.Generator().manual_seed(4)).double()], 1)
    q = zipf_like(V, 5, zeros=20)
    fit = fit_context_free(W, q, None if case != "anisotropic_bias" else torch.from_numpy(b))
    assert fit.rank == D and fit.grad_norm < 1e-9 and fit.span_entropy >= fit.unigram_entropy == entropy(q)
    Wn = W.numpy()
    ref = scipy.optimize.minimize(np_objective, np.zeros(Wn.shape[1]), (Wn, q, b), jac=True, method="BFGS",
                                  options={"gtol": 1e-10, "maxiter": 10_000})  # fmt: skip
    assert fit.span_entropy == pytest.approx(ref.fun, abs=1e-6)
    assert np.linalg.norm(Wn.T @ (fit.probs.numpy() - q)) < 1e-8 * max(1, np.linalg.norm(Wn, 2))  # W^T (p - q) ~ 0
    if case == "orthonormal":
        assert fit.span_entropy - fit.unigram_entropy > 0.1  # 16 of 300 dimensions cannot express this q


def test_context_free_reproduces_a_q_in_its_span():
    W = random_orthonormal(V, D, 6) * 2.0
    for b in (np.zeros(V), np.random.default_rng(7).normal(0, 1, V)):
        z = W.numpy() @ np.random.default_rng(8).normal(0, 4, D) + b  # log q in span(W) + b
        q = np.exp(z - scipy.special.logsumexp(z))
        fit = fit_context_free(W, q, torch.from_numpy(b))
        assert fit.span_entropy == pytest.approx(entropy(q), abs=1e-9) and fit.grad_norm < 1e-9
        # p - q ~ H^+ g: ||g|| < 1e-9 over Hessian eigenvalues down to ~min q (~1e-7 here); 6e-11 relative measured
        np.testing.assert_allclose(fit.probs.numpy(), q, rtol=1e-6, atol=1e-12)


def test_context_free_refuses_a_bad_q():
    with pytest.raises(ValueError, match="non-negative"):
        fit_context_free(random_orthonormal(V, D, 0), np.zeros(V))


# ---- models, token files, the command line -----------------------------------------------------
def write_token_file(path, vocab_size=V, n=3000, seed=0):
    """A synthetic val split with bigram structure: t[i+1] = t[i] + 1 or a random token."""
    rng = np.random.default_rng(seed)
    tokens = np.empty(n, dtype=np.uint16)
    tokens[0] = 0
    for i in range(1, n):
        tokens[i] = (tokens[i - 1] + 1) % vocab_size if rng.random() < 0.7 else rng.integers(vocab_size)
    tokens.tofile(path)
    meta = {
        "corpus": "synthetic",
        "documents": 1,
        "dtype": "uint16",
        "eos_id": 0,
        "split": "val",
        "tokenizer": "synthetic",
        "tokenizer_sha256": "0" * 64,
        "tokens": n,
        "vocab_size": vocab_size,
    }
    path.with_suffix(".json").write_text(json.dumps(meta))
    return path


@pytest.fixture(scope="module")
def val_file(tmp_path_factory):
    return write_token_file(tmp_path_factory.mktemp("val") / "val.bin")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    model = build_model("scratch-tiny", InterfaceConfig(kind="pit"), vocab_size=V)
    path = tmp_path_factory.mktemp("ck") / "pit"
    save_pretrained_atomic(model, path)
    return path


def check_layerwise(layers, n_layers):
    assert [r["layer"] for r in layers] == list(range(n_layers + 1))
    for r in layers:
        assert all(0 <= r[k] <= 1 for k in ("in_out_agreement", "in_final_agreement", "out_final_agreement"))
    assert layers[-1]["out_final_agreement"] == 1.0  # the logit lens of the last layer is the model


def test_layerwise_scratch_pit(val_file):
    model = build_model("scratch-tiny", InterfaceConfig(kind="pit"), vocab_size=V).eval()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 2.0)  # a final norm that is not the identity
    layers = layerwise_consistency(model, TokenFile(val_file), positions=24, seed=0, seq_len=32)
    check_layerwise(layers, model.config.num_hidden_layers)
    assert layers == layerwise_consistency(model, TokenFile(val_file), positions=24, seed=0, seq_len=32)


def test_layerwise_gpt2_applies_ln_f_once(val_file):
    model = build_model("gpt2-tiny", vocab_size=V).eval()
    with torch.no_grad():  # ln_f not idempotent: normalising HF's last state twice would show up
        model.transformer.ln_f.weight.uniform_(0.5, 2.0)
        model.transformer.ln_f.bias.normal_(0, 0.5)
    check_layerwise(
        layerwise_consistency(model, TokenFile(val_file), positions=24, seed=1, seq_len=32), model.config.n_layer
    )


def test_context_free_includes_a_head_bias(val_file):
    model = build_model("gpt2-tiny", vocab_size=V).eval()
    with torch.no_grad():
        model.lm_head.bias = torch.nn.Parameter(torch.randn(V, generator=torch.Generator().manual_seed(9)))
    assert head_bias(model) is model.lm_head.bias
    assert head_bias(build_model("scratch-tiny", InterfaceConfig(kind="pit"), vocab_size=V)) is None
    _, W_out = interface_matrices(model, float64=True)
    data = TokenFile(val_file)
    got, counts = context_free(model, W_out, data), token_counts(data)
    assert got == fit_context_free(W_out.T, counts, model.lm_head.bias.double()).as_json()
    assert abs(got["span_entropy"] - fit_context_free(W_out.T, counts).span_entropy) > 1e-3  # the bias counted


def test_val_file_of_another_vocabulary(tmp_path, checkpoint):
    other = write_token_file(tmp_path / "other.bin", vocab_size=500)
    with pytest.raises(PitError, match="vocabulary size 500.*vocabulary size 300"):
        diagnose(checkpoint, other, positions=4)


def test_diagnose_pit_checkpoint(checkpoint, val_file):
    d = diagnose(checkpoint, val_file, positions=8, seq_len=16)
    assert (d["interface"], d["vocab_size"], d["dim"]) == ("pit", V, 64)
    # 0 in exact arithmetic; the float32 bounds at d = 64 and the checkpoint's kappa(T) (tests/tolerances.py)
    iface = load_model(checkpoint).interface
    w = torch.linalg.eigvalsh(iface.transform().double())
    factors = relative_bound(64, 3, (w.max() / w.min()).item())
    assert within(d["delta_ti"], interface_bound(iface)) and within(d["raw"]["principal_angle"], factors)
    assert within(d["polar"]["procrustes_error"], factors)
    assert d["direct_path"]["bigram"]["tokens"] == 3000 and len(d["layerwise"]) == 3
    assert d["val"]["positions"] == 8 and d["val"]["seq_len"] == 16
    assert "Delta_TI" in summary(d) and len(summary(d).splitlines()) == 6 + 2 + 3 + 1
    # the best context-free model: H(q) of the whole val file (the per-seed unigram_entropy), H_span of span(Z T)
    cf = d["context_free"]
    assert set(cf) == {"unigram_entropy", "span_entropy", "rank", "iterations", "grad_norm"}
    assert cf["unigram_entropy"] == unigram_entropy(TokenFile(val_file)) and cf["rank"] == 64
    assert cf["span_entropy"] >= cf["unigram_entropy"] - 1e-9 and cf["grad_norm"] < 1e-9
    assert diagnostics_metrics(d)["span_entropy"] == cf["span_entropy"]
    assert np.isnan(diagnostics_metrics({k: v for k, v in d.items() if k != "context_free"})["span_entropy"])
    # one forward pass serves both: the same numbers as each function on its own
    model, data = load_model(checkpoint), TokenFile(val_file)
    assert d["layerwise"] == layerwise_consistency(model, data, positions=8, seed=0, seq_len=16)
    assert d["lens"] == lens_metrics(model, data, positions=8, seed=0, seq_len=16)


def test_cli_json_and_out(checkpoint, val_file, tmp_path, capsys):
    out = tmp_path / "diag.json"
    assert (
        main(
            [
                "diagnose",
                str(checkpoint),
                "--json",
                "--val-data",
                str(val_file),
                "--positions",
                "4",
                "--seq-len",
                "16",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert set(d) == {
        "checkpoint",
        "model",
        "interface",
        "vocab_size",
        "dim",
        "delta_ti",
        "raw",
        "polar",
        "direct_path",
        "val",
        "layerwise",
        "lens",
        "context_free",
    }
    assert set(d["raw"]) == set(d["polar"]) == {"cosine_distance", "procrustes_error", "principal_angle"}
    assert json.loads(out.read_text()) == d


def test_cli_bad_checkpoint_is_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["diagnose", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a checkpoint" in err
