"""Device helpers shared by the A5 kernels, written once for every backend.

Like the kernels, these are plain Python over the intrinsics of :mod:`.intrinsics`; :mod:`.simt` binds a
copy of each per backend (``cuda.jit(device=True, inline="always")`` or ``njit(inline="always")``), so
they are inlined into the kernel's IR and the policy constants fold. Kernel factories close over integers
only (never over functions), so Numba's on-disk cache key is the same in every process.
"""
from __future__ import annotations

import numba

from simt_pto.geometry import WARP
from simt_pto.kernels.index_policy import remap_index
from simt_pto.kernels.softfloat import add_bits
from .intrinsics import atomic_cas, copy_run, prefetch


def block_tile(b, tile_rows, valid_rows):
    """``(row0, rows)`` of block ``b``'s tile: rows ``[b * tile_rows, row0 + rows)`` of the ``valid_rows`` (the
    kernels' multi-block form: block ``b`` runs tile ``b``)."""
    row0 = b * tile_rows
    return row0, min(tile_rows, valid_rows - row0)


def warp_row(base, ty, row_warps):
    """The Row kernels' warp mapping, rows: in the row group from ``base``, warp ``ty`` takes tile row
    ``base + ty % kRowWarps`` (and column segment ``ty // kRowWarps``: :func:`warp_column`)."""
    return base + ty % row_warps


