"""PIT for any supported transformers causal LM (pit/models/any_model.py, docs/any-model.md): for tiny random models
of each family (no downloads), the conversion swaps only the token interface, W_out E = I holds after conversion and
after training steps, the head-keeping init keeps the source's head, save/load is bit-exact, `pit export` writes the
source architecture with the same logits and greedy output, and a LoRA adapter trains, merges and reloads. A
Llama-architecture stand-in teacher, trained here, runs through `pit convert`, `pit convert-check` and `pit train`.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from tolerances import close, delta_ti_bound, interface_bound, network_depth, relative_bound, within
from transformers import AutoConfig, AutoModelForCausalLM

from pit.commands import main
from pit.core.interfaces import InterfaceConfig
from pit.data.reader import TokenFile
from pit.errors import PitError
from pit.models import convert_teacher, load_teacher
from pit.models.access import model_delta_ti
from pit.models.any_model import InterfaceCausalLM, final_norm
from pit.models.checkpoint import load_model, save_pretrained_atomic
from pit.models.export import export_checkpoint
from pit.training.lora import lora_targets, merged_model
from pit.training.objective import NextTokenLoss

V, D = 160, 32
BLOCK = dict(
    vocab_size=V,
    hidden_size=D,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=64,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
SOURCES = {  # name -> (model_type, config values)
    "llama": ("llama", {**BLOCK, "tie_word_embeddings": True}),
    "llama-untied": ("llama", {**BLOCK, "tie_word_embeddings": False}),
    "qwen2": ("qwen2", {**BLOCK, "tie_word_embeddings": True}),
    "gemma": ("gemma", {**BLOCK, "tie_word_embeddings": True}),  # input sqrt(d) E[t]
    "gemma2": ("gemma2", {**BLOCK, "tie_word_embeddings": True, "final_logit_softcapping": 2.0}),
    "gpt_neox": ("gpt_neox", {**BLOCK, "tie_word_embeddings": False}),  # untied embed_in / embed_out
    "phi3": ("phi3", {**BLOCK, "tie_word_embeddings": False}),
    "olmo": ("olmo", {**BLOCK, "tie_word_embeddings": False}),  # a final LayerNorm without parameters
    "gpt2": ("gpt2", dict(vocab_size=V, n_embd=D, n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=2)),
}
ALSO = {  # families with the same quirks as one above: conversion checks only
    "mistral": ("mistral", BLOCK),
    "qwen3": ("qwen3", BLOCK),
    "gemma3_text": ("gemma3_text", {**BLOCK, "final_logit_softcapping": 2.0}),
    "olmo2": ("olmo2", BLOCK),
}


def source(name: str):
    """A seeded random source model; norm gains and the head get spread out so that folds and offsets show."""
    model_type, values = {**SOURCES, **ALSO}[name]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **values)).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n or "ln_" in n:
                p.add_(0.3 * torch.randn_like(p))
        model.get_input_embeddings().weight.mul_(torch.logspace(-0.3, 0.3, D))  # anisotropic E0
    return model


def ids(batch: int = 2, length: int = 12, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, V, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", [*SOURCES, *ALSO])
@torch.no_grad()
def test_conversion_swaps_only_the_token_interface(name):
    src, x = source(name), ids()
    untied = convert_teacher(src, InterfaceConfig(kind="untied"))  # E0 and W0 kept: the source exactly
    assert isinstance(untied, type(src)) and isinstance(untied, InterfaceCausalLM)
    # tolerances: float32 rounding at D = 32 (tests/tolerances.py), relative to the reference's largest entry
    assert close(untied(x).logits, src(x).logits, D, network_depth(2), f"{name} untied = source")
    h = src.base_model(x).last_hidden_state  # final norm applied
    head = convert_teacher(src, InterfaceConfig(kind="pit", t_init="head"))  # W_out = W0^T
    kappa_e0 = torch.linalg.cond(src.get_input_embeddings().weight.double()).item()  # T = H, rebuilt from factors
    want = src.get_output_embeddings()(h)
    assert close(head.interface.logits(h), want, D, 3, f"{name} head kept", kappa=kappa_e0)
    kept_input = convert_teacher(src, InterfaceConfig(kind="pit", t_init="inverse_h"))  # E = E0 (the table)
    E0 = src.get_input_embeddings().weight
    assert close(kept_input.interface.input_embedding(), E0, D, 3, f"{name} E = E0", kappa=kappa_e0)
    for model in (head, kept_input, convert_teacher(src, InterfaceConfig(kind="pit"))):
        assert within(model_delta_ti(model), interface_bound(model.interface), f"{name} delta_ti")
    if name == "olmo":
        with pytest.raises(PitError, match="final norm OlmoLayerNorm has no gain to fold beta into"):
            convert_teacher(src, InterfaceConfig(kind="pit", t_init="power"))
        return
    x_norm = torch.randn(3, D)
    power = convert_teacher(src, InterfaceConfig(kind="pit", t_init="power", t_power=1.0))  # head exact, x beta
    beta = final_norm(power)(x_norm).norm() / final_norm(src)(x_norm).norm()
    sigma2 = torch.linalg.svdvals(E0.double()).log().mean().mul(2).exp()  # sigma^2: folded as a gain (Gemma: 1 + w)
    assert beta.item() == pytest.approx(sigma2.item(), rel=1e-4) and abs(sigma2.item() - 1) > 0.5
    # W_out = sigma^-2 E0^T with the norm x sigma^2: E0^T through the norm exactly (the head when tied)
    out, kept = power.interface.logits(final_norm(power)(x_norm)), final_norm(src)(x_norm) @ E0.T
    assert close(out, kept, D, 4, f"{name} power head", kappa=kappa_e0)


def train_steps(model, steps: int = 5, lr: float = 1e-2) -> list[float]:
    """AdamW steps on one fixed batch with the project's objective (the model's own logits when soft-capped)."""
    loss_fn = NextTokenLoss(model).train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    batch, losses = ids(4, 17, seed=2), []
    for _ in range(steps):
        loss = loss_fn(batch[:, :-1], batch[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad()
        model.interface.after_optimizer_step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("name", SOURCES)
def test_training_save_load_export_and_generate(name, tmp_path):
    src = source(name)
    model = convert_teacher(src, InterfaceConfig(kind="pit", t_init="inverse_h", trainable_z=True)).train()
    losses = train_steps(model)
    assert losses[-1] < losses[0] and within(model_delta_ti(model), interface_bound(model.interface), "trained")
    model.eval()
    save_pretrained_atomic(model, tmp_path / "ckpt")
    loaded = load_model(tmp_path / "ckpt")  # AutoModelForCausalLM, after `import pit.models`
    assert type(loaded) is type(model) and model_delta_ti(loaded) == model_delta_ti(model)  # the same bits
    state = loaded.state_dict()
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    x = ids()
    with torch.no_grad():
        assert torch.equal(loaded(x).logits, model(x).logits)
    assert "import pit.models" in (tmp_path / "ckpt" / "README.md").read_text()
    export_checkpoint(tmp_path / "ckpt", tmp_path / "plain")
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "plain", dtype=torch.float32).eval()
    assert type(plain) is type(src) and not plain.config.tie_word_embeddings
    with torch.no_grad():
        assert close(plain(x).logits, loaded(x).logits, D, network_depth(2) + 2, f"{name} export")  # E, W rebuilt
    greedy = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(loaded.generate(x[:1], **greedy), plain.generate(x[:1], **greedy))


@pytest.mark.parametrize("name", SOURCES)
def test_lora_trains_merges_and_reloads(name, tmp_path):
    from peft import LoraConfig, get_peft_model

    base = convert_teacher(source(name), InterfaceConfig(kind="pit"))
    x = ids()
    with torch.no_grad():
        before = base(x).logits
    targets = lora_targets(base.config.model_type, {})  # the family's attention projections
    config = LoraConfig(r=4, lora_alpha=8, target_modules=targets, task_type="CAUSAL_LM", fan_in_fan_out=name == "gpt2")
    peft_model = get_peft_model(base, config)
    assert peft_model.get_nb_trainable_parameters()[0] > 0
    losses = train_steps(peft_model.get_base_model(), steps=3)
    assert losses[-1] < losses[0]
    merged = merged_model(peft_model)
    save_pretrained_atomic(merged, tmp_path / "merged")
    reloaded = load_model(tmp_path / "merged")
    with torch.no_grad():
        after = merged(x).logits
        assert close(reloaded(x).logits, after, D, network_depth(2), f"{name} merged reloaded")
    assert (after - before).abs().max() > 1e-3
    assert within(model_delta_ti(reloaded), interface_bound(reloaded.interface), f"{name} merged delta_ti")


@pytest.mark.parametrize("name", [*SOURCES, *ALSO])
def test_every_family_converts_from_a_save_pretrained_folder(name, tmp_path, capsys):
    """A checkpoint as transformers' own `save_pretrained` writes it (GPT-NeoX's head is `embed_out` in the file,
    `lm_head` in the model) passes the weight check, `pit convert` and `load_model`, with the source's logits."""
    from pit.models.weights import tensor_shapes

    src = source(name)
    src.save_pretrained(tmp_path / "src")
    if name == "gpt_neox":
        assert "embed_out.weight" in tensor_shapes(tmp_path / "src")
    assert main(["convert", str(tmp_path / "src"), str(tmp_path / "out"), "--kind", "untied"]) == 0, capsys.readouterr()
    converted, x = load_model(tmp_path / "out"), ids()
    with torch.no_grad():
        assert close(converted(x).logits, src(x).logits, D, network_depth(2), f"{name} converted folder")


