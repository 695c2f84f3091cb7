"""pit/training/allocator.py: a `pit` process keeps freed memory, so a tensor freed and allocated again every step
(the loss's logits chunk, the V x d gradients) does not page-fault its memory in again; PIT_MALLOC=system
keeps the C library's default."""

import json
import os
import platform
import subprocess
import sys

import pytest

CHILD = """
import json, resource, sys, torch
from pit.training.allocator import policy, retain_freed_memory
retain_freed_memory()
faults = []
for _ in range(12):  # 12 "steps" that each allocate, fill and free 200 MB
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x = torch.ones(50_000_000)
    del x
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
rss = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS"))
print(json.dumps({"policy": policy(), "faults": faults, "rss_mb": rss / 1024}))
"""


def child(malloc: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ | {"PIT_MALLOC": malloc},
    )
    return json.loads(proc.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the policy is glibc's mallopt; elsewhere it is a no-op")
def test_freed_memory_is_reused_without_page_faults():
    pages = 200e6 / 4096
    retained, system = child("retain"), child("system")
    assert retained["policy"] == "retain" and system["policy"] == "system"
    assert retained["faults"][0] > 0.9 * pages  # the first step maps the memory in
    # the heap settles after a few steps (small blocks allocated behind a freed one keep it from the top,
    # and posix_memalign asks for a little more than it: freed blocks serve once two have merged); from
    # then on every step reuses it and the resident set stops growing
    assert max(retained["faults"][-3:]) < 0.01 * pages, retained
    assert retained["rss_mb"] < 12 * 200, retained
    assert min(system["faults"][1:]) > 0.9 * pages, system  # glibc's default maps it in again every step
