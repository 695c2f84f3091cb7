"""`pit data download|tokenizer|tokenize`: the data stage's commands (pit/data/; the Snakemake rules call these);
`pit data prepare`: all three at once for one's own corpus, every setting but the source and the tokenizer at a
stated default (docs/your-model-your-data.md)."""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

from pit.commands.common import add_spec_argument, check_outputs, merge_spec, read_spec, spec_path
from pit.data.corpus import CORPUS_DEFAULTS
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


# `pit data prepare`'s settings and their defaults (the corpus keys' own: pit.data.corpus.CORPUS_DEFAULTS)
PREPARE_DEFAULTS = {
    **CORPUS_DEFAULTS,
    "exclude": [],  # fnmatch patterns on paths below a folder of text files
    "text_field": "text",  # the field holding the text of a record (JSON Lines, JSON, Parquet, saved data set)
    "tokenizer": None,  # required: gpt2 | bpe | a checkpoint folder or hub id
    "vocab_size": 32000,  # tokenizer bpe: entries requested (the trainer may stop earlier on a small corpus)
    "workers": 1,  # tokenizer threads or processes
    "batch_documents": 64,  # documents per work item
    "token_budget": None,  # most tokens kept in the train file (whole documents); null = all
    "context_length": None,  # each token file must hold one window of this length + 1; null = no check
}
PREPARE_TYPES = {"max_documents": int, "max_bytes": int, "token_budget": int, "context_length": int,
                 "tokenizer": str, "exclude": list}  # fmt: skip


def _prepare_settings(args) -> list[str]:
    """Fill `args` from --spec and the defaults (a flag wins over the spec, the spec over the default); the lines
    that show every setting and where it came from."""
    spec = read_spec(args.spec)
    given = {k for k in PREPARE_DEFAULTS if getattr(args, k, None) is not None} | set(spec)
    merge_spec(args, spec, PREPARE_DEFAULTS, PREPARE_TYPES)
    if args.tokenizer is None:
        raise PitError("--tokenizer is required: gpt2, bpe (with --vocab-size) or a checkpoint folder or hub id")
    width = max(map(len, PREPARE_DEFAULTS))
    return [f"  {k:<{width}}  {json.dumps(getattr(args, k))}{'' if k in given else '  (default)'}"
            for k in PREPARE_DEFAULTS if k != "vocab_size" or args.tokenizer == "bpe"]  # fmt: skip


def _prepare(args) -> int:
    from pit.data.download import spec_sources
    from pit.data.prepare import prepare, tokenizer_choice
    from pit.io import refuse_foreign_folder
    from pit.pipeline.layout import corpus_manifest, token_file, tokenizer_dir

    shown = _prepare_settings(args)
    corpus = {"source": "local", ("glob" if re.search(r"[*?\[]", args.source) else "path"): args.source,
              **{k: getattr(args, k) for k in (*CORPUS_DEFAULTS, "exclude", "text_field")}}  # fmt: skip
    tokenizer = tokenizer_choice(args.tokenizer, args.vocab_size, args.seed)
    out = Path(args.out)
    paths = {"corpus": str(out / corpus_manifest(args.name)), "tokenizer": str(out / tokenizer_dir(tokenizer[0])),
             **{split: str(out / token_file(tokenizer[0], split)) for split in ("train", "val")}}  # fmt: skip
    folder = [args.tokenizer] if Path(args.tokenizer).exists() else []
    check_outputs([args.out], spec_sources(corpus), folder, spec_path(args.spec))
    refuse_foreign_folder(out, ["resources", "results"])  # the data stage's layout, or nothing: never a user's folder
    print(f"pit data prepare {args.source} -> {args.out} (tokenizer {tokenizer[0]}: {json.dumps(tokenizer[1])})")
    print("\n".join(shown), flush=True)
    done = prepare(corpus, tokenizer, paths, args.workers, args.batch_documents, args.token_budget,
                   args.context_length)  # fmt: skip
    manifest, meta = done["manifest"], done["tokenizer"]
    print(f"corpus {manifest['name']}: {manifest['documents']} documents, {manifest['bytes']} bytes, splits "
          f"{manifest['splits']} ({paths['corpus']})")  # fmt: skip
    print(f"tokenizer {meta['name']}: vocab_size {meta['vocab_size']}, eos_id {meta['eos_id']} ({paths['tokenizer']})")
    for split in ("train", "val"):
        print(f"{paths[split]}: {done[split]['tokens']} {done[split]['dtype']} tokens, {done[split]['documents']} "
              "documents")  # fmt: skip
    print(f"for pit train: train_data: {paths['train']}, val_data: {paths['val']}, tokenizer: {paths['tokenizer']}")
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

    p = sub.add_parser(
        "prepare",
        help="one's own corpus (text files, JSONL, Parquet, a saved data set) to train/val token files, in one step",
        description=__doc__ + "\n\nsettings and defaults:\n" + "\n".join(
            f"  {k}: {json.dumps(v)}" for k, v in PREPARE_DEFAULTS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("source", help="a folder of text files, a .jsonl/.json/.parquet file, a save_to_disk folder, or a "
                   "glob of text files (quoted: 'texts/**/*.md')")  # fmt: skip
    p.add_argument("--tokenizer", help="gpt2 | bpe (trained on the corpus) | a checkpoint folder or hub id (required)")
    p.add_argument("--vocab-size", type=int, help="tokenizer bpe: vocabulary size requested (default 32000)")
    p.add_argument("--val-fraction", type=float, help="chance that a document is held out (default 0.05)")
    p.add_argument("--seed", type=int, help="seed of the split and of a BPE's sample (default 0)")
    p.add_argument("--name", help="the corpus' name, its folder below OUT/resources/corpus/ (default corpus)")
    p.add_argument("--workers", type=int, help="tokenizer threads or processes (default 1)")
    p.add_argument("--context-length", type=int, help="fail unless each token file holds one window (default none)")
    add_spec_argument(p, ", ".join(k for k in PREPARE_DEFAULTS))
    p.add_argument("--out", required=True, help="folder to write, laid out as the data stage: OUT/resources/corpus/"
                   "<name>/, OUT/results/tokenizers/<tok>/, OUT/results/data/<tok>/{train,val}.{bin,json}")  # fmt: skip
    p.set_defaults(func=_prepare)

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
