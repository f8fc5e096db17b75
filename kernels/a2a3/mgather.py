"""MGATHER on the A2/A3 vector core (MGATHER.md, "A2/A3 Form", "NZ Layout (A2/A3)").

The walks (Row / Elem, ND / NZ, in the hardware's order) are :mod:`.walk`'s, shared with MSCATTER; here the move
at each (tile, GM) pair is a copy, ``dst[t] = table[g]``:

* Row ND: one row copy (``copy_gm_to_ubuf_align``, ``lenBurst = validCol``) per index, through
  ``safeIdx * GetStride(DIM_3)``; GatherOOB ZERO writes the OOB row's valid columns with ``T(0)`` inline.
* Elem ND: one scalar GM -> UB copy per element, in ``(r, c)`` order, from ``table[safeIdx]``.
* Row NZ: per logical row ``r`` and outer batch ``b``, one multi-burst transfer of ``gShape1`` bursts of ``kC0``
  elements from the NZ block-stride GM offset of row ``idx[r]`` into the NZ tile slot of row ``r``. GatherOOB ZERO
  pre-fills the whole NZ tile once and skips the OOB rows.
* Elem NZ: block-col -> row -> col-in-block; ZERO lanes write ``T(0)`` inline.

Elements move as raw bits (uint8 / uint16 / uint32 arrays).
"""
from __future__ import annotations

import functools

from simt_pto.backend import first_use
from simt_pto.enums import Coalesce, GatherOOB, IndexRule
from simt_pto.kernels.cache import njit
from simt_pto.kernels.index_policy import read_once
from simt_pto.launch_spec import KernelPolicy
from . import walk


@njit(inline="always", cache=True)
def gather_move(tile, t, table, g):
    """The gather's move: ``tile[t] = table[g]``."""
    tile[t] = table[g]


def gather_loop(source, rule: IndexRule, prefill: bool = False):
    """The gather loop of the walk ``source`` (:mod:`.walk`: ``row_nd``, ``elem_nd``, ``row_nz``, ``elem_nz``) for
    one index rule, writing ``T(0)`` where the rule masks an index; with ``prefill`` (Row NZ under GatherOOB ZERO)
    the whole NZ tile is zeroed first and masked rows are skipped. Called as the walk's signature says, with the
    destination tile as ``tile``. The loop reads each index once, never past the table: UNDEFINED's unchecked rule
    is compiled as CLAMP's (:func:`~simt_pto.kernels.index_policy.read_once`)."""
    return _gather_loop(source, read_once(IndexRule(rule), "MGATHER"), prefill)


@functools.cache
def _gather_loop(source, rule: IndexRule, prefill: bool):
    return walk.compile_walk(source, "mgather", gather_move, KernelPolicy(rule=IndexRule(rule)), zero_oob=not prefill,
                             prefill=prefill)


def rows_gatherer(plan, cols: int):
    """The gather of an ND ``plan`` over rows of ``cols`` columns, its compiled loop looked up once: ``gather(dst,
    dst_rs, table, idx, idx_stride, rows)`` writes ``rows`` rows straight into ``dst`` (raw bits, ``dst_rs``
    elements per row) from ``table`` (the flat table's raw bits) through ``idx`` (uint32, ``idx_stride`` as in
    :func:`.walk.run_nd`): a whole-array gather's tile, its rows written where the caller's result holds them (no
    tile in between). A repeated whole-array gather keeps its bound form (:func:`bound_gatherer`)."""
    return walk.nd_walk(plan, _nd_gather_loop(plan), cols)


def _nd_gather_loop(plan):
    """``loop(source)`` of an ND gather of ``plan``: the compiled gather loop of a walk's source (no prefill: an ND
    walk writes or zeroes every row it visits)."""
    rule = IndexRule(plan.rule)
    return lambda source: gather_loop(source, rule, False)


def tile_gatherer(plan):
    """``(gather, dtype)``: the tile MGATHER of ``plan``'s signature with its compiled loop looked up once, for an
    ND or NZ plan (None for GM -> L1): ``gather(dst, idx, table)`` over the destination tile's storage and the
    flat table (raw bits, ``dtype``) through the index tile's storage (uint32), as :func:`run_mgather` runs it. A
    repeated tile op keeps it."""
    if plan.l1:
        return None
    if plan.nz:
        rule = IndexRule(plan.rule)
        walk_nz = walk.nz_walk(plan, lambda source: gather_loop(source, rule, _prefills(plan, rule)))
        return (lambda dst, idx, table: walk_nz(dst, table, idx)), plan.dtype.bits
    idx_stride = plan.idx_step if plan.coalesce == Coalesce.ROW else plan.idx.cols
    return bound_gatherer(plan, plan.cols, plan.tile.cols, idx_stride, plan.rows), plan.dtype.bits


def bound_gatherer(plan, cols: int, dst_rs: int, idx_stride: int, rows: int):
    """:func:`rows_gatherer` bound to one signature's shape: ``gather(dst, idx, table)`` (the operands in the order
    a kept launch passes them): a tile op's tile (:func:`tile_gatherer`), or every row of a whole-array gather at
    once. The binding lives here, beside the loop, so that a repeated call runs no host module's code."""
    run, trailing = walk.nd_loop(plan, _nd_gather_loop(plan), cols)
    return lambda dst, idx, table: run(dst, dst_rs, table, idx, idx_stride, rows, *trailing)


def run_mgather(plan) -> None:
    if plan.l1:  # GM -> L1 (MAT destination): MGATHER.md, "GM → L1 Gather"; A2/A3 has one executor
        with first_use:
            from simt_pto.kernels.cube_l1_walk import run_mgather_l1_scalar
        return run_mgather_l1_scalar(plan)
    dst = plan.tile
    rule = IndexRule(plan.rule)
    prefill = _prefills(plan, rule)
    walk.run_walk(plan, dst.data.view(plan.dtype.bits), dst.cols, plan.table.host_flat().view(plan.dtype.bits),
                  lambda source: gather_loop(source, rule, prefill))


def _prefills(plan, rule: IndexRule) -> bool:
    """Whether the gather's loop zeroes the whole tile first (a Row NZ gather under GatherOOB ZERO: masked rows are
    then skipped)."""
    return plan.nz and plan.coalesce == Coalesce.ROW and rule == IndexRule.MASK and plan.oob is GatherOOB.ZERO
