"""MSCATTER on A5: the SIMT kernels of MSCATTER.md ("A5 Form", "Conflict Resolution",
"Performance Considerations — A5").

* ``simt_mscatter_row_kernel`` / ``simt_mscatter_elem_kernel``: the source-centric walks of the
  gather kernels, storing with a plain racing store (Conflict::Default) or a hardware atomic.
* ``simt_mscatter_row_last_kernel`` / ``simt_mscatter_elem_last_kernel``: Conflict::Last, sized by
  the destination. Each thread owns one destination slot at a time and scans the index tile in
  reverse for the largest flat source index that writes it (after the OOB remap; masked writers
  never win), stopping at the first hit. No atomics, no read-back: deterministic by construction,
  and every slot has exactly one writer, so a launch may spread slots over several blocks.

Factories take the index rule, the ScatterAtomicOp value and the element format
(:mod:`simt_pto.kernels.store`) as compile-time constants and return the kernel as plain Python over the intrinsics of
:mod:`.intrinsics` (compiled per backend by :mod:`.simt`). ``launch`` is ``(block_lo, block_hi, grid,
kLaunchWarps)``; a warp's lanes run as the span ``lane_span()`` returns (one lane on CUDA, 32 on the CPU).
"""
from __future__ import annotations

import functools

from simt_pto.geometry import WARP
from simt_pto.kernels.index_policy import remap_index
from simt_pto.kernels.store import BF16, BF16_EDGE, F16, F16_EDGE, F32_ORDER, STORE, store_element
from .device import (block_tile, copy_row_segment, dense_tile, grid_stride, next_position, region_offset, span_end,
                     tile_offset_2d, warp_column, warp_row)
from .intrinsics import atomic_max, block_range, lane_span, prefetch, warp_range


@functools.cache
def simt_mscatter_row_kernel(rule: int, atomic: int, fmt: int):
    """Row coalesce, ``table[remap(idx[r]), :] op= src[r, :]``; the walk of ``simt_mgather_row_kernel``.
    Masked (Skip) rows issue no store; the predicate is per row, so it is warp-uniform."""

    def simt_mscatter_row_kernel(launch, table, src, src_rs, src_cs, idx, idx_step, table_rows,
                                 valid_rows, valid_cols, tile_rows, row_warps, warps_per_row):
        store_policy = (atomic, fmt)  # noqa: F841  (the closure holds the policy: Numba's cache key, store_element)
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
                    slot, in_range = remap_index(idx[gr * idx_step], table_rows, rule)
                    if in_range:
                        dst_row = slot * valid_cols
                        c = col_begin
                        while c < valid_cols:
                            for j in range(c, span_end(c, lanes, valid_cols)):
                                e = dst_row + j
                                v = src[tile_offset_2d(gr, j, src_rs, src_cs)]
                                store_element(table, e, v)
                            c += col_step

    return simt_mscatter_row_kernel


@functools.cache
def simt_mscatter_elem_kernel(rule: int, atomic: int, fmt: int):
    """Elem coalesce, ``table[remap(idx[i, j])] op= src[i, j]``; the walk of ``simt_mgather_elem_kernel``.

    With an atomic and a span of lanes (the CPU), the next span's destination slots are prefetched while this
    span's atomics run: a locked read-modify-write waits for its own cache miss, a prefetch does not."""

    def simt_mscatter_elem_kernel(launch, table, src, src_rs, src_cs, idx, idx_rs, idx_cs, table_size,
                                  valid_rows, valid_cols, tile_rows):
        lane0, lanes = lane_span()
        threads = launch[3] * WARP
        dense = lanes > 1 and dense_tile(src_rs, src_cs, valid_cols) and dense_tile(idx_rs, idx_cs, valid_cols)
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
                    r0 = row0 + p // valid_cols
                    c0 = p % valid_cols
                    if atomic != STORE and lanes > 1 and end < total:
                        # a locked read-modify-write waits for its own cache miss, a prefetch does not: touch the
                        # next span's slots while this one's atomics run
                        ahead = span_end(end, lanes, total)
                        r = row0 + end // valid_cols
                        c = end % valid_cols
                        for q in range(base + end, base + ahead):
                            slot, in_range = remap_index(idx[region_offset(q, r, c, idx_rs, idx_cs, dense)],
                                                         table_size, rule)
                            if in_range:
                                if fmt == F32_ORDER:
                                    prefetch(table[0], slot)
                                elif fmt == F16 or fmt == BF16:
                                    prefetch(table, slot >> 1)
                                elif fmt == F16_EDGE or fmt == BF16_EDGE:
                                    prefetch(table[0], slot >> 1)  # a hint: the element's word, give or take the head
                                else:
                                    prefetch(table, slot)
                            r, c = next_position(r, c, valid_cols, lanes)
                    r = r0
                    c = c0
                    for q in range(base + p, base + end):
                        slot, in_range = remap_index(idx[region_offset(q, r, c, idx_rs, idx_cs, dense)], table_size,
                                                     rule)
                        if in_range:
                            v = src[region_offset(q, r, c, src_rs, src_cs, dense)]
                            store_element(table, slot, v)
                        r, c = next_position(r, c, valid_cols, lanes)

    return simt_mscatter_elem_kernel


