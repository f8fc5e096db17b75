"""Host side of the A5 target: choose the kernel for a validated call, size its launch, move memory.

:func:`resolve_mgather` / :func:`resolve_mscatter` are the one dispatch: ``run_*`` launch what they
return, and ``simt-pto inspect`` compiles the same :class:`KernelLaunch` without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simt_pto import geometry
from simt_pto.backend import a5_backend
from simt_pto.enums import Coalesce, GatherExec, ScatterAtomicOp, ScatterConflict
from simt_pto.kernels.index_policy import remap_index
from simt_pto.kernels.l1_scalar import run_mgather_l1_scalar
from simt_pto.kernels.softfloat import add_bf16_bits, add_f16_bits
from . import simt
from .device import BF16, F16, F32_ORDER, NATIVE
from .l1 import simt_mgather_l1_elem_kernel
from .mgather import simt_mgather_elem_kernel, simt_mgather_row_kernel
from .mscatter import (simt_mscatter_elem_kernel, simt_mscatter_elem_last_kernel, simt_mscatter_row_kernel,
                       simt_mscatter_row_last_kernel)



def on_gpu() -> bool:
    """True when the A5 kernels run on a CUDA GPU (host arrays are staged to the device and back)."""
    return a5_backend() == "gpu"


def _cuda():
    from numba import cuda
    return cuda


@dataclass
class KernelLaunch:
    """One SIMT launch: which kernel (by its spec name), its compile-time policy, its geometry and args
    (``args`` follow the kernel's ``launch`` tuple, which :func:`simt.launch` supplies)."""

    name: str
    factory: object
    policy: tuple
    geometry: geometry.LaunchGeometry
    args: list
    write_back: list = field(default_factory=list)
    """(arg position, host array) pairs the kernel writes: copied back after a GPU launch."""
    finish: object = None
    """Called after the launch (un-staging of 16-bit atomic tables)."""

    @property
    def kernel(self):
        """The kernel source (plain Python; :mod:`.simt` compiles it per backend)."""
        return self.factory(*self.policy)

    def run(self) -> None:
        backend = a5_backend()
        gpu = backend == "gpu"
        args = [_to_device(a) for a in self.args] if gpu else list(self.args)
        simt.launch(self.kernel, 1, self.geometry.launch_warps, args, backend)  # a tile op is one block
        if gpu:
            for pos, host in self.write_back:
                dev, host = (args[pos][0], host[0]) if isinstance(host, tuple) else (args[pos], host)
                dev.copy_to_host(host)
            _cuda().synchronize()
        if self.finish is not None:
            self.finish()


def _to_device(arg):
    """Host arrays to the GPU; a tuple of views of one host buffer becomes views of one device buffer."""
    if isinstance(arg, np.ndarray):
        return _cuda().to_device(arg)
    if isinstance(arg, tuple) and isinstance(arg[0], np.ndarray):
        base = _cuda().to_device(arg[0])
        return (base,) + tuple(base.view(a.dtype) for a in arg[1:])
    return arg


def _table_memory(plan, dtype):
    """The table's flat memory viewed as ``dtype``: a numpy view, or a device view without copying."""
    if plan.table.on_device:
        return _cuda().as_cuda_array(plan.table.array).reshape(plan.table.size).view(dtype)
    return plan.table.flat.view(dtype)


def _gm_memory(tensor, dtype):
    """A GM tensor's flat memory viewed as ``dtype``: a numpy view, or a device view without copying."""
    if tensor.on_device:
        return _cuda().as_cuda_array(tensor.array).reshape(tensor.size).view(dtype)
    return tensor.flat.view(dtype)


def _tile_bits(tile):
    return tile.data.view(tile.dtype.bits)


def _row_idx_args(plan):
    return plan.idx.data, plan.idx_step


def resolve_mgather_l1(plan) -> KernelLaunch | None:
    """The launch for a GM -> L1 MGATHER (MAT destination): ``simt_mgather_l1_elem_kernel`` for
    ``GatherExec::Simt`` (Elem only), sized by :func:`geometry.l1_elem_geometry` over the padded NZ tile;
    None for ``GatherExec::Scalar`` (the cube core's scalar walk, no SIMT launch).

    The launch writes the GM scratch; its ``finish`` is the AIC's bulk ``copy_gm_to_cbuf`` of the first
    ``Rows * Cols`` scratch elements onto the L1 tile."""
    if plan.exec != GatherExec.SIMT:
        return None
    dst, bits, n = plan.tile, plan.dtype.bits, plan.tile_elems
    scratch = _gm_memory(plan.scratch, bits)
    geo = geometry.l1_elem_geometry(dst.rows, dst.cols)
    args = [scratch, _table_memory(plan, bits), _gm_memory(plan.idx, np.uint32), plan.idx_step, plan.rows,
            plan.cols, plan.capacity, dst.rows, n, plan.kc0]

    def copy_gm_to_cbuf():
        staged = scratch[:n].copy_to_host() if plan.scratch.on_device else scratch[:n]
        _tile_bits(dst)[:] = staged
    return KernelLaunch("simt_mgather_l1_elem_kernel", simt_mgather_l1_elem_kernel, (plan.rule,), geo, args,
                        write_back=[] if plan.scratch.on_device else [(0, scratch)], finish=copy_gm_to_cbuf)


def resolve_mgather(plan) -> KernelLaunch | None:
    """The launch for an MGATHER; None for the ``(1, 1)`` Elem case (``MGatherScalarImpl``) and for the
    scalar GM -> L1 walk (see :func:`resolve_mgather_l1`)."""
    if plan.l1:
        return resolve_mgather_l1(plan)
    dst, table = plan.tile, _table_memory(plan, plan.dtype.bits)
    dst_bits = _tile_bits(dst)
    rs, cs = dst.strides
    if plan.coalesce == Coalesce.ROW:
        geo = geometry.row_geometry(plan.rows, plan.cols)
        idx, step = _row_idx_args(plan)
        args = [dst_bits, rs, cs, idx, step, table, plan.capacity, plan.rows, plan.cols, plan.rows,
                geo.row_warps, geo.warps_per_row]
        return KernelLaunch("simt_mgather_row_kernel", simt_mgather_row_kernel, (plan.rule,), geo, args,
                            write_back=[(0, dst_bits)])
    if plan.rows == 1 and plan.cols == 1:
        return None
    geo = geometry.elem_geometry(plan.rows, plan.cols)
    irs, ics = plan.idx.strides
    args = [dst_bits, rs, cs, plan.idx.data, irs, ics, table, plan.capacity, plan.rows, plan.cols, plan.rows]
    return KernelLaunch("simt_mgather_elem_kernel", simt_mgather_elem_kernel, (plan.rule,), geo, args,
                        write_back=[(0, dst_bits)])


def _element_format(plan) -> int:
    name = plan.dtype.name
    if plan.atomic == ScatterAtomicOp.ADD and name in ("float16", "bfloat16"):
        return F16 if name == "float16" else BF16
    if plan.atomic in (ScatterAtomicOp.MAX, ScatterAtomicOp.MIN) and name == "float32":
        return F32_ORDER
    return NATIVE


def _scatter_table(plan, fmt):
    """(table argument, finish) for a scatter: raw bits for stores, the typed element for native atomics,
    the (int32, uint32) views for float32 Max / Min, and uint32 words for 16-bit float atomics
    (:func:`_half_atomic_words`)."""
    if fmt == NATIVE:
        dtype = plan.dtype.bits if plan.atomic == ScatterAtomicOp.NONE else plan.dtype.numpy
        return _table_memory(plan, dtype), None
    if fmt == F32_ORDER:
        return (_table_memory(plan, np.int32), _table_memory(plan, np.uint32)), None
    return _half_atomic_words(plan)


def _half_atomic_words(plan):
    """(uint32 words, finish) for a float16 / bfloat16 atomicAdd, whose CAS loop works on the aligned
    32-bit word that holds the element.

    The words are the table's own memory when it starts on a 4-byte boundary and holds an even number of
    elements. Otherwise the last (or first) word would reach past the tensor, so the CAS runs on a padded
    staging copy, on the device for a device table (no host round trip), which ``finish`` copies back:
    no CAS ever touches a byte outside the tensor."""
    n = plan.table.size
    bits = _table_memory(plan, np.uint16)
    if n % 2 == 0 and base_address(bits) % 4 == 0:
        return bits.view(np.uint32), None
    if plan.table.on_device:
        words = _cuda().device_array((n + 1) // 2, dtype=np.uint32)
        staged = words.view(np.uint16)[:n]
        staged.copy_to_device(bits)
        return words, lambda: bits.copy_to_device(staged)
    words = np.zeros((n + 1) // 2, dtype=np.uint32)
    staged = words.view(np.uint16)[:n]
    staged[:] = bits

    def finish():
        bits[:] = staged
    return words, finish


def base_address(array) -> int:
    """The address of a host (numpy) or device (Numba) array's first element."""
    if isinstance(array, np.ndarray):
        return array.ctypes.data
    return array.device_ctypes_pointer.value


def resolve_mscatter(plan) -> KernelLaunch | None:
    """The launch for an MSCATTER; None for the ``(1, 1)`` Elem case (``MScatterScalarImpl``)."""
    src = plan.tile
    fmt = _element_format(plan)
    src_data = src.data.view(np.int32 if fmt == F32_ORDER else plan.dtype.bits
                             if fmt != NATIVE or plan.atomic == ScatterAtomicOp.NONE else plan.dtype.numpy)
    rs, cs = src.strides
    last = plan.atomic == ScatterAtomicOp.NONE and plan.conflict == ScatterConflict.LAST
    if plan.coalesce == Coalesce.ELEM and plan.rows == 1 and plan.cols == 1:
        return None
    table, finish = _scatter_table(plan, fmt)
    # Host memory (a host table, or the 16-bit atomic staging words) comes back after a GPU launch.
    write_back = [(0, table)] if isinstance(table[0] if isinstance(table, tuple) else table, np.ndarray) else []
    if plan.coalesce == Coalesce.ROW:
        idx, step = _row_idx_args(plan)
        if last:
            geo = geometry.last_geometry(plan.capacity)
            args = [table, src_data, rs, cs, idx, step, plan.capacity, plan.rows, plan.cols]
            return KernelLaunch("simt_mscatter_row_last_kernel", simt_mscatter_row_last_kernel, (plan.rule,),
                                geo, args, write_back=write_back, finish=finish)
        geo = geometry.row_geometry(plan.rows, plan.cols)
        args = [table, src_data, rs, cs, idx, step, plan.capacity, plan.rows, plan.cols, plan.rows,
                geo.row_warps, geo.warps_per_row]
        return KernelLaunch("simt_mscatter_row_kernel", simt_mscatter_row_kernel, (plan.rule, int(plan.atomic), fmt),
                            geo, args, write_back=write_back, finish=finish)
    irs, ics = plan.idx.strides
    if last:
        geo = geometry.last_geometry(plan.capacity)
        args = [table, src_data, rs, cs, plan.idx.data, irs, ics, plan.capacity, plan.rows, plan.cols]
        return KernelLaunch("simt_mscatter_elem_last_kernel", simt_mscatter_elem_last_kernel, (plan.rule,),
                            geo, args, write_back=write_back, finish=finish)
    geo = geometry.elem_geometry(plan.rows, plan.cols)
    args = [table, src_data, rs, cs, plan.idx.data, irs, ics, plan.capacity, plan.rows, plan.cols, plan.rows]
    return KernelLaunch("simt_mscatter_elem_kernel", simt_mscatter_elem_kernel, (plan.rule, int(plan.atomic), fmt),
                        geo, args, write_back=write_back, finish=finish)


# -- the (1, 1) Elem scalar fallbacks: no SIMT launch ---------------------------------------------------

def _scalar_slot(plan):
    raw = plan.idx.data[plan.idx.offsets()[0, 0]]
    return remap_index(raw, plan.capacity, plan.rule)


def _read_table(plan, slot):
    mem = _table_memory(plan, plan.dtype.bits)
    return mem[slot:slot + 1].copy_to_host()[0] if plan.table.on_device else mem[slot]


def mgather_scalar_impl(plan) -> None:
    """``MGatherScalarImpl`` (MGATHER.md, A5): the ``(1, 1)`` Elem gather on the AIV scalar pipe."""
    slot, in_range = _scalar_slot(plan)
    _tile_bits(plan.tile)[plan.tile.offsets()[0, 0]] = _read_table(plan, slot) if in_range else 0


def _scalar_combine(plan, old_bits, new_bits):
    """One scalar read-modify-write in the element type (raw bits in, raw bits out)."""
    atomic = plan.atomic
    if atomic == ScatterAtomicOp.NONE:
        return new_bits
    if plan.dtype.name == "float16":
        return add_f16_bits(int(old_bits), int(new_bits))
    if plan.dtype.name == "bfloat16":
        return add_bf16_bits(int(old_bits), int(new_bits))
    if plan.dtype.name == "float32" and atomic != ScatterAtomicOp.ADD:
        # The order of store_max_f32 / store_min_f32: int32 compare for a non-negative value,
        # uint32 compare for a negative one (-0.0 below +0.0, NaN by its sign bit).
        as_i32 = lambda b: int(np.array([b], np.uint32).view(np.int32)[0])  # noqa: E731
        o, v = int(old_bits), int(new_bits)
        if as_i32(v) >= 0:
            pick = max if atomic == ScatterAtomicOp.MAX else min
            return new_bits if pick(as_i32(o), as_i32(v)) == as_i32(v) and as_i32(o) != as_i32(v) else old_bits
        pick = min if atomic == ScatterAtomicOp.MAX else max
        return new_bits if pick(o, v) == v and o != v else old_bits
    t = plan.dtype.numpy.type
    old, new = np.array([old_bits]).view(t)[0], np.array([new_bits]).view(t)[0]
    with np.errstate(over="ignore"):
        out = {ScatterAtomicOp.ADD: lambda: t(old + new), ScatterAtomicOp.MAX: lambda: max(old, new),
               ScatterAtomicOp.MIN: lambda: min(old, new)}[atomic]()
    return np.array([out], dtype=t).view(plan.dtype.bits)[0]


def mscatter_scalar_impl(plan) -> None:
    """``MScatterScalarImpl`` (MSCATTER.md, A5): the ``(1, 1)`` Elem scatter on the AIV scalar pipe."""
    slot, in_range = _scalar_slot(plan)
    if not in_range:
        return
    value = _tile_bits(plan.tile)[plan.tile.offsets()[0, 0]]
    result = np.array([_scalar_combine(plan, _read_table(plan, slot), value)], dtype=plan.dtype.bits)
    if plan.table.on_device:
        _table_memory(plan, plan.dtype.bits)[slot:slot + 1].copy_to_device(result)
    else:
        plan.table.flat.view(plan.dtype.bits)[slot] = result[0]


def run_mgather(plan) -> None:
    if plan.l1:  # GM -> L1: the SIMT executor's launch, or the cube core's scalar walk
        launch = resolve_mgather_l1(plan)
        run_mgather_l1_scalar(plan) if launch is None else launch.run()
        return
    launch = resolve_mgather(plan)
    mgather_scalar_impl(plan) if launch is None else launch.run()


def run_mscatter(plan) -> None:
    launch = resolve_mscatter(plan)
    mscatter_scalar_impl(plan) if launch is None else launch.run()
