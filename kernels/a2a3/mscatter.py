"""MSCATTER on the A2/A3 vector core (MSCATTER.md, "A2/A3 Form", "Conflict Resolution", "NZ Layout (A2/A3)").

Strictly sequential, so collisions are deterministic: for ScatterAtomicOp NONE the later write wins, for ADD every
write accumulates, each add rounded in the element type, in the walk order of :mod:`.walk` (shared with MGATHER):

* Row ND: one row store (``copy_ubuf_to_gm_align``, ``lenBurst = validCol``) per source row ``r`` in increasing
  ``r``, to ``safeIdx * GetStride(DIM_3)``; ADD goes through the MTE3 atomic-add unit.
* Elem ND: one scalar UB -> GM store (or read-add-write) per element in increasing ``(r, c)``, to ``table[safeIdx]``.
* Row NZ: per source row ``r`` and outer batch ``b``, ``gShape1`` bursts of ``kC0`` elements (the whole logical
  row) from the NZ tile slot of row ``r`` to the NZ block-stride GM offset of row ``safeIdx``.
* Elem NZ: block-col -> row -> col-in-block (so "last write wins" / the accumulation order follow that walk).

ScatterOOB SKIP drops the row / element; CLAMP / WRAP remap through ``remap_index``. Each element is stored by the
one store rule of :mod:`simt_pto.kernels.store` (its sequential form, inlined per (atomic, format)): integer ADD
wraps in the element type, float32 adds in float32, float16 / bfloat16 add through the adder of
:mod:`simt_pto.kernels.softfloat` (correctly rounded per add).
"""
from __future__ import annotations

import functools

from simt_pto.enums import Coalesce, ElementFormat, IndexRule, ScatterAtomicOp
from simt_pto.kernels import store, writers
from simt_pto.kernels.cache import njit
from simt_pto.kernels.index_policy import read_once
from simt_pto.kernels.gm import write_back
from simt_pto.kernels.store import bind, store_element
from simt_pto.launch_spec import KernelPolicy
from . import walk


def scatter_move(tile, t, table, g):
    """The scatter's move: ``table[g] op= tile[t]`` by the store rule, bound per (atomic, format)."""
    store_element(table, g, tile[t])


def scatter_loop(source, rule: IndexRule, atomic: ScatterAtomicOp, fmt: ElementFormat):
    """The scatter loop of the walk ``source`` (:mod:`.walk`: ``row_nd``, ``elem_nd``, ``row_nz``, ``elem_nz``) for
    one index rule and store policy (ScatterAtomicOp, element format); masked indices store nothing. Called as the
    walk's signature says, with the source tile as ``tile``. The loop reads each index once, never past the table:
    UNDEFINED's unchecked rule is compiled as MASK's (:func:`~simt_pto.kernels.index_policy.read_once`)."""
    return _scatter_loop(source, read_once(IndexRule(rule), "MSCATTER"), atomic, fmt)


@functools.cache
def _scatter_loop(source, rule: IndexRule, atomic: ScatterAtomicOp, fmt: ElementFormat):
    policy = KernelPolicy(rule=IndexRule(rule), atomic=ScatterAtomicOp(atomic), fmt=ElementFormat(fmt))
    move = njit(inline="always")(bind(scatter_move, {"store_element": store.sequential_store(policy.atomic, policy.fmt)}))
    return walk.compile_walk(source, "mscatter", move, policy)


def store_policy(plan) -> tuple[ScatterAtomicOp, ElementFormat]:
    """(ScatterAtomicOp, element format) of the loops' store rule (:mod:`simt_pto.kernels.store`)."""
    if plan.atomic not in (ScatterAtomicOp.NONE, ScatterAtomicOp.ADD):  # the constraint layer rejects Max / Min
        raise NotImplementedError(f"a2a3: atomic {plan.atomic.name} has no A2/A3 path")
    if plan.atomic == ScatterAtomicOp.ADD and plan.dtype.name not in ("int8", "int16", "int32", "float32", "float16",
                                                                      "bfloat16"):
        raise NotImplementedError(f"a2a3: atomic Add on {plan.dtype.name}")  # rejected by the constraint layer
    return ScatterAtomicOp(plan.atomic), store.element_format(plan.atomic, plan.dtype.name)


