"""A bf16 residual stream: what it does to training, measured on CPU, for the decision the GPU speed-up asks for.

    python benchmarks/bench_bf16_residual.py DATA TOKENIZER [--steps 300] [--seeds 0,1,2] [--json]

DATA: a folder with train.bin and val.bin (e.g. the default profile's results/data/bpe32k, made by
`snakemake --cores 2 data`); TOKENIZER: its tokenizer folder (results/tokenizers/bpe32k).

Under bf16 autocast the scratch model's residual stream x stays FP32 (the embedding's dtype): every block reads
x + Attn(LN(x)) + MLP(LN(x)) in FP32, LayerNorm and the adds moving 4 bytes per value. Casting the embedding's
output to bf16 (`use_bf16_residual`, the `bf16_residual` variant of `gpu_probe.py`) makes the whole stream bf16:
half the bytes of the step's elementwise work, which is where the compiled 133M step's time above its GEMMs goes on
a GPU (benchmarks/RESULTS.md, section 17). It also rounds the stream to 8 significant bits at every block, so it is
a change of the training numerics, not only of speed. This script measures that change, in one process:

- `training`: `pit train` (bf16 autocast on CPU) of scratch-tiny-l (d = 128, 4 blocks) for PIT (frozen Z, T = I)
  and TT, each with the FP32 and the bf16 stream, at each seed (same data order and init per seed). Reported: each
  run's validation loss as `pit train` measures it (its own precision) and in FP32 on the same windows (the
  stream's effect on the weights alone), the paired difference bf16 - FP32 per seed with its mean and a t interval
  (95%, n = seeds), against the seed-to-seed spread of the FP32 arm;
- `forward`: on each FP32-stream run's final weights, the loss and logits of one batch of validation windows under
  bf16 autocast with each stream, against the FP32 forward (no autocast): the error one forward pass adds;
- `forward_at_init`: the same at initialisation for scratch-tiny-l and for scratch-133m (16 blocks, d = 768, the
  GPU step's model), where the stream is rounded 16 times instead of 4.

Results: benchmarks/out/bench_bf16_residual.json (and `--json`).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch
from common import report

import pit.training.pretrain as pretrain
from pit.data.reader import TokenFile
from pit.reporting.stats import t_interval
from pit.training.args import PretrainArgs

MODEL, SEQ = "scratch-tiny-l", 128


def use_bf16_residual(model) -> None:
    """The residual stream in bf16: the embedding's output cast once (the instance's `embed`; the class keeps FP32).
    Under autocast every block's output (a bf16 projection) then adds to a bf16 x, so the stream stays bf16."""
    embed = model.interface.embed
    model.interface.embed = lambda ids, embed=embed: embed(ids).to(torch.bfloat16)


def use_fp32_residual(model) -> None:
    """Undo `use_bf16_residual` (drop the instance's `embed`)."""
    model.interface.__dict__.pop("embed", None)


def train_arm(data: Path, tokenizer: Path, arm: str, stream: str, seed: int, steps: int, out: Path):
    """One `pit train` run with `stream` ('fp32' | 'bf16'); returns its summary and the trained model."""
    built = []
    original = pretrain.build_run_model

    def build(args, vocab, eos):
        model = original(args, vocab, eos)
        if stream == "bf16":
            use_bf16_residual(model)
        built.append(model)
        return model

    spec = dict(
        mode="scratch", model=MODEL, interface={"kind": arm}, train_data=str(data / "train.bin"),
        val_data=str(data / "val.bin"), tokenizer=str(tokenizer), seq_len=SEQ, global_batch_tokens=8 * SEQ,
        micro_batch_size=8, max_steps=steps, warmup_steps=10, lr=3e-3, min_lr=3e-4, eval_batches=8,
        final_loss_window=20, precision="bf16", device="cpu", threads=torch.get_num_threads(), seed=seed,
        mlflow={"enabled": False},
    )  # fmt: skip
    pretrain.build_run_model = build
    try:
        summary = pretrain.train(PretrainArgs.from_dict(spec), out / f"{arm}-{stream}-{seed}")
    finally:
        pretrain.build_run_model = original
    return summary, built[0]


