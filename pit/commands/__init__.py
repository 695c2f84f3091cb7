"""The `pit` command line: the seam every pipeline step goes through (litgpt's `__main__.py` pattern).

One module per subcommand under `pit/commands/`, one pattern: the module exposes `register(subparsers)`,
which adds its parser and sets `func` (a callable taking the parsed arguments and returning an exit code).
Only the chosen subcommand's module is imported, so a command pays only for the libraries it uses.
Add a subcommand with one COMMANDS entry. The library below holds no argparse.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import sys

from pit.checkout import VERSION, environment_mismatch, package_dir
from pit.errors import PitError
from pit.progress import library_bars_off

# command -> (module that registers it, one-line help shown by `pit --help`)
COMMANDS = {
    "data": ("pit.commands.data", "download a corpus, build tokenizers, tokenize"),
    "train": ("pit.commands.train", "one pretraining run (resumes from the run folder's latest checkpoint)"),
    "lora": ("pit.commands.lora", "LoRA post-training of a pretrained checkpoint (peft); merge adapters"),
    "evaluate": ("pit.commands.evaluate", "generate and score HumanEval, MBPP, GSM8K, SVAMP"),
    "diagnose": ("pit.commands.diagnose", "token-interface diagnostics of a checkpoint"),
    "side-effects": ("pit.commands.side_effects", "KL, loss change and interface change between two checkpoints"),
    "convert": ("pit.commands.convert", "convert any supported transformers causal LM to a PIT/TT/untied interface"),
    "convert-check": ("pit.commands.convert_check", "initial loss and interface errors of each PIT teacher init"),
    "teacher": ("pit.commands.teacher", "real pretrained teachers from GGUF files (materialize, list)"),
    "table": ("pit.commands.table", "build one of the paper's tables (Markdown, CSV, LaTeX)"),
    "figure": ("pit.commands.figure", "draw one of the paper's figures (PNG)"),
    "report": ("pit.commands.report", "write results/REPORT.md from the tables and figures"),
    "arch": ("pit.commands.arch", "Table 3: architectures and parameter counts"),
    "generate": ("pit.commands.generate", "continue prompts with a checkpoint (greedy, or seeded sampling)"),
    "chat": ("pit.commands.chat", "interactive generation: one prompt per stdin line until EOF"),
    "export": ("pit.commands.export", "write a plain untied transformers model with the same logits"),
    "bench": ("pit.commands.bench", "training throughput, MFU and memory on this machine"),
    "mlflow": ("pit.commands.mlflow", "MLflow utilities (sync run folders to a store, log the summary run)"),
    "fixtures": ("pit.commands.fixtures", "offline stand-ins of the paper's hub inputs (FineWeb-Edu, teachers)"),
    "runs": ("pit.commands.runs", "table of the MLflow store's runs and their final metrics"),
    "config": ("pit.commands.config", "check a workflow profile (YAML syntax, schema, run settings) in one line"),
    "share": ("pit.commands.share", "push results to a DVC remote, or pull them ready for Snakemake and MLflow"),
    "verify": ("pit.commands.verify", "rerun what a target needs in a scratch folder and compare with the record"),
    "plan": ("pit.commands.plan", "the bill before the run: FLOPs, GPU-hours, memory, disk, wall time per job"),
}


# What counts as bad input (one line on stderr, exit code 2): a PitError, or a path that is missing, a folder
# where a file was expected (or the reverse), or not readable (the message names the path).
BAD_INPUT = (PitError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
# A write the file system refuses is bad input too, whatever library made the write (`storage_error`): the disk or
# the user's quota is full, the file system is read-only, a file is larger than it allows; and a path whose access
# is denied (an OSError naming it: a write's temporary is named by its destination).
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)
ACCESS_ERRNOS = (errno.EACCES, errno.EPERM)
RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)|Os \{ code: (\d+)")  # std::io::Error (safetensors, tokenizers)
TEMPORARY_PART = re.compile(r"\.(.+)\.pit-tmp-\d+-[a-z0-9_]{8}\.tmp")  # pit.io.atomic_path's temporary folder


def version() -> str:
    """The installed distribution's version (its package metadata, which pyproject.toml takes from
    `pit.checkout.VERSION`), else that VERSION of the source folder on sys.path (a GPU machine's checkout)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("pit-repro")
    except PackageNotFoundError:
        return f"{VERSION} (source folder {package_dir().parent}, not installed)"


class PitArgumentParser(argparse.ArgumentParser):
    """argparse's parser with abbreviations off (`pit runs --stag x` is refused, not read as --stage) in every
    subcommand (add_subparsers makes its parsers of this class), each parser recorded as the namespace's
    `_pit_parser` so that an unknown flag is reported by the subcommand that got it (`unknown_flags`)."""

    def __init__(self, *args, allow_abbrev: bool = False, **kwargs):
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)
        self.set_defaults(_pit_parser=self)


