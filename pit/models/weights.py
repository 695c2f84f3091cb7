"""The weights of a checkpoint folder against the model its config.json describes: every tensor the config
implies is there with its shape, and no other (`check_weights`), under the names `from_pretrained` gives the
file's tensors (transformers renames some on load: a GPT-NeoX file's `embed_out` is the model's `lm_head`).
`from_pretrained` would fill a missing tensor with fresh random values and drop an unexpected one, silently;
pit.models.checkpoint.load_model and pit.models.teacher.load_teacher check first. Only headers are read; the
expected model is built on the meta device (no memory, no initialisation).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM

from pit.errors import PitError


def tensor_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the tensors in a checkpoint's safetensors files (reads headers only)."""
    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise PitError(f"checkpoint {str(path)!r} has no .safetensors weights")
    shapes = {}
    for f in files:
        try:
            with safe_open(f, "pt") as st:
                for k in st.keys():  # noqa: SIM118 (safe_open is not a dict)
                    shapes[k] = tuple(st.get_slice(k).get_shape())
        except Exception as err:  # safetensors raises its own error types for corrupt files
            raise PitError(f"{str(f)!r} is not a readable safetensors file: {err}") from None
    return shapes


@dataclass
class Expected:
    """The weights a config implies: {name: shape}, the groups of names that share one tensor (a tied GPT-2's wte
    and lm_head, saved once), and the patterns of names the model class lets a checkpoint lack or add (e.g.
    the attention-mask buffers `attn.bias` of older GPT-2 files), as `from_pretrained` ignores them."""

    shapes: dict[str, tuple[int, ...]]
    tied: list[list[str]]
    may_lack: list[str]
    may_add: list[str]
    renames: list = field(default_factory=list)  # transformers' WeightRenaming of the class (checkpoint -> model)

    def loaded_name(self, name: str) -> str:
        """The model's name of a checkpoint tensor, as `from_pretrained` renames it: the renamings transformers
        registers for the architecture (GPT-NeoX's `embed_out` -> `lm_head`, legacy gamma/beta), applied in order."""
        if not self.renames:
            return name
        from transformers.core_model_loading import rename_source_key

        renamed, _ = rename_source_key(name, self.renames, [])
        return renamed if renamed in self.shapes or name not in self.shapes else name


def expected_weights(path: str | Path) -> Expected:
    """What the checkpoint's config.json implies, from the model built on the meta device: no memory, no init."""
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    except (OSError, TypeError, ValueError, KeyError, RuntimeError) as err:
        raise PitError(f"checkpoint {str(path)!r}: config.json does not describe a model: {err}") from None
    state = model.state_dict(keep_vars=True)
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightRenaming

    renames = [t for t in get_model_conversion_mapping(model) if isinstance(t, WeightRenaming)]
    groups: dict[int, list[str]] = {}
    for name, tensor in state.items():
        groups.setdefault(id(tensor), []).append(name)
    return Expected(
        shapes={name: tuple(t.shape) for name, t in state.items()},
        tied=[g for g in groups.values() if len(g) > 1],
        may_lack=list(getattr(model, "_keys_to_ignore_on_load_missing", None) or []),
        may_add=list(getattr(model, "_keys_to_ignore_on_load_unexpected", None) or []),
        renames=renames,
    )


def _matches(name: str, patterns: list[str]) -> bool:
    return any(re.search(p, name) for p in patterns)


def _listed(names: list[str], most: int = 4) -> str:
    shown = ", ".join(names[:most])
    return f"{len(names)} ({shown}{', ...' if len(names) > most else ''})"


def check_weights(path: str | Path, shapes: dict[str, tuple[int, ...]] | None = None) -> None:
    """Every weight the config implies is in the checkpoint with its shape, and no other: a missing tensor
    (which `from_pretrained` would fill with fresh random values), an extra one (a layer the config no longer
    has) or a changed interface kind is a PitError naming the tensors. Tied tensors saved once are fine."""
    shapes = tensor_shapes(path) if shapes is None else shapes
    want = expected_weights(path)
    shapes = {want.loaded_name(name): shape for name, shape in shapes.items()}  # as from_pretrained reads them
    expected = want.shapes
    saved_once = {name for group in want.tied if any(n in shapes for n in group) for name in group}
    missing = sorted(n for n in expected if n not in shapes and n not in saved_once and not _matches(n, want.may_lack))
    unexpected = sorted(n for n in shapes if n not in expected and not _matches(n, want.may_add))
    wrong = sorted(n for n in expected if n in shapes and shapes[n] != expected[n])
    problems = []
    if missing:
        problems.append(f"missing tensors {_listed(missing)}")
    if unexpected:
        problems.append(f"unexpected tensors {_listed(unexpected)}")
    if wrong:
        n = wrong[0]
        problems.append(
            f"tensors of another shape {_listed(wrong)}, e.g. {n} {shapes[n]} where config.json needs {expected[n]}"
        )
    if problems:
        raise PitError(
            f"checkpoint {str(path)!r} does not match its config.json: {'; '.join(problems)}; expected exactly the "
            "weights of the model config.json describes (a damaged checkpoint, or an edited config)"
        )