@functools.cache
def simt_mscatter_row_last_kernel(rule: int):
    """Row, Conflict::Last (``last_owner_find_row``): the thread owning table row ``slot`` finds the
    largest ``r`` with ``remap(idx[r]) == slot`` and copies ``src[r, :]`` into it."""

    def simt_mscatter_row_last_kernel(launch, table, src, src_rs, src_cs, idx, idx_step, table_rows,
                                      valid_rows, valid_cols):
        lane0, lanes = lane_span()
        for b in block_range(launch):
            for ty in warp_range(launch):
                first, step = grid_stride(launch, b, ty, lane0)
                while first < table_rows:
                    for slot in range(first, span_end(first, lanes, table_rows)):
                        owner = valid_rows - 1
                        while owner >= 0:
                            s, in_range = remap_index(idx[owner * idx_step], table_rows, rule)
                            if in_range and s == slot:
                                break
                            owner -= 1
                        if owner >= 0:
                            dst_row = slot * valid_cols
                            for c in range(valid_cols):
                                table[dst_row + c] = src[tile_offset_2d(owner, c, src_rs, src_cs)]
                    first += step

    return simt_mscatter_row_last_kernel


@functools.cache
def simt_mscatter_elem_last_kernel(rule: int):
    """Elem, Conflict::Last (``last_owner_find_elem``): the thread owning flat slot ``slot`` finds the
    largest flat ``p = r * validCols + c`` with ``remap(idx[r, c]) == slot`` and stores ``src[r, c]``."""

    def simt_mscatter_elem_last_kernel(launch, table, src, src_rs, src_cs, idx, idx_rs, idx_cs, table_size,
                                       valid_rows, valid_cols):
        lane0, lanes = lane_span()
        total = valid_rows * valid_cols
        for b in block_range(launch):
            for ty in warp_range(launch):
                first, step = grid_stride(launch, b, ty, lane0)
                while first < table_size:
                    for slot in range(first, span_end(first, lanes, table_size)):
                        p = total - 1
                        while p >= 0:
                            r = p // valid_cols
                            c = p % valid_cols
                            s, in_range = remap_index(idx[tile_offset_2d(r, c, idx_rs, idx_cs)], table_size, rule)
                            if in_range and s == slot:
                                table[slot] = src[tile_offset_2d(r, c, src_rs, src_cs)]
                                break
                            p -= 1
                    first += step

    return simt_mscatter_elem_last_kernel


# -- Conflict::Last at scale: the owner-based path (host/large.py) ------------------------------------------
# Pass 0 marks every destination slot unowned (-1) on the device; pass 1 claims each slot for the largest
# flat source index that writes it (an atomic max, after the OOB remap); pass 2 walks the destination and
# writes each owned slot from its owner. Bitwise identical to the slot-centric kernels and to the
# sequential order, in O(sources + slots) work, with no host round trip. The reset and claim passes run
# on a flat grid-stride walk: thread ``g = b * threads + ty * 32 + tx`` takes items ``g, g + grid threads, ...``.

