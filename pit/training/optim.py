"""Optimizer, schedule and the update that ends every training step (`pit train`, `pit lora`, `pit bench`)."""

from __future__ import annotations

import math

import torch


def param_groups(model, weight_decay: float, lr: float = 1e-3, transform_lr_scale: float = 1.0) -> list[dict]:
    """Decay matrices of the blocks and TT/untied tables; not norms, biases, gates, L or Z.
    PIT's L gets its own group with lr x transform_lr_scale."""
    decay, no_decay, transform = [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        leaf = name.split(".")[-1]
        if name.startswith("interface.") and leaf in ("L_offdiag", "log_diag"):
            transform.append(p)
        elif p.ndim >= 2 and not (name.startswith("interface.") and leaf == "Z"):
            decay.append(p)
        else:
            no_decay.append(p)
    groups = [
        {"params": decay, "weight_decay": weight_decay, "lr": lr},
        {"params": no_decay, "weight_decay": 0.0, "lr": lr},
    ]
    if transform:
        groups.append({"params": transform, "weight_decay": 0.0, "lr": lr * transform_lr_scale})
    return groups


def make_optimizer(model, args) -> torch.optim.Optimizer:
    """The optimizer of `pit train` over `param_groups`: AdamW (fused; the default), or plain SGD without momentum
    (`optimizer: sgd`), which keeps no state: AdamW's two FP32 moments (8 bytes per parameter) do not fit beside
    the weights and gradients of the 1.3B-class shapes in 24 GB (config/paper-smoke.yaml)."""
    groups = param_groups(model, args.weight_decay, args.lr, args.transform_lr_scale)
    if args.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=args.lr, momentum=0.0)
    return torch.optim.AdamW(groups, lr=args.lr, betas=(args.beta1, args.beta2), eps=args.adam_eps, fused=True)


def lr_lambda(args):
    """Linear warmup to lr, then cosine decay to min_lr at D = decay_steps (max_steps when unset), then min_lr to the
    end (as a factor of lr); `args` has warmup_steps, decay_steps, max_steps, lr and min_lr
    (pit.training.args.RunArgs). Step s < W: (s + 1) / W; then (min_lr + (lr - min_lr) (1 + cos(pi p)) / 2) / lr with
    p = (s - W) / (D - W), clamped to 1.

    Ours, not transformers' `get_cosine_with_min_lr_schedule_with_warmup`: its warmup is s / W (step 0 at lr 0),
    so it differs by lr / W at every warmup step of the configured runs (tests/test_schedule.py); the decay is
    the same."""

    def f(step: int) -> float:
        if step < args.warmup_steps:
            return (step + 1) / args.warmup_steps
        end = args.decay_steps or args.max_steps
        progress = min(1.0, (step - args.warmup_steps) / max(1, end - args.warmup_steps))
        return (args.min_lr + 0.5 * (args.lr - args.min_lr) * (1 + math.cos(math.pi * progress))) / args.lr

    return f


def warmup_cosine(optimizer, args) -> torch.optim.lr_scheduler.LambdaLR:
    """The schedule of `lr_lambda` on `optimizer`."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(args))


def optimizer_update(optimizer, interface) -> None:
    """The update that ends every training step: the optimizer step, the interface's after-step hook (PIT:
    polar retraction of a trainable Z, Eq. 18; None: no interface), zero_grad."""
    optimizer.step()
    if interface is not None:
        interface.after_optimizer_step()
    optimizer.zero_grad(set_to_none=True)