def rows_scatterer(plan, cols: int):
    """``(scatter, dtype)``: the ND scatter of ``plan`` over rows of ``cols`` columns (:func:`.walk.nd_loop`) with its
    compiled loop looked up once: ``scatter(src, src_rs,
    table, idx, idx_stride, rows)`` stores ``rows`` rows of ``src`` (``src_rs`` elements per row) into the flat
    ``table`` (both viewed as ``dtype``, the store rule's) through ``idx`` (uint32, ``idx_stride`` as in
    :func:`.walk.run_nd`), in order, registered as a writer of the table as :func:`run_mscatter` registers it. A
    whole-array scatter's rows in one pass (the loop is sequential: the order of the tiles is the order of the
    rows), and a tile op's tile (:func:`tile_scatterer`)."""
    register, run, trailing, dtype = _registered_walk(plan, cols)

    def scatter(src, src_rs, table, idx, idx_stride, rows):
        register(table, run, src, src_rs, table, idx, idx_stride, rows, *trailing)
    return scatter, dtype


def _registered_walk(plan, cols: int):
    """``(register, run, trailing, dtype)`` of :func:`rows_scatterer`: the writer registration the loop runs under (a
    composing writer for stores, the only writer for a read-modify-write Add), the compiled ND loop and the
    arguments it takes after the call's own (:func:`.walk.nd_loop`), the store rule's dtype."""
    atomic, fmt = store_policy(plan)
    rule = IndexRule(plan.rule)
    run, trailing = walk.nd_loop(plan, lambda source: scatter_loop(source, rule, atomic, fmt), cols)
    return _registration(atomic), run, trailing, store.source_dtype(atomic, fmt, plan.dtype)


def _registration(atomic: ScatterAtomicOp):
    """How a loop of ``atomic`` registers as a writer of its table: as a composing writer for stores, as the only
    writer for a read-modify-write Add (:mod:`simt_pto.kernels.writers`)."""
    return writers.write_shared if atomic == ScatterAtomicOp.NONE else writers.run_exclusive


def tile_scatterer(plan):
    """``(scatter, dtype)``: the tile MSCATTER of ``plan``'s signature (:func:`rows_scatterer` over its tile; an NZ
    plan's walk, registered as :func:`run_mscatter` registers it), for a plan over a host table (None for a device
    table): ``scatter(src, idx, table)`` over the source tile's storage and the flat table (``dtype``) through the
    index tile's storage (uint32). A repeated tile op keeps it."""
    if plan.table.on_device:
        return None
    if plan.nz:
        atomic, fmt = store_policy(plan)
        rule = IndexRule(plan.rule)
        walk_nz = walk.nz_walk(plan, lambda source: scatter_loop(source, rule, atomic, fmt))
        register = _registration(atomic)

        def scatter_nz(src, idx, table):
            register(table, walk_nz, src, table, idx)
        return scatter_nz, store.source_dtype(atomic, fmt, plan.dtype)
    idx_stride = plan.idx_step if plan.coalesce == Coalesce.ROW else plan.idx.cols
    return bound_scatterer(plan, plan.cols, plan.tile.cols, idx_stride, plan.rows)


def bound_scatterer(plan, cols: int, src_rs: int, idx_stride: int, rows: int):
    """``(scatter, dtype)``: :func:`rows_scatterer` bound to one signature's shape, ``scatter(src, idx, table)`` (the
    operands in the order a kept launch passes them): a tile op's tile (:func:`tile_scatterer`), or every row of a
    whole-array scatter in one pass. The binding lives here, beside the loop, so that a repeated call runs no
    host module's code."""
    register, run, trailing, dtype = _registered_walk(plan, cols)
    return (lambda src, idx, table: register(table, run, src, src_rs, table, idx, idx_stride, rows, *trailing)), dtype


def run_mscatter(plan) -> None:
    """The scatter loop of the plan's walk over its table. A host table is registered as written for as long as the
    loop runs (:mod:`simt_pto.kernels.writers`), so that calls of any target from other threads lose no update: an
    Add loop is a plain read-modify-write of each element, so it runs as the only writer of the table's memory
    (waiting its turn); a store loop (atomic NONE) composes with atomics, as the A5 kernels' stores do."""
    atomic, fmt = store_policy(plan)
    view = store.source_dtype(atomic, fmt, plan.dtype)
    src = plan.tile
    flat = plan.table.host_flat()      # a view of host memory, a copy of device memory
    rule = IndexRule(plan.rule)
    walk_args = (plan, src.data.view(view), src.cols, flat.view(view),
                 lambda source: scatter_loop(source, rule, atomic, fmt))
    if plan.table.on_device:  # the loop updates a private host copy, published below
        walk.run_walk(*walk_args)
    elif atomic == ScatterAtomicOp.NONE:
        writers.write_shared(flat, walk.run_walk, *walk_args)
    else:
        writers.table_writers.run_exclusive(flat, walk.run_walk, *walk_args)
    write_back(plan, flat.view(plan.dtype.bits))     # device tables: publish the modified host copy
