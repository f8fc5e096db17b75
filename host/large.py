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

``target="a2a3"`` and ``"cpu"`` run the same tiles in order through the tile ops, so every result
has a golden. Arrays may be numpy, or (GPU backend) CuPy / PyTorch / Numba device arrays, which
stay on the device.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from simt_pto import aliasing, constraints, ub
from simt_pto.enums import (BLayout, Coalesce, GatherOOB, ScatterAtomicOp, ScatterConflict, ScatterOOB, from_any,
                            target_from_any)
from simt_pto.errors import ConstraintError
from simt_pto.tensor import GlobalTensor
from simt_pto.tile import Tile

from .arrays import WholeArray, to_host, wrap

DEFAULT_MAX_TILE_ROWS = 256
"""Default cap on rows per Row tile: more, smaller tiles give a GPU more blocks to run at once."""
DEFAULT_MAX_TILE_ELEMS = 4096
"""Default cap on elements per Elem tile (four per thread of a full 1024-thread block)."""
SLOT_PATH_MAX_WORK = 1 << 22
"""``last_path="auto"`` uses the slot-centric kernels while slots x sources stays below this."""


# -- tiling --------------------------------------------------------------------------------------------

def _round_up(n, unit):
    return -(-n // unit) * unit


def fit_tile_rows(tile_rows: int, tile_bytes, budget) -> int:
    """``tile_rows`` halved until the tiles of that many rows fit the UB: ``tile_bytes(rows) <= budget`` (no limit
    when ``budget`` is None), or one row."""
    limit = math.inf if budget is None else budget
    while tile_rows > 1 and tile_bytes(tile_rows) > limit:
        tile_rows = max(1, tile_rows // 2)
    return tile_rows


def default_tile_rows(coalesce, rows: int, cols: int, tile_bytes, budget) -> int:
    """Rows per tile when the caller names none (the whole-array ops and the coalescing analyzer): at most
    DEFAULT_MAX_TILE_ROWS (Row) or DEFAULT_MAX_TILE_ELEMS // cols (Elem) and ``rows``, then :func:`fit_tile_rows`."""
    cap = DEFAULT_MAX_TILE_ROWS if coalesce == Coalesce.ROW else max(1, DEFAULT_MAX_TILE_ELEMS // cols)
    return fit_tile_rows(min(rows, cap), tile_bytes, budget)


def _tiles_for(op, target, coalesce, dtype, idx_dtype, rows, cols, tile_rows, dyn_ubuf_size):
    """The data and index Tiles of one full tile (for validation) and the rows per tile."""
    def build(tr):
        if coalesce == Coalesce.ROW:
            data = Tile(dtype, tr, _round_up(cols, 32 // dtype.itemsize), valid=(tr, cols))
            idx = Tile(idx_dtype, 1, _round_up(tr, 8), valid=(1, tr))
        elif cols == 1:  # a 1-D element array: [R, 1] ColMajor tiles
            blayout = BLayout.COL_MAJOR if target == "a5" else BLayout.ROW_MAJOR
            unit = 32 // dtype.itemsize if target == "a5" else 1
            data = Tile(dtype, _round_up(tr, unit), 1 if target == "a5" else 32 // dtype.itemsize,
                        blayout=blayout, valid=(tr, 1))
            idx = Tile(idx_dtype, _round_up(tr, 8) if target == "a5" else tr, 1 if target == "a5" else 8,
                       blayout=blayout, valid=(tr, 1))
        else:
            data = Tile(dtype, tr, _round_up(cols, 32 // dtype.itemsize), valid=(tr, cols))
            idx = Tile(idx_dtype, tr, _round_up(cols, 8), valid=(tr, cols))
        return data, idx

    if tile_rows is None:
        tile_rows = default_tile_rows(coalesce, rows, cols, lambda tr: sum(t.nbytes for t in build(tr)),
                                      ub.budget(op, target, dyn_ubuf_size))
    elif isinstance(tile_rows, bool) or not isinstance(tile_rows, (int, np.integer)) or tile_rows < 1:
        raise TypeError(f"tile_rows must be a positive int, got {tile_rows!r}")
    tile_rows = min(int(tile_rows), rows)
    return (*build(tile_rows), tile_rows)


def _check_indices(op, target, idx: WholeArray, capacity, rule, strict):
    """UNDEFINED under strict: refuse out-of-range indices before anything is written."""
    from simt_pto.policy import IDENTITY
    if rule != IDENTITY:
        return
    if idx.device:
        bad_count, first = _device_bad_indices(idx, capacity)
        if bad_count:
            host = to_host(idx).reshape(-1)
            raise constraints.out_of_range(op, target, capacity, [first], [int(host[first]) & 0xFFFFFFFF], bad_count)
        return
    raw = to_host(idx).reshape(-1).view(np.uint32)  # the ISA's cast: -1 is 4294967295
    if int(raw.max()) < capacity:  # one pass, no temporaries: positions are built only on failure
        return
    bad = np.flatnonzero(raw >= capacity)
    raise constraints.out_of_range(op, target, capacity, bad[:5].tolist(), raw[bad[:5]].tolist(), int(bad.size))


def _device_bad_indices(idx: WholeArray, capacity):
    from numba import cuda
    from simt_pto.kernels.a5.validate import count_out_of_range
    dev = cuda.as_cuda_array(idx.obj).reshape(idx.size)
    out = cuda.to_device(np.array([0, idx.size], dtype=np.int64))
    count_out_of_range[max(1, min(1024, -(-idx.size // 1024))), 1024](dev, capacity, out)
    count, first = out.copy_to_host()
    return int(count), int(first)


def _prepare(op, target, table, idx, coalesce, tile_rows, dyn_ubuf_size, strict, plan_fn, dtype, check=None):
    """Wrap and validate a whole-array call: the arrays, then ``check(table, idx)`` (the call's own operands),
    then the target's rules (the plan of one full tile) and the indices."""
    target = target_from_any(target)
    coalesce = from_any(Coalesce, coalesce, "coalesce")
    table_a = wrap(table, "table", dtype, two_d_only=coalesce == Coalesce.ROW)
    idx_a = wrap(idx, "idx")
    if coalesce == Coalesce.ROW and idx_a.cols != 1:
        raise ConstraintError(op, target, "Row: a 1-D index array (one index per row)", f"idx has shape {idx_a.shape}")
    if check is not None:
        check(table_a, idx_a)
    cols = table_a.cols if coalesce == Coalesce.ROW else max(idx_a.cols, 1)
    # an empty index array is validated as one row (the call's rules), then runs nothing
    data_tile, idx_tile, tile_rows = _tiles_for(op, target, coalesce, table_a.dtype, idx_a.dtype, max(idx_a.rows, 1),
                                                cols, tile_rows, dyn_ubuf_size)
    # Row: the 2-D table as it is; Elem: the table as one flat run of elements.
    shape = table_a.shape if coalesce == Coalesce.ROW else (table_a.size,)
    gt = GlobalTensor(table_a.obj, shape=shape, dtype=table_a.dtype)
    plan = plan_fn(target, gt, data_tile, idx_tile, coalesce, strict, dyn_ubuf_size)
    if idx_a.size:
        _check_indices(op, target, idx_a, plan.capacity, plan.rule, strict)
    return target, coalesce, table_a, idx_a, tile_rows, plan


def gather(table, idx, *, coalesce="row", oob="undefined", target="a5", tile_rows=None, dyn_ubuf_size=None,
           strict=True, dtype=None):
    """Gather a whole array: ``table[idx]`` rows (Row; ``table`` 2-D, ``idx`` 1-D) or elements (Elem;
    ``idx`` 1-D or 2-D into the flattened table), with the A5 semantics of MGATHER tile by tile.

    Indices are cast to uint32 and remapped by ``oob`` exactly as the tile op does. Returns a new array
    (numpy for numpy inputs; on the GPU backend a device array of the table's kind otherwise).
    ``dtype`` reinterprets the table's elements (e.g. ``"bfloat16"`` over a uint16 device array).
    """
    oob = from_any(GatherOOB, oob, "oob")

    def plan_fn(target, gt, data_tile, idx_tile, coalesce, strict, dyn):
        return constraints.plan_mgather(target, data_tile, gt, idx_tile, coalesce, oob,
                                        constraints.GatherExec.SCALAR, None, strict, dyn)

    target, coalesce, table_a, idx_a, tile_rows, plan = _prepare(
        "MGATHER", target, table, idx, coalesce, tile_rows, dyn_ubuf_size, strict, plan_fn, dtype)
    out_shape = (idx_a.rows, table_a.cols) if coalesce == Coalesce.ROW else idx_a.shape
    out_cols = table_a.cols if coalesce == Coalesce.ROW else idx_a.cols
    if idx_a.size == 0:
        return np.zeros(out_shape, dtype=table_a.dtype.numpy)
    if target == "a5":
        from . import large_a5
        return large_a5.gather(plan, table_a, idx_a, tile_rows, out_shape, out_cols)
    out = np.zeros((idx_a.rows, out_cols), dtype=table_a.dtype.numpy)
    host_table, host_idx = to_host(table_a), to_host(idx_a).reshape(idx_a.rows, idx_a.cols)
    for r0 in range(0, idx_a.rows, tile_rows):
        r1 = min(r0 + tile_rows, idx_a.rows)
        dst, it = _tile_pair(plan, host_idx[r0:r1], None, coalesce)
        from simt_pto.ops import mgather
        mgather(dst, _host_tensor(plan, host_table), it, coalesce=coalesce, oob=oob, target=target, strict=strict,
                dyn_ubuf_size=dyn_ubuf_size)
        out[r0:r1] = dst.valid_numpy()
    return out.reshape(out_shape)


def scatter(table, src, idx, *, coalesce="row", atomic="none", oob="undefined", conflict="last", target="a5",
            tile_rows=None, dyn_ubuf_size=None, strict=True, last_path="auto", dtype=None):
    """Scatter a whole array into ``table`` in place (Row: ``table[idx[r], :] op= src[r, :]``; Elem:
    ``table.flat[idx[i]] op= src[i]``), with the semantics of issuing MSCATTER tile by tile in order.
    Returns ``table``. ``last_path`` (Conflict::Last, atomic NONE on a5): ``"slot"``, ``"owner"`` or
    ``"auto"``; see the module docstring.
    """
    atomic = from_any(ScatterAtomicOp, atomic, "atomic")
    oob = from_any(ScatterOOB, oob, "oob")
    conflict = from_any(ScatterConflict, conflict, "conflict")
    if last_path not in ("auto", "slot", "owner"):
        raise ValueError(f"last_path: expected 'auto', 'slot' or 'owner', got {last_path!r}")

    def plan_fn(target, gt, data_tile, idx_tile, coalesce, strict, dyn):
        return constraints.plan_mscatter(target, gt, data_tile, idx_tile, coalesce, atomic, oob, conflict, strict, dyn)

    if target_from_any(target) == "cpu" and from_any(Coalesce, coalesce, "coalesce") == Coalesce.ROW:
        return _cpu_row_scatter(table, src, idx, atomic=atomic, oob=oob, conflict=conflict,
                                dyn_ubuf_size=dyn_ubuf_size, strict=strict, dtype=dtype)
    operands = {}

    def check_src(table_a, idx_a):  # the call's own operands, before the target's rules
        src_a = wrap(src, "src", dtype)
        row = from_any(Coalesce, coalesce, "coalesce") == Coalesce.ROW
        want = (idx_a.rows, table_a.cols) if row else (idx_a.rows, idx_a.cols)
        if (src_a.rows, src_a.cols) != want or src_a.dtype != table_a.dtype:
            raise ConstraintError("MSCATTER", target_from_any(target),
                                  "src matches idx (and the table row width, Row) and the table dtype",
                                  f"src {src_a.shape} {src_a.dtype}, expected {want} {table_a.dtype}")
        aliasing.check_disjoint("MSCATTER", target_from_any(target), {"table": table_a.obj},
                                {"src": src_a.obj, "idx": idx_a.obj})
        operands["src"] = src_a

    target, coalesce, table_a, idx_a, tile_rows, plan = _prepare(
        "MSCATTER", target, table, idx, coalesce, tile_rows, dyn_ubuf_size, strict, plan_fn, dtype, check_src)
    src_a = operands["src"]
    if idx_a.size == 0:
        return table
    if target == "cpu" and atomic != ScatterAtomicOp.NONE:
        warnings.warn(f"MSCATTER on cpu: atomic {atomic.name} is a plain replace on the CPU simulator "
                      "(MSCATTER.md, CPU Reference Form: 'Atomic is always plain replace'); target='a2a3' is the "
                      "sequential golden for atomics", UserWarning, stacklevel=2)
    if target == "a5":
        from . import large_a5
        large_a5.scatter(plan, table_a, src_a, idx_a, tile_rows, last_path, SLOT_PATH_MAX_WORK)
        return table
    host_table, host_src = to_host(table_a), to_host(src_a).reshape(src_a.rows, src_a.cols)
    host_idx = to_host(idx_a).reshape(idx_a.rows, idx_a.cols)
    gt = _host_tensor(plan, host_table)
    from simt_pto.ops import mscatter
    for r0 in range(0, idx_a.rows, tile_rows):
        r1 = min(r0 + tile_rows, idx_a.rows)
        st, it = _tile_pair(plan, host_idx[r0:r1], host_src[r0:r1], coalesce)
        mscatter(gt, st, it, coalesce=coalesce, atomic=atomic, oob=oob, conflict=conflict, target=target,
                 strict=strict, dyn_ubuf_size=dyn_ubuf_size)
    if table_a.device:
        from numba import cuda
        dev = cuda.as_cuda_array(table_a.obj)
        dev.copy_to_device(host_table.view(dev.dtype))
    return table


def _cpu_row_scatter(table, src, idx, *, atomic, oob, conflict, dyn_ubuf_size, strict, dtype):
    """A whole-array Row scatter on the ``cpu`` target: the CPU simulator's MSCATTER walks element-wise, so
    row ``r`` becomes the elements ``idx[r] * C + c`` of the flat table, scattered in the same order (MSCATTER.md,
    CPU Reference Form). Row indices are checked as rows first."""
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
    rows = to_host(idx_a).reshape(-1).view(np.uint32).astype(np.int64)  # the ISA's cast: -1 is 4294967295
    keep = rows < table_a.rows
    if not keep.all():
        bad = np.flatnonzero(~keep)
        if strict:  # the CPU simulator uses every index unchecked (it ignores ScatterOOB)
            raise constraints.out_of_range(op, "cpu", table_a.rows, bad[:5].tolist(), rows[bad[:5]].tolist(),
                                           int(bad.size))
    host_src = to_host(src_a).reshape(src_a.rows, src_a.cols)[keep]
    elem_idx = (rows[keep, None] * table_a.cols + np.arange(table_a.cols)).astype(np.uint32).reshape(-1)
    if elem_idx.size:
        scatter(table_a.obj.reshape(-1), np.ascontiguousarray(host_src).reshape(-1), elem_idx, coalesce="elem",
                atomic=atomic, oob=oob, conflict=conflict, target="cpu", dyn_ubuf_size=dyn_ubuf_size, strict=strict,
                dtype=table_a.dtype.name)
    return table


def _host_tensor(plan, host_table):
    return GlobalTensor(host_table, shape=plan.table.shape, stride=plan.table.stride, dtype=plan.dtype)


def _tile_pair(plan, idx_rows, data_rows, coalesce):
    """Tiles for one tile's worth of rows, shaped like the plan's (validated) full tiles."""
    proto_data, proto_idx = plan.tile, plan.idx
    n = idx_rows.shape[0]
    if coalesce == Coalesce.ROW:
        idx_rows, valid = idx_rows.reshape(1, n), (n, proto_data.valid_cols)
    else:
        valid = idx_rows.shape
    it = Tile.from_array(idx_rows, proto_idx.rows, proto_idx.cols, dtype=proto_idx.dtype, blayout=proto_idx.blayout)
    data = Tile(plan.dtype, proto_data.rows, proto_data.cols, blayout=proto_data.blayout, valid=valid)
    if data_rows is not None:
        data.set(data_rows)
    return data, it


__all__ = ["DEFAULT_MAX_TILE_ELEMS", "DEFAULT_MAX_TILE_ROWS", "default_tile_rows", "fit_tile_rows", "gather",
           "scatter"]