@functools.cache
def simt_mscatter_owner_reset_kernel():
    """``owner[:] = -1`` (no writer), on the device before a claim pass (a flat grid)."""

    def simt_mscatter_owner_reset_kernel(launch, owner):
        lane0, lanes = lane_span()
        for b in block_range(launch):
            for ty in warp_range(launch):
                first, step = grid_stride(launch, b, ty, lane0)
                while first < owner.size:
                    for s in range(first, span_end(first, lanes, owner.size)):
                        owner[s] = -1
                    first += step

    return simt_mscatter_owner_reset_kernel


@functools.cache
def simt_mscatter_row_owner_claim_kernel(rule: int):
    """Row: ``owner[remap(idx[r])] = max(owner[...], r)`` over all source rows (a flat grid)."""

    def simt_mscatter_row_owner_claim_kernel(launch, owner, idx, idx_step, table_rows, valid_rows):
        lane0, lanes = lane_span()
        for b in block_range(launch):
            for ty in warp_range(launch):
                first, step = grid_stride(launch, b, ty, lane0)
                while first < valid_rows:
                    for r in range(first, span_end(first, lanes, valid_rows)):
                        slot, in_range = remap_index(idx[r * idx_step], table_rows, rule)
                        if in_range:
                            atomic_max(owner, slot, r)
                    first += step

    return simt_mscatter_row_owner_claim_kernel


@functools.cache
def simt_mscatter_row_owner_write_kernel():
    """Row: every owned table row takes source row ``owner[slot]``. Block ``b`` covers table rows
    ``[b * tile_rows, ...)`` with the Row geometry: warps own rows, lanes walk columns, as in
    ``simt_mscatter_row_kernel`` (one destination row is one plain row copy, so the caller may move
    it in units wider than the element)."""

    def simt_mscatter_row_owner_write_kernel(launch, table, src, src_rs, src_cs, owner, table_rows, valid_cols,
                                             tile_rows, row_warps, warps_per_row):
        lane0, lanes = lane_span()
        col_step = warps_per_row * WARP
        for b in block_range(launch):
            row0, rows = block_tile(b, tile_rows, table_rows)
            for base in range(0, rows, row_warps):
                for ty in warp_range(launch):
                    r = warp_row(base, ty, row_warps)
                    if r >= rows:
                        continue
                    col_begin = warp_column(ty, row_warps, lane0)
                    slot = row0 + r
                    src_row = owner[slot]
                    if src_row >= 0:
                        copy_row_segment(table, slot * valid_cols, 1, src, src_row * src_rs, src_cs, col_begin,
                                         valid_cols, col_step, lanes)

    return simt_mscatter_row_owner_write_kernel


@functools.cache
def simt_mscatter_elem_owner_claim_kernel(rule: int):
    """Elem: ``owner[remap(idx[p])] = max(owner[...], p)`` over all flat source positions."""

    def simt_mscatter_elem_owner_claim_kernel(launch, owner, idx, idx_rs, idx_cs, table_size, valid_rows,
                                              valid_cols):
        lane0, lanes = lane_span()
        total = valid_rows * valid_cols
        dense = dense_tile(idx_rs, idx_cs, valid_cols)
        for b in block_range(launch):
            for ty in warp_range(launch):
                first, step = grid_stride(launch, b, ty, lane0)
                while first < total:
                    end = span_end(first, lanes, total)
                    if lanes > 1 and dense:
                        # a locked read-modify-write waits for its own miss: touch the span's slots first
                        for p in range(first, end):
                            slot, in_range = remap_index(idx[p * idx_cs], table_size, rule)
                            if in_range:
                                prefetch(owner, slot)
                        for p in range(first, end):
                            slot, in_range = remap_index(idx[p * idx_cs], table_size, rule)
                            if in_range:
                                atomic_max(owner, slot, p)
                    else:
                        r = first // valid_cols
                        c = first % valid_cols
                        for p in range(first, end):
                            slot, in_range = remap_index(idx[tile_offset_2d(r, c, idx_rs, idx_cs)], table_size, rule)
                            if in_range:
                                atomic_max(owner, slot, p)
                            r, c = next_position(r, c, valid_cols, lanes)
                    first += step

    return simt_mscatter_elem_owner_claim_kernel


