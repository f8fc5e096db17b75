"""MGATHER on A5: the SIMT kernels of MGATHER.md ("A5 Form", "Performance Considerations — A5").

Each factory returns the kernel for one GatherOOB rule (the ISA's ``if constexpr``) as plain Python over
the intrinsics of :mod:`.intrinsics`, cached per rule; :mod:`.simt` compiles it for the CUDA or the CPU
backend and Numba's dispatcher specialises it per element width. Kernels move raw bits (uint8 / uint16 /
uint32 views), as the hardware does.

One block is one tile, ``dim3(32, kLaunchWarps)`` (:mod:`simt_pto.geometry`); block ``b`` of a
multi-block launch takes rows ``[b * tile_rows, ...)`` of the destination, so the large-shape path
runs the same kernels one tile per block. ``launch`` is ``(block_lo, block_hi, grid, kLaunchWarps)``.
"""
from __future__ import annotations

import functools

from simt_pto.geometry import WARP
from simt_pto.kernels.index_policy import remap_index
from .device import (block_tile, copy_row_segment, dense_tile, fill_row_segment, gather_element, next_position,
                     prefetch_row_ahead, span_end, tile_offset_2d, warp_column, warp_row)
from .intrinsics import block_range, lane_span, warp_range


@functools.cache
def simt_mgather_row_kernel(rule: int):
    """Row coalesce, ``dst[r, :] = table[remap(idx[r]), :]``.

    Warp ``ty`` owns rows ``ty % kRowWarps, + kRowWarps, ...`` and column segment ``ty // kRowWarps``
    (written as a walk over row groups of ``kRowWarps``, so a CPU runs a block's warps in lock-step, as an
    SM interleaves them, and visits the rows in order);
    lanes walk columns ``seg * 32 + tx`` in steps of ``kWarpsPerRow * 32``, so a warp reads 32
    consecutive elements of one table row (one 128 B burst for 4-byte elements). The table is packed
    ND with row stride ``validCols``. Out-of-range rows under Zero are filled with ``T(0)`` inline.
    """

    def simt_mgather_row_kernel(launch, dst, dst_rs, dst_cs, idx, idx_step, table, table_rows,
                                valid_rows, valid_cols, tile_rows, row_warps, warps_per_row):
        lane0, lanes = lane_span()
        col_step = warps_per_row * WARP
        for b in block_range(launch):
            row0, rows = block_tile(b, tile_rows, valid_rows)
            for base in range(0, rows, row_warps):
                for ty in warp_range(launch):
                    r = warp_row(base, ty, row_warps)
                    if r >= rows:
                        continue
                    col_begin = warp_column(ty, row_warps, lane0)
                    gr = row0 + r
                    prefetch_row_ahead(table, idx, idx_step, gr, row0 + rows - 1, table_rows, valid_cols, rule, lanes)
                    slot, in_range = remap_index(idx[gr * idx_step], table_rows, rule)
                    if in_range:
                        copy_row_segment(dst, gr * dst_rs, dst_cs, table, slot * valid_cols, 1, col_begin, valid_cols,
                                         col_step, lanes)
                    else:
                        fill_row_segment(dst, gr * dst_rs, dst_cs, col_begin, valid_cols, col_step, lanes)

    return simt_mgather_row_kernel


@functools.cache
def simt_mgather_elem_kernel(rule: int):
    """Elem coalesce, ``dst[i, j] = table[remap(idx[i, j])]``.

    Thread ``tid = ty * 32 + tx`` walks flat positions ``tid, tid + launchThreads, ...`` of the
    ``validRows x validCols`` region (warps in lock-step); ``tid >= total`` idles. UB reads and writes go through
    ``tile_offset_2d``, so either tile may be RowMajor or ColMajor. A warp's lanes take consecutive
    positions: a CPU span divides ``(r, c)`` out once and walks from there, or, where both tiles are
    dense, runs the span as one affine loop.
    """

    def simt_mgather_elem_kernel(launch, dst, dst_rs, dst_cs, idx, idx_rs, idx_cs, table, table_size,
                                 valid_rows, valid_cols, tile_rows):
        lane0, lanes = lane_span()
        threads = launch[3] * WARP
        dense = dense_tile(dst_rs, dst_cs, valid_cols) and dense_tile(idx_rs, idx_cs, valid_cols)
        for b in block_range(launch):
            row0, tile_valid_rows = block_tile(b, tile_rows, valid_rows)
            total = tile_valid_rows * valid_cols
            base = row0 * valid_cols
            for step in range(0, total, threads):
                for ty in warp_range(launch):
                    p = step + ty * WARP + lane0
                    if p >= total:
                        continue
                    end = span_end(p, lanes, total)
                    if lanes > 1 and dense:
                        for q in range(base + p, base + end):
                            gather_element(dst, q * dst_cs, idx[q * idx_cs], table, table_size, rule)
                    else:
                        r = row0 + p // valid_cols
                        c = p % valid_cols
                        for _ in range(p, end):
                            gather_element(dst, tile_offset_2d(r, c, dst_rs, dst_cs),
                                           idx[tile_offset_2d(r, c, idx_rs, idx_cs)], table, table_size, rule)
                            r, c = next_position(r, c, valid_cols, lanes)

    return simt_mgather_elem_kernel
