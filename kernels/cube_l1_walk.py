"""MGATHER GM -> L1 (``TileType::Mat`` NZ destination), the scalar walk (MGATHER.md, "GM → L1 Gather"),
shared by two targets.

On A2/A3 the scalar pipe of the unified AI core reads the GM indices and issues the L1 transfers; on A5
the cube core (AIC) does the same walk for ``GatherExec::Scalar``, so both targets run these loops
(``simt_pto.kernels.a2a3`` and the A5 dispatch call :func:`run_mgather_l1_scalar`). With ``kC0 = 32 / sizeof(T)`` and
the NZ tile offset ``nz(r, c) = (c // kC0) * (Rows * kC0) + r * kC0 + c % kC0``:

* Row: for ``r < validRows`` in order, ``slot = remap(idx[r])`` and one nd2nz row copy
  ``L1[nz(r, c)] = table[slot * tableRowStride + c]`` for ``c < validCols``. GatherOOB ZERO pre-zeros the
  whole L1 tile once and skips the OOB rows; the memory-safe UNDEFINED (``strict=False``) writes the
  OOB row's valid columns with ``T(0)``. Nothing else of the tile is written.
* Elem: ``scratch[0 : Rows * Cols] = 0``, then for ``(r, c)`` in row-major order
  ``scratch[nz(r, c)] = table[slot]`` for each in-range ``slot = remap(idx[r * idxRowStride + c])``;
  then one bulk copy ``L1[0 : Rows * Cols] = scratch[0 : Rows * Cols]``.

Each loop is built by a factory (``functools.cache``) as an ``@njit(cache=True)`` closure over its
policy constants, which also name its on-disk cache entry (``key=``), like :mod:`simt_pto.kernels.a2a3.walk`.
Elements move as raw bits.
"""
from __future__ import annotations

import functools

import numba
import numpy as np

from simt_pto.backend import imported
from simt_pto.enums import IndexRule
from simt_pto.enums import Coalesce, GatherOOB
from simt_pto.kernels.cache import njit
from simt_pto.kernels.index_policy import read_once, remap_index
from simt_pto.launch_spec import KernelPolicy

U = numba.uint64


@functools.cache
def l1_row_loop(rule, prefill):
    """Row: the nd2nz copy of table row ``slot`` (``validCols`` elements) into NZ row ``r``."""

    @njit(cache=True, key=KernelPolicy(rule=IndexRule(rule)).cache_key + (".prefill" if prefill else ""))
    def mgather_l1_row(dst, tile_rows, table, idx, rows, cols, capacity, row_stride, kc0):
        blk = tile_rows * kc0            # L1 distance between NZ block columns
        if prefill:                      # GatherOOB::Zero: pto_create_cbuf_matrix, once, before the copies
            dst[:] = 0
        for r in range(rows):
            slot, ok = remap_index(idx[U(r)], capacity, rule)
            if not ok and prefill:
                continue
            g = slot * row_stride
            for b0 in range(0, cols, kc0):
                d = U((b0 // kc0) * blk + r * kc0)
                for ci in range(min(kc0, cols - b0)):
                    dst[d + U(ci)] = table[U(g + b0 + ci)] if ok else 0

    return mgather_l1_row


@functools.cache
def l1_elem_loop(rule):
    """Elem: pre-zero the NZ scratch, then one scalar copy per in-range element, in ``(r, c)`` order."""

    @njit(cache=True, key=KernelPolicy(rule=IndexRule(rule)).cache_key)
    def mgather_l1_elem(scratch, tile_rows, tile_elems, table, idx, idx_rs, rows, cols, capacity, kc0):
        blk = tile_rows * kc0
        for i in range(U(tile_elems)):
            scratch[i] = 0
        for r in range(rows):
            i0 = r * idx_rs
            for c in range(cols):
                slot, ok = remap_index(idx[U(i0 + c)], capacity, rule)
                if ok:
                    bc = c // kc0
                    scratch[U(bc * blk + r * kc0 + (c - bc * kc0))] = table[U(slot)]

    return mgather_l1_elem


# ---------------------------------------------------------------------------------------------
# host side
# ---------------------------------------------------------------------------------------------
def index_bits(plan) -> np.ndarray:
    """The GM index tensor's memory as uint32 (indices are cast to uint32 before any bounds logic)."""
    return plan.idx.host_flat().view(np.uint32)


def table_bits(plan) -> np.ndarray:
    return plan.table.host_flat().view(plan.dtype.bits)


def scratch_bits(plan):
    """``(bits, commit)``: the scratch memory as raw bits to write, and a callable that makes the writes
    visible in the user's tensor (a no-op for host memory, which ``bits`` views directly)."""
    scratch = plan.scratch
    if not scratch.on_device:
        return scratch.flat.view(plan.dtype.bits), lambda: None
    bits = scratch.host_flat().view(plan.dtype.bits).copy()

    def commit():
        dev = imported("numba.cuda").as_cuda_array(scratch.array).reshape(scratch.size).view(bits.dtype)
        dev[: plan.tile_elems].copy_to_device(np.ascontiguousarray(bits[: plan.tile_elems]))
    return bits, commit


def bulk_copy_to_l1(plan, scratch) -> None:
    """``copy_gm_to_cbuf`` (``pto_copy_gm_to_cbuf_align_v2`` on A5): the whole NZ scratch onto the L1 tile."""
    plan.tile.data.view(plan.dtype.bits)[:] = scratch[: plan.tile_elems]


def run_mgather_l1_scalar(plan) -> None:
    """The scalar GM -> L1 gather of a validated plan (A2/A3, and A5 ``GatherExec::Scalar``)."""
    dst = plan.tile
    rule = int(read_once(plan.rule, "MGATHER"))  # (the GM indices read once, never past the table)
    if plan.coalesce == Coalesce.ROW:
        prefill = rule == IndexRule.MASK and plan.oob is GatherOOB.ZERO
        l1_row_loop(rule, prefill)(dst.data.view(plan.dtype.bits), dst.rows, table_bits(plan), index_bits(plan),
                                   plan.rows, plan.cols, plan.capacity, plan.row_stride, plan.kc0)
        return
    scratch, commit = scratch_bits(plan)
    l1_elem_loop(rule)(scratch, dst.rows, plan.tile_elems, table_bits(plan), index_bits(plan), plan.idx_step,
                       plan.rows, plan.cols, plan.capacity, plan.kc0)
    commit()                     # dcci + dsb(DSB_DDR): the scalar writes reach GM before the DMA
    bulk_copy_to_l1(plan, scratch)

