"""Device helpers shared by the A5 kernels.

Every helper is ``inline="always"``: it is inlined into the kernel's IR, policy constants fold, and
the kernels compile (``numba.cuda.compile_ptx``) without a GPU present. Kernel factories close over
integers only (never over functions), so Numba's on-disk cache key is the same in every process.
"""
from __future__ import annotations

import numba
from numba import cuda

from simt_pto.kernels.softfloat import _add_bits as add_bits

NATIVE = 0
"""Element arithmetic the hardware atomics do directly (int32, uint32, float32 add)."""
F16 = 1
"""float16 atomicAdd: a 32-bit CAS loop on the word holding the element."""
BF16 = 2
"""bfloat16 atomicAdd: likewise."""
F32_ORDER = 3
"""float32 atomicMax / atomicMin: integer atomics on the table viewed as (int32, uint32)."""


@cuda.jit(device=True, inline="always")
def tile_offset_2d(r, c, row_stride, col_stride):
    """UB offset of ``(r, c)`` in a RowMajor ``(Cols, 1)`` or ColMajor ``(1, Rows)`` tile."""
    return r * row_stride + c * col_stride


@cuda.jit(device=True, inline="always")
def copy_row_segment(dst, dst_base, dst_cs, src, src_base, src_cs, c, stop, step):
    """``dst[dst_base + j * dst_cs] = src[src_base + j * src_cs]`` for ``j = c, c + step, ... < stop``:
    one lane's share of a row copy, in the lane order of the Row kernels.

    Loads are issued four (then two) ahead of their stores. The destination and the source never overlap
    (UB and GM, or two GM arrays), but the compiler cannot know that: written one element at a time, every
    store waits for its load and a lane keeps a single load in flight, which caps a wide-row copy well
    below the memory bandwidth."""
    while c + 3 * step < stop:
        v0 = src[src_base + c * src_cs]
        v1 = src[src_base + (c + step) * src_cs]
        v2 = src[src_base + (c + 2 * step) * src_cs]
        v3 = src[src_base + (c + 3 * step) * src_cs]
        dst[dst_base + c * dst_cs] = v0
        dst[dst_base + (c + step) * dst_cs] = v1
        dst[dst_base + (c + 2 * step) * dst_cs] = v2
        dst[dst_base + (c + 3 * step) * dst_cs] = v3
        c += 4 * step
    if c + step < stop:
        v0 = src[src_base + c * src_cs]
        v1 = src[src_base + (c + step) * src_cs]
        dst[dst_base + c * dst_cs] = v0
        dst[dst_base + (c + step) * dst_cs] = v1
        c += 2 * step
    if c < stop:
        dst[dst_base + c * dst_cs] = src[src_base + c * src_cs]


@cuda.jit(device=True, inline="always")
def atomic_add_half(words, e, v_bits, exp_bits, man_bits):
    """``table[e] += v`` for a 16-bit float (``exp_bits`` / ``man_bits`` fields) held in a uint32 view of
    the table, rounded in the element type (round-to-nearest-even), as a compare-and-swap loop on the
    aligned 32-bit word. The format is passed as field widths so one adder is inlined, not two."""
    w = e >> 1
    shift = (e & 1) * 16
    old = numba.int64(words[w])
    while True:
        cur = (old >> shift) & 0xFFFF
        res = add_bits(cur, numba.int64(v_bits), exp_bits, man_bits)
        new = (old & ~(numba.int64(0xFFFF) << shift)) | (res << shift)
        prev = numba.int64(cuda.atomic.cas(words, w, numba.uint32(old), numba.uint32(new)))
        if prev == old:
            return
        old = prev


# -- the store of one scatter element ------------------------------------------------------------------

@cuda.jit(device=True, inline="always")
def store_max_f32(views, e, v_bits):
    """ScatterAtomicOp MAX on float32 with integer atomics (``views`` = the table as (int32, uint32),
    ``v_bits`` the value's int32 bits): IEEE floats order like sign-magnitude integers, so a
    non-negative value is an ``atomicMax`` on int32 and a negative one an ``atomicMin`` on uint32.
    (-0.0 orders below +0.0; a NaN with the sign clear wins, one with it set loses.)"""
    if v_bits >= 0:
        cuda.atomic.max(views[0], e, v_bits)
    else:
        cuda.atomic.min(views[1], e, numba.uint32(v_bits))


@cuda.jit(device=True, inline="always")
def store_min_f32(views, e, v_bits):
    """ScatterAtomicOp MIN on float32: ``atomicMin`` on int32 for non-negative values, ``atomicMax``
    on uint32 for negative ones (see :func:`store_max_f32`)."""
    if v_bits >= 0:
        cuda.atomic.min(views[0], e, v_bits)
    else:
        cuda.atomic.max(views[1], e, numba.uint32(v_bits))
