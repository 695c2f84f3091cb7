"""Model families, checkpoints, export and `pit arch`."""

import json
import os
import subprocess
import sys

import pytest
import torch
from tolerances import close, network_depth, relative_bound, within
from transformers import AutoModelForCausalLM, CohereForCausalLM, GPT2LMHeadModel

from pit.core.interfaces import InterfaceConfig, PITTying
from pit.errors import PitError
from pit.models import PitForCausalLM, PitGPT2LMHeadModel, build_model, convert_teacher, get_spec, load_teacher
from pit.models.checkpoint import load_model, save_pretrained_atomic
from pit.models.export import export_untied
from pit.models.scratch import rope_cos_sin

KINDS = ["pit", "tt", "untied"]


def perturb_(model):
    """Move the interface and gates away from their init so round trips test real values."""
    with torch.no_grad():
        iface = model.interface
        if isinstance(iface, PITTying):
            iface.L_offdiag.normal_(std=0.05)
            iface.log_diag.normal_(std=0.1)
        for name, p in model.named_parameters():
            if name.endswith(".gate"):
                p.normal_()
    return model


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    """A tiny GPT-2-architecture teacher saved like a hub checkpoint (tied wte/lm_head)."""
    path = tmp_path_factory.mktemp("teacher")
    teacher = build_model("gpt2-tiny", seed=0)
    with torch.no_grad():
        teacher.transformer.wte.weight.mul_(torch.logspace(-0.5, 0.5, teacher.config.n_embd))
    teacher.save_pretrained(path)
    return path


@pytest.mark.parametrize("kind", KINDS)
def test_scratch_round_trip_and_export(kind, tmp_path):
    model = perturb_(build_model("scratch-tiny", InterfaceConfig(kind=kind), vocab_size=1000, seed=0)).eval()
    ids = torch.randint(0, 1000, (2, 24))
    ref = model(ids).logits
    save_pretrained_atomic(model, tmp_path / "ck")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "ck")
    assert isinstance(loaded, PitForCausalLM)
    assert torch.equal(loaded(ids).logits, ref)
    if kind == "pit":
        assert {n for n, _ in loaded.interface.named_parameters()} == {"Z", "L_offdiag", "log_diag"}
        assert not loaded.interface.Z.requires_grad, "Z stays frozen after loading"

    env = {k: v for k, v in os.environ.items() if not k.endswith("_DISABLE_PROGRESS_BARS")}  # pit's own choice
    rc = subprocess.run(
        [sys.executable, "-m", "pit", "export", str(tmp_path / "ck"), str(tmp_path / "plain")],
        capture_output=True,  # bytes: text mode would turn a bar's carriage returns into line ends
        env=env,
    )
    assert rc.returncode == 0, rc.stderr.decode()
    assert b"\r" not in rc.stderr  # stderr not a terminal: no "Loading weights" / "Writing model shards" bars
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "plain")
    assert isinstance(plain, CohereForCausalLM)
    assert plain.config.tie_word_embeddings is False
    out = plain(ids).logits
    assert close(out, ref, 64, network_depth(2) + 2, f"{kind} scratch export")  # E and W_out rebuilt from Z, L


@pytest.mark.parametrize("kind", KINDS)
def test_teacher_conversion_round_trip_and_export(kind, teacher_dir, tmp_path):
    teacher = load_teacher(str(teacher_dir))
    model = perturb_(convert_teacher(teacher, InterfaceConfig(kind=kind)))
    ids = torch.randint(0, 50257, (2, 16))
    ref = model(ids).logits
    if kind == "tt":
        assert torch.equal(ref, teacher(ids).logits), "TT conversion keeps the teacher exactly"
    model.save_pretrained(tmp_path / "ck")
    loaded = load_model(tmp_path / "ck", vocab_size=50257)
    assert isinstance(loaded, PitGPT2LMHeadModel)
    assert torch.equal(loaded(ids).logits, ref)

    plain = export_untied(loaded)
    plain.save_pretrained(tmp_path / "plain")
    reread = AutoModelForCausalLM.from_pretrained(tmp_path / "plain")
    assert type(reread) is GPT2LMHeadModel and reread.config.tie_word_embeddings is False
    out = reread(ids).logits
    kappa = torch.linalg.cond(teacher.transformer.wte.weight.double()).item()  # E, W_out rebuilt through T
    assert close(out, ref, 64, network_depth(2) + 2, f"{kind} teacher export", kappa=kappa)


def test_teacher_pit_inverse_h_starts_at_teacher_embedding(teacher_dir):
    teacher = load_teacher(str(teacher_dir))
    model = convert_teacher(teacher, InterfaceConfig(kind="pit", t_init="inverse_h"))
    E0 = teacher.transformer.wte.weight
    E = model.interface.input_embedding()
    kappa = torch.linalg.cond(E0.double()).item()  # T = H^-1: kappa(T) = kappa(E0), E rebuilt through 3 products
    assert within(((E - E0).norm() / E0.norm()).item(), relative_bound(64, 3, kappa), "inverse_h E = E0")
    ids = torch.randint(0, 50257, (1, 9))
    assert close(model.transformer.wte(ids), teacher.transformer.wte(ids), 64, 3, "wte", kappa=kappa)


