"""Host memory policy of `pit` processes: keep freed memory for reuse (glibc only).

A training step frees and re-allocates the same large tensors every step: the logits chunk of the loss
(1024 x V FP32, 206 MB at V = 50257), the V x d gradients of the token tables. glibc's malloc serves
every block above 32 MB with a fresh mmap and unmaps it on free, so each step page-faults those
hundreds of MB in again (the step times with and without this policy: benchmarks/RESULTS.md).
The policy is four glibc tunables, read by the C library when a process starts (GLIBC_TUNABLES):
    mmap_max = 0             large blocks come from the heap, not from their own mappings;
    trim_threshold = 2^31-1  freed memory stays in the heap for the next step;
    tcache_count = 0,        no per-thread cache and no fast bins, so small freed blocks merge at once.
    mxfast = 0
The last two matter for the first two to work: PyTorch allocates with posix_memalign, which splits a small
remainder off each large block; parked in the thread cache or a fast bin, that remainder counts as in use,
keeps the freed large block from merging with its neighbours, and the next (slightly larger) request
extends the heap instead: in a loop that allocates and frees 200 MB, the heap grew by 200 MB for 5 to 11
steps (a resident set up to 2.3 GB) with only the first two set, and settles after the first step with
all four (tests/test_allocator.py). This is the glibc counterpart of the jemalloc/tcmalloc preload that
PyTorch's CPU performance guide recommends. Numerics are untouched. CUDA tensors use PyTorch's caching
allocator and are not affected.

Tunables cannot be changed in a running process, so the `pit` command re-executes itself once with them
set before it does anything else (`reexec_with_policy`), for the commands in `COMMANDS` (`pit train`,
`pit lora`, `pit bench`); PIT_MALLOC=system keeps glibc's defaults. A program that calls
`pit.training.pretrain.train` directly gets the policy by starting with `environment()` as its environment.
"""

from __future__ import annotations

import os
import platform
import sys

TUNABLES = (
    "glibc.malloc.mmap_max=0",
    "glibc.malloc.trim_threshold=2147483647",
    "glibc.malloc.tcache_count=0",
    "glibc.malloc.mxfast=0",
)
COMMANDS = ("train", "lora", "bench")  # the `pit` commands that run training steps


def wanted(env=None) -> bool:
    """True where the policy applies: glibc, and PIT_MALLOC is not `system`."""
    env = os.environ if env is None else env
    return env.get("PIT_MALLOC", "retain") != "system" and platform.libc_ver()[0] == "glibc"


def environment(env=None) -> dict[str, str]:
    """`env` (default: this process's) with the tunables added to GLIBC_TUNABLES, where the policy is wanted."""
    env = dict(os.environ if env is None else env)
    if wanted(env):
        have = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t]
        names = {t.split("=")[0] for t in TUNABLES}
        env["GLIBC_TUNABLES"] = ":".join([t for t in have if t.split("=")[0] not in names] + list(TUNABLES))
    return env


def policy() -> str:
    """`retain` if this process started with the tunables (they are read at start only), else `system`."""
    have = set(os.environ.get("GLIBC_TUNABLES", "").split(":"))
    return "retain" if platform.libc_ver()[0] == "glibc" and have.issuperset(TUNABLES) else "system"


def reexec_with_policy(argv: list[str]) -> None:
    """For a `pit` command in COMMANDS: replace this process by `python -m pit ARGV` started with the tunables
    (same pid, so torchrun and Snakemake keep tracking it), unless they are in effect or not wanted."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command in COMMANDS and wanted() and policy() != "retain":
        os.execve(sys.executable, [sys.executable, "-m", "pit", *argv], environment())
