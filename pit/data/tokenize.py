"""Tokenize one corpus split into a flat binary token file plus its JSON sidecar.

The file is the documents' token ids back to back, each document followed by EOS (and preceded by
BOS where the tokenizer's meta has a `bos_id`: a checkpoint tokenizer that starts every text with one), as
uint16 when the vocabulary fits (V <= 65535) else uint32. Special-token text inside a document is
encoded as ordinary text, so EOS (and BOS) only ever mark document ends (and starts).

The encoder is tiktoken, on `workers` threads, wherever it can serve the tokenizer's vocabulary with the same
ids (`choose_encoder`; GPT-2's and the BPEs trained here); else `tokenizers` in `workers` processes. The
sidecar's `encoder` names the one used. docs/data.md has the throughput of both.
"""

from __future__ import annotations

import collections
import functools
import itertools
import multiprocessing
import os
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from pit.data.download import iter_text_batches, read_manifest
from pit.data.reader import read_sidecar
from pit.data.tokenizers import load_tokenizer, tiktoken_encoding
from pit.errors import PitError
from pit.io import atomic_path, write_json
from pit.progress import progress_bar


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 65535 else np.uint32)


_worker: dict[str, Any] = {}


def _init_worker(tokenizer_json: str, eos_id: int, dtype: str, bos: tuple[int, ...] = ()) -> None:
    """Load the tokenizer once per process; encoding threads are off, parallelism is by process."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_json)
    tokenizer.encode_special_tokens = True
    _worker.update(tokenizer=tokenizer, eos_id=eos_id, dtype=np.dtype(dtype), bos=list(bos))


def _encode_batch(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(token ids of the batch with [BOS +] each document + EOS, tokens per document incl. BOS and EOS)."""
    encodings = _worker["tokenizer"].encode_batch_fast(texts, add_special_tokens=False)  # no offsets
    ids = [_worker["bos"] + e.ids + [_worker["eos_id"]] for e in encodings]
    lengths = np.array([len(doc) for doc in ids], dtype=np.int64)
    return np.fromiter((t for doc in ids for t in doc), dtype=_worker["dtype"], count=int(lengths.sum())), lengths


def _tiktoken_batches(encoding, batches, threads: int, eos_id: int, dtype: np.dtype, bos: tuple[int, ...] = ()):
    """(ids with [BOS before and] EOS after each document, tokens per document) of each batch, the arrays
    `_encode_batch` gives, encoded by tiktoken on one pool of `threads` threads (its encoder releases the GIL).
    Each document is encoded straight into a numpy buffer (`encode_to_numpy`, special-token text as ordinary
    text: no Python list of ints), and the next batches are encoded while this one is joined and written."""
    from concurrent.futures import ThreadPoolExecutor

    encode = functools.partial(encoding.encode_to_numpy, disallowed_special=())
    eos = np.array([eos_id], dtype=np.uint32)
    with ThreadPoolExecutor(threads) as pool:
        ahead: collections.deque = collections.deque()
        for texts in batches:
            ahead.append([pool.submit(encode, text) for text in texts])
            if len(ahead) > 2:
                yield _joined([future.result() for future in ahead.popleft()], eos, dtype, bos)
        while ahead:
            yield _joined([future.result() for future in ahead.popleft()], eos, dtype, bos)


def _joined(
    docs: list[np.ndarray], eos: np.ndarray, dtype: np.dtype, bos: tuple[int, ...] = ()
) -> tuple[np.ndarray, np.ndarray]:
    """The documents' ids back to back, [BOS before and] EOS after each, as `dtype`; and tokens per document incl.
    BOS and EOS."""
    head = np.array(bos, dtype=np.uint32)
    lengths = np.fromiter((len(head) + len(doc) + 1 for doc in docs), dtype=np.int64, count=len(docs))
    parts = [part for doc in docs for part in ((head, doc, eos) if bos else (doc, eos))]
    return (np.concatenate(parts) if parts else np.empty(0, np.uint32)).astype(dtype), lengths


