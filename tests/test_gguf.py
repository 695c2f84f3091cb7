"""Real teachers from GGUF files (pit/models/gguf.py, `pit teacher`), on a tiny GGUF file the test writes itself with
the `gguf` package's GGUFWriter (never the real packages): the materialised folder loads with `load_teacher` and
gives the GGUF model's logits, converts like any teacher, is byte-identical when made twice, records its
provenance, and a packaged model's parts are checked against the stated sha256 before anything is loaded."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
import torch
from helpers import ROOT, write_tiny_gguf
from transformers import AutoTokenizer

from pit import io
from pit.commands import main
from pit.core.interfaces import InterfaceConfig
from pit.data.tokenizers import bos_prefix
from pit.io import sha256_file
from pit.models import convert_teacher, gguf, load_teacher
from pit.models.access import model_delta_ti


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    return path, write_tiny_gguf(path)


def test_materialize_load_convert_round_trip_and_determinism(tiny, tmp_path, capsys):
    path, source = tiny
    assert main(["teacher", "materialize", str(path), "--out", str(tmp_path / "t")]) == 0
    assert "(llama, MOSTLY_Q8_0: 10 F32, 1 Q8_0; GGUF sha256" in capsys.readouterr().out
    prov = gguf.read_provenance(tmp_path / "t")
    assert sorted(prov) == sorted(gguf.PROVENANCE_KEYS)
    assert (prov["gguf_sha256"], prov["gguf_file"], prov["package"]) == (sha256_file(path), "tiny.gguf", None)
    assert (prov["quantization"], prov["tensor_types"]) == ("MOSTLY_Q8_0", {"F32": 10, "Q8_0": 1})
    weights = tmp_path / "t" / "model.safetensors"
    assert prov["dequantised_dtype"] == "float32" and prov["weights_sha256"] == {weights.name: sha256_file(weights)}
    teacher = load_teacher(str(tmp_path / "t"))  # the weight check included
    x = torch.randint(3, source.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(teacher(x).logits, source(x).logits, rtol=0, atol=1e-6)
        untied = convert_teacher(teacher, InterfaceConfig(kind="untied"))  # E0 and W0 as they are
        assert torch.allclose(untied(x).logits, source(x).logits, rtol=0, atol=1e-6)
        assert model_delta_ti(convert_teacher(teacher, InterfaceConfig(kind="pit"))) < 1e-5
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "t")  # the GGUF's own tokenizer, BOS before every text
    assert bos_prefix(tokenizer) == [1] and tokenizer("the")["input_ids"] == [1, 86, 260]  # t, he (merged)
    assert len(tokenizer) == teacher.config.vocab_size == 262
    again = gguf.materialize(str(path), tmp_path / "again")
    assert again["weights_sha256"] == prov["weights_sha256"]
    assert (tmp_path / "again" / weights.name).read_bytes() == weights.read_bytes()


def test_packaged_parts_are_checked_before_use(tiny, tmp_path, monkeypatch, capsys):
    """A packaged model in parts: concatenated and checked against the package's sha256 (the same weights as the
    file itself); a changed part is refused in one line, and nothing is written."""
    path = tiny[0]
    data = path.read_bytes()
    parts = [tmp_path / "tiny.gguf.part00", tmp_path / "tiny.gguf.part01"]
    parts[0].write_bytes(data[:1000])
    parts[1].write_bytes(data[1000:])
    entry = gguf.PackagedGGUF(
        model="tiny", package="tiny-gguf", version="1.0", sha256=hashlib.sha256(data).hexdigest(),
        parts=(("tiny-gguf-part1", "d/tiny.gguf.part00"), ("tiny-gguf-part2", "d/tiny.gguf.part01")),
    )  # fmt: skip
    monkeypatch.setitem(gguf.PACKAGED, "tiny", entry)
    with pytest.raises(gguf.PitError, match=r"needs the package tiny-gguf-part1==1.0, which is not installed; .*"
                       r"`bash scripts/setup.sh --real-teachers`"):  # fmt: skip
        gguf.materialize("tiny", tmp_path / "none")
    monkeypatch.setattr(gguf, "packaged_files", lambda name: parts)  # the installed parts' files
    prov = gguf.materialize("tiny", tmp_path / "t")
    assert (prov["package"], prov["version"], prov["gguf_file"]) == ("tiny-gguf", "1.0", "tiny.gguf")
    assert prov["gguf_sha256"] == sha256_file(path) and prov["gguf_bytes"] == len(data)
    assert entry.requirements() == ["tiny-gguf==1.0", "tiny-gguf-part1==1.0", "tiny-gguf-part2==1.0"]
    parts[1].write_bytes(data[1000:-1] + bytes([data[-1] ^ 1]))
    capsys.readouterr()
    assert main(["teacher", "materialize", "tiny", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and re.search(r"concatenate to sha256 \w{16}\.\.\.; expected \w{16}\.\.\.", err)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*(p.name for p in parts), "t"])  # nothing left


def test_real_teacher_packages_are_pinned_and_installed_by_setup():
    """Every packaged model's packages are pinned in constraints.txt at the registry's versions, and
    `scripts/setup.sh --real-teachers` installs exactly the registry's list (without their dependencies)."""
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line)
    for requirement in gguf.real_requirements():
        name, version = requirement.split("==")
        assert pins.get(name) == version, requirement
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "--real-teachers" in setup and "real_requirements()" in setup and "--no-deps" in setup


