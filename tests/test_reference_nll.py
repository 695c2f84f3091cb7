"""The reference-solution NLL of `pit evaluate` (pit.evaluation.likelihood) and its Table 4 columns."""

from __future__ import annotations

import json
import math

import pytest
import torch

from pit.evaluation.evaluate import Sampling, evaluate_task
from pit.evaluation.likelihood import reference_nll
from pit.evaluation.tasks import load_task
from pit.models.build import build_model


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    from pit.data.tokenizers import build_tokenizer

    folder = tmp_path_factory.mktemp("tok") / "gpt2"
    build_tokenizer("gpt2", {"kind": "gpt2", "source": "package"}, folder)
    return AutoTokenizer.from_pretrained(folder)


def problems(limit: int = 2) -> tuple[list[str], list[str]]:
    """Prompts and references of different lengths: GSM8K worked solutions, SVAMP one-number answers."""
    prompts, refs = [], []
    for name in ("gsm8k", "svamp"):
        task = load_task(name, limit=limit)
        prompts += [task.prompt(i) for i in task.records]
        refs += [task.solution(i) for i in task.records]
    return prompts, refs


def plain_nll(model, tokenizer, prompt: str, reference: str, context: int) -> tuple[float, int]:
    """Independent: one forward per problem, log-softmax in float64, the reference tokens' log-probs summed.
    Over the context, the prompt keeps its last tokens; a reference over context - 1 tokens keeps its first."""
    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    r = tokenizer(reference, add_special_tokens=False)["input_ids"][: context - 1]
    p = p[-(context - len(r)) :]
    ids = torch.tensor([p + r])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), dim=-1)
    total = -sum(logp[len(p) - 1 + j, tok].item() for j, tok in enumerate(r))
    return total, len(r)


@pytest.mark.parametrize("name", ["gpt2-tiny", "scratch-tiny"])
def test_nll_equals_a_plain_per_problem_computation(tokenizer, name):
    model = build_model(name, vocab_size=len(tokenizer), seed=3).eval()
    prompts, refs = problems()
    got = reference_nll(model, tokenizer, prompts, refs, batch_size=3)  # batches of mixed lengths (padding)
    pairs = [plain_nll(model, tokenizer, p, r, 10**6) for p, r in zip(prompts, refs)]
    total, tokens = sum(s for s, _ in pairs), sum(n for _, n in pairs)
    assert got["nll_tokens"] == tokens and got["nll_problems"] == 4
    assert tokens > 4 * 3 and got["nll_prompts_truncated"] == got["nll_references_truncated"] == 0
    assert got["nll"] == pytest.approx(total / tokens, abs=1e-5)
    assert 0.9 * math.log(len(tokenizer)) < got["nll"] < 1.1 * math.log(len(tokenizer))  # untrained: ~ log V


def test_truncation_keeps_the_reference_and_says_so(tokenizer):
    context = 24
    model = build_model("gpt2-tiny", vocab_size=len(tokenizer), max_seq_len=context, seed=1).eval()
    prompts, refs = problems(limit=1)  # a GSM8K solution longer than 23 tokens, a short SVAMP answer
    lengths = [len(tokenizer(r)["input_ids"]) for r in refs]
    assert lengths[0] > context - 1 and lengths[1] < 4 and len(tokenizer(prompts[1])["input_ids"]) > context
    got = reference_nll(model, tokenizer, prompts, refs)
    pairs = [plain_nll(model, tokenizer, p, r, context) for p, r in zip(prompts, refs)]
    assert got["nll_tokens"] == context - 1 + lengths[1] == sum(n for _, n in pairs)
    assert got["nll_prompts_truncated"] == 2 and got["nll_references_truncated"] == 1
    assert got["nll"] == pytest.approx(sum(s for s, _ in pairs) / got["nll_tokens"], abs=1e-5)


def test_evaluate_writes_the_nll_fields(tokenizer, tmp_path):
    model = build_model("gpt2-tiny", vocab_size=len(tokenizer), seed=0)
    task = load_task("svamp", limit=3)
    out = tmp_path / "eval" / "svamp.json"
    result = evaluate_task(model, tokenizer, task, out, sampling=Sampling(max_new_tokens=2, batch_size=2))
    written = json.loads(out.read_text())
    assert written == result and (written["nll_problems"], written["n"]) == (3, 3)
    ids = list(task.records)
    expected = reference_nll(model, tokenizer, [task.prompt(i) for i in ids], [task.solution(i) for i in ids])
    assert written["nll"] == pytest.approx(expected["nll"], abs=1e-9)
    assert written["nll_tokens"] == expected["nll_tokens"]
    assert isinstance(written["nll_tokens"], int) and written["nll_tokens"] >= 3


def test_table4_has_nll_columns_and_records(tmp_path):
    from pit.reporting.tables import posttrain_runs, table4_scores, table4_side_effects

    run = tmp_path / "teacher" / "256m" / "pit" / "mbpp"
    scores = {"eval": {"mbpp": 1.25, "humaneval": 2.0}, "base": {"mbpp": 1.5, "humaneval": 1.75}}
    for sub, nll in scores.items():
        for task, value in nll.items():
            result = {"task": task, "pass@1": 0.0, "n": 2, "passed": 0, "standin": False, "nll": value}
            (run / sub).mkdir(parents=True, exist_ok=True)
            (run / sub / f"{task}.json").write_text(json.dumps(result | {"nll_tokens": 10, "nll_problems": 2}))
    fx = {"kl": 0.1, "val_loss_change": 0.01, "embedding_change": 0.0, "head_change": 0.0}
    (run / "side_effects.json").write_text(json.dumps(fx))
    record = posttrain_runs(tmp_path)[0]["lora"]["mbpp"]
    assert record["nll"] == scores["eval"] and record["base_nll"] == scores["base"]
    assert record["nll_gain"] == pytest.approx(0.25)
    row = table4_scores(tmp_path).iloc[0]
    assert (row["nll_mbpp"], row["base_nll_mbpp"], row["nll_humaneval"], row["base_nll_humaneval"]) == (
        1.25,
        1.5,
        2.0,
        1.75,
    )
    assert (row["problems_mbpp"], row["problems_humaneval"]) == (2, 2) and "gain_mbpp" not in row
    row = table4_side_effects(tmp_path).iloc[0]
    assert row["nll_gain_mbpp"] == pytest.approx(0.25) and "nll_gain_humaneval" not in row
    assert (row["kl_mbpp"], row["val_loss_change_mbpp"], row["interface_change_mbpp"]) == (0.1, 0.01, 0.0)
