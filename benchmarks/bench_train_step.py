"""Training-step throughput of PIT vs TT vs untied on this machine (CPU), in one process.

    python benchmarks/bench_train_step.py [--json] [--repeats 3]

Models: `scratch-tiny` and a 133M-shaped scratch model (d = 768, 12 heads, 3 KV heads,
d_ff = 2304) with its depth shortened to `--layers` blocks, at V = 50257 and V = 32000. One step =
forward, cross-entropy, backward, AdamW step (+ PIT's after-step hook), with the same batch for
every arm. Arms are interleaved over rounds and the best round is kept, so the ratios are
measured under the same machine load.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from pit.models import build_model
from pit.models.scratch import PitForCausalLM
from pit.train import param_groups
from pit.tying import InterfaceConfig

ARMS = {"pit": InterfaceConfig(kind="pit"), "pit_trainable_z": InterfaceConfig(kind="pit", trainable_z=True),
        "tt": InterfaceConfig(kind="tt"), "untied": InterfaceConfig(kind="untied")}


def make(name, arm, vocab, layers):
    overrides = {"num_hidden_layers": layers} if layers else {}
    model = build_model(name, ARMS[arm], vocab_size=vocab, seed=0, **overrides)
    return model.train(), torch.optim.AdamW(param_groups(model, 0.1, 1e-4), lr=1e-4)


def step(model: PitForCausalLM, opt, batch):
    logits = model(batch[:, :-1], use_cache=False).logits
    loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
    loss.backward()
    opt.step()
    model.interface.after_optimizer_step()
    opt.zero_grad(set_to_none=True)


def bench(name, vocab, layers, batch_size, seq_len, repeats, rounds=2):
    g = torch.Generator().manual_seed(0)
    batch = torch.randint(0, vocab, (batch_size, seq_len + 1), generator=g)
    built = {arm: make(name, arm, vocab, layers) for arm in ARMS}
    best = {arm: float("inf") for arm in ARMS}
    for _ in range(rounds):
        for arm, (model, opt) in built.items():
            step(model, opt, batch)  # warm-up
            t0 = time.perf_counter()
            for _ in range(repeats):
                step(model, opt, batch)
            best[arm] = min(best[arm], (time.perf_counter() - t0) / repeats)
    tokens = batch_size * seq_len
    return {"model": name, "layers": layers or "all", "vocab": vocab, "tokens_per_step": tokens,
            "step_s": best, "tokens_per_s": {a: tokens / s for a, s in best.items()},
            "time_ratio_to_tt": {a: s / best["tt"] for a, s in best.items()}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--layers", type=int, default=2, help="depth of the 133M-shaped model")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    results = [
        bench("scratch-tiny", 50257, None, 8, 128, args.repeats),
        bench("scratch-133m", 50257, args.layers, 4, 256, args.repeats),
        bench("scratch-133m", 32000, args.layers, 4, 256, args.repeats),
    ]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for r in results:
        print(f"{r['model']} (layers {r['layers']}, V={r['vocab']}, {r['tokens_per_step']} tokens/step)")
        for arm in ARMS:
            print(f"  {arm:16s} {r['tokens_per_s'][arm]:9.0f} tokens/s   time / TT = {r['time_ratio_to_tt'][arm]:.3f}")


if __name__ == "__main__":
    main()