@functools.cache
def simt_mscatter_elem_owner_write_kernel():
    """Elem: every owned slot takes ``src[owner[slot]]``; a thread per slot, in a flat grid, like the
    slot-centric ``simt_mscatter_elem_last_kernel`` without its scan."""

    def simt_mscatter_elem_owner_write_kernel(launch, table, src, src_rs, src_cs, owner, table_size, valid_cols):
        lane0, lanes = lane_span()
        for b in block_range(launch):
            for ty in warp_range(launch):
                first, step = grid_stride(launch, b, ty, lane0)
                while first < table_size:
                    for s in range(first, span_end(first, lanes, table_size)):
                        p = owner[s]
                        if p >= 0:
                            table[s] = src[tile_offset_2d(p // valid_cols, p % valid_cols, src_rs, src_cs)]
                    first += step

    return simt_mscatter_elem_owner_write_kernel


# -- Conflict::Last at scale, sized by the updates: the compact owner path (host/large_a5.py) ---------------
# For a few updates into a large table, one owner per table slot costs O(slots) memory and time. The host
# remaps the indices with the OOB rule and numbers the distinct slots they reach (``slots``, ascending);
# ``ids[p]`` is the number of update ``p``'s slot, or -1 for an update the rule drops. The owner array then
# has one entry per distinct slot: reset as above, claimed by ``simt_mscatter_compact_owner_claim_kernel``
# (the same atomic max of the flat source position, on ``owner[ids[p]]``), and written by the compact
# write kernels, which walk the ``m`` distinct slots, never the table. O(updates) memory and work.

@functools.cache
def simt_mscatter_compact_owner_claim_kernel():
    """Row and Elem: ``owner[ids[p]] = max(owner[...], p)`` over all flat source positions ``p`` (Row: the
    source row), skipping ``ids[p] < 0`` (a flat grid). The remap happened on the host, so there is no rule."""

    def simt_mscatter_compact_owner_claim_kernel(launch, owner, ids, updates):
        lane0, lanes = lane_span()
        for b in block_range(launch):
            for ty in warp_range(launch):
                first, step = grid_stride(launch, b, ty, lane0)
                while first < updates:
                    for p in range(first, span_end(first, lanes, updates)):
                        k = ids[p]
                        if k >= 0:
                            atomic_max(owner, k, p)
                    first += step

    return simt_mscatter_compact_owner_claim_kernel


@functools.cache
def simt_mscatter_row_compact_owner_write_kernel():
    """Row: distinct slot ``k`` (table row ``slots[k]``) takes source row ``owner[k]``, with the geometry of
    ``simt_mscatter_row_owner_write_kernel`` over the ``distinct`` slots instead of the table rows."""

    def simt_mscatter_row_compact_owner_write_kernel(launch, table, src, src_rs, src_cs, owner, slots, distinct,
                                                     valid_cols, tile_rows, row_warps, warps_per_row):
        lane0, lanes = lane_span()
        col_step = warps_per_row * WARP
        for b in block_range(launch):
            k0, count = block_tile(b, tile_rows, distinct)
            for base in range(0, count, row_warps):
                for ty in warp_range(launch):
                    r = warp_row(base, ty, row_warps)
                    if r >= count:
                        continue
                    col_begin = warp_column(ty, row_warps, lane0)
                    src_row = owner[k0 + r]
                    if src_row >= 0:
                        copy_row_segment(table, slots[k0 + r] * valid_cols, 1, src, src_row * src_rs, src_cs,
                                         col_begin, valid_cols, col_step, lanes)

    return simt_mscatter_row_compact_owner_write_kernel


@functools.cache
def simt_mscatter_elem_compact_owner_write_kernel():
    """Elem: table element ``slots[k]`` takes ``src[owner[k]]`` for each of the ``distinct`` slots (a flat grid)."""

    def simt_mscatter_elem_compact_owner_write_kernel(launch, table, src, src_rs, src_cs, owner, slots, distinct,
                                                      valid_cols):
        lane0, lanes = lane_span()
        for b in block_range(launch):
            for ty in warp_range(launch):
                first, step = grid_stride(launch, b, ty, lane0)
                while first < distinct:
                    for k in range(first, span_end(first, lanes, distinct)):
                        p = owner[k]
                        if p >= 0:
                            table[slots[k]] = src[tile_offset_2d(p // valid_cols, p % valid_cols, src_rs, src_cs)]
                    first += step

    return simt_mscatter_elem_compact_owner_write_kernel
