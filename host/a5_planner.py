"""The A5 planner: a call, a tile op or a whole array, becomes the :class:`~simt_pto.launch_spec.CallPlan` its
launches run (the kernel launches, :class:`~simt_pto.launch_spec.LaunchSpec`, and the host steps: the ``(1, 1)``
Elem scalar fallbacks, the cube core's GM -> L1 walk and copy, the owner passes of Conflict::Last), which
:func:`simt_pto.host.a5_runner.run_plan` runs on an A5 backend (MGATHER.md / MSCATTER.md, "A5 Form",
"Performance Considerations — A5"). Every argument list of a launch is written here, once per kernel.

**Tile ops.** :func:`mgather_launches` / :func:`mscatter_launches` are what one ``pto.mgather`` / ``pto.mscatter``
launches: one block over the tile, with its strides (ColMajor and padded tiles), the L1 kernel
(:func:`mgather_l1_launches`) and the ``(1, 1)`` scalar fallbacks. ``simt-pto inspect`` compiles the same specs
without a GPU and the coalescing analyzer replays them.

**Whole arrays.** :func:`gather_launches` / :func:`scatter_launches` are what one ``pto.gather`` / ``pto.scatter``
launches, as multi-block launches of the same kernels. Block ``b`` of a tile launch runs tile ``b`` (rows
``[b * tile_rows, ...)`` of the call's 2-D view of the indices: index rows, or the elements of an Elem index cut as
one flat run in C order, :func:`simt_pto.host.tiling.tile_view`) with the geometry of one full tile: ``idx.rows`` /
``idx.cols`` below are that view. One call is one plan:

* gather: one launch, ``grid`` = the tiles;
* scatter, atomics or Conflict::Default: one launch, ``grid`` = the tiles;
* scatter, Conflict::Last, slot-centric (``last_path="slot"``): one launch per tile, in tile order;
* scatter, Conflict::Last, owner path, one owner per table slot (``dense``): reset, claim, write (each owner the
  winning source position, Elem flat);
* scatter, Conflict::Last, owner path, one owner per distinct slot reached (``compact``): the host numbers the
  distinct slots while the plan is built (the owner array and the launches are sized by their count), then
  reset, claim, write.

On the ``multicore`` backend an owner pass over few slots or updates runs on the calling thread alone, as one block
of one warp (:attr:`~.tuning.HostTuning.owner_reset_one_worker_slots`, :attr:`~.tuning.HostTuning.owner_claim_one_worker_updates`).

Device arrays are used in place; host arrays stay host arrays in the plan, and on the GPU backend
:func:`~simt_pto.host.a5_runner.run_plan` stages them on the device once per call and copies back the ones a launch
writes, inside the call's guard (a mid-word 16-bit float Add's boundary words). The plans are built for a
backend (``backend``, default the current one): on the GPU the owner arrays and a gather's output are device
memory, allocated while the plan is built; nothing runs until the plan does.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np

from simt_pto import dtypes, geometry
from simt_pto.backend import a5_backend, imported
from simt_pto.enums import Coalesce, ElementFormat, GatherExec, ScatterAtomicOp, ScatterConflict
from simt_pto.kernels import store
from simt_pto.kernels.a5 import simt
from simt_pto.kernels.a5.simt import multicore_workers
from simt_pto.kernels.cube_l1_walk import run_mgather_l1_scalar
from simt_pto.kernels.index_policy import read_once, remap_array, remap_index
from simt_pto.launch_spec import CallPlan, HostStep, KernelPolicy, LaunchSpec, launch_spec

from . import tuning
from .arrays import base_address, new_device_array, to_host
from .boundary_words import BoundaryWords, holding


def _cuda():
    return imported("numba.cuda")


# -- a tile op: one block over the tile ----------------------------------------------------------------------------

def table_memory(plan, dtype):
    """The table's flat memory viewed as ``dtype``: a numpy view, or a device view without copying."""
    return gm_memory(plan.table, dtype)


def gm_memory(tensor, dtype):
    """A GM tensor's flat memory viewed as ``dtype``: a numpy view, or a device view without copying."""
    if tensor.on_device:
        return _cuda().as_cuda_array(tensor.array).reshape(tensor.size).view(dtype)
    return tensor.flat.view(dtype)


def tile_bits(tile):
    """The tile's storage as raw bits (the kernels move bits). An index tile's bits are its uint32 indices: the
    ISA casts every index to uint32 before it is used (MGATHER.md / MSCATTER.md, constraints: "Indices are cast to
    uint32_t first"), so int32 and uint32 index tiles launch the same specialization."""
    return tile.data.view(tile.dtype.bits)


def mgather_l1_launches(plan) -> CallPlan:
    """A GM -> L1 MGATHER (MAT destination), MGATHER.md "GM → L1 Gather": for ``GatherExec::Simt`` (Elem only)
    ``simt_mgather_l1_elem_kernel`` sized by :func:`geometry.l1_elem_geometry` over the padded NZ tile, writing the
    GM scratch, then the AIC's bulk ``copy_gm_to_cbuf`` of the first ``Rows * Cols`` scratch elements onto the L1
    tile; for ``GatherExec::Scalar`` the cube core's scalar walk (no SIMT launch)."""
    if plan.exec != GatherExec.SIMT:
        return CallPlan((HostStep("the cube core's scalar GM -> L1 walk", lambda: run_mgather_l1_scalar(plan)),))
    dst, bits, n = plan.tile, plan.dtype.bits, plan.tile_elems
    scratch = gm_memory(plan.scratch, bits)

    def copy_gm_to_cbuf():
        staged = scratch[:n].copy_to_host() if plan.scratch.on_device else scratch[:n]
        tile_bits(dst)[:] = staged
    launch = launch_spec("simt_mgather_l1_elem_kernel", KernelPolicy.of(plan.rule),
                         geometry.l1_elem_geometry(dst.rows, dst.cols), writes=("scratch",), scratch=scratch,
                         table=table_memory(plan, bits), idx=gm_memory(plan.idx, np.uint32), idx_rs=plan.idx_step,
                         valid_rows=plan.rows, valid_cols=plan.cols, table_size=plan.capacity, tile_rows=dst.rows,
                         tile_elems=n, kc0=plan.kc0)
    return CallPlan((launch, HostStep("copy_gm_to_cbuf: the scratch onto the L1 tile", copy_gm_to_cbuf)))


