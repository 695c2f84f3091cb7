"""What `pit convert`, `pit export` and `pit teacher materialize` write (issue 66, item 4): the teacher's chat template
travels with its tokenizer (as `chat_template.jinja` or inside tokenizer_config.json), model files get the modes a
plain `open` gives under the process umask (safetensors writes 0600), export states its logit check as a relative
gap against pit/core/rounding.py's float32 bound, a hub id in the hub cache converts with the hub unreachable (no
retries), and the GGUF loader's progress bar is plain lines in a log (no carriage returns).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import write_tiny_gguf
from test_first_errors import LIMIT_S, closed_port_endpoint, timed
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from pit.commands import main
from pit.core.rounding import network_depth, relative_bound
from pit.errors import PitError
from pit.io import atomic_path
from pit.models.checkpoint import load_model
from pit.models.export import check_logits, export_untied

TEMPLATE = "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
WORDS = ["<unk>", "<s>", "</s>", "user", "assistant", "hello", "world", ":"]


def tiny_folder(path: Path, template_in: str) -> Path:
    """A tiny tied Llama (V = 32 rows, the tokenizer's 8 words first) with a word-level tokenizer whose chat
    template is in `chat_template.jinja` (as transformers 5 saves it) or in tokenizer_config.json's `chat_template`
    (as older releases do)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = TEMPLATE
    fast.save_pretrained(path)
    if template_in == "config":
        (path / "chat_template.jinja").unlink()
        config = json.loads((path / "tokenizer_config.json").read_text())
        (path / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATE}))
    values = dict(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)  # fmt: skip
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **values)).save_pretrained(path)
    return path


def modes(folder: Path) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in [folder, *folder.rglob("*")]}


@pytest.fixture
def umask_027():
    kept = os.umask(0o027)
    yield
    os.umask(kept)


@pytest.mark.parametrize("template_in", ["jinja", "config"])
def test_convert_and_export_carry_the_chat_template_and_follow_the_umask(tmp_path, capsys, umask_027, template_in):
    src = tiny_folder(tmp_path / "src", template_in)
    assert stat.S_IMODE((src / "model.safetensors").stat().st_mode) == 0o600  # safetensors' own mode, as reported
    chat = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "world"}]
    want = AutoTokenizer.from_pretrained(src).apply_chat_template(chat, tokenize=False)
    assert want == "<s>user: hello</s><s>assistant: world</s>"
    assert main(["convert", str(src), str(tmp_path / "pit"), "--t-init", "power"]) == 0
    assert main(["export", str(tmp_path / "pit"), str(tmp_path / "plain")]) == 0
    printed = capsys.readouterr().out.splitlines()[-1]
    for out in ("pit", "plain"):
        folder = tmp_path / out
        assert AutoTokenizer.from_pretrained(folder).apply_chat_template(chat, tokenize=False) == want, out
        if template_in == "jinja":
            assert (folder / "chat_template.jinja").read_text() == TEMPLATE
        else:
            assert json.loads((folder / "tokenizer_config.json").read_text())["chat_template"] == TEMPLATE
        assert set(modes(folder).values()) == {0o750, 0o640}, modes(folder)  # 0o777 / 0o666 & ~0o027
    model = load_model(tmp_path / "pit")
    w = torch.linalg.eigvalsh(model.interface.transform().double())
    bound = relative_bound(16, network_depth(2) + 2, (w.max() / w.min()).item())
    tail = f"relative (max |difference| / max |logit| over 16 tokens; bound {bound:.1e}: float32 rounding at d = 16"
    assert "; logits within " in printed and f"of the source's, {tail}, depth 16)" in printed


def test_export_refuses_logits_beyond_the_rounding_bound(tmp_path):
    src = tiny_folder(tmp_path / "src", "jinja")
    assert main(["convert", str(src), str(tmp_path / "pit"), "--kind", "tt"]) == 0
    model = load_model(tmp_path / "pit")
    exported = export_untied(model)
    assert check_logits(model, exported).gap <= relative_bound(16, network_depth(2) + 2)
    with torch.no_grad():
        exported.model.norm.weight.mul_(1 + 1e-3)  # a change far above float32 rounding
    refused = r"differ from the checkpoint's by .* relative \(max \|difference\| / max \|logit\| over 16 tokens\), "
    with pytest.raises(PitError, match=refused + r"above .*, the float32 rounding bound at d = 16, depth 16"):
        check_logits(model, exported)


def test_atomic_path_gives_the_umask_modes(tmp_path, umask_027):
    with atomic_path(tmp_path / "f.bin") as tmp:
        os.close(os.open(tmp, os.O_CREAT | os.O_WRONLY, 0o600))  # as safetensors creates its file
    with atomic_path(tmp_path / "d") as tmp:
        tmp.mkdir(mode=0o700)
        os.close(os.open(tmp / "w", os.O_CREAT | os.O_WRONLY, 0o600))
        os.close(os.open(tmp / "run.sh", os.O_CREAT | os.O_WRONLY, 0o700))
    assert stat.S_IMODE((tmp_path / "f.bin").stat().st_mode) == 0o640
    assert modes(tmp_path / "d") == {"d": 0o750, "w": 0o640, "run.sh": 0o750}


def hub_cache(home: Path, repo: str, folder: Path) -> None:
    """`folder`'s files as huggingface_hub's cache holds a download of `repo` (refs/main -> one snapshot)."""
    revision = "0" * 40
    root = home / "hub" / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / revision
    snapshot.mkdir(parents=True)
    for f in folder.iterdir():
        (snapshot / f.name).write_bytes(f.read_bytes())
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(revision)


def test_a_cached_hub_id_converts_with_the_hub_unreachable(tmp_path):
    hub_cache(tmp_path / "hf", "someorg/tiny", tiny_folder(tmp_path / "src", "jinja"))
    env = {"HF_HUB_OFFLINE": None, "TRANSFORMERS_OFFLINE": None, "HF_HOME": str(tmp_path / "hf")}
    env["HF_ENDPOINT"] = closed_port_endpoint()
    proc, seconds = timed([sys.executable, "-m", "pit", "convert", "someorg/tiny", "out"], tmp_path, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the hub unreachable, then the cache alone: no retries (transformers' adapter look-up retried 5 times)
    assert "Retrying" not in proc.stderr and seconds < LIMIT_S, seconds
    assert (tmp_path / "out/chat_template.jinja").read_text() == TEMPLATE  # the tokenizer from the cache too


def test_the_gguf_loader_bar_is_plain_lines_in_a_log(tmp_path):
    """transformers' GGUF loader calls tqdm itself ("Converting and de-quantizing GGUF tensors"), past the switch
    `pit` turns the libraries' bars off with: in a log (stderr a file) it is lines, no carriage returns."""
    write_tiny_gguf(tmp_path / "tiny.gguf")
    log = tmp_path / "materialize.log"
    start = time.monotonic()
    with open(log, "w") as f:
        cmd = [sys.executable, "-m", "pit", "teacher", "materialize", str(tmp_path / "tiny.gguf"), "--out", "t"]
        code = subprocess.run(cmd, cwd=tmp_path, stdout=f, stderr=subprocess.STDOUT, timeout=300).returncode
    text = log.read_bytes().decode()  # (read_text would turn each \r into \n)
    assert code == 0 and (tmp_path / "t/model.safetensors").is_file(), (text[-2000:], time.monotonic() - start)
    assert "\r" not in text
    assert [line for line in text.splitlines() if line.startswith("Converting and de-quantizing GGUF tensors")], text
