"""`pit teacher`: real pretrained teachers from GGUF files, offline (pit/models/gguf.py, docs/any-model.md).

pit teacher list                                        # the packaged models and whether they are installed
pit teacher materialize smollm2-135m --out teachers/smollm2-135m
pit teacher materialize path/to/model.gguf --out teachers/mine   # any GGUF file of a supported family
pit teacher materialize --all --out teachers                     # every packaged model: teachers/<name>
pit teacher pack teachers/smollm2-135m --out .stage/smollm2-135m   # its GGUF in pieces of <= 60 MB, sha256 manifest
pit teacher unpack .stage/smollm2-135m --out resources/teachers/smollm2   # there: the same folder, byte for byte
pit teacher unpack .stage/smollm2-135m --check                            # the pieces there and intact, no writing

The folder holds model.safetensors (float32, dequantised), config.json, the GGUF's tokenizer and provenance.json;
`pit convert`, `pit convert-check`, a profile's teacher slot, `pit diagnose` and LoRA take it like any folder.
Install the packaged models with `bash scripts/setup.sh --real-teachers`. `pack` and `unpack` carry a teacher folder
to a machine that takes files of a limited size and cannot install the package (a lent GPU machine; docs/study.md,
"The real teachers on one GPU"): its GGUF file in pieces, one manifest of every piece's and the whole file's
sha256, and the folder without its weights, whose sha256 the unpacked weights must have, with teacher/stage-files.json,
the sha256 of each of its files: `unpack` copies exactly those, each checked, and refuses a stage with any other.
`materialize` checks a GGUF file's header before any weight is allocated (its tokenizer fields, every tensor its
architecture needs) and every dequantised weight finite (pit/models/gguf_checks.py).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from pit.commands.common import check_outputs
from pit.errors import PitError
from pit.models import gguf


def sources(source: str) -> list[str]:
    """The files a teacher source reads: a .gguf path, or a packaged model's installed files (none when missing)."""
    if source not in gguf.PACKAGED:
        return [source]
    try:
        return [str(p) for p in gguf.packaged_files(source)]
    except PitError:  # not installed: materialize says so itself
        return []


def materialize(args: argparse.Namespace) -> int:
    if (args.source is None) == (not args.all):
        raise PitError(f"source {args.source!r} with --all {args.all}: expected a source or --all, not both")
    jobs = [(name, Path(args.out) / name) for name in gguf.PACKAGED] if args.all else [(args.source, Path(args.out))]
    for source, out in jobs:
        check_outputs([out], sources(source))
        prov = gguf.materialize(source, out)
        types = ", ".join(f"{n} {k}" for k, n in prov["tensor_types"].items())
        print(
            f"materialized {source} ({prov['architecture']}, {prov['quantization']}: {types}; GGUF sha256 "
            f"{prov['gguf_sha256'][:12]}) -> {out} ({prov['dequantised_dtype']})"
        )
    return 0


def pack(args: argparse.Namespace) -> int:
    if not (math.isfinite(args.piece_mb) and args.piece_mb * 1e6 >= 1):
        raise PitError(f"--piece-mb {args.piece_mb}: expected a size in MB (10^6 bytes), finite and at least 1e-06 "
                       "(one byte)")  # fmt: skip
    check_outputs([args.out], args.folder)
    entry = gguf.pack(args.folder, args.out, int(args.piece_mb * 1e6))
    sizes = ", ".join(f"{p['name']} ({p['bytes']:,} bytes)" for p in entry["pieces"])
    print(f"packed {args.folder} -> {args.out}: {entry['file']} ({entry['bytes']:,} bytes, sha256 "
          f"{entry['sha256'][:12]}) in {sizes}; {gguf.STAGE_TEACHER}/: the folder without its weights")  # fmt: skip
    return 0


def unpack(args: argparse.Namespace) -> int:
    if (args.out is None) != args.check:
        raise PitError(f"--out {args.out!r} with --check {args.check}: expected --out DIR, or --check alone")
    if args.out is not None and len(args.stages) > 1:
        raise PitError(f"{len(args.stages)} stages with --out {args.out!r}: expected one stage per teacher folder")
    check_outputs([args.out], args.stages)
    for stage in args.stages:
        if args.check:
            entry, present, missing, files = gguf.check_stage(stage)
            left = f"; missing: {', '.join(missing)}" if missing else ""
            print(f"{stage}: {len(present)} of {len(entry['pieces'])} pieces here, each as the manifest states; the "
                  f"{len(files)} files of {gguf.STAGE_TEACHER}/ as {gguf.STAGE_FILES} records{left}")  # fmt: skip
            continue
        prov = gguf.unpack(stage, args.out)
        weights = ", ".join(f"{k} {v[:12]}" for k, v in prov["weights_sha256"].items())
        print(f"unpacked {stage} -> {args.out}: {prov['source']} (GGUF sha256 {prov['gguf_sha256'][:12]}), weights "
              f"as recorded ({weights}), the other files as {gguf.STAGE_FILES} records")  # fmt: skip
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
    pk = actions.add_parser("pack", help="a teacher folder as its GGUF in pieces + the folder without weights")
    pk.add_argument("folder", help="a teacher folder made by `pit teacher materialize`")
    pk.add_argument("--out", required=True, help="the stage folder to write (atomically)")
    pk.add_argument("--piece-mb", type=float, default=60.0, help="most MB (10^6 bytes) per piece (default 60)")
    pk.set_defaults(func=pack)
    up = actions.add_parser("unpack", help="the teacher folder of a stage, made again and checked")
    up.add_argument("stages", nargs="+", metavar="STAGE", help="a stage folder of `pit teacher pack`")
    up.add_argument("--out", help="the teacher folder to write (atomically, after every check); one STAGE")
    up.add_argument("--check", action="store_true", help="only check the pieces that are there; write nothing")
    up.set_defaults(func=unpack)
    ls = actions.add_parser("list", help="the packaged models and whether their packages are installed")
    ls.set_defaults(func=list_models)
