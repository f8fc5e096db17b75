"""Host side of the A5 target: the one A5 dispatch. A validated call becomes its :class:`CallPlan` (the kernel
launches, :class:`~simt_pto.launch_spec.LaunchSpec`, and the host steps: the ``(1, 1)`` Elem scalar fallbacks, the
cube core's GM -> L1 walk and copy, the staged boundary words), which :func:`run_plan` runs on an A5 backend
(MGATHER.md / MSCATTER.md, "A5 Form", "Performance Considerations — A5").

:func:`mgather_launches` / :func:`mscatter_launches` are what a tile op launches; ``simt-pto inspect`` compiles the same
specs without a GPU, the coalescing analyzer replays them, and the whole-array ops (:mod:`.a5_whole_array`) build their
plans from :func:`scatter_table` and run them with :func:`run_plan`.
"""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, NamedTuple

import numpy as np

from simt_pto import geometry
from simt_pto.backend import a5_backend, first_use, imported
from simt_pto.enums import Coalesce, ElementFormat, GatherExec, ScatterAtomicOp, ScatterConflict
from simt_pto.kernels import store, writers
from simt_pto.kernels.a5 import simt
from simt_pto.kernels.index_policy import remap_index
from simt_pto.kernels.cube_l1_walk import run_mgather_l1_scalar
from simt_pto.launch_spec import CallPlan, HostStep, KernelPolicy, LaunchSpec, launch_spec

from . import tuning
from .arrays import base_address
from .kept_launch import HOST_KEEPING, KeptLaunch, tile_checks, tile_operands


def on_gpu() -> bool:
    """True when the A5 kernels run on a CUDA GPU (host arrays are staged to the device and back)."""
    return a5_backend() == "gpu"


def _cuda():
    return imported("numba.cuda")


def run_plan(call: CallPlan, backend: str | None = None) -> None:
    """Run a call's plan on ``backend`` (default: the current A5 backend): inside its guard, each launch and each
    host step, in order.

    On the GPU, device arrays are used as they are; a host array (or tuple of them) is staged on the device at
    the first launch that takes it and used by every later launch that takes the same object, and the ones a
    launch writes (:attr:`~simt_pto.launch_spec.LaunchSpec.writes`) are copied back once, before the next host
    step and at the end, inside the guard. A whole-array call stages its table once, however many launches
    (the slot-centric Last path: one per tile) write it."""
    backend = a5_backend() if backend is None else backend
    if backend != "gpu":
        with call.guard():
            for step in call.steps:
                if isinstance(step, HostStep):
                    step.run()
                else:
                    simt.launch(step, backend)
        return
    with call.guard():
        table = _written_host_table(call)
        if table is None:
            _run_staged(call, backend)
        else:
            # the device copy of a host table is read in and written back whole: a read-modify-write of all of it,
            # so the call runs as the table's only writer (kernels/writers.py; admitted at once under a guard that
            # registered the same table already, the staged boundary words)
            writers.table_writers.run_exclusive(table, _run_staged, call, backend)


def _written_host_table(call: CallPlan):
    """The host table (an array, or a tuple of views of one) that a launch of ``call`` writes, or None."""
    for step in call.steps:
        if not isinstance(step, HostStep) and "table" in step.writes:
            table = dict(step.args)["table"]
            if holds_host_memory(table):
                return table
    return None


def _run_staged(call: CallPlan, backend: str) -> None:
    """The steps of ``call`` on the GPU, host arrays staged to the device and back (:class:`_Staging`)."""
    staging = _Staging()
    for step in call.steps:
        if isinstance(step, HostStep):
            staging.flush()  # a host step sees what the launches before it wrote
            step.run()
        else:
            simt.launch(step, backend, staging.args(step))
    staging.flush()
    _cuda().synchronize()


