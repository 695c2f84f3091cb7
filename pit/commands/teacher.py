"""`pit teacher`: real pretrained teachers from GGUF files, offline (pit/models/gguf.py, docs/any-model.md).

pit teacher list                                        # the packaged models and whether they are installed
pit teacher materialize smollm2-135m --out teachers/smollm2-135m
pit teacher materialize path/to/model.gguf --out teachers/mine   # any GGUF file of a supported family
pit teacher materialize --all --out teachers                     # every packaged model: teachers/<name>

The folder holds model.safetensors (float32, dequantised), config.json, the GGUF's tokenizer and provenance.json;
`pit convert`, `pit convert-check`, a profile's teacher slot, `pit diagnose` and LoRA take it like any folder.
Install the packaged models with `bash scripts/setup.sh --real-teachers`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pit.errors import PitError
from pit.models import gguf


def materialize(args: argparse.Namespace) -> int:
    if (args.source is None) == (not args.all):
        raise PitError(f"source {args.source!r} with --all {args.all}: expected a source or --all, not both")
    jobs = [(name, Path(args.out) / name) for name in gguf.PACKAGED] if args.all else [(args.source, Path(args.out))]
    for source, out in jobs:
        prov = gguf.materialize(source, out)
        types = ", ".join(f"{n} {k}" for k, n in prov["tensor_types"].items())
        print(
            f"materialized {source} ({prov['architecture']}, {prov['quantization']}: {types}; GGUF sha256 "
            f"{prov['gguf_sha256'][:12]}) -> {out} ({prov['dequantised_dtype']})"
        )
    return 0


def list_models(args: argparse.Namespace) -> int:
    print("| name | model | package | installed |\n|---|---|---|---|")
    for name, entry in gguf.PACKAGED.items():
        try:
            gguf.packaged_files(name)
            installed = "yes"
        except PitError:
            installed = f"no (`{gguf.INSTALL_HINT}`)"
        print(f"| {name} | {entry.model} | {entry.package}=={entry.version} | {installed} |")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "teacher",
        help="real pretrained teachers from GGUF files (materialize, list)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    m = actions.add_parser("materialize", help="write a teacher folder from a packaged model or a .gguf file")
    m.add_argument(
        "source", nargs="?", help=f"a packaged model ({', '.join(gguf.PACKAGED)}) or the path of a .gguf file"
    )
    m.add_argument("--all", action="store_true", help="every packaged model, each into OUT/<name>")
    m.add_argument("--out", required=True, help="the teacher folder to write (atomically); with --all its parent")
    m.set_defaults(func=materialize)
    ls = actions.add_parser("list", help="the packaged models and whether their packages are installed")
    ls.set_defaults(func=list_models)