def mgather_launches(plan) -> CallPlan:
    """What an MGATHER launches: ``simt_mgather_row_kernel`` / ``simt_mgather_elem_kernel`` (one block), the
    ``(1, 1)`` Elem case's ``MGatherScalarImpl``, or the GM -> L1 path (:func:`mgather_l1_launches`)."""
    if plan.l1:
        return mgather_l1_launches(plan)
    dst, table = plan.tile, table_memory(plan, plan.dtype.bits)
    rs, cs = dst.strides
    policy = KernelPolicy.of(plan.rule)
    # the arguments as literals: a tile op builds its launch on every call
    rows, cols = plan.rows, plan.cols
    if plan.coalesce == Coalesce.ROW:
        return CallPlan((_gather_row_launch(policy, tile_bits(dst), rs, cs, tile_bits(plan.idx), plan.idx_step, table,
                                            plan.capacity, rows, cols, rows),))
    if rows == 1 and cols == 1:
        return CallPlan((HostStep("MGatherScalarImpl: the (1, 1) Elem gather on the AIV scalar pipe",
                                  lambda: mgather_scalar_impl(plan)),))
    irs, ics = plan.idx.strides
    return CallPlan((_gather_elem_launch(policy, tile_bits(dst), rs, cs, tile_bits(plan.idx), irs, ics, table,
                                         plan.capacity, rows, cols, rows),))


class TableMemory(NamedTuple):
    """A scatter's table as its launches see it, for a call whose plan has no GlobalTensor (a whole-array call:
    a whole array); it has the attributes of one that :func:`gm_memory` and :class:`BoundaryWords` read."""

    array: Any
    """The caller's array (host or device memory)."""
    size: int
    """Its elements."""
    on_device: bool
    flat: np.ndarray | None
    """Its flat host memory (a numpy view), or None for a device array."""


def element_format(plan, table=None) -> ElementFormat:
    """The scatter's element format (:func:`simt_pto.kernels.store.element_format`); a 16-bit float Add on a table
    that starts or ends mid-word takes the F16_EDGE / BF16_EDGE form (:class:`BoundaryWords`). ``table``: the
    written table (a :class:`TableMemory`), default the plan's."""
    fmt = store.element_format(plan.atomic, plan.dtype.name)
    if fmt in store.EDGE and not _whole_words(gm_memory(plan.table if table is None else table, np.uint16)):
        return store.EDGE[fmt]
    return fmt


def _whole_words(bits) -> bool:
    """True when 16-bit table memory is whole 32-bit words: it starts on a 4-byte boundary, its length is even."""
    return bits.size % 2 == 0 and base_address(bits) % 4 == 0


def scatter_table(plan, fmt, table=None):
    """(table argument, boundary) for a scatter: raw bits for stores, the typed element for native atomics,
    the (int32, uint32) views for float32 Max / Min, the table's uint32 words for 16-bit float atomics, and for
    a table that starts or ends mid-word the word triple of a :class:`BoundaryWords` (returned as ``boundary``:
    the launch must run inside its :meth:`BoundaryWords.held`, see :func:`holding`)."""
    table = plan.table if table is None else table
    if fmt == ElementFormat.NATIVE:
        dtype = plan.dtype.bits if plan.atomic == ScatterAtomicOp.NONE else plan.dtype.numpy
        return gm_memory(table, dtype), None
    if fmt == ElementFormat.F32_ORDER:
        return (gm_memory(table, np.int32), gm_memory(table, np.uint32)), None
    if fmt in (ElementFormat.F16, ElementFormat.BF16):
        return gm_memory(table, np.uint32), None
    boundary = BoundaryWords(table, gm_memory(table, np.uint16))
    return boundary.arg, boundary


def scatter_policy(plan, fmt: ElementFormat) -> KernelPolicy:
    """The compile-time policy of a scatter's kernels."""
    return KernelPolicy.of(plan.rule, plan.atomic, fmt, plan.conflict)


def mscatter_launches(plan) -> CallPlan:
    """What an MSCATTER launches: the source-centric ``simt_mscatter_row_kernel`` / ``simt_mscatter_elem_kernel``
    (atomics, Conflict::Default), the slot-centric ``simt_mscatter_row_last_kernel`` /
    ``simt_mscatter_elem_last_kernel`` (Conflict::Last), or the ``(1, 1)`` Elem case's ``MScatterScalarImpl``;
    a mid-word 16-bit float Add runs inside its boundary words' guard."""
    if plan.coalesce == Coalesce.ELEM and plan.rows == 1 and plan.cols == 1:
        if plan.table.on_device:  # one lane of the Elem kernel: a device atomic, as every other writer's
            return _elem_scatter_launches(plan)
        return CallPlan((HostStep("MScatterScalarImpl: the (1, 1) Elem scatter on the AIV scalar pipe",
                                  lambda: mscatter_scalar_impl(plan)),))
    if plan.coalesce == Coalesce.ELEM and not _last(plan):
        return _elem_scatter_launches(plan)
    fmt = element_format(plan)
    table, boundary = scatter_table(plan, fmt)
    src = plan.tile.data.view(store.source_dtype(plan.atomic, fmt, plan.dtype))
    rs, cs = plan.tile.strides
    policy = scatter_policy(plan, fmt)
    if plan.coalesce == Coalesce.ROW and _last(plan):
        launch = launch_spec("simt_mscatter_row_last_kernel", KernelPolicy.of(plan.rule, None, None, plan.conflict),
                             geometry.last_geometry(plan.capacity), writes=("table",), table=table, src=src, src_rs=rs,
                             src_cs=cs, idx=tile_bits(plan.idx), idx_step=plan.idx_step, table_rows=plan.capacity,
                             valid_rows=plan.rows, valid_cols=plan.cols)
    elif plan.coalesce == Coalesce.ROW:
        launch = _scatter_row_launch(policy, table, src, rs, cs, tile_bits(plan.idx), plan.idx_step, plan.capacity,
                                     plan.rows, plan.cols, plan.rows,
                                     plain_kernel=row_alone_kernel(plan.atomic, fmt, plan.rows * plan.cols))
    else:
        irs, ics = plan.idx.strides
        launch = launch_spec("simt_mscatter_elem_last_kernel", KernelPolicy.of(plan.rule, None, None, plan.conflict),
                             geometry.last_geometry(plan.capacity), writes=("table",), table=table, src=src, src_rs=rs,
                             src_cs=cs, idx=tile_bits(plan.idx), idx_rs=irs, idx_cs=ics, table_size=plan.capacity,
                             valid_rows=plan.rows, valid_cols=plan.cols)
    return guarded((launch,), boundary)


