"""`pit data download|tokenizer|tokenize`: the data stage's commands (pit/data/; the Snakemake rules call these)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pit.commands.common import add_spec_argument, check_outputs, merge_spec, read_spec, spec_path
from pit.errors import PitError

TOKENIZE_DEFAULTS = {
    "workers": 1, "batch_documents": 64, "token_budget": None, "context_length": None, "domain": None,
}  # fmt: skip
TOKENIZE_TYPES = {"token_budget": int, "context_length": int, "domain": dict}  # (null allowed: their defaults are None)


def _budget(text: str) -> int | None:
    return None if text.lower() in ("none", "null") else int(text)


_budget.__name__ = "integer or none"  # argparse names the type in its error: "invalid integer or none value"


def _download(args) -> int:
    from pit.data.download import download, spec_sources

    spec = read_spec(args.spec)
    check_outputs([args.out], spec_sources(spec), spec_path(args.spec))
    manifest = download(spec, args.out)
    print(
        f"corpus {manifest['name']}: {manifest['documents']} documents, {manifest['bytes']} bytes, "
        f"splits {manifest['splits']}"
    )
    skipped = manifest.get("skipped_files", [])
    if skipped:
        reasons = Counter(f["reason"] for f in skipped)
        print(
            f"skipped {len(skipped)} files that are not text ("
            + ", ".join(f"{n} {why}" for why, n in sorted(reasons.items()))
            + f"; listed in {args.out} under skipped_files)"
        )
    return 0


def _tokenizer(args) -> int:
    from pit.data.tokenizers import build_tokenizer

    check_outputs([args.out], args.corpus, spec_path(args.spec))
    meta = build_tokenizer(args.name, read_spec(args.spec), args.out, corpus=args.corpus)
    print(
        f"tokenizer {meta['name']}: vocab_size {meta['vocab_size']}, eos_id {meta['eos_id']}, "
        f"sha256 {meta['tokenizer_sha256']}"
    )
    return 0


def _tokenize(args) -> int:
    from pit.data.download import check_domain
    from pit.data.tokenize import tokenize_split

    merge_spec(args, read_spec(args.spec), TOKENIZE_DEFAULTS, TOKENIZE_TYPES)
    out = Path(args.out)
    check_outputs([out, out.with_suffix(".json")], args.corpus, args.tokenizer, spec_path(args.spec))
    if args.context_length is not None and args.context_length < 1:
        raise PitError(f"--context-length {args.context_length}: expected an integer >= 1 (or none)")
    if args.domain is not None:
        check_domain(args.domain)
    sidecar = tokenize_split(
        args.corpus, args.split, args.tokenizer, args.out,
        workers=args.workers, batch_documents=args.batch_documents,
        token_budget=args.token_budget, context_length=args.context_length, domain=args.domain,
    )  # fmt: skip
    print(f"{args.out}: {sidecar['tokens']} {sidecar['dtype']} tokens, {sidecar['documents']} documents")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("data", help="download a corpus, build tokenizers, tokenize")
    sub = parser.add_subparsers(dest="data_command", metavar="STEP", required=True)

    p = sub.add_parser("download", help="download a corpus (hub or local files) into Parquet shards")
    p.add_argument("--spec", required=True, help="the corpus config section, as JSON")
    p.add_argument("--out", required=True, help="manifest.json to write; shards go next to it")
    p.set_defaults(func=_download)

    p = sub.add_parser("tokenizer", help="build the GPT-2 tokenizer or train a byte-level BPE")
    p.add_argument("--name", required=True, help="the tokenizer's name in the config")
    p.add_argument("--spec", required=True, help="the tokenizer's config entry, as JSON")
    p.add_argument("--corpus", help="corpus manifest.json (trained tokenizers only)")
    p.add_argument("--out", required=True, help="tokenizer folder to write")
    p.set_defaults(func=_tokenizer)

    p = sub.add_parser("tokenize", help="tokenize one corpus split into a flat token file")
    p.add_argument("--corpus", required=True, help="corpus manifest.json")
    p.add_argument("--split", required=True, choices=["train", "val"])
    p.add_argument("--tokenizer", required=True, help="tokenizer folder")
    p.add_argument("--out", required=True, help="token file (.bin) to write; the sidecar is the .json next to it")
    add_spec_argument(p, ", ".join(TOKENIZE_DEFAULTS))
    p.add_argument("--workers", type=int, help="tokenizer processes (default 1)")
    p.add_argument("--batch-documents", type=int, help="documents per work item (default 64)")
    p.add_argument("--token-budget", type=_budget, help="most tokens to keep, whole documents (default none)")
    p.add_argument("--context-length", type=int, help="fail unless one window of this length fits (default none)")
    p.set_defaults(func=_tokenize)