class _Staging:
    """The device copies of the host arguments of consecutive GPU launches, by the identity of the host object."""

    def __init__(self):
        self.staged: dict[int, tuple] = {}   # id(host) -> (host, device)
        self.written: dict[int, object] = {}

    def args(self, spec) -> tuple:
        out = []
        for name, value in spec.args:
            if not holds_host_memory(value):
                out.append(value)
                continue
            key = id(value)
            if key not in self.staged:
                self.staged[key] = (value, to_device(value))
            if name in spec.writes:
                self.written[key] = value
            out.append(self.staged[key][1])
        return tuple(out)

    def flush(self) -> None:
        """Copy back what the launches wrote, and forget the copies (a host step may change the host arrays)."""
        for key, host in self.written.items():
            copy_to_host(self.staged[key][1], host)
        self.staged.clear()
        self.written.clear()


def to_device(arg):
    """Host arrays to the GPU (anything else as it is): a tuple of views of one host buffer (the float32 Max / Min
    (int32, uint32) pair) becomes views of one device buffer; any other tuple, its members one by one."""
    if isinstance(arg, np.ndarray):
        return _cuda().to_device(arg)
    if isinstance(arg, tuple):
        if len(arg) == 2 and all(isinstance(a, np.ndarray) for a in arg) and np.shares_memory(*arg):
            base = _cuda().to_device(arg[0])
            return base, base.view(arg[1].dtype)
        return tuple(to_device(a) for a in arg)
    return arg


def copy_to_host(device_arg, host_arg) -> None:
    """Copy what :func:`to_device` staged back into the host arrays it came from (each buffer once)."""
    if isinstance(host_arg, np.ndarray):
        device_arg.copy_to_host(host_arg)
    elif isinstance(host_arg, tuple):
        for i, (dev, host) in enumerate(zip(device_arg, host_arg)):
            if isinstance(host, np.ndarray) and not any(isinstance(h, np.ndarray) and np.shares_memory(host, h)
                                                        for h in host_arg[:i]):
                dev.copy_to_host(host)


def holds_host_memory(arg) -> bool:
    """True when ``arg`` (an array or a tuple) holds host memory, which a GPU launch must copy back."""
    return any(isinstance(a, np.ndarray) for a in (arg if isinstance(arg, tuple) else (arg,)))


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
        geo = geometry.row_geometry(rows, cols)
        return CallPlan((LaunchSpec("simt_mgather_row_kernel", policy, (
            ("dst", tile_bits(dst)), ("dst_rs", rs), ("dst_cs", cs), ("idx", tile_bits(plan.idx)),
            ("idx_step", plan.idx_step), ("table", table), ("table_rows", plan.capacity), ("valid_rows", rows),
            ("valid_cols", cols), ("tile_rows", rows), ("row_warps", geo.row_warps),
            ("warps_per_row", geo.warps_per_row)), geo, 1, ("dst",)),))
    if rows == 1 and cols == 1:
        return CallPlan((HostStep("MGatherScalarImpl: the (1, 1) Elem gather on the AIV scalar pipe",
                                  lambda: mgather_scalar_impl(plan)),))
    irs, ics = plan.idx.strides
    return CallPlan((LaunchSpec("simt_mgather_elem_kernel", policy, (
        ("dst", tile_bits(dst)), ("dst_rs", rs), ("dst_cs", cs), ("idx", tile_bits(plan.idx)), ("idx_rs", irs),
        ("idx_cs", ics), ("table", table), ("table_size", plan.capacity), ("valid_rows", rows), ("valid_cols", cols),
        ("tile_rows", rows)), geometry.elem_geometry(rows, cols), 1, ("dst",)),))


class TableMemory(NamedTuple):
    """A scatter's table as its launches see it, for a call whose plan has no GlobalTensor (a whole-array call:
    :mod:`.a5_whole_array`); it has the attributes of one that :func:`gm_memory` and :class:`BoundaryWords` read."""

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
    boundary = BoundaryWords(plan, table)
    return boundary.arg, boundary


