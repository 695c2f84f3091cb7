"""Writing outputs: one rule for every command, atomic writes, hashing.

The output rule (docs/reproducibility.md, "A command never destroys an input or what it did not make"):

1. `check_output(dst, sources)`: a destination that is one of the command's sources, contains one, or lies inside
   one is refused (one PitError line, exit 2), with or without --force. Every command with an output calls it
   before any work. Paths are compared where the kernel resolves them (`os.path.realpath`: a symbolic link before
   the '..' after it, so `lnk/..` is the folder above the link's target), and `atomic_path` writes there too.
   Every file a command reads is a source: its --spec, --spec-file and --config files too.
2. `atomic_path(path)` replaces only what this command made: a folder only by a folder holding every name of the
   old one, a file only by a file of its kind (`same_kind`: a JSON object by one with every key of the old one, a
   JSON Lines file by one whose first row has every key of the old first row, a CSV by one with every column of
   the old header, any other file by one with the same first line; an empty file by anything; a writer whose
   output varies more passes its own `replaces` test). Anything else is one PitError line, and nothing is written.
   Where a file of the same kind could be someone else's, "made by this command" must be provable: a mark in the
   file (pit evaluate's samples and results), or a record the command wrote (a download's progress.json lists its
   shards; a run folder's lock, staging folder and checkpoints carry pit's marker), never the same keys alone.
3. Temporaries carry a name no user chooses, `.NAME.pit-tmp-PID-XXXXXXXX.tmp` (PID: the writing process), and
   only those of processes that are no longer running are removed; a file merely named like a temporary is never
   touched.
4. A folder is replaced in two renames: the old one to `.NAME.pit-old-PID.tmp`, the new one into place, then the
   old copy is removed. A process killed between the renames leaves the destination missing and the old copy
   beside it: the next write of that path (or `remove_stale_temporaries`) puts the old copy back first, never
   deletes it; an old copy beside a destination that is in place is the leftover of a finished replacement.

`write_file_set` writes files that belong together (a table's .md/.csv/.tex) as one unit a reader can check: a
manifest of their hashes (`sha256sum -c` format), written last. `split_file` cuts a file into pieces for a
transfer that takes files of a limited size, with one manifest of every piece's and the whole file's sha256;
`check_pieces` and `join_pieces` verify and reassemble them on the other side.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import glob
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from pit.errors import PitError

log = logging.getLogger("pit.io")
FIRST_LINE_BYTES = 256  # how much of a file's first line `same_kind` compares


def _resolved(path: str | os.PathLike) -> Path:
    """Where the kernel finds `path`: each component in turn, a symbolic link resolved before a '..' after it is
    applied (`os.path.realpath` alone; `os.path.abspath` first would collapse `lnk/..` lexically)."""
    return Path(os.path.realpath(path))


def destination(path: str | os.PathLike) -> Path:
    """The absolute path a write of `path` lands on, as the kernel resolves it: its folder resolved (`_resolved`)
    and its last name kept (a symbolic link there is the destination itself); a path whose last name is '.' or
    '..' (or ends in a slash) names the folder it resolves to."""
    head, name = os.path.split(os.fspath(path))
    if name in ("", ".", ".."):
        return _resolved(path)
    return _resolved(head or ".") / name


def check_output(dst: str | os.PathLike, sources: Iterable[str | os.PathLike | None], flag: str = "--out") -> None:
    """Rule 1: a PitError when the destination `dst` is one of `sources` (files or folders the command reads),
    contains one, or lies inside one (paths compared after resolving symbolic links). Sources that do not exist (None,
    a hub id, a missing file the command itself reports) hold nothing to destroy and are skipped."""
    out = _resolved(dst)
    for source in (s for s in sources if s is not None and str(s) != "" and os.path.lexists(s)):
        src = _resolved(source)
        if out == src:
            how = "is its source"
        elif out in src.parents:
            how = "contains its source"
        elif src in out.parents:
            how = "lies inside its source"
        else:
            continue
        raise PitError(
            f"{flag} {str(dst)!r} {how} {str(source)!r}: a command never writes where it reads (it would replace or "
            "change its input); choose a destination outside it"
        )


@contextlib.contextmanager
def atomic_path(
    path: str | os.PathLike, replace_any: bool = False, replaces: Callable[[Path], bool] | None = None
) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success rename it onto `path` (atomic on POSIX).

    Works for files and directories; `path` is written where the kernel resolves it (`destination`: through
    symbolic links and '..' in order), messages name it as given. On error the temporary is removed and `path` is
    untouched. First the leftovers of killed writers of `path` are cleared (`remove_stale_temporaries`: an
    interrupted folder replacement is put back). A folder is only ever replaced by a folder and a file by a file:
    writing a file where a folder is (or the reverse) is a PitError and leaves `path` as it was, so a mistyped --out
    never deletes a folder of results. A folder is only replaced by one of its kind: every name in the old folder
    must be in the new one (an earlier output of the same command), else a PitError names what the old folder holds
    that this write does not make; a file only by one of its kind: `replaces(old)` when given, else
    `same_kind(old, new)`.
    `replace_any` (`pit export --force`) lifts both kind rules.
    What is renamed into place has the modes a plain `open` / `mkdir` gives under the process umask
    (`plain_modes`), whatever mode the writer gave it (safetensors writes 0600 files).
    """
    shown, path = str(path), destination(path)
    blocked = next((p for p in [path.parent, *path.parent.parents] if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise PitError(f"cannot write {shown!r}: {str(blocked)!r} is a file, not a folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent, path.name)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.pit-tmp-{os.getpid()}-", suffix=".tmp", dir=path.parent))
    target = tmp / path.name
    try:
        yield target
        if path.exists() and path.is_dir() != target.is_dir():
            have, new = ("a folder", "a file") if path.is_dir() else ("a file", "a folder")
            raise PitError(f"{shown!r} is {have}; this writes {new} there: nothing was replaced (choose another "
                           "path, or remove it yourself)")  # fmt: skip
        if path.is_dir() and not path.is_symlink():
            _check_same_kind(path, target, replace_any, shown)
            plain_modes(target)
            old = path.with_name(f".{path.name}.pit-old-{os.getpid()}.tmp")
            os.replace(path, old)  # from here until the next rename, `old` is the only copy (rule 4)
            os.replace(target, path)
            shutil.rmtree(old)
        else:
            if path.is_file() and not replace_any:
                _check_file_kind(path, target, replaces, shown)
            plain_modes(target)
            os.replace(target, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def process_umask() -> int:
    """The process umask: Linux's /proc/self/status states it; elsewhere it is set and put back at once."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        mask = os.umask(0o022)
        os.umask(mask)
        return mask


def plain_modes(target: Path) -> None:
    """Give `target` (a file, or a folder and everything in it; links are left alone) the modes a plain `open` or
    `mkdir` gives under the process umask: 0o666 & ~umask for a file, 0o777 & ~umask for a folder or a file with an
    execute bit. A writer that makes private files (safetensors: 0600) or folders (tempfile: 0700) does not make
    the output private."""
    mask = process_umask()
    paths = [target, *target.rglob("*")] if target.is_dir() and not target.is_symlink() else [target]
    for p in paths:
        if p.is_symlink() or not p.exists():
            continue
        executable = p.is_dir() or p.stat().st_mode & 0o111
        os.chmod(p, (0o777 if executable else 0o666) & ~mask)


def _first_line(path: Path, limit: int = FIRST_LINE_BYTES) -> bytes:
    with open(path, "rb") as f:
        return f.readline(limit).rstrip(b"\n")


def _json_keys(text: str) -> tuple[type, set] | None:
    """(JSON type, top-level keys of an object) of a JSON text, or None when it is not JSON."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return None
    return type(value), set(value) if isinstance(value, dict) else set()


JSON_SNIFF_BYTES = 64 << 20  # a new file up to this size that opens with { or [ is read whole as JSON by `same_kind`


def same_kind(old: Path, new: Path) -> bool:
    """Rule 2 for files: whether the file `new` may replace the file `old` as an earlier output of the same command
    (see the module docstring). The kind is the new content's: a JSON document (whole), JSON Lines (.jsonl), a CSV
    (.csv), else any file by its first line."""
    if old.stat().st_size == 0:
        return True  # nothing to lose
    try:
        first_old, first_new = _first_line(old), _first_line(new)
        if first_new[:1] in (b"{", b"[") and new.suffix != ".jsonl" and new.stat().st_size <= JSON_SNIFF_BYTES:
            b = _json_keys(new.read_text())
            if b is not None:
                a = _json_keys(old.read_text()) if old.stat().st_size <= JSON_SNIFF_BYTES else None
                return a is not None and a[0] is b[0] and a[1] <= b[1]
        if new.suffix == ".jsonl":
            first_old, first_new = _first_line(old, JSON_SNIFF_BYTES), _first_line(new, JSON_SNIFF_BYTES)
            a, b = _json_keys(first_old.decode()), _json_keys(first_new.decode() or "{}")
            return a is not None and b is not None and a[0] is dict and bool(first_new) and a[1] <= b[1]
        if new.suffix == ".csv":
            return set(first_old.decode().split(",")) <= set(first_new.decode().split(","))
    except (OSError, UnicodeDecodeError):
        return False
    return first_old == first_new


def opens_with(marker: str, within: int = 512) -> Callable[[Path], bool]:
    """A `replaces` test (rule 2): the old file holds `marker` in its first `within` bytes (a writer whose first
    line varies, e.g. with the profile, but whose opening always names what it is)."""

    def test(old: Path) -> bool:
        with open(old, "rb") as f:
            return marker.encode() in f.read(within)

    return test


def _check_file_kind(path: Path, new: Path, replaces: Callable[[Path], bool] | None, shown: str) -> None:
    """A PitError naming `shown` unless the file `new` may replace the file `path` (rule 2: `replaces`, else
    `same_kind`)."""
    if not (replaces(path) if replaces is not None else same_kind(path, new)):
        raise PitError(
            f"{shown!r} is a file this command did not write (its content is not of the kind this command "
            "writes there): nothing was replaced (choose another path, or remove it yourself)"
        )


def _check_same_kind(path: Path, new: Path, replace_any: bool, shown: str) -> None:
    """A PitError unless the folder `new` may replace the folder `path` (see `atomic_path`)."""
    if not replace_any:
        refuse_foreign_folder(path, [glob.escape(name) for name in os.listdir(new)], shown)


def refuse_foreign_folder(path: str | os.PathLike, names: Iterable[str], shown: str | None = None) -> None:
    """A PitError (naming `shown`, else `path`) when `path` is a folder holding anything but `names` (what the
    command writes there; fnmatch patterns): checked before a long job whose `atomic_path` would refuse at its end
    anyway."""
    shown, path, names = shown or str(path), Path(path), tuple(names)
    held = os.listdir(path) if path.is_dir() else []
    extra = sorted(n for n in held if not any(fnmatch.fnmatchcase(n, pattern) for pattern in names))
    if extra:
        listed = ", ".join(extra[:4]) + (", ..." if len(extra) > 4 else "")
        raise PitError(
            f"{shown!r} is a folder this command did not write (it holds {listed}, which this command does not "
            "make): nothing was replaced (choose another path, or remove it yourself)"
        )


def write_text(path: str | os.PathLike, text: str, replaces: Callable[[Path], bool] | None = None) -> None:
    with atomic_path(path, replaces=replaces) as tmp:
        tmp.write_text(text)


def json_text(obj: Any) -> str:
    """The JSON files' format: indented, keys sorted, a final newline."""
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def write_json(path: str | os.PathLike, obj: Any, replaces: Callable[[Path], bool] | None = None) -> None:
    write_text(path, json_text(obj), replaces)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_path(path: str | os.PathLike) -> str:
    """sha256 of a file; of a folder, the sha256 of its `sha256sum` listing (`HASH  RELATIVE/PATH` lines, sorted) of
    every file below it but hidden ones (names starting with '.': Snakemake's timestamps, locks, temporaries)."""
    path = Path(path)
    if not path.is_dir():
        return sha256_file(path)
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )
    listing = "".join(f"{sha256_file(f)}  {f.relative_to(path).as_posix()}\n" for f in files)
    return hashlib.sha256(listing.encode()).hexdigest()


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """The rows of a JSON Lines file (blank lines skipped), e.g. a run's metrics.jsonl; a missing or unreadable
    file, or a line that is not JSON, is one PitError naming the file (and the line), as `read_json` does."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise PitError(f"{str(path)!r} does not exist; expected a JSON Lines file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise PitError(f"{str(path)!r} cannot be read ({err}); expected a JSON Lines file") from None
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise PitError(
                f"{str(path)!r} line {n} is not valid JSON ({err}); expected one JSON value per line "
                "(a half-written or damaged file?)"
            ) from None
    return rows


# .NAME.pit-tmp-PID-XXXXXXXX.tmp (a write at work), .NAME.pit-old-PID.tmp (the old copy of a folder being replaced)
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.pit-(?:tmp-(?P<pid>\d+)-[a-z0-9_]{8}|old-(?P<old>\d+))\.tmp")


def _running(pid: int) -> bool:
    """Whether a process `pid` exists on this machine (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(folder: str | os.PathLike, name: str | None = None) -> list[Path]:
    """Clear what writers of `folder/name` (of every path in `folder` when `name` is None) left when they were
    killed, for those whose process is no longer running (a live writer's temporaries are kept): a temporary is
    removed; the old copy of an interrupted folder replacement is put back where the destination is missing (rule
    4), else removed. Only names of `_TEMPORARY`'s exact form are touched. Returns the paths removed or put back."""
    folder = Path(folder)
    pattern = f".{glob.escape(name)}.pit-*.tmp" if name is not None else ".*.pit-*.tmp"
    handled = []
    for tmp in sorted(folder.glob(pattern)):
        m = _TEMPORARY.fullmatch(tmp.name)
        if m is None or (name is not None and m["name"] != name) or _running(int(m["pid"] or m["old"])):
            continue
        dest = folder / m["name"]
        if m["old"] and not dest.exists() and not dest.is_symlink():
            os.replace(tmp, dest)
            log.warning("put back %s: a replacement of it was interrupted before the new copy was in place", dest)
        else:
            shutil.rmtree(tmp) if tmp.is_dir() and not tmp.is_symlink() else tmp.unlink(missing_ok=True)
        handled.append(tmp)
    return handled


def manifest_text(paths: list[Path]) -> str:
    """`sha256sum` lines (`HASH  NAME`) of files in one folder."""
    return "".join(f"{sha256_file(p)}  {p.name}\n" for p in paths)


def write_file_set(
    texts: dict[Path, str], manifest: str | os.PathLike, replaces: Callable[[Path], bool] | None = None
) -> None:
    """Write files of one folder that belong together as one unit. Each file is written to a temporary first;
    then the old manifest is removed, the files are renamed into place, and the new manifest (their sha256, the
    format of `sha256sum`) is written last. Killed at any point, the folder holds either a complete set that
    matches its manifest or no manifest: `file_set_complete` tells which (`sha256sum -c MANIFEST` too). `replaces`:
    see `atomic_path` (for every file of the set and the manifest)."""
    manifest = Path(manifest)
    paths = [Path(p) for p in texts]
    foreign = [p for p in [*paths, manifest] if p.is_file() and replaces is not None and not replaces(p)]
    if foreign:  # checked before any file of the set is replaced
        raise PitError(f"{str(foreign[0])!r} is a file this command did not write: nothing was replaced (choose "
                       "another path, or remove it yourself)")  # fmt: skip
    with contextlib.ExitStack() as stack:
        for path, text in texts.items():
            stack.enter_context(atomic_path(path, replaces=replaces)).write_text(text)
        manifest.unlink(missing_ok=True)  # from here until the new manifest, the set reads as incomplete
    write_text(manifest, manifest_text(paths), replaces)


def file_set_complete(manifest: str | os.PathLike) -> bool:
    """Whether the files a manifest of `write_file_set` lists are all there with the hashes it records."""
    manifest = Path(manifest)
    if not manifest.is_file():
        return False
    for line in manifest.read_text().splitlines():
        digest, _, name = line.partition("  ")
        path = manifest.parent / name
        if not path.is_file() or sha256_file(path) != digest:
            return False
    return True


YAML_MAX_DEPTH = 100  # nesting of mappings and sequences a YAML input may have (a profile has 5)


@functools.cache
def yaml_loader(base=None):
    """PyYAML's safe loader (or `base`, a subclass of it) that refuses, as a YAML error with its line and column
    (pit.errors.yaml_error_text), what it would otherwise turn into a traceback later: nesting deeper than
    YAML_MAX_DEPTH (PyYAML composes recursively: a RecursionError) and a recursive alias (`a: &x [*x]`, an object
    that contains itself: "Circular reference detected" once it is serialised)."""
    import yaml
    from yaml.composer import ComposerError

    class BoundedLoader(base or yaml.SafeLoader):
        def compose_node(self, parent, index):
            event, open_anchors = self.peek_event(), self.__dict__.setdefault("_open_anchors", [])
            if isinstance(event, yaml.AliasEvent):
                if event.anchor in open_anchors:
                    raise ComposerError(f"while composing the node &{event.anchor}", None,
                                        f"found a recursive alias *{event.anchor} (a node that contains itself)",
                                        event.start_mark)  # fmt: skip
                return super().compose_node(parent, index)
            if len(open_anchors) >= YAML_MAX_DEPTH:
                raise ComposerError(None, None, f"nested deeper than {YAML_MAX_DEPTH} levels", event.start_mark)
            open_anchors.append(getattr(event, "anchor", None))
            try:
                return super().compose_node(parent, index)
            finally:
                open_anchors.pop()

    return BoundedLoader


def load_yaml(text: str, loader=None):
    """`text` read by `yaml_loader(loader)`; its errors are PyYAML's (yaml.YAMLError), with their marks."""
    import yaml

    return yaml.load(text, Loader=yaml_loader(loader))


def read_json(path):
    """A JSON file's value; a missing, unreadable or half-written file (a killed writer, a damaged sidecar) is one
    PitError naming it, where `json.loads` would raise an error that names neither the file nor the cause."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise PitError(f"{str(path)!r} does not exist; expected a JSON file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise PitError(f"{str(path)!r} cannot be read ({err}); expected a JSON file") from None
    except json.JSONDecodeError as err:
        raise PitError(
            f"{str(path)!r} is not valid JSON ({err}); expected one JSON value (a half-written or damaged file?)"
        ) from None


PIECES_FORMAT = "pit-pieces/1"
PIECES_SUFFIX = ".pieces.json"  # the manifest of FILE's pieces: FILE.pieces.json beside FILE.part00, FILE.part01, ...


def concatenate_checked(parts: list[Path], sha256: str, out: Path, what: str = "the parts", stated: str = "stated"):
    """Write the parts one after another to `out` while hashing them; a sha256 other than `sha256` is a PitError
    naming `what` and where the expected hash is `stated` (and `out` is removed)."""
    digest = hashlib.sha256()
    with open(out, "wb") as f:
        for part in parts:
            with open(part, "rb") as src:
                while block := src.read(1 << 22):
                    digest.update(block)
                    f.write(block)
    if digest.hexdigest() != sha256:
        out.unlink()
        raise PitError(f"{what} {[p.name for p in parts]} concatenate to sha256 {digest.hexdigest()[:16]}...; "
                       f"expected {sha256[:16]}... as {stated} states (damaged or changed files)")  # fmt: skip


def split_file(path: str | os.PathLike, out_dir: str | os.PathLike, max_piece_bytes: int) -> Path:
    """Cut `path` into n = ceil(size / max_piece_bytes) pieces of ceil(size / n) bytes (the last one the rest),
    out_dir/NAME.part00 ..., and write their manifest out_dir/NAME.pieces.json last (PIECES_FORMAT: the file's
    name, size and sha256, and each piece's): a folder with the manifest holds every piece. Pieces of an earlier
    split of the same name are removed first. Returns the manifest's path."""
    path, out_dir = Path(path), Path(out_dir)
    if max_piece_bytes < 1:
        raise PitError(f"piece size {max_piece_bytes} bytes: expected at least 1")
    size = path.stat().st_size
    count = max(1, -(-size // max_piece_bytes))
    step = max(1, -(-size // count))
    manifest = out_dir / f"{path.name}{PIECES_SUFFIX}"
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest.unlink(missing_ok=True)  # from here until the new manifest is written, the set reads as incomplete
    for old in out_dir.glob(f"{glob.escape(path.name)}.part[0-9]*"):
        old.unlink()
    whole, pieces = hashlib.sha256(), []
    with open(path, "rb") as src:
        for k in range(count):
            data = src.read(step)
            whole.update(data)
            name = f"{path.name}.part{k:02d}"
            with atomic_path(out_dir / name) as tmp:
                tmp.write_bytes(data)
            pieces.append({"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    entry = {"format": PIECES_FORMAT, "file": path.name, "bytes": size, "sha256": whole.hexdigest(), "pieces": pieces}
    write_json(manifest, entry)
    return manifest


def read_pieces_manifest(manifest: str | os.PathLike) -> dict:
    """A manifest of `split_file`; another file, or one whose names are not plain file names, is a PitError."""
    entry = read_json(manifest)
    entry = entry if isinstance(entry, dict) else {}
    pieces = entry.get("pieces") if isinstance(entry.get("pieces"), list) else []
    names = [entry.get("file"), *(p.get("name") if isinstance(p, dict) else None for p in pieces)]
    plain = all(isinstance(n, str) and n and Path(n).name == n and n not in (".", "..") for n in names)
    if entry.get("format") != PIECES_FORMAT or not pieces or not plain:
        raise PitError(f"{str(manifest)!r} is not a manifest of pieces; expected {PIECES_FORMAT} as "
                       "`pit teacher pack` writes it (file, bytes, sha256, pieces of plain file names)")  # fmt: skip
    return entry


def check_pieces(manifest: str | os.PathLike) -> tuple[dict, list[str], list[str]]:
    """(the manifest, the names of the pieces beside it that have the size and sha256 it records, the names of those
    missing). A piece there with another size or sha256 is a PitError naming it."""
    manifest = Path(manifest)
    entry = read_pieces_manifest(manifest)
    present, missing = [], []
    for piece in entry["pieces"]:
        path = manifest.parent / piece["name"]
        if not path.is_file():
            missing.append(piece["name"])
            continue
        size, digest = path.stat().st_size, sha256_file(path)
        if (size, digest) != (piece["bytes"], piece["sha256"]):
            raise PitError(f"piece {piece['name']!r}: {size} bytes, sha256 {digest[:16]}...; expected {piece['bytes']} "
                           f"bytes, sha256 {piece['sha256'][:16]}... as {manifest.name} states (damaged in transfer: "
                           "send that piece again)")  # fmt: skip
        present.append(piece["name"])
    return entry, present, missing


def join_pieces(manifest: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """out_dir/FILE from the pieces beside its manifest: every piece checked (`check_pieces`), then concatenated and
    checked against the file's sha256, written atomically. A missing or changed piece is a PitError naming it."""
    manifest = Path(manifest)
    entry, _, missing = check_pieces(manifest)
    if missing:
        raise PitError(f"{entry['file']}: pieces {missing} are not beside {str(manifest)!r}; expected all "
                       f"{len(entry['pieces'])} pieces its manifest lists (send the missing ones)")  # fmt: skip
    out = Path(out_dir) / entry["file"]
    parts = [manifest.parent / p["name"] for p in entry["pieces"]]
    with atomic_path(out) as tmp:
        concatenate_checked(parts, entry["sha256"], tmp, "the pieces", manifest.name)
    return out
