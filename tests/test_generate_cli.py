"""`pit generate` and `pit chat` on small project checkpoints (PIT scratch, TT teacher family): greedy decoding
gives the tokens `transformers`' `generate` gives on the `pit export` of the checkpoint, sampling repeats under
`--seed`, `pit chat` reads prompts from stdin until EOF; and the checkpoint's model card says what to import."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pit.commands import main
from pit.core.interfaces import InterfaceConfig, PITTying
from pit.models import build_model, convert_teacher
from pit.models.checkpoint import save_pretrained_atomic

pytestmark = pytest.mark.xdist_group("generate_cli")  # its module fixtures are built once, on one worker

PROMPTS = ["def add(a, b):", "The answer is"]


@pytest.fixture(scope="module", params=[("scratch-tiny", "pit"), ("gpt2-tiny", "tt")])
def checkpoint(request, tmp_path_factory):
    """A small checkpoint with the GPT-2 tokenizer, its interface moved away from the init."""
    from pit.data.tokenizers import build_tokenizer

    name, kind = request.param
    root = tmp_path_factory.mktemp(f"gen-{kind}")
    build_tokenizer("gpt2", {"kind": "gpt2", "source": "package"}, root / "tok")
    tok = AutoTokenizer.from_pretrained(root / "tok")
    torch.manual_seed(0)
    if name.startswith("gpt2"):  # teacher family: a GPT-2 converted to the interface
        model = convert_teacher(build_model(name, vocab_size=len(tok), seed=0), InterfaceConfig(kind=kind)).eval()
    else:
        model = build_model(name, InterfaceConfig(kind=kind), vocab_size=len(tok), seed=0).eval()
    with torch.no_grad():
        if isinstance(model.interface, PITTying):
            model.interface.L_offdiag.normal_(std=0.05)
            model.interface.log_diag.normal_(std=0.1)
    save_pretrained_atomic(model, root / "ckpt", tok)
    return root / "ckpt"


def pit_json(capsys, *args: str) -> list[dict]:
    capsys.readouterr()
    assert main(["generate", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def reference_greedy(folder, prompt: str, max_new_tokens: int) -> str:
    """transformers' own generate on the plain model `pit export` wrote (no project code in the loop)."""
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    assert type(model).__module__.startswith("transformers.")
    ids = tok(prompt, return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.eos_token_id)
    return tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)


def test_greedy_equals_transformers_generate_on_the_export(checkpoint, tmp_path, capsys):
    rows = pit_json(capsys, str(checkpoint), *[a for p in PROMPTS for a in ("--prompt", p)], "--max-new-tokens", "12")
    assert [r["prompt"] for r in rows] == PROMPTS
    assert all(r["completion"] for r in rows)
    assert main(["export", str(checkpoint), str(tmp_path / "exported")]) == 0
    for row in rows:
        assert row["completion"] == reference_greedy(tmp_path / "exported", row["prompt"], 12)


def test_sampling_is_deterministic_under_seed(checkpoint, capsys):
    def sample(seed: str) -> str:
        args = ["--prompt", PROMPTS[0], "--max-new-tokens", "16", "--temperature", "1.5", "--top-k", "200"]
        return pit_json(capsys, str(checkpoint), *args, "--seed", seed)[0]["completion"]

    first = sample("1")
    assert sample("1") == first
    assert sample("2") != first


def test_chat_reads_prompts_until_eof(checkpoint, capsys, monkeypatch):
    """One turn per non-empty stdin line (greedy: the same text as `pit generate`), marked `>> Prompt:` /
    `>> Reply:` as litgpt marks them; `--json` gives the same turns as JSON lines."""
    expected = [r["completion"] for r in pit_json(capsys, str(checkpoint), "--prompt", PROMPTS[0], "--prompt", "x =")]
    capsys.readouterr()
    for flags in ([], ["--json"]):
        monkeypatch.setattr(sys, "stdin", io.StringIO(f"{PROMPTS[0]}\n\nx =\n"))
        assert main(["chat", str(checkpoint), "--max-new-tokens", "64", *flags]) == 0
        out = capsys.readouterr().out
        turns = list(zip([PROMPTS[0], "x ="], expected, strict=True))
        if flags:
            assert [json.loads(line) for line in out.splitlines()] == [{"prompt": p, "completion": c} for p, c in turns]
        else:
            assert out == "".join(f">> Prompt: {p}\n>> Reply: {c}\n" for p, c in turns)


