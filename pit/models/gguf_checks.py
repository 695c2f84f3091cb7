"""What a GGUF file must be before `pit teacher` dequantises it (pit/models/gguf.py), each checked from its header
alone, before any weight is allocated, and each a one-line PitError naming the file and the bad value:

- readable: the `gguf` package parses its header (a truncated file, counts or offsets beyond its end, a bad magic
  or version are refused: `read_gguf`);
- its tokenizer: the fields transformers builds the tokenizer from have their types and agree with each other
  (`check_tokenizer`: tokens strings, one type and score per token, merges 'a b' of tokens, special ids tokens');
- complete: every weight its architecture needs is one of its tensors, with as many values (`check_tensors`: a
  missing tensor would load as random values, and a tensor-less file of a large config would allocate it all);
- finite: every dequantised weight (`check_finite`, after the load).
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

from pit.errors import PitError

# what the `gguf` reader and transformers' GGUF code raise on a malformed file (PitError, a ValueError, is re-raised)
PARSE_ERRORS = (ValueError, KeyError, IndexError, TypeError, AttributeError, OverflowError, ZeroDivisionError,
                RuntimeError, OSError, struct.error, UnicodeDecodeError)  # fmt: skip
TOKENIZER = "tokenizer.ggml."
INTEGERS = {"UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64"}
NUMBERS = INTEGERS | {"FLOAT32", "FLOAT64"}
SPECIAL_IDS = tuple(f"{TOKENIZER}{k}_token_id" for k in ("bos", "eos", "unk", "pad", "sep", "cls", "mask"))
SHOWN = 6  # names listed in a message before "... (N in all)"


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def listing(names: list, shown: int = SHOWN) -> str:
    """'a, b, c' or 'a, b, ... (N in all)'."""
    names = [str(n) for n in names]
    return ", ".join(names[:shown]) + (f", ... ({len(names)} in all)" if len(names) > shown else "")


def read_gguf(path: Path):
    """The `gguf` package's reader of the file at `path`; one it cannot parse is a PitError naming it."""
    import gguf

    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise PitError(f"{str(path)!r} does not start with the GGUF magic bytes (it starts with {magic!r}); expected "
                       "a GGUF file as llama.cpp writes it")  # fmt: skip
    try:
        return gguf.GGUFReader(path)
    except PitError:
        raise
    except PARSE_ERRORS as err:
        raise PitError(f"{str(path)!r} is not a readable GGUF file ({one_line(err)}); expected a whole GGUF file as "
                       "llama.cpp writes it") from None  # fmt: skip


def field_value(reader, key: str, kinds: tuple[str, ...], name: str, required: bool = False):
    """The value of field `key` when its GGUF types are `kinds` (e.g. ('ARRAY', 'STRING'); a set of names stands for
    any of them); None when it is absent and not `required`; another type is a PitError naming the field."""
    import gguf

    field = reader.fields.get(key)
    if field is None:
        if required:
            raise PitError(f"{name}: no field {key}; expected one in a GGUF file of a model with its tokenizer")
        return None
    types = [gguf.GGUFValueType(t).name for t in field.types]
    want = [k if isinstance(k, str) else sorted(k) for k in kinds]
    if len(types) != len(kinds) or not all(t == k or (not isinstance(k, str) and t in k) for t, k in zip(types, kinds)):
        raise PitError(f"{name}: field {key} is of type {'/'.join(types)}; expected {want}")
    return field.contents()


def check_tokenizer(reader, name: str) -> None:
    """The tokenizer fields, checked before transformers builds the tokenizer from them: tokens an array of
    strings; token_type (integers) and scores (numbers) one per token where present; each merge 'a b', two tokens
    whose concatenation is a token too; each special token id present an id of a token."""
    tokens = field_value(reader, f"{TOKENIZER}tokens", ("ARRAY", "STRING"), name, required=True)
    if not tokens:
        raise PitError(f"{name}: {TOKENIZER}tokens is empty; expected the tokenizer's vocabulary")
    for key, kind in (("token_type", INTEGERS), ("scores", NUMBERS)):
        values = field_value(reader, f"{TOKENIZER}{key}", ("ARRAY", kind), name)
        if values is not None and len(values) != len(tokens):
            raise PitError(f"{name}: {TOKENIZER}{key} has {len(values)} entries; expected one per token "
                           f"({len(tokens)})")  # fmt: skip
    vocab = set(tokens)
    for k, merge in enumerate(field_value(reader, f"{TOKENIZER}merges", ("ARRAY", "STRING"), name) or []):
        parts = merge.split(" ")
        if len(parts) != 2 or not all(p in vocab for p in parts) or "".join(parts) not in vocab:
            raise PitError(f"{name}: {TOKENIZER}merges[{k}] is {merge!r}; expected 'a b': two tokens of the "
                           "vocabulary separated by one space, whose concatenation is a token too")  # fmt: skip
    for key in SPECIAL_IDS:
        value = field_value(reader, key, (INTEGERS,), name)
        if value is not None and not 0 <= value < len(tokens):
            raise PitError(f"{name}: {key} is {value}; expected the id of one of its {len(tokens)} tokens")


