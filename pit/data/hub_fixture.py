"""A local folder laid out as the FineWeb-Edu hub repository, for running the paper profile offline.

`datasets.load_dataset(folder, name="sample-10BT", split="train", streaming=True)` reads it exactly as it reads
`HuggingFaceFW/fineweb-edu`: the dataset card (README.md) maps the config `sample-10BT` to `sample/10BT/*.parquet`,
and every shard has the hub's columns and Arrow types. The documents are local text files (by default the running
interpreter's standard library), so the text is real but not FineWeb-Edu's; the metadata columns are filled
honestly (`token_count` is the GPT-2 token count, `url` and `file_path` name the local file, `score` is 0).
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pit.data.download import as_text, local_files
from pit.data.tokenizers import gpt2_tokenizer
from pit.errors import PitError
from pit.io import atomic_path

CONFIG = "sample-10BT"
SHARD_GLOB = "sample/10BT/*.parquet"
# The columns of HuggingFaceFW/fineweb-edu (dataset card `dataset_info.features`), in the hub's order.
SCHEMA = pa.schema(
    [
        ("text", pa.string()),
        ("id", pa.string()),
        ("dump", pa.string()),
        ("url", pa.string()),
        ("file_path", pa.string()),
        ("language", pa.string()),
        ("language_score", pa.float64()),
        ("token_count", pa.int64()),
        ("score", pa.float64()),
        ("int_score", pa.int64()),
    ]
)
_DTYPES = {pa.string(): "string", pa.float64(): "float64", pa.int64(): "int64"}


def dataset_card() -> str:
    """README.md of the folder: the hub card's `configs` and `dataset_info` for sample-10BT."""
    features = "".join(f"  - name: {f.name}\n    dtype: {_DTYPES[f.type]}\n" for f in SCHEMA)
    return (
        "---\n"
        f"configs:\n- config_name: {CONFIG}\n  data_files:\n  - split: train\n    path: {SHARD_GLOB}\n"
        f"dataset_info:\n  config_name: {CONFIG}\n  features:\n{features}"
        "---\n\n"
        "Local stand-in for HuggingFaceFW/fineweb-edu (config sample-10BT) written by `pit fixtures fineweb-edu`:\n"
        "the hub's layout, columns and types; the text is local files, not FineWeb-Edu.\n"
    )


def _rows(root: Path, rel: str, text: str, n_tokens: int) -> dict[str, Any]:
    return {
        "text": text,
        "id": f"<urn:uuid:{uuid.UUID(hashlib.md5(rel.encode()).hexdigest())}>",
        "dump": "local",
        "url": (root / rel).as_uri(),
        "file_path": rel,
        "language": "en",
        "language_score": 1.0,
        "token_count": n_tokens,
        "score": 0.0,
        "int_score": 0,
    }


def write_fineweb_fixture(
    out: str | os.PathLike, glob: str, exclude: list[str], max_bytes: int, shard_documents: int = 10_000
) -> dict[str, int]:
    """Write the folder `out` from the text files of `glob` (sorted, at most `max_bytes` of UTF-8 text), in shards
    of `shard_documents` rows; returns {documents, bytes, shards}. Atomic: `out` appears complete or not at all."""
    if max_bytes < 1 or shard_documents < 1:
        raise PitError(f"max_bytes {max_bytes} / shard_documents {shard_documents}: expected positive integers")
    root, paths = local_files(glob, exclude)
    docs, taken = [], 0
    for rel in paths:
        text, _ = as_text((root / rel).read_bytes())
        if text is None or not text.strip():
            continue
        if taken >= max_bytes:
            break
        docs.append((rel, text))
        taken += len(text.encode("utf-8"))
    tokenizer = gpt2_tokenizer("package")
    counts = [len(e.ids) for e in tokenizer.encode_batch_fast([t for _, t in docs], add_special_tokens=False)]
    rows = [_rows(root, rel, text, n) for (rel, text), n in zip(docs, counts)]
    with atomic_path(out) as tmp:
        (tmp / "sample/10BT").mkdir(parents=True)
        (tmp / "README.md").write_text(dataset_card())
        for k, start in enumerate(range(0, len(rows), shard_documents)):
            chunk = rows[start : start + shard_documents]
            table = pa.Table.from_pylist(chunk, schema=SCHEMA)
            pq.write_table(table, tmp / f"sample/10BT/000_{k:05d}.parquet")
    return {"documents": len(rows), "bytes": taken, "shards": -(-len(rows) // shard_documents)}
