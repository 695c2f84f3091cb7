"""Before/after of the hot-path work: the training step and decoding of an older commit against this tree.

    python benchmarks/bench_before_after.py [--ref 54304df] [--rounds 3] [--layers 2] [--json]

Two variants, each timed in its own child process; the children alternate (before, after, before, ...) for
`--rounds` rounds and every measurement keeps its best round, so machine-load drift hits both:
  before  `git archive REF` (by default 54304df, the commit before the hot-path work): pit train's step of
          that commit (logits, then F.cross_entropy; AdamW as it built it);
  after   this tree: pit train's step now (`pit.training.bench.TrainStep`: chunked fused loss, fused AdamW).
Measurements: the step of the 133M-shaped scratch model (`--layers` blocks, V = 50257) for PIT and TT, the
step of PitGPT2LMHeadModel (TT) at the GPT-2 configuration, greedy decoding of the PIT model (V = 32000,
KV cache), and an n x n GEMM as the load yardstick. Results: benchmarks/out/bench_before_after.json.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from common import save_result

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("before", "after")


def child(variant: str, layers: int) -> dict:
    """One pass over every measurement with the `pit` on sys.path (the variant's tree)."""
    import torch
    import torch.nn.functional as F
    from transformers import GPT2LMHeadModel

    from pit.models import build_model, convert_teacher, gpt2_config
    from pit.models.configs import TeacherSpec

    new = variant != "before"
    if new:  # this tree's layout (docs/architecture.md)
        from pit.core.interfaces import InterfaceConfig
        from pit.training.bench import TrainStep
        from pit.training.objective import NextTokenLoss
    else:  # the flat layout of the commit before the hot-path work
        import pit.train as old_train
        from pit.tying import InterfaceConfig
    batch = torch.randint(0, 50257, (4, 257), generator=torch.Generator().manual_seed(0))

    def step_fn(model):
        if new:
            return TrainStep(model, NextTokenLoss(model), batch)
        opt = torch.optim.AdamW(old_train.param_groups(model, 0.1, 1e-4), lr=1e-4)  # HEAD: fused only on CUDA
        model.train()

        def step():
            logits = model(batch[:, :-1], use_cache=False).logits
            F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten()).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            model.interface.after_optimizer_step()
            opt.zero_grad(set_to_none=True)

        return step

    def timed(fn, repeats=1):
        fn()
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - t0) / repeats

    a, b, c = torch.randn(3072, 3072), torch.randn(3072, 3072), torch.empty(3072, 3072)
    import pit

    out = {"pit_from": pit.__file__, "gemm_s": timed(lambda: torch.mm(a, b, out=c), 3)}
    for kind in ("pit", "tt"):
        model = build_model(
            "scratch-133m", InterfaceConfig(kind=kind), vocab_size=50257, seed=0, num_hidden_layers=layers
        )
        out[f"step_133m_{kind}_s"] = timed(step_fn(model))
        del model
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(gpt2_config(TeacherSpec(12, 768, 12, 1024)))
    out["step_gpt2_ours_tt_s"] = timed(step_fn(convert_teacher(hf, InterfaceConfig(kind="tt"))))
    del hf
    model = build_model(
        "scratch-133m", InterfaceConfig(kind="pit"), vocab_size=32000, seed=0, num_hidden_layers=layers
    ).eval()
    prompt = torch.randint(0, 32000, (4, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out["generate_pit_s_per_token"] = timed(
            lambda: model.generate(prompt, max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)
        ) / (4 * 32)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--ref",
        default="54304df",
        help="git revision of the 'before' tree (default: the commit before the hot-path work)",
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.layers)))
        return
    with tempfile.TemporaryDirectory(prefix="bench_before.") as tmp:
        archive = subprocess.run(["git", "archive", args.ref], cwd=ROOT, capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        trees = {"before": tmp, "after": str(ROOT)}
        best: dict[str, dict[str, float]] = {v: {} for v in VARIANTS}
        for _ in range(args.rounds):
            for variant in VARIANTS:
                run = subprocess.run(
                    [sys.executable, __file__, "--child", variant, "--layers", str(args.layers)],
                    env={**os.environ, "PYTHONPATH": trees[variant]},
                    capture_output=True,
                    text=True,
                    check=True,
                    cwd=trees[variant],
                )
                row = json.loads(run.stdout.strip().splitlines()[-1])
                assert row.pop("pit_from").startswith(trees[variant]), "the child imported the wrong tree"
                for key, value in row.items():
                    best[variant][key] = min(best[variant].get(key, float("inf")), value)
    result = {
        "ref": args.ref,
        "layers": args.layers,
        "rounds": args.rounds,
        "seconds": best,
        "after_over_before": {v: {k: best[v][k] / best["before"][k] for k in best["before"]} for v in VARIANTS},
    }
    save_result("bench_before_after", result, args.json)
    if args.json:
        return
    for key in best["before"]:
        print(
            f"{key:28s} "
            + "  ".join(
                f"{v} {best[v][key] * 1e3:9.1f} ms ({best[v][key] / best['before'][key]:.3f})" for v in VARIANTS
            )
        )


if __name__ == "__main__":
    main()