def holding(boundary):
    """The context a scatter's launches run in: :meth:`BoundaryWords.held` for a mid-word 16-bit float Add,
    else nothing."""
    return contextlib.nullcontext() if boundary is None else boundary.held()


class BoundaryWords:
    """The table argument of a float16 / bfloat16 atomicAdd on a table that starts or ends mid-word (F16_EDGE /
    BF16_EDGE): ``(words, edge, head)`` for ``kernels/a5/device.atomic_add_half_edge``, whose CAS loop works on the
    aligned 32-bit word that holds the element.

    A word the tensor covers only in part (the first one when the table starts at an odd 2-byte offset, the last
    one when it ends mid-word) is CASed in place when the word lies inside the memory allocation that holds the
    tensor (the other half is never changed: the CAS writes back what it read there). Otherwise (the word crosses
    the allocation's edge, or the allocation is unknown) it is staged: the element is loaded into ``edge`` (two
    words, the element in the same half) before the launch and written back after it, so that no access ever
    reaches a byte outside the allocation. Whether a word is staged depends on the word and its allocation only,
    so every call that touches it agrees; calls that stage the same word are serialised by a lock keyed by the
    word's address (:meth:`held`), so concurrent calls lose no update.

    ``head`` encodes the layout: bit 0 is set when element 0 is the high half of its word (the table starts at an
    odd 2-byte offset), bit 1 when that first word is staged (``words`` then starts at the next word). Element
    ``e`` is half ``(e + (head & 1)) & 1`` of word ``((e + (head & 1)) >> 1) - (head >> 1)`` of ``words``; an index
    past either end of ``words`` is ``edge[0]`` / ``edge[1]``. O(1) extra memory and traffic."""

    GUARD_NAME = "stage the mid-word boundary words before the launches, publish them after (under their locks)"

    def __init__(self, plan, table=None):
        table = plan.table if table is None else table  # a GlobalTensor, or a whole-array call's TableMemory
        self.device = table.on_device
        bits = gm_memory(table, np.uint16)
        self._bits = bits
        n = table.size
        address = base_address(bits)
        odd_start = (address % 4) // 2
        tail = (n - odd_start) % 2  # 1: the last element is the low half of a word the tensor ends inside
        lo, hi, owner = _allocation(table.array, address, 2 * n)
        first = -odd_start if odd_start and address - 2 >= lo else odd_start  # element where ``words`` starts
        last = n + tail if tail and address + 2 * n + 2 <= hi else n - tail   # element where ``words`` ends
        words = None
        if first < 0 or last > n:  # a word reaching past the tensor, inside its allocation: a view of it
            words = _words_at(owner, address + 2 * first - lo, (last - first) // 2, self.device)
            if words is None:  # the allocation cannot be viewed as writable words: stage both ends
                first, last = odd_start, n - tail
        if words is None:
            words = bits[first:last].view(np.uint32)
        self.pieces = []  # (edge word, element, shift) of the staged elements
        if odd_start and first > 0:
            self.pieces.append((0, 0, 16))
        if tail and last < n:
            self.pieces.append((1, n - 1, 0))
        self.addresses = sorted({(address + 2 * e) & ~3 for _, e, _ in self.pieces})
        self._host_edge = np.zeros(2, dtype=np.uint32)
        self.edge = _cuda().to_device(self._host_edge) if self.device else self._host_edge
        self.arg = (words, self.edge, odd_start | (2 if first > 0 else 0))

    def stage(self) -> None:
        """Load each staged element into its edge word."""
        if not self.pieces:
            return
        if self.device:
            for w, e, shift in self.pieces:
                self._host_edge[w] = int(self._bits[e:e + 1].copy_to_host()[0]) << shift
            self.edge.copy_to_device(self._host_edge)
            return
        for w, e, shift in self.pieces:
            self._host_edge[w] = int(self._bits[e]) << shift

    def publish(self) -> None:
        """Write each staged element back into the table (a 16-bit store: only the tensor's own bytes)."""
        if not self.pieces:
            return
        back = self.edge.copy_to_host() if self.device else self._host_edge
        for w, e, shift in self.pieces:
            value = (int(back[w]) >> shift) & 0xFFFF
            if self.device:
                self._bits[e:e + 1].copy_to_device(np.array([value], dtype=np.uint16))
            else:
                self._bits[e] = value

    @contextlib.contextmanager
    def held(self):
        """Stage, run the body (the launch), publish: under the locks of the staged words, so that calls staging
        the same word run one at a time. The publish runs however the body ends (an interrupted launch keeps the
        adds it made). Staging and publishing are a read-modify-write of the staged elements that an update by
        another writer in between would be lost to, so a host table with staged elements is registered as written by
        this call alone (:mod:`simt_pto.kernels.writers`), before the locks are taken; its launches, whose table
        argument the registration ``covers``, are admitted under it."""
        registry = writers.table_writers
        token = registry.token()
        try:
            if self.pieces and not self.device:
                registry.enter_exclusive(token, self._bits, covers=self.arg[0])
            locks = boundary_locks(self.addresses, self.device)
            for lock in locks:
                lock.acquire()
            try:
                self.stage()
                try:
                    yield self.arg
                finally:
                    self.publish()
            finally:
                for lock in reversed(locks):
                    lock.release()
        finally:
            registry.leave_exclusive(token)


_LOCK_STRIPES = 64
_boundary_locks = tuple(threading.Lock() for _ in range(_LOCK_STRIPES))


def boundary_locks(addresses, device: bool) -> list:
    """The locks of staged boundary words (striped by address, in one global order so that two calls never wait
    on each other crosswise)."""
    stripes = sorted({(hash((device, a)) >> 2) % _LOCK_STRIPES for a in addresses})
    return [_boundary_locks[i] for i in stripes]


def _reset_boundary_locks():  # a forked child has none of the parent's threads: no lock is really held
    global _boundary_locks
    _boundary_locks = tuple(threading.Lock() for _ in range(_LOCK_STRIPES))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_boundary_locks)


