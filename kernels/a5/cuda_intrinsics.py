"""The SIMT intrinsics of :mod:`.intrinsics` for CUDA: a GPU, or Numba's CUDA simulator.

Imported only when a CUDA backend is used (it imports ``numba.cuda``). ``cuda`` is a module global here,
as the simulator needs: it swaps a fake ``cuda`` module, with the current thread's indices, into the
globals of every kernel and device function it runs.
"""
from __future__ import annotations

import numba
from numba import cuda


@cuda.jit(device=True, inline="always")
def block_range(launch):
    return range(cuda.blockIdx.x, cuda.blockIdx.x + 1)


@cuda.jit(device=True, inline="always")
def warp_range(launch):
    return range(cuda.threadIdx.y, cuda.threadIdx.y + 1)


@cuda.jit(device=True, inline="always")
def lane_span():
    return numba.int64(cuda.threadIdx.x), 1


@cuda.jit(device=True, inline="always")
def atomic_add(ary, i, v):
    return cuda.atomic.add(ary, i, v)


@cuda.jit(device=True, inline="always")
def atomic_max(ary, i, v):
    return cuda.atomic.max(ary, i, v)


@cuda.jit(device=True, inline="always")
def atomic_min(ary, i, v):
    return cuda.atomic.min(ary, i, v)


@cuda.jit(device=True, inline="always")
def atomic_cas(ary, i, old, new):
    return cuda.atomic.cas(ary, i, old, new)


@cuda.jit(device=True, inline="always")
def prefetch(ary, i):
    pass


@cuda.jit(device=True, inline="always")
def copy_run(dst, dst_start, src, src_start, n):
    for j in range(n):
        dst[dst_start + j] = src[src_start + j]