def _last(plan) -> bool:
    return plan.atomic == ScatterAtomicOp.NONE and plan.conflict == ScatterConflict.LAST


def guarded(steps, boundary) -> CallPlan:
    """The plan of ``steps``, run inside ``boundary``'s :meth:`BoundaryWords.held` when a mid-word 16-bit float
    Add has one (:func:`scatter_table`)."""
    if boundary is None:
        return CallPlan(tuple(steps))
    return CallPlan(tuple(steps), guard=boundary.held, guard_name=BoundaryWords.GUARD_NAME)




def elem_alone_kernel(atomic: ScatterAtomicOp, fmt: ElementFormat, updates: int) -> str | None:
    """``LaunchSpec.multicore_plain_kernel`` of an Elem scatter of ``updates`` elements: ``simt_mscatter_elem_serial_kernel``
    for an atomic op (not a mid-word 16-bit float Add, whose boundary words hold bytes outside the table) of at most
    :attr:`~.tuning.HostTuning.plain_add_max_updates` elements (an Add on the element type itself),
    :attr:`~.tuning.HostTuning.plain_half_add_max_updates` (a float16 / bfloat16 Add) or
    :attr:`~.tuning.HostTuning.plain_rmw_max_updates` (Max / Min), else None."""
    if atomic == ScatterAtomicOp.NONE or fmt in store.EDGE.values():
        return None
    limits = tuning.current()
    if atomic != ScatterAtomicOp.ADD:
        most = limits.plain_rmw_max_updates
    elif fmt == ElementFormat.NATIVE:
        most = limits.plain_add_max_updates
    else:  # (F16 / BF16: the mid-word formats have no plain form, above)
        most = limits.plain_half_add_max_updates
    return "simt_mscatter_elem_serial_kernel" if updates <= most else None


def row_alone_kernel(atomic: ScatterAtomicOp, fmt: ElementFormat, updates: int) -> str | None:
    """``LaunchSpec.multicore_plain_kernel`` of a Row scatter of ``updates`` elements: ``simt_mscatter_row_serial_kernel``
    for an atomic op (not a mid-word 16-bit float Add, whose boundary words hold bytes outside the table) of at most
    :attr:`~.tuning.HostTuning.plain_row_add_max_updates` elements (an Add) or
    :attr:`~.tuning.HostTuning.plain_row_rmw_max_updates` (Max / Min), else None."""
    if atomic == ScatterAtomicOp.NONE or fmt in store.EDGE.values():
        return None
    limits = tuning.current()
    most = limits.plain_row_add_max_updates if atomic == ScatterAtomicOp.ADD else limits.plain_row_rmw_max_updates
    return "simt_mscatter_row_serial_kernel" if updates <= most else None


def _elem_scatter_launches(plan) -> CallPlan:
    """``simt_mscatter_elem_kernel`` over the plan's tile (also the device form of the ``(1, 1)`` fallback)."""
    fmt = element_format(plan)
    table, boundary = scatter_table(plan, fmt)
    rs, cs = plan.tile.strides
    irs, ics = plan.idx.strides
    launch = _scatter_elem_launch(scatter_policy(plan, fmt), table,
                                  plan.tile.data.view(store.source_dtype(plan.atomic, fmt, plan.dtype)), rs, cs,
                                  tile_bits(plan.idx), irs, ics, plan.capacity, plan.rows, plan.cols, plan.rows,
                                  plain_kernel=elem_alone_kernel(plan.atomic, fmt, plan.rows * plan.cols))
    return guarded((launch,), boundary)


# -- the launches of the kernels a tile op and a whole array share: each argument list written once ---------------

def _gather_row_launch(policy, dst, dst_rs, dst_cs, idx, idx_step, table, table_rows, valid_rows, valid_cols,
                       tile_rows, *, grid=1, hardware=None, threads=None) -> LaunchSpec:
    """``simt_mgather_row_kernel`` over ``grid`` blocks of ``tile_rows`` rows, with the geometry of one full tile
    (:func:`simt_pto.geometry.row_geometry`); the arguments as a literal (a tile op builds its launch on every
    call)."""
    geo = geometry.row_geometry(tile_rows, valid_cols)
    return LaunchSpec("simt_mgather_row_kernel", policy, (
        ("dst", dst), ("dst_rs", dst_rs), ("dst_cs", dst_cs), ("idx", idx), ("idx_step", idx_step), ("table", table),
        ("table_rows", table_rows), ("valid_rows", valid_rows), ("valid_cols", valid_cols), ("tile_rows", tile_rows),
        ("row_warps", geo.row_warps), ("warps_per_row", geo.warps_per_row)), geo, grid, ("dst",), hardware, threads)