def _allocation(array, address: int, nbytes: int) -> tuple[int, int, object]:
    """``(lo, hi, owner)``: the byte range of the allocation that holds ``array``'s memory, as far as it can be
    known, and what holds all of it: for a host array, a writable uint8 view of the owning numpy array or buffer
    object; for device memory (the memory block of a CuPy array, the storage of a PyTorch tensor) the array
    itself, which keeps the allocation alive. Unknown: the array's own bytes and no owner."""
    if isinstance(array, np.ndarray):
        base = array
        while isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        owner = None
        if isinstance(base, np.ndarray):
            if base.flags.writeable and base.size and (base.flags.c_contiguous or base.flags.f_contiguous):
                owner = (base.reshape(-1) if base.flags.c_contiguous else base.T.reshape(-1)).view(np.uint8)
        else:
            try:
                owner = np.frombuffer(memoryview(base).cast("B"), dtype=np.uint8)
            except (TypeError, ValueError, BufferError):
                pass
        if owner is not None and owner.size and owner.flags.writeable:
            return owner.ctypes.data, owner.ctypes.data + owner.size, owner
        return address, address + nbytes, None
    module = type(array).__module__.split(".")[0]
    try:
        if module == "cupy":
            mem = array.data.mem
            return int(mem.ptr), int(mem.ptr) + int(mem.size), array
        if module == "torch":
            storage = array.untyped_storage()
            return int(storage.data_ptr()), int(storage.data_ptr()) + int(storage.nbytes()), array
    except (AttributeError, TypeError, RuntimeError):
        pass
    return address, address + nbytes, None


class _DeviceWords:
    """``count`` uint32 words of device memory at ``address`` (for ``cuda.as_cuda_array``); holds the owner."""

    def __init__(self, owner, address: int, count: int):
        self.owner = owner
        self.__cuda_array_interface__ = {"shape": (count,), "strides": None, "typestr": "<u4",
                                         "data": (address, False), "version": 3}


