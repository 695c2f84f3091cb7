"""Teacher-forced likelihood of each problem's reference solution: a continuous score beside pass@1 / exact match.

    nll = -(1 / N) * sum_problems sum_{j in reference} log p(ref_j | prompt, ref_<j)      (nats per token)

The prompt is the one generation uses (Task.prompt); the reference is Task.solution (HumanEval's canonical
solution, MBPP's code, GSM8K's worked solution, SVAMP's answer). Prompt and reference are tokenized
separately (no special tokens but the BOS some tokenizers put before every text, as in their pretraining data) and
concatenated, as in LoRA training (pit.training.lora); the loss covers
the reference tokens only, and N pools them over all problems. Where prompt + reference exceed the model's
positions, the prompt loses its beginning; a reference that alone does not fit (with one prompt token)
keeps its first tokens. Both cases are counted in the result. Pass@1 is 0 for tiny models, this is not.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pit.data.tokenizers import bos_prefix
from pit.errors import PitError

TOKENS_PER_FORWARD = 4096  # rows * width per forward pass (the logits are rows * width * vocab floats)


def model_context(model) -> int | None:
    """The most positions the model takes (max_position_embeddings / n_positions), None if unbounded."""
    config = model.config
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


def encode_pair(tokenizer, prompt: str, reference: str, context: int | None) -> tuple[list[int], int, bool, bool]:
    """([BOS +] prompt + reference token ids, prompt tokens kept, prompt truncated?, reference truncated?); a BOS
    that the tokenizer puts before every text (Llama's, Gemma's) is the prompt's first token, also where the prompt
    loses its beginning (the BOS stays, the tokens after it go)."""
    bos = bos_prefix(tokenizer)
    p = bos + tokenizer(prompt, add_special_tokens=False)["input_ids"]
    r = tokenizer(reference, add_special_tokens=False)["input_ids"]
    if not p:
        raise PitError(f"prompt {prompt[:40]!r} has no tokens; expected at least one to condition the reference on")
    if context is not None and context < 2:
        raise PitError(f"model context {context}: expected at least 2 positions (a prompt and a reference token)")
    ref_cut = context is not None and len(r) > context - 1
    r = r[: context - 1] if ref_cut else r
    keep = len(p) if context is None else min(len(p), context - len(r))
    kept = p[len(p) - keep :] if keep == len(p) or not bos else bos + p[len(p) - keep + len(bos) :]
    return kept + r, keep, keep < len(p), ref_cut


def _batches(encoded: list[tuple[list[int], int]], batch_size: int):
    """Consecutive examples, at most batch_size rows and TOKENS_PER_FORWARD padded tokens per batch (>= 1 row)."""
    batch: list[tuple[list[int], int]] = []
    for example in encoded:
        width = max([len(example[0]), *(len(ids) for ids, _ in batch)])
        if batch and (len(batch) >= batch_size or (len(batch) + 1) * width > TOKENS_PER_FORWARD):
            yield batch
            batch = []
        batch.append(example)
    if batch:
        yield batch


def _batch_nll(model, batch: list[tuple[list[int], int]]) -> tuple[float, int]:
    """(sum of the reference tokens' NLL, their number) of one right-padded batch. With causal attention
    and right padding no real token sees a pad, so no attention mask is needed (as in pit.training.lora)."""
    width = max(len(ids) for ids, _ in batch)
    inputs = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    for row, (ids, n_prompt) in enumerate(batch):
        inputs[row, : len(ids)] = torch.tensor(ids)
        labels[row, n_prompt - 1 : len(ids) - 1] = inputs[row, n_prompt : len(ids)]
    device = next(model.parameters()).device
    logits = model(input_ids=inputs.to(device), use_cache=False).logits.float()
    losses = F.cross_entropy(logits.flatten(0, 1), labels.to(device).flatten(), ignore_index=-100, reduction="none")
    return losses.double().sum().item(), int((labels != -100).sum())


def reference_nll(model, tokenizer, prompts: list[str], references: list[str], batch_size: int = 8) -> dict:
    """{"nll", "nll_tokens", "nll_problems", "nll_prompts_truncated", "nll_references_truncated"}: the pooled
    mean NLL per reference token (nats; None when no reference has a token) and the counts behind it."""
    if len(prompts) != len(references):
        raise PitError(f"{len(prompts)} prompts and {len(references)} references; expected one reference per prompt")
    context = model_context(model)
    encoded = [encode_pair(tokenizer, p, r, context) for p, r in zip(prompts, references)]
    total, tokens = 0.0, 0
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in _batches([(ids, n) for ids, n, _, _ in encoded], batch_size):
                s, n = _batch_nll(model, batch)
                total, tokens = total + s, tokens + n
    finally:
        model.train(was_training)
    return {
        "nll": total / tokens if tokens else None,
        "nll_tokens": tokens,
        "nll_problems": len(encoded),
        "nll_prompts_truncated": sum(e[2] for e in encoded),
        "nll_references_truncated": sum(e[3] for e in encoded),
    }
