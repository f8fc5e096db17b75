"""MGATHER on the A2/A3 vector core (MGATHER.md, "A2/A3 Form", "NZ Layout (A2/A3)").

The A2/A3 kernel is a single-threaded walk driven from the scalar pipe; each path here is one
Numba-jitted loop that walks in exactly the hardware's order:

* Row ND: one row copy (``copy_gm_to_ubuf_align``, ``lenBurst = validCol``) per index, through
  ``safeIdx * GetStride(DIM_3)``; ``tableRows = prod(Shape[0..3])``. GatherOOB ZERO writes the OOB
  row's valid columns with ``T(0)`` inline.
* Elem ND: one scalar GM -> UB copy per element, in ``(r, c)`` order, from ``table[safeIdx]``;
  ``tableSize = prod(Shape[0..4])``.
* Row NZ: per logical row ``r`` and outer batch ``b``, one multi-burst transfer of ``gShape1``
  bursts of ``kC0`` elements (the whole logical row, ``gShape0 * gShape1 * kC0`` columns) from the
  NZ block-stride GM offset of row ``idx[r]`` into the NZ tile slot of row ``r``. GatherOOB ZERO
  pre-fills the whole NZ tile once and skips the OOB rows.
* Elem NZ: ``idx -> (idx // nLogicalCols, idx % nLogicalCols)`` -> NZ GM offset; the walk order is
  block-col -> row -> col-in-block; ZERO lanes write ``T(0)`` inline.

Each loop is built by a factory (``functools.cache``) as an ``@njit(cache=True)`` closure over its
policy constants, so ``remap_index``'s rule branch and the ZERO pre-fill fold at compile time (the
ISA's ``if constexpr``) and Numba's on-disk cache keys each specialisation by the closure values.
Elements move as raw bits (uint8 / uint16 / uint32 arrays).
"""
from __future__ import annotations

import functools

import numpy as np
import numba

from simt_pto.enums import Coalesce, GatherOOB
from simt_pto.kernels.cache import njit
from simt_pto.kernels.index_policy import MASK, remap_index
from simt_pto.nz import FRACTAL_NZ_ROW

U = numba.uint64


@njit(inline="always", cache=True)
def nz_gm_row_base(lr, s2, s3):
    """GM offset of logical row ``lr`` of an NZ tensor (its column 0): ``br * s2 + ri * s3`` with
    ``br, ri = divmod(lr, FRACTAL_NZ_ROW)``."""
    br = lr // FRACTAL_NZ_ROW
    return br * s2 + (lr - br * FRACTAL_NZ_ROW) * s3


@njit(inline="always", cache=True)
def nz_gm_offset(lr, lc, bcols, kc0, s0, s1, s2, s3, s4):
    """GM element offset of logical ``(lr, lc)`` of an NZ tensor ``Shape<B, BCols, BRows, 16, kC0>``
    with strides ``s0..s4`` (MGatherNZGmOffset / MScatterNZGmOffset)."""
    per_batch = bcols * kc0
    b = lc // per_batch
    rest = lc - b * per_batch
    bc = rest // kc0
    ci = rest - bc * kc0
    return b * s0 + bc * s1 + nz_gm_row_base(lr, s2, s3) + ci * s4


# ---------------------------------------------------------------------------------------------
# loop factories (one compiled specialisation per policy constant)
#
# Every computed array index goes through U (uint64): Numba adds a negative-index wraparound
# select to signed indices it cannot prove non-negative, which blocks vectorisation and costs ~3.5x
# on a random gather. All offsets here are non-negative by construction (the plan checked them).
# ---------------------------------------------------------------------------------------------
@functools.cache
def row_nd_loop(rule):
    """``dst[r, :cols] = table[safeIdx * row_stride : + cols]`` for ``r < rows`` (one row DMA each)."""

    @njit(cache=True)
    def mgather_row_nd(dst, dst_rs, table, idx, idx_step, rows, cols, capacity, row_stride):
        for r in range(rows):
            slot, ok = remap_index(idx[U(r * idx_step)], capacity, rule)
            d = U(r * dst_rs)
            if ok:
                g = U(slot * row_stride)
                for c in range(U(cols)):
                    dst[d + c] = table[g + c]
            else:
                for c in range(U(cols)):
                    dst[d + c] = 0

    return mgather_row_nd


@functools.cache
def elem_nd_loop(rule):
    """``dst[r, c] = table[safeIdx(idx[r, c])]`` in ``(r, c)`` order (one scalar copy each)."""

    @njit(cache=True)
    def mgather_elem_nd(dst, dst_rs, table, idx, idx_rs, rows, cols, capacity):
        for r in range(rows):
            d = U(r * dst_rs)
            i = U(r * idx_rs)
            for c in range(U(cols)):
                slot, ok = remap_index(idx[i + c], capacity, rule)
                if ok:
                    dst[d + c] = table[U(slot)]
                else:
                    dst[d + c] = 0

    return mgather_elem_nd


