"""The training objective: mean next-token cross-entropy through the chunked fused head (pit/core/loss.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pit.core.loss import linear_cross_entropy
from pit.models.access import head_input, logit_softcap


class NextTokenLoss(torch.nn.Module):
    """The module that torch.compile and DDP wrap: loss(inputs, targets) of `model`, without (tokens x V) logits.
    Targets equal to -100 are ignored (LoRA masks prompt and padding positions)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if logit_softcap(self.model) is not None:  # c tanh(g M^T / c) (Gemma 2/3) does not factor: the model's logits
            logits = self.model(inputs, use_cache=False).logits
            return F.cross_entropy(logits.flatten(0, -2).float(), targets.flatten(), ignore_index=-100)
        g, M = head_input(self.model, inputs)
        return linear_cross_entropy(g, M, targets)
