"""Where a run executes: device, precision, processes (DDP under torchrun) and peak memory."""

from __future__ import annotations

import os
import resource
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from pit.errors import PitError


@dataclass
class Dist:
    """This process's place in a torchrun job (rank 0 of 1 without torchrun)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def all_reduce_mean(self, x: torch.Tensor) -> torch.Tensor:
        """The mean of `x` (a tensor on this rank's device: NCCL reduces only CUDA tensors) over all ranks."""
        if self.world == 1:
            return x
        import torch.distributed as dist

        x = x.clone()
        dist.all_reduce(x)
        return x / self.world

    def close(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()
            dist.destroy_process_group()


def init_distributed(device: torch.device) -> Dist:
    """torchrun sets WORLD_SIZE/RANK/LOCAL_RANK: NCCL on GPU, gloo on CPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Dist()
    import torch.distributed as dist

    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Dist(dist.get_rank(), world, int(os.environ.get("LOCAL_RANK", "0")))


def resolve_device(name: str) -> torch.device:
    """`auto` = CUDA when available, else CPU; otherwise the named device, which must exist on this machine (a
    PitError before any work: `cuda` without CUDA, `cuda:3` on a machine with one GPU, a name torch does not know)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise PitError(f"device {name!r}: expected auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise PitError(f"device {name!r}: CUDA is not available on this machine; expected cpu (or auto)")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise PitError(f"device {name!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


def to_device(batch: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`batch` on `device`. To CUDA through pinned host memory, without waiting for the copy: the host goes on queueing
    the step's kernels (a copy from pageable memory would make the host wait until the GPU has finished all work
    queued so far)."""
    if device.type != "cuda":
        return batch.to(device)
    return batch.pin_memory().to(device, non_blocking=True)


def read_scalars(*values: torch.Tensor) -> list[float]:
    """The values of 0-d tensors, read from the device in one copy: a training step's one host sync (its loss and
    gradient norm, which spike handling needs before the update), instead of one per value. Exact: float32 and
    float64 values pass through float64 unchanged."""
    return torch.stack([v.detach().to(torch.float64) for v in values]).tolist()


def mixed_precision(precision: str, device: torch.device):
    """(bf16?, autocast context): bf16 autocast for `bf16`, and for `auto` on CUDA; FP32 otherwise."""
    use_bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
    return use_bf16, torch.autocast(device.type, dtype=torch.bfloat16) if use_bf16 else nullcontext()


def peak_memory_mb(device: torch.device) -> float:
    """Peak CUDA memory allocated, or the peak resident set of this process on CPU (Linux), in MiB."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


ACTIVATION_FLOATS_PER_TOKEN_LAYER = 17  # a block's saved tensors per token and hidden unit (Korthikanti et al. 2022)


def activation_bytes(config, micro_batch: int, seq_len: int, bytes_per_float: int = 4) -> int:
    """A floor on the activation memory one forward/backward of `micro_batch` windows keeps: 17 floats per token,
    layer and hidden unit, a transformer block's saved tensors without the attention scores (fused attention does
    not keep them) and without the logits (the loss is chunked, pit/core/loss.py). A floor, so that nothing that
    fits is refused (measured on the 1.17B-shaped scratch model, 1 x 1024 tokens: 4.5 GB floor, 13 GB peak)."""
    layers, d = config.num_hidden_layers, config.hidden_size
    return layers * ACTIVATION_FLOATS_PER_TOKEN_LAYER * micro_batch * seq_len * d * bytes_per_float


def available_bytes(device: torch.device) -> int | None:
    """Memory the run can still take: free CUDA memory, or the host's MemAvailable (None where unknown)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        line = next(x for x in open("/proc/meminfo").read().splitlines() if x.startswith("MemAvailable:"))  # noqa: SIM115
    except (OSError, StopIteration):
        return None
    return int(line.split()[1]) * 1024


def check_activation_memory(config, micro_batch: int, seq_len: int, device: torch.device) -> None:
    """Refuse, in one line before the first step, a micro-batch whose activations cannot fit: more than the memory
    available even by the floor of `activation_bytes` (the OOM killer would end the process without a word)."""
    need, have = activation_bytes(config, micro_batch, seq_len), available_bytes(device)
    if have is not None and need > have:
        raise PitError(
            f"micro_batch_size {micro_batch} x seq_len {seq_len} needs at least {need / 2**30:.1f} GiB of activations "
            f"on {device.type}; {have / 2**30:.1f} GiB are available: lower micro_batch_size (gradient accumulation "
            "keeps global_batch_tokens)"
        )
