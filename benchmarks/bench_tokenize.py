"""Tokenization throughput (MB of UTF-8 text per second): `pit data tokenize` (tiktoken where it gives our ids,
docs/data.md) and its `tokenizers` path, against tiktoken's own `encode_ordinary_batch` on the same text and
the same thread count, for both tokenizers of the default profile.

    python benchmarks/bench_tokenize.py [--corpus resources/corpus/stdlib/manifest.json] [--repeats 3]

Uses the default profile's corpus (downloaded to a temporary folder when the pipeline has not built it); the
tokenizers are built from the default profile's specs on it. The streaming rate is the train split's beyond the
(smaller) val split's, (MB_train - MB_val) / (t_train - t_val): what a long run sees once the one-off start-up
(loading both encoders, comparing them on the first 200 kB) is paid. Arms are interleaved over the repeats and each
arm's best time is kept, so load on a shared machine hits all arms alike. Writes
benchmarks/out/bench_tokenize.json.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import yaml
from common import save_result

from pit.data.download import download, iter_text_batches
from pit.data.tokenize import tokenize_split
from pit.data.tokenizers import build_tokenizer, tiktoken_encoding

ROOT = Path(__file__).resolve().parents[1]


def arms(corpus: Path, work: Path, name: str, texts: list[str]) -> dict:
    encoding, _ = tiktoken_encoding(work / name / "tokenizer.json")
    out = {}
    for threads in (1, 2):
        out[f"{name}, {threads} thread(s): tiktoken encode_ordinary_batch"] = lambda t=threads: (
            encoding.encode_ordinary_batch(texts, num_threads=t)
        )
        for encoder in ("auto", "tokenizers"):
            out[f"{name}, {threads} thread(s): pit data tokenize ({encoder})"] = lambda t=threads, e=encoder: (
                tokenize_split(corpus, "train", work / name, work / f"{name}.bin", workers=t, encoder=e)
            )
        out[f"{name}, {threads} thread(s): start-up (auto, val split)"] = lambda t=threads: tokenize_split(
            corpus, "val", work / name, work / f"{name}-val.bin", workers=t
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=ROOT / "resources/corpus/stdlib/manifest.json")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    work = Path(tempfile.mkdtemp(prefix="bench_tokenize."))
    if not args.corpus.is_file():
        args.corpus = work / "corpus/manifest.json"
        download(config["corpus"], args.corpus)
    texts = [t for batch in iter_text_batches(args.corpus, "train", 256) for t in batch]
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    print(f"corpus: {len(texts)} train documents, {megabytes:.2f} MB")
    table = {}
    for name, spec in config["tokenizers"].items():
        build_tokenizer(name, spec, work / name, corpus=args.corpus)
        table |= arms(args.corpus, work, name, texts)
    best = dict.fromkeys(table, float("inf"))
    for _ in range(args.repeats):
        for label, fn in table.items():
            start = time.perf_counter()
            fn()
            best[label] = min(best[label], time.perf_counter() - start)
    val_mb = sum(len(t.encode("utf-8")) for batch in iter_text_batches(args.corpus, "val", 256) for t in batch) / 1e6
    rates = {label: megabytes / seconds for label, seconds in best.items() if "start-up" not in label}
    for label, seconds in best.items():  # the train split's rate beyond the val split's: start-up costs cancel
        if "start-up" in label:
            prefix = label.split(": ")[0]
            full = best[f"{prefix}: pit data tokenize (auto)"]
            rates[f"{prefix}: pit data tokenize (auto), streaming"] = (megabytes - val_mb) / (full - seconds)
    for label, rate in rates.items():
        reference = rates[label.split(": ")[0] + ": tiktoken encode_ordinary_batch"]
        print(f"{label:<62} {rate:7.2f} MB/s  {rate / reference:5.2f}x tiktoken")
    save_result("bench_tokenize", {"megabytes": megabytes, "mb_per_s": rates}, False)


if __name__ == "__main__":
    main()
