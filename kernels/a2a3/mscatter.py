"""MSCATTER on the A2/A3 vector core (MSCATTER.md, "A2/A3 Form", "Conflict Resolution", "NZ Layout (A2/A3)").

Strictly sequential, so collisions are deterministic: for ScatterAtomicOp NONE the later write wins,
for ADD every write accumulates, each add rounded in the element type, in walk order:

* Row ND: one row store (``copy_ubuf_to_gm_align``, ``lenBurst = validCol``) per source row ``r``
  in increasing ``r``, to ``safeIdx * GetStride(DIM_3)``; ADD goes through the MTE3 atomic-add unit.
* Elem ND: one scalar UB -> GM store (or read-add-write) per element in increasing ``(r, c)``, to
  ``table[safeIdx]``.
* Row NZ: per source row ``r`` and outer batch ``b``, ``gShape1`` bursts of ``kC0`` elements (the
  whole logical row) from the NZ tile slot of row ``r`` to the NZ block-stride GM offset of row
  ``safeIdx``.
* Elem NZ: ``idx -> (idx // nLogicalCols, idx % nLogicalCols)`` -> NZ GM offset; the walk order is
  block-col -> row -> col-in-block (so "last write wins" / the accumulation order follow that walk).

ScatterOOB SKIP drops the row / element; CLAMP / WRAP remap through ``remap_index``. Each element is stored
by the one store rule of :mod:`simt_pto.kernels.store` (its sequential form, inlined per (atomic, format)):
integer ADD wraps in the element type, float32 adds in float32, float16 / bfloat16 add through the integer
soft-float of :mod:`simt_pto.kernels.softfloat` (correctly rounded per add).
"""
from __future__ import annotations

import functools

import numba

from simt_pto.enums import Coalesce, ScatterAtomicOp
from simt_pto.kernels import store
from simt_pto.kernels.cache import njit
from simt_pto.kernels.gm import write_back
from simt_pto.kernels.index_policy import remap_index
from simt_pto.kernels.store import store_element
from .mgather import index_bits, nz_gm_offset, nz_gm_row_base, nz_params

U = numba.uint64


# Every computed array index goes through U (uint64): see the note in mgather.py.
@functools.cache
def row_nd_loop(rule, atomic, fmt):
    """Row ND: per source row r (increasing), ``table[safeIdx * row_stride + c] op= src[r, c]``."""

    def mscatter_row_nd(table, src, src_rs, idx, idx_step, rows, cols, capacity, row_stride):
        store_policy = (atomic, fmt)  # noqa: F841  (the closure holds the policy: Numba's cache key)
        for r in range(rows):
            slot, ok = remap_index(idx[U(r * idx_step)], capacity, rule)
            if ok:
                g = U(slot * row_stride)
                s = U(r * src_rs)
                for c in range(U(cols)):
                    gc = g + c
                    v = src[s + c]
                    store_element(table, gc, v)

    return njit(cache=True)(store.bind_store(mscatter_row_nd, atomic, fmt))


@functools.cache
def elem_nd_loop(rule, atomic, fmt):
    """Elem ND: per element in increasing (r, c), ``table[safeIdx] op= src[r, c]``."""

    def mscatter_elem_nd(table, src, src_rs, idx, idx_rs, rows, cols, capacity):
        store_policy = (atomic, fmt)  # noqa: F841  (the closure holds the policy: Numba's cache key)
        for r in range(rows):
            s = U(r * src_rs)
            i = U(r * idx_rs)
            for c in range(U(cols)):
                slot, ok = remap_index(idx[i + c], capacity, rule)
                if ok:
                    g = U(slot)
                    v = src[s + c]
                    store_element(table, g, v)

    return njit(cache=True)(store.bind_store(mscatter_elem_nd, atomic, fmt))


