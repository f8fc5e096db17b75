"""The fast path of repeated whole-array calls: one ready runner per call signature.

A whole-array call (:mod:`.in_memory`) wraps its operands, validates the call as one full tile, checks its indices and
builds its plan (the kernel launches on ``a5``, one host step per tile on the sequential targets) on every call:
tens of microseconds, more than gathering or scattering a few rows costs. All of that but the checks of the index
values and of the operands' memory gives the same answer for every call of one signature, and once such a call has
run, :func:`remember_gather` / :func:`remember_scatter` keep a runner for it. A later call of that signature, with
numpy operands that are C-contiguous (and, for a gather, no ``out``), is then run by :func:`gather` /
:func:`scatter` straight from the caller's arrays:

* the index array goes through the same narrowing (:func:`~.arrays.checked_indices`: int64 values outside
  ``[-2**31, 2**32)`` are refused with the full path's message) and, under a policy that leaves out-of-range
  indices undefined, the same range check (where a launch checks the range itself, as the private Conflict::Last
  claim does with its ``refused`` flags, right after that launch, before any launch writes the table); a scatter's
  table is checked against its source and indices for shared memory; all before anything is written;
* the kernel launches (``a5``, on the ``multicore`` backend: :class:`A5Gather`, :class:`A5Scatter`) or the A2/A3
  row walk (``a2a3`` gathers, in :mod:`.in_memory`) run with the call's own arrays in place of the first call's;
* an index the check refuses, or operands that may share memory, send the call back to the full path, which raises
  its one refusal (:func:`simt_pto.plan.check_indices`, :func:`simt_pto.aliasing.check_disjoint`).

The signature holds everything the full path's validation and plan read but the operands' memory and index
values: the op, the operands' shapes and dtypes, every option (with its type: ``True`` and ``1`` are validated
differently), a scatter table's writability, and the table's (and source's) address modulo 8 (the ``a5`` Row
copy's move unit, :func:`.a5_whole_array.row_move_unit`, and a 16-bit float Add's boundary form). An ``a5`` runner runs
on the ``multicore`` backend only. Runners hold no caller's array. Other libraries' host arrays (PyTorch CPU
tensors too: the full path applies torch's rules), non-contiguous operands, a table or source in the other byte
order, a gather's ``out=`` and the ``cpu`` target always take the full path, and so do the plans no runner can
repeat (:class:`A5Scatter`).

On the GPU backend, a repeated ``a5`` call on device arrays (CuPy, PyTorch CUDA tensors, Numba: C-contiguous, int32
/ uint32 indices, no stream of their own in ``__cuda_array_interface__``) is run by :class:`DeviceGather` /
:class:`DeviceScatter`: the call's one launch with its arguments packed once
(:mod:`simt_pto.kernels.a5.direct_launch`), the operands' data pointers put in place, after the same checks (an
index scan on the device under a policy that leaves out-of-range indices undefined; a scatter's table against its
source and indices by byte range). The signature then holds the operands' types, ``__cuda_array_interface__``
dtypes, shapes and read-only flags in place of the numpy fields. Like the full path, the call returns once the
device has finished its work. A PyTorch table goes through torch's in-place rules before the launch and has its
version counter bumped after it (:mod:`simt_pto.torch_rules`, as on the full path); a tensor that is not read in
place as it is (a lazy view such as ``x.conj().imag``, a tensor that requires grad) always takes the full path.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from simt_pto import torch_rules
from simt_pto.backend import a5_backend, first_use, imported
from simt_pto.aliasing import may_overlap, ranges_overlap
from simt_pto.launch_spec import LaunchSpec
from simt_pto.plan import CallCache, indices_below

from .arrays import base_address, checked_indices, new_device_array

_UINT32 = np.dtype(np.uint32)

_RUNNERS = CallCache(maxsize=256)
"""Call signatures (:func:`_signature`) -> their runner (:class:`A5Gather`, :class:`A5Scatter`, or :mod:`.in_memory`'s
A2/A3 gather)."""


def _signature(table, idx, options: tuple, src=None) -> tuple | None:
    """The key of a gather of ``table`` through ``idx`` (or, with ``src``, a scatter) with ``options`` (every keyword
    argument but a gather's ``out``), or None for a call that always takes the full path."""
    if type(table) is not np.ndarray or type(idx) is not np.ndarray or not table.size:
        return None
    if not (table.flags.c_contiguous and idx.flags.c_contiguous and table.dtype.isnative):
        return None  # (an index array of the other byte order is narrowed by index_bits; a table is read from a copy)
    key = ("MGATHER" if src is None else "MSCATTER", table.shape, table.dtype, idx.shape, idx.dtype, options,
           tuple(map(type, options)), base_address(table) & 7)
    if src is None:
        return key
    if type(src) is not np.ndarray or not src.flags.c_contiguous or not src.dtype.isnative or not table.flags.writeable:
        return None
    return key + (src.shape, src.dtype, base_address(src) & 7)


def _device_operand(obj) -> tuple[tuple, int, int] | None:
    """``(signature fields, data pointer, bytes)`` of a non-empty C-contiguous device array whose
    ``__cuda_array_interface__`` names no stream of its own (none, or the legacy default stream: the one the
    launches use), else None."""
    if isinstance(obj, np.ndarray):
        return None
    if torch_rules.torch_of(obj) is not None and not torch_rules.read_in_place(obj):
        return None  # a lazy view (x.conj().imag), a tensor that requires grad: read as the full path reads it
    try:
        info = obj.__cuda_array_interface__
    except Exception:  # noqa: BLE001 - no device array, or one the full path refuses (a tensor that requires grad)
        return None
    shape, (pointer, read_only) = tuple(info["shape"]), info["data"]
    if info.get("strides") is not None or info.get("stream") not in (None, 1) or not pointer:
        return None
    return (type(obj), info["typestr"], shape, read_only), pointer, np.dtype(info["typestr"]).itemsize * int(
        np.prod(shape, dtype=np.int64))


def _device_signature(table, idx, options: tuple, src=None) -> tuple | None:
    """``(key, operands)`` of a call on device arrays (``operands``: ``(pointer, bytes)`` of the table, the indices
    and, for a scatter, the source), or None for a call that always takes the full path."""
    found = [_device_operand(a) for a in ((table, idx) if src is None else (table, idx, src))]
    if any(f is None for f in found) or found[1][0][1][1:] not in ("i4", "u4"):
        return None
    key = ("MGATHER" if src is None else "MSCATTER", "device", options, tuple(map(type, options)),
           *(fields for fields, _, _ in found), *(pointer & 7 for _, pointer, _ in found[::2]))
    return key, tuple((pointer, size) for _, pointer, size in found)


def gather(table, idx, options: tuple) -> Any | None:
    """The gathered array of a call of a known signature, run by its runner; None when the call must take the full
    path (no runner, or an index value that the full path refuses)."""
    key = _signature(table, idx, options)
    if key is not None:
        runner = _RUNNERS.get(key)
        return None if runner is None else runner(table, idx)
    device = _device_signature(table, idx, options)
    runner = None if device is None else _RUNNERS.get(device[0])
    return None if runner is None else runner(table, device[1])


def scatter(table, src, idx, options: tuple) -> Any | None:
    """The updated table of a scatter of a known signature, run by its runner; None when the call must take the
    full path (no runner, operands that may share memory, or an index value that the full path refuses)."""
    key = _signature(table, idx, options, src)
    if key is not None:
        runner = _RUNNERS.get(key)
        return None if runner is None else runner(table, src, idx)
    device = _device_signature(table, idx, options, src)
    runner = None if device is None else _RUNNERS.get(device[0])
    if runner is None:
        return None
    if torch_rules.torch_of(table) is None:
        return runner(table, device[1])
    # a PyTorch table: torch's in-place rules first, and its version counter bumped once the runner has written
    torch_rules.check_write(table, "table", "MSCATTER", "a5")
    wrote = True
    try:
        updated = runner(table, device[1])
        wrote = updated is not None  # None: the full path takes the call, before anything is written
        return updated
    finally:
        if wrote:
            torch_rules.bump_version(table)


def _remember(key, runner: Callable | None) -> None:
    if key is not None and runner is not None:
        _RUNNERS.put(key, runner)


def remember_scatter(table, src, idx, options: tuple, runner: Callable | None) -> None:
    """Keep ``runner`` (:class:`A5Scatter`) for the signature of a scatter that has just run on the full path."""
    key = _signature(table, idx, options, src)
    if key is not None and idx.size:  # (a key means numpy operands)
        _remember(key, runner)


def remember_gather(table, idx, options: tuple, runner: Callable | None) -> None:
    """Keep ``runner`` (``runner(table, idx)``: the gathered array, or None for a call it cannot take) for the
    signature of a gather that has just run on the full path: :class:`A5Gather`, or the A2/A3 one of
    :mod:`.in_memory`. Runners hold no caller's array."""
    key = _signature(table, idx, options)
    if key is not None and idx.size:  # (a key means numpy operands)
        _remember(key, runner)


def remember_device_call(table, idx, options: tuple, build: Callable[[tuple], Callable | None], src=None) -> None:
    """Keep the runner ``build(operands)`` makes (:class:`DeviceGather`, or with ``src`` :class:`DeviceScatter`; the
    operands' ``(pointer, bytes)`` as :func:`_device_signature` read them) for the signature of a call on device
    arrays that has just run on the full path (built only for a signature a runner can serve)."""
    device = _device_signature(table, idx, options, src)
    if device is not None:
        _remember(device[0], build(device[1]))


def index_bits(idx: np.ndarray, plan, checks_range: bool = True) -> np.ndarray | None:
    """The call's indices after the ISA's uint32 cast (int64 narrowed, or refused, as on the full path), or None
    when the policy leaves out-of-range indices undefined and one is out of range (the full path refuses it).
    ``checks_range=False``: no range pass (a launch of the call checks the range itself)."""
    bits = checked_indices(idx, plan.op, plan.target).ravel().view(_UINT32)  # (C-contiguous: ravel is a view)
    if checks_range and plan.checks_range and not indices_below(bits, plan.capacity):
        return None
    return bits


class A5Gather:
    """The one kernel launch of an ``a5`` whole-array gather on the ``multicore`` backend, with a call's own output,
    index bits and table in the places of the first call's (``simt.multicore_launcher``)."""

    def __init__(self, plan, launch: Callable, dst_view: np.dtype, table_view: np.dtype, result: np.ndarray):
        self.plan, self.launch, self.dst_view, self.table_view = plan, launch, dst_view, table_view
        self.out_size, self.out_dtype, self.out_shape = result.size, result.dtype, result.shape

    @classmethod
    def of(cls, call, plan, result) -> A5Gather | None:
        """The runner of a call that ran ``call`` on the ``multicore`` backend: one launch, no host step, no guard,
        whose only arrays are the gather kernels' (``dst``, ``idx``, ``table``); else None."""
        if a5_backend() != "multicore":
            return None
        with first_use:  # loaded by the call that ran, in this thread or another (then this waits for it)
            from simt_pto.kernels.a5 import simt
        launch = simt.single_multicore_launcher(call, ("dst", "idx", "table"))
        if launch is None:
            return None
        args = call.steps[0].arguments
        return cls(plan, launch, args["dst"].dtype, args["table"].dtype, result)

    def __call__(self, table: np.ndarray, idx: np.ndarray) -> np.ndarray | None:
        if a5_backend() != "multicore":
            return None
        bits = index_bits(idx, self.plan)
        if bits is None:
            return None
        out = np.empty(self.out_size, self.out_dtype)
        self.launch(out.reshape(-1).view(self.dst_view), bits, table.reshape(-1).view(self.table_view))
        return out.reshape(self.out_shape)


class A5Scatter:
    """The kernel launches of an ``a5`` whole-array scatter on the ``multicore`` backend (one launch over the tiles;
    or the Conflict::Last owner path's reset, claim and write), with a call's own table, source and index bits in
    the places of the first call's, each in the view that launch took (``simt.multicore_launcher``), and for the owner
    path the owner array the call before it left (:data:`_SPARE_OWNER`), marked unowned again by the reset. Every
    launch must take the whole of each operand: the slot-centric Last path (a launch per tile, each over its part
    of the source) and the compact owner path (slot numbers computed from the index values) have no runner, nor has
    a plan with a guard (a mid-word 16-bit float Add) or a host step."""

    OPERANDS = ("table", "src", "idx")

    def __init__(self, plan, launches: list, owner: tuple | None, refused: tuple | None):
        self.plan, self.launches, self.owner, self.refused = plan, launches, owner, refused

    @classmethod
    def of(cls, call, plan, table: np.ndarray, src: np.ndarray, idx: np.ndarray) -> A5Scatter | None:
        """The runner of a call that ran ``call`` on the ``multicore`` backend over the host arrays ``table``,
        ``src``, ``idx`` (as its launches were built from them: ``idx`` after narrowing), or None."""
        if a5_backend() != "multicore" or call.guard_name is not None or not call.steps:
            return None
        with first_use:  # loaded by the call that ran, in this thread or another (then this waits for it)
            from simt_pto.kernels.a5 import simt
        operands = dict(zip(cls.OPERANDS, (table, src, idx)))
        owner = refused = None
        launches = []
        for spec in call.steps:
            if not isinstance(spec, LaunchSpec):  # a host step
                return None
            views = []
            for name, value in spec.args:
                if isinstance(value, tuple):  # the float32 Max / Min (int32, uint32) pair
                    return None
                if not isinstance(value, np.ndarray):
                    continue
                if name in operands:
                    whole = operands[name]
                    if value.nbytes != whole.nbytes or base_address(value) != base_address(whole):
                        return None
                elif name == "owner" and (owner is None or value is owner):
                    owner = value
                elif name == "refused" and refused is None:
                    refused = (len(launches), value.size)  # (the launch that sets the flags, how many)
                else:
                    return None
                views.append((name, value.dtype))
            launch = simt.multicore_launcher(spec, tuple(name for name, _ in views))
            if launch is None:
                return None
            launches.append((launch, tuple(views)))
        return cls(plan, launches, None if owner is None else (owner.size, owner.dtype), refused)

    def __call__(self, table: np.ndarray, src: np.ndarray, idx: np.ndarray) -> np.ndarray | None:
        if a5_backend() != "multicore" or may_overlap(table, src) or may_overlap(table, idx):
            return None
        # a plan with refused flags checks the index range in a launch, before any launch writes the table
        bits = index_bits(idx, self.plan, checks_range=self.refused is None)
        if bits is None:
            return None
        arrays = {"table": table.reshape(-1), "src": src.reshape(-1), "idx": bits}
        if self.owner is not None:
            arrays["owner"] = _take_owner(*self.owner)  # every launch of the call shares it; the reset fills it
        if self.refused is not None:
            checked_by, flags = self.refused
            arrays["refused"] = np.zeros(flags, np.int32)
        for at, (launch, views) in enumerate(self.launches):
            launch(*[arrays[name].view(dtype) for name, dtype in views])
            if self.refused is not None and at == checked_by and arrays["refused"].any():
                return None  # an index past the table: the full path refuses the call (only the owners are written)
        if self.owner is not None:
            _keep_owner(arrays["owner"])
        return table


def _on_gpu() -> bool:
    return a5_backend() == "gpu"


def _index_scan(call, plan):
    """``(scan or None, ok)``: the device index scan of a plan that leaves out-of-range indices undefined
    (:class:`~simt_pto.kernels.a5.direct_launch.IndexScan`, over the launch's ``idx``), None for a plan that places
    or drops every index; ``ok`` False where a scan is needed and none can be made."""
    if not plan.checks_range:
        return None, True
    with first_use:
        from simt_pto.kernels.a5.direct_launch import IndexScan
    scan = IndexScan.of(call.steps[0].arguments["idx"], plan.capacity)
    return scan, scan is not None


def _synchronize() -> None:
    imported("numba.cuda").synchronize()  # the GPU backend: numba.cuda is in real mode


class DeviceGather:
    """The one launch of an ``a5`` whole-array gather on the GPU over device arrays
    (``simt.single_gpu_launcher``), into a new device array of the table's kind, with a call's own table and
    index pointers; under a policy that leaves out-of-range indices undefined, after the device index scan (an index
    past the table sends the call back to the full path, which refuses it, before the gather reads anything)."""

    def __init__(self, launch: Callable, scan, out_size: int, out_shape: tuple):
        self.launch, self.scan, self.out_size, self.out_shape = launch, scan, out_size, out_shape

    @classmethod
    def of(cls, call, plan, result) -> DeviceGather | None:
        """The runner of a gather that ran ``call`` on the GPU backend and returned the device array ``result``."""
        if not _on_gpu():
            return None
        with first_use:  # loaded by the call that ran, in this thread or another (then this waits for it)
            from simt_pto.kernels.a5 import simt
        launch = simt.single_gpu_launcher(call, ("dst", "idx", "table"))
        scan, ok = _index_scan(call, plan) if launch is not None else (None, False)
        return cls(launch, scan, int(np.prod(result.shape, dtype=np.int64)), tuple(result.shape)) if ok else None

    def __call__(self, table, operands: tuple) -> Any | None:
        if not _on_gpu():
            return None
        (table_pointer, _), (idx_pointer, _) = operands
        if self.scan is not None and self.scan.out_of_range(idx_pointer):
            return None
        out = new_device_array(table, self.out_size)
        self.launch(out.__cuda_array_interface__["data"][0], idx_pointer, table_pointer)
        _synchronize()
        return out.reshape(self.out_shape)


class DeviceScatter:
    """The one launch of an ``a5`` whole-array scatter on the GPU over device arrays (``simt.single_gpu_launcher``:
    atomics and Conflict::Default, whose launch takes the whole table, source and indices), with a call's own
    pointers, after the full path's checks: the table shares no byte with the source or the indices, and, under a
    policy that leaves out-of-range indices undefined, the device index scan; a call that fails one goes back to the
    full path, which refuses it before anything is written."""

    def __init__(self, launch: Callable, scan):
        self.launch, self.scan = launch, scan

    @classmethod
    def of(cls, call, plan, operands: tuple) -> DeviceScatter | None:
        """The runner of a scatter that ran ``call`` on the GPU backend over device arrays whose ``(pointer, bytes)``
        are ``operands`` (table, indices, source), each of which its launch took whole."""
        if not _on_gpu() or len(call.steps) != 1 or not isinstance(call.steps[0], LaunchSpec):
            return None
        spec = call.steps[0].arguments
        for name, operand in zip(("table", "idx", "src"), operands):
            views = spec.get(name)
            for view in views if isinstance(views, tuple) else (views,):  # the float32 Max / Min pair: two views
                if not hasattr(view, "device_ctypes_pointer") or (
                        view.device_ctypes_pointer.value, view.size * view.dtype.itemsize) != operand:
                    return None
        with first_use:  # loaded by the call that ran, in this thread or another (then this waits for it)
            from simt_pto.kernels.a5 import simt
        launch = simt.single_gpu_launcher(call, ("table", "idx", "src"))
        scan, ok = _index_scan(call, plan) if launch is not None else (None, False)
        return cls(launch, scan) if ok else None

    def __call__(self, table, operands: tuple) -> Any | None:
        if not _on_gpu():
            return None
        (table_at, table_bytes), (idx_at, idx_bytes), (src_at, src_bytes) = operands
        table_range = (table_at, table_at + table_bytes)
        if any(ranges_overlap(table_range, (at, at + size)) for at, size in ((idx_at, idx_bytes), (src_at, src_bytes))):
            return None  # shared bytes: the full path refuses the call
        if self.scan is not None and self.scan.out_of_range(idx_at):
            return None
        self.launch(table_at, idx_at, src_at)
        _synchronize()
        return table


_SPARE_OWNER = CallCache(maxsize=1)
"""The owner array of the last owner-path scatter that finished, by ``(size, dtype)``: the next call of that size
takes it instead of a new one. A new array of that size is fresh pages, which the reset then faults in one by one:
64M updates into 4M slots have 16 MB of owners (32 MB when an owner was 8 bytes: then about a tenth of the call).
One array at most (the last one; it stays allocated until another size replaces it or ``CallCache.clear_all()``
drops it); taking it removes it, so no two calls share one. Its contents are never read: the reset marks every
owner unowned."""


def _take_owner(size: int, dtype: np.dtype) -> np.ndarray:
    owner = _SPARE_OWNER.take((size, dtype))
    return np.empty(size, dtype) if owner is None else owner


def _keep_owner(owner: np.ndarray) -> None:
    _SPARE_OWNER.put((owner.size, owner.dtype), owner)


__all__ = ["A5Gather", "A5Scatter", "DeviceGather", "DeviceScatter", "gather", "index_bits", "remember_device_call",
           "remember_gather", "remember_scatter", "scatter"]
