"""What both model families share: adapters to the token interface and checkpoint loading rules."""

from __future__ import annotations

import torch.nn as nn

from pit.core.interfaces import InterfaceConfig, PITTying, TokenInterface
from pit.core.linalg import orthonormality_error
from pit.errors import PitError


class InterfaceEmbedding(nn.Module):
    """`nn.Embedding` stand-in that routes to a token interface (which is registered elsewhere): e_t = scale E[t],
    `scale` the architecture's own embedding scale (Gemma: sqrt(d); 1 elsewhere, and then no multiply at all)."""

    def __init__(self, interface: TokenInterface, scale: float = 1.0):
        super().__init__()
        object.__setattr__(self, "interface", interface)  # a reference, not a submodule
        self.scale = scale

    def forward(self, ids):
        e = self.interface.embed(ids)
        return e if self.scale == 1.0 else e * self.scale


class InterfaceHead(nn.Module):
    """`nn.Linear` LM-head stand-in: logits = interface.logits(h)."""

    def __init__(self, interface: TokenInterface):
        super().__init__()
        object.__setattr__(self, "interface", interface)

    def forward(self, h):
        return self.interface.logits(h)


class InterfaceLMMixin:
    """For `PreTrainedModel`s holding `self.interface`: after `from_pretrained`, Z is frozen or
    trainable as the config says and a PIT checkpoint's Z is checked to be orthonormal."""

    @property
    def interface_config(self) -> InterfaceConfig:
        return InterfaceConfig.from_dict(self.config.interface)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        model = super().from_pretrained(*args, **kwargs)
        iface = model.interface
        if isinstance(iface, PITTying):
            iface.Z.requires_grad_(model.interface_config.trainable_z)
            err = orthonormality_error(iface.Z)
            if err > 1e-3:
                raise PitError(
                    f"checkpoint {args[0] if args else ''!s} has a PIT memory Z with ||Z^T Z - I||_F = "
                    f"{err:.3g}; expected an orthonormal Z (the checkpoint is corrupt or not a PIT model)"
                )
        return model
