"""`pit fixtures fineweb-edu|teacher`: offline stand-ins of the paper profile's hub inputs, in the hub's own formats
(config/paper-smoke.yaml; docs/workflow.md). The pipeline reads them through the same code as the hub ids."""

from __future__ import annotations

import argparse

from pit.errors import PitError


def _fineweb(args: argparse.Namespace) -> int:
    from pit.commands.common import check_outputs
    from pit.data.download import spec_sources
    from pit.data.hub_fixture import write_fineweb_fixture

    check_outputs([args.out], spec_sources({"source": "local", "glob": args.glob}))
    facts = write_fineweb_fixture(args.out, args.glob, args.exclude, args.max_bytes, args.shard_documents)
    print(
        f"FineWeb-Edu-format folder {args.out}: {facts['documents']} documents, {facts['bytes']} bytes of text in "
        f"{facts['shards']} Parquet shard(s) (config sample-10BT)"
    )
    return 0


def _teacher(args: argparse.Namespace) -> int:
    from pit.io import refuse_foreign_folder
    from pit.models.configs import TeacherSpec, get_spec
    from pit.models.teacher import TEACHER_FILES, write_random_teacher

    spec = get_spec(args.model)
    if not isinstance(spec, TeacherSpec) or spec.hub_id is None:
        raise PitError(f"--model {args.model!r}: expected a hub teacher's name, e.g. cerebras-gpt-256m")
    refuse_foreign_folder(args.out, TEACHER_FILES)  # before building a model of up to a few GB
    model = write_random_teacher(spec, args.out, args.seed)
    n = sum(p.numel() for p in model.parameters())
    print(f"teacher folder {args.out}: {args.model} shape ({spec.hub_id}), {n / 1e6:.1f}M parameters, seed {args.seed}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("fixtures", help="offline stand-ins of the paper's hub inputs, in the hub's formats")
    kinds = p.add_subparsers(dest="kind", metavar="KIND", required=True)
    f = kinds.add_parser(
        "fineweb-edu",
        help="a folder laid out as HuggingFaceFW/fineweb-edu (config sample-10BT) from local text files",
    )
    f.add_argument("--out", required=True, help="folder to write (the corpus' hub_id in the config)")
    f.add_argument("--glob", default="@stdlib/**/*.py", help="text files to use (@stdlib = the standard library)")
    f.add_argument("--exclude", nargs="*", default=["test/*", "idlelib/*", "site-packages/*"], help="fnmatch patterns")
    f.add_argument("--max-bytes", type=int, default=30_000_000, help="bytes of UTF-8 text at most")
    f.add_argument("--shard-documents", type=int, default=2000, help="rows per Parquet shard")
    f.set_defaults(func=_fineweb)
    t = kinds.add_parser("teacher", help="a teacher folder at a published teacher's shape, seeded random weights")
    t.add_argument("--model", required=True, help="cerebras-gpt-256m | cerebras-gpt-590m | cerebras-gpt-1.3b | ...")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--out", required=True, help="folder to write (the slot's teacher in the config)")
    t.set_defaults(func=_teacher)