@functools.cache
def row_nz_loop(rule, prefill):
    """NZ Row gather: the whole logical row ``safeIdx`` into NZ tile row ``r``, batch by batch
    (``gShape1`` bursts of ``kC0`` per batch)."""

    @njit(cache=True)
    def mgather_row_nz(dst, tile_rows, table, idx, idx_step, rows, capacity, nbatch, bcols, kc0,
                       s0, s1, s2, s3, s4):
        blk = tile_rows * kc0            # UB distance between NZ block columns
        if prefill:                      # GatherOOB::Zero: zero the whole tile once, before the DMAs
            dst[:] = 0
        for r in range(rows):
            slot, ok = remap_index(idx[U(r * idx_step)], capacity, rule)
            if ok:
                gbase = nz_gm_row_base(slot, s2, s3)
                for b in range(nbatch):
                    for bc in range(bcols):
                        g = gbase + b * s0 + bc * s1
                        d = U((b * bcols + bc) * blk + r * kc0)
                        for ci in range(kc0):
                            dst[d + U(ci)] = table[U(g + ci * s4)]
            elif not prefill:            # memory-safe UNDEFINED (strict=False): a zero row
                for j in range(nbatch * bcols):
                    d = U(j * blk + r * kc0)
                    for ci in range(U(kc0)):
                        dst[d + ci] = 0

    return mgather_row_nz


@functools.cache
def elem_nz_loop(rule):
    """NZ Elem gather, block-col -> row -> col-in-block."""

    @njit(cache=True)
    def mgather_elem_nz(dst, tile_rows, table, idx, idx_rs, rows, cols, capacity, lcols, bcols, kc0,
                        s0, s1, s2, s3, s4):
        blk = tile_rows * kc0
        nblk = (cols + kc0 - 1) // kc0
        for bcol in range(nblk):
            c0 = bcol * kc0
            cend = min(kc0, cols - c0)
            for r in range(rows):
                i = U(r * idx_rs + c0)
                d = U(bcol * blk + r * kc0)
                for ci in range(U(cend)):
                    slot, ok = remap_index(idx[i + ci], capacity, rule)
                    if ok:
                        lr = slot // lcols
                        g = nz_gm_offset(lr, slot - lr * lcols, bcols, kc0, s0, s1, s2, s3, s4)
                        dst[d + ci] = table[U(g)]
                    else:
                        dst[d + ci] = 0

    return mgather_elem_nz


# ---------------------------------------------------------------------------------------------
# host side
# ---------------------------------------------------------------------------------------------
def nz_params(plan):
    """``(nbatch, bcols, kc0, lcols, strides)`` of the plan's NZ table."""
    shape, stride = plan.table.shape, plan.table.stride
    kc0 = shape[4]
    return shape[0], shape[1], kc0, shape[0] * shape[1] * kc0, tuple(int(s) for s in stride)


def index_bits(plan):
    """The index tile's storage as uint32 (indices are cast to uint32 before any bounds logic)."""
    return plan.idx.data.view(np.uint32)


def run_mgather(plan) -> None:
    if plan.l1:  # GM -> L1 (MAT destination): MGATHER.md, "GM → L1 Gather"; A2/A3 has one executor
        from simt_pto.kernels.l1_scalar import run_mgather_l1_scalar
        return run_mgather_l1_scalar(plan)
    dst = plan.tile
    dbits = dst.data.view(plan.dtype.bits)
    table = plan.table.host_flat().view(plan.dtype.bits)
    idx = index_bits(plan)
    rule = int(plan.rule)
    if plan.nz:
        nbatch, bcols, kc0, lcols, (s0, s1, s2, s3, s4) = nz_params(plan)
        if plan.coalesce == Coalesce.ROW:
            prefill = rule == MASK and plan.oob is GatherOOB.ZERO
            row_nz_loop(rule, prefill)(dbits, dst.rows, table, idx, plan.idx_step, plan.rows, plan.capacity,
                                       nbatch, bcols, kc0, s0, s1, s2, s3, s4)
        else:
            elem_nz_loop(rule)(dbits, dst.rows, table, idx, plan.idx.cols, plan.rows, plan.cols, plan.capacity,
                               lcols, bcols, kc0, s0, s1, s2, s3, s4)
    elif plan.coalesce == Coalesce.ROW:
        row_nd_loop(rule)(dbits, dst.cols, table, idx, plan.idx_step, plan.rows, plan.cols, plan.capacity,
                          plan.row_stride)
    else:
        elem_nd_loop(rule)(dbits, dst.cols, table, idx, plan.idx.cols, plan.rows, plan.cols, plan.capacity)