def test_model_card_says_what_to_import(checkpoint):
    """Without `import pit.models`, transformers does not know the type; the card names the import and `pit export`."""
    card = (checkpoint / "README.md").read_text()
    assert "import pit.models" in card and f"pit export {'THIS_FOLDER'}" in card
    code = f"from transformers import AutoModelForCausalLM; AutoModelForCausalLM.from_pretrained({str(checkpoint)!r})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode != 0 and "pit_" in proc.stderr
    fixed = f"import pit.models; {code}"
    assert subprocess.run([sys.executable, "-c", fixed], capture_output=True, text=True).returncode == 0


def test_stop_strings_give_the_completions_of_the_text_criterion(checkpoint):
    """transformers' StopStringCriteria (used) and the hand-written decode-every-step criterion (kept for the
    comparison in benchmarks/bench_stop_strings.py) end rows at the same text; frequent stops make both stop."""
    from pit.evaluation.generate import generate, load

    model, tok = load(checkpoint)
    prompts = [f"{p} {i}" for i in range(6) for p in PROMPTS]
    kw = dict(stops=["e", " ", "\n"], max_new_tokens=24, batch_size=4, progress=False)
    ours, theirs = (generate(model, tok, prompts, stop_with=how, **kw) for how in ("text", "stop_strings"))
    assert ours == theirs
    assert all(not any(s in c for s in kw["stops"]) for c in ours)
    full = generate(model, tok, prompts, max_new_tokens=24, batch_size=4, progress=False)
    assert sum(len(c) < len(f) for c, f in zip(ours, full)) >= 3  # rows that stopped early


def test_decoding_beyond_the_context_or_the_seed_range_is_a_one_line_error(checkpoint, capsys):
    """Issue 65 (15): `--max-new-tokens 1000000000` generated past the model's context until killed (257 on these
    256-position models ran past it too), and `--seed 2**70` (beyond numpy's 2**32 - 1) was a traceback; both are
    one-line errors naming the value, for `pit generate` and `pit chat`, before any text is generated (and the
    library's generate refuses too). The largest allowed values are allowed."""
    config = json.loads((checkpoint / "config.json").read_text())
    context = config.get("max_position_embeddings") or config.get("n_positions")
    assert context == 256
    cases = [
        (["--max-new-tokens", str(context)], f"--max-new-tokens {context}: expected at most {context - 1}"),
        (["--max-new-tokens", "1000000000"], "--max-new-tokens 1000000000: expected at most 255"),
        (["--seed", str(2**70), "--temperature", "1"], f"--seed {2**70}: expected an integer from 0 to 4294967295"),
        (["--seed", str(2**32)], f"--seed {2**32}: expected an integer from 0 to 4294967295"),
    ]
    for command in ("generate", "chat"):
        for args, message in cases:
            capsys.readouterr()
            prompt = ["--prompt", PROMPTS[0]] if command == "generate" else []
            code = main([command, str(checkpoint), *prompt, *args])
            out, err = capsys.readouterr()
            assert (code, out, err.count("\n")) == (2, "", 1) and message in err, (command, args, code, out, err)
    from pit.errors import PitError
    from pit.evaluation.generate import check_max_new_tokens, generate, load

    model, tok = load(checkpoint)
    with pytest.raises(PitError, match="--max-new-tokens 256: expected at most 255"):
        generate(model, tok, PROMPTS, max_new_tokens=context, progress=False)
    assert pit_json(capsys, str(checkpoint), "--prompt", PROMPTS[0], "--seed", str(2**32 - 1), "--max-new-tokens", "2")
    check_max_new_tokens(model, context - 1)  # the largest allowed (generating 255 tokens here takes too long)
