"""The training objective: mean next-token cross-entropy through the chunked fused head (pit/core/loss.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pit.core.loss import linear_cross_entropy
from pit.errors import PitError
from pit.models.access import head_input, logit_softcap
from pit.training.args import COMPILE_MODES, CUDA_GRAPH_MODES


class NextTokenLoss(torch.nn.Module):
    """The module that torch.compile and DDP wrap: loss(inputs, targets) of `model`, without (tokens x V) logits.
    Targets equal to -100 are ignored (LoRA masks prompt and padding positions); `chunk_rows`: rows of logits per
    chunk of the loss (None: pit.core.loss.chunk_rows's choice for the batch's rows)."""

    def __init__(self, model, chunk_rows: int | None = None):
        super().__init__()
        self.model = model
        self.chunk_rows = chunk_rows

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if logit_softcap(self.model) is not None:  # c tanh(g M^T / c) (Gemma 2/3) does not factor: the model's logits
            logits = self.model(inputs, use_cache=False).logits
            return F.cross_entropy(logits.flatten(0, -2).float(), targets.flatten(), ignore_index=-100)
        g, M = head_input(self.model, inputs)
        return linear_cross_entropy(g, M, targets, chunk_size=self.chunk_rows)


def check_compile(mode: str, backend: str = "inductor") -> None:
    """A mode of COMPILE_MODES, and "default" for any backend but Inductor."""
    if mode not in COMPILE_MODES:
        raise PitError(f"compile mode {mode!r}; expected one of {list(COMPILE_MODES)}")
    if mode != "default" and backend != "inductor":
        raise PitError(f"compile mode {mode!r} with backend {backend!r}; modes other than 'default' need 'inductor'")


def compile_loss(loss: torch.nn.Module, mode: str = "default", backend: str = "inductor", dynamic: bool | None = None):
    """`loss` under torch.compile (its forward, and so the backward AOTAutograd derives) in one of COMPILE_MODES,
    which are Inductor's: another backend takes only "default". A mode in CUDA_GRAPH_MODES needs `new_step()`
    before each step."""
    check_compile(mode, backend)
    return torch.compile(loss, backend=backend, mode=None if mode == "default" else mode, dynamic=dynamic)


def new_step(mode: str) -> None:
    """Tell the CUDA graphs of `mode` (if any) that a new step begins: the last replay's outputs (its gradients,
    which the optimizer has consumed) may be overwritten."""
    if mode in CUDA_GRAPH_MODES:
        torch.compiler.cudagraph_mark_step_begin()