def val_batch(data: Path, windows: int = 16) -> torch.Tensor:
    """`windows` validation windows of SEQ + 1 tokens, evenly spaced (the same for every run)."""
    val = TokenFile(data / "val.bin")
    step = (len(val) - SEQ - 1) // windows
    return val.windows([i * step for i in range(windows)], SEQ)


@torch.no_grad()
def forward(model, batch, autocast: bool):
    """(loss, logits in FP32) of `batch`, with bf16 autocast or in FP32."""
    model.eval()
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else torch.autocast("cpu", enabled=False)
    with ctx:
        out = model(input_ids=batch, labels=batch)  # the model shifts the labels
    return out.loss.float().item(), out.logits.float()


def fp32_val_loss(model, batch) -> float:
    """The model's loss on `batch` in FP32 with an FP32 stream (the trained weights alone)."""
    use_fp32_residual(model)
    return forward(model, batch, autocast=False)[0]


def forward_errors(model, batch) -> dict:
    """What one bf16 forward pass adds to the loss and the logits, with the FP32 and with the bf16 stream."""
    use_fp32_residual(model)
    ref_loss, ref = forward(model, batch, autocast=False)
    out = {}
    for stream in ("fp32", "bf16"):
        if stream == "bf16":
            use_bf16_residual(model)
        loss, logits = forward(model, batch, autocast=True)
        err = (logits - ref).abs().max().item() / ref.abs().max().item()
        out[stream] = {"loss_minus_fp32": loss - ref_loss, "logits_max_rel_err": err}
    use_fp32_residual(model)
    return out


def init_errors(vocab: int, batch) -> dict:
    """`forward_errors` of freshly initialised models (seed 0), PIT and TT, at the study's and the GPU's shape."""
    from pit.core.interfaces import InterfaceConfig
    from pit.models import build_model

    out = {}
    for name in (MODEL, "scratch-133m"):
        for arm in ("pit", "tt"):
            out[f"{name}-{arm}"] = forward_errors(build_model(name, InterfaceConfig(kind=arm), vocab_size=vocab), batch)
    return out


def interval(diffs: list[float]) -> dict:
    """Mean of paired differences and its 95% t interval (the claims table's `t_interval`)."""
    mean, half = t_interval(diffs)
    return {"mean": mean, "ci95": [mean - half, mean + half], "n": len(diffs), "per_seed": diffs}


def summarize(runs: dict, seeds: list[int]) -> dict:
    out = {}
    for arm in ("pit", "tt"):
        for key in ("val_loss", "val_loss_fp32", "final_train_loss"):
            a = [runs[(arm, "fp32", s)][key] for s in seeds]
            b = [runs[(arm, "bf16", s)][key] for s in seeds]
            out[f"{arm}_{key}"] = {
                "fp32_stream_mean": statistics.fmean(a),
                "fp32_stream_seed_sd": statistics.stdev(a) if len(a) > 1 else float("nan"),
                "bf16_stream_mean": statistics.fmean(b),
                "bf16_minus_fp32": interval([y - x for x, y in zip(a, b)]),
            }
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("data", type=Path, help="folder with train.bin and val.bin")
    ap.add_argument("tokenizer", type=Path, help="the token files' tokenizer folder")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    batch = val_batch(a.data)
    runs, forwards = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for arm in ("pit", "tt"):
                for stream in ("fp32", "bf16"):
                    summary, model = train_arm(a.data, a.tokenizer, arm, stream, seed, a.steps, Path(tmp))
                    row = {k: summary[k] for k in ("val_loss", "final_train_loss", "runtime_s")}
                    if stream == "fp32":
                        forwards[f"{arm}-{seed}"] = forward_errors(model, batch)
                    row["val_loss_fp32"] = fp32_val_loss(model, batch)
                    runs[(arm, stream, seed)] = row
                    print(arm, stream, seed, {k: round(v, 4) for k, v in row.items()}, flush=True)
    at_init = init_errors(TokenFile(a.data / "val.bin").meta["vocab_size"], batch[:4])
    settings = dict(model=MODEL, seq_len=SEQ, steps=a.steps, seeds=seeds, data=str(a.data), precision="bf16 autocast")
    rows = {
        "training": summarize(runs, seeds),
        "forward": forwards,
        "forward_at_init": at_init,
        "runs": {"-".join(map(str, k)): v for k, v in runs.items()},
    }
    report("bench_bf16_residual", rows, a.json, **settings)


if __name__ == "__main__":
    main()