def test_unsupported_and_converted_sources_are_refused(tmp_path):
    converted = convert_teacher(source("llama"), InterfaceConfig(kind="pit"))
    with pytest.raises(PitError, match="already has a token interface"):
        convert_teacher(converted, InterfaceConfig(kind="pit"))
    converted.save_pretrained(tmp_path / "pit")
    with pytest.raises(PitError, match=r"model_type 'pit_llama'\); expected a plain causal LM of a supported family"):
        load_teacher(str(tmp_path / "pit"))
    cohere = AutoModelForCausalLM.from_config(AutoConfig.for_model("cohere", **BLOCK))
    with pytest.raises(PitError, match=r"model_type 'cohere' is not a supported causal LM; expected one of"):
        convert_teacher(cohere, InterfaceConfig(kind="pit"))


def llama_standin(vocab_size: int, train_file: str, steps: int = 60):
    """A tiny tied Llama-architecture teacher trained here on real tokens (the Llama family's stand-in)."""
    values = {**BLOCK, "vocab_size": vocab_size, "tie_word_embeddings": True, "bos_token_id": 0, "eos_token_id": 0}
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **values)).train()
    data = TokenFile(train_file)
    loss_fn, opt = NextTokenLoss(model), torch.optim.AdamW(model.parameters(), lr=1e-2)
    starts = data.random_starts(steps * 8, 32, np.random.default_rng(0))
    for i in range(steps):
        batch = data.windows(starts[i * 8 : (i + 1) * 8], 32)
        loss_fn(batch[:, :-1], batch[:, 1:]).backward()
        opt.step()
        opt.zero_grad()
    return model.eval()