def test_pieces_split_join_and_a_damaged_piece_refused(tmp_path, capsys):
    """pit.io.split_file -> check_pieces -> join_pieces (the layer under `pit teacher pack`/`unpack`): equal pieces
    of at most the given size, one manifest with every piece's and the whole file's sha256, the file joined byte for
    byte; a damaged piece is refused in one line naming it, a missing one named, and nothing written."""
    data = bytes(range(256)) * 39 + b"tail"  # 9,988 bytes
    (tmp_path / "w.bin").write_bytes(data)
    manifest = io.split_file(tmp_path / "w.bin", tmp_path / "st", 4000)
    entry = io.read_pieces_manifest(manifest)
    assert [p["bytes"] for p in entry["pieces"]] == [3330, 3330, 3328] and entry["bytes"] == len(data)
    assert entry["sha256"] == hashlib.sha256(data).hexdigest() and manifest.name == "w.bin.pieces.json"
    assert all(p["sha256"] == sha256_file(tmp_path / "st" / p["name"]) for p in entry["pieces"])
    assert io.join_pieces(manifest, tmp_path / "out").read_bytes() == data
    assert io.check_pieces(manifest)[1:] == (["w.bin.part00", "w.bin.part01", "w.bin.part02"], [])
    piece = tmp_path / "st" / "w.bin.part01"
    good = piece.read_bytes()
    piece.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # one bit flipped in transfer
    with pytest.raises(gguf.PitError, match=r"^piece 'w.bin.part01': 3330 bytes, sha256 \w{16}\.\.\.; expected 3330 "
                       r"bytes, sha256 \w{16}\.\.\. as w.bin.pieces.json states \(damaged in transfer"):  # fmt: skip
        io.join_pieces(manifest, tmp_path / "bad")
    piece.unlink()
    assert io.check_pieces(manifest)[1:] == (["w.bin.part00", "w.bin.part02"], ["w.bin.part01"])
    with pytest.raises(gguf.PitError, match=r"pieces \['w.bin.part01'\] are not beside .*; expected all 3"):
        io.join_pieces(manifest, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_pack_unpack_rebuilds_the_teacher_folder_byte_for_byte(tiny, tmp_path, capsys):
    """`pit teacher pack` (the GGUF in pieces + the folder without its weights) and `unpack` on the other machine give
    the materialised folder again, every file byte for byte (weights checked against the provenance's sha256); a
    damaged piece, or weights that hash otherwise (another dequantisation), is refused in one line, nothing written."""
    path = tiny[0]
    assert main(["teacher", "materialize", str(path), "--out", str(tmp_path / "t")]) == 0
    size = path.stat().st_size
    assert main(["teacher", "pack", str(tmp_path / "t"), "--out", str(tmp_path / "st"), "--piece-mb", "0.025"]) == 0
    stage = sorted(p.name for p in (tmp_path / "st").iterdir())
    assert stage == ["teacher", "tiny.gguf.part00", "tiny.gguf.part01", "tiny.gguf.part02", "tiny.gguf.pieces.json"]
    assert 50000 < size <= 75000 and not list((tmp_path / "st" / "teacher").glob("*.safetensors"))
    capsys.readouterr()
    assert main(["teacher", "unpack", str(tmp_path / "st"), "--check"]) == 0
    assert "3 of 3 pieces here, each as the manifest states" in capsys.readouterr().out
    assert main(["teacher", "unpack", str(tmp_path / "st"), "--out", str(tmp_path / "u")]) == 0
    files = sorted(p.name for p in (tmp_path / "t").iterdir())
    assert sorted(p.name for p in (tmp_path / "u").iterdir()) == files and "model.safetensors" in files
    assert all((tmp_path / "u" / f).read_bytes() == (tmp_path / "t" / f).read_bytes() for f in files)
    prov, files = tmp_path / "st" / "teacher" / "provenance.json", tmp_path / "st" / "teacher" / "stage-files.json"
    record, listed = json.loads(prov.read_text()), json.loads(files.read_text())
    prov.write_text(json.dumps(record | {"weights_sha256": {"model.safetensors": "0" * 64}}))
    files.write_text(json.dumps(listed | {"files": listed["files"] | {"provenance.json": sha256_file(prov)}}))
    capsys.readouterr()
    assert main(["teacher", "unpack", str(tmp_path / "st"), "--out", str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after transformers' progress bar: one line
    assert err.startswith("pit teacher: error: the weights dequantised here (transformers ") and "not the same" in err
    assert re.search(r"hash model.safetensors \w{16}; expected model.safetensors 0{16} as provenance.json", err)
    prov.write_text(json.dumps(record))
    files.write_text(json.dumps(listed | {"files": listed["files"] | {"provenance.json": sha256_file(prov)}}))
    piece = tmp_path / "st" / "tiny.gguf.part02"
    piece.write_bytes(piece.read_bytes()[:-1])
    assert main(["teacher", "unpack", str(tmp_path / "st"), "--out", str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "piece 'tiny.gguf.part02'" in err and "send that piece again" in err
    assert not (tmp_path / "other").exists()
