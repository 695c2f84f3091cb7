"""`pit train` in continue mode (pit/training/pretrain.py, docs/training.md "Modes", docs/any-model.md): a folder that
already has a token interface (`pit convert`, a run's final/, `pit lora merge`) is trained on as it is, its interface
kept exactly; the run's first measurement, its validation loss before the first update, is `pit convert-check`'s
loss of the same init on the same windows; the folder is an input of the run (its sha256 in run.json), so a finished
run on a changed folder is refused; contradicting interface settings and the wrong mode are one line each."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from tolerances import close, network_depth
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from pit.commands import main
from pit.data.reader import TokenFile
from pit.io import sha256_path

D, LAYERS = 32, 2


def llama_folder(folder: Path, vocab: int, tokenizer: str | None = None) -> Path:
    """A tiny tied Llama as `save_pretrained` writes it (seeded, its embedding spread out so the inits differ), with
    the data's tokenizer when `tokenizer` names one."""
    values = dict(
        vocab_size=vocab, hidden_size=D, intermediate_size=64, num_hidden_layers=LAYERS, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64, tie_word_embeddings=True,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **values))
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(torch.logspace(-0.5, 0.5, D))
    model.save_pretrained(folder)
    if tokenizer is not None:
        AutoTokenizer.from_pretrained(tokenizer).save_pretrained(folder)
    return folder


def spec(start, paths: dict, **kw) -> str:
    """A continue-mode run of a few steps from the folder `start`; its validation windows are the first 4 windows of
    32 tokens."""
    values = dict(
        mode="continue", model=str(start), train_data=paths["train"], val_data=paths["val"], seq_len=32,
        global_batch_tokens=128, micro_batch_size=4, max_steps=2, warmup_steps=0, lr=3e-3, min_lr=3e-4,
        eval_batches=1, final_loss_window=1, mlflow={"enabled": False},
    )  # fmt: skip
    return json.dumps({**values, **kw})


def summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def test_continue_starts_at_the_convert_check_loss_and_keeps_the_interface(tiny_data, tmp_path, capsys):
    paths = tiny_data["bpe2k"]
    vocab = TokenFile(paths["val"]).meta["vocab_size"]
    teacher = llama_folder(tmp_path / "teacher", vocab, paths["tokenizer"])
    pit = tmp_path / "pit"
    assert main(["convert", str(teacher), str(pit), "--t-init", "power"]) == 0
    cc = ["convert-check", str(teacher), "--val-data", paths["val"], "--t-init", "power", "--windows", "4"]
    assert main([*cc, "--seq-len", "32", "--out", str(tmp_path / "cc.json")]) == 0
    (row,) = json.loads((tmp_path / "cc.json").read_text())["inits"]
    assert main(["train", "--spec", spec(pit, paths), "--out", str(tmp_path / "run")]) == 0
    first = summary(tmp_path / "run")
    assert close(torch.tensor(first["initial_val_loss"]), torch.tensor(row["val_loss"]), D, network_depth(LAYERS),
                 "continue: initial loss = convert-check loss")  # fmt: skip
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["inputs"]["model"] == {"path": str(pit), "sha256": sha256_path(pit)}  # where it started from
    assert record["params"]["train"]["interface"]["t_init"] == "power"  # the folder's interface, not the default
    before, after = load_file(pit / "model.safetensors"), load_file(tmp_path / "run" / "final" / "model.safetensors")
    assert torch.equal(before["interface.Z"], after["interface.Z"])  # Z frozen, as converted: no re-conversion
    assert not torch.equal(before["interface.L_offdiag"], after["interface.L_offdiag"])  # L trained
    # again from the run's final/: it starts where the first run ended (the same windows)
    assert main(["train", "--spec", spec(tmp_path / "run" / "final", paths), "--out", str(tmp_path / "run2")]) == 0
    again = summary(tmp_path / "run2")
    assert close(torch.tensor(again["initial_val_loss"]), torch.tensor(first["val_loss"]), D, network_depth(LAYERS),
                 "continue: initial loss = the previous run's final loss")  # fmt: skip
    # the start folder is an input: once it changed, the finished run is not reported done on it
    capsys.readouterr()
    (pit / "README.md").write_text("edited\n")
    assert main(["train", "--spec", spec(pit, paths), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "trained on other inputs: model" in err and err.count("\n") == 1


def test_contradicting_interface_and_wrong_mode_are_one_line(tiny_data, tmp_path, capsys):
    paths = tiny_data["bpe2k"]
    vocab = TokenFile(paths["val"]).meta["vocab_size"]
    teacher = llama_folder(tmp_path / "teacher", vocab)  # no tokenizer in the folder
    pit = tmp_path / "pit"
    assert main(["convert", str(teacher), str(pit), "--kind", "tt"]) == 0
    capsys.readouterr()
    cases = {
        (spec(pit, paths, tokenizer=paths["tokenizer"], interface={"kind": "pit"}),):
            f'interface.kind "pit" contradicts model {str(pit)!r}, whose interface has kind "tt"',
        (spec(pit, paths, tokenizer=paths["tokenizer"], mode="teacher"),):
            "already has a tt interface (written by pit convert, pit train or pit lora merge); mode 'teacher' "
            "converts a plain causal LM: set mode: continue",
        (spec(teacher, paths, tokenizer=paths["tokenizer"]),):
            f"model {str(teacher)!r} is a plain 'llama' model without a token interface",
        (spec(pit, paths),): "carries no tokenizer (no tokenizer_config.json); expected tokenizer:",
        (spec(pit, paths, mode="scratch", model="scratch-tiny"),): "tokenizer '' in mode 'scratch'; expected",
    }  # fmt: skip
    for (text,), message in cases.items():
        assert main(["train", "--spec", text, "--out", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    # the same interface, repeated, is accepted: --print-config shows the folder's, every key
    assert main(["train", "--spec", spec(pit, paths, interface={"kind": "tt"}), "--print-config"]) == 0
    assert "  kind: tt\n" in capsys.readouterr().out


def test_continue_from_a_lora_merge_folder(tiny_data, tmp_path):
    paths = tiny_data["bpe2k"]
    vocab = TokenFile(paths["val"]).meta["vocab_size"]
    teacher = llama_folder(tmp_path / "teacher", vocab, paths["tokenizer"])
    pit = tmp_path / "pit"
    assert main(["convert", str(teacher), str(pit), "--t-init", "head"]) == 0
    lora = dict(base=str(pit), task="mbpp", limit=4, rank=2, alpha=4, max_steps=1, warmup_steps=0, batch_size=2,
                seq_len=64, mlflow={"enabled": False})  # fmt: skip
    assert main(["lora", "train", "--spec", json.dumps(lora), "--out", str(tmp_path / "lora")]) == 0
    merged = tmp_path / "merged"
    assert main(["lora", "merge", "--base", str(pit), "--adapter", str(tmp_path / "lora" / "adapter"),
                 "--out", str(merged)]) == 0  # fmt: skip
    assert main(["train", "--spec", spec(merged, paths), "--out", str(tmp_path / "run")]) == 0
    done = summary(tmp_path / "run")
    assert done["steps"] == 2 and done["interface"] == "pit"
    config = json.loads((tmp_path / "run" / "final" / "config.json").read_text())
    assert config["model_type"] == "pit_llama" and config["interface"]["t_init"] == "head"
    assert (tmp_path / "run" / "final" / "tokenizer.json").is_file()  # the folder's own tokenizer, carried on