def unknown_flags(parser: argparse.ArgumentParser, extras: list[str], settings=None) -> str:
    """argparse's message for arguments no parser took, with a hint per flag: a run setting (a field of the
    command's settings dataclass, `settings`) is set with `--set KEY=VALUE`; a near miss names the flag meant."""
    import dataclasses
    import difflib

    fields = {f.name for f in dataclasses.fields(settings)} if settings is not None else set()
    flags = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    hints = []
    for i, arg in enumerate(extras):
        if not arg.startswith("--"):
            continue
        flag, eq, value = arg.partition("=")
        key = flag[2:].replace("-", "_")
        if not eq and i + 1 < len(extras) and not extras[i + 1].startswith("-"):
            value = extras[i + 1]
        if key in fields:
            hints.append(f"{flag} is a run setting: use --set {key}={value or 'VALUE'}")
        elif close := difflib.get_close_matches(flag, flags, n=1, cutoff=0.75):
            hints.append(f"{flag}: did you mean {close[0]}?")
    return " ".join([f"unrecognized arguments: {' '.join(extras)}", *(f"({h})" for h in hints)])


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = PitArgumentParser(prog="pit", description="Pseudo-Inverse Tying: library and reproduction pipeline.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_text) in COMMANDS.items():
        if name == chosen:
            importlib.import_module(module).register(sub)
        else:
            sub.add_parser(name, help=help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not sys.stderr.isatty():  # a log file (a workflow job): no carriage-return bars of the libraries (the hub's
        library_bars_off()  # downloads, transformers' weight loading); before a command's module imports them
    args, extras = build_parser(argv).parse_known_args(argv)
    if extras:  # reported by the subcommand that got them, with its usage (and the hint --set KEY=VALUE)
        args._pit_parser.error(unknown_flags(args._pit_parser, extras, getattr(args, "run_settings", None)))
    reason = environment_mismatch()  # a workflow job run by another checkout's `pit` (docs/install.md)
    if reason:
        print(f"pit {args.command}: error: {reason}", file=sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except Exception as err:  # noqa: BLE001 -- bad input is one clear line; anything else is a bug: its traceback
        line = None if isinstance(err, PitError) else storage_error(err, args)
        if line is None and not isinstance(err, BAD_INPUT):
            raise
        print(f"pit {args.command}: error: {' '.join((line or str(err)).splitlines())}", file=sys.stderr)
        return 2


def _errors(err: BaseException):
    """`err` and the errors it was raised from or during (its __cause__ and __context__ chain)."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def destination_of(path: str) -> str:
    """The path a write to `path` was making: a file inside a temporary of pit.io.atomic_path
    (`DIR/.NAME.pit-tmp-PID-XXXXXXXX.tmp/NAME/...`) is named by where it goes (`DIR/NAME/...`)."""
    parts = list(os.path.normpath(path).split(os.sep))
    for i, part in enumerate(parts):
        m = TEMPORARY_PART.fullmatch(part)
        if m:
            rest = parts[i + 2 :] if parts[i + 1 : i + 2] == [m[1]] else parts[i + 1 :]
            return os.sep.join([*parts[:i], m[1], *rest])
    return path


def storage_error(err: BaseException, args: argparse.Namespace) -> str | None:
    """The one line for a write the file system refused (an errno of WRITE_ERRNOS in `err` or an error it came
    from: an OSError, or a library's message that carries the errno, as safetensors' and tokenizers' do), or for a
    path whose access is denied (ACCESS_ERRNOS, an OSError naming it); None for any other error. It names the path
    the OSError names (as its destination, `destination_of`), else the command's output (--out, DST), and the
    cause. The writers leave nothing half-written: pit.io.atomic_path removes its temporary."""
    for e in _errors(err):
        code, path = None, None
        if isinstance(e, OSError):
            code, path = e.errno, e.filename
        elif m := RUST_OS_ERROR.search(str(e)):
            code = int(m[1] or m[2])
        cause = f"{os.strerror(code)} ({errno.errorcode[code]})" if code in errno.errorcode else ""
        if code in ACCESS_ERRNOS and path is not None:
            return f"cannot access {destination_of(os.fsdecode(path))!r}: {cause}"
        if code in WRITE_ERRNOS:
            where = destination_of(os.fsdecode(path)) if path is not None else output_of(args)
            return (
                f"cannot write {where!r}: {cause}; nothing half-written was kept (free space, or choose a "
                "destination on a writable file system)"
            )
    return None


def output_of(args: argparse.Namespace) -> str:
    """The output a command names on its command line (--out, --out-dir, DST), in words when it names none."""
    for name in ("out", "dst", "out_dir"):
        value = getattr(args, name, None)
        if value:
            return str(value[0] if isinstance(value, list) and len(value) == 1 else value)
    return "its output"


def entry() -> int:
    """The `pit` program (console script and `python -m pit`): the host memory policy of the training commands
    (pit/training/allocator.py, which re-executes the process once to set it), then `main`."""
    from pit.training.allocator import reexec_with_policy

    reexec_with_policy(sys.argv[1:])
    return main()
