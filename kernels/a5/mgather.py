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

from simt_pto.enums import IndexRule
from simt_pto.geometry import WARP
from simt_pto.kernels.index_policy import remap_index
from .device import dense_tile, gather_elems, gather_row, rows_ahead, span_end, streams_rows, walk_elems, walk_rows
from .intrinsics import SPAN_LANES, block_range, first_lane, store_fence, warp_range


@functools.cache
def simt_mgather_row_kernel(rule: IndexRule):
    """Row coalesce, ``dst[r, :] = table[remap(idx[r]), :]``.

    The Row walk (:func:`.device.walk_rows`): warp ``ty`` owns rows ``ty % kRowWarps, + kRowWarps, ...`` and
    column segment ``ty // kRowWarps``; lanes walk columns ``seg * 32 + tx`` in steps of ``kWarpsPerRow * 32``,
    so a warp reads 32 consecutive elements of one table row (one 128 B burst for 4-byte elements). The table is
    packed ND with row stride ``validCols``. Out-of-range rows under Zero are filled with ``T(0)`` inline
    (:func:`.device.gather_row`). On the CPU a large destination is written around the caches
    (:func:`.device.streams_rows`), and the thread's streamed stores are fenced before it hands its blocks back.
    """

    def simt_mgather_row_kernel(launch, dst, dst_rs, dst_cs, idx, idx_step, table, table_rows,
                                valid_rows, valid_cols, tile_rows, row_warps, warps_per_row):
        streams = streams_rows(dst, dst_cs, warps_per_row)
        ahead = rows_ahead(valid_cols, table.itemsize)
        walk_rows(launch, tile_rows, valid_rows, row_warps, warps_per_row, gather_row,
                  (dst, dst_rs, dst_cs, idx, idx_step, table, table_rows, valid_cols, rule, streams, ahead), None)
        if streams:
            store_fence()

    return simt_mgather_row_kernel


@functools.cache
def simt_mgather_elem_kernel(rule: IndexRule):
    """Elem coalesce, ``dst[i, j] = table[remap(idx[i, j])]``.

    Thread ``tid = ty * 32 + tx`` walks flat positions ``tid, tid + launchThreads, ...`` of the
    ``validRows x validCols`` region (warps in lock-step); ``tid >= total`` idles. UB reads and writes go through
    ``tile_offset_2d``, so either tile may be RowMajor or ColMajor. A warp's lanes take consecutive
    positions: a CPU span divides ``(r, c)`` out once and walks from there, or, where both tiles are
    dense, runs the span as one affine loop (the Elem walk, :func:`.device.walk_elems`, and
    :func:`.device.gather_elems`).
    """

    def simt_mgather_elem_kernel(launch, dst, dst_rs, dst_cs, idx, idx_rs, idx_cs, table, table_size,
                                 valid_rows, valid_cols, tile_rows):
        # (every dense tile the planners make has column stride 1; a strided one would walk)
        dense = (dst_cs == 1 and idx_cs == 1 and dense_tile(dst_rs, dst_cs, valid_cols)
                 and dense_tile(idx_rs, idx_cs, valid_cols))
        walk_elems(launch, tile_rows, valid_rows, valid_cols, gather_elems,
                   (dst, dst_rs, dst_cs, idx, idx_rs, idx_cs, table, table_size, valid_cols, dense, rule), None)

    return simt_mgather_elem_kernel


# -- GM -> L1 (TileType::Mat NZ destination), GatherExec::Simt ----------------------------------------------
# MGATHER.md, "GM → L1 Gather". The cube core (AIC) has two executors: ``Scalar`` (Row and Elem) walks the GM
# indices itself (simt_pto.kernels.cube_l1_walk, shared with A2/A3's scalar pipe); ``Simt`` (Elem only) runs
# the kernel below on the AIV (GM -> GM scratch, NZ), then the AIC copies the scratch onto the L1 tile
# (simt_pto.host.a5_planner.mgather_l1_launches chooses and sequences them).

@functools.cache
def simt_mgather_l1_elem_kernel(rule: IndexRule):
    """GM -> L1 Elem, ``GatherExec::Simt`` (MGATHER.md, "A5 only — SIMT executor for Elem GM → L1"):
    the AIV's GM -> GM stage, ``scratch[off] = table[remap(idx[r, c])]`` over the whole padded NZ tile.

    Thread ``tid = ty * 32 + tx`` walks linear NZ offsets ``off = tid, tid + launchThreads, ...`` of the
    ``Rows * Cols`` scratch and maps each back to ``(r, c)``::

        blockCol = off // (Rows * kC0);  r = (off % (Rows * kC0)) // kC0;  c = blockCol * kC0 + off % kC0

    Lanes with ``r < validRows``, ``c < validCols`` and an in-range index store the table element;
    padding and Zero-policy lanes store ``T(0)``: one pass, no separate pre-zero. Consecutive lanes
    store consecutive offsets (coalesced GM bursts); the index is read at ``r * idxRowStride + c``.
    """

    def simt_mgather_l1_elem_kernel(launch, scratch, table, idx, idx_rs, valid_rows, valid_cols, table_size,
                                    tile_rows, tile_elems, kc0):
        lane0 = first_lane()
        lanes = SPAN_LANES
        threads = launch[3] * WARP
        block_span = tile_rows * kc0
        for _b in block_range(launch):
            for ty in warp_range(launch):
                first = ty * WARP + lane0
                while first < tile_elems:
                    for off in range(first, span_end(first, lanes, tile_elems)):
                        block_col = off // block_span
                        rem = off - block_col * block_span
                        r = rem // kc0
                        c = block_col * kc0 + (rem - r * kc0)
                        if r < valid_rows and c < valid_cols:
                            slot, in_range = remap_index(idx[r * idx_rs + c], table_size, rule)
                            if in_range:
                                scratch[off] = table[slot]
                            else:
                                scratch[off] = 0
                        else:
                            scratch[off] = 0
                    first += threads

    return simt_mgather_l1_elem_kernel
