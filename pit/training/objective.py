"""The training objective: mean next-token cross-entropy through the chunked fused head (pit/core/loss.py)."""

from __future__ import annotations

import torch

from pit.core.loss import linear_cross_entropy
from pit.models.access import head_input


class NextTokenLoss(torch.nn.Module):
    """The module that torch.compile and DDP wrap: loss(inputs, targets) of `model`, without (tokens x V) logits.
    Targets equal to -100 are ignored (LoRA masks prompt and padding positions)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        g, M = head_input(self.model, inputs)
        return linear_cross_entropy(g, M, targets)
