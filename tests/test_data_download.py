"""`pit data download`: local corpus order and manifest, seeded split, resume, clear errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from helpers import STDLIB_CORPUS

from pit.data.download import download, is_val, local_files

SPEC = STDLIB_CORPUS


def pit(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from pit.commands import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)


def test_local_corpus_manifest_is_sorted_and_hashed(tmp_path):
    manifest = download(SPEC, tmp_path / "a/manifest.json")
    root, paths = local_files(SPEC["glob"], SPEC["exclude"])
    assert not any(p.startswith("site-packages/") for p in paths) and paths == sorted(paths)
    files = manifest["files"]
    assert [f["doc_index"] for f in files] == list(range(60)) and manifest["documents"] == 60
    assert [f["path"] for f in files] == sorted(f["path"] for f in files)
    assert manifest["splits"]["train"] + manifest["splits"]["val"] == 60 and manifest["splits"]["val"] > 0
    assert [f["split"] == "val" for f in files] == [is_val(i, 0, 0.2) for i in range(60)]
    assert len(manifest["shards"]["train"]) == 3  # chunks of 25, 25, 10 documents
    # Same spec, same corpus: same manifest hash; another seed moves documents between splits.
    again = download(SPEC, tmp_path / "b/manifest.json")
    assert again["manifest_sha256"] == manifest["manifest_sha256"]
    other = download(SPEC | {"seed": 1}, tmp_path / "c/manifest.json")
    assert other["splits"] != manifest["splits"] or other["files"] != manifest["files"]


def test_max_bytes_stops_at_the_budget(tmp_path):
    manifest = download(SPEC | {"max_documents": None, "max_bytes": 50_000}, tmp_path / "manifest.json")
    assert manifest["bytes"] >= 50_000 and manifest["documents"] < 60


def test_interrupted_download_resumes_after_the_finished_shards(tmp_path):
    out = tmp_path / "corpus/manifest.json"
    reference = download(SPEC, out)
    # Pretend the run died after its first chunk: manifest gone, later shards never written.
    progress_path = out.parent / "progress.json"
    progress = json.loads(progress_path.read_text())
    first = progress["chunks"][0]
    progress |= {"chunks": [first], "documents": first["documents"], "finished": False}
    progress["bytes"] = sum(
        len(t.encode()) for t in pq.read_table(out.parent / first["train"]["file"])["text"].to_pylist()
    )
    progress["bytes"] += sum(
        len(t.encode()) for t in pq.read_table(out.parent / first["val"]["file"])["text"].to_pylist()
    )
    progress_path.write_text(json.dumps(progress))
    out.unlink()
    for later in progress_path.parent.glob("*-0000[12].parquet"):
        later.unlink()
    kept = (out.parent / "train-00000.parquet").stat().st_mtime_ns
    resumed = download(SPEC, out)
    assert (out.parent / "train-00000.parquet").stat().st_mtime_ns == kept  # not rewritten
    assert resumed == reference


def test_missing_glob_is_one_error_line_and_no_output(tmp_path):
    spec = SPEC | {"glob": str(tmp_path / "nothing/**/*.txt")}
    proc = pit("data", "download", "--spec", json.dumps(spec), "--out", str(tmp_path / "c/manifest.json"))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"pit data: error: corpus glob {spec['glob']!r} (expanded to {spec['glob']!r}) matches no files"
    ]
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("offline", ["0", "1"])
def test_unreachable_hub_id_is_one_error_line_and_no_output(tmp_path, monkeypatch, offline):
    monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    spec = {k: v for k, v in SPEC.items() if k not in ("glob", "exclude")}
    spec |= {
        "source": "hub",
        "hub_id": "no-such-org/no-such-data",
        "hub_config": None,
        "hub_split": "train",
        "text_field": "text",
    }
    proc = pit("data", "download", "--spec", json.dumps(spec), "--out", str(tmp_path / "c/manifest.json"))
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line.startswith("pit data: error: cannot open hub data set 'no-such-org/no-such-data'")
    assert not (tmp_path / "c").exists()


def test_incomplete_spec_names_the_missing_keys(tmp_path):
    """Every key but the source and what it reads has a default (pit/data/corpus.py); those two are named."""
    proc = pit(
        "data", "download", "--spec", json.dumps({"source": "local", "name": "x"}), "--out", str(tmp_path / "m.json")
    )
    assert proc.returncode == 2 and "'local' with neither glob nor path; expected one of them" in proc.stderr
    proc = pit("data", "download", "--spec", json.dumps({"source": "hub"}), "--out", str(tmp_path / "m.json"))
    assert proc.returncode == 2 and "misses key(s) ['hub_id'] for source 'hub'" in proc.stderr


SMALL = SPEC | {"glob": "@stdlib/json/*.py", "max_documents": 6, "val_fraction": 0.4, "shard_documents": 2}


def test_a_download_deletes_and_replaces_only_the_shards_it_wrote(tmp_path, capsys):
    """Issue 65: the Parquet files of a hub data set in the manifest's folder were deleted (every train-*.parquet and
    val-*.parquet), also by a download that then refused. A download removes only the shards its own progress.json
    lists, and refuses a shard-named file it did not write before touching anything."""
    from pit.commands import main

    folder = tmp_path / "corpus"
    folder.mkdir()
    theirs = {"train-00000-of-00001.parquet": b"PAR1 a hub data set's shard", "val-00000-of-00001.parquet": b"PAR1"}
    for name, data in theirs.items():
        (folder / name).write_bytes(data)
    out = ["--out", str(folder / "manifest.json")]
    bad = SMALL | {"glob": str(tmp_path / "nothing/*.py")}
    assert main(["data", "download", "--spec", json.dumps(bad), *out]) == 2  # refused: nothing touched
    assert sorted(p.name for p in folder.iterdir()) == sorted(theirs)
    assert main(["data", "download", "--spec", json.dumps(SMALL), *out]) == 0
    assert main(["data", "download", "--spec", json.dumps(SMALL | {"seed": 1}), *out]) == 0  # another spec: afresh
    assert {name: (folder / name).read_bytes() for name in theirs} == theirs
    ours = json.loads((folder / "progress.json").read_text())["chunks"]
    assert sorted(p.name for p in folder.iterdir() if re.fullmatch(r"(train|val)-\d{5}\.parquet", p.name)) == sorted(
        c[s]["file"] for c in ours for s in ("train", "val") if s in c
    )
    # Killed after writing a chunk's shards, before recording them: `pending` names them, the rerun replaces them.
    progress = json.loads((folder / "progress.json").read_text())
    last = progress["chunks"].pop()
    progress |= {"pending": last["index"], "finished": False, "documents": progress["documents"] - last["documents"]}
    progress["bytes"] = 0  # (only the byte budget reads it; this spec has none)
    (folder / "progress.json").write_text(json.dumps(progress))
    assert main(["data", "download", "--spec", json.dumps(SMALL | {"seed": 1}), *out]) == 0
    # A shard-named file the download did not write (not in its progress.json): refused, nothing touched.
    (folder / "val-00009.parquet").write_bytes(b"PAR1 mine")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    capsys.readouterr()
    assert main(["data", "download", "--spec", json.dumps(SMALL | {"seed": 2}), *out]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("pit data: error")]
    assert len(err) == 1 and "val-00009.parquet" in err[0] and "did not write" in err[0], err
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_a_progress_file_the_download_did_not_write_is_refused(tmp_path, capsys):
    from pit.commands import main

    (tmp_path / "progress.json").write_text('{"epoch": 3}\n')
    capsys.readouterr()
    assert main(["data", "download", "--spec", json.dumps(SMALL), "--out", str(tmp_path / "manifest.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # refused before the download began: no progress line
    assert len(err) == 1 and "progress.json" in err[0] and "did not write" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["progress.json"]
    assert (tmp_path / "progress.json").read_text() == '{"epoch": 3}\n'