def check_blocks(present: list[str], config, name: str) -> None:
    """The tensors' blocks (blk.N.*) are those the metadata declares, 0 .. block_count - 1: checked before the
    model is built (which costs per block), so a tensor-less file of a large config stops here."""
    blocks = {int(m[1]) for t in present if (m := re.match(r"blk\.(\d+)\.", t))}
    declared = config.num_hidden_layers
    first = next((b for b in range(declared) if b not in blocks), None)  # stops at the first gap
    if first is not None:
        raise PitError(f"{name}: lacks every tensor of block {first} (blk.{first}.*); expected the tensors of each "
                       f"of the {declared} blocks its metadata declares (it has {len(blocks)})")  # fmt: skip
    beyond = sorted(b for b in blocks if b >= declared)
    if beyond:
        raise PitError(f"{name}: holds tensors of blocks {listing(beyond)}, beyond the {declared} its metadata "
                       f"declares; expected blocks 0 .. {declared - 1} only")  # fmt: skip


def meta_model(config, name: str):
    """The architecture of `config` on the meta device: its parameters' names and shapes, no memory allocated."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(config)
    except PitError:
        raise
    except PARSE_ERRORS as err:
        raise PitError(f"{name}: its metadata describes no {config.model_type} model transformers can build "
                       f"({one_line(err)}); expected a consistent GGUF file") from None  # fmt: skip


def gguf_names(model, reader, config, name: str) -> dict[str, str | None]:
    """Each parameter of `model` (tied ones once) -> the GGUF tensor transformers loads it from (None: none), by
    the map transformers' GGUF loader uses (gguf's tensor name map of the file's architecture, after the
    architecture's name processor), without its walk over every submodule (minutes on a 30-block model)."""
    from gguf import MODEL_ARCH_NAMES, get_tensor_name_map
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor

    arch_name = str(field_value(reader, "general.architecture", ("STRING",), name, required=True))
    arch = next((key for key, value in MODEL_ARCH_NAMES.items() if value == arch_name), None)
    if arch is None:
        raise PitError(f"{name}: general.architecture is {arch_name!r}; expected an architecture gguf names")
    name_map = get_tensor_name_map(arch, config.num_hidden_layers)
    processor = TENSOR_PROCESSORS.get(arch_name, TensorProcessor)(config=config.to_dict())
    names = {}
    for hf, _ in model.named_parameters():
        base, suffix = processor.preprocess_name(hf), ""
        if base.endswith((".weight", ".bias")):
            base, suffix = base.rsplit(".", 1)
            suffix = f".{suffix}"
        tensor = name_map.get_name(base)
        names[hf] = None if tensor is None else tensor + suffix
    return names


def check_tensors(reader, config, name: str) -> None:
    """Every parameter the architecture of `config` needs (tied ones once) is a tensor of the GGUF file with as
    many values (`gguf_names`); checked before any weight is allocated. A missing tensor would load as random
    values; a wrong size, fail after allocating the model."""
    sizes = {t.name: int(t.n_elements) for t in reader.tensors}
    check_blocks(list(sizes), config, name)
    model = meta_model(config, name)
    missing, wrong = [], []
    for hf, tensor in gguf_names(model, reader, config, name).items():
        expected = model.get_parameter(hf).numel()
        if tensor not in sizes:
            missing.append(tensor or f"(none for {hf})")
        elif sizes[tensor] != expected:
            wrong.append(f"{tensor} ({sizes[tensor]:,} values; expected {expected:,})")
    if missing:
        raise PitError(f"{name}: lacks the tensors {listing(missing)}; expected every weight of its "
                       f"{config.model_type} architecture (they would load as random values)")  # fmt: skip
    if wrong:
        raise PitError(f"{name}: tensors of another size than its metadata implies: {listing(wrong)}")


def check_finite(model, name: str) -> None:
    """Every dequantised weight of `model` is finite (a NaN or inf in a GGUF tensor would pass through)."""
    import torch

    bad = [key for key, t in model.state_dict().items() if t.is_floating_point() and not torch.isfinite(t).all()]
    if bad:
        raise PitError(f"{name}: the weights {listing(bad)} hold NaN or infinite values after dequantisation; "
                       "expected finite weights")  # fmt: skip
