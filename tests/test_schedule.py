"""The warmup-cosine schedule (pit.training.optim.lr_lambda) against transformers'
`get_cosine_with_min_lr_schedule_with_warmup` on the configured runs: the cosine decay is the same, the
warmup is one step behind in transformers (step s gets s / W of the peak, so step 0 trains at lr 0; ours
gives (s + 1) / W), so every configured run with a warmup differs by lr / W > 1e-7 and ours stays (resumed
runs and the dvc.lock depend on its exact values; docs/training.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import get_cosine_with_min_lr_schedule_with_warmup

from pit.training.optim import lr_lambda, warmup_cosine

# (max_steps, warmup_steps, lr, min_lr) of the runs config/*.yaml configure (pretraining and LoRA sections)
CONFIGURED = [
    (20, 3, 3e-3, 3e-4),
    (8, 1, 2e-4, 2e-5),
    (1, 0, 3e-3, 3e-4),
    (2000, 200, 3e-3, 3e-4),
    (2000, 100, 1e-4, 1e-5),
    (1000, 50, 2e-4, 2e-5),
    (300, 20, 3e-3, 3e-4),
    (2500, 50, 3e-3, 3e-4),
    (60, 5, 2e-4, 2e-5),
]


def sequences(max_steps, warmup, lr, min_lr):
    """Per step, the lr of our scheduler and of transformers' on the same optimizer settings."""
    args = SimpleNamespace(max_steps=max_steps, warmup_steps=warmup, lr=lr, min_lr=min_lr, decay_steps=None)
    ours, theirs = [], []
    for make, out in [
        (lambda o: warmup_cosine(o, args), ours),
        (lambda o: get_cosine_with_min_lr_schedule_with_warmup(o, warmup, max_steps, min_lr=min_lr), theirs),
    ]:
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
        sched = make(opt)
        for _ in range(max_steps):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
    assert ours == pytest.approx([lr * lr_lambda(args)(s) for s in range(max_steps)], abs=1e-12)
    return ours, theirs


@pytest.mark.parametrize(("max_steps", "warmup", "lr", "min_lr"), CONFIGURED)
def test_transformers_schedule_differs_from_ours_only_in_the_warmup(max_steps, warmup, lr, min_lr):
    ours, theirs = sequences(max_steps, warmup, lr, min_lr)
    assert ours[warmup:] == pytest.approx(theirs[warmup:], abs=1e-7)  # the cosine decay to min_lr
    assert ours[:warmup] == pytest.approx([lr * (s + 1) / warmup for s in range(warmup)], abs=1e-12)
    assert theirs[:warmup] == pytest.approx([lr * s / warmup for s in range(warmup)], abs=1e-12)
    gap = max(abs(a - b) for a, b in zip(ours, theirs))
    assert gap == pytest.approx(lr / warmup if warmup else 0.0, abs=1e-12)  # > 1e-7 wherever there is a warmup


def test_decay_steps_end_the_cosine_early_and_hold_min_lr_to_the_end():
    """decay_steps D: the same warmup and cosine as a run of D steps, then min_lr exactly for the rest (the constant
    tail of the study's teacher mode)."""
    lr, min_lr, warmup, decay, total = 1e-3, 3e-4, 20, 400, 600
    tail = SimpleNamespace(max_steps=total, warmup_steps=warmup, lr=lr, min_lr=min_lr, decay_steps=decay)
    short = SimpleNamespace(max_steps=decay, warmup_steps=warmup, lr=lr, min_lr=min_lr, decay_steps=None)
    f, g = lr_lambda(tail), lr_lambda(short)
    assert [f(s) for s in range(decay)] == pytest.approx([g(s) for s in range(decay)], abs=1e-15)
    assert [lr * f(s) for s in range(decay, total)] == pytest.approx([min_lr] * (total - decay), abs=1e-15)
    assert lr * f(decay // 2) > min_lr * 1.5  # still decaying halfway
