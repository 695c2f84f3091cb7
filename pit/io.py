"""Atomic file writes and hashing: finished work is never replaced by a half-written file.

`atomic_path(path)` works in a temporary folder `.NAME.PID-XXXXXXXX.tmp` next to `path` (PID: the writing
process) and renames the result onto `path`; a process killed before the rename leaves that folder behind,
and the next `atomic_path(path)` removes it (`remove_stale_temporaries`, which also sweeps a whole folder).
`write_file_set` writes files that belong together (a table's .md/.csv/.tex) as one unit a reader can check:
a manifest of their hashes (`sha256sum -c` format), written last. `split_file` cuts a file into pieces for a
transfer that takes files of a limited size, with one manifest of every piece's and the whole file's sha256;
`check_pieces` and `join_pieces` verify and reassemble them on the other side.
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pit.errors import PitError


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, replace_any: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success rename it onto `path` (atomic on POSIX).

    Works for files and directories. On error the temporary is removed and `path` is untouched. Temporaries of
    `path` that a killed process left behind are removed first (`remove_stale_temporaries`). A folder is only
    ever replaced by a folder and a file by a file: writing a file where a folder is (or the reverse) is a PitError
    and leaves `path` as it was, so a mistyped --out never deletes a folder of results. A folder is only replaced
    by one of its kind: every name in the old folder must be in the new one (an earlier output of the same
    command), else a PitError names what the old folder holds that this write does not make; `replace_any`
    (`pit export --force`) lifts that rule.
    """
    path = Path(path)
    blocked = next((p for p in [path.parent, *path.parent.parents] if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise PitError(f"cannot write {str(path)!r}: {str(blocked)!r} is a file, not a folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent, path.name)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".tmp", dir=path.parent))
    target = tmp / path.name
    try:
        yield target
        if path.exists() and path.is_dir() != target.is_dir():
            have, new = ("a folder", "a file") if path.is_dir() else ("a file", "a folder")
            raise PitError(f"{str(path)!r} is {have}; this writes {new} there: nothing was replaced (choose another "
                           "path, or remove it yourself)")  # fmt: skip
        if path.is_dir() and not path.is_symlink():
            _check_same_kind(path, target, replace_any)
            old = path.with_name(f".{path.name}.old.tmp")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(target, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(target, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_same_kind(path: Path, new: Path, replace_any: bool) -> None:
    """A PitError unless the folder `new` may replace the folder `path` (see `atomic_path`)."""
    if not replace_any:
        refuse_foreign_folder(path, [glob.escape(name) for name in os.listdir(new)])


def refuse_foreign_folder(path: str | os.PathLike, names: Iterable[str]) -> None:
    """A PitError when `path` is a folder holding anything but `names` (what the command writes there; fnmatch
    patterns): checked before a long job whose `atomic_path` would refuse at its end anyway."""
    path, names = Path(path), tuple(names)
    held = os.listdir(path) if path.is_dir() else []
    extra = sorted(n for n in held if not any(fnmatch.fnmatchcase(n, pattern) for pattern in names))
    if extra:
        shown = ", ".join(extra[:4]) + (", ..." if len(extra) > 4 else "")
        raise PitError(
            f"{str(path)!r} is a folder this command did not write (it holds {shown}, which this command does not "
            "make): nothing was replaced (choose another path, or remove it yourself)"
        )


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def json_text(obj: Any) -> str:
    """The JSON files' format: indented, keys sorted, a final newline."""
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json_text(obj))


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


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


# .NAME.PID-XXXXXXXX.tmp (this module), .NAME.XXXXXXXX.tmp (older versions), .NAME.old.tmp (a replaced folder)
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.(?:(?P<pid>\d+)-)?[a-z0-9_]+\.tmp")


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
    """Remove the temporaries `atomic_path` left in `folder` when its process was killed before the rename:
    those of `folder/name` (of every path in `folder` when `name` is None) whose writing process is no longer
    running. A temporary of a live process (a writer at work) is kept. Returns the paths removed."""
    folder = Path(folder)
    pattern = f".{glob.escape(name)}.*.tmp" if name is not None else ".*.tmp"
    removed = []
    for tmp in sorted(folder.glob(pattern)):
        m = _TEMPORARY.fullmatch(tmp.name)
        if m is None or (name is not None and m["name"] != name) or (m["pid"] and _running(int(m["pid"]))):
            continue
        shutil.rmtree(tmp) if tmp.is_dir() and not tmp.is_symlink() else tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


def manifest_text(paths: list[Path]) -> str:
    """`sha256sum` lines (`HASH  NAME`) of files in one folder."""
    return "".join(f"{sha256_file(p)}  {p.name}\n" for p in paths)


def write_file_set(texts: dict[Path, str], manifest: str | os.PathLike) -> None:
    """Write files of one folder that belong together as one unit. Each file is written to a temporary first;
    then the old manifest is removed, the files are renamed into place, and the new manifest (their sha256, the
    format of `sha256sum`) is written last. Killed at any point, the folder holds either a complete set that
    matches its manifest or no manifest: `file_set_complete` tells which (`sha256sum -c MANIFEST` too)."""
    manifest = Path(manifest)
    paths = [Path(p) for p in texts]
    with contextlib.ExitStack() as stack:
        for path, text in texts.items():
            stack.enter_context(atomic_path(path)).write_text(text)
        manifest.unlink(missing_ok=True)  # from here until the new manifest, the set reads as incomplete
    write_text(manifest, manifest_text(paths))


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
    names = [entry.get("file"), *(p.get("name") for p in entry.get("pieces") or [] if isinstance(p, dict))]
    plain = all(isinstance(n, str) and n and Path(n).name == n and n not in (".", "..") for n in names)
    if not isinstance(entry, dict) or entry.get("format") != PIECES_FORMAT or not entry.get("pieces") or not plain:
        raise PitError(f"{str(manifest)!r} is not a manifest of pieces; expected {PIECES_FORMAT} as "
                       "`pit teacher split` writes it (file, bytes, sha256, pieces of plain file names)")  # fmt: skip
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
