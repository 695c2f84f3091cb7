"""How long torch.compile takes for the chunked loss, by number of chunks (`pit.core.loss.chunk_rows`).

    python benchmarks/bench_loss_compile_time.py [--rows 65536] [--chunks 1024,none] [--json]

Dynamo unrolls the loss's loop over chunks, so the graph, and Inductor's time to schedule and generate it, grows with
the number of chunks. Each case compiles forward + backward of the bf16 loss (`linear_cross_entropy` under
`torch.compile`, static shapes, Inductor's caches off) over `--rows` rows, d = 32, V = 1000 (small: the time is the
compiler's, not the GEMMs'), in a fresh process, and reports the seconds of the first call (compiling) and of a
second one. `--chunks`: rows per chunk for each case, `none` = the library's choice (at most 16 chunks).
Results: benchmarks/out/bench_loss_compile_time.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from common import report

CASE = """
import json, time, torch
import torch._inductor.config as inductor_config
from pit.core.loss import chunk_rows, linear_cross_entropy
inductor_config.fx_graph_cache = False
inductor_config.autotune_local_cache = False
rows, chunk = {rows}, {chunk}
gen = torch.Generator().manual_seed(0)
g = torch.randn(rows, 32, generator=gen).to(torch.bfloat16).requires_grad_()
M = torch.randn(1000, 32, generator=gen, requires_grad=True)
t = torch.randint(0, 1000, (rows,), generator=gen)
fn = torch.compile(lambda *a: linear_cross_entropy(*a, chunk_size=chunk), dynamic=False)
seconds = []
for _ in range(2):
    start = time.perf_counter()
    fn(g, M, t).backward()
    seconds.append(time.perf_counter() - start)
per = chunk_rows(rows, chunk)
print(json.dumps({{"rows_per_chunk": per, "chunks": -(-rows // per), "first_s": seconds[0], "second_s": seconds[1]}}))
"""


def compile_case(rows: int, chunk: int | None) -> dict:
    """One case in a fresh process (nothing compiled before it)."""
    code = CASE.format(rows=rows, chunk=chunk)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=65536, help="rows of the loss (64 windows of 1024 tokens)")
    ap.add_argument("--chunks", default="1024,none", help="rows per chunk of each case; none = the library's choice")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    cases = [None if c == "none" else int(c) for c in a.chunks.split(",")]
    rows = {f"chunk_{c or 'library'}": compile_case(a.rows, c) for c in cases}
    report("bench_loss_compile_time", rows, a.json, loss_rows=a.rows, dim=32, vocab=1000, dtype="bfloat16")


if __name__ == "__main__":
    main()
