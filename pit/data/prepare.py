"""`pit data prepare`: one's own corpus to train and validation token files in one step, through the data stage's own
functions: download (pit/data/download.py: text files, records or a saved data set into Parquet shards and a
manifest), tokenizer (tokenizers.py: GPT-2's, a BPE trained on the corpus, or a checkpoint's own) and tokenize
(tokenize.py), each output written atomically where the pipeline's data stage writes it (the caller passes the
paths: pit/pipeline/layout.py below one folder)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pit.data.download import SPLITS, download
from pit.data.tokenize import tokenize_split
from pit.data.tokenizers import build_tokenizer

BPE_DEFAULTS = {"min_frequency": 2, "sample_bytes": None}  # a trained BPE's other keys (the profiles' values)


def tokenizer_choice(choice: str, vocab_size: int, seed: int) -> tuple[str, dict[str, Any]]:
    """(name, spec) of a tokenizer given as `gpt2` (the GPT-2 BPE the package ships), `bpe` (a byte-level BPE of
    `vocab_size` entries trained on the corpus' train split, seeded) or a checkpoint folder or hub id (its own
    tokenizer, EOS and BOS: kind checkpoint, docs/data.md). A folder named gpt2 or bpe is given as ./gpt2."""
    if choice == "gpt2":
        return "gpt2", {"kind": "gpt2", "source": "package"}
    if choice == "bpe":
        return f"bpe{vocab_size}", {"kind": "bpe", "vocab_size": vocab_size, "seed": seed, **BPE_DEFAULTS}
    from pit.sources import check_source

    check_source(choice, "tokenizer source")  # before the corpus is read: a mistyped folder is one line at once
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(choice.rstrip("/")).name).lstrip("-_.") or "checkpoint"
    return name, {"kind": "checkpoint", "source": choice}


def prepare(
    corpus: dict[str, Any],
    tokenizer: tuple[str, dict[str, Any]],
    paths: dict[str, str],
    workers: int = 1,
    batch_documents: int = 64,
    token_budget: int | None = None,
    context_length: int | None = None,
) -> dict[str, Any]:
    """Download `corpus` (a corpus spec; missing keys at their defaults) to paths['corpus'] (its manifest), build the
    tokenizer (name, spec) into paths['tokenizer'] (a BPE is trained on the train split) and tokenize both splits
    into paths['train'] and paths['val'] (`token_budget` cuts the train file only; `context_length`: each file must
    hold one window). Returns {'manifest', 'tokenizer' (its meta), 'train', 'val' (the sidecars)}."""
    name, spec = tokenizer
    manifest = download(corpus, paths["corpus"])
    meta = build_tokenizer(name, spec, paths["tokenizer"], corpus=paths["corpus"] if spec["kind"] == "bpe" else None)
    out: dict[str, Any] = {"manifest": manifest, "tokenizer": meta}
    for split in SPLITS:
        out[split] = tokenize_split(
            paths["corpus"], split, paths["tokenizer"], paths[split], workers=workers, batch_documents=batch_documents,
            token_budget=token_budget if split == "train" else None, context_length=context_length,
        )  # fmt: skip
    return out