def test_padded_llama_standin_through_convert_check_convert_and_teacher_mode(tiny_data, tmp_path, capsys):
    from pit.training.args import PretrainArgs
    from pit.training.pretrain import train

    paths = tiny_data["bpe2k"]
    vocab = TokenFile(paths["val"]).meta["vocab_size"]
    teacher = llama_standin(vocab + 8, paths["train"])  # rows past the tokenizer's ids, as Qwen2's and Pythia's
    teacher.save_pretrained(tmp_path / "teacher")
    argv = ["convert-check", str(tmp_path / "teacher"), "--val-data", paths["val"], "--windows", "2", "--seq-len", "32"]
    assert main([*argv, "--out", str(tmp_path / "cc.json")]) == 0
    result = json.loads((tmp_path / "cc.json").read_text())
    rows = {r["init"]: r for r in result["inits"]}
    assert result["teacher_val_loss"] < math.log(vocab) - 0.4  # it learned (a uniform guess: log V = 7.6)
    # tied: TT is the teacher (a loss is a mean of log-softmaxes: the logits' float32 rounding, relative)
    loss_bound = relative_bound(D, network_depth(2)) * result["teacher_val_loss"]
    assert within(abs(result["tt_val_loss"] - result["teacher_val_loss"]), loss_bound, "tt = teacher loss")
    # relative errors of E = E0 and W_out = E0^T rebuilt from T's factors (3 products, kappa(T) = kappa(E0))
    kappa_e0 = torch.linalg.cond(teacher.get_input_embeddings().weight.double()).item()
    factors = relative_bound(D, 3, kappa=kappa_e0)
    assert within(rows["inverse_h"]["embedding_error"], factors) and within(rows["head"]["head_error"], factors)
    assert within(rows["power(a=1)"]["head_error_folded"], factors)
    assert all(within(r["delta_ti"], delta_ti_bound(D, kappa_e0), r["init"]) for r in rows.values())
    assert "| head | T = H |" in capsys.readouterr().out
    # pit convert + pit export: the converted folder loads as the Llama class with the interface
    assert main(["convert", str(tmp_path / "teacher"), str(tmp_path / "pit"), "--t-init", "head"]) == 0
    printed = capsys.readouterr()
    assert "PitLlamaForCausalLM (pit, t_init head)" in printed.out
    assert "\r" not in printed.err  # stderr not a terminal: transformers' loading and saving bars are off
    assert type(load_model(tmp_path / "pit")).__name__ == "PitLlamaForCausalLM"
    assert main(["convert", str(tmp_path / "teacher"), str(tmp_path / "pit")]) == 2  # not empty, no --force
    # one teacher-mode training run from the Llama folder
    spec = dict(
        mode="teacher",
        model=str(tmp_path / "teacher"),
        interface={"kind": "pit", "t_init": "head"},
        train_data=paths["train"],
        val_data=paths["val"],
        tokenizer=paths["tokenizer"],
        seq_len=32,
        global_batch_tokens=256,
        micro_batch_size=4,
        max_steps=3,
        warmup_steps=1,
        lr=3e-3,
        min_lr=3e-4,
        eval_batches=2,
        final_loss_window=2,
        mlflow={"enabled": False},
    )
    summary = train(PretrainArgs.from_dict(spec), tmp_path / "run")
    final = load_model(tmp_path / "run" / "final")
    assert type(final).__name__ == "PitLlamaForCausalLM"
    assert within(model_delta_ti(final), interface_bound(final.interface), "teacher-mode run")
    assert abs(summary["first_step_loss"] - rows["head"]["val_loss"]) < 1.0  # starts from the teacher, not scratch
    # the rest of the pipeline reads it like any checkpoint: diagnostics, side effects, generation
    final_model, final = final, str(tmp_path / "run" / "final")
    capsys.readouterr()
    diag = ["diagnose", final, "--val-data", paths["val"], "--positions", "4", "--seq-len", "16", "--json"]
    assert main([*diag, "--bigram-tokens", "4000", "--out", str(tmp_path / "d.json")]) == 0
    assert within(json.loads((tmp_path / "d.json").read_text())["delta_ti"], interface_bound(final_model.interface))
    fx = ["side-effects", str(tmp_path / "pit"), final, "--val-data", paths["val"], "--windows", "2"]
    assert main([*fx, "--seq-len", "32"]) == 0
    assert main(["generate", final, "--prompt", "def f(x):", "--max-new-tokens", "4"]) == 0
