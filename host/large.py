"""Whole-array gather / scatter: large shapes split into UB-sized tiles, one A5 block per tile.

A kernel author splits a large gather or scatter into tiles that fit the A5 unified buffer (128 KB
without ``dyn_ubuf_size``, up to 216 KB with it) and issues MGATHER / MSCATTER per tile on one core
(MSCATTER.md, "Tiled-Iteration Pattern"). Here every tile runs the same A5 SIMT kernel, with its
``dim3(32, kLaunchWarps)`` block geometry, as one block of one multi-block launch (one block = one AIV
core). The result is that of issuing the tiles in order:

* gather: every output row / element has exactly one source, so order does not matter;
* scatter, atomics: the writes of all tiles compose (add, max, min), as hardware atomics do;
* scatter, Conflict::Default: any colliding writer survives;
* scatter, Conflict::Last: the globally largest flat source index wins each slot. Blocks run
  concurrently, so the per-tile slot-centric kernels are issued one tile after the other
  (``last_path="slot"``), or the owner-based path claims each slot for its largest source index with
  an atomic max and then writes each slot from its owner (``last_path="owner"``): bitwise identical,
  O(sources) work instead of O(slots x sources). ``"auto"`` picks by that cost.

``target="a2a3"`` and ``"cpu"`` run the same tiles in order on the target's own code, so every result has a
golden. Arrays may be numpy, or (GPU backend) CuPy / PyTorch / Numba device arrays, which stay on the device.

A call is validated once, as one full tile (:func:`simt_pto.host.tiling.full_tiles`, ``constraints.plan_*``)
plus its indices as a whole (:func:`simt_pto.plan.check_indices`), before anything is written. Then it becomes
one :class:`~simt_pto.launch_spec.CallPlan`: on ``a5`` the kernel launches of :mod:`.large_a5`; on the
sequential targets one host step per tile, each running that validated plan, re-pointed at the tile
(:func:`simt_pto.host.tiling.tile_plan`), on the target (:func:`simt_pto.host.dispatch.runner`). :func:`gather_plan`
/ :func:`scatter_plan` give that plan without running it.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from simt_pto import aliasing, constraints
from simt_pto.enums import (Coalesce, GatherOOB, ScatterAtomicOp, ScatterConflict, ScatterOOB, from_any,
                            target_from_any)
from simt_pto.errors import ConstraintError
from simt_pto.launch_spec import CallPlan, HostStep
from simt_pto.plan import Plan, check_indices
from simt_pto.policy import index_rule
from simt_pto.tensor import GlobalTensor

from . import dispatch, tiling
from .arrays import WholeArray, to_host, wrap

SLOT_PATH_MAX_WORK = 1 << 22
"""``last_path="auto"`` uses the slot-centric kernels while slots x sources stays below this."""
LAST_PATHS = ("auto", "slot", "owner")


@dataclass
class _Call:
    """A validated whole-array call: its arrays, the rows per tile and the plan of one full tile."""

    target: str
    coalesce: Coalesce
    table: WholeArray
    idx: WholeArray
    tile_rows: int
    plan: Plan
    src: WholeArray | None = None


# -- validation --------------------------------------------------------------------------------------------

def _check_indices(op, target, idx: WholeArray, capacity, rule):
    """Refuse out-of-range indices before anything is written (:func:`simt_pto.plan.check_indices`, on the whole
    index array: counted on the device for a device array)."""
    if idx.device:
        check_indices(op, target, capacity, rule, scan=lambda: _device_scan(idx, capacity))
    else:
        check_indices(op, target, capacity, rule, to_host(idx).reshape(-1).view(np.uint32))


def _device_scan(idx: WholeArray, capacity):
    """``(count, first position, its uint32 value)`` of the out-of-range indices of a device index array, counted
    by the device kernel ``count_out_of_range`` (no copy of the indices to the host)."""
    from numba import cuda  # a device array: numba.cuda is in real mode already
    from simt_pto.kernels.a5.index_check import count_out_of_range
    dev = cuda.as_cuda_array(idx.obj).reshape(idx.size)
    out = cuda.to_device(np.array([0, idx.size], dtype=np.int64))
    count_out_of_range[max(1, min(1024, -(-idx.size // 1024))), 1024](dev, capacity, out)
    count, first = (int(v) for v in out.copy_to_host())
    value = int(dev[first:first + 1].copy_to_host()[0]) & 0xFFFFFFFF if count else 0
    return count, first, value


def _prepare(op, target, table, idx, coalesce, tile_rows, dyn_ubuf_size, plan_fn, dtype, check=None) -> _Call:
    """Wrap and validate a whole-array call: the arrays, then ``check(table, idx)`` (the call's own operands),
    then the target's rules (the plan of one full tile) and the indices."""
    target = target_from_any(target)
    coalesce = from_any(Coalesce, coalesce, "coalesce")
    table_a = wrap(table, "table", dtype, two_d_only=coalesce == Coalesce.ROW)
    idx_a = wrap(idx, "idx")
    if coalesce == Coalesce.ROW and idx_a.cols != 1:
        raise ConstraintError(op, target, "Row: a 1-D index array (one index per row)", f"idx has shape {idx_a.shape}")
    src_a = None if check is None else check(table_a, idx_a)
    cols = table_a.cols if coalesce == Coalesce.ROW else max(idx_a.cols, 1)
    # an empty index array is validated as one row (the call's rules), then runs nothing
    data_tile, idx_tile, tile_rows = tiling.full_tiles(op, target, coalesce, table_a.dtype, idx_a.dtype,
                                                       max(idx_a.rows, 1), cols, tile_rows, dyn_ubuf_size)
    # Row: the 2-D table as it is; Elem: the table as one flat run of elements.
    shape = table_a.shape if coalesce == Coalesce.ROW else (table_a.size,)
    gt = GlobalTensor(table_a.obj, shape=shape, dtype=table_a.dtype)
    plan = plan_fn(target, gt, data_tile, idx_tile, coalesce)
    if idx_a.size:
        _check_indices(op, target, idx_a, plan.capacity, plan.rule)
    return _Call(target, coalesce, table_a, idx_a, tile_rows, plan, src_a)


def _host_tensor(plan, host_table):
    return GlobalTensor(host_table, shape=plan.table.shape, stride=plan.table.stride, dtype=plan.dtype)


def _run(call: CallPlan, target: str) -> None:
    if target == "a5":
        from .a5 import run_plan  # the A5 side loads the kernels and Numba: only for target a5
        run_plan(call)
        return
    with call.guard():
        for step in call.steps:
            step.run()


# -- gather ------------------------------------------------------------------------------------------------

def _gather(table, idx, coalesce, oob, target, tile_rows, dyn_ubuf_size, strict, dtype, backend=None):
    """``(plan, result)`` of a whole-array gather: validated, built, not run; ``result()`` after the run."""
    oob = from_any(GatherOOB, oob, "oob")

    def plan_fn(target, gt, data_tile, idx_tile, coalesce):
        return constraints.plan_mgather(target, data_tile, gt, idx_tile, coalesce, oob,
                                        constraints.GatherExec.SCALAR, None, strict, dyn_ubuf_size)

    c = _prepare("MGATHER", target, table, idx, coalesce, tile_rows, dyn_ubuf_size, plan_fn, dtype)
    row = c.coalesce == Coalesce.ROW
    out_shape = (c.idx.rows, c.table.cols) if row else c.idx.shape
    out_cols = c.table.cols if row else c.idx.cols
    if c.idx.size == 0:
        return CallPlan(()), lambda: np.zeros(out_shape, dtype=c.table.dtype.numpy)
    if c.target == "a5":
        from . import large_a5  # the A5 side loads the kernels and Numba: only for target a5
        call, gathered = large_a5.gather_plan(c.plan, c.table, c.idx, c.tile_rows, out_cols, backend)
        return call, lambda: gathered().reshape(out_shape)
    out = np.zeros((c.idx.rows, out_cols), dtype=c.table.dtype.numpy)
    gt = _host_tensor(c.plan, to_host(c.table))
    host_idx = to_host(c.idx).reshape(c.idx.rows, c.idx.cols)

    def gather_tile(r0, r1):
        tile = tiling.tile_plan(c.plan, host_idx[r0:r1], table=gt)
        dispatch.run_mgather(tile)
        out[r0:r1] = tile.tile.valid_numpy()
    return _tile_steps("MGATHER", c, gather_tile), lambda: out.reshape(out_shape)


def _tile_steps(op, c: _Call, run_tile, after=()) -> CallPlan:
    """The sequential targets' plan: one host step per tile, in order (tile ``b``: rows ``[b * tile_rows, ...)``),
    then ``after``."""
    rows = c.idx.rows
    steps = [HostStep(f"{op} tile [{r0}, {min(r0 + c.tile_rows, rows)}) on {c.target}",
                      lambda r0=r0: run_tile(r0, min(r0 + c.tile_rows, rows)))
             for r0 in tiling.tile_starts(rows, c.tile_rows)]
    return CallPlan(tuple(steps) + tuple(after))


def gather_plan(table, idx, *, coalesce="row", oob="undefined", target="a5", tile_rows=None, dyn_ubuf_size=None,
                strict=True, dtype=None, backend=None) -> CallPlan:
    """What :func:`gather` with these arguments runs, validated and built but not run: on ``a5`` its kernel launch
    (:func:`simt_pto.host.large_a5.gather_plan`, for ``backend``, default the current A5 backend), on ``a2a3`` /
    ``cpu`` one host step per tile. Raises what :func:`gather` raises for a call it refuses."""
    return _gather(table, idx, coalesce, oob, target, tile_rows, dyn_ubuf_size, strict, dtype, backend)[0]


def gather(table, idx, *, coalesce="row", oob="undefined", target="a5", tile_rows=None, dyn_ubuf_size=None,
           strict=True, dtype=None):
    """Gather a whole array: ``table[idx]`` rows (Row; ``table`` 2-D, ``idx`` 1-D) or elements (Elem;
    ``idx`` 1-D or 2-D into the flattened table), with the A5 semantics of MGATHER tile by tile.

    Indices are cast to uint32 and remapped by ``oob`` exactly as the tile op does. Returns a new array
    (numpy for numpy inputs; on the GPU backend a device array of the table's kind otherwise).
    ``dtype`` reinterprets the table's elements (e.g. ``"bfloat16"`` over a uint16 device array).
    """
    call, result = _gather(table, idx, coalesce, oob, target, tile_rows, dyn_ubuf_size, strict, dtype)
    _run(call, target_from_any(target))
    return result()


# -- scatter -----------------------------------------------------------------------------------------------

def _scatter(table, src, idx, coalesce, atomic, oob, conflict, target, tile_rows, dyn_ubuf_size, strict,
             last_path, dtype, backend=None, owner=None) -> CallPlan:
    """The plan of a whole-array scatter: validated, built, not run."""
    atomic = from_any(ScatterAtomicOp, atomic, "atomic")
    oob = from_any(ScatterOOB, oob, "oob")
    conflict = from_any(ScatterConflict, conflict, "conflict")
    if last_path not in LAST_PATHS:
        raise ValueError(f"last_path: expected 'auto', 'slot' or 'owner', got {last_path!r}")
    target = target_from_any(target)
    coalesce = from_any(Coalesce, coalesce, "coalesce")
    if target == "cpu" and coalesce == Coalesce.ROW:
        return _cpu_row_scatter(table, src, idx, atomic=atomic, oob=oob, conflict=conflict,
                                dyn_ubuf_size=dyn_ubuf_size, strict=strict, dtype=dtype)

    def plan_fn(target, gt, data_tile, idx_tile, coalesce):
        return constraints.plan_mscatter(target, gt, data_tile, idx_tile, coalesce, atomic, oob, conflict, strict,
                                         dyn_ubuf_size)

    def check_src(table_a, idx_a):  # the call's own operands, before the target's rules
        src_a = wrap(src, "src", dtype)
        want = (idx_a.rows, table_a.cols) if coalesce == Coalesce.ROW else (idx_a.rows, idx_a.cols)
        if (src_a.rows, src_a.cols) != want or src_a.dtype != table_a.dtype:
            raise ConstraintError("MSCATTER", target, "src matches idx (and the table row width, Row) and the table dtype",
                                  f"src {src_a.shape} {src_a.dtype}, expected {want} {table_a.dtype}")
        aliasing.check_disjoint("MSCATTER", target, {"table": table_a.obj}, {"src": src_a.obj, "idx": idx_a.obj})
        return src_a

    c = _prepare("MSCATTER", target, table, idx, coalesce, tile_rows, dyn_ubuf_size, plan_fn, dtype, check_src)
    if c.idx.size == 0:
        return CallPlan(())
    if c.target == "a5":
        from . import large_a5  # the A5 side loads the kernels and Numba: only for target a5
        return large_a5.scatter_plan(c.plan, c.table, c.src, c.idx, c.tile_rows, last_path, SLOT_PATH_MAX_WORK,
                                     backend, owner)
    host_table = to_host(c.table)  # a copy of a device table, written back after the last tile
    gt = _host_tensor(c.plan, host_table)
    host_src = to_host(c.src).reshape(c.src.rows, c.src.cols)
    host_idx = to_host(c.idx).reshape(c.idx.rows, c.idx.cols)

    def scatter_tile(r0, r1):
        dispatch.run_mscatter(tiling.tile_plan(c.plan, host_idx[r0:r1], host_src[r0:r1], table=gt))
    after = ()
    if c.table.device:
        def write_back():
            from numba import cuda  # a device array: numba.cuda is in real mode already
            dev = cuda.as_cuda_array(c.table.obj)
            dev.copy_to_device(host_table.view(dev.dtype))
        after = (HostStep("copy the table back to the device", write_back),)
    return _tile_steps("MSCATTER", c, scatter_tile, after)


def scatter_plan(table, src, idx, *, coalesce="row", atomic="none", oob="undefined", conflict="last", target="a5",
                 tile_rows=None, dyn_ubuf_size=None, strict=True, last_path="auto", dtype=None, backend=None,
                 owner=None) -> CallPlan:
    """What :func:`scatter` with these arguments runs, validated and built but not run (nothing is written): on
    ``a5`` its kernel launches (:func:`simt_pto.host.large_a5.scatter_plan`, for ``backend``, default the current
    A5 backend; ``owner`` forces the owner path's layout, ``"dense"`` or ``"compact"``), on ``a2a3`` / ``cpu`` one
    host step per tile. Raises what :func:`scatter` raises for a call it refuses."""
    return _scatter(table, src, idx, coalesce, atomic, oob, conflict, target, tile_rows, dyn_ubuf_size, strict,
                    last_path, dtype, backend, owner)


def scatter(table, src, idx, *, coalesce="row", atomic="none", oob="undefined", conflict="last", target="a5",
            tile_rows=None, dyn_ubuf_size=None, strict=True, last_path="auto", dtype=None):
    """Scatter a whole array into ``table`` in place (Row: ``table[idx[r], :] op= src[r, :]``; Elem:
    ``table.flat[idx[i]] op= src[i]``), with the semantics of issuing MSCATTER tile by tile in order.
    Returns ``table``. ``last_path`` (Conflict::Last, atomic NONE on a5): ``"slot"``, ``"owner"`` or
    ``"auto"``; see the module docstring.
    """
    call = _scatter(table, src, idx, coalesce, atomic, oob, conflict, target, tile_rows, dyn_ubuf_size, strict,
                    last_path, dtype)
    target = target_from_any(target)
    if target == "cpu" and from_any(ScatterAtomicOp, atomic, "atomic") != ScatterAtomicOp.NONE and call.steps:
        warnings.warn(f"MSCATTER on cpu: atomic {from_any(ScatterAtomicOp, atomic, 'atomic').name} is a plain "
                      "replace on the CPU simulator (MSCATTER.md, CPU Reference Form: 'Atomic is always plain "
                      "replace'); target='a2a3' is the sequential golden for atomics", UserWarning, stacklevel=2)
    _run(call, target)
    return table


def _cpu_row_scatter(table, src, idx, *, atomic, oob, conflict, dyn_ubuf_size, strict, dtype) -> CallPlan:
    """The plan of a whole-array Row scatter on the ``cpu`` target: the CPU simulator's MSCATTER walks element-wise,
    so row ``r`` becomes the elements ``idx[r] * C + c`` of the flat table, scattered in the same order
    (MSCATTER.md, CPU Reference Form). Row indices are checked as rows first (the CPU simulator ignores ScatterOOB:
    out-of-range rows are refused under ``strict``, else dropped)."""
    op = "MSCATTER"
    table_a = wrap(table, "table", dtype, two_d_only=True)
    idx_a = wrap(idx, "idx")
    if idx_a.cols != 1:
        raise ConstraintError(op, "cpu", "Row: a 1-D index array (one index per row)", f"idx has shape {idx_a.shape}")
    src_a = wrap(src, "src", dtype)
    want = (idx_a.rows, table_a.cols)
    if (src_a.rows, src_a.cols) != want or src_a.dtype != table_a.dtype:
        raise ConstraintError(op, "cpu", "src matches idx (and the table row width, Row) and the table dtype",
                              f"src {src_a.shape} {src_a.dtype}, expected {want} {table_a.dtype}")
    aliasing.check_disjoint(op, "cpu", {"table": table_a.obj}, {"src": src_a.obj, "idx": idx_a.obj})
    if table_a.size >= 2 ** 32:
        raise ConstraintError(op, "cpu", "a Row scatter on cpu addresses the flat table with uint32 indices",
                              f"table has {table_a.size} elements")
    bits = to_host(idx_a).reshape(-1).view(np.uint32)  # the ISA's cast: -1 is 4294967295
    check_indices(op, "cpu", table_a.rows, index_rule(ScatterOOB.UNDEFINED, strict), bits)
    rows = bits.astype(np.int64)
    keep = rows < table_a.rows
    host_src = to_host(src_a).reshape(src_a.rows, src_a.cols)[keep]
    elem_idx = (rows[keep, None] * table_a.cols + np.arange(table_a.cols)).astype(np.uint32).reshape(-1)
    if not elem_idx.size:
        return CallPlan(())
    return _scatter(table_a.obj.reshape(-1), np.ascontiguousarray(host_src).reshape(-1), elem_idx, "elem", atomic,
                    oob, conflict, "cpu", None, dyn_ubuf_size, strict, "auto", table_a.dtype.name)


__all__ = ["LAST_PATHS", "SLOT_PATH_MAX_WORK", "gather", "gather_plan", "scatter", "scatter_plan"]
