"""docs/your-model-your-data.md runs as written, and is the chain's acceptance test: a tiny Llama saved with
`save_pretrained` -> `pit convert` -> `pit data prepare` on a folder of .txt files -> `pit train` (continue mode)
-> `pit train` again from its final/ -> `pit export` -> plain `transformers` logits equal to the trained PIT model's.

The page's blocks marked `<!-- test: run -->` run in a temporary folder, in order: Python blocks in-process, bash
lines starting with `pit` in-process through `pit.commands.main` (the same program as the console script), any other
bash line with bash; a block marked `<!-- test: file NAME -->` is written to NAME first."""

from __future__ import annotations

import json
import re
import shlex
import subprocess

import torch
from helpers import ROOT
from tolerances import close, network_depth
from transformers import AutoModelForCausalLM

from pit.commands import main

PAGE = ROOT / "docs" / "your-model-your-data.md"
BLOCK = re.compile(r"<!-- test: (run|file (\S+)) -->\n```(\w+)\n(.*?)```", re.S)


def commands(bash: str) -> list[str]:
    """The commands of a bash block: one per line, a trailing backslash joins the next line."""
    return [c.strip() for c in bash.replace("\\\n", " ").splitlines() if c.strip() and not c.lstrip().startswith("#")]


def run_block(language: str, text: str) -> None:
    if language == "python":
        exec(compile(text, str(PAGE), "exec"), {"__name__": "__page__"})
        return
    assert language == "bash", language
    for command in commands(text):
        argv = shlex.split(command, comments=True)
        if argv[0] == "pit":
            assert main(argv[1:]) == 0, command
        else:
            subprocess.run(command, shell=True, check=True, executable="/bin/bash")


def test_the_page_runs_and_the_exported_model_has_the_trained_logits(tmp_path, monkeypatch):
    blocks = BLOCK.findall(PAGE.read_text())
    assert len(blocks) >= 5  # the stand-ins, prepare + convert, train.yaml, train x2 + export, the check
    monkeypatch.chdir(tmp_path)
    for mark, name, language, text in blocks:
        if mark.startswith("file"):
            (tmp_path / name).write_text(text)
        else:
            run_block(language, text)
    # the chain: the second run continued the first (its start = the first's end), the export is plain Llama
    first, second = (json.loads((tmp_path / r / "summary.json").read_text()) for r in ("run1", "run2"))
    assert first["mode"] == second["mode"] == "continue" and second["interface"] == "pit"
    config = json.loads((tmp_path / "my-model-trained" / "config.json").read_text())
    assert config["model_type"] == "llama" and config["tie_word_embeddings"] is False
    trained = AutoModelForCausalLM.from_pretrained(tmp_path / "run2" / "final").eval()
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "my-model-trained").eval()
    assert type(trained).__name__ == "PitLlamaForCausalLM" and type(plain).__name__ == "LlamaForCausalLM"
    ids = torch.randint(0, 50257, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = trained(ids).logits, plain(ids).logits
    assert close(b, a, 32, network_depth(2), "exported logits = trained PIT logits")
    assert close(torch.tensor(second["initial_val_loss"]), torch.tensor(first["val_loss"]), 32, network_depth(2),
                 "run2 starts where run1 ended")  # fmt: skip
