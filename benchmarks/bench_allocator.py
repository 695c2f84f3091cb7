"""The host memory policy of `pit` processes (`pit/training/allocator.py`) on and off: the 133M-shaped training step
(`pit.training.bench.TrainStep`, 4 x 256 tokens, V = 50257) of each interface, and the GPT-2 reference pair of
`pit bench` (`GPT2LMHeadModel` and our TT model at GPT-2 configuration), with the GEMM yardstick, in child
processes that alternate over rounds (`PIT_MALLOC=system` keeps glibc's defaults; the policy is set when a
process starts). Every child times its arms as `pit bench` does (interleaved rounds, best
round, MFU against the GEMM of the same rounds); the best child of each policy is kept.

    python benchmarks/bench_allocator.py [--rounds 2] [--child-rounds 3] [--layers 2] [--json]

Results: benchmarks/out/bench_allocator.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from common import save_result

from pit.training.allocator import environment

POLICIES = ("system", "retain")


def child(layers: int, rounds: int) -> list[dict]:
    import torch

    from pit.models import build_model
    from pit.training.allocator import policy
    from pit.training.bench import ARMS, SIZES, reference_section, step_rows
    from pit.training.objective import NextTokenLoss

    assert policy() == os.environ["PIT_MALLOC"], "the policy is not the one asked for"
    size = SIZES["default"]
    batch = torch.randint(0, 50257, (size.batch, size.seq_len + 1), generator=torch.Generator().manual_seed(0))
    models = {
        arm: build_model("scratch-133m", ARMS[arm], vocab_size=50257, seed=0, num_hidden_layers=layers)
        for arm in ("pit", "tt", "untied")
    }
    rows = step_rows({arm: (m, NextTokenLoss(m)) for arm, m in models.items()}, batch, rounds, 1, size.gemm_n)
    del models
    return rows + reference_section(size, rounds, 1)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=2, help="child processes per policy, alternating")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child-rounds", type=int, default=3, help="interleaved rounds inside each child")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.layers, args.child_rounds)))
        return
    best: dict[str, dict[str, dict]] = {p: {} for p in POLICIES}
    for _ in range(args.rounds):
        for policy in POLICIES:
            run = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    "--layers",
                    str(args.layers),
                    "--child-rounds",
                    str(args.child_rounds),
                ],
                env=environment({**os.environ, "PIT_MALLOC": policy}),  # the tunables are read at start
                capture_output=True,
                text=True,
                check=True,
            )
            for row in json.loads(run.stdout.strip().splitlines()[-1]):
                kept = best[policy].get(row["arm"])
                if kept is None or row["step_s"] < kept["step_s"]:
                    best[policy][row["arm"]] = row
    result = {
        "layers": args.layers,
        "rounds": args.rounds,
        "child_rounds": args.child_rounds,
        "rows": best,
        "retain_over_system_step_time": {
            arm: best["retain"][arm]["step_s"] / best["system"][arm]["step_s"] for arm in best["system"]
        },
        # our TT model over GPT2LMHeadModel in tokens/s: both under one policy, and each under its own
        # default (pit's process retains; a plain Python process running transformers does not)
        "ours_tt_over_hf_gpt2": {
            "system": best["system"]["hf_gpt2"]["step_s"] / best["system"]["ours_tt"]["step_s"],
            "retain": best["retain"]["hf_gpt2"]["step_s"] / best["retain"]["ours_tt"]["step_s"],
            "pit_retain_vs_plain_system": best["system"]["hf_gpt2"]["step_s"] / best["retain"]["ours_tt"]["step_s"],
        },
    }
    save_result("bench_allocator", result, args.json)
    if args.json:
        return
    for arm in best["system"]:
        s, r = best["system"][arm], best["retain"][arm]
        print(
            f"{arm:7s} system {s['step_s'] * 1e3:7.1f} ms (MFU {s['mfu']:.1%})   retain {r['step_s'] * 1e3:7.1f} ms "
            f"(MFU {r['mfu']:.1%})   retain / system {r['step_s'] / s['step_s']:.3f}"
        )
    print("ours_tt / hf_gpt2 tokens/s: " + ", ".join(f"{k} {v:.3f}" for k, v in result["ours_tt_over_hf_gpt2"].items()))


if __name__ == "__main__":
    main()