@functools.cache
def row_nz_loop(rule, atomic, fmt):
    """Row NZ: per source row r, per batch, ``gShape1`` bursts of ``kC0`` (the whole logical row)."""

    def mscatter_row_nz(table, src, tile_rows, idx, idx_step, rows, capacity, nbatch, bcols, kc0,
                        s0, s1, s2, s3, s4):
        store_policy = (atomic, fmt)  # noqa: F841  (the closure holds the policy: Numba's cache key)
        blk = tile_rows * kc0
        for r in range(rows):
            slot, ok = remap_index(idx[U(r * idx_step)], capacity, rule)
            if ok:
                gbase = nz_gm_row_base(slot, s2, s3)
                for b in range(nbatch):
                    for bc in range(bcols):
                        g0 = gbase + b * s0 + bc * s1
                        s = U((b * bcols + bc) * blk + r * kc0)
                        for ci in range(kc0):
                            g = U(g0 + ci * s4)
                            v = src[s + U(ci)]
                            store_element(table, g, v)

    return njit(cache=True)(store.bind_store(mscatter_row_nz, atomic, fmt))


@functools.cache
def elem_nz_loop(rule, atomic, fmt):
    """Elem NZ: block-col -> row -> col-in-block; ``idx -> (idx // lcols, idx % lcols)`` -> NZ GM offset."""

    def mscatter_elem_nz(table, src, tile_rows, idx, idx_rs, rows, cols, capacity, lcols, bcols, kc0,
                         s0, s1, s2, s3, s4):
        store_policy = (atomic, fmt)  # noqa: F841  (the closure holds the policy: Numba's cache key)
        blk = tile_rows * kc0
        nblk = (cols + kc0 - 1) // kc0
        for bcol in range(nblk):
            c0 = bcol * kc0
            cend = min(kc0, cols - c0)
            for r in range(rows):
                i = U(r * idx_rs + c0)
                s = U(bcol * blk + r * kc0)
                for ci in range(U(cend)):
                    slot, ok = remap_index(idx[i + ci], capacity, rule)
                    if ok:
                        lr = slot // lcols
                        g = U(nz_gm_offset(lr, slot - lr * lcols, bcols, kc0, s0, s1, s2, s3, s4))
                        v = src[s + ci]
                        store_element(table, g, v)

    return njit(cache=True)(store.bind_store(mscatter_elem_nz, atomic, fmt))


def store_policy(plan) -> tuple[int, int]:
    """(ScatterAtomicOp value, element format) of the loops' store rule (:mod:`simt_pto.kernels.store`)."""
    if plan.atomic not in (ScatterAtomicOp.NONE, ScatterAtomicOp.ADD):  # the constraint layer rejects Max / Min
        raise NotImplementedError(f"a2a3: atomic {plan.atomic.name} has no A2/A3 path")
    if plan.atomic == ScatterAtomicOp.ADD and plan.dtype.name not in ("int8", "int16", "int32", "float32", "float16",
                                                                      "bfloat16"):
        raise NotImplementedError(f"a2a3: atomic Add on {plan.dtype.name}")  # rejected by the constraint layer
    return int(plan.atomic), store.element_format(plan.atomic, plan.dtype.name)


def run_mscatter(plan) -> None:
    atomic, fmt = store_policy(plan)
    view = store.source_dtype(plan.atomic, fmt, plan.dtype)
    src = plan.tile
    sv = src.data.view(view)
    flat = plan.table.host_flat()      # a view of host memory, a copy of device memory
    table = flat.view(view)
    idx = index_bits(plan)
    rule = int(plan.rule)
    if plan.nz:
        nbatch, bcols, kc0, lcols, (s0, s1, s2, s3, s4) = nz_params(plan)
        if plan.coalesce == Coalesce.ROW:
            row_nz_loop(rule, atomic, fmt)(table, sv, src.rows, idx, plan.idx_step, plan.rows, plan.capacity,
                                           nbatch, bcols, kc0, s0, s1, s2, s3, s4)
        else:
            elem_nz_loop(rule, atomic, fmt)(table, sv, src.rows, idx, plan.idx.cols, plan.rows, plan.cols,
                                            plan.capacity, lcols, bcols, kc0, s0, s1, s2, s3, s4)
    elif plan.coalesce == Coalesce.ROW:
        row_nd_loop(rule, atomic, fmt)(table, sv, src.cols, idx, plan.idx_step, plan.rows, plan.cols, plan.capacity,
                                       plan.row_stride)
    else:
        elem_nd_loop(rule, atomic, fmt)(table, sv, src.cols, idx, plan.idx.cols, plan.rows, plan.cols, plan.capacity)
    write_back(plan, flat.view(plan.dtype.bits))     # device tables: publish the modified host copy
