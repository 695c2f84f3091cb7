"""Host memory policy of `pit` processes: keep freed memory for reuse (glibc only).

A training step frees and re-allocates the same large tensors every step: the logits chunk of the loss
(1024 x V FP32, 206 MB at V = 50257), the V x d gradients of the token tables. glibc's malloc serves
every block above 32 MB with a fresh mmap and unmaps it on free, so each step page-faults those
hundreds of MB in again (the step times with and without this policy: benchmarks/RESULTS.md).
`retain_freed_memory` sets
    M_MMAP_MAX = 0              large blocks come from the heap, not from their own mappings;
    M_TRIM_THRESHOLD = 2^31 - 1  freed memory stays in the heap for the next step,
the glibc counterpart of the jemalloc/tcmalloc preload that PyTorch's CPU performance guide recommends.
Numerics are untouched (PyTorch aligns every CPU tensor to 64 bytes either way). The cost is memory that
stays resident: the heap settles after a few steps, with some fragmentation on the way (peak resident sets
with and without the policy: benchmarks/RESULTS.md). CUDA tensors use PyTorch's caching allocator and are
not affected.

The training and benchmark commands (`pit train`, `pit lora train`, `pit bench`) apply it at start; set
PIT_MALLOC=system to keep glibc's defaults. Code that calls `pit.training.pretrain.train` directly can call
`retain_freed_memory()` itself.
"""

from __future__ import annotations

import ctypes
import os
import platform

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's mallopt parameter numbers (malloc.h)
_retained = False


def retain_freed_memory() -> bool:
    """Apply the policy above; True if it is in effect (glibc, and PIT_MALLOC is not `system`)."""
    global _retained
    if not _retained and os.environ.get("PIT_MALLOC", "retain") != "system" and platform.libc_ver()[0] == "glibc":
        libc = ctypes.CDLL(None)
        _retained = bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1))
    return _retained


def policy() -> str:
    """`retain` once `retain_freed_memory` is in effect in this process, else `system` (the C library's own)."""
    return "retain" if _retained else "system"
