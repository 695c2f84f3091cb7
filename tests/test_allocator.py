"""pit/training/allocator.py: a `pit` training process keeps freed memory, so a tensor freed and allocated again
every step (the loss's logits chunk, the V x d gradients) does not page-fault its memory in again and the heap
does not grow; PIT_MALLOC=system keeps the C library's default."""

import json
import platform
import subprocess
import sys

import pytest

from pit.training.allocator import environment

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the policy is glibc tunables")

CHILD = """
import json, resource, sys, torch
from pit.training.allocator import policy
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
    env = environment({"PATH": "/usr/bin:/bin", "PIT_MALLOC": malloc})
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, env=env)
    return json.loads(proc.stdout)


@glibc
@pytest.mark.parametrize("attempt", range(3))  # the old policy passed or failed by chance: ask three times
def test_freed_memory_is_reused_without_page_faults(attempt):
    pages = 200e6 / 4096
    retained = child("retain")
    assert retained["policy"] == "retain"
    assert retained["faults"][0] > 0.9 * pages  # the first step maps the memory in
    assert max(retained["faults"][1:]) < 0.01 * pages, retained  # every later step reuses it
    assert retained["rss_mb"] < 2 * 200 + 300, retained  # one block (and torch) resident, not one per step


@glibc
def test_system_policy_maps_large_blocks_afresh_every_step():
    system = child("system")
    assert system["policy"] == "system"
    assert min(system["faults"][1:]) > 0.9 * 200e6 / 4096, system  # glibc's default maps it in again every step


def test_environment_keeps_other_tunables_and_overrides_ours():
    env = environment({"PIT_MALLOC": "retain", "GLIBC_TUNABLES": "glibc.malloc.tcache_count=7:glibc.pthread.x=1"})
    if platform.libc_ver()[0] == "glibc":
        assert env["GLIBC_TUNABLES"].split(":")[0] == "glibc.pthread.x=1"
        assert "glibc.malloc.tcache_count=0" in env["GLIBC_TUNABLES"].split(":")
        assert "glibc.malloc.tcache_count=7" not in env["GLIBC_TUNABLES"]
    assert "GLIBC_TUNABLES" not in environment({"PIT_MALLOC": "system"})
