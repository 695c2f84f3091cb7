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
import math
import os
import re
import sysconfig
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pit.data.corpus import check_spec, resolve_spec
from pit.errors import PitError
from pit.io import atomic_path, opens_with, sha256_file, sha256_path, write_json
from pit.progress import progress_bar

STDLIB = "@stdlib"  # glob prefix: the running interpreter's standard library folder
SPLITS = ("train", "val")
RECORD_FILES = (".jsonl", ".json", ".parquet")  # a local `path` that is one of these holds records, not text
SAVED_DATASET = ("dataset_dict.json", "state.json")  # what `datasets`' save_to_disk writes into its folder


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


def files_glob(spec: dict[str, Any]) -> str | None:
    """The glob of a corpus of text files: its `glob`, or `<path>/**/*` for a folder of text files (hidden files are
    not matched); None for records (`records_path`) and the hub."""
    if spec["source"] != "local":
        return None
    if "glob" in spec:
        return spec["glob"]
    return None if records_path(spec["path"]) else f"{glob.escape(spec['path'].rstrip('/'))}/**/*"


def records_path(path: str) -> bool:
    """Whether a local `path` holds records (a .jsonl, .json or .parquet file, or a folder `datasets`' save_to_disk
    wrote) rather than text files (any other folder); any other path is a PitError naming it."""
    where = f"a folder of text files, a {', '.join(RECORD_FILES)} file or a folder written by datasets' save_to_disk"
    p = Path(path)
    if p.is_dir():
        return any((p / name).is_file() for name in SAVED_DATASET)
    if p.is_file() and p.suffix.lower() in RECORD_FILES:
        return True
    if not p.exists():
        raise PitError(f"corpus path {path!r} does not exist; expected {where}")
    raise PitError(f"corpus path {path!r} is a {p.suffix or 'suffix-less'} file; expected {where} (one text file: give "
                   "its folder, or a glob)")  # fmt: skip


def spec_sources(spec: dict[str, Any]) -> list[str]:
    """The local folders and files a corpus spec reads (the glob's root, the path; a hub id that is a local folder):
    the sources the output rule keeps a download's folder out of (pit.io.check_output)."""
    if not isinstance(spec, dict):
        return []
    if spec.get("source") == "local" and isinstance(spec.get("path"), str):
        return [spec["path"]]
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


def _json_value(path: Path, text: str, line: int) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise PitError(f"corpus path {str(path)!r} line {line + err.lineno - 1}: not JSON ({err.msg}); expected one "
                       "JSON object per line (JSON Lines) or one JSON array of objects") from None  # fmt: skip


def _json_records(path: Path) -> Iterator[Any]:
    """The records of a JSON file: one JSON array, or JSON Lines (one value per line; blank lines skipped)."""
    try:
        with open(path, encoding="utf-8") as f:
            array = f.read(4096).lstrip()[:1] == "["
            f.seek(0)
            if array:
                yield from _json_value(path, f.read(), 1)
                return
            for number, line in enumerate(f, 1):
                if line.strip():
                    yield _json_value(path, line.strip(), number)
    except UnicodeDecodeError:
        raise PitError(f"corpus path {str(path)!r} is not UTF-8; expected JSON Lines or a JSON array") from None


def _saved_dataset(path: Path, text_field: str) -> Iterator[dict[str, Any]]:
    """The records of a `datasets` folder (save_to_disk): a Dataset, or a DatasetDict's `train` split (or its only
    one)."""
    import datasets

    try:
        data = datasets.load_from_disk(str(path))
    except Exception as err:  # a damaged or foreign folder: datasets raises several kinds
        raise PitError(f"corpus path {str(path)!r}: datasets.load_from_disk failed ({type(err).__name__}: "
                       f"{' '.join(str(err).split())[:200]})") from None  # fmt: skip
    if isinstance(data, datasets.DatasetDict):
        names = list(data)
        if "train" not in data and len(names) != 1:
            raise PitError(f"corpus path {str(path)!r} holds splits {names}; expected a split 'train', or one split")
        data = data["train" if "train" in data else names[0]]
    if text_field not in data.column_names:
        raise PitError(f"corpus path {str(path)!r} has columns {data.column_names}; no text_field {text_field!r}")
    for batch in data.select_columns([text_field]).iter(batch_size=1000):
        yield from ({text_field: text} for text in batch[text_field])


