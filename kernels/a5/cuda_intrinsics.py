"""The SIMT intrinsics of :mod:`.intrinsics` for CUDA: a GPU, or Numba's CUDA simulator.

Imported only when a CUDA backend is used (it imports ``numba.cuda``). ``cuda`` is a module global here,
as the simulator needs: it swaps a fake ``cuda`` module, with the current thread's indices, into the
globals of every kernel and device function it runs.

On the simulator ``atomic_add`` is a numpy scalar add, which warns (``RuntimeWarning: overflow encountered``)
where the hardware's ``atomicAdd`` silently wraps an integer or rounds a float32 sum to infinity (or NaN, for
inf + -inf). Those results are specified (MSCATTER.md, "Atomic Type Support": A5 Add is the SIMT ``atomicAdd``,
in the element type), so the simulator's add runs with numpy's overflow and invalid-operation warnings off.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import cuda

from simt_pto.backend import cuda_mode


@cuda.jit(device=True, inline="always")
def block_range(launch):
    return range(cuda.blockIdx.x, cuda.blockIdx.x + 1)


@cuda.jit(device=True, inline="always")
def warp_range(launch):
    return range(cuda.threadIdx.y, cuda.threadIdx.y + 1)


@cuda.jit(device=True, inline="always")
def first_lane():
    return numba.int64(cuda.threadIdx.x)


SPAN_LANES = 1  # a CUDA thread is one lane


if cuda_mode() == "simulator":  # read from numba-cuda's own config, as imported
    @cuda.jit(device=True, inline="always")
    def atomic_add(ary, i, v):
        # errstate is per thread, and every simulated CUDA thread is a Python thread of its own
        with np.errstate(over="ignore", invalid="ignore"):
            return cuda.atomic.add(ary, i, v)
else:
    @cuda.jit(device=True, inline="always")
    def atomic_add(ary, i, v):
        return cuda.atomic.add(ary, i, v)


if cuda_mode() == "simulator":
    @cuda.jit(device=True, inline="always")
    def float32_from_bits(bits):
        return np.uint32(bits & 0xFFFFFFFF).view(np.float32)

    @cuda.jit(device=True, inline="always")
    def float32_bits(f):
        return np.int64(np.float32(f).view(np.uint32))

    @cuda.jit(device=True, inline="always")
    def float32_sum(x, y):
        with np.errstate(over="ignore"):  # a bfloat16 sum past float32's range: infinity, as on the GPU
            return np.float32(x) + np.float32(y)
else:
    from numba.cuda import libdevice

    @cuda.jit(device=True, inline="always")
    def float32_from_bits(bits):
        return libdevice.int_as_float(numba.int32(bits))

    @cuda.jit(device=True, inline="always")
    def float32_bits(f):
        return numba.int64(libdevice.float_as_int(f)) & 0xFFFFFFFF

    @cuda.jit(device=True, inline="always")
    def float32_sum(x, y):
        return numba.float32(x) + numba.float32(y)


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
def prefetch_read(ary, i, n):
    pass


@cuda.jit(device=True, inline="always")
def copy_run(dst, dst_start, src, src_start, n):
    for j in range(n):
        dst[dst_start + j] = src[src_start + j]


stream_run = copy_run  # (a GPU lane never streams: lanes == 1, .device.streams_rows)


@cuda.jit(device=True, inline="always")
def store_fence():
    pass
