"""The CPU output cache: where customop ops get the memory of their large CPU outputs.

glibc maps an allocation of 32 MiB or more fresh and unmaps it on free, so an op called in a
loop pays a page fault per 4 KiB of its output on every call (a 256 MiB float32 output: about
65,000 faults, several times the kernel's own time). customop keeps the freed blocks of its
ops' outputs of 1 MiB or more for the next request of about their size (at most 1/8 larger),
as PyTorch's CUDA caching allocator does on the GPU. ATen's own allocations are untouched.

The cache keeps at most a limit of idle memory (owned by no tensor), per process:
`CUSTOMOP_CPU_CACHE_BYTES` from the environment as the cache is first used (bytes, digits only;
0 turns the cache off), else 1 GiB or 1/16 of physical memory, whichever is smaller. A freed
block that fits stays; to make room the largest other idle blocks go first. ATen's allocations
do not draw on idle blocks: after an out-of-memory error elsewhere, release() gives them back.

    import customop
    customop.cpu_cache.stats()        # {'limit_bytes': ..., 'idle_bytes': ..., ...}
    customop.cpu_cache.release()      # unmap every idle block; returns the bytes given back
    customop.cpu_cache.set_limit(0)   # off from now on; returns the previous limit
"""

from __future__ import annotations

import operator

import torch

_MAX_LIMIT = (1 << 63) - 1
_FIELDS = ("limit_bytes", "idle_bytes", "idle_blocks", "live_bytes", "hits", "misses")


def stats() -> dict[str, int]:
    """The cache's counters: `limit_bytes` (most idle memory kept; 0: off), `idle_bytes` and
    `idle_blocks` (held for reuse, owned by no tensor), `live_bytes` (cache blocks tensors own
    now), `hits` (requests served from an idle block) and `misses` (requests of 1 MiB or more
    that mapped a new block), all since the library loaded."""
    return dict(zip(_FIELDS, torch.ops.customop_registry.cpu_cache_stats()))


def release() -> int:
    """Unmaps every idle block and returns the bytes given back to the OS. Tensors keep
    their memory."""
    return int(torch.ops.customop_registry.cpu_cache_release())


def set_limit(limit_bytes: int) -> int:
    """Sets the most idle memory the cache keeps, in bytes (0 turns it off and releases every
    idle block), and returns the previous limit. Idle blocks over the new limit are unmapped
    now. Raises ValueError for a limit below 0 or above 2**63 - 1, TypeError for a non-integer
    (an integer-like value such as numpy.int64 is taken)."""
    if isinstance(limit_bytes, bool):
        raise TypeError("customop.cpu_cache.set_limit: limit_bytes must be an int (bytes), but "
                        "got bool")
    try:
        limit = operator.index(limit_bytes)
    except TypeError:
        raise TypeError("customop.cpu_cache.set_limit: limit_bytes must be an int (bytes), but "
                        f"got {type(limit_bytes).__name__}") from None
    if not 0 <= limit <= _MAX_LIMIT:
        raise ValueError(
            "customop.cpu_cache.set_limit: limit_bytes must be >= 0 and <= 2**63 - 1 (0 turns "
            f"the cache off), but got {limit}"
        )
    return int(torch.ops.customop_registry.cpu_cache_set_limit(limit))