def _gather_elem_launch(policy, dst, dst_rs, dst_cs, idx, idx_rs, idx_cs, table, table_size, valid_rows, valid_cols,
                        tile_rows, *, grid=1, threads=None) -> LaunchSpec:
    """``simt_mgather_elem_kernel`` over ``grid`` blocks of ``tile_rows`` rows (:func:`simt_pto.geometry.elem_geometry`
    of one full tile)."""
    return LaunchSpec("simt_mgather_elem_kernel", policy, (
        ("dst", dst), ("dst_rs", dst_rs), ("dst_cs", dst_cs), ("idx", idx), ("idx_rs", idx_rs), ("idx_cs", idx_cs),
        ("table", table), ("table_size", table_size), ("valid_rows", valid_rows), ("valid_cols", valid_cols),
        ("tile_rows", tile_rows)), geometry.elem_geometry(tile_rows, valid_cols), grid, ("dst",), None, threads)


def _scatter_row_launch(policy, table, src, src_rs, src_cs, idx, idx_step, table_rows, valid_rows, valid_cols,
                        tile_rows, *, grid=1, threads=None, plain_kernel=None) -> LaunchSpec:
    """``simt_mscatter_row_kernel`` (atomics, Conflict::Default) over ``grid`` blocks of ``tile_rows`` rows;
    ``plain_kernel``: its plain-store form on one thread (:func:`row_alone_kernel`)."""
    geo = geometry.row_geometry(tile_rows, valid_cols)
    return launch_spec("simt_mscatter_row_kernel", policy, geo, grid=grid, writes=("table",), multicore_threads=threads,
                       multicore_plain_kernel=plain_kernel,
                       table=table, src=src, src_rs=src_rs, src_cs=src_cs, idx=idx, idx_step=idx_step,
                       table_rows=table_rows, valid_rows=valid_rows, valid_cols=valid_cols, tile_rows=tile_rows,
                       row_warps=geo.row_warps, warps_per_row=geo.warps_per_row)


def _scatter_elem_launch(policy, table, src, src_rs, src_cs, idx, idx_rs, idx_cs, table_size, valid_rows, valid_cols,
                         tile_rows, *, grid=1, threads=None, plain_kernel=None) -> LaunchSpec:
    """``simt_mscatter_elem_kernel`` (atomics, Conflict::Default) over ``grid`` blocks of ``tile_rows`` rows;
    ``plain_kernel``: its plain-store form on one thread (:func:`elem_alone_kernel`)."""
    return launch_spec("simt_mscatter_elem_kernel", policy, geometry.elem_geometry(tile_rows, valid_cols), grid=grid,
                       writes=("table",), multicore_threads=threads, multicore_plain_kernel=plain_kernel, table=table,
                       src=src, src_rs=src_rs, src_cs=src_cs, idx=idx, idx_rs=idx_rs, idx_cs=idx_cs,
                       table_size=table_size, valid_rows=valid_rows, valid_cols=valid_cols, tile_rows=tile_rows)


# -- the (1, 1) Elem scalar fallbacks: no SIMT launch --------------------------------------------------------------

def _scalar_slot(plan):
    """``(slot, in range)`` of the ``(1, 1)`` tile's index, read once, under the rule that keeps an index another
    thread wrote past the table after the check inside it (:func:`~simt_pto.kernels.index_policy.read_once`)."""
    raw = plan.idx.data[plan.idx.offsets()[0, 0]]
    return remap_index(raw, plan.capacity, read_once(plan.rule, plan.op))


def mgather_scalar_impl(plan) -> None:
    """``MGatherScalarImpl`` (MGATHER.md, A5): the ``(1, 1)`` Elem gather on the AIV scalar pipe."""
    slot, in_range = _scalar_slot(plan)
    value = 0
    if in_range:
        memory = table_memory(plan, plan.dtype.bits)
        value = memory[slot:slot + 1].copy_to_host()[0] if plan.table.on_device else memory[slot]
    tile_bits(plan.tile)[plan.tile.offsets()[0, 0]] = value


def mscatter_scalar_impl(plan) -> None:
    """``MScatterScalarImpl`` (MSCATTER.md, A5): the ``(1, 1)`` Elem scatter on the AIV scalar pipe, one
    read-modify-write of the slot in host memory. It runs as an atomic (:func:`simt_pto.kernels.a5.simt.host_store`),
    as every other writer of the table does, so that calls from several threads lose no update (a device table
    takes one lane of ``simt_mscatter_elem_kernel`` instead: :func:`mscatter_launches`)."""
    slot, in_range = _scalar_slot(plan)
    if not in_range:
        return
    fmt = element_format(plan)
    at = plan.tile.offsets()[0, 0]
    value = plan.tile.data[at:at + 1].view(store.source_dtype(plan.atomic, fmt, plan.dtype))[0]
    table, boundary = scatter_table(plan, fmt)
    with holding(boundary):
        simt.write_shared(table, simt.host_store(plan.atomic, fmt), table, slot, value)


# -- a whole array: multi-block launches of the same kernels -------------------------------------------------------

def _flat(a, dtype):
    """The array's memory as a flat ``dtype`` view: a device view of a device array, else a host view (the GPU
    backend's :func:`~simt_pto.host.a5_runner.run_plan` stages it)."""
    if a.device:
        return _cuda().as_cuda_array(a.obj).reshape(a.size).view(dtype)
    return to_host(a).reshape(-1).view(dtype)


def _empty_device(template, n, dtype=None):
    """(array, kernel view): ``n`` uninitialised elements on the device (:func:`~.arrays.new_device_array`); the
    kernel view is a Numba device array over the same memory."""
    array = new_device_array(template, n, dtype)
    if template is None or type(template).__module__.partition(".")[0] not in ("cupy", "torch"):
        return array, array  # Numba's own device array
    return array, _cuda().as_cuda_array(array)


