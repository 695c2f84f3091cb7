"""The real teachers' CPU costs and the cost of a 4-bit rounding (docs/any-model.md, "Real pretrained teachers").

    python benchmarks/bench_real_teachers.py TEACHER_FOLDER VAL_TOKENS [--windows 4] [--seq-len 256] [--json]

TEACHER_FOLDER: a folder `pit teacher materialize` wrote; VAL_TOKENS: a validation token file made with its own
tokenizer (kind checkpoint on that folder; Gemma's with BOS per window). Measures:
- `load_teacher` wall time;
- one forward + backward pass at batch 4 x seq_len in FP32 (the model's own loss), 1 and 2 threads: wall and CPU
  (process) seconds of 3 passes after a warm-up (CPU time of the 1-thread pass: the uncontended cost);
- the teacher's loss on the first `windows` windows, then after one more rounding of every block weight (2-D
  weights of the layers) to GGML Q4_0 and, as a control, Q8_0 (gguf-py's quantiser), from the dequantised float32.
Results: benchmarks/out/bench_real_teachers_<folder name>.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from common import save_result

from pit.data.reader import TokenFile
from pit.models import load_teacher


def step_times(model, seq_len: int, threads: int, passes: int = 3) -> dict:
    x = torch.randint(3, model.config.vocab_size, (4, seq_len), generator=torch.Generator().manual_seed(0))
    torch.set_num_threads(threads)
    wall, cpu = [], []
    for _ in range(passes + 1):
        t, c = time.perf_counter(), time.process_time()
        model(input_ids=x, labels=x, use_cache=False).loss.backward()
        model.zero_grad(set_to_none=True)
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return {"wall_s": wall[1:], "cpu_s": cpu[1:]}


@torch.no_grad()
def window_loss(model, batch: torch.Tensor) -> float:
    logits = model(batch[:, :-1], use_cache=False).logits.double()
    return F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten()).item()


@torch.no_grad()
def rounding_costs(model, batch: torch.Tensor) -> dict:
    """The loss after one more rounding of every block weight to Q4_0 and to Q8_0 (weights restored after each)."""
    import gguf

    kept = {n: p.detach().clone() for n, p in model.named_parameters() if p.ndim == 2 and ".layers." in n}
    result = {"block_weights": len(kept)}
    for name in ("Q4_0", "Q8_0"):
        qtype, errors = getattr(gguf.GGMLQuantizationType, name), []
        for n, w in kept.items():
            x = w.numpy()
            y = gguf.quants.dequantize(gguf.quants.quantize(x, qtype), qtype).reshape(x.shape)
            errors.append(float(np.linalg.norm(y - x) / np.linalg.norm(x)))
            model.get_parameter(n).copy_(torch.from_numpy(y))
        result[name] = {"loss": window_loss(model, batch), "relative_error": float(np.mean(errors))}
        for n, w in kept.items():
            model.get_parameter(n).copy_(w)
    return result


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    ap.add_argument("teacher")
    ap.add_argument("val_tokens")
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    t = time.perf_counter()
    model = load_teacher(args.teacher)
    result = {"teacher": args.teacher, "load_teacher_s": time.perf_counter() - t}
    model.train()
    for threads in (1, 2):
        result[f"step_{threads}_threads"] = step_times(model, args.seq_len, threads)
    model.eval()
    data = TokenFile(args.val_tokens)
    batch = data.windows(data.sequential_starts(args.seq_len, args.windows), args.seq_len)
    result["loss"] = window_loss(model, batch)
    result["rounded"] = rounding_costs(model, batch)
    save_result(f"bench_real_teachers_{Path(args.teacher).name}", result, args.json)
    if not args.json:
        for key, value in result.items():
            print(key, value)


if __name__ == "__main__":
    main()
