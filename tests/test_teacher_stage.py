"""`pit teacher pack` / `unpack` stages that are not what pack wrote (issue 65, items 6, 10 and 18;
pit/models/gguf.py): every file of the unpacked teacher is covered by a sha256 pack recorded (teacher/
stage-files.json) and checked, nothing else is copied; a provenance that names a packaged model must record that
package's GGUF; manifests, provenance and records of the wrong shape, and piece sizes that are no size, are one
line each, exit 2, and nothing is written. One tiny GGUF teacher is materialised and packed per module; each test
changes a copy of its stage."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import write_tiny_gguf

from pit.commands import main
from pit.io import sha256_file
from pit.models import gguf


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("stage")
    write_tiny_gguf(root / "tiny.gguf")
    gguf.materialize(str(root / "tiny.gguf"), root / "teacher")
    gguf.pack(root / "teacher", root / "stage", 25_000)
    return root


@pytest.fixture
def stage(packed, tmp_path):
    shutil.copytree(packed / "stage", tmp_path / "stage")
    return tmp_path / "stage"


def unpack_refused(stage, capsys, check: bool = False) -> str:
    """`pit teacher unpack STAGE --out DIR` (or `--check`): exit 2, one line (returned), nothing written."""
    capsys.readouterr()
    out = stage.parent / "unpacked"
    assert main(["teacher", "unpack", str(stage), *(["--check"] if check else ["--out", str(out)])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pit teacher: error: "), err
    assert not out.exists()
    return err[0]


def record(stage, name: str) -> None:
    """Record teacher/NAME's present sha256 in the stage's stage-files.json (a stage changed consistently; a stage
    without one, as pack wrote before issue 65, is left as it is)."""
    path = stage / "teacher" / "stage-files.json"
    if not path.is_file():
        return
    listed = json.loads(path.read_text())
    path.write_text(json.dumps(listed | {"files": listed["files"] | {name: sha256_file(stage / "teacher" / name)}}))


def test_pack_records_every_file_and_unpack_copies_exactly_those(packed, stage, tmp_path, capsys):
    listed = json.loads((stage / "teacher" / gguf.STAGE_FILES).read_text())
    files = sorted(p.name for p in (packed / "teacher").iterdir() if p.suffix != ".safetensors")
    assert listed["format"] == gguf.STAGE_FILES_FORMAT and sorted(listed["files"]) == files
    assert all(sha256_file(packed / "teacher" / f) == listed["files"][f] for f in files)
    assert main(["teacher", "unpack", str(stage), "--out", str(tmp_path / "u")]) == 0
    assert "the other files as stage-files.json records" in capsys.readouterr().out
    made = sorted(p.name for p in (packed / "teacher").iterdir())
    assert sorted(p.name for p in (tmp_path / "u").iterdir()) == made  # no stage-files.json
    assert all((tmp_path / "u" / f).read_bytes() == (packed / "teacher" / f).read_bytes() for f in made)


def test_weights_or_changed_files_in_the_stage_are_refused(packed, stage, capsys):
    """Item 6: a model.safetensors put in teacher/ replaced the checked weights ("weights as recorded"), and a
    changed config.json or tokenizer.json was copied unchecked."""
    teacher = stage / "teacher"
    shutil.copy(packed / "teacher" / "model.safetensors", teacher / "model.safetensors")
    err = unpack_refused(stage, capsys)
    assert "holds model.safetensors, which stage-files.json does not record" in err
    assert "holds model.safetensors" in unpack_refused(stage, capsys, check=True)
    (teacher / "model.safetensors").unlink()
    config = json.loads((teacher / "config.json").read_text())
    for key, value in (("rms_norm_eps", 0.1), ("rope_theta", 5.0)):
        (teacher / "config.json").write_text(json.dumps(config | {key: value}))
        err = unpack_refused(stage, capsys)
        assert "teacher/config.json' has sha256 " in err and "as teacher/stage-files.json records" in err
    shutil.copy(packed / "teacher" / "config.json", teacher / "config.json")
    tokenizer = teacher / "tokenizer.json"
    tokenizer.write_text(tokenizer.read_text().replace('"Ġthe"', '"Ġtha"'))
    assert "teacher/tokenizer.json' has sha256 " in unpack_refused(stage, capsys)
    shutil.copy(packed / "teacher" / "tokenizer.json", tokenizer)
    (teacher / "notes.txt").write_text("an unknown file")
    assert "holds notes.txt, which stage-files.json does not record" in unpack_refused(stage, capsys)
    (teacher / "notes.txt").unlink()
    (teacher / "tokenizer_config.json").unlink()
    assert "lacks tokenizer_config.json" in unpack_refused(stage, capsys)
    (teacher / gguf.STAGE_FILES).unlink()
    assert "stage-files.json' is missing or not a record of files" in unpack_refused(stage, capsys)


def test_a_packaged_name_with_another_gguf_is_refused(stage, capsys):
    """Item 10: a stage whose provenance names a packaged model while its GGUF sha256 is not that package's."""
    prov = stage / "teacher" / "provenance.json"
    prov.write_text(json.dumps(json.loads(prov.read_text()) | {"source": "smollm2-135m"}))
    record(stage, "provenance.json")
    err = unpack_refused(stage, capsys)
    expected = gguf.PACKAGED["smollm2-135m"].sha256[:16]
    assert "names the packaged model 'smollm2-135m' with GGUF sha256 " in err and f"expected {expected}" in err
    assert "names the packaged model" in unpack_refused(stage, capsys, check=True)


