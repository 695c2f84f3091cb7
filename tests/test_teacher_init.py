"""Teacher-mode PIT inits (t_init), the copy in convert_teacher, `pit convert-check`, and scratch t_scale.

The formulas are checked against an independent float64 SVD of the teacher embedding E0 = P S Q^T
(U = P Q^T, H = Q S Q^T, sigma = geometric mean of S): docs/models.md, "Teacher init".
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from tolerances import delta_ti_bound, interface_bound, network_depth, relative_bound, within

from pit.commands import main
from pit.core.interfaces import T_INITS, InterfaceConfig
from pit.data.reader import TokenFile
from pit.errors import PitError
from pit.models import build_model
from pit.models.teacher import convert_teacher

V, D = 512, 64


def anisotropic_teacher(vocab_size: int = V, low: float = -0.5, high: float = 1.5, seed: int = 0):
    """gpt2-tiny with random weights whose embedding is multiplied by Q diag(s) Q^T, s log-spaced over 10^low..10^high
    (singular values spread over ~100x on top of the Gaussian table's own spread)."""
    teacher = build_model("gpt2-tiny", vocab_size=vocab_size, seed=seed).eval()
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(D, D, generator=g))
    with torch.no_grad():
        wte = teacher.transformer.wte.weight
        wte.copy_(wte @ (Q * torch.logspace(low, high, D)) @ Q.T)
        ln_f = teacher.transformer.ln_f  # a non-trivial final norm, so the fold is visible
        ln_f.weight.copy_(1 + 0.1 * torch.randn(D, generator=g))
        ln_f.bias.copy_(0.1 * torch.randn(D, generator=g))
    return teacher


