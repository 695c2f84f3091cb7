"""Tokenization throughput (MB of UTF-8 text per second): `pit data tokenize` with 1 and 2 workers,
and tiktoken's GPT-2 encoding (built from the same BPE files) on the same text as the yardstick.

    python benchmarks/bench_tokenize.py [--corpus resources/corpus/stdlib/manifest.json] [--repeats 3]

Uses the default profile's corpus (downloaded to a temporary folder when the pipeline has not
built it) and writes the numbers to benchmarks/out/bench_tokenize.json.
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
from pit.data.tokenizers import build_tokenizer, tiktoken_gpt2

ROOT = Path(__file__).resolve().parents[1]


def best_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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

    results = {}
    for name, spec in config["tokenizers"].items():
        build_tokenizer(name, spec, work / name, corpus=args.corpus)
        for workers in (1, 2):
            seconds = best_seconds(
                lambda name=name, workers=workers: tokenize_split(
                    args.corpus, "train", work / name, work / f"{name}.bin", workers=workers
                ),
                args.repeats,
            )
            results[f"pit tokenize {name}, {workers} worker(s)"] = megabytes / seconds
    encoding = tiktoken_gpt2()
    results["tiktoken gpt2, 1 thread"] = megabytes / best_seconds(
        lambda: [encoding.encode_ordinary(t) for t in texts], args.repeats
    )
    results["tiktoken gpt2, 2 threads"] = megabytes / best_seconds(
        lambda: encoding.encode_ordinary_batch(texts, num_threads=2), args.repeats
    )
    for label, rate in results.items():
        print(f"{label:<36} {rate:8.2f} MB/s")
    save_result("bench_tokenize", {"megabytes": megabytes, "mb_per_s": results}, False)


if __name__ == "__main__":
    main()
