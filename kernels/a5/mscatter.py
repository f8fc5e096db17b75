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
(:mod:`.device`) as compile-time constants.
"""
from __future__ import annotations

import functools

from numba import cuda

from simt_pto.kernels.index_policy import remap_index
from .device import (BF16, F16, F32_ORDER, atomic_add_half, copy_row_segment, store_max_f32, store_min_f32,
                     tile_offset_2d)


@functools.cache
def simt_mscatter_row_kernel(rule: int, atomic: int, fmt: int):
    """Row coalesce, ``table[remap(idx[r]), :] op= src[r, :]``; the walk of ``simt_mgather_row_kernel``.
    Masked (Skip) rows issue no store; the predicate is per row, so it is warp-uniform."""

    @cuda.jit(cache=True)
    def simt_mscatter_row_kernel(table, src, src_rs, src_cs, idx, idx_step, table_rows,
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
            if in_range:
                dst_row = slot * valid_cols
                c = col_begin
                while c < valid_cols:
                    e = dst_row + c
                    v = src[tile_offset_2d(gr, c, src_rs, src_cs)]
                    # ``atomic`` and ``fmt`` are closure constants: one branch survives. Written out in the
                    # kernel, not a helper: Numba prunes a kernel's own dead branches before it inlines
                    # callees, so only 16-bit float adds carry the soft-float.
                    if atomic == 0:
                        table[e] = v
                    elif fmt == F16:
                        atomic_add_half(table, e, v, 5, 10)
                    elif fmt == BF16:
                        atomic_add_half(table, e, v, 8, 7)
                    elif fmt == F32_ORDER:
                        if atomic == 2:
                            store_max_f32(table, e, v)
                        else:
                            store_min_f32(table, e, v)
                    elif atomic == 1:
                        cuda.atomic.add(table, e, v)
                    elif atomic == 2:
                        cuda.atomic.max(table, e, v)
                    else:
                        cuda.atomic.min(table, e, v)
                    c += col_step
            r += row_warps

    return simt_mscatter_row_kernel


@functools.cache
def simt_mscatter_elem_kernel(rule: int, atomic: int, fmt: int):
    """Elem coalesce, ``table[remap(idx[i, j])] op= src[i, j]``; the walk of ``simt_mgather_elem_kernel``."""

    @cuda.jit(cache=True)
    def simt_mscatter_elem_kernel(table, src, src_rs, src_cs, idx, idx_rs, idx_cs, table_size,
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
                v = src[tile_offset_2d(r, c, src_rs, src_cs)]
                # One branch survives (see simt_mscatter_row_kernel).
                if atomic == 0:
                    table[slot] = v
                elif fmt == F16:
                    atomic_add_half(table, slot, v, 5, 10)
                elif fmt == BF16:
                    atomic_add_half(table, slot, v, 8, 7)
                elif fmt == F32_ORDER:
                    if atomic == 2:
                        store_max_f32(table, slot, v)
                    else:
                        store_min_f32(table, slot, v)
                elif atomic == 1:
                    cuda.atomic.add(table, slot, v)
                elif atomic == 2:
                    cuda.atomic.max(table, slot, v)
                else:
                    cuda.atomic.min(table, slot, v)
            p += step

    return simt_mscatter_elem_kernel


@functools.cache
def simt_mscatter_row_last_kernel(rule: int):
    """Row, Conflict::Last (``last_owner_find_row``): the thread owning table row ``slot`` finds the
    largest ``r`` with ``remap(idx[r]) == slot`` and copies ``src[r, :]`` into it."""

    @cuda.jit(cache=True)
    def simt_mscatter_row_last_kernel(table, src, src_rs, src_cs, idx, idx_step, table_rows,
                                      valid_rows, valid_cols):
        threads = cuda.blockDim.x * cuda.blockDim.y
        slot = cuda.blockIdx.x * threads + cuda.threadIdx.y * 32 + cuda.threadIdx.x
        step = threads * cuda.gridDim.x
        while slot < table_rows:
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
            slot += step

    return simt_mscatter_row_last_kernel


@functools.cache
def simt_mscatter_elem_last_kernel(rule: int):
    """Elem, Conflict::Last (``last_owner_find_elem``): the thread owning flat slot ``slot`` finds the
    largest flat ``p = r * validCols + c`` with ``remap(idx[r, c]) == slot`` and stores ``src[r, c]``."""

    @cuda.jit(cache=True)
    def simt_mscatter_elem_last_kernel(table, src, src_rs, src_cs, idx, idx_rs, idx_cs, table_size,
                                       valid_rows, valid_cols):
        threads = cuda.blockDim.x * cuda.blockDim.y
        slot = cuda.blockIdx.x * threads + cuda.threadIdx.y * 32 + cuda.threadIdx.x
        step = threads * cuda.gridDim.x
        total = valid_rows * valid_cols
        while slot < table_size:
            p = total - 1
            while p >= 0:
                r = p // valid_cols
                c = p % valid_cols
                s, in_range = remap_index(idx[tile_offset_2d(r, c, idx_rs, idx_cs)], table_size, rule)
                if in_range and s == slot:
                    table[slot] = src[tile_offset_2d(r, c, src_rs, src_cs)]
                    break
                p -= 1
            slot += step

    return simt_mscatter_elem_last_kernel


# -- Conflict::Last at scale: the owner-based path (host/large.py) ------------------------------------------
# Pass 0 marks every destination slot unowned (-1) on the device; pass 1 claims each slot for the largest
# flat source index that writes it (an atomic max, after the OOB remap); pass 2 walks the destination and
# writes each owned slot from its owner. Bitwise identical to the slot-centric kernels and to the
# sequential order, in O(sources + slots) work, with no host round trip.

@functools.cache
def simt_mscatter_owner_reset_kernel():
    """``owner[:] = -1`` (no writer), on the device before a claim pass (a flat grid)."""

    @cuda.jit(cache=True)
    def simt_mscatter_owner_reset_kernel(owner):
        threads = cuda.blockDim.x * cuda.blockDim.y
        s = cuda.blockIdx.x * threads + cuda.threadIdx.y * 32 + cuda.threadIdx.x
        step = threads * cuda.gridDim.x
        while s < owner.size:
            owner[s] = -1
            s += step

    return simt_mscatter_owner_reset_kernel


@functools.cache
def simt_mscatter_row_owner_claim_kernel(rule: int):
    """Row: ``owner[remap(idx[r])] = max(owner[...], r)`` over all source rows (a flat grid)."""

    @cuda.jit(cache=True)
    def simt_mscatter_row_owner_claim_kernel(owner, idx, idx_step, table_rows, valid_rows):
        threads = cuda.blockDim.x * cuda.blockDim.y
        r = cuda.blockIdx.x * threads + cuda.threadIdx.y * 32 + cuda.threadIdx.x
        step = threads * cuda.gridDim.x
        while r < valid_rows:
            slot, in_range = remap_index(idx[r * idx_step], table_rows, rule)
            if in_range:
                cuda.atomic.max(owner, slot, r)
            r += step

    return simt_mscatter_row_owner_claim_kernel


@functools.cache
def simt_mscatter_row_owner_write_kernel():
    """Row: every owned table row takes source row ``owner[slot]``. Block ``b`` covers table rows
    ``[b * tile_rows, ...)`` with the Row geometry: warps own rows, lanes walk columns, as in
    ``simt_mscatter_row_kernel`` (one destination row is one plain row copy, so the caller may move
    it in units wider than the element)."""

    @cuda.jit(cache=True)
    def simt_mscatter_row_owner_write_kernel(table, src, src_rs, src_cs, owner, table_rows, valid_cols, tile_rows,
                                             row_warps, warps_per_row):
        row0 = cuda.blockIdx.x * tile_rows
        rows = min(tile_rows, table_rows - row0)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        col_begin = (ty // row_warps) * 32 + tx
        col_step = warps_per_row * 32
        r = ty % row_warps
        while r < rows:
            slot = row0 + r
            src_row = owner[slot]
            if src_row >= 0:
                copy_row_segment(table, slot * valid_cols, 1, src, src_row * src_rs, src_cs, col_begin, valid_cols,
                                 col_step)
            r += row_warps

    return simt_mscatter_row_owner_write_kernel


@functools.cache
def simt_mscatter_elem_owner_claim_kernel(rule: int):
    """Elem: ``owner[remap(idx[p])] = max(owner[...], p)`` over all flat source positions."""

    @cuda.jit(cache=True)
    def simt_mscatter_elem_owner_claim_kernel(owner, idx, idx_rs, idx_cs, table_size, valid_rows, valid_cols):
        threads = cuda.blockDim.x * cuda.blockDim.y
        p = cuda.blockIdx.x * threads + cuda.threadIdx.y * 32 + cuda.threadIdx.x
        step = threads * cuda.gridDim.x
        total = valid_rows * valid_cols
        while p < total:
            slot, in_range = remap_index(idx[tile_offset_2d(p // valid_cols, p % valid_cols, idx_rs, idx_cs)],
                                         table_size, rule)
            if in_range:
                cuda.atomic.max(owner, slot, p)
            p += step

    return simt_mscatter_elem_owner_claim_kernel


@functools.cache
def simt_mscatter_elem_owner_write_kernel():
    """Elem: every owned slot takes ``src[owner[slot]]``; a thread per slot, in a flat grid, like the
    slot-centric ``simt_mscatter_elem_last_kernel`` without its scan."""

    @cuda.jit(cache=True)
    def simt_mscatter_elem_owner_write_kernel(table, src, src_rs, src_cs, owner, table_size, valid_cols):
        threads = cuda.blockDim.x * cuda.blockDim.y
        s = cuda.blockIdx.x * threads + cuda.threadIdx.y * 32 + cuda.threadIdx.x
        step = threads * cuda.gridDim.x
        while s < table_size:
            p = owner[s]
            if p >= 0:
                table[s] = src[tile_offset_2d(p // valid_cols, p % valid_cols, src_rs, src_cs)]
            s += step

    return simt_mscatter_elem_owner_write_kernel
