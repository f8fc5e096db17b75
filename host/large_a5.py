"""The A5 side of the whole-array ops (:mod:`simt_pto.host.large`): multi-block launches of the A5 kernels.

Block ``b`` runs tile ``b`` (rows ``[b * tile_rows, ...)``) with the geometry of one full tile. Arrays
are staged on the device once per call (device arrays are used in place).
"""
from __future__ import annotations

import numpy as np

from simt_pto import dtypes, geometry
from simt_pto.backend import a5_backend
from simt_pto.enums import Coalesce, ScatterAtomicOp, ScatterConflict
from simt_pto.kernels import store
from simt_pto.kernels.a5 import simt
from simt_pto.kernels.a5.mgather import simt_mgather_elem_kernel, simt_mgather_row_kernel
from simt_pto.kernels.a5.mscatter import (simt_mscatter_compact_owner_claim_kernel,
                                          simt_mscatter_elem_compact_owner_write_kernel, simt_mscatter_elem_kernel,
                                          simt_mscatter_elem_last_kernel, simt_mscatter_elem_owner_claim_kernel,
                                          simt_mscatter_elem_owner_write_kernel, simt_mscatter_owner_reset_kernel,
                                          simt_mscatter_row_compact_owner_write_kernel, simt_mscatter_row_kernel,
                                          simt_mscatter_row_last_kernel, simt_mscatter_row_owner_claim_kernel,
                                          simt_mscatter_row_owner_write_kernel)
from simt_pto.kernels.index_policy import remap_array
from . import a5
from .arrays import to_host

MAX_GRID = 2 ** 31 - 1
"""The CUDA limit on gridDim.x (the x dimension; y and z stop at 65535)."""


def _cuda():
    from numba import cuda
    return cuda


def run_kernel(factory, policy, grid, warps, args):
    """Launch ``factory(*policy)`` over ``grid`` blocks of ``dim3(32, warps)`` on the current A5 backend."""
    simt.launch(factory(*policy), grid, warps, args, a5_backend())


def _flat(a, dtype, gpu):
    """The array's memory as a flat ``dtype`` view: on the device (GPU backend) or host (cpu, simulator)."""
    if a.device:
        return _cuda().as_cuda_array(a.obj).reshape(a.size).view(dtype)
    host = to_host(a).reshape(-1).view(dtype)
    return _cuda().to_device(host) if gpu else host


def _empty_device(template, n, dtype=None):
    """(array, kernel view): ``n`` uninitialised elements on the device, of ``dtype`` or else of the
    template's own dtype, from the allocator of the template's library (CuPy's memory pool, PyTorch's
    caching allocator: no ``cudaMalloc`` per call), else Numba's. ``array`` is of the template's kind;
    the kernel view is a Numba device array over the same memory."""
    module = type(template).__module__.split(".")[0] if template is not None else None
    if module == "cupy":
        import cupy
        array = cupy.empty(n, dtype=template.dtype if dtype is None else dtype)
    elif module == "torch":
        import torch
        torch_dtype = template.dtype if dtype is None else torch.from_numpy(np.empty(0, dtype=dtype)).dtype
        array = torch.empty(n, dtype=torch_dtype, device=template.device)
    else:
        cuda = _cuda()
        array = cuda.device_array(n, dtype=cuda.as_cuda_array(template).dtype if dtype is None else dtype)
        return array, array
    return array, _cuda().as_cuda_array(array)


