"""Model checkpoints: checked loading of any project model, and atomic saving.

A checkpoint is a `save_pretrained` folder (config.json + model.safetensors). A PIT checkpoint holds
Z and L only (`interface.Z`, `interface.L_offdiag`, `interface.log_diag`); E = Z T^{-1} and
W_out = T Z^T are rebuilt from them whenever they are needed. (Trainer checkpoints, with optimizer
state, are the run folder's: pit/training/run_folder.py.)
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

import pit.models  # noqa: F401  (registers the project's model types with the Auto classes)
from pit.errors import PitError
from pit.io import atomic_path
from pit.models.any_model import FAMILIES, pit_classes
from pit.models.weights import check_weights, tensor_shapes
from pit.sidecars import read_object

KNOWN_TYPES = ("pit_scratch", *(f"pit_{t}" for t in FAMILIES), *FAMILIES, "cohere")


def read_config(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_dir():
        raise PitError(f"checkpoint {str(path)!r} does not exist or is not a folder; expected a save_pretrained folder")
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise PitError(f"{str(path)!r} is not a checkpoint: no config.json (expected a save_pretrained folder)")
    cfg = read_object(cfg_file, "a checkpoint's config.json (save_pretrained)")
    if cfg.get("model_type") not in KNOWN_TYPES:
        raise PitError(
            f"checkpoint {str(path)!r} has model_type {cfg.get('model_type')!r}; expected one of {KNOWN_TYPES}"
        )
    return cfg


def _check_vocab_rows(path: str | Path, shapes: dict[str, tuple[int, ...]], V) -> None:
    """The embedding / interface tensors have one row per token of config.json's vocabulary."""
    rows = (
        "interface.Z",
        "interface.weight",
        "interface.embedding",
        "interface.head",
        "wte.weight",
        "embed_tokens.weight",
    )
    for name, shape in shapes.items():
        if name.endswith(rows) and shape[0] != V:
            raise PitError(
                f"checkpoint {str(path)!r}: tensor {name} has {shape[0]} rows but config.json says "
                f"vocab_size = {V}; the weights and the config do not belong together"
            )


def load_model(
    path: str | Path, *, vocab_size: int | None = None, device: str | torch.device = "cpu"
) -> PreTrainedModel:
    """Load a project checkpoint (FP32), checking it first: a clear error names what does not match.

    `vocab_size`: the vocabulary the caller expects (e.g. its tokenizer's); a mismatch is an error. Every weight
    config.json implies must be in the checkpoint and no other (`check_weights`): nothing is initialised at random.
    """
    cfg = read_config(path)
    shapes = tensor_shapes(path)
    V = cfg.get("vocab_size")
    if vocab_size is not None and vocab_size != V:
        raise PitError(f"checkpoint {str(path)!r} has vocabulary size {V}; expected {vocab_size}")
    _check_vocab_rows(path, shapes, V)
    check_weights(path, shapes)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=False, dtype=torch.float32)
    except (OSError, RuntimeError, ValueError) as err:
        if isinstance(err, PitError):
            raise
        raise PitError(f"cannot load checkpoint {str(path)!r}: {err}") from None
    return model.to(device).eval()


def check_tokenizer(model: PreTrainedModel, tokenizer, where: str | Path, checkpoint: str | Path | None = None) -> None:
    """A tokenizer given for `model` must be the model's: no more tokens than its vocabulary (config.vocab_size;
    fewer is allowed, as models whose vocabulary is padded to a round number have) and, when the checkpoint folder
    holds its own tokenizer, the same token -> id map. `where` names the tokenizer in the message."""
    V = model.config.vocab_size
    n = len(tokenizer)
    if n > V:
        raise PitError(
            f"tokenizer {str(where)!r} has {n} tokens but the model's vocabulary has {V}; expected the tokenizer the "
            "model was trained with (its checkpoint folder holds it)"
        )
    own = Path(checkpoint) / "tokenizer.json" if checkpoint is not None else None
    if own is not None and own.is_file() and Path(where).resolve() != Path(checkpoint).resolve():
        from transformers import AutoTokenizer

        if AutoTokenizer.from_pretrained(checkpoint).get_vocab() != tokenizer.get_vocab():
            raise PitError(
                f"tokenizer {str(where)!r} maps tokens to other ids than the tokenizer in {str(checkpoint)!r}; "
                "expected the tokenizer the model was trained with"
            )


# The model card of a project checkpoint: `transformers` alone does not know these model types (docs/models.md).
MODEL_CARD = """# {model_type} checkpoint of pit-repro ({interface} interface)

`transformers` alone cannot load this folder: `model_type` {model_type!r} is registered by the `pit` package
(pit-repro), and `AutoModelForCausalLM.from_pretrained` without it fails with "does not recognize this
architecture". Either

- install pit-repro and import its models first:

      import pit.models  # registers pit_scratch and every pit_<type> with the Auto classes
      from transformers import AutoModelForCausalLM
      model = AutoModelForCausalLM.from_pretrained("THIS_FOLDER")

- or export a plain untied `transformers` model with the same logits, which loads anywhere without `pit`:

      pit export THIS_FOLDER EXPORTED_FOLDER    # {exported}

Generate text with `pit generate THIS_FOLDER --prompt "..."` (or `pit chat THIS_FOLDER`).
"""

EXPORTED_CLASS = {"pit_scratch": "CohereForCausalLM"} | {
    f"pit_{t}": pit_classes(t)[1].__bases__[1].__name__ for t in FAMILIES
}  # the source architecture: Pit<Arch> derives from (InterfaceCausalLM, <Arch>)


def write_model_card(model: PreTrainedModel, folder: str | Path) -> None:
    """README.md of a project checkpoint (pit_scratch, pit_<type>): what to import, or `pit export`. Plain
    transformers models (an export, a stock GPT-2) get none: they load without this package."""
    model_type = model.config.model_type
    if model_type not in EXPORTED_CLASS:
        return
    interface = getattr(getattr(model, "interface", None), "kind", None) or "no"
    card = MODEL_CARD.format(model_type=model_type, interface=interface, exported=EXPORTED_CLASS[model_type])
    (Path(folder) / "README.md").write_text(card)


def save_pretrained_atomic(model: PreTrainedModel, path: str | Path, tokenizer=None) -> None:
    """`save_pretrained` (safetensors) and the model card into a temporary folder, then rename: never a
    half-written checkpoint."""
    with atomic_path(path) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        write_model_card(model, tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
