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
golden. Arrays may be numpy, (GPU backend) CuPy / PyTorch / Numba device arrays, which stay on the device, or
any host array exporting DLPack or the array interface (PyTorch CPU tensors, JAX arrays), used in place
(:mod:`.arrays`: where a copy is made, and what a gather returns for each kind). Index arrays may be of any integer
dtype whose values lie in ``[-2**31, 2**32)``, and of any shape: Row gathers ``idx.shape + (C,)``, as
``F.embedding`` and ``jnp.take(table, idx, axis=0)`` do.

A call is validated before anything is written, then becomes one :class:`~simt_pto.launch_spec.CallPlan`.

* ``a5`` / ``a2a3``: the target's planner. The rules no shape changes are resolved once per policy and table dtype
  (:func:`simt_pto.constraints.validated_whole_array`: the UB budget, the dtype and atomic rules, the index rule);
  each shape adds only arithmetic (the tile view, :func:`simt_pto.host.tiling.tile_view`, and the table's capacity)
  and its indices as a whole (:func:`simt_pto.plan.check_indices`). The tile op's layout, mode and geometry rules
  hold by construction for the tiles a whole-array call is cut into; ``tests/test_whole_array_rules.py`` validates
  random calls' full tiles through them and compares. On ``a5`` the plan is the kernel launches of
  :mod:`.a5_planner`; on ``a2a3`` one host step per tile, each running the target's ND loop over the tile's rows
  straight from the caller's arrays (:func:`a2a3_gather_tile`, :func:`a2a3_scatter_tile`).
* ``cpu``, the reference: the tiles run as tile ops, so the call is validated as one full tile through the tile
  op's own rules (:func:`simt_pto.host.tiling.full_tiles`, ``constraints.validated_*``) plus its indices as a whole.
  The plan is one host step per tile, each running that validated plan, re-pointed at the tile
  (:func:`simt_pto.host.tiling.tile_plan`), on the CPU simulator (:func:`simt_pto.host.dispatch.runner`).

:func:`gather_plan` / :func:`scatter_plan` give that plan without running it. The validation depends on the call's
signature only (its :class:`~simt_pto.call.Policy` and the operands' kinds, shapes and dtypes): it is kept in the
signature's entry of :data:`simt_pto.plan.SIGNATURES` for host arrays. The operands' overlap and the index values are
checked on every call. A call of a signature that has run, with operands a kept launch takes as they are
(C-contiguous numpy, plain PyTorch CPU tensors, JAX arrays, other host producers of DLPack or the array interface),
skips even that: it runs the signature's kept launch (:mod:`.kept_launch`) on its own arrays, after the checks that
depend on them.
"""
from __future__ import annotations

import contextlib
import functools
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from simt_pto import aliasing, constraints, torch_rules
from simt_pto import backend as _backends
from simt_pto.backend import a5_backend, first_use, imported, require_jit
from simt_pto.call import Call, Operand, Policy, gather_policy, scatter_policy
from simt_pto.enums import Coalesce, GatherOOB, LastPath, OwnerLayout, ScatterAtomicOp, ScatterConflict, ScatterOOB
from simt_pto.errors import ConstraintError
from simt_pto.launch_spec import CallPlan, HostStep, LaunchSpec
from simt_pto.plan import SIGNATURES, Plan, check_indices
from simt_pto.policy import index_rule
from simt_pto.tensor import GlobalTensor

from . import dispatch, tiling, tuning
from .arrays import JAX, JAX_ZERO_COPY_ALIGNMENT, ArrayLike, DTypeArg, WholeArray, host_memory, like, to_host, wrap
from . import kept_launch
from .kept_launch import Entry, KeptLaunch, device_operands, whole_indices

TableT = TypeVar("TableT")

@dataclass
class _Validated:
    """A validated whole-array call: its arrays, the rows per tile and its plan (on ``cpu``, that of one full tile)."""

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
        check_indices(op, target, capacity, rule, idx.obj.reshape(-1).view(np.uint32))  # host: a numpy array


def _device_scan(idx: WholeArray, capacity):
    """``(count, first position, its uint32 value)`` of the out-of-range indices of a device index array, counted
    by the device kernel ``count_out_of_range`` (no copy of the indices to the host)."""
    cuda = imported("numba.cuda")  # a device array: numba.cuda is in real mode already
    with first_use:
        from simt_pto.kernels.a5.index_check import SCAN_BLOCK, count_out_of_range, scan_grid
    dev = cuda.as_cuda_array(idx.obj).reshape(idx.size)
    out = cuda.to_device(np.array([0, idx.size], dtype=np.int64))
    count_out_of_range[scan_grid(idx.size), SCAN_BLOCK](dev, capacity, out)
    count, first = (int(v) for v in out.copy_to_host())
    value = int(dev[first:first + 1].copy_to_host()[0]) & 0xFFFFFFFF if count else 0
    return count, first, value


def _signature(policy: Policy, table_a: WholeArray, idx_a: WholeArray) -> Call | None:
    """The call of wrapped host operands whose kept-launch key (:func:`~.kept_launch.whole_operands`) is None (a
    copy was due): its validation is kept under a key of its own (alignment -1). None for device arrays (validated
    every time)."""
    if table_a.device or idx_a.device:
        return None
    return Call(policy, (Operand(table_a.kind, table_a.shape, table_a.obj.dtype, table_a.obj.flags.writeable, -1),
                         Operand(idx_a.kind, idx_a.shape, idx_a.dtype.name, True, -1)))


def _prepare(policy: Policy, table, idx, plan_fn, check=None, key: Call | None = None) -> _Validated:
    """Wrap and validate a whole-array call of ``policy``: the arrays, then ``check(table, idx)`` (the call's own
    operands), then the target's rules (``a5`` / ``a2a3``: the planner's; ``cpu``: the plan of one full tile,
    ``plan_fn(policy, tensor, data tile, index tile)``) and the indices. The validation is kept in the call's entry
    of the signature cache (:class:`~.kept_launch.Entry`, under ``key``, the call as
    :func:`~.kept_launch.whole_operands` saw it, else :func:`_signature`'s)."""
    op, target, row = policy.op, policy.target, policy.coalesce == Coalesce.ROW
    table_a = wrap(table, "table", policy.dtype, two_d_only=row, op=op, target=target, written=op == "MSCATTER")
    idx_a = wrap(idx, "idx", op=op, target=target, rows_only=row)  # Row: one index per row, any shape
    src_a = None if check is None else check(table_a, idx_a)
    if key is None:
        key = _signature(policy, table_a, idx_a)
    entry = SIGNATURES.get(key)
    if entry is None:
        rows, cols = idx_a.rows, table_a.cols if row else idx_a.cols
        if target != "cpu":  # the target's planner: the shape-free rules once per (policy, dtype), then arithmetic
            if op == "MSCATTER" and not (table_a.device or table_a.obj.flags.writeable):  # (the rule raises)
                constraints.check_writable_table(op, target, False)
            rules = (SIGNATURES.lookup((constraints.WHOLE_ARRAY_RULES, policy, table_a.dtype.name))
                     or constraints.validated_whole_array(policy, table_a.dtype))
            view = tiling.tile_view(op, target, policy.coalesce, table_a.dtype, idx_a.dtype, rows, cols,
                                    policy.tile_rows, rules.ub_budget, policy.dyn_ubuf_size)
            tile_rows, tile_cols = view.tile_rows, view.cols
            # Row: the table's rows, each validCols long; Elem: the table as one flat run of elements
            capacity, row_stride = (table_a.rows, table_a.cols) if row else (table_a.size, 0)
            plan = rules.plan.repointed(capacity=capacity, row_stride=row_stride)
            if not table_a.device:
                SIGNATURES.put(key, Entry(tile_rows, plan, tile_cols))
        else:  # the CPU simulator (the reference) runs the tiles as tile ops: validated as one, by the tile op's rules
            tiles = tiling.full_tiles(op, target, policy.coalesce, table_a.dtype, idx_a.dtype, rows, cols,
                                      policy.tile_rows, policy.dyn_ubuf_size)
            # Row: the 2-D table as it is; Elem: the table as one flat run of elements.
            shape = table_a.shape if row else (table_a.size,)
            gt = GlobalTensor(table_a.obj, shape=shape, dtype=table_a.dtype)
            plan = plan_fn(policy, gt, tiles.data, tiles.idx)
            if not table_a.device:
                SIGNATURES.put(key, Entry(tiles.tile_rows, _weightless(plan), tiles.cols))
            tile_rows, tile_cols = tiles.tile_rows, tiles.cols
    else:
        tile_rows, tile_cols, plan = entry.tile_rows, entry.tile_cols, entry.plan
        if plan.table is not None:  # the cpu target's plan: its table re-pointed at this call's
            plan = plan.repointed(table=plan.table.repointed(table_a.obj))
    if not row and idx_a.cols != tile_cols:  # the Elem index (and source) seen as the tiles cut it: a flat run
        idx_a = idx_a.as_rows(idx_a.size, 1)
        src_a = None if src_a is None else src_a.as_rows(idx_a.size, 1)
    if idx_a.size:
        if plan.checks_range and not idx_a.device and np.may_share_memory(idx_a.obj, idx_a.memory):
            # the indices checked are the indices used: a private copy, whoever writes the caller's meanwhile
            idx_a = replace(idx_a, obj=idx_a.obj.copy(), copied=True)
        _check_indices(op, target, idx_a, plan.capacity, plan.rule)
    return _Validated(target, policy.coalesce, table_a, idx_a, tile_rows, plan, src_a)


def check_src_shape(op: str, target: str, src_shape: tuple, src_dtype, want: tuple, table_dtype) -> None:
    """The rule a scatter's ``src`` follows, in memory and on the Dask route: ``want`` (``idx.shape + (C,)``, Row;
    ``idx.shape``, Elem) up to axes of length 1, and the table's dtype."""
    def squeezed(shape):
        return [n for n in shape if n != 1]
    if squeezed(src_shape) != squeezed(want) or src_dtype != table_dtype:
        raise ConstraintError(op, target, "src matches idx (and the table row width, Row) and the table dtype",
                              f"src {src_shape} {src_dtype}, expected {want} {table_dtype}")


def _check_src(op, target, coalesce, src, dtype, table_a: WholeArray, idx_a: WholeArray) -> WholeArray:
    """A scatter's ``src``: ``idx.shape + (C,)`` (Row) or ``idx.shape`` (Elem), up to axes of length 1, of the
    table's dtype, sharing no memory with the table the call writes; seen as one row per index row."""
    src_a = wrap(src, "src", dtype, op=op, target=target)
    row = coalesce == Coalesce.ROW
    want = idx_a.shape + (table_a.cols,) if row else idx_a.shape
    check_src_shape(op, target, src_a.shape, src_a.dtype, want, table_a.dtype)
    aliasing.check_disjoint(op, target, {"table": _written_memory(table_a)}, {"src": src_a.memory,
                                                                               "idx": idx_a.memory})
    return src_a.as_rows(idx_a.rows, table_a.cols if row else idx_a.cols)


def _written_memory(table_a: WholeArray):
    """The memory a scatter writes: the caller's own, or for a JAX table the private copy it updates."""
    return table_a.obj if table_a.kind == JAX else table_a.memory


def _host_tensor(plan, host_table):
    return GlobalTensor(host_table, shape=plan.table.shape, stride=plan.table.stride, dtype=plan.dtype)


@functools.cache
def _a5_side():
    """(:mod:`.a5_planner`, :mod:`.a5_runner`), imported at the first ``a5`` call: the A5 side loads the kernels and Numba.
    Cached: an import statement in a function costs about a microsecond on every call."""
    with first_use:  # they load Numba and the kernels, maybe while another thread does too
        from . import a5_planner, a5_runner
    return a5_planner, a5_runner


def _backend(policy: Policy) -> str | None:
    """The A5 backend a call of ``policy`` runs on (None for the sequential targets): the one the process has
    resolved, read without a call once it has (:func:`simt_pto.backend.a5_backend` resolves it on the first call)."""
    if policy.target != "a5":
        return None
    return _backends._resolved or a5_backend()


def _run(call: CallPlan, target: str, backend: str | None = None) -> None:
    if target == "a5":
        _a5_side()[1].run_plan(call, backend)
        return
    with call.guard():
        for step in call.steps:
            step.run()


def _followed_by(call: CallPlan, step: HostStep) -> CallPlan:
    """``call``, then ``step``: after the call's guard too (a guard publishes the table's boundary words on exit,
    and the step may read them)."""
    if call.guard_name is None:
        return CallPlan(call.steps + (step,))

    @contextlib.contextmanager
    def guard_then_step():
        with call.guard():
            yield
        step.run()
    return CallPlan(call.steps, guard=guard_then_step, guard_name=f"{call.guard_name}; after it: {step.name}")


def _bumps_version(call: CallPlan, written: WholeArray) -> CallPlan:
    """``call`` inside a guard that, as the call leaves (finished or interrupted), bumps the version counter of the
    PyTorch tensor it writes (:attr:`~.arrays.WholeArray.versioned`), as torch's own in-place ops do
    (:func:`simt_pto.torch_rules.bump_version`): autograd then refuses to use a saved value the call overwrote."""
    if written.versioned is None or not call.steps:
        return call
    inner = call.guard

    @contextlib.contextmanager
    def guard():
        try:
            with inner():
                yield
        finally:
            torch_rules.bump_version(written.versioned)
    return CallPlan(call.steps, guard=guard, guard_name=_BUMP if call.guard_name is None else
                    f"{call.guard_name}; {_BUMP}")


_BUMP = "bump the written tensor's version counter (autograd) as the call leaves"
"""The guard :func:`_bumps_version` adds, by name: a kept launch bumps the counter itself
(:func:`.kept_launch.scattered`), so the launches under that guard alone are kept without it."""


# -- gather ------------------------------------------------------------------------------------------------

def _wrap_out(out, c: _Validated, out_shape, target, dtype) -> WholeArray:
    """A gather's ``out``: writable, of the gathered shape and the table's element dtype (``dtype`` reinterprets
    it as it does the table), sharing no memory with the table or the indices."""
    out_a = wrap(out, "out", dtype, op="MGATHER", target=target, written=True)
    if out_a.kind == JAX:
        raise TypeError("out: a JAX array cannot be written; leave out= unset and take the returned JAX array")
    if not out_a.device and not out_a.memory.flags.writeable:
        raise ConstraintError("MGATHER", target, "the out is written in place",
                              "out is a read-only array (flags.writeable is False)")
    if tuple(out_a.shape) != tuple(out_shape) or out_a.dtype != c.table.dtype:
        raise ConstraintError("MGATHER", target, "out has the gathered shape and the table's dtype",
                              f"out {tuple(out_a.shape)} {out_a.dtype}, expected {tuple(out_shape)} {c.table.dtype}")
    aliasing.check_disjoint("MGATHER", target, {"out": out_a.memory}, {"table": c.table.memory,
                                                                        "idx": c.idx.memory})
    return out_a


def _copy_into(out_a: WholeArray, result) -> None:
    """Copy a gathered result (host or device memory) into the caller's ``out`` bit for bit, then into its own
    elements where ``out`` was not contiguous."""
    bits = out_a.dtype.bits
    if isinstance(result, np.ndarray) and not out_a.device:
        out_a.obj.reshape(-1).view(bits)[...] = result.reshape(-1).view(bits)
    else:
        cuda = imported("numba.cuda")  # device memory on one side: numba.cuda is in real mode already
        if out_a.device:
            source = (np.ascontiguousarray(result).reshape(-1).view(bits) if isinstance(result, np.ndarray) else
                      cuda.as_cuda_array(result).reshape(out_a.size).view(bits))
            cuda.as_cuda_array(out_a.obj).reshape(out_a.size).view(bits).copy_to_device(source)
        else:
            cuda.as_cuda_array(result).reshape(out_a.size).view(bits).copy_to_host(out_a.obj.reshape(-1).view(bits))
    if out_a.copied:
        out_a.write_back()


def _validated_gather_tile(policy: Policy, gt, data_tile, idx_tile) -> Plan:
    return constraints.validated_mgather(policy, data_tile, gt, idx_tile)


def _gather(policy: Policy, table, idx, backend=None, out=None, key: Call | None = None):
    """``(plan, result, validated call)`` of a whole-array gather: validated, built, not run; ``result()`` after the
    run."""
    c = _prepare(policy, table, idx, _validated_gather_tile, key=key)
    row = c.coalesce == Coalesce.ROW
    out_shape = c.idx.shape + (c.table.cols,) if row else c.idx.shape
    out_cols = c.table.cols if row else c.idx.cols
    out_a = None if out is None else _wrap_out(out, c, out_shape, c.target, policy.dtype)
    if c.idx.size == 0:
        return CallPlan(()), (lambda: out) if out_a else (
            lambda: like(c.table, np.zeros(out_shape, dtype=c.table.dtype.numpy))), c
    if c.target == "a5":
        # a host out in place (no copy) where a host table gathers into it; a device table gathers on the device
        direct = out_a is not None and not out_a.device and not out_a.copied and not c.table.device
        dest = out_a.obj.reshape(-1).view(c.table.dtype.bits) if direct else None
        call, gathered = _a5_side()[0].gather_launches(c.plan, c.table, c.idx, c.tile_rows, out_cols, backend, dest)
        if out_a is None:
            return call, lambda: like(c.table, gathered().reshape(out_shape)), c
        if direct:
            return _bumps_version(call, out_a), lambda: out, c
        copy = HostStep("copy the gathered elements into out", lambda: _copy_into(out_a, gathered()))
        return _bumps_version(_followed_by(call, copy), out_a), lambda: out, c
    if out_a is not None and not out_a.device:  # the tiles write the caller's out (or its contiguous copy)
        dest = out_a.obj.reshape(-1).view(c.table.dtype.numpy).reshape(c.idx.rows, out_cols)
    else:
        dest = np.zeros((c.idx.rows, out_cols), dtype=c.table.dtype.numpy)
    host_idx = to_host(c.idx).reshape(c.idx.rows, c.idx.cols)
    if c.target == "a2a3":
        gather_tile = a2a3_gather_tile(c.plan, dest, to_host(c.table), host_idx.reshape(-1).view(np.uint32),
                                       c.idx.cols)
    else:
        gt = _host_tensor(c.plan, to_host(c.table))

        def gather_tile(r0, r1):
            tile = tiling.tile_plan(c.plan, host_idx[r0:r1], table=gt)
            dispatch.run_mgather(tile)
            dest[r0:r1] = tile.tile.valid_numpy()
    if out_a is None:
        return _tile_steps("MGATHER", c, gather_tile), lambda: like(c.table, dest.reshape(out_shape)), c
    after = ()
    if out_a.device or out_a.copied:
        after = (HostStep("copy the gathered elements into out", lambda: _copy_into(out_a, dest)),)
    return _bumps_version(_tile_steps("MGATHER", c, gather_tile, after), out_a), lambda: out, c


def a2a3_gather_tile(plan, dest: np.ndarray, table: np.ndarray, idx_bits: np.ndarray,
                     idx_cols: int) -> Callable[[int, int], None]:
    """The A2/A3 gather of rows ``[r0, r1)``: the walk of the validated ``plan``
    (:func:`simt_pto.kernels.a2a3.rows_gatherer`) writes them straight into the rows of ``dest`` (the 2-D result),
    from the host ``table``'s memory through the caller's indices (``idx_bits``, flat uint32, ``idx_cols`` per row),
    as the tile of those rows would hold them (every valid element is written: the gathered one, or ``T(0)``). The
    full path runs it tile by tile as host steps."""
    out_cols = dest.shape[1]
    gather_rows = dispatch.runner("a2a3").rows_gatherer(plan, out_cols)  # simt_pto.kernels.a2a3: loaded at first use
    bits = np.dtype(plan.dtype.bits)
    return _a2a3_tile(plan, gather_rows, dest.ravel().view(bits), out_cols, table.ravel().view(bits), idx_bits,
                      idx_cols)


def a2a3_scatter_tile(plan, table: np.ndarray, src: np.ndarray, idx_bits: np.ndarray,
                      idx_cols: int) -> Callable[[int, int], None]:
    """The A2/A3 scatter of rows ``[r0, r1)``: the ND loop of the validated ``plan``
    (:func:`simt_pto.kernels.a2a3.rows_scatterer`, registered as a writer of the table) stores them in order from the
    rows of ``src`` (the 2-D source) into the host ``table``'s memory through the caller's indices (``idx_bits``,
    flat uint32, ``idx_cols`` per row), as the tile op of those rows would. The full path runs it tile by tile as
    host steps; the kept launch runs it over every row at once (:func:`_a2a3_scatter_launch`)."""
    src_rs = src.shape[1]
    scatter_rows, view = dispatch.runner("a2a3").rows_scatterer(plan, src_rs)  # kernels.a2a3: loaded at first use
    return _a2a3_tile(plan, scatter_rows, src.ravel().view(view), src_rs, table.ravel().view(view), idx_bits,
                      idx_cols)


def _a2a3_tile(plan, walk_rows, data: np.ndarray, data_cols: int, table: np.ndarray, idx_bits: np.ndarray,
               idx_cols: int) -> Callable[[int, int], None]:
    """``run_tile(r0, r1)``: ``walk_rows`` (an A2/A3 row walk: ``walk_rows(data, data_rs, table, idx, idx_stride,
    rows)``) over rows ``[r0, r1)`` of the flat ``data`` (``data_cols`` per row) and of the flat uint32 ``idx_bits``
    (``idx_cols`` per row)."""
    idx_stride = 1 if plan.coalesce == Coalesce.ROW else idx_cols  # Row: one index per row; Elem: a row of them

    def run_tile(r0, r1):
        require_jit("a2a3")
        walk_rows(data[r0 * data_cols:r1 * data_cols], data_cols, table, idx_bits[r0 * idx_cols:r1 * idx_cols],
                  idx_stride, r1 - r0)
    return run_tile


def _tile_steps(op, c: _Validated, run_tile, after=()) -> CallPlan:
    """The sequential targets' plan: one host step per tile, in order (tile ``b``: rows ``[b * tile_rows, ...)`` of
    the call's 2-D view), then ``after``. A step names the flat C-order positions of the indices its tile takes."""
    rows, per_row = c.idx.rows, c.idx.cols if c.coalesce == Coalesce.ELEM else 1
    steps = [HostStep(f"{op} tile of indices [{r0 * per_row}, {min(r0 + c.tile_rows, rows) * per_row}) "
                      f"on {c.target}", lambda r0=r0: run_tile(r0, min(r0 + c.tile_rows, rows)))
             for r0 in tiling.tile_starts(rows, c.tile_rows)]
    return CallPlan(tuple(steps) + tuple(after))


def gather_plan(table: ArrayLike, idx: ArrayLike, *, coalesce: Coalesce | str = "row", oob: GatherOOB | str = "undefined",
                target: str = "a5", tile_rows: int | None = None, dyn_ubuf_size: int | None = None,
                strict: bool = True, dtype: DTypeArg = None, backend: str | None = None,
                out: ArrayLike | None = None) -> CallPlan:
    """What :func:`gather` with these arguments runs, validated and built but not run: on ``a5`` its kernel launch
    (:func:`simt_pto.host.a5_planner.gather_launches`, for ``backend``, default the current A5 backend), on ``a2a3`` /
    ``cpu`` one host step per tile, each naming the flat C-order positions of the indices it takes (and, with
    ``out``, the copy into it where one is needed); no step for an ``idx`` with no elements. The tiles are those
    :func:`gather` runs: ``tile_rows`` rows of one index each (Row), of ``idx``'s last axis, or of one element
    where an Elem ``idx`` is cut as one flat run (see :func:`gather`); on ``a5`` the launch's ``grid`` is the tile
    count and its ``tile_rows``, ``valid_rows``, ``valid_cols`` arguments that view. Raises what :func:`gather`
    raises for a call it refuses."""
    policy = gather_policy(coalesce, oob, target, tile_rows, dyn_ubuf_size, strict, dtype)
    return _gather(policy, table, idx, backend, out)[0]


def gather(table: ArrayLike, idx: ArrayLike, *, coalesce: Coalesce | str = "row", oob: GatherOOB | str = "undefined",
           target: str = "a5", tile_rows: int | None = None, dyn_ubuf_size: int | None = None, strict: bool = True,
           dtype: DTypeArg = None, out: ArrayLike | None = None) -> Any:
    """Gather a whole array with the A5 semantics of MGATHER, tile by tile (MGATHER.md, "Coalesce::Row",
    "Coalesce::Elem", "Out-of-Bounds Behaviour").

    * Row: ``out[p] = table[idx[p], :]`` for every position ``p`` of ``idx`` (any shape): ``idx`` of shape
      ``(B, L)`` gathers ``(B, L, C)`` from a ``(R, C)`` table, as ``F.embedding(idx, table)`` and
      ``jnp.take(table, idx, axis=0)`` do.
    * Elem: ``out[p] = table.flat[idx[p]]``: the result has ``idx``'s shape.

    Indices are cast to uint32 and remapped by ``oob`` exactly as the tile op does (-1 is 4294967295, where numpy
    would read the last row). ``idx`` may be of any integer dtype whose values lie in ``[-2**31, 2**32)`` (int64,
    as numpy, PyTorch and JAX make them): those behave exactly as the same values in int32 / uint32; a value
    outside is refused by value and position.

    Returns a new array of the table's kind: numpy for numpy (and any other host producer), a ``torch.Tensor``
    for a PyTorch tensor (bfloat16 too), a JAX array for a JAX array; on the GPU backend a device array of the
    table's kind. With ``out`` (any writable array of those kinds, of the gathered shape and the table's dtype,
    sharing no memory with ``table`` or ``idx``), the result is written there and ``out`` is returned.
    ``dtype`` reinterprets the table's elements (e.g. ``"bfloat16"`` over a uint16 device array).

    The call runs as tiles of ``tile_rows`` rows each (the last tile may hold fewer), in order; the result does not
    depend on ``tile_rows``. Row: a tile row is one index (one table row gathered). Elem: the indices are taken in
    C order, and a tile row is one row of ``idx``'s last axis while that row fits one default tile (at most
    4096 elements, :attr:`~.tuning.HostTuning.max_tile_elems`, within the target's UB budget); a 1-D ``idx``, and
    one whose last axis is longer, is cut as one flat run of elements: a tile row is then one element, so a tile
    holds ``tile_rows`` elements and splits rows of ``idx`` where it must (:func:`~.tiling.elem_tile_cols`).
    Unset, ``tile_rows`` is as many as fit the target's UB (``dyn_ubuf_size`` on ``a5``), at most 256 Row indices
    or 4096 Elem elements. Tiles that cannot fit are refused, naming what would make them fit. An ``idx`` with no
    elements (a 0 anywhere in its shape) gathers nothing: the result is an empty array of the gathered shape
    (``out``, where given, is returned untouched).

    """
    return gather_with(gather_policy(coalesce, oob, target, tile_rows, dyn_ubuf_size, strict, dtype), table, idx, out)


def gather_with(policy: Policy, table: ArrayLike, idx: ArrayLike, out: ArrayLike | None = None) -> Any:
    """:func:`gather` of a normalised policy (:func:`simt_pto.call.gather_policy`, made once at the API boundary):
    a call of a signature that has run takes its kept launch (:func:`.kept_launch.gathered`) unless a per-call check
    sends it down the full path (:func:`full_gather`)."""
    if out is None:
        gathered = kept_launch.gathered(policy, table, idx)
        if gathered is not None:
            return gathered
    return full_gather(policy, table, idx, out)


def full_gather(policy: Policy, table: ArrayLike, idx: ArrayLike, out: ArrayLike | None = None) -> Any:
    """The full path of a gather: wrapped, validated (the validation kept in the signature's entry),
    built and run; then its launches kept in that entry for the next call of the signature."""
    key = _kept_key(policy, table, idx) if out is None else _kept_into_key(policy, table, idx, out)
    backend = _backend(policy)
    call, result, c = _gather(policy, table, idx, backend, out, key)
    written = None if out is None else _host_out(out)
    if written is None:
        _run(call, c.target, backend)
    else:  # the caller's out, which other calls may write too: registered as a composing writer (kernels/writers.py)
        imported("simt_pto.kernels.writers").write_shared(written, _run, call, c.target, backend)
    gathered = result()
    if out is None and c.idx.size:
        _keep_gather(policy, key, c, call, gathered, table, idx)
    elif key is not None and c.idx.size:
        _keep_gather_into(policy, key, c, call, out)
    return gathered


def _host_out(out) -> np.ndarray | None:
    """The host memory of a gather's validated ``out`` (a numpy array, a PyTorch CPU tensor), or None (device memory,
    which no host writer shares, or another producer's array)."""
    if isinstance(out, np.ndarray):
        return out
    if torch_rules.torch_of(out) is not None and out.device.type == "cpu":
        return host_memory(out.detach(), "out")[0]  # (DLPack: a bfloat16 tensor too, which numpy() refuses)
    return None


def _kept_into_key(policy: Policy, table, idx, out) -> Call | None:
    """:func:`_kept_key` of a gather into ``out`` (:func:`.kept_launch.into_operands`)."""
    if policy.target == "cpu":
        return None
    found = kept_launch.into_operands(policy, table, idx, out)
    return None if found is None else found[0]


def _keep_gather_into(policy: Policy, key: Call, c: _Validated, call: CallPlan, out) -> None:
    """Keep the launch of a gather that has just run the full path into the caller's ``out`` (a numpy array or a
    PyTorch tensor, :func:`.kept_launch.into_operands`; on ``a5``, where
    its launch wrote ``out`` itself: a plan with a host step, a copy into ``out``, is not kept; on ``a2a3``, its row
    walk over every row, as :func:`_a2a3_gather_launch` keeps it, into ``out``). Its per-call checks:
    ``out`` shares no byte with the table or the index, and the indices, all of them before the launch (on
    ``multicore`` the launch of a new result checks them range by range as it runs, dropping that result if one is
    out of range: ``out`` is the caller's, and would be left half written)."""
    keeps = kept_launch.keeping_backend(policy)
    entry = SIGNATURES.get(key)
    if keeps not in kept_launch.HOST_KEEPING or entry is None or entry.kept is not None:
        return
    if c.target != "a5":
        entry.kept = _a2a3_gather_launch(c, key.operands[-1].shape, key, into=True)
        return
    if call.guard_name == _BUMP:  # a PyTorch out's version bump: the kept launch bumps it itself
        call = CallPlan(call.steps)
    dst = out.reshape(-1) if isinstance(out, np.ndarray) else out.numpy().reshape(-1)
    operands = {"table": c.table.obj.reshape(-1), "idx": c.idx.obj.reshape(-1), "dst": dst}
    entry.kept = _a5_side()[1].keep_on_host(
        call, operands, keeps, apart=_INTO_APART,
        indices=whole_indices(c.plan, idx_dtype=key.operands[1].dtype, read_as_bits=keeps == "multicore",
                              launch_masks=keeps == "multicore"))


_INTO_APART = (("dst", "table"), ("dst", "idx"))
"""A gather into the caller's ``out``: the pairs of operands that may share no byte."""


def _kept_key(policy: Policy, table, idx, src=None) -> Call | None:
    """The call a kept launch would find its entry by (:func:`.kept_launch.whole_operands`), for a target that keeps
    launches; None otherwise (the full path then keys the validation by :func:`_signature`)."""
    if policy.target == "cpu":
        return None
    found = kept_launch.whole_operands(policy, table, idx, src)
    return None if found is None else found[0]


def _keep_gather(policy: Policy, key: Call | None, c: _Validated, call: CallPlan, gathered, table, idx) -> None:
    """Keep the launch of a gather that has just run the full path as ``call`` in its signature's entry."""
    keeps = kept_launch.keeping_backend(policy)
    if keeps in kept_launch.HOST_KEEPING and key is not None:
        entry = SIGNATURES.get(key)
        if entry is None or entry.kept is not None:
            return
        shape = tuple(gathered.shape)
        dtype = c.table.dtype.numpy
        size = math.prod(shape)
        alignment = _jax_result_alignment(key, size * dtype.itemsize)
        if c.target == "a5":  # (key.operands[-1]: the indices as the caller passes them, on every call of the key)
            # on multicore the launch checks the index range itself, on the threads that run it (its output is the
            # call's own, dropped if one is out of range): the indices step then only narrows them
            in_launch = keeps == "multicore" and c.plan.checks_range
            kept = _a5_side()[1].keep_on_host(
                call, {"table": c.table.obj.reshape(-1), "idx": c.idx.obj.reshape(-1)}, keeps, made=("dst",),
                made_as={"dst": (size, dtype)},  # the result's own dtype: each launch takes its view of it
                indices=whole_indices(c.plan, checks_range=not in_launch, idx_dtype=key.operands[-1].dtype,
                                      read_as_bits=keeps == "multicore", launch_masks=keeps == "multicore"),
                idx_capacity=c.plan.capacity if in_launch else None, result_alignment=alignment)
        else:
            kept = _a2a3_gather_launch(c, shape, key, result_alignment=alignment)
        if kept is not None:
            entry.out = (size, dtype, shape)
            entry.kept = kept
    elif keeps == "gpu" and c.table.device and c.idx.device:
        found = device_operands(policy, table, idx)
        if found is None or SIGNATURES.get(found[0]) is not None:
            return
        out_size = int(np.prod(gathered.shape, dtype=np.int64))
        kept = _a5_side()[1].keep_gpu(call, c.plan, ("dst", "idx", "table"), made={"dst": (out_size, None)})
        if kept is not None:
            entry = Entry(c.tile_rows, _weightless(c.plan), c.idx.cols)
            entry.kept, entry.out = kept, (out_size, None, tuple(gathered.shape))
            SIGNATURES.put(found[0], entry)


def _jax_result_alignment(key: Call, nbytes: int) -> int:
    """The byte boundary a repeated gather of ``key`` makes its result of ``nbytes`` at: JAX's own
    (:data:`.arrays.JAX_ZERO_COPY_ALIGNMENT`) for a JAX table's result of at least
    :attr:`~.tuning.HostTuning.jax_zero_copy_result_bytes`, so that JAX takes it without a copy; else 0 (anywhere)."""
    if key.operands[0].kind == JAX and nbytes >= tuning.current().jax_zero_copy_result_bytes:
        return JAX_ZERO_COPY_ALIGNMENT
    return 0


def _a2a3_gather_launch(c: _Validated, shape: tuple, key: Call, into: bool = False,
                        result_alignment: int = 0) -> KeptLaunch:
    """The kept launch of an ``a2a3`` gather: its row walk (:func:`simt_pto.kernels.a2a3.bound_gatherer`) over every
    row of the call at once (a gather's rows are independent: the tiles' order cannot show), from the caller's table
    and indices into a new result, or (``into``) into the caller's ``out``, ``arrays["dst"]``; ``result_alignment``:
    as :class:`.kept_launch.KeptLaunch` takes it."""
    plan = c.plan
    rows, idx_cols = c.idx.rows, c.idx.cols
    out_cols = math.prod(shape) // rows
    idx_stride = 1 if plan.coalesce == Coalesce.ROW else idx_cols
    launch = dispatch.runner("a2a3").bound_gatherer(plan, out_cols, out_cols, idx_stride, rows)
    bits = np.dtype(plan.dtype.bits)
    steps = ((launch, (("dst", bits), ("idx", np.dtype(np.uint32)), ("table", bits))),)
    indices = whole_indices(plan, idx_dtype=key.operands[1].dtype, launch_masks=True)
    if into:
        return KeptLaunch(steps, apart=_INTO_APART, indices=indices)
    # the result made in its own dtype (the same bytes): the walk views it as it takes it
    return KeptLaunch(steps, made={"dst": (rows * out_cols, np.dtype(c.table.dtype.numpy))}, indices=indices,
                      result_alignment=result_alignment)


def _a2a3_scatter_launch(c: _Validated, key: Call) -> KeptLaunch:
    """The kept launch of an ``a2a3`` scatter: its ND loop (:func:`simt_pto.kernels.a2a3.bound_scatterer`) over every
    row of the call at once, in order (the loop is sequential: one pass over the rows in order is the tiles in
    order), straight from the caller's source and indices into the caller's table."""
    plan = c.plan
    rows, src_rs = c.idx.rows, c.src.cols
    idx_stride = 1 if plan.coalesce == Coalesce.ROW else c.idx.cols
    launch, dtype = dispatch.runner("a2a3").bound_scatterer(plan, src_rs, src_rs, idx_stride, rows)
    view = np.dtype(dtype)
    return KeptLaunch(((launch, (("src", view), ("idx", np.dtype(np.uint32)), ("table", view))),),
                      apart=(("table", "src"), ("table", "idx")),
                      indices=whole_indices(plan, idx_dtype=key.operands[-1].dtype, launch_masks=True))


def _weightless(plan: Plan) -> Plan:
    """A validated plan without the call's arrays (what the signature's entry keeps): a planner's plan holds none."""
    if plan.tile is None:
        return plan
    return plan.repointed(tile=tiling.weightless(plan.tile), idx=tiling.weightless(plan.idx),
                          table=plan.table.repointed(None))


# -- scatter -----------------------------------------------------------------------------------------------

def _scatter_result(table_a: WholeArray) -> Callable[[], Any]:
    """What a scatter returns: the caller's table, updated in place; for a JAX table the updated copy as a new
    JAX array (JAX arrays cannot be written)."""
    if table_a.kind == JAX:
        return lambda: like(table_a, table_a.obj)
    return lambda: table_a.user


def _written_back(call: CallPlan, table_a: WholeArray) -> CallPlan:
    """``call``, then the write-back of a non-contiguous table's contiguous copy into the caller's elements, the two
    as the only writer of those elements (:func:`_written_alone`); for a PyTorch table, the bump of its version
    counter (:func:`_bumps_version`)."""
    if not table_a.copied or table_a.kind == JAX:
        return _bumps_version(call, table_a)
    return _bumps_version(_written_alone(_followed_by(call, HostStep(
        "copy the updated contiguous copy back into the table's own elements", table_a.write_back)), table_a), table_a)


def _written_alone(call: CallPlan, table_a: WholeArray) -> CallPlan:
    """``call``, which updates the private contiguous copy of the caller's table elements and writes it back over
    them, as the only writer of those elements (``enter_exclusive`` of :mod:`simt_pto.kernels.writers`): the copy is
    read from them once the call has its turn (:meth:`~.arrays.WholeArray.read_in`; :func:`~.arrays.wrap` leaves it
    unread), and the registration lasts until the write-back. Copy, update and write-back are a read-modify-write of
    every element, so an update another call (or thread, or target) made in between would be overwritten by the
    write-back."""
    inner = call.guard

    @contextlib.contextmanager
    def guard():
        registry = imported("simt_pto.kernels.writers").table_writers
        token = registry.token()
        try:
            registry.enter_exclusive(token, table_a.memory)
            table_a.read_in()
            with inner():
                yield
        finally:
            registry.leave_exclusive(token)
    name = "read the table's elements into its contiguous copy, as their only writer until the write-back"
    return CallPlan(call.steps, guard=guard, guard_name=name if call.guard_name is None else
                    f"{name}; {call.guard_name}")


def _validated_scatter_tile(policy: Policy, gt, data_tile, idx_tile) -> Plan:
    return constraints.validated_mscatter(policy, gt, data_tile, idx_tile)


def _scatter(policy: Policy, table, src, idx, backend=None, owner: OwnerLayout | None = None,
             key: Call | None = None) -> tuple[CallPlan, Callable[[], Any], _Validated | None]:
    """``(plan, result, validated call)`` of a whole-array scatter: validated, built, not run; ``result()`` after
    the run (the validated call: None for the ``cpu`` target's Row scatter, which runs as an Elem one)."""
    target, coalesce = policy.target, policy.coalesce
    if target == "cpu" and coalesce == Coalesce.ROW:  # the Row call is run as an Elem one, without its tiles
        return (*_cpu_row_scatter(policy, table, src, idx), None)

    def check_src(table_a, idx_a):  # the call's own operands, before the target's rules
        return _check_src("MSCATTER", target, coalesce, src, policy.dtype, table_a, idx_a)

    c = _prepare(policy, table, idx, _validated_scatter_tile, check_src, key)
    result = _scatter_result(c.table)
    if c.idx.size == 0:
        return CallPlan(()), result, c
    if c.target == "a5":
        return _written_back(_a5_side()[0].scatter_launches(
            c.plan, c.table, c.src, c.idx, c.tile_rows, policy.last_path, tuning.current().slot_path_max_work,
            backend, owner), c.table), result, c
    host_table = to_host(c.table)  # a copy of a device table, written back after the last tile
    host_src = to_host(c.src).reshape(c.src.rows, c.src.cols)
    host_idx = to_host(c.idx).reshape(c.idx.rows, c.idx.cols)
    if c.target == "a2a3":
        scatter_tile = a2a3_scatter_tile(c.plan, host_table, host_src, host_idx.reshape(-1).view(np.uint32),
                                         c.idx.cols)
    else:
        gt = _host_tensor(c.plan, host_table)

        def scatter_tile(r0, r1):
            dispatch.run_mscatter(tiling.tile_plan(c.plan, host_idx[r0:r1], host_src[r0:r1], table=gt))
    after = ()
    if c.table.device:
        def write_back():
            dev = imported("numba.cuda").as_cuda_array(c.table.obj)  # a device array: numba.cuda is loaded
            dev.copy_to_device(host_table.view(dev.dtype))
        after = (HostStep("copy the table back to the device", write_back),)
    return _written_back(_tile_steps("MSCATTER", c, scatter_tile, after), c.table), result, c


def scatter_plan(table: ArrayLike, src: ArrayLike, idx: ArrayLike, *, coalesce: Coalesce | str = "row",
                 atomic: ScatterAtomicOp | str = "none", oob: ScatterOOB | str = "undefined",
                 conflict: ScatterConflict | str = "last", target: str = "a5", tile_rows: int | None = None,
                 dyn_ubuf_size: int | None = None, strict: bool = True, last_path: str = "auto",
                 dtype: DTypeArg = None, backend: str | None = None, owner: str | None = None) -> CallPlan:
    """What :func:`scatter` with these arguments runs, validated and built but not run (nothing is written): on
    ``a5`` its kernel launches (:func:`simt_pto.host.a5_planner.scatter_launches`, for ``backend``, default the current
    A5 backend; ``owner`` forces the owner path's layout, ``"dense"`` or ``"compact"``), on ``a2a3`` / ``cpu`` one
    host step per tile (naming the flat C-order positions of the indices it takes; the tiles of :func:`gather`,
    ``tile_rows`` included); for a non-contiguous table, then the write-back of its contiguous copy; nothing for an
    ``idx`` with no elements. For a JAX table the plan updates a private copy (use :func:`scatter` for the result).
    Raises what :func:`scatter` raises for a call it refuses."""
    policy = scatter_policy(coalesce, atomic, oob, conflict, target, tile_rows, dyn_ubuf_size, strict, last_path, dtype)
    if owner is not None and not isinstance(owner, OwnerLayout):
        if owner not in ("dense", "compact"):
            raise ValueError(f"owner: expected 'dense', 'compact' or None, got {owner!r}")
        owner = OwnerLayout(owner)
    return _scatter(policy, table, src, idx, backend, owner)[0]


def scatter(table: TableT, src: ArrayLike, idx: ArrayLike, *, coalesce: Coalesce | str = "row",
            atomic: ScatterAtomicOp | str = "none", oob: ScatterOOB | str = "undefined",
            conflict: ScatterConflict | str = "last", target: str = "a5", tile_rows: int | None = None,
            dyn_ubuf_size: int | None = None, strict: bool = True, last_path: str = "auto",
            dtype: DTypeArg = None) -> TableT:
    """Scatter a whole array into ``table`` with the semantics of issuing MSCATTER tile by tile in order
    (MSCATTER.md, "Coalesce::Row", "Coalesce::Elem", "Tiled-Iteration Pattern").

    * Row: ``table[idx[p], :] op= src[p, :]`` for every position ``p`` of ``idx`` (any shape): ``src`` has shape
      ``idx.shape + (C,)``, e.g. ``(B, L, C)`` for ``idx`` of shape ``(B, L)``.
    * Elem: ``table.flat[idx[p]] op= src[p]``: ``src`` has ``idx``'s shape.

    ``idx`` and ``src`` are taken in C order: source position ``p`` is the flat C-order position in ``idx``, so
    under Conflict::Last the largest flat C-order position wins each slot (whatever the arrays' strides). Indices
    follow :func:`gather`'s rules (the uint32 cast; integer dtypes within ``[-2**31, 2**32)``).

    The table is updated in place and returned: a numpy array, a device array, a PyTorch tensor (through a view of
    its memory), any writable DLPack / array-interface producer; a non-contiguous table through a contiguous copy
    written back into its own elements. A JAX array cannot be written: the call leaves it unchanged and returns
    the updated table as a new JAX array. A read-only table is refused. ``last_path`` (Conflict::Last, atomic NONE
    on a5): ``"slot"``, ``"owner"`` or ``"auto"``; see the module docstring.

    ``tile_rows`` and the tiles are as in :func:`gather`: a tile row is one index (Row), one row of ``idx``'s last
    axis, or one element where an Elem ``idx`` is cut as one flat run (1-D, or a last axis longer than one default
    tile holds); tiles follow each other in C order of ``idx``, so whatever ``tile_rows``, the result is that of
    the in-order semantics above (Conflict::Last: the last writer in C order of ``idx`` wins). An ``idx`` with no elements
    (a 0 anywhere in its shape, with ``src`` of the matching shape) writes nothing and returns the table.

    """
    return scatter_with(scatter_policy(coalesce, atomic, oob, conflict, target, tile_rows, dyn_ubuf_size, strict,
                                       last_path, dtype), table, src, idx)


def scatter_with(policy: Policy, table: TableT, src: ArrayLike, idx: ArrayLike) -> TableT:
    """:func:`scatter` of a normalised policy (:func:`simt_pto.call.scatter_policy`, made once at the API
    boundary): a call of a signature that has run takes its kept launch (:func:`.kept_launch.scattered`) unless a
    per-call check sends it down the full path (:func:`full_scatter`)."""
    if kept_launch.scattered(policy, table, src, idx):
        return table
    return full_scatter(policy, table, src, idx)


def full_scatter(policy: Policy, table: TableT, src: ArrayLike, idx: ArrayLike) -> TableT:
    """The full path of a scatter (see :func:`full_gather`)."""
    key = _kept_key(policy, table, idx, src)
    backend = _backend(policy)
    call, result, c = _scatter(policy, table, src, idx, backend, key=key)
    if policy.target == "cpu" and policy.atomic != ScatterAtomicOp.NONE and call.steps:
        warnings.warn(f"MSCATTER on cpu: atomic {policy.atomic.name} is a plain replace on the CPU simulator "
                      "(MSCATTER.md, CPU Reference Form: 'Atomic is always plain replace'); target='a2a3' is the "
                      "sequential golden for atomics", UserWarning, stacklevel=3)
    _run(call, policy.target, backend)
    updated: TableT = result()
    if c is not None and c.idx.size:
        _keep_scatter(policy, key, c, call, table, src, idx)
    return updated


def _keep_scatter(policy: Policy, key: Call | None, c: _Validated, call: CallPlan, table, src, idx) -> None:
    """Keep the launches of a scatter that has just run the full path as ``call`` in its signature's entry: ``a5``
    (its launches), ``a2a3`` (its loop over every row in order, :func:`_a2a3_scatter_launch`)."""
    keeps = kept_launch.keeping_backend(policy) if policy.target != "cpu" else None
    if policy.target == "a2a3":
        entry = SIGNATURES.get(key) if key is not None and not c.table.device else None
        if entry is not None and entry.kept is None and not c.table.copied:
            entry.kept = _a2a3_scatter_launch(c, key)
        return
    if keeps in kept_launch.HOST_KEEPING and key is not None:
        entry = SIGNATURES.get(key)
        if entry is None or entry.kept is not None:
            return
        if call.guard_name == _BUMP:  # a PyTorch table's version bump: the kept launch bumps it itself
            call = CallPlan(call.steps)
        # a launch that checks the index range itself (the Conflict::Last claim's refused flags): no range pass
        refuses = any(isinstance(spec, LaunchSpec) and "refused" in spec.arguments for spec in call.steps)
        entry.kept = _a5_side()[1].keep_on_host(
            call, {"table": c.table.obj.reshape(-1), "src": c.src.obj.reshape(-1), "idx": c.idx.obj.reshape(-1)},
            keeps, made=("owner", "refused"), apart=(("table", "src"), ("table", "idx")),
            indices=whole_indices(c.plan, checks_range=not refuses, idx_dtype=key.operands[-1].dtype,
                                  read_as_bits=keeps == "multicore", launch_masks=keeps == "multicore"))
    elif keeps == "gpu" and c.table.device and c.idx.device and c.src.device:
        found = device_operands(policy, table, idx, src)
        if found is None or SIGNATURES.get(found[0]) is not None or not _takes_whole(call, found[1]):
            return
        kept = _a5_side()[1].keep_gpu(call, c.plan, ("table", "idx", "src"), apart=(("table", "idx"), ("table", "src")))
        if kept is not None:
            entry = Entry(c.tile_rows, _weightless(c.plan), c.idx.cols)
            entry.kept = kept
            SIGNATURES.put(found[0], entry)


def _takes_whole(call: CallPlan, pointers: dict) -> bool:
    """Whether ``call`` is launches alone, each taking each device operand it takes whole (its view of it, both views
    of a float32 Max / Min's pair, starts at the operand's pointer and spans its bytes), every operand taken by
    one of them: what :func:`.a5_runner.keep_gpu` can put each call's pointers into."""
    if not call.steps or not all(isinstance(step, LaunchSpec) for step in call.steps):
        return False
    taken = set()
    for spec in call.steps:
        arguments = spec.arguments
        for name, operand in pointers.items():
            if name not in arguments:
                continue
            taken.add(name)
            views = arguments[name]
            for view in views if isinstance(views, tuple) else (views,):
                if not hasattr(view, "device_ctypes_pointer") or (
                        view.device_ctypes_pointer.value, view.size * view.dtype.itemsize) != operand:
                    return False
    return taken == set(pointers)


def _cpu_row_scatter(policy: Policy, table, src, idx):
    """``(plan, result)`` of a whole-array Row scatter on the ``cpu`` target: the CPU simulator's MSCATTER walks
    element-wise, so row ``r`` becomes the elements ``idx[r] * C + c`` of the flat table, scattered in the same order
    (MSCATTER.md, CPU Reference Form). Row indices are checked as rows first (the CPU simulator ignores ScatterOOB:
    out-of-range rows are refused under ``strict``, else dropped)."""
    op, dtype = "MSCATTER", policy.dtype
    table_a = wrap(table, "table", dtype, two_d_only=True, op=op, target="cpu", written=True)
    idx_a = wrap(idx, "idx", op=op, target="cpu", rows_only=True)
    src_a = _check_src(op, "cpu", Coalesce.ROW, src, dtype, table_a, idx_a)
    result = _scatter_result(table_a)
    if table_a.size >= 2 ** 32:
        raise ConstraintError(op, "cpu", "a Row scatter on cpu addresses the flat table with uint32 indices",
                              f"table has {table_a.size} elements")
    # the ISA's cast (-1 is 4294967295), in a copy: the rows checked are the rows used, whoever writes idx meanwhile
    bits = to_host(idx_a).reshape(-1).view(np.uint32).copy()
    check_indices(op, "cpu", table_a.rows, index_rule(ScatterOOB.UNDEFINED, policy.strict), bits)
    rows = bits.astype(np.int64)
    keep = rows < table_a.rows
    host_src = to_host(src_a).reshape(src_a.rows, src_a.cols)[keep]
    elem_idx = (rows[keep, None] * table_a.cols + np.arange(table_a.cols)).astype(np.uint32).reshape(-1)
    # (no row left still runs the Elem call: its rules, the dtypes and a writable table, hold for an empty call too)
    elem = policy._replace(coalesce=Coalesce.ELEM, tile_rows=None, last_path=LastPath.AUTO, dtype=table_a.dtype)
    call, _, _ = _scatter(elem, table_a.obj.reshape(-1), np.ascontiguousarray(host_src).reshape(-1), elem_idx)
    return _written_back(call, table_a), result


__all__ = ["full_gather", "full_scatter", "gather", "gather_plan", "gather_with", "scatter", "scatter_plan", "scatter_with"]