def reference(E0: torch.Tensor, t_init: str, a: float = 0.5) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(E, W_out, beta) of each init from an independent float64 SVD; beta W_out is the head after the fold."""
    P, S, Qh = torch.linalg.svd(E0.double(), full_matrices=False)
    sigma = S.log().mean().exp()
    s_hat = S / sigma
    if t_init == "identity":
        return P @ Qh, (P @ Qh).T, 1.0
    if t_init == "inverse_h":
        return E0.double(), Qh.T @ torch.diag(1 / S) @ P.T, 1.0
    if t_init == "head":
        return (P / S) @ Qh, E0.double().T, 1.0
    E = sigma * (P * s_hat.pow(-a)) @ Qh
    W = (Qh.T * s_hat.pow(a)) @ P.T / sigma
    return E, W, (sigma**2).item()


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def factor_bound(model, products: int = 3) -> float:
    """float32 rounding of E = Z T^-1 or W_out = T Z^T rebuilt from L (tests/tolerances.py): `products` d-term
    products, amplified by kappa(T) (kappa(E0)^|a| for T = H^a)."""
    w = torch.linalg.eigvalsh(model.interface.transform().double())
    return relative_bound(D, products, (w.max() / w.min()).item())


# two float32 evaluations of the gpt2-tiny network (2 blocks, d = 64) that round differently
NETWORK = relative_bound(D, network_depth(2))


CASES = [("identity", 0.5), ("inverse_h", 0.5), ("head", 0.5), ("power", 0.5), ("power", 1.0), ("power", -1.0)]


@pytest.mark.parametrize(("t_init", "a"), CASES, ids=[f"{t}-{a}" for t, a in CASES])
def test_each_t_init_gives_its_formula(t_init, a):
    teacher = anisotropic_teacher()
    E0 = teacher.transformer.wte.weight.detach()
    s = torch.linalg.svdvals(E0.double())
    assert s.max() / s.min() > 50, "the test teacher is strongly anisotropic"
    model = convert_teacher(teacher, InterfaceConfig(kind="pit", t_init=t_init, t_power=a))
    E, W = model.interface.input_embedding(), model.interface.output_projection()
    E_ref, W_ref, beta = reference(E0, t_init, a)
    bound = factor_bound(model)
    assert within(rel(E, E_ref), bound, f"{t_init}-{a} E") and within(rel(W, W_ref), bound, f"{t_init}-{a} W")
    assert within(model.interface.delta_ti(), interface_bound(model.interface), f"{t_init}-{a} delta_ti")
    if t_init == "head" or (t_init, a) == ("power", 1.0):
        assert within(rel(beta * W, E0.T), bound)  # the head is the teacher's, exactly (power: after the fold)
    if t_init == "inverse_h" or (t_init, a) == ("power", -1.0):
        assert within(rel(E, E0), bound)  # the input side is the teacher's, exactly
    # the fold: ln_f's gain and bias are the teacher's times beta (1 for all but power), rounded once to float32
    ln_t, ln_m = teacher.transformer.ln_f, model.transformer.ln_f
    assert within(rel(ln_m.weight, beta * ln_t.weight), 2 * 2.0**-24) and within(
        rel(ln_m.bias, beta * ln_t.bias), 2 * 2.0**-24
    )
    assert torch.equal(model.transformer.h[0].attn.c_attn.weight, teacher.transformer.h[0].attn.c_attn.weight)


def test_power_with_a_exact_head_gives_the_teachers_logits_from_the_teachers_input():
    """power(a = 1) makes beta W_out = E0^T exactly; fed the teacher's own input embedding, the converted model
    (blocks copied, beta folded into ln_f) computes the teacher's logits: the fold is exact, not approximate."""
    teacher = anisotropic_teacher()
    model = convert_teacher(teacher, InterfaceConfig(kind="pit", t_init="power", t_power=1.0))
    ids = torch.randint(0, V, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = teacher(ids).logits
        out = model(inputs_embeds=teacher.transformer.wte(ids)).logits
        unfolded = convert_teacher(teacher, InterfaceConfig(kind="pit", t_init="head"))(
            inputs_embeds=teacher.transformer.wte(ids)
        ).logits
    bound = NETWORK + factor_bound(model)  # the network, and W_out rebuilt from T = H's factors
    assert within(rel(out, ref), bound, "power(1) logits")
    assert within(rel(unfolded, ref), bound, "head logits")  # head: W_out = E0^T with ln_f untouched, the same head
    assert rel(model(ids).logits.detach(), ref) > 1e-2  # from its own E = E0 H^^-2 the function differs


@pytest.mark.parametrize("a", [-1.0, 0.0, 0.5, 1.0])
def test_power_keeps_an_isotropic_teacher_exactly(a):
    """E0 = s Q (all singular values s): H = s I, so every power init keeps the teacher's function exactly;
    the paper's T = I does not (it loses s on both sides)."""
    teacher = anisotropic_teacher()
    g = torch.Generator().manual_seed(2)
    Q, _ = torch.linalg.qr(torch.randn(V, D, generator=g, dtype=torch.float64))
    with torch.no_grad():
        teacher.transformer.wte.weight.copy_(7.0 * Q)
    ids = torch.randint(0, V, (2, 12), generator=g)
    with torch.no_grad():
        ref = teacher(ids).logits
        out = convert_teacher(teacher, InterfaceConfig(kind="pit", t_init="power", t_power=a))(ids).logits
        paper = convert_teacher(teacher, InterfaceConfig(kind="pit", t_init="identity"))(ids).logits
    assert within(rel(out, ref), NETWORK + relative_bound(D, 3), f"isotropic power({a})")  # T = s^(2a) I: kappa 1
    assert rel(paper, ref) > 0.1


@pytest.mark.parametrize("kind", ["pit", "tt", "untied"])
def test_convert_teacher_shares_no_tensor_with_the_teacher(kind):
    teacher = anisotropic_teacher()
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    model = convert_teacher(teacher, InterfaceConfig(kind=kind))
    teacher_ptrs = {t.untyped_storage().data_ptr() for t in [*teacher.parameters(), *teacher.buffers()]}
    shared = [
        n
        for n, t in [*model.named_parameters(), *model.named_buffers()]
        if t.untyped_storage().data_ptr() in teacher_ptrs
    ]
    assert not shared, f"converted model shares {shared[:5]} with the teacher"
    with torch.no_grad():  # changing the converted model leaves the teacher as it was
        for p in model.parameters():
            p.add_(1.0)
    after = teacher.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_tt_from_the_polar_factor_is_pit_with_t_identity_at_step_zero():
    """The matched-start control: TT with tt_init polar (W = U of E0 = U H) gives the same logits as PIT with T = I
    on the same teacher, and differs from TT that keeps the teacher's table."""
    teacher = anisotropic_teacher()
    ids = torch.randint(0, V, (2, 16), generator=torch.Generator().manual_seed(1))
    logits = {}
    for name, cfg in [("pit", {"kind": "pit"}), ("polar", {"kind": "tt", "tt_init": "polar"}), ("tt", {"kind": "tt"})]:
        model = convert_teacher(teacher, InterfaceConfig(**cfg)).eval()
        with torch.no_grad():
            logits[name] = model(ids).logits
    # the same function: PIT's E = Z, W_out = Z^T rebuilt through T = I (exact) and TT's table U
    assert within((logits["polar"] - logits["pit"]).abs().max().item(), NETWORK * logits["pit"].abs().max().item())
    assert (logits["tt"] - logits["pit"]).abs().max() > 0.1 * logits["pit"].abs().max()
    assert InterfaceConfig(kind="tt").to_dict().get("tt_init") is None  # old configs stay as they were
    with pytest.raises(PitError, match="tt_init 'x' is unknown"):
        InterfaceConfig(kind="tt", tt_init="x")


def test_config_fields_default_to_the_paper_and_stay_out_of_old_configs():
    old = {"kind": "pit", "trainable_z": False, "t_init": "identity", "diag_clamp": None, "retraction_eps": 0.0}
    cfg = InterfaceConfig.from_dict(old)  # a checkpoint written before t_power / t_scale existed
    assert (cfg.t_power, cfg.t_scale) == (1.0, 1.0)
    assert InterfaceConfig().to_dict() == {**old, "init_std": 0.02}  # default configs serialise as before
    assert InterfaceConfig(t_scale=0.25).to_dict()["t_scale"] == 0.25
    assert InterfaceConfig.from_dict(InterfaceConfig(t_init="power", t_power=0.3).to_dict()).t_power == 0.3
    assert set(T_INITS) == {"identity", "inverse_h", "head", "power"}
    for bad, match in (
        ({"t_power": 1.5}, r"t_power 1.5 is invalid; expected a number in \[-1, 1\]"),
        ({"t_power": "half"}, r"t_power 'half' is invalid"),
        ({"t_scale": 0}, r"t_scale 0 is invalid; expected a number in \(0, inf\]"),
        ({"t_scale": float("nan")}, r"t_scale nan is invalid"),
        ({"t_init": "sqrt"}, r"t_init 'sqrt' is unknown"),
    ):
        with pytest.raises(PitError, match=match):
            InterfaceConfig(**bad)


def test_scratch_t_scale_sets_T_to_c_I():
    c = 1 / (0.02 * math.sqrt(V))  # the scale at which PIT's embedding rows match TT's init norm
    paper = build_model("scratch-tiny", InterfaceConfig(kind="pit"), vocab_size=V, seed=3)
    scaled = build_model("scratch-tiny", InterfaceConfig(kind="pit", t_scale=c), vocab_size=V, seed=3)
    tt = build_model("scratch-tiny", InterfaceConfig(kind="tt"), vocab_size=V, seed=3)
    Z = paper.interface.Z
    assert torch.equal(scaled.interface.Z, Z)  # the same Z, only T changes
    assert torch.equal(scaled.interface.log_diag, torch.full((D,), math.log(c) / 2))
    assert within(rel(scaled.interface.input_embedding(), Z / c), relative_bound(D, 2), "c I embedding")
    assert within(rel(scaled.interface.output_projection(), c * Z.T), relative_bound(D, 2), "c I head")
    assert within(scaled.interface.delta_ti(), delta_ti_bound(D), "c I delta_ti")  # kappa(c I) = 1
    rms = [m.interface.input_embedding().detach().square().sum(1).mean().sqrt().item() for m in (paper, scaled, tt)]
    # sqrt(d/V) exactly: ||Z||_F^2 = d; a float32 sum of V d squares
    assert within(abs(rms[0] - math.sqrt(D / V)), relative_bound(V * D) * math.sqrt(D / V), "rms sqrt(d/V)")
    assert abs(rms[1] / rms[2] - 1) < 0.02  # c = 1 / (0.02 sqrt(V)) gives TT's row norm 0.02 sqrt(d)
    # t_scale = 1 is the paper's init, bit for bit, and writes the same config
    same = build_model("scratch-tiny", InterfaceConfig(kind="pit", t_scale=1.0), vocab_size=V, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(paper.state_dict().values(), same.state_dict().values()))
    assert paper.config.to_dict()["interface"] == same.config.to_dict()["interface"]


def test_t_scale_is_refused_in_teacher_mode():
    with pytest.raises(PitError, match=r"t_scale 0.5 applies to scratch init only"):
        convert_teacher(anisotropic_teacher(), InterfaceConfig(kind="pit", t_scale=0.5))


def test_convert_check_reports_losses_and_errors_per_init(tiny_data, tmp_path, capsys):
    vocab = 50257
    teacher = anisotropic_teacher(vocab_size=vocab)
    teacher.save_pretrained(tmp_path / "teacher")
    val = tiny_data["gpt2"]["val"]
    out = tmp_path / "cc.json"
    argv = ["convert-check", str(tmp_path / "teacher"), "--val-data", val, "--windows", "2", "--seq-len", "32"]
    assert main([*argv, "--t-power", "0.5", "--t-power", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert [r["init"] for r in result["inits"]] == ["identity", "inverse_h", "head", "power(a=0.5)", "power(a=1)"]
    assert "| head | T = H |" in printed and "| power(a=1) |" in printed
    assert result["tt_val_loss"] == result["teacher_val_loss"]  # TT keeps E0: the teacher exactly
    rows = {r["init"]: r for r in result["inits"]}
    kappa = result["spectrum"]["condition"]  # kappa(E0) = kappa(H): T = H^a has kappa(E0)^|a|, |a| <= 1 here
    factors = relative_bound(D, 3, kappa)
    assert within(rows["inverse_h"]["embedding_error"], factors) and within(rows["head"]["head_error"], factors)
    assert within(rows["power(a=1)"]["head_error_folded"], factors) and rows["power(a=1)"]["head_error"] > 0.5
    assert all(within(r["delta_ti"], delta_ti_bound(D, kappa), r["init"]) for r in rows.values())
    # the loss is the mean next-token loss on the first 2 non-overlapping windows (32 predictions each)
    data = TokenFile(val)
    batch = data.windows(data.sequential_starts(32, 2), 32)
    model = convert_teacher(teacher, InterfaceConfig(kind="pit", t_init="head"))
    with torch.no_grad():
        logits = model(batch[:, :-1]).logits.double()
    loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten()).item()
    # the same network on the same windows, perhaps batched differently: float32 rounding of the logits
    assert within(abs(rows["head"]["val_loss"] - loss), NETWORK * loss, "convert-check loss")
    assert within(abs(rows["head"]["minus_teacher"] - (loss - result["teacher_val_loss"])), 2 * NETWORK * loss)
    assert result["positions"] == 2 * 32 and result["spectrum"]["condition"] > 50
    # only the inits asked for
    assert main([*argv, "--t-init", "identity"]) == 0
    assert "| identity |" in capsys.readouterr().out
    assert main([*argv, "--t-power", "2"]) == 2
    assert "t_power 2.0 is invalid" in capsys.readouterr().err


def test_convert_check_refuses_token_files_of_another_tokenizer(tiny_data, tmp_path, capsys):
    """Issue 65, item 9: ids of the 2k BPE on a teacher that carries GPT-2's tokenizer printed a full table; like
    `pit side-effects`, the token file's tokenizer hash must be the one of the teacher folder's tokenizer.json (a
    teacher that carries the 2k BPE's own takes them)."""
    import shutil

    argv = ["--val-data", tiny_data["bpe2k"]["val"], "--windows", "1", "--seq-len", "8", "--t-init", "identity"]
    for name, vocab in (("gpt2", 50257), ("bpe2k", 2000)):
        anisotropic_teacher(vocab_size=vocab).save_pretrained(tmp_path / name)
        shutil.copy(f"{tiny_data[name]['tokenizer']}/tokenizer.json", tmp_path / name)
    capsys.readouterr()
    assert main(["convert-check", str(tmp_path / "gpt2"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "was made with tokenizer " in err and "('bpe2k')" in err, err
    assert f"the checkpoint {str(tmp_path / 'gpt2')!r} carries tokenizer " in err
    assert main(["convert-check", str(tmp_path / "bpe2k"), *argv]) == 0  # its own tokenizer's ids
    assert "| identity |" in capsys.readouterr().out