@pytest.mark.parametrize("name,kind", [("scratch-tiny", "pit"), ("gpt2-tiny", None)])
def test_generate_with_kv_cache_equals_full_recompute(name, kind):
    model = build_model(name, InterfaceConfig(kind=kind) if kind else None, vocab_size=500, seed=0).eval()
    prompt = torch.randint(0, 500, (2, 5))
    out = model.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0)
    seq = prompt
    for _ in range(6):
        nxt = model(seq, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
    assert torch.equal(out, seq)


def test_rope_table_equals_direct_computation():
    """The table (positions 0 .. max_position_embeddings - 1, made once) gives `rope_cos_sin`'s values bit for bit;
    positions it does not hold (past + T beyond it, or given by the caller) are computed."""
    model = build_model("scratch-tiny", InterfaceConfig(kind="tt"), vocab_size=500, seed=0)
    rope, n = model.rope, model.config.max_position_embeddings
    for past, T, dtype in ((0, 17, torch.float32), (9, 5, torch.bfloat16), (n - 3, 8, torch.float32)):
        positions = torch.arange(past, past + T)[None]
        direct = rope_cos_sin(positions, rope.head_dim, rope.theta, dtype)
        for got, want in zip(rope(past, T, None, dtype), direct):
            assert got.dtype == dtype and torch.equal(got.expand_as(want), want)
    given = torch.tensor([[4, 2, 900]])
    direct = rope_cos_sin(given, rope.head_dim, rope.theta, torch.float32)
    assert torch.equal(rope(0, 3, given, torch.float32)[1], direct[1])


def test_left_padded_batch_matches_single_sequences():
    model = build_model("scratch-tiny", InterfaceConfig(kind="pit"), vocab_size=500, seed=0).eval()
    a, b = torch.randint(1, 500, (1, 7)), torch.randint(1, 500, (1, 4))
    batch = torch.cat([a, torch.cat([torch.zeros(1, 3, dtype=torch.long), b], 1)])
    mask = (torch.arange(7)[None] >= torch.tensor([[0], [3]])).long()
    out = model.generate(batch, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
    for row, single in ((0, a), (1, b)):
        alone = model.generate(single, max_new_tokens=4, do_sample=False, pad_token_id=0)
        assert torch.equal(out[row, -4:], alone[0, -4:])


def test_bad_checkpoints_and_names_are_named(tmp_path, teacher_dir):
    with pytest.raises(PitError, match=r"unknown model name 'scratch-999m'"):
        get_spec("scratch-999m")
    with pytest.raises(PitError, match=r"does not exist"):
        load_model(tmp_path / "missing")
    (tmp_path / "notack").mkdir()
    (tmp_path / "notack" / "weights.txt").write_text("x")
    with pytest.raises(PitError, match=r"no config.json"):
        load_model(tmp_path / "notack")
    model = build_model("scratch-tiny", InterfaceConfig(kind="pit"), vocab_size=1000)
    model.save_pretrained(tmp_path / "v1000")
    with pytest.raises(PitError, match=r"vocabulary size 1000; expected 32000"):
        load_model(tmp_path / "v1000", vocab_size=32000)
    # weights of one vocabulary, config of another
    cfg = json.loads((tmp_path / "v1000" / "config.json").read_text())
    cfg["vocab_size"] = 2000
    (tmp_path / "v1000" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(PitError, match=r"interface.Z has 1000 rows but config.json says vocab_size = 2000"):
        load_model(tmp_path / "v1000")
    # a PIT checkpoint whose Z was damaged
    from safetensors.torch import load_file, save_file

    good = build_model("scratch-tiny", InterfaceConfig(kind="pit"), vocab_size=1000)
    good.save_pretrained(tmp_path / "bad")
    state = load_file(tmp_path / "bad" / "model.safetensors")
    state["interface.Z"] = state["interface.Z"] * 2
    save_file(state, tmp_path / "bad" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(PitError, match=r"orthonormal"):
        load_model(tmp_path / "bad")
    with pytest.raises(PitError, match=r"pretrained teacher"):
        build_model("cerebras-gpt-256m")
    with pytest.raises(PitError, match=r"cannot load teacher"):
        load_teacher(str(tmp_path / "no-such-teacher"))


def test_cli_bad_input_is_one_line(tmp_path):
    rc = subprocess.run(
        [sys.executable, "-m", "pit", "export", str(tmp_path / "nope"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
    )
    assert rc.returncode == 2
    assert rc.stderr.strip().count("\n") == 0 and "does not exist" in rc.stderr
    assert not (tmp_path / "out").exists()


def test_arch_matches_table3():
    rc = subprocess.run([sys.executable, "-m", "pit", "arch", "--json"], capture_output=True, text=True, check=True)
    rows = {r["model"]: r for r in json.loads(rc.stdout)}
    assert list(rows) == ["scratch-133m", "scratch-303m", "scratch-613m", "scratch-1.17b"]
    for row in rows.values():
        paper = row["paper"]
        assert abs(row["params"] - paper["params"]) / paper["params"] < 0.005, row
        assert row["embed_pct"] == paper["embed_pct"], row
        assert row["n_kv_heads"] * 4 == row["n_heads"]
        # d_head = 64 where d / n_h allows it; XL: q width 1600, KV width 400 as 20 + 5 heads of 80 (configs.py)
        assert row["d_head"] == (64 if row["model"] != "scratch-1.17b" else 80)


def test_scratch_block_is_parallel_gated_gqa():
    model = build_model("scratch-133m", InterfaceConfig(kind="tt"), device="meta")
    block = model.layers[0]
    assert block.attn.k_proj.out_features == 3 * 64 and block.attn.q_proj.out_features == 768
    assert block.mlp.up_proj.out_features == 2304
    assert block.attn.gate.shape == (768,)
    assert len(model.layers) == 16