def _tile_grid(rows, tile_rows):
    return -(-rows // tile_rows)


def row_move_unit(itemsize: int, cols: int, *arrays) -> int:
    """Bytes each lane moves per access in a whole-array row copy (the Row gather, the owner-based Last
    write): the widest of 8, 4, 2, 1 that divides the row and every array's base address. A row is a
    plain bit copy, so moving it in wider units changes nothing but the instruction width; warps still
    own rows as in the A5 mapping."""
    row_bytes = itemsize * cols
    for unit in (8, 4, 2):
        if unit > itemsize and row_bytes % unit == 0 and all(a5.base_address(a) % unit == 0 for a in arrays):
            return unit
    return itemsize


def _row_units(plan, cols, *arrays):
    """(unit dtype, units per row) of a whole-array row copy: see :func:`row_move_unit`."""
    unit = row_move_unit(plan.dtype.itemsize, cols, *arrays)
    return dtypes.unsigned(unit), cols * plan.dtype.itemsize // unit


def gather(plan, table, idx, tile_rows, out_shape, out_cols):
    """A device table gathers into a new device array of its own kind and dtype; a host table into a host
    array (through device memory on the GPU backend)."""
    bits, n = plan.dtype.bits, idx.rows * out_cols
    gpu = a5_backend() == "gpu"
    table_flat, idx_flat = _flat(table, bits, gpu), _flat(idx, idx.dtype.numpy, gpu)
    result = None
    if not gpu:
        out = np.empty(n, dtype=bits)  # the kernels write every element (the gather or T(0))
    elif table.device:
        result, out = _empty_device(table.obj, n)
        out = out.view(bits)
    else:
        out = _cuda().device_array(n, dtype=bits)
    rows, grid = idx.rows, _tile_grid(idx.rows, tile_rows)
    if plan.coalesce == Coalesce.ROW:
        unit_dtype, units = _row_units(plan, out_cols, table_flat, out)
        geo = geometry.row_geometry(tile_rows, units)
        run_kernel(simt_mgather_row_kernel, (plan.rule,), grid, geo.launch_warps, (
            out.view(unit_dtype), units, 1, idx_flat, 1, table_flat.view(unit_dtype), plan.capacity, rows, units,
            tile_rows, geo.row_warps, geo.warps_per_row))
    else:
        geo = geometry.elem_geometry(tile_rows, out_cols)
        run_kernel(simt_mgather_elem_kernel, (plan.rule,), grid, geo.launch_warps, (
            out, out_cols, 1, idx_flat, out_cols, 1, table_flat, plan.capacity, rows, out_cols, tile_rows))
    if result is not None:
        return result.reshape(out_shape)
    host = out.copy_to_host() if gpu else out
    return host.view(plan.dtype.numpy).reshape(out_shape)


def _scatter_operands(plan, table, src, gpu):
    """(format, table argument, boundary, src flat): the table in the form the store needs (see
    :func:`simt_pto.host.a5.scatter_table`) and the source staged on the device."""
    fmt = a5.element_format(plan)
    table_arg, boundary = a5.scatter_table(plan, fmt)
    return fmt, table_arg, boundary, _flat(src, store.source_dtype(plan.atomic, fmt, plan.dtype), gpu)


def scatter(plan, table, src, idx, tile_rows, last_path, slot_path_max_work):
    gpu = a5_backend() == "gpu"
    fmt, table_arg, boundary, src_flat = _scatter_operands(plan, table, src, gpu)
    idx_flat = _flat(idx, idx.dtype.numpy, gpu)
    rows, cols = idx.rows, (src.cols if plan.coalesce == Coalesce.ROW else idx.cols)
    last = plan.atomic == ScatterAtomicOp.NONE and plan.conflict == ScatterConflict.LAST
    with a5.holding(boundary):  # a mid-word 16-bit float Add: staged boundary words, loaded here
        host_arg = table_arg
        staged = gpu and not table.device and a5.holds_host_memory(table_arg)
        if staged:  # a host table on the GPU: its memory (and the staged words) goes over and comes back
            table_arg = a5.to_device(table_arg)
        if not last:
            _scatter_tiles(plan, table_arg, src_flat, idx_flat, rows, cols, tile_rows, fmt)
        else:
            slot_work = plan.capacity * rows * (cols if plan.coalesce == Coalesce.ELEM else 1)
            if last_path == "slot" or (last_path == "auto" and slot_work <= slot_path_max_work):
                _last_slot_centric(plan, table_arg, src_flat, idx_flat, rows, cols, tile_rows)
            else:
                _last_owner(plan, table, table_arg, src_flat, idx_flat, rows, cols, tile_rows, gpu)
        if gpu:
            _cuda().synchronize()
        if staged:
            a5.copy_to_host(table_arg, host_arg)


def _scatter_tiles(plan, table_arg, src, idx, rows, cols, tile_rows, fmt):
    grid = _tile_grid(rows, tile_rows)
    policy = (plan.rule, int(plan.atomic), fmt)
    if plan.coalesce == Coalesce.ROW:
        geo = geometry.row_geometry(tile_rows, cols)
        run_kernel(simt_mscatter_row_kernel, policy, grid, geo.launch_warps, (
            table_arg, src, cols, 1, idx, 1, plan.capacity, rows, cols, tile_rows, geo.row_warps, geo.warps_per_row))
    else:
        geo = geometry.elem_geometry(tile_rows, cols)
        run_kernel(simt_mscatter_elem_kernel, policy, grid, geo.launch_warps, (
            table_arg, src, cols, 1, idx, cols, 1, plan.capacity, rows, cols, tile_rows))


def _last_slot_centric(plan, table_arg, src, idx, rows, cols, tile_rows):
    """The per-tile slot-centric Last kernels, one tile after the other (later tiles overwrite)."""
    geo = geometry.last_geometry(plan.capacity)
    grid = min(MAX_GRID, max(1, -(-plan.capacity // geo.threads)))
    for r0 in range(0, rows, tile_rows):
        n = min(tile_rows, rows - r0)
        if plan.coalesce == Coalesce.ROW:
            run_kernel(simt_mscatter_row_last_kernel, (plan.rule,), grid, geo.launch_warps, (
                table_arg, src[r0 * cols:(r0 + n) * cols], cols, 1, idx[r0:r0 + n], 1, plan.capacity, n, cols))
        else:
            run_kernel(simt_mscatter_elem_last_kernel, (plan.rule,), grid, geo.launch_warps, (
                table_arg, src[r0 * cols:(r0 + n) * cols], cols, 1, idx[r0 * cols:(r0 + n) * cols], cols, 1,
                plan.capacity, n, cols))


DENSE_OWNER_SLOTS_PER_UPDATE = 32
"""The owner path keeps one owner per table slot (no sort) while the table has at most this many slots per
update (plus :data:`DENSE_OWNER_MIN_SLOTS`); past that, one owner per distinct slot the updates reach."""
DENSE_OWNER_MIN_SLOTS = 1 << 16
"""Tables of at most this many slots always take the dense owner array (256 KB of int32 at most)."""


def owner_layout(capacity: int, updates: int) -> str:
    """The owner state of a Conflict::Last scatter of ``updates`` flat source positions into ``capacity`` slots:
    ``"dense"``, one owner per table slot (O(capacity) memory and work, no sort), while the table is comparable
    to the updates; else ``"compact"``, one owner per distinct slot reached (O(updates) memory, an
    O(updates log updates) sort on the host). Both give the sequential result bit for bit."""
    if capacity <= DENSE_OWNER_SLOTS_PER_UPDATE * updates + DENSE_OWNER_MIN_SLOTS:
        return "dense"
    return "compact"


def _owner_dtype(updates: int) -> np.dtype:
    # a flat source position per owner: int32 while every position fits (half the memory traffic of int64)
    return np.dtype(np.int32 if updates < 2 ** 31 else np.int64)


def _new_owner(table, n, owner_dtype, gpu):
    """``n`` uninitialised owners: on the device (from the table's library when it is a device array)."""
    if gpu:
        return _empty_device(table.obj if table.device else None, n, owner_dtype)[1]
    return np.empty(n, dtype=owner_dtype)


def _last_owner(plan, table, table_arg, src, idx, rows, cols, tile_rows, gpu):
    """Owner-based Last: mark every owner unowned, claim each slot for its largest flat source position with an
    atomic max, then write each owned slot from its owner (MSCATTER.md, "Conflict Resolution": the result of
    ``for i in order: table[remap(idx[i])] = src[i]``). The owners are one per table slot or one per distinct
    slot reached, whichever :func:`owner_layout` says is cheaper."""
    updates = rows * (cols if plan.coalesce == Coalesce.ELEM else 1)
    if owner_layout(plan.capacity, updates) == "dense":
        _last_owner_dense(plan, table, table_arg, src, idx, rows, cols, tile_rows, gpu)
    else:
        _last_owner_compact(plan, table, table_arg, src, idx, rows, cols, tile_rows, gpu)


def _last_owner_dense(plan, table, table_arg, src, idx, rows, cols, tile_rows, gpu):
    """One owner per table slot; the claim remaps on the device and the write walks the whole table."""
    cap = plan.capacity
    owner = _new_owner(table, cap, _owner_dtype(rows * cols), gpu)  # (Row: rows * cols bounds the rows too)
    warps = geometry.MAX_WARPS
    run_kernel(simt_mscatter_owner_reset_kernel, (), _flat_grid(cap), warps, (owner,))
    if plan.coalesce == Coalesce.ROW:
        run_kernel(simt_mscatter_row_owner_claim_kernel, (plan.rule,), _flat_grid(rows), warps, (owner, idx, 1, cap, rows))
        unit_dtype, units = _row_units(plan, cols, table_arg, src)
        slots_per_block = min(tile_rows, cap)
        geo = geometry.row_geometry(slots_per_block, units)
        run_kernel(simt_mscatter_row_owner_write_kernel, (), _tile_grid(cap, slots_per_block), geo.launch_warps, (
            table_arg.view(unit_dtype), src.view(unit_dtype), units, 1, owner, cap, units, slots_per_block,
            geo.row_warps, geo.warps_per_row))
    else:
        run_kernel(simt_mscatter_elem_owner_claim_kernel, (plan.rule,), _flat_grid(rows * cols), warps, (
            owner, idx, cols, 1, cap, rows, cols))
        run_kernel(simt_mscatter_elem_owner_write_kernel, (), _flat_grid(cap), warps, (
            table_arg, src, cols, 1, owner, cap, cols))


def compact_slots(raw, capacity: int, rule: int, id_dtype=np.int64):
    """``(slots, ids)`` of the compact owner path: the distinct slots the raw indices reach under the index rule
    (int64, ascending), and per index, in flat source order, the position of its slot in ``slots``, or -1 where
    the rule drops the update (Skip, or UNDEFINED with ``strict=False``, out of range). The remap is
    :func:`simt_pto.kernels.index_policy.remap_array`, the kernels' own. O(n log n) time, O(n) memory."""
    remapped, in_range = remap_array(np.ascontiguousarray(raw).reshape(-1), capacity, rule)
    if in_range.all():
        slots, inverse = np.unique(remapped, return_inverse=True)
        return slots, inverse.astype(id_dtype, copy=False)
    slots, inverse = np.unique(remapped[in_range], return_inverse=True)
    ids = np.full(remapped.size, -1, dtype=id_dtype)
    ids[in_range] = inverse
    return slots, ids


def _last_owner_compact(plan, table, table_arg, src, idx, rows, cols, tile_rows, gpu):
    """One owner per distinct slot reached: the host numbers the slots (:func:`compact_slots`, from a host copy of
    the indices on the GPU backend), the device claims ``owner[ids[p]]`` and writes only those slots."""
    updates = rows * cols if plan.coalesce == Coalesce.ELEM else rows
    owner_dtype = _owner_dtype(updates)
    raw = idx.copy_to_host() if gpu else idx
    slots, ids = compact_slots(raw[:updates], plan.capacity, plan.rule, owner_dtype)
    distinct = slots.size
    if distinct == 0:  # every update dropped: nothing to write
        return
    if gpu:
        cuda = _cuda()
        slots, ids = cuda.to_device(slots), cuda.to_device(ids)
    owner = _new_owner(table, distinct, owner_dtype, gpu)
    warps = geometry.MAX_WARPS
    run_kernel(simt_mscatter_owner_reset_kernel, (), _flat_grid(distinct), warps, (owner,))
    run_kernel(simt_mscatter_compact_owner_claim_kernel, (), _flat_grid(updates), warps, (owner, ids, updates))
    if plan.coalesce == Coalesce.ROW:
        unit_dtype, units = _row_units(plan, cols, table_arg, src)
        per_block = min(tile_rows, distinct)
        geo = geometry.row_geometry(per_block, units)
        run_kernel(simt_mscatter_row_compact_owner_write_kernel, (), _tile_grid(distinct, per_block),
                   geo.launch_warps, (table_arg.view(unit_dtype), src.view(unit_dtype), units, 1, owner, slots,
                                      distinct, units, per_block, geo.row_warps, geo.warps_per_row))
    else:
        run_kernel(simt_mscatter_elem_compact_owner_write_kernel, (), _flat_grid(distinct), warps, (
            table_arg, src, cols, 1, owner, slots, distinct, cols))


def _flat_grid(work_items: int) -> int:
    """Blocks of a flat grid-stride launch of ``dim3(32, 32)`` over ``work_items``."""
    return min(MAX_GRID, max(1, -(-work_items // (geometry.WARP * geometry.MAX_WARPS))))