def choose_encoder(tokenizer, tokenizer_json: str, first: list[str], sample_bytes: int = 200_000) -> tuple[Any, str]:
    """(tiktoken encoding or None, why not) for a saved tokenizer: tiktoken where it can serve the vocabulary
    (pit.data.tokenizers.tiktoken_encoding) and gives the same ids as `tokenizer` (a `tokenizers.Tokenizer`) on the
    leading documents of the batch `first`, up to `sample_bytes` of text."""
    encoding, why = tiktoken_encoding(tokenizer_json)
    if encoding is None:
        return None, why
    sizes = itertools.accumulate(len(text) for text in first)
    sample = first[: 1 + sum(1 for size in sizes if size < sample_bytes)]
    tokenizer.encode_special_tokens = True
    expected = [e.ids for e in tokenizer.encode_batch_fast(sample, add_special_tokens=False)]
    bad = next((i for i, (a, b) in enumerate(zip(encoding.encode_ordinary_batch(sample), expected)) if a != b), None)
    return (None, f"tiktoken's ids differ from tokenizers' in document {bad}") if bad is not None else (encoding, "")


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


def _check_settings(workers: int, batch_documents: int, token_budget: int | None, encoder: str) -> None:
    if workers < 1 or batch_documents < 1:
        raise PitError(f"workers {workers} / batch_documents {batch_documents}: expected positive integers")
    if token_budget is not None and token_budget < 1:
        raise PitError(f"token_budget {token_budget}: expected a positive integer or none")
    if encoder not in ("auto", "tokenizers"):
        raise PitError(f"encoder {encoder!r}: expected 'auto' or 'tokenizers'")


def _split_batches(corpus, manifest: dict, split: str, batch_documents: int, domain: dict | None):
    """(the split's first batch of texts, an iterator over all its batches, the first included); a domain that
    selects no document of the split is an error."""
    if split not in manifest["shards"]:
        raise PitError(f"split {split!r}: expected one of {sorted(manifest['shards'])}")
    batches = iter_text_batches(corpus, split, batch_documents, domain)
    first = next(batches, [])
    if domain is not None and not first:
        raise PitError(
            f"domain {domain.get('name')!r} (include {domain.get('include')}, exclude {domain.get('exclude')}) "
            f"selects no document of the {split} split of corpus {manifest['name']!r}; expected at least one"
        )
    return first, itertools.chain([first], batches)


def _sidecar(split, meta, manifest, encoder, dtype, n_tokens, n_docs, token_budget, domain) -> dict[str, Any]:
    """What a token file holds and how it was made: tokenizer, encoder, dtype, counts, corpus, budget, domain."""
    sidecar = {
        "split": split,
        "tokenizer": meta["name"],
        "tokenizer_sha256": meta["tokenizer_sha256"],
        "vocab_size": meta["vocab_size"],
        "eos_id": meta["eos_id"],
        **({"bos_id": meta["bos_id"]} if "bos_id" in meta else {}),  # (absent without one, as in the tokenizer's)
        **({"window_bos_id": meta["window_bos_id"]} if "window_bos_id" in meta else {}),  # (the same)
        "encoder": encoder,
        "dtype": dtype.name,
        "tokens": n_tokens,
        "documents": n_docs,
        "corpus": manifest["name"],
        "manifest_sha256": manifest["manifest_sha256"],
        "token_budget": token_budget,
    }
    if domain is not None:  # (absent otherwise: the sidecars of whole splits are unchanged)
        sidecar["domain"] = domain
    return sidecar


