"""Tokenize one corpus split into a flat binary token file plus its JSON sidecar.

The file is the documents' token ids back to back, each document followed by EOS, as uint16
when the vocabulary fits (V <= 65535) else uint32. Special-token text inside a document is
encoded as ordinary text, so EOS only ever marks document ends.
"""

from __future__ import annotations

import collections
import multiprocessing
import os
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from pit.data.download import iter_text_batches, read_manifest
from pit.data.tokenizers import load_tokenizer
from pit.errors import PitError
from pit.io import atomic_path, write_json


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 65535 else np.uint32)


_worker: dict[str, Any] = {}


def _init_worker(tokenizer_json: str, eos_id: int, dtype: str) -> None:
    """Load the tokenizer once per process; encoding threads are off, parallelism is by process."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_json)
    tokenizer.encode_special_tokens = True
    _worker.update(tokenizer=tokenizer, eos_id=eos_id, dtype=np.dtype(dtype))


def _encode_batch(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(token ids of the batch with EOS after each document, tokens per document incl. EOS)."""
    encodings = _worker["tokenizer"].encode_batch_fast(texts, add_special_tokens=False)  # no offsets
    ids = [e.ids + [_worker["eos_id"]] for e in encodings]
    lengths = np.array([len(doc) for doc in ids], dtype=np.int64)
    return np.fromiter((t for doc in ids for t in doc), dtype=_worker["dtype"], count=int(lengths.sum())), lengths


def _in_order(pool, batches, depth: int):
    """`_encode_batch` over `batches` in the pool, results in order, at most `depth` batches in flight."""
    pending = collections.deque()
    for batch in batches:
        pending.append(pool.apply_async(_encode_batch, (batch,)))
        if len(pending) >= depth:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()


def write_tokens(f, results, token_budget: int | None, bar) -> tuple[int, int]:
    """Write the encoded batches to `f` in order; with `token_budget`, keep the whole documents that still fit,
    then stop. Returns (tokens, documents) written."""
    n_tokens = n_docs = 0
    for ids, lengths in results:
        over_budget = token_budget is not None and n_tokens + len(ids) > token_budget
        if over_budget:  # keep the whole documents that still fit, then stop
            keep = int(np.searchsorted(np.cumsum(lengths), token_budget - n_tokens, side="right"))
            ids, lengths = ids[: int(lengths[:keep].sum())], lengths[:keep]
        f.write(ids.tobytes())
        n_tokens, n_docs = n_tokens + len(ids), n_docs + len(lengths)
        bar.update(len(lengths))
        if over_budget:
            break
    return n_tokens, n_docs


def tokenize_split(
    corpus: str | os.PathLike,
    split: str,
    tokenizer_folder: str | os.PathLike,
    out: str | os.PathLike,
    workers: int = 1,
    batch_documents: int = 64,
    token_budget: int | None = None,
    context_length: int | None = None,
) -> dict[str, Any]:
    """Tokenize `split` of the corpus at `corpus` (manifest.json) into `out` (.bin) and its .json sidecar.

    With `token_budget`, whole documents are kept while the total stays within the budget.
    With `context_length`, the file must hold at least one window of context_length + 1 tokens.
    """
    if workers < 1 or batch_documents < 1:
        raise PitError(f"workers {workers} / batch_documents {batch_documents}: expected positive integers")
    if token_budget is not None and token_budget < 1:
        raise PitError(f"token_budget {token_budget}: expected a positive integer or none")
    manifest = read_manifest(corpus)
    if split not in manifest["shards"]:
        raise PitError(f"split {split!r}: expected one of {sorted(manifest['shards'])}")
    _, meta = load_tokenizer(tokenizer_folder)
    dtype = token_dtype(meta["vocab_size"])
    init_args = (str(Path(tokenizer_folder) / "tokenizer.json"), meta["eos_id"], dtype.str)
    batches = iter_text_batches(corpus, split, batch_documents)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per worker process
    out = Path(out)
    sidecar_path = out.with_suffix(".json")
    # Fork before anything starts threads (tqdm, Parquet reads); workers load their own tokenizer.
    pool = multiprocessing.get_context("fork").Pool(workers, _init_worker, init_args) if workers > 1 else None
    bar = tqdm(total=manifest["splits"][split], unit="doc", desc=f"tokenize {split} with {meta['name']}")
    try:
        if pool is None:
            _init_worker(*init_args)
        results = map(_encode_batch, batches) if pool is None else _in_order(pool, batches, depth=4 * workers)
        with atomic_path(out) as tmp, open(tmp, "wb") as f:
            n_tokens, n_docs = write_tokens(f, results, token_budget, bar)
            f.flush()
            if context_length is not None and n_tokens < context_length + 1:
                raise PitError(
                    f"{split} split tokenized with {meta['name']!r} holds {n_tokens} tokens, fewer than one window "
                    f"of context_length + 1 = {context_length + 1}: enlarge the corpus"
                )
            sidecar_path.unlink(missing_ok=True)  # never a new token file beside the old sidecar
    finally:
        if pool is not None:
            pool.terminate()
        bar.close()
    sidecar = {
        "split": split,
        "tokenizer": meta["name"],
        "tokenizer_sha256": meta["tokenizer_sha256"],
        "vocab_size": meta["vocab_size"],
        "eos_id": meta["eos_id"],
        "dtype": dtype.name,
        "tokens": n_tokens,
        "documents": n_docs,
        "corpus": manifest["name"],
        "manifest_sha256": manifest["manifest_sha256"],
        "token_budget": token_budget,
    }
    write_json(sidecar_path, sidecar)
    return sidecar