def warp_column(ty, row_warps, lane0):
    """The Row kernels' warp mapping, columns: the first column of lane ``lane0`` of warp ``ty``, in its column
    segment ``ty // kRowWarps``: ``(ty // kRowWarps) * 32 + lane0`` (computed once the row is known to be valid)."""
    return (ty // row_warps) * WARP + lane0


def grid_stride(launch, b, ty, lane0):
    """A flat grid-stride walk: ``(first item, stride)`` of thread ``g = b * threads + ty * 32 + lane0``, which takes
    items ``g, g + grid threads, ...`` (``threads = kLaunchWarps * 32`` per block)."""
    threads = launch[3] * WARP
    return b * threads + ty * WARP + lane0, threads * launch[2]


def span_end(first, lanes, stop):
    """End of the span of ``lanes`` consecutive items from ``first`` (``first < stop``), clipped to ``stop``.
    One GPU lane's span is ``first`` alone: written so, the CUDA code stays a straight line."""
    if lanes == 1:
        return first + 1
    return min(first + lanes, stop)


def next_position(r, c, cols, lanes):
    """The position after ``(r, c)`` in a row-major walk of a region ``cols`` wide (the next lane of a span).
    A GPU lane's span has one position, so it never steps: written so, the CUDA code keeps no walk and a
    CPU span divides a flat position into ``(r, c)`` once, not per element."""
    if lanes == 1:
        return r, c
    c += 1
    if c == cols:
        return r + 1, 0
    return r, c


def tile_offset_2d(r, c, row_stride, col_stride):
    """UB offset of ``(r, c)`` in a RowMajor ``(Cols, 1)`` or ColMajor ``(1, Rows)`` tile."""
    return r * row_stride + c * col_stride


def copy_row_segment(dst, dst_base, dst_cs, src, src_base, src_cs, c, stop, step, lanes):
    """``dst[dst_base + j * dst_cs] = src[src_base + j * src_cs]`` for the columns ``j`` of one warp's lanes
    in the lane order of the Row kernels: ``j = c + k * step + lane`` for ``lane < lanes``, ``j < stop``
    (``c`` is the first lane's column, ``lanes`` from ``lane_span``).

    One GPU lane (``lanes == 1``) issues its loads four (then two) ahead of their stores. The destination and
    the source never overlap (UB and GM, or two GM arrays), but the compiler cannot know that: written one
    element at a time, every store waits for its load and a lane keeps a single load in flight, which caps a
    wide-row copy well below the memory bandwidth. A CPU warp (``lanes == 32``) copies each step's 32
    columns as one contiguous run."""
    if lanes == 1:
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
    elif step == lanes and dst_cs == 1 and src_cs == 1:
        # a CPU warp that owns whole rows (kWarpsPerRow == 1): its columns are one contiguous run
        if c < stop:
            copy_run(dst, dst_base + c, src, src_base + c, stop - c)
    else:
        while c < stop:
            for j in range(c, span_end(c, lanes, stop)):
                dst[dst_base + j * dst_cs] = src[src_base + j * src_cs]
            c += step


ROWS_AHEAD = 8
"""A CPU warp prefetches the table row this many rows ahead of the one it copies."""


def prefetch_row_ahead(table, idx, idx_step, gr, last_row, table_rows, valid_cols, rule, lanes):
    """On the CPU (a warp's span, ``lanes > 1``), prefetch the table row that destination row
    ``gr + ROWS_AHEAD`` will read (one prefetch per 64-byte line): random row reads are latency-bound, and
    the hardware prefetcher cannot guess the next row. A GPU lane does nothing."""
    if lanes > 1 and gr + ROWS_AHEAD <= last_row:
        slot, in_range = remap_index(idx[(gr + ROWS_AHEAD) * idx_step], table_rows, rule)
        if in_range:
            for k in range(0, valid_cols, max(1, 64 // table.itemsize)):
                prefetch(table, slot * valid_cols + k)


def fill_row_segment(dst, dst_base, dst_cs, c, stop, step, lanes):
    """``dst[dst_base + j * dst_cs] = 0`` over the columns of :func:`copy_row_segment`."""
    while c < stop:
        for j in range(c, span_end(c, lanes, stop)):
            dst[dst_base + j * dst_cs] = 0
        c += step


def cas_add_half(words, w, shift, v_bits, exp_bits, man_bits):
    """``words[w]``'s 16-bit half at ``shift`` += ``v``, rounded in the element type (round-to-nearest-even), as a
    compare-and-swap loop on the 32-bit word."""
    old = numba.int64(words[w])
    while True:
        cur = (old >> shift) & 0xFFFF
        res = add_bits(cur, numba.int64(v_bits), exp_bits, man_bits)
        new = (old & ~(numba.int64(0xFFFF) << shift)) | (res << shift)
        prev = numba.int64(atomic_cas(words, w, numba.uint32(old), numba.uint32(new)))
        if prev == old:
            return
        old = prev


def atomic_add_half(words, e, v_bits, exp_bits, man_bits):
    """``table[e] += v`` for a 16-bit float (``exp_bits`` / ``man_bits`` fields) held in a uint32 view of
    the table, rounded in the element type (round-to-nearest-even), as a compare-and-swap loop on the
    aligned 32-bit word (:func:`cas_add_half`). The format is passed as field widths so one adder is inlined,
    not two. For a table that starts on a 4-byte boundary and holds an even number of elements (formats F16 /
    BF16); otherwise :func:`atomic_add_half_edge`."""
    cas_add_half(words, e >> 1, (e & 1) * 16, v_bits, exp_bits, man_bits)


def atomic_add_half_edge(table, e, v_bits, exp_bits, man_bits):
    """:func:`atomic_add_half` for a table that starts or ends mid-word (formats F16_EDGE / BF16_EDGE).

    ``table`` is ``(words, edge, head)`` (``host/a5.BoundaryWords``): bit 0 of ``head`` is set when element 0 is
    the high half of its word, bit 1 when that first word is staged (``words`` then starts one word later).
    Element ``e`` is half ``(e + (head & 1)) & 1`` of word ``((e + (head & 1)) >> 1) - (head >> 1)`` of
    ``words``; a word past either end of ``words`` (one the tensor covers only in part and whose other half lies
    outside its allocation) is ``edge[0]`` / ``edge[1]``, a staging copy, so that no CAS touches a byte outside
    the allocation. The CAS runs on the word's array chosen here, so the compiler sees a generic pointer
    (``atom.cas``, not ``atom.global.cas``): one adder inlined, and the common formats keep theirs."""
    words, edge, head = table
    p = e + (head & 1)
    w = (p >> 1) - (head >> 1)
    cell = words
    if w < 0:
        cell = edge
        w = 0
    elif w >= words.size:
        cell = edge
        w = 1
    cas_add_half(cell, w, (p & 1) * 16, v_bits, exp_bits, man_bits)


def gather_element(dst, dst_offset, raw_index, table, table_size, rule):
    """One Elem gather element: ``dst[dst_offset] = table[remap(raw_index)]``, or ``T(0)`` when the remap
    masks it (GatherOOB::Zero)."""
    slot, in_range = remap_index(raw_index, table_size, rule)
    if in_range:
        dst[dst_offset] = table[slot]
    else:
        dst[dst_offset] = 0


def dense_tile(row_stride, col_stride, cols):
    """True when a tile's valid region is one dense run (``row_stride == cols * col_stride``): flat position
    ``q`` of the region is then at offset ``q * col_stride``, so a CPU span walks it as an affine loop the
    compiler vectorises."""
    return row_stride == cols * col_stride


def region_offset(flat, r, c, row_stride, col_stride, dense):
    """Offset of the region position ``(r, c)`` (flat index ``flat``) in a tile: ``flat * col_stride`` for a
    dense tile (:func:`dense_tile`, CPU spans only), else ``tile_offset_2d``. ``dense`` is loop-invariant, so
    the compiler splits a span loop into a dense (affine, vectorisable) and a walking copy."""
    if dense:
        return flat * col_stride
    return r * row_stride + c * col_stride


HELPERS = (block_tile, warp_row, warp_column, grid_stride, span_end, next_position, tile_offset_2d, dense_tile, region_offset,
           copy_row_segment, fill_row_segment, prefetch_row_ahead, gather_element, cas_add_half, atomic_add_half, atomic_add_half_edge)
"""Bound per backend by :mod:`.simt`, in this order (a helper may call the ones before it)."""
