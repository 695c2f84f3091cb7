"""`pit data prepare` (pit/data/prepare.py, docs/your-model-your-data.md) and the corpus spec's defaults
(pit/data/corpus.py): a folder of text files, a JSON Lines file, a Parquet file and a `datasets` folder saved with
`save_to_disk` holding the same documents give byte-identical token files, laid out as the pipeline's data stage,
with every default printed; bad sources are one line; a profile whose corpus is only `{source: local, path: ...}`
(an overlay of config/config.yaml) plans the whole DAG on that folder."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from helpers import DEFAULT_CONFIG, ROOT, snakemake, write_config

from pit.commands import main
from pit.data.corpus import CORPUS_DEFAULTS, resolve_spec
from pit.data.reader import TokenFile
from pit.pipeline.config import schema

STDLIB = Path(sysconfig.get_paths()["stdlib"])
OUT = {"train": "results/data/gpt2/train.bin", "val": "results/data/gpt2/val.bin"}


def texts(n: int = 30) -> list[tuple[str, str]]:
    """(name, text) of n real documents: standard library modules, in sorted order."""
    files = sorted(STDLIB.glob("*.py"))[:n]
    return [(f"{f.stem}.txt", f.read_text(encoding="utf-8")) for f in files]


def text_folder(folder: Path, docs) -> Path:
    folder.mkdir(parents=True)
    for name, text in docs:
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def test_prepare_a_folder_records_and_a_saved_dataset_give_the_same_tokens(tmp_path, capsys):
    import datasets

    docs = texts()
    folder = text_folder(tmp_path / "texts", docs)
    (folder / "logo.png").write_bytes(b"\x89PNG\x00\x00binary")  # not text: skipped
    (folder / ".notes.txt").write_text("hidden: not read")
    rows = [{"id": i, "body": text} for i, (_, text) in enumerate(docs)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "docs.parquet")
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "saved"))
    assert main(["data", "prepare", str(folder), "--tokenizer", "gpt2", "--out", str(tmp_path / "a")]) == 0
    printed = capsys.readouterr().out
    for key, value in {**CORPUS_DEFAULTS, "workers": 1}.items():  # every default, printed and marked
        assert f"  {key:<15}  {json.dumps(value)}  (default)\n" in printed, key
    assert '  tokenizer        "gpt2"\n' in printed  # given: not marked
    manifest = json.loads((tmp_path / "a/resources/corpus/corpus/manifest.json").read_text())
    assert manifest["documents"] == len(docs) and manifest["skipped_files"] == [{"path": "logo.png",
                                                                                   "reason": "not UTF-8"}]  # fmt: skip
    assert manifest["spec"] == resolve_spec({"source": "local", "path": str(folder)})
    TokenFile(tmp_path / OUT["train"].replace("results", "a/results")).check_tokenizer(
        tmp_path / "a/results/tokenizers/gpt2")  # fmt: skip
    settings = ["--tokenizer", "gpt2", "--spec", json.dumps({"text_field": "body"})]
    for source in ("docs.jsonl", "docs.parquet", "saved"):
        assert main(["data", "prepare", str(tmp_path / source), *settings, "--out", str(tmp_path / source[:4])]) == 0
        for split, path in OUT.items():
            same = (tmp_path / "a" / path).read_bytes() == (tmp_path / source[:4] / path).read_bytes()
            assert same, (source, split)  # the same documents in the same order: the same token files
        corpus = json.loads((tmp_path / source[:4] / "resources/corpus/corpus/manifest.json").read_text())
        assert "files" not in corpus and len(corpus["source_sha256"]) == 64  # records: no paths, the source's hash
    # a second run on the same folder changes nothing
    before = {p: p.read_bytes() for p in (tmp_path / "a").rglob("*") if p.is_file()}
    assert main(["data", "prepare", str(folder), "--tokenizer", "gpt2", "--out", str(tmp_path / "a")]) == 0
    assert {p: p.read_bytes() for p in (tmp_path / "a").rglob("*") if p.is_file()} == before


def test_bad_sources_are_one_line(tmp_path, capsys):
    docs = texts(3)
    folder = text_folder(tmp_path / "texts", docs)
    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\n{"text": \n')
    (tmp_path / "other.jsonl").write_text('{"body": "a"}\n')
    cases = {
        str(tmp_path / "missing"): "corpus path '{t}/missing' does not exist; expected a folder of text files",
        str(folder / docs[0][0]): "is a .txt file; expected a folder of text files",
        str(tmp_path / "bad.jsonl"): "line 2: not JSON (Expecting value); expected one JSON object per line",
        str(tmp_path / "other.jsonl"): "record 0 has no field 'text' (fields ['body']); expected a string in",
        str(folder): "has no val documents (3 in all, val_fraction 0.05, seed 0): val_fraction 0.",
    }
    for source, message in cases.items():
        assert main(["data", "prepare", source, "--tokenizer", "gpt2", "--out", str(tmp_path / "o")]) == 2
        (line,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]  # (and progress lines)
        assert message.format(t=tmp_path) in line, line
    assert main(["data", "prepare", str(folder), "--out", str(tmp_path / "o")]) == 2
    assert "--tokenizer is required" in capsys.readouterr().err
    assert main(["data", "prepare", str(folder), "--tokenizer", "gpt2", "--out", str(folder / "o")]) == 2  # output rule
    spec = json.dumps({"source": "local", "glob": "x/*", "path": "x"})
    assert main(["data", "download", "--spec", spec, "--out", str(tmp_path / "m.json")]) == 2
    assert "with both glob and path; expected one of them" in capsys.readouterr().err


def test_a_profile_needs_only_the_corpus_source(tmp_path, capsys):
    """The schema shows the defaults; an overlay of config/config.yaml that names only a folder (glob: null drops
    the default profile's glob) plans the whole DAG on it, with the resolved spec in the download job."""
    corpus = schema()["$defs"]["corpus"]
    assert corpus["required"] == ["source"] and corpus["properties"]["val_fraction"]["default"] == 0.05
    folder = text_folder(tmp_path / "texts", texts(40))
    overlay = tmp_path / "mine.yaml"
    overlay.write_text(yaml.safe_dump({"corpus": {"name": "mine", "glob": None, "path": str(folder),
                                                  "exclude": [], "max_documents": None}}))  # fmt: skip
    proc = snakemake(tmp_path / "work", "-n", "-p", "--configfile", str(ROOT / DEFAULT_CONFIG), str(overlay))
    assert "resources/corpus/mine/manifest.json" in proc.stdout
    assert f'"path": "{folder}"' in proc.stdout and '"text_field": "text"' in proc.stdout
    # a whole profile whose corpus is only its source and folder is complete
    config = write_config(tmp_path / "own.yaml", lambda c: c.update(corpus={"source": "local", "path": str(folder)}))
    assert main(["config", "check", str(config)]) == 0
    config = write_config(tmp_path / "bad.yaml", lambda c: c.update(corpus={"source": "local"}))
    assert main(["config", "check", str(config)]) == 2
    assert "invalid config at corpus: corpus source 'local' with neither glob nor path" in capsys.readouterr().err