def test_stage_files_of_the_wrong_shape_are_one_line(stage, capsys):
    """Item 18: a manifest, provenance or record that is a list, lacks keys or holds values of other types."""
    manifest = stage / "tiny.gguf.pieces.json"
    good = manifest.read_text()
    entry = json.loads(good)
    piece = entry["pieces"][0]
    bads = [[entry], entry | {"pieces": "x"}, {k: v for k, v in entry.items() if k != "sha256"}]
    bads += [entry | {"pieces": [piece | {"bytes": "10"}]}, entry | {"pieces": [piece | {"name": "../x"}]}]
    for bad in bads:
        manifest.write_text(json.dumps(bad))
        assert "tiny.gguf.pieces.json' is not a manifest of pieces" in unpack_refused(stage, capsys)
    manifest.write_text("{")
    assert "is not valid JSON" in unpack_refused(stage, capsys)
    manifest.write_text(good)
    prov = stage / "teacher" / "provenance.json"
    provenance = json.loads(prov.read_text())
    shapes = {
        "[1]": "holds a JSON list; expected the object",
        json.dumps({k: v for k, v in provenance.items() if k != "gguf_sha256"}): "lacks the keys ['gguf_sha256']",
        json.dumps(provenance | {"gguf_sha256": 7}): "gguf_sha256 is 7; expected a sha256",
        json.dumps(provenance | {"weights_sha256": ["model.safetensors"]}): "weights_sha256 is ['model.safetensors']",
        json.dumps(provenance | {"source": None}): "source is None; expected",
    }
    for text, said in shapes.items():
        prov.write_text(text)
        record(stage, "provenance.json")
        assert said in unpack_refused(stage, capsys), text
    files = stage / "teacher" / gguf.STAGE_FILES
    for text in ("[]", json.dumps({"format": gguf.STAGE_FILES_FORMAT, "files": ["config.json"]})):
        files.write_text(text)
        assert "stage-files.json' is missing or not a record of files" in unpack_refused(stage, capsys)
    files.write_text(json.dumps({"format": gguf.STAGE_FILES_FORMAT, "files": {"../config.json": "0" * 64}}))
    assert "records ../config.json; expected relative file names" in unpack_refused(stage, capsys)


@pytest.mark.parametrize("size", ["inf", "nan", "-1", "0", "1e-9"])
def test_piece_sizes_that_are_no_size_are_one_line(packed, tmp_path, capsys, size):
    """Item 18: `--piece-mb inf` was an OverflowError traceback."""
    out = tmp_path / "stage"
    assert main(["teacher", "pack", str(packed / "teacher"), "--out", str(out), "--piece-mb", size]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"pit teacher: error: --piece-mb {float(size)}: expected a size in MB (10^6 bytes), finite and " \
                  "at least 1e-06 (one byte)"  # fmt: skip
    assert not out.exists()
