"""MGATHER on A5: the SIMT kernels of MGATHER.md ("A5 Form", "Performance Considerations — A5").

Each factory returns the compiled kernel for one GatherOOB rule (the ISA's ``if constexpr``), cached
per rule; Numba's dispatcher then specialises it per element width. Kernels move raw bits (uint8 /
uint16 / uint32 views), as the hardware does.

One block is one tile, ``dim3(32, kLaunchWarps)`` (:mod:`simt_pto.geometry`); block ``b`` of a
multi-block launch takes rows ``[b * tile_rows, ...)`` of the destination, so the large-shape path
runs the same kernels one tile per block.
"""
from __future__ import annotations

import functools

from numba import cuda

from simt_pto.kernels.index_policy import remap_index
from .device import copy_row_segment, tile_offset_2d


@functools.cache
def simt_mgather_row_kernel(rule: int):
    """Row coalesce, ``dst[r, :] = table[remap(idx[r]), :]``.

    Warp ``ty`` owns rows ``ty % kRowWarps, + kRowWarps, ...`` and column segment ``ty // kRowWarps``;
    lanes walk columns ``seg * 32 + tx`` in steps of ``kWarpsPerRow * 32``, so a warp reads 32
    consecutive elements of one table row (one 128 B burst for 4-byte elements). The table is packed
    ND with row stride ``validCols``. Out-of-range rows under Zero are filled with ``T(0)`` inline.
    """

    @cuda.jit(cache=True)
    def simt_mgather_row_kernel(dst, dst_rs, dst_cs, idx, idx_step, table, table_rows,
                                valid_rows, valid_cols, tile_rows, row_warps, warps_per_row):
        row0 = cuda.blockIdx.x * tile_rows
        rows = min(tile_rows, valid_rows - row0)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        col_begin = (ty // row_warps) * 32 + tx
        col_step = warps_per_row * 32
        r = ty % row_warps
        while r < rows:
            gr = row0 + r
            slot, in_range = remap_index(idx[gr * idx_step], table_rows, rule)
            c = col_begin
            if in_range:
                copy_row_segment(dst, gr * dst_rs, dst_cs, table, slot * valid_cols, 1, c, valid_cols, col_step)
            else:
                while c < valid_cols:
                    dst[tile_offset_2d(gr, c, dst_rs, dst_cs)] = 0
                    c += col_step
            r += row_warps

    return simt_mgather_row_kernel


@functools.cache
def simt_mgather_elem_kernel(rule: int):
    """Elem coalesce, ``dst[i, j] = table[remap(idx[i, j])]``.

    Thread ``tid = ty * 32 + tx`` walks flat positions ``tid, tid + launchThreads, ...`` of the
    ``validRows x validCols`` region; ``tid >= total`` idles. UB reads and writes go through
    ``tile_offset_2d``, so either tile may be RowMajor or ColMajor.
    """

    @cuda.jit(cache=True)
    def simt_mgather_elem_kernel(dst, dst_rs, dst_cs, idx, idx_rs, idx_cs, table, table_size,
                                 valid_rows, valid_cols, tile_rows):
        row0 = cuda.blockIdx.x * tile_rows
        total = min(tile_rows, valid_rows - row0) * valid_cols
        p = cuda.threadIdx.y * 32 + cuda.threadIdx.x
        step = cuda.blockDim.x * cuda.blockDim.y
        while p < total:
            r = row0 + p // valid_cols
            c = p % valid_cols
            slot, in_range = remap_index(idx[tile_offset_2d(r, c, idx_rs, idx_cs)], table_size, rule)
            if in_range:
                dst[tile_offset_2d(r, c, dst_rs, dst_cs)] = table[slot]
            else:
                dst[tile_offset_2d(r, c, dst_rs, dst_cs)] = 0
            p += step

    return simt_mgather_elem_kernel
