"""Download a corpus into local Parquet shards, from the Hugging Face hub (streamed) or local files.

A corpus folder holds
    train-NNNNN.parquet, val-NNNNN.parquet  one pair per chunk of `shard_documents` stream documents
    progress.json                           the finished chunks (and the one being written): an interrupted
                                            download resumes
    manifest.json                           written last: spec, shards (rows, sha256), documents
                                            (local source) and `manifest_sha256`
Both sources are one ordered stream of documents (local files a plain generator, the hub a streaming
`datasets.IterableDataset`), so the chunking, the train/validation split and the resume logic are shared.
A download removes or replaces only the shards its own progress.json lists: a file named like a shard that it does
not list is refused before anything is touched, and other files in the folder are never touched.
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import itertools
import json
import os
import re
import sysconfig
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pit.errors import PitError
from pit.io import atomic_path, opens_with, sha256_file, write_json
from pit.progress import progress_bar

STDLIB = "@stdlib"  # glob prefix: the running interpreter's standard library folder
COMMON_KEYS = {"name", "source", "max_documents", "max_bytes", "val_fraction", "seed", "shard_documents"}
SOURCE_KEYS = {"local": {"glob", "exclude"}, "hub": {"hub_id", "hub_config", "hub_split", "text_field"}}
SPLITS = ("train", "val")


def check_spec(spec: dict[str, Any]) -> None:
    """Raise PitError unless `spec` is a complete corpus spec (the `corpus` config section)."""
    if not isinstance(spec, dict):
        raise PitError(f"corpus spec: expected a JSON object, got {type(spec).__name__}")
    source = spec.get("source")
    if not isinstance(source, str) or source not in SOURCE_KEYS:
        raise PitError(f"corpus source {source!r}: expected one of {sorted(SOURCE_KEYS)}")
    expected = COMMON_KEYS | SOURCE_KEYS[source]
    if missing := sorted(expected - spec.keys()):
        raise PitError(f"corpus spec misses key(s) {missing} for source {source!r}")
    if unknown := sorted(spec.keys() - expected - set().union(*SOURCE_KEYS.values())):
        raise PitError(f"corpus spec has unknown key(s) {unknown}")
    for key in ("name", "glob", "hub_id", "hub_split", "text_field"):
        if key in spec and (not isinstance(spec[key], str) or not spec[key]):
            raise PitError(f"corpus {key} {spec[key]!r}: expected a non-empty string")
    if "exclude" in spec and not (
        isinstance(spec["exclude"], list) and all(isinstance(e, str) for e in spec["exclude"])
    ):
        raise PitError(f"corpus exclude {spec['exclude']!r}: expected a list of fnmatch patterns (may be empty)")
    if not isinstance(spec["seed"], int) or isinstance(spec["seed"], bool) or spec["seed"] < 0:
        raise PitError(f"corpus seed {spec['seed']!r}: expected an integer >= 0")
    for key in ("max_documents", "max_bytes"):
        if spec[key] is not None and (not isinstance(spec[key], int) or isinstance(spec[key], bool) or spec[key] < 1):
            raise PitError(f"corpus {key} {spec[key]!r}: expected a positive integer or null")
    if not isinstance(spec["shard_documents"], int) or spec["shard_documents"] < 1:
        raise PitError(f"corpus shard_documents {spec['shard_documents']!r}: expected a positive integer")
    if not isinstance(spec["val_fraction"], (int, float)) or not 0 < spec["val_fraction"] < 1:
        raise PitError(f"corpus val_fraction {spec['val_fraction']!r}: expected a number in (0, 1)")


# ---------------------------------------------------------------------------------------------
# Sources


def glob_root(pattern: str) -> Path:
    """The folder a glob is relative to: its longest leading part without wildcards."""
    parts = Path(pattern).parts
    fixed = list(itertools.takewhile(lambda part: not re.search(r"[*?\[]", part), parts))
    return Path(*fixed) if fixed else Path(".")


def local_files(pattern: str, exclude: list[str]) -> tuple[Path, list[str]]:
    """Expand `pattern` (`@stdlib` = the stdlib folder) into (root, sorted relative file paths)."""
    expanded = pattern.replace(STDLIB, sysconfig.get_paths()["stdlib"], 1)
    root = glob_root(expanded)
    files = (Path(path).relative_to(root).as_posix() for path in glob.glob(expanded, recursive=True))
    paths = sorted(
        rel for rel in files if (root / rel).is_file() and not any(fnmatch.fnmatch(rel, ex) for ex in exclude)
    )
    if not paths:
        raise PitError(f"corpus glob {pattern!r} (expanded to {expanded!r}) matches no files")
    return root, paths


def spec_sources(spec: dict[str, Any]) -> list[str]:
    """The local folders a corpus spec reads (the glob's root; a hub id that is a local folder): the sources the
    output rule keeps a download's folder out of (pit.io.check_output)."""
    if not isinstance(spec, dict):
        return []
    if spec.get("source") == "local" and isinstance(spec.get("glob"), str):
        return [str(glob_root(spec["glob"].replace(STDLIB, sysconfig.get_paths()["stdlib"], 1)))]
    hub_id = spec.get("hub_id")
    return [hub_id] if isinstance(hub_id, str) and Path(hub_id).is_dir() else []


def as_text(data: bytes) -> tuple[str | None, str | None]:
    """(text, None) for a text file's bytes; (None, why not) for a file that is not UTF-8 text, or holds NUL
    bytes (binary: UTF-8 decodes NUL, but no text file has one)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8"
    return (None, "NUL bytes") if "\x00" in text else (text, None)


def _local_documents(root: str, paths: list[str]) -> Iterator[dict[str, str]]:
    """Yield the text files among `paths` as documents; the others are skipped (`as_text`), and counted in the
    manifest (`skipped_files`)."""
    for rel in paths:
        data = (Path(root) / rel).read_bytes()
        text, _ = as_text(data)
        if text is not None:
            yield {"text": text, "path": rel, "sha256": hashlib.sha256(data).hexdigest()}


def open_stream(spec: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """The documents of the corpus, in a fixed order: local files as a plain generator (no `datasets` needed, as
    on a GPU machine without it), a hub data set as a streaming `datasets.IterableDataset`."""
    if spec["source"] == "local":
        root, paths = local_files(spec["glob"], spec["exclude"])
        return _local_documents(str(root), paths)
    return _open_hub(spec["hub_id"], spec["hub_config"], spec["hub_split"])


def _open_hub(hub_id: str, config: str | None, split: str):
    """Stream a hub data set, or a local folder laid out as its hub repository (the dataset card's `configs` map
    a config name to its Parquet files): `datasets.load_dataset` reads both the same way. An unreachable or
    unknown hub id is one PitError naming it."""
    import datasets

    where = f"hub data set {hub_id!r} (config {config!r}, split {split!r})"
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "10")
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "10")
    try:
        local = Path(hub_id).is_dir()  # a local copy of a hub repository (README.md configs + Parquet shards)
        if not local and os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("1", "true", "yes", "on"):
            # Fail fast: load_dataset retries with back-off for ~30 s before giving up.
            from huggingface_hub import HfApi

            HfApi().dataset_info(hub_id, timeout=10)
        return datasets.load_dataset(hub_id, name=config, split=split, streaming=True)
    except Exception as err:  # network, auth, not found, offline cache miss: all bad input here
        reason = " ".join(str(err).split())[:300]
        raise PitError(f"cannot open {where}: {type(err).__name__}: {reason}") from None


# ---------------------------------------------------------------------------------------------
# Download


def is_val(doc_index: int, seed: int, val_fraction: float) -> bool:
    """Seeded, stateless train/validation assignment of one document (by its stream index)."""
    digest = hashlib.blake2b(f"{seed}:{doc_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64 < val_fraction


def spec_sha256(spec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


SHARD = re.compile(r"(?:train|val)-\d{5}\.parquet")  # the names `_write_chunk` gives; other Parquet files are not ours


def _is_progress(path: Path) -> bool:
    """Whether `path` is a progress record this command wrote: a JSON object with spec_sha256 and a list of chunks."""
    try:
        progress = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return (
        isinstance(progress, dict)
        and isinstance(progress.get("spec_sha256"), str)
        and isinstance(progress.get("chunks"), list)
    )


def _read_progress(folder: Path) -> dict[str, Any] | None:
    """The progress record of an earlier download into `folder` (None when there is none); a progress.json this
    command did not write is a PitError, before anything is touched."""
    path = folder / "progress.json"
    if not path.exists():
        return None
    if not _is_progress(path):
        raise PitError(f"{str(path)!r} is a file `pit data download` did not write (not its progress record): "
                       "nothing was touched (choose another --out folder, or remove it yourself)")  # fmt: skip
    return json.loads(path.read_text())


def _written(progress: dict[str, Any] | None) -> set[str]:
    """The shards a progress record proves this command wrote: its chunks', and those of the chunk it was writing
    when it stopped (`pending`, recorded before that chunk's shards were written)."""
    if progress is None:
        return set()
    chunks = [c for c in progress["chunks"] if isinstance(c, dict)]
    names = {c[s]["file"] for c in chunks for s in SPLITS if isinstance(c.get(s), dict) and "file" in c[s]}
    if isinstance(progress.get("pending"), int):
        names |= {f"{split}-{progress['pending']:05d}.parquet" for split in SPLITS}
    return {n for n in names if isinstance(n, str) and SHARD.fullmatch(n)}


def _check_shards(folder: Path, progress: dict[str, Any] | None) -> None:
    """A PitError when `folder` holds a file named like a shard (`SHARD`) that `progress` does not prove this command
    wrote: it would be replaced or removed. Other files (a hub data set's `train-00000-of-00001.parquet`) are left
    alone."""
    written = _written(progress)
    foreign = sorted(p.name for p in folder.iterdir() if SHARD.fullmatch(p.name) and p.name not in written)
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise PitError(f"{str(folder)!r} holds {shown}, which `pit data download` did not write (its progress.json "
                       "does not list them): nothing was touched (choose another --out folder, or remove them "
                       "yourself)")  # fmt: skip


def _fresh_progress(spec: dict[str, Any]) -> dict[str, Any]:
    return {"spec_sha256": spec_sha256(spec), "chunks": [], "documents": 0, "bytes": 0, "finished": False}


def _write_chunk(folder: Path, index: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Write one chunk's train and validation rows as Parquet shards; return their records."""
    chunk: dict[str, Any] = {"index": index, "documents": len(rows)}
    for split in SPLITS:
        picked = [row for row in rows if row["split"] == split]
        if not picked:
            continue
        columns = [key for key in picked[0] if key not in ("split", "nbytes")]
        table = pa.table({key: [row[key] for row in picked] for key in columns})
        name = f"{split}-{index:05d}.parquet"
        with atomic_path(folder / name, replaces=opens_with("PAR1", 4)) as tmp:  # a shard: a Parquet file
            pq.write_table(table, tmp)
        chunk[split] = {"file": name, "rows": len(picked), "sha256": sha256_file(folder / name)}
    return chunk


def download(spec: dict[str, Any], manifest_path: str | os.PathLike) -> dict[str, Any]:
    """Download the corpus described by `spec` next to `manifest_path`; return the manifest. Everything that could
    refuse (the manifest or progress.json of another tool, a shard this command did not write, a bad source) is
    checked before a file is written or removed; another spec's earlier download loses only its own shards."""
    check_spec(spec)
    if Path(manifest_path).is_dir():  # before anything is written: the shards would land in its parent
        raise PitError(
            f"--out {str(manifest_path)!r} is a folder; expected the manifest file, e.g. <folder>/manifest.json"
        )
    if Path(manifest_path).exists():  # the output rule (pit.io): only a manifest is replaced, checked before work
        try:
            read_manifest(manifest_path)
        except PitError:
            raise PitError(
                f"{str(manifest_path)!r} is a file `pit data download` did not write (not a corpus "
                "manifest): nothing was replaced (choose another --out, or remove it yourself)"
            ) from None
    folder = Path(manifest_path).parent
    earlier = _read_progress(folder) if folder.is_dir() else None
    if folder.is_dir():
        _check_shards(folder, earlier)  # before anything is written or removed
    same = earlier is not None and earlier.get("spec_sha256") == spec_sha256(spec)
    progress = earlier if same else _fresh_progress(spec)
    if not progress.get("finished"):
        stream = open_stream(spec)  # raises before anything is written when the source is bad
        folder.mkdir(parents=True, exist_ok=True)
        for name in _written(earlier) if not same else ():  # another spec: only the shards it wrote go
            (folder / name).unlink(missing_ok=True)
        _download_chunks(spec, stream, folder, progress)
    manifest = _manifest(spec, folder, progress)
    write_json(manifest_path, manifest)
    return manifest


def _download_chunks(spec: dict[str, Any], stream, folder: Path, progress: dict[str, Any]) -> None:
    text_field = spec["text_field"] if spec["source"] == "hub" else "text"
    max_docs, max_bytes = spec["max_documents"], spec["max_bytes"]
    bar = progress_bar(total=max_docs, initial=progress["documents"], unit="doc", desc=f"download {spec['name']}")
    rows: list[dict[str, Any]] = []

    def budget_left() -> bool:
        n = progress["documents"] + len(rows)
        nbytes = progress["bytes"] + sum(row["nbytes"] for row in rows)
        return (max_docs is None or n < max_docs) and (max_bytes is None or nbytes < max_bytes)

    def save() -> None:  # `pending`: the chunk written next, recorded before its shards exist (`_written`)
        progress["pending"] = None if progress["finished"] else len(progress["chunks"])
        write_json(folder / "progress.json", progress, replaces=_is_progress)

    def flush() -> None:
        chunk = _write_chunk(folder, len(progress["chunks"]), rows)
        progress["chunks"].append(chunk)
        progress["documents"] += len(rows)
        progress["bytes"] += sum(row["nbytes"] for row in rows)
        save()
        rows.clear()

    save()

    for doc in itertools.islice(iter(stream), progress["documents"], None):  # skip finished chunks
        if not budget_left():
            break
        index = progress["documents"] + len(rows)
        text = doc[text_field]
        if not isinstance(text, str):
            raise PitError(
                f"corpus text_field {text_field!r}: document {index} holds {type(text).__name__}, expected str"
            )
        row = {
            "doc_index": index,
            "text": text,
            "split": "val" if is_val(index, spec["seed"], spec["val_fraction"]) else "train",
        }
        if spec["source"] == "local":
            row |= {"path": doc["path"], "sha256": doc["sha256"]}
        rows.append(row | {"nbytes": len(text.encode("utf-8"))})
        bar.update()
        if len(rows) == spec["shard_documents"]:
            flush()
    if rows:
        flush()
    bar.close()
    progress["finished"] = True
    save()


def _manifest(spec: dict[str, Any], folder: Path, progress: dict[str, Any]) -> dict[str, Any]:
    """Describe the finished corpus; `manifest_sha256` hashes everything else in it."""
    shards = {split: [c[split] for c in progress["chunks"] if split in c] for split in SPLITS}
    for split in SPLITS:
        if not shards[split]:
            raise PitError(
                f"corpus {spec['name']!r} has no {split} documents ({progress['documents']} in all): "
                "raise max_documents/max_bytes or change val_fraction"
            )
    manifest: dict[str, Any] = {
        "name": spec["name"],
        "spec": spec,
        "documents": progress["documents"],
        "bytes": progress["bytes"],
        "splits": {split: sum(s["rows"] for s in shards[split]) for split in SPLITS},
        "shards": shards,
    }
    if spec["source"] == "local":
        files = []
        for split in SPLITS:
            for shard in shards[split]:
                table = pq.read_table(folder / shard["file"], columns=["doc_index", "path", "sha256"])
                files += [row | {"split": split} for row in table.to_pylist()]
        manifest["files"] = sorted(files, key=lambda row: row["doc_index"])
        if skipped := skipped_files(spec, manifest["files"], progress):  # (absent when none: manifests unchanged)
            manifest["skipped_files"] = skipped
    manifest["manifest_sha256"] = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()
    return manifest


def skipped_files(spec: dict[str, Any], files: list[dict[str, Any]], progress: dict[str, Any]) -> list[dict[str, str]]:
    """The files the download read and skipped as not text ({path, reason}): those of the sorted file list up
    to the last file taken (all of them when the corpus did not reach its budget) that are not documents."""
    root, paths = local_files(spec["glob"], spec["exclude"])
    taken = {row["path"] for row in files}
    max_docs, max_bytes = spec["max_documents"], spec["max_bytes"]
    full = (max_docs is not None and progress["documents"] >= max_docs) or (
        max_bytes is not None and progress["bytes"] >= max_bytes
    )
    if full and taken:
        paths = paths[: max(i for i, rel in enumerate(paths) if rel in taken) + 1]
    skipped = []
    for rel in paths:
        if rel not in taken:
            _, reason = as_text((root / rel).read_bytes())
            skipped.append({"path": rel, "reason": reason or "changed since the download"})
    return skipped


# ---------------------------------------------------------------------------------------------
# Reading back


MANIFEST_KEYS = ("name", "documents", "splits", "shards", "manifest_sha256")


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """The manifest `pit data download` wrote; a PitError naming the file when it is missing, not JSON, or not a
    manifest (a key missing, or shards that are not {split: [{file, rows, sha256}]})."""
    path = Path(path)
    if not path.is_file():
        raise PitError(f"corpus manifest {str(path)!r} does not exist: run `pit data download` first")
    try:
        manifest = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PitError(f"corpus manifest {str(path)!r} is not JSON ({type(err).__name__}); expected the "
                       "manifest.json `pit data download` writes") from None  # fmt: skip
    missing = [k for k in MANIFEST_KEYS if not isinstance(manifest, dict) or k not in manifest]
    shards = manifest.get("shards") if isinstance(manifest, dict) else None
    if (
        missing
        or not isinstance(shards, dict)
        or not all(isinstance(v, list) and all(isinstance(s, dict) and "file" in s for s in v) for v in shards.values())
    ):
        what = f"it lacks {missing}" if missing else "its shards are not {split: [{file, rows, sha256}]}"
        raise PitError(f"corpus manifest {str(path)!r} is not a manifest of `pit data download`: {what}")
    return manifest


def check_domain(domain: Any) -> None:
    """Raise PitError unless `domain` is {name: str, include: [patterns] | null, exclude: [patterns]} (a part of a
    local corpus by document path: the `corpus.domains` config entries, with their name)."""
    if not isinstance(domain, dict) or not isinstance(domain.get("name"), str) or not domain["name"]:
        raise PitError(f"domain {json.dumps(domain)}: expected an object with a non-empty name, include, exclude")
    if unknown := sorted(set(domain) - {"name", "include", "exclude"}):
        raise PitError(f"domain {domain['name']!r} has unknown key(s) {unknown}; expected name, include, exclude")
    for key in ("include", "exclude"):
        value = domain.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(p, str) and p for p in value)):
            raise PitError(f"domain {domain['name']!r} {key} {json.dumps(value)}: expected a list of fnmatch patterns")


def in_domain(path: str, domain: dict[str, Any] | None) -> bool:
    """Whether a document path (relative to the corpus glob's root) belongs to `domain` = {include, exclude}:
    it matches one `include` pattern (fnmatch; no `include` = every path) and no `exclude` pattern."""
    if domain is None:
        return True
    include, exclude = domain.get("include"), domain.get("exclude") or []
    return (not include or any(fnmatch.fnmatch(path, p) for p in include)) and not any(
        fnmatch.fnmatch(path, p) for p in exclude
    )


def iter_text_batches(
    manifest_path: str | os.PathLike, split: str, batch_documents: int, domain: dict[str, Any] | None = None
) -> Iterator[list[str]]:
    """Yield the documents of one split, in corpus order, as lists of at most `batch_documents`; with `domain`
    ({include, exclude} path patterns, `in_domain`) only the documents whose path it takes."""
    folder = Path(manifest_path).parent
    manifest = read_manifest(manifest_path)
    if domain is not None and "files" not in manifest:
        raise PitError(
            f"corpus {manifest['name']!r}: a domain selects documents by path, and this corpus has no paths "
            "(source hub); expected a local corpus"
        )
    columns = ["text"] if domain is None else ["text", "path"]
    for shard in manifest["shards"][split]:
        for batch in pq.ParquetFile(folder / shard["file"]).iter_batches(batch_documents, columns=columns):
            texts = batch.column("text").to_pylist()
            if domain is not None:
                paths = batch.column("path").to_pylist()
                texts = [t for t, path in zip(texts, paths) if in_domain(path, domain)]
            if texts:
                yield texts
