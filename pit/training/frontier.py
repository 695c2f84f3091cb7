"""The side-effect frontier of LoRA post-training (`frontier_lrs` of `pit lora train`): how much an update changes
the model away from its task, against how much it adapted, over several learning rates.

For one pretrained run and one task, each learning rate `lr_k` of `lrs` trains the LoRA of `args` (the run's own
`pit lora train` settings: same examples, same order, same initialisation) with lr = lr_k and min_lr scaled by the
same factor, in memory, and measures

    gain_k         = nll_before - nll_after_k    in-domain adaptation, nats per reference token (> 0: adapted)
    kl_k           = KL(p_before || p_after_k)   on held-out pretraining text, nats per token
    val_loss_change_k                            validation loss after - before on the same windows

with nll the reference NLL of pit.evaluation.likelihood on the first `eval_limit` problems of the task's test split
(the problems `pit evaluate` scores) and the side effects of pit.analysis.side_effects. With the run's own point at
its lr (side_effects.json, and eval/ and base/ of its evaluation), the points trace KL against gain:
docs/posttraining.md, "Side effects at matched adaptation".
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch

from pit.core.linalg import cpu_threads
from pit.errors import PitError
from pit.evaluation.likelihood import reference_nll
from pit.evaluation.tasks import load_task
from pit.io import write_json
from pit.models.checkpoint import load_model
from pit.progress import progress_bar
from pit.training.args import LoraArgs
from pit.training.lora import LoraRun, load_data, merged_model, train_step, wrap
from pit.training.objective import NextTokenLoss
from pit.training.optim import warmup_cosine
from pit.training.runtime import mixed_precision, resolve_device

FRONTIER_KEYS = ("lr", "min_lr", "gain", "nll_after", "kl", "val_loss_change", "final_train_loss")


def task_nll(model, tokenizer, task) -> float:
    """The reference NLL (nats per reference token) of `model` on the problems of `task`."""
    ids = list(task.records)
    result = reference_nll(model, tokenizer, [task.prompt(t) for t in ids], [task.solution(t) for t in ids])
    if result["nll"] is None:
        raise PitError(f"task {task.name!r}: no reference token to score; expected problems with references")
    return result["nll"]


def train_in_memory(args: LoraArgs, data: tuple, device) -> torch.nn.Module:
    """The LoRA of `args` trained for max_steps without a run folder (pit.training.lora's step, examples and
    order); returns the merged model and the mean loss of its last five steps as `final_train_loss`."""
    task, tokenizer, examples, _ = data
    torch.manual_seed(args.seed)
    model = wrap(load_model(args.base), args).to(device).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=args.lr, betas=(args.beta1, args.beta2), weight_decay=args.weight_decay)
    run = LoraRun(
        args=args, folder=None, device=device, autocast=mixed_precision(args.precision, device)[1], model=model,
        optimizer=optimizer, scheduler=warmup_cosine(optimizer, args), tracker=None, state={"runtime_s": 0.0},
        start_step=0, run_name=f"frontier-lr{args.lr:g}", task=task, tokenizer=tokenizer, examples=examples,
        val=None, trainable=trainable, kind=model.get_base_model().interface_config.kind, params={},
    )  # fmt: skip
    step_loss = NextTokenLoss(model.get_base_model())
    losses = [train_step(run, step_loss, s)["loss"] for s in progress_bar(range(args.max_steps), desc=run.run_name)]
    merged = merged_model(model)
    merged.final_train_loss = sum(losses[-5:]) / len(losses[-5:])
    return merged.eval()


def frontier(args: LoraArgs, lrs: list[float], eval_limit: int | None, out: str | Path) -> dict:
    """The frontier points of the module docstring for every lr of `lrs`, written to `out` (JSON) and returned."""
    from pit.analysis.side_effects import side_effects

    if not lrs or any(not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0) for lr in lrs):
        raise PitError(f"frontier lrs {lrs}: expected a non-empty list of positive learning rates")
    if not args.val_data:
        raise PitError("frontier: val_data is not set; expected the validation token file the side effects read")
    with cpu_threads(args.threads), torch.random.fork_rng():  # the caller's random state is left as it was
        device = resolve_device(args.device)
        data = load_data(args)
        eval_task = load_task(args.task, args.source, eval_limit)
        base = load_model(args.base).to(device).eval()
        nll_before = task_nll(base, data[1], eval_task)
        points = []
        for lr in lrs:
            run_args = dataclasses.replace(
                args, lr=float(lr), min_lr=args.min_lr * float(lr) / args.lr, frontier_lrs=[]
            )
            merged = train_in_memory(run_args, data, device)
            effects = side_effects(base, merged, data[3], args.side_effect_seq_len, args.side_effect_windows)
            nll_after = task_nll(merged, data[1], eval_task)
            points.append(
                {
                    "lr": run_args.lr,
                    "min_lr": run_args.min_lr,
                    "gain": nll_before - nll_after,
                    "nll_after": nll_after,
                    "final_train_loss": merged.final_train_loss,
                    **{k: effects[k] for k in ("kl", "kl_max", "top1_changed", "val_loss_change")},
                }
            )
    result = {
        "task": args.task,
        "task_data": eval_task.name,
        "eval_problems": len(eval_task.records),
        "base": args.base,
        "lora_lr": args.lr,
        "nll_before": nll_before,
        "side_effect_windows": args.side_effect_windows,
        "points": points,
    }
    write_json(out, result)
    return result
