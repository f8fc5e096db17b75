"""Index validation on the device, for whole-array ops on device arrays (no host round trip)."""
from __future__ import annotations

import numba
from numba import cuda

from simt_pto.kernels.cache import cuda_jit
from simt_pto.kernels.tuning import SCAN_BLOCK, SCAN_MAX_BLOCKS  # SCAN_BLOCK is also imported from here by host/in_memory.py


def scan_grid(size: int) -> int:
    """Blocks of an index scan (``count_out_of_range``, ``flag_out_of_range``; blocks of ``SCAN_BLOCK`` threads) over
    ``size`` indices: one per ``SCAN_BLOCK``, at most ``SCAN_MAX_BLOCKS`` (the threads then stride;
    :mod:`simt_pto.kernels.tuning`)."""
    return max(1, min(SCAN_MAX_BLOCKS, -(-size // SCAN_BLOCK)))


@cuda_jit(cache=True)
def count_out_of_range(idx, capacity, out):
    """``out[0]`` += the number of uint32-cast indices ``>= capacity``; ``out[1]`` = min(out[1], first position)."""
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < idx.size:
        if numba.int64(numba.uint32(idx[i])) >= capacity:
            cuda.atomic.add(out, 0, 1)
            cuda.atomic.min(out, 1, i)
        i += step


@cuda_jit(cache=True)
def flag_out_of_range(idx, capacity, flag):
    """``flag[0] = 1`` when a uint32-cast index is ``>= capacity`` (a plain store: every writer stores the same value,
    so ``flag`` may live in mapped host memory, where device atomics are not atomic)."""
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < idx.size:
        if numba.int64(numba.uint32(idx[i])) >= capacity:
            flag[0] = 1
        i += step