def _tile_grid(rows, tile_rows):
    return -(-rows // tile_rows)




def _multicore_threads(work: int, one_thread_max: int) -> int | None:
    """``LaunchSpec.multicore_threads`` of a launch of ``work`` (bytes or elements, as ``one_thread_max`` counts them)."""
    return 1 if work <= one_thread_max else None


def _row_copy_threads(rows: int, row_bytes: int) -> int | None:
    """``LaunchSpec.multicore_threads`` of a launch that copies ``rows`` rows of ``row_bytes`` bytes each: the calling
    thread alone while both its bytes and its rows are few (``row_copy_one_thread_bytes`` and
    ``row_copy_one_thread_rows`` of :class:`~.tuning.HostTuning`: a row costs its index and its miss whatever its
    width)."""
    limits = tuning.current()
    return 1 if rows <= limits.row_copy_one_thread_rows and rows * row_bytes <= limits.row_copy_one_thread_bytes else None


def row_move_unit(itemsize: int, cols: int, *arrays) -> int:
    """Bytes each lane moves per access in a whole-array row copy (the Row gather, the owner-based Last
    write): the widest of 8, 4, 2, 1 that divides the row and every array's base address. A row is a
    plain bit copy, so moving it in wider units changes nothing but the instruction width; warps still
    own rows as in the A5 mapping."""
    if itemsize >= 8:
        return itemsize
    row_bytes, addresses = itemsize * cols, 0
    for a in arrays:  # a unit divides every address when it divides their bitwise or
        addresses |= base_address(a)
    for unit in (8, 4, 2):
        if unit > itemsize and row_bytes % unit == 0 and addresses % unit == 0:
            return unit
    return itemsize


def _row_units(plan, cols, *arrays):
    """(unit dtype, units per row) of a whole-array row copy: see :func:`row_move_unit`."""
    unit = row_move_unit(plan.dtype.itemsize, cols, *arrays)
    return dtypes.UNSIGNED_OF_SIZE[unit], cols * plan.dtype.itemsize // unit


def _widened(plan, cols, build, *arrays):
    """The launch of a whole-array row copy in the widest unit :func:`row_move_unit` allows, with the hardware's
    element-width launch as its ``hardware`` where the two differ. ``build(unit dtype, units per row)`` makes
    the launch."""
    unit_dtype, units = _row_units(plan, cols, *arrays)
    if units == cols:
        return build(plan.dtype.bits, cols)
    return build(unit_dtype, units, hardware=build(plan.dtype.bits, cols))


# -- a whole-array gather ------------------------------------------------------------------------------------------

def gather_launches(plan, table, idx, tile_rows, out_cols, backend=None, dest=None):
    """``(call, result)``: the plan of a whole-array gather (one launch of ``simt_mgather_row_kernel`` /
    ``simt_mgather_elem_kernel`` over the tiles) and ``result()``, which gives the gathered array once the plan
    has run. A device table gathers into a new device array of its own kind and dtype; a host table into a host
    array (on the GPU, through device memory: the plan's last step copies it to the host): ``dest`` where given
    (flat, C-contiguous host memory of the plan's bits, the caller's ``out=``), else a new one."""
    gpu = (a5_backend() if backend is None else backend) == "gpu"
    bits, n = plan.dtype.bits, idx.rows * out_cols
    table_flat, idx_flat = _flat(table, bits), _flat(idx, np.uint32)
    result = host_out = None
    if gpu and table.device:
        result, out = _empty_device(table.obj, n)
        out = out.view(bits)
    else:  # the kernels write every element (the gather or T(0)): new memory needs no zeros
        host_out = np.empty(n, dtype=bits) if dest is None else dest
        out = _cuda().device_array(n, dtype=bits) if gpu else host_out
    rows, grid = idx.rows, _tile_grid(idx.rows, tile_rows)
    policy = KernelPolicy.of(plan.rule)
    if plan.coalesce == Coalesce.ROW:
        def build(unit, units, hardware=None):
            return _gather_row_launch(policy, out.view(unit), units, 1, idx_flat, 1, table_flat.view(unit),
                                      plan.capacity, rows, units, tile_rows, grid=grid, hardware=hardware,
                                      threads=_row_copy_threads(rows, out_cols * plan.dtype.itemsize))
        # a fresh device allocation starts on a 256-byte boundary: only a host output's address can narrow the unit
        launch = _widened(plan, out_cols, build, table_flat, *(() if gpu else (out,)))
    else:
        launch = _gather_elem_launch(policy, out, out_cols, 1, idx_flat, out_cols, 1, table_flat, plan.capacity, rows,
                                     out_cols, tile_rows, grid=grid,
                                     threads=_multicore_threads(n, tuning.current().elem_gather_one_thread_elems))
    steps = [launch]
    if gpu and host_out is not None:
        steps.append(HostStep("copy the gathered elements to the host", lambda: out.copy_to_host(host_out)))

    def gathered():
        return result if result is not None else host_out.view(plan.dtype.numpy)
    return CallPlan(tuple(steps)), gathered




# -- a whole-array scatter -----------------------------------------------------------------------------------------

def scatter_launches(plan, table, src, idx, tile_rows, last_path, slot_path_max_work, backend=None, owner=None):
    """The plan of a whole-array scatter into ``table`` (see the module docstring for its launches). ``last_path``
    (Conflict::Last, atomic NONE): ``"slot"``, ``"owner"``, or ``"auto"`` (slot-centric while slots x sources is
    at most ``slot_path_max_work``); ``owner`` (the owner path): ``"dense"``, ``"compact"``, or None for the
    cheaper one (:func:`owner_layout`)."""
    backend = a5_backend() if backend is None else backend
    memory = TableMemory(table.obj, table.size, table.device, None if table.device else to_host(table).reshape(-1))
    fmt = element_format(plan, memory)
    table_arg, boundary = scatter_table(plan, fmt, memory)  # a mid-word 16-bit float Add: the plan's guard
    src_flat = _flat(src, store.source_dtype(plan.atomic, fmt, plan.dtype))
    idx_flat = _flat(idx, np.uint32)
    rows, cols = idx.rows, (src.cols if plan.coalesce == Coalesce.ROW else idx.cols)
    if not (plan.atomic == ScatterAtomicOp.NONE and plan.conflict == ScatterConflict.LAST):
        steps = (_tile_scatter(plan, table_arg, src_flat, idx_flat, rows, cols, tile_rows, fmt),)
    else:
        slot_work = plan.capacity * rows * (cols if plan.coalesce == Coalesce.ELEM else 1)
        serial = last_path == "auto" and backend == "multicore" and (
            takes_serial_last(rows * cols, plan.capacity * plan.dtype.itemsize) if plan.coalesce == Coalesce.ELEM
            else takes_serial_row_last(rows, plan.capacity, cols * plan.dtype.itemsize))
        if serial:
            steps = (_serial_last(plan, table_arg, src_flat, idx_flat, rows, cols, tile_rows, fmt),)
        elif last_path == "slot" or (last_path == "auto" and slot_work <= slot_path_max_work
                                     and not (backend == "multicore" and plan.coalesce == Coalesce.ROW)):
            steps = _last_slot_centric(plan, table_arg, src_flat, idx_flat, rows, cols, tile_rows)
        else:
            updates = rows * (cols if plan.coalesce == Coalesce.ELEM else 1)
            layout = owner_layout(plan.capacity, updates) if owner is None else owner
            if layout not in ("dense", "compact"):
                raise ValueError(f"owner: expected 'dense', 'compact' or None, got {owner!r}")
            last_owner = _last_owner_dense if layout == "dense" else _last_owner_compact
            steps = last_owner(plan, table, table_arg, src_flat, idx, idx_flat, rows, cols, tile_rows, backend)
    return guarded(steps, boundary)



def _tile_scatter(plan, table_arg, src, idx, rows, cols, tile_rows, fmt):
    """Atomics and Conflict::Default: one launch of the tile op's kernel over all tiles (their writes compose)."""
    grid, policy = _tile_grid(rows, tile_rows), scatter_policy(plan, fmt)
    if plan.atomic == ScatterAtomicOp.NONE and plan.coalesce == Coalesce.ROW:  # Conflict::Default: a row copy
        threads = _row_copy_threads(rows, cols * plan.dtype.itemsize)
    else:
        threads = _multicore_threads(rows * cols, tuning.current().atomic_scatter_one_thread_updates)
    if plan.coalesce == Coalesce.ROW:
        return _scatter_row_launch(policy, table_arg, src, cols, 1, idx, 1, plan.capacity, rows, cols, tile_rows,
                                   grid=grid, threads=threads, plain_kernel=row_alone_kernel(plan.atomic, fmt, rows * cols))
    return _scatter_elem_launch(policy, table_arg, src, cols, 1, idx, cols, 1, plan.capacity, rows, cols, tile_rows,
                                grid=grid, threads=threads, plain_kernel=elem_alone_kernel(plan.atomic, fmt, rows * cols))





def takes_serial_last(updates: int, table_bytes: int) -> bool:
    """Whether a ``multicore`` whole-array Elem Conflict::Last of ``updates`` elements into a table of ``table_bytes``
    under ``last_path="auto"`` is the serial loop (:attr:`~.tuning.HostTuning.serial_last_max_updates`,
    :attr:`~.tuning.HostTuning.serial_last_max_table_bytes`)."""
    limits = tuning.current()
    return updates <= limits.serial_last_max_updates or table_bytes <= limits.serial_last_max_table_bytes


def takes_serial_row_last(rows: int, table_rows: int, row_bytes: int) -> bool:
    """Whether a ``multicore`` whole-array Row Conflict::Last of ``rows`` source rows of ``row_bytes`` into a table of
    ``table_rows`` rows under ``last_path="auto"`` is the serial loop (:attr:`~.tuning.HostTuning.serial_row_last_max_bytes`,
    :attr:`~.tuning.HostTuning.serial_row_last_sparse_rows`); else it is the owner path. The serial loop copies
    every source row, the owner path each table row once: the slot-centric kernels, which scan every index for
    every table row, are never the cheapest there (docs/performance.md)."""
    limits = tuning.current()
    return rows * row_bytes <= limits.serial_row_last_max_bytes or table_rows >= limits.serial_row_last_sparse_rows * rows


def _serial_last(plan, table_arg, src, idx, rows, cols, tile_rows, fmt):
    """Conflict::Last as the serial loop (MSCATTER.md, "Conflict Resolution": the sequential order's result): the
    launch of :func:`_tile_scatter` (atomic NONE: plain stores) on the calling thread, which visits the sources in
    order, so the last writer of each slot stores last. Elem: the serial kernel over every tile
    (``simt_mscatter_elem_serial_kernel``); Row: ``simt_mscatter_row_kernel`` itself, whose walk visits a
    thread's rows in order (:func:`simt_pto.kernels.a5.device.walk_rows`)."""
    launch = _tile_scatter(plan, table_arg, src, idx, rows, cols, tile_rows, fmt)
    if plan.coalesce == Coalesce.ELEM:
        return replace(launch, kernel="simt_mscatter_elem_serial_kernel", multicore_threads=1)
    return replace(launch, multicore_threads=1)


def _last_slot_centric(plan, table_arg, src, idx, rows, cols, tile_rows):
    """The per-tile slot-centric Last kernels, one launch per tile in tile order (later tiles overwrite)."""
    geo = geometry.last_geometry(plan.capacity)
    grid = min(geometry.MAX_GRID, max(1, -(-plan.capacity // geo.threads)))
    policy = KernelPolicy(rule=plan.rule, conflict=plan.conflict)
    launches = []
    for r0 in range(0, rows, tile_rows):
        n = min(tile_rows, rows - r0)
        tile_src = src[r0 * cols:(r0 + n) * cols]
        if plan.coalesce == Coalesce.ROW:
            launches.append(launch_spec(
                "simt_mscatter_row_last_kernel", policy, geo, grid=grid, writes=("table",), table=table_arg,
                src=tile_src, src_rs=cols, src_cs=1, idx=idx[r0:r0 + n], idx_step=1, table_rows=plan.capacity,
                valid_rows=n, valid_cols=cols))
        else:
            launches.append(launch_spec(
                "simt_mscatter_elem_last_kernel", policy, geo, grid=grid, writes=("table",), table=table_arg,
                src=tile_src, src_rs=cols, src_cs=1, idx=idx[r0 * cols:(r0 + n) * cols], idx_rs=cols, idx_cs=1,
                table_size=plan.capacity, valid_rows=n, valid_cols=cols))
    return launches




def owner_layout(capacity: int, updates: int) -> str:
    """The owner state of a Conflict::Last scatter of ``updates`` flat source positions into ``capacity`` slots:
    ``"dense"``, one owner per table slot (O(capacity) memory and work, no sort), while the table is comparable
    to the updates; else ``"compact"``, one owner per distinct slot reached (O(updates) memory, an
    O(updates log updates) sort on the host). Both give the sequential result bit for bit."""
    limits = tuning.current()
    if capacity <= limits.dense_owner_slots_per_update * updates + limits.dense_owner_min_slots:
        return "dense"
    return "compact"


def _owner_dtype(updates: int) -> np.dtype:
    # a flat source position per owner: int32 while every position fits (half the memory traffic of int64)
    return np.dtype(np.int32 if updates < 2 ** 31 else np.int64)


def _new_owner(table, n, owner_dtype, backend):
    """``n`` uninitialised owners: on the device (from the table's library when it is a device array)."""
    if backend == "gpu":
        return _empty_device(table.obj if table.device else None, n, owner_dtype)[1]
    return np.empty(n, dtype=owner_dtype)


_RESET = KernelPolicy()



def _claim_copies(updates: int, slots: int, owner_dtype: np.dtype, backend: str) -> int:
    """Copies of the owners an Elem claim of ``updates`` into ``slots`` owners takes: one per worker on the
    ``multicore`` backend for a claim of more than ``owner_copy_min_updates`` updates into copies that are small
    (``owner_copy_max_bytes``, ``owner_copy_updates_per_slot``: :class:`~.tuning.HostTuning`), else one. With a
    copy each, a worker claims with plain loads and stores into lines no other core takes from its cache; the write takes each
    slot's largest owner over the copies."""
    workers = multicore_workers()
    limits = tuning.current()
    if (backend != "multicore" or updates <= limits.owner_copy_min_updates or workers < 2
            or slots * owner_dtype.itemsize > limits.owner_copy_max_bytes
            or workers * slots * limits.owner_copy_updates_per_slot > updates):
        return 1
    return workers


def _flat_launch(count: int, backend: str, one_worker_max: int):
    """``(geometry, grid)`` of a flat grid-stride pass over ``count`` items: the flat grid, or on the ``multicore``
    backend, for at most ``one_worker_max`` items, one block of one warp (the calling thread walks the items in
    order, as one block range of the full grid would)."""
    if backend == "multicore" and count <= one_worker_max:
        return replace(geometry.flat_geometry(count), launch_warps=1), 1
    return geometry.flat_geometry(count), geometry.flat_grid(count)


def _row_owner_write(kernel, plan, table_arg, src, owner, count, cols, tile_rows, **slot_args):
    """The owner path's Row write (``kernel``): ``count`` destination rows (the table's rows, or the distinct slots,
    named by ``slot_args``), ``tile_rows`` of them per block with the Row geometry (warps own rows, lanes walk
    columns), each row moved in the widest unit :func:`row_move_unit` allows."""
    per_block = min(tile_rows, count)

    def build(unit, units, hardware=None):
        geo = geometry.row_geometry(per_block, units)
        return launch_spec(kernel, _RESET, geo, grid=_tile_grid(count, per_block), writes=("table",),
                           hardware=hardware,
                           multicore_threads=_row_copy_threads(count, cols * plan.dtype.itemsize),
                           table=table_arg.view(unit), src=src.view(unit), src_rs=units, src_cs=1,
                           owner=owner, **slot_args, valid_cols=units, tile_rows=per_block, row_warps=geo.row_warps,
                           warps_per_row=geo.warps_per_row)
    return _widened(plan, cols, build, table_arg, src)


def _last_owner_dense(plan, table, table_arg, src, idx, idx_flat, rows, cols, tile_rows, backend):
    """Owner-based Last, one owner per table slot: mark every owner unowned, claim each slot for its largest flat
    source position with an atomic max (the claim remaps on the device), then write each owned slot from its
    owner, walking the whole table (MSCATTER.md, "Conflict Resolution": the result of
    ``for i in order: table[remap(idx[i])] = src[i]``). An owner is a source position (Elem: flat; Row: the source
    row), in 4 bytes while every position fits (:func:`_owner_dtype`)."""
    cap = plan.capacity
    if plan.coalesce == Coalesce.ELEM:
        owner_dtype = _owner_dtype(rows * cols)
        copies = _claim_copies(rows * cols, cap, owner_dtype, backend)
        owner = _new_owner(table, copies * cap, owner_dtype, backend)
        claim_policy = KernelPolicy(rule=plan.rule, conflict=plan.conflict)
        write_geo, write_grid = _flat_launch(cap, backend, tuning.current().owner_write_one_worker_slots)
        if copies > 1:  # a block of one warp per copy: each CPU worker walks its share of the positions in order
            claim = launch_spec("simt_mscatter_elem_private_owner_claim_kernel", claim_policy,
                                replace(geometry.flat_geometry(rows * cols), launch_warps=1), grid=copies,
                                writes=("owner", "refused"), owner=owner, refused=np.zeros(copies, np.int32),
                                idx=idx_flat, idx_rs=cols, idx_cs=1, table_size=cap, valid_rows=rows,
                                valid_cols=cols)
            write = launch_spec("simt_mscatter_elem_private_owner_write_kernel", _RESET, write_geo, grid=write_grid,
                                writes=("table",), table=table_arg, owner=owner, src=src, src_rs=cols, src_cs=1,
                                table_size=cap, copies=copies, valid_cols=cols)
        else:
            geo, grid = _flat_launch(rows * cols, backend, tuning.current().owner_claim_one_worker_updates)
            claim = launch_spec("simt_mscatter_elem_owner_claim_kernel", claim_policy, geo, grid=grid,
                                writes=("owner",), owner=owner, idx=idx_flat, idx_rs=cols, idx_cs=1, table_size=cap,
                                valid_rows=rows, valid_cols=cols)
            write = launch_spec("simt_mscatter_elem_owner_write_kernel", _RESET, write_geo, grid=write_grid,
                                writes=("table",), table=table_arg, owner=owner, src=src, src_rs=cols, src_cs=1,
                                table_size=cap, valid_cols=cols)
        return _reset(owner, backend), claim, write
    owner = _new_owner(table, cap, _owner_dtype(rows), backend)
    geo, grid = _flat_launch(rows, backend, tuning.current().owner_claim_one_worker_updates)
    claim = launch_spec("simt_mscatter_row_owner_claim_kernel", KernelPolicy(rule=plan.rule, conflict=plan.conflict),
                        geo, grid=grid, writes=("owner",), owner=owner, idx=idx_flat, idx_step=1, table_rows=cap,
                        valid_rows=rows)
    write = _row_owner_write("simt_mscatter_row_owner_write_kernel", plan, table_arg, src, owner, cap, cols,
                             tile_rows, table_rows=cap)
    return _reset(owner, backend), claim, write


def _reset(owner, backend):
    """The launch that marks every owner unowned (-1)."""
    geo, grid = _flat_launch(owner.size, backend, tuning.current().owner_reset_one_worker_slots)
    return launch_spec("simt_mscatter_owner_reset_kernel", _RESET, geo, grid=grid, writes=("owner",), owner=owner)


def compact_slots(raw, capacity: int, rule, id_dtype=np.int64):
    """``(slots, ids)`` of the compact owner path: the distinct slots the raw indices reach under the index rule
    (int64, ascending), and per index, in flat source order, the position of its slot in ``slots``, or -1 where
    the rule drops the update (Skip, or UNDEFINED with ``strict=False``, out of range). The remap is
    :func:`simt_pto.kernels.index_policy.remap_array`, the kernels' own, under the rule they run with on the CPU
    (:func:`~simt_pto.kernels.index_policy.read_once`: an index another thread wrote past the table after the
    check is dropped, not numbered). O(n log n) time, O(n) memory."""
    remapped, in_range = remap_array(np.ascontiguousarray(raw).reshape(-1), capacity, read_once(rule, "MSCATTER"))
    if in_range.all():
        slots, inverse = np.unique(remapped, return_inverse=True)
        return slots, inverse.astype(id_dtype, copy=False)
    slots, inverse = np.unique(remapped[in_range], return_inverse=True)
    ids = np.full(remapped.size, -1, dtype=id_dtype)
    ids[in_range] = inverse
    return slots, ids


def _last_owner_compact(plan, table, table_arg, src, idx, idx_flat, rows, cols, tile_rows, backend):
    """Owner-based Last, one owner per distinct slot reached: the host numbers the slots now
    (:func:`compact_slots`, on a host copy of device indices), since the owner array and the launches are sized
    by their count; the device then resets the owners, claims ``owner[ids[p]]`` and writes only those slots.
    No launch when every update is dropped."""
    updates = rows * cols if plan.coalesce == Coalesce.ELEM else rows
    owner_dtype = _owner_dtype(updates)
    slots, ids = compact_slots(to_host(idx).reshape(-1)[:updates], plan.capacity, plan.rule, owner_dtype)
    distinct = slots.size
    if distinct == 0:  # every update dropped: nothing to write
        return ()
    owner = _new_owner(table, distinct, owner_dtype, backend)
    geo, grid = _flat_launch(updates, backend, tuning.current().owner_claim_one_worker_updates)
    claim = launch_spec("simt_mscatter_compact_owner_claim_kernel", KernelPolicy(conflict=plan.conflict), geo,
                        grid=grid, writes=("owner",), owner=owner, ids=ids, updates=updates)
    if plan.coalesce == Coalesce.ROW:
        write = _row_owner_write("simt_mscatter_row_compact_owner_write_kernel", plan, table_arg, src, owner,
                                 distinct, cols, tile_rows, slots=slots, distinct=distinct)
    else:
        geo, grid = _flat_launch(distinct, backend, tuning.current().owner_reset_one_worker_slots)
        write = launch_spec("simt_mscatter_elem_compact_owner_write_kernel", _RESET, geo, grid=grid, writes=("table",),
                            table=table_arg, src=src, src_rs=cols, src_cs=1, owner=owner, slots=slots,
                            distinct=distinct, valid_cols=cols)
    return _reset(owner, backend), claim, write


__all__ = ["TableMemory", "compact_slots", "element_format", "elem_alone_kernel", "row_alone_kernel", "gather_launches", "gm_memory",
           "guarded", "mgather_l1_launches", "mgather_launches", "mgather_scalar_impl", "mscatter_launches",
           "mscatter_scalar_impl", "owner_layout", "row_move_unit", "scatter_launches", "scatter_policy",
           "scatter_table", "table_memory", "takes_serial_last", "takes_serial_row_last", "tile_bits"]