def _words_at(owner, offset: int, count: int, device: bool):
    """``count`` uint32 words at byte ``offset`` of the allocation ``owner`` holds (a view that reaches the half
    word the tensor does not cover), or None when the allocation is unknown."""
    if owner is None:
        return None
    if device:
        lo = _allocation(owner, 0, 0)[0]
        return _cuda().as_cuda_array(_DeviceWords(owner, lo + offset, count))
    return owner[offset:offset + 4 * count].view(np.uint32)


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
        geo = geometry.row_geometry(plan.rows, plan.cols)
        launch = launch_spec("simt_mscatter_row_kernel", policy, geo, writes=("table",), table=table, src=src,
                             src_rs=rs, src_cs=cs, idx=tile_bits(plan.idx), idx_step=plan.idx_step, table_rows=plan.capacity,
                             valid_rows=plan.rows, valid_cols=plan.cols, tile_rows=plan.rows, row_warps=geo.row_warps,
                             warps_per_row=geo.warps_per_row)
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
    :attr:`~.tuning.HostTuning.plain_add_max_updates` elements, else None."""
    if atomic == ScatterAtomicOp.NONE or fmt in store.EDGE.values() or updates > tuning.current().plain_add_max_updates:
        return None
    return "simt_mscatter_elem_serial_kernel"


def _elem_scatter_launches(plan) -> CallPlan:
    """``simt_mscatter_elem_kernel`` over the plan's tile (also the device form of the ``(1, 1)`` fallback)."""
    fmt = element_format(plan)
    table, boundary = scatter_table(plan, fmt)
    rs, cs = plan.tile.strides
    irs, ics = plan.idx.strides
    launch = launch_spec("simt_mscatter_elem_kernel", scatter_policy(plan, fmt),
                         geometry.elem_geometry(plan.rows, plan.cols), writes=("table",),
                         multicore_plain_kernel=elem_alone_kernel(plan.atomic, fmt, plan.rows * plan.cols), table=table,
                         src=plan.tile.data.view(store.source_dtype(plan.atomic, fmt, plan.dtype)), src_rs=rs,
                         src_cs=cs, idx=tile_bits(plan.idx), idx_rs=irs, idx_cs=ics, table_size=plan.capacity,
                         valid_rows=plan.rows, valid_cols=plan.cols, tile_rows=plan.rows)
    return guarded((launch,), boundary)


# -- the (1, 1) Elem scalar fallbacks: no SIMT launch ---------------------------------------------------

def _scalar_slot(plan):
    raw = plan.idx.data[plan.idx.offsets()[0, 0]]
    return remap_index(raw, plan.capacity, plan.rule)


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


def _kept_tile_op(plan, call: CallPlan, backend: str) -> KeptLaunch | None:
    """The kept launch of a tile op that ran ``call`` (its plan) on ``backend`` (``multicore`` or the simulator)
    over host memory, or None (a plan
    with a guard or a host step: the ``(1, 1)`` scalar fallbacks, a mid-word 16-bit float Add; a float32 Max / Min's
    pair of table views). :func:`mgather_launches` and :func:`mscatter_launches` read nothing of a call but its
    signature and its operands' memory, so a later call of the signature differs only in the arrays the launches
    take; its per-call checks are :func:`.kept_launch.tile_checks`', and a 16-bit float Add's table must start on a
    4-byte boundary (its words' CAS form; else the boundary-word form)."""
    whole_words = plan.op == "MSCATTER" and element_format(plan) in store.EDGE
    return keep_on_host(call, tile_operands(plan.op, plan.tile, plan.table, plan.idx), backend, **tile_checks(plan),
                        aligned_to=4 if whole_words else 1)


