"""Batched completion of prompts with the `transformers` generate API (KV cache, left padding).

Greedy by default; `temperature > 0` samples (with optional top-k / top-p). Prompts are batched with
LEFT padding so every row's continuation starts at the same position; the pad token is EOS when the
tokenizer has none. A row stops at EOS or once its new text contains a stop sequence; the completion is
the new text cut at the first stop sequence. Prompts longer than the model's context lose their
beginning (left truncation), keeping room for `max_new_tokens`; `max_new_tokens` beyond the context less one
prompt token is a PitError (`check_max_new_tokens`).
"""

from __future__ import annotations

from pathlib import Path


def truncate(text: str, stops: list[str]) -> str:
    """`text` up to (not including) the earliest stop sequence."""
    cut = min((i for s in stops if (i := text.find(s)) >= 0), default=len(text))
    return text[:cut]


def load(checkpoint: str | Path, tokenizer: str | Path | None = None, device: str = "cpu"):
    """A project checkpoint (pit.models.checkpoint.load_model) and its tokenizer (from the checkpoint folder)."""
    from transformers import AutoTokenizer

    from pit.errors import PitError
    from pit.models.checkpoint import check_tokenizer, load_model

    folder = Path(tokenizer or checkpoint)
    try:
        tok = AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError) as err:
        raise PitError(f"no tokenizer in {str(folder)!r} (pass --tokenizer FOLDER): {err}") from None
    model = load_model(checkpoint, device=device)
    check_tokenizer(model, tok, folder, checkpoint=checkpoint)
    return model, tok


def context_length(model) -> int | None:
    """The model's context: positions it has (config `max_position_embeddings` or `n_positions`), None if unknown."""
    config = model.config
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


def check_max_new_tokens(model, max_new_tokens: int) -> None:
    """The rule: a completion fits the model's context with at least one prompt token, max_new_tokens <= context - 1
    (beyond it, generation runs past the positions the model has: an error, or a run until killed). PitError."""
    from pit.errors import PitError

    context = context_length(model)
    if context and max_new_tokens > context - 1:
        raise PitError(
            f"--max-new-tokens {max_new_tokens}: expected at most {context - 1} (the model's context is {context} "
            "positions, one of them kept for the prompt)"
        )


def stop_on_text(tokenizer, stops, start: int):
    """The hand-written stopping criterion: a row is done once its decoded NEW tokens (after position `start`)
    contain a stop sequence (every step decodes every row's new tokens)."""
    import torch
    from transformers import StoppingCriteria

    class StopOnText(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            texts = tokenizer.batch_decode(input_ids[:, start:], skip_special_tokens=True)
            return torch.tensor([any(s in t for s in stops) for t in texts], device=input_ids.device)

    return StopOnText()


def stop_criteria(tokenizer, stops, how: str = "text"):
    """A function of a batch's prompt length -> the StoppingCriteriaList that ends a row at a stop sequence:
    transformers' StopStringCriteria (the `stop_strings=` of `generate`: token-level matching, no decoding per
    step; made once per call, since making one scans the whole vocabulary) or "text" (`stop_on_text`)."""
    from transformers import StoppingCriteriaList
    from transformers.generation.stopping_criteria import StopStringCriteria

    if not stops:
        return lambda start: StoppingCriteriaList([])
    if how == "text":
        return lambda start: StoppingCriteriaList([stop_on_text(tokenizer, stops, start)])
    built = StopStringCriteria(tokenizer, list(stops))
    return lambda start: StoppingCriteriaList([built])


def generate(
    model,
    tokenizer,
    prompts: list[str],
    *,
    stops: tuple[str, ...] | list[str] = (),
    max_new_tokens: int = 256,
    batch_size: int = 8,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    progress: bool = True,
    stop_with: str = "text",
) -> list[str]:
    """One completion per prompt, in prompt order; `stop_with` picks the stopping (`stop_criteria`). The default
    is ours ("text"): transformers' `stop_strings` gives the same completions on the evaluation problems and was
    slower here (it scans the vocabulary to set up, then does more work per step; benchmarks/RESULTS.md)."""
    import torch

    from pit.progress import progress_bar

    tokenizer.padding_side = tokenizer.truncation_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    check_max_new_tokens(model, max_new_tokens)
    context = context_length(model)
    max_prompt = context - max_new_tokens if context else None
    device = next(model.parameters()).device
    sampling = (
        dict(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p)
        if temperature > 0
        else dict(do_sample=False, temperature=None, top_k=None, top_p=None)
    )
    criteria = stop_criteria(tokenizer, stops, stop_with)
    completions = []
    for b in progress_bar(range(0, len(prompts), batch_size), desc="generate", disable=not progress):
        batch = tokenizer(
            prompts[b : b + batch_size],
            return_tensors="pt",
            padding=True,
            truncation=max_prompt is not None,
            max_length=max_prompt,
        )
        batch = {k: v.to(device) for k, v in batch.items()}
        start = batch["input_ids"].shape[1]
        with torch.no_grad():
            out = model.generate(
                **batch,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
                use_cache=True,
                stopping_criteria=criteria(start),
                **sampling,
            )
        texts = tokenizer.batch_decode(out[:, start:], skip_special_tokens=True)
        completions += [truncate(t, list(stops)) for t in texts]
    return completions