def tokenize_split(
    corpus: str | os.PathLike,
    split: str,
    tokenizer_folder: str | os.PathLike,
    out: str | os.PathLike,
    workers: int = 1,
    batch_documents: int = 64,
    token_budget: int | None = None,
    context_length: int | None = None,
    encoder: str = "auto",
    domain: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Tokenize `split` of the corpus at `corpus` (manifest.json) into `out` (.bin) and its .json sidecar.

    With `domain` ({name, include, exclude}: fnmatch patterns on document paths, pit.data.download.in_domain),
    only the split's documents in that part of the corpus; the sidecar records it.
    With `token_budget`, whole documents are kept while the total stays within the budget.
    With `context_length`, the file must hold at least one window of context_length + 1 tokens.
    `encoder`: auto (tiktoken where it gives the same ids, else tokenizers) | tokenizers.
    """
    _check_settings(workers, batch_documents, token_budget, encoder)
    manifest = read_manifest(corpus)
    tokenizer, meta = load_tokenizer(tokenizer_folder)
    dtype = token_dtype(meta["vocab_size"])
    bos = (meta["bos_id"],) if "bos_id" in meta else ()
    init_args = (str(Path(tokenizer_folder) / "tokenizer.json"), meta["eos_id"], dtype.str, bos)
    first, batches = _split_batches(corpus, manifest, split, batch_documents, domain)
    encoding, why_not = choose_encoder(tokenizer, init_args[0], first) if encoder == "auto" else (None, "asked for")
    if encoding is None:
        print(f"tokenize {split} with {meta['name']}: tokenizers encodes ({why_not})")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per worker process
    out = Path(out)
    sidecar_path = out.with_suffix(".json")
    check_pair_replaceable(out)  # before any work
    # Fork before anything starts threads (tqdm, Parquet reads); workers load their own tokenizer.
    use_pool = encoding is None and workers > 1
    pool = multiprocessing.get_context("fork").Pool(workers, _init_worker, init_args) if use_pool else None
    bar = progress_bar(total=manifest["splits"][split], unit="doc", desc=f"tokenize {split} with {meta['name']}")
    try:
        if encoding is not None:
            results = _tiktoken_batches(encoding, batches, workers, meta["eos_id"], dtype, bos)
        elif pool is None:
            _init_worker(*init_args)
            results = map(_encode_batch, batches)
        else:
            results = _in_order(pool, batches, depth=4 * workers)
        with atomic_path(out, replaces=lambda old: True) as tmp, open(tmp, "wb") as f:  # (checked above)
            n_tokens, n_docs = write_tokens(f, results, token_budget, bar)
            f.flush()
            if context_length is not None and n_tokens < context_length + 1:
                raise PitError(
                    f"{split} split tokenized with {meta['name']!r} holds {n_tokens} tokens, fewer than one window "
                    f"of context_length + 1 = {context_length + 1}: enlarge the corpus"
                )
            encoder = (
                f"tiktoken {version('tiktoken')}" if encoding is not None else f"tokenizers {version('tokenizers')}"
            )
            sidecar = _sidecar(split, meta, manifest, encoder, dtype, n_tokens, n_docs, token_budget, domain)
            # never a new token file beside the old sidecar: until the complete one below, a pending one (refused)
            write_json(sidecar_path, {**sidecar, "pending": True}, replaces=is_token_sidecar)
    finally:
        if pool is not None:
            pool.terminate()
        bar.close()
    write_json(sidecar_path, sidecar, replaces=is_token_sidecar)
    return sidecar


def is_token_sidecar(path: Path) -> bool:
    """Whether `path` is a token file's sidecar (complete or pending): what `pit data tokenize` may replace."""
    try:
        read_sidecar(path)
    except PitError:
        return False
    return True


def check_pair_replaceable(out: Path) -> None:
    """The output rule (pit.io) for a token file: an existing `.json` beside `out` must be a token file's sidecar
    and an existing `out` must have one (a pair an earlier `pit data tokenize` made, or was interrupted writing);
    anything else is a PitError, before any work."""
    sidecar = out.with_suffix(".json")
    if sidecar.exists() and not is_token_sidecar(sidecar):
        raise PitError(f"{str(sidecar)!r} is a file `pit data tokenize` did not write (not a token file's sidecar), "
                       f"where the sidecar of {out.name} goes: nothing was replaced (choose another --out, or remove "
                       "it yourself)")  # fmt: skip
    if out.exists() and not sidecar.is_file():
        kind = "a folder" if out.is_dir() else "a file without a sidecar"
        raise PitError(f"{str(out)!r} is {kind}: a file `pit data tokenize` did not write, so nothing was replaced "
                       "(choose another --out, or remove it yourself)")  # fmt: skip