def keep_on_host(call: CallPlan, operands: dict, backend: str, **checks) -> KeptLaunch | None:
    """:meth:`.kept_launch.KeptLaunch.of` for a plan that has just run over host memory on ``backend``: each launch
    bound by :func:`simt_pto.kernels.a5.simt.multicore_launcher` (``multicore``) or
    :func:`~simt_pto.kernels.a5.simt.simulator_launcher` (``simulator``); ``checks``: the kept launch's per-call
    checks."""
    launcher = simt.multicore_launcher if backend == "multicore" else simt.simulator_launcher
    return KeptLaunch.of(call, operands, launcher, **checks)


def keep_gpu(call: CallPlan, plan, operands: tuple[str, ...], *, made: dict | None = None,
             apart: tuple = ()) -> KeptLaunch | None:
    """The kept launch of ``call``, one launch that has just run on the GPU backend, taking the device arrays named
    ``operands`` as data pointers (:func:`~simt_pto.kernels.a5.simt.single_gpu_launcher`), after the device index
    scan where ``plan`` leaves out-of-range indices undefined (:class:`~simt_pto.kernels.a5.direct_launch.IndexScan`
    over the launch's ``idx``); None where either cannot be made."""
    launch = simt.single_gpu_launcher(call, operands)
    if launch is None:
        return None
    scan = None
    if plan.checks_range:
        with first_use:
            from simt_pto.kernels.a5.direct_launch import IndexScan
        scan = IndexScan.of(call.steps[0].arguments["idx"], plan.capacity)
        if scan is None:
            return None
    return KeptLaunch(((launch, operands),), made=made, apart=apart, scan=scan, device=True)


def run_kept(signature, backend: str, tile, table, idx) -> bool:
    """A repeated tile op (MGATHER or MSCATTER) of a validated ``signature``, on its kept launch (``signature.kept``,
    a :class:`~.kept_launch.KeptLaunch`) when ``backend`` keeps one and the call passes its per-call checks: True.
    False: nothing was run or written, the caller takes the full path."""
    kept = signature.kept if backend in HOST_KEEPING else None
    return kept is not None and kept.run(tile_operands(signature.op, tile, table, idx))


def _run_tile_op(plan, backend: str | None, build) -> None:
    """A tile op's plan on ``backend``: the kept launch of its signature when there is one and the call passes its
    checks, else ``build(plan)`` run and, over host memory (``multicore``, the simulator), kept for the next call of
    the signature."""
    backend = a5_backend() if backend is None else backend
    signature = plan.signature
    keeps = backend in HOST_KEEPING and signature is not None and not plan.table.on_device
    if keeps and signature.kept is not None and signature.kept.run(tile_operands(plan.op, plan.tile, plan.table,
                                                                                  plan.idx)):
        return
    call = build(plan)
    run_plan(call, backend)
    if keeps and signature.kept is None:  # (a mid-word table's boundary-word launch is never kept: it has a guard)
        signature.kept = _kept_tile_op(plan, call, backend)


def run_mgather(plan, backend: str | None = None) -> None:
    """MGATHER on A5: :func:`mgather_launches` run on ``backend``; over host memory, the kept launch of its signature
    (``signature.kept``, :func:`_kept_tile_op`) when there is one, and kept for the next call when there is none."""
    _run_tile_op(plan, backend, mgather_launches)


def run_mscatter(plan, backend: str | None = None) -> None:
    """MSCATTER on A5: :func:`mscatter_launches` run on ``backend``; over host memory, kept per signature as
    :func:`run_mgather`'s."""
    _run_tile_op(plan, backend, mscatter_launches)


__all__ = ["BoundaryWords", "base_address", "copy_to_host", "elem_alone_kernel",
           "element_format", "gm_memory", "guarded", "holding", "holds_host_memory", "mgather_l1_launches", "mgather_launches",
           "mgather_scalar_impl", "mscatter_launches", "mscatter_scalar_impl", "on_gpu", "run_kept", "run_mgather",
           "run_plan", "run_mscatter", "scatter_policy", "scatter_table", "table_memory", "tile_bits", "to_device"]