def _records(path: Path, text_field: str) -> Iterator[Any]:
    """The records of a local records source, in file order."""
    if path.is_dir():
        yield from _saved_dataset(path, text_field)
    elif path.suffix.lower() == ".parquet":
        try:
            parquet = pq.ParquetFile(path)
        except (pa.ArrowException, OSError) as err:
            raise PitError(f"corpus path {str(path)!r} is not a readable Parquet file ({err})") from None
        if text_field not in parquet.schema_arrow.names:
            raise PitError(f"corpus path {str(path)!r} has columns {parquet.schema_arrow.names}; no text_field "
                           f"{text_field!r}")  # fmt: skip
        for batch in parquet.iter_batches(columns=[text_field]):
            yield from batch.to_pylist()
    else:
        yield from _json_records(path)


def _record_documents(path: str, text_field: str) -> Iterator[dict[str, str]]:
    """Yield each record's `text_field` (a string) as a document; a record without one is a PitError naming it."""
    for index, record in enumerate(_records(Path(path), text_field)):
        text = record.get(text_field) if isinstance(record, dict) else None
        if not isinstance(text, str):
            why = "is not an object" if not isinstance(record, dict) else (
                f"has no field {text_field!r} (fields {sorted(record)[:8]})" if text_field not in record
                else f"holds {type(text).__name__} in {text_field!r}")  # fmt: skip
            raise PitError(f"corpus path {path!r}: record {index} {why}; expected a string in text_field "
                           f"{text_field!r}")  # fmt: skip
        yield {"text": text}


def open_stream(spec: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """The documents of the corpus, in a fixed order: local files and records as a plain generator (no `datasets`
    needed but for a save_to_disk folder, as on a GPU machine without it), a hub data set as a streaming
    `datasets.IterableDataset`."""
    if spec["source"] == "local":
        pattern = files_glob(spec)
        if pattern is None:
            return _record_documents(spec["path"], spec["text_field"])
        root, paths = local_files(pattern, spec["exclude"])
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


def split_draw(doc_index: int, seed: int) -> float:
    """The seeded uniform number in [0, 1) of one document (by its stream index) that decides its split."""
    digest = hashlib.blake2b(f"{seed}:{doc_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


def is_val(doc_index: int, seed: int, val_fraction: float) -> bool:
    """Seeded, stateless train/validation assignment of one document (by its stream index)."""
    return split_draw(doc_index, seed) < val_fraction


def fraction_hint(documents: int, seed: int, split: str) -> str:
    """The val_fraction (two decimals) at which `split`, empty now, gets its first of these `documents`: the
    smallest draw must fall below it for a validation document, the largest stay at or above it for a training one."""
    draws = [split_draw(i, seed) for i in range(documents)]
    fraction = math.floor(min(draws) * 100 + 1) / 100 if split == "val" else math.floor(max(draws) * 100) / 100
    return f"val_fraction {fraction:g} gives it one" if 0 < fraction < 1 else ""


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
    checked before a file is written or removed; another spec's earlier download loses only its own shards. Keys
    the spec leaves out take their defaults (pit.data.corpus.resolve_spec); the manifest records the resolved spec."""
    spec = resolve_spec(spec)
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
        if "path" in doc:  # a text file (records and hub documents have no path)
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
            hint = fraction_hint(progress["documents"], spec["seed"], split) if progress["documents"] > 1 else ""
            raise PitError(
                f"corpus {spec['name']!r} has no {split} documents ({progress['documents']} in all, val_fraction "
                f"{spec['val_fraction']}, seed {spec['seed']}): {hint + ', or ' if hint else ''}raise "
                "max_documents/max_bytes"
            )
    manifest: dict[str, Any] = {
        "name": spec["name"],
        "spec": spec,
        "documents": progress["documents"],
        "bytes": progress["bytes"],
        "splits": {split: sum(s["rows"] for s in shards[split]) for split in SPLITS},
        "shards": shards,
    }
    if spec["source"] == "local" and files_glob(spec) is None:  # records: the hash of the file or folder read
        manifest["source_sha256"] = sha256_path(spec["path"])
    elif spec["source"] == "local":
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
    root, paths = local_files(files_glob(spec), spec["exclude"])
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
