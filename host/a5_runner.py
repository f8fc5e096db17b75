"""The A5 runner: a :class:`~simt_pto.launch_spec.CallPlan` of the A5 planner (:mod:`.a5_planner`) run on an A5
backend, and a tile op's plan kept for the next call of its signature.

:func:`run_plan` runs a plan's launches and host steps in order inside its guard: on ``multicore`` and the
simulator over the caller's memory, on the GPU with host arrays staged to the device and back. :func:`run_mgather` /
:func:`run_mscatter` run a tile op through its signature's kept launch (:class:`.kept_launch.KeptLaunch`) when it
has one, and keep one when it has none; :func:`keep_on_host` / :func:`keep_gpu` make the kept launch of a plan
that has just run (a whole-array call's too).
"""
from __future__ import annotations

import functools

import numpy as np

from simt_pto.backend import a5_backend, first_use, imported
from simt_pto.kernels import store, writers
from simt_pto.kernels.a5 import simt
from simt_pto.launch_spec import CallPlan, HostStep

from .a5_planner import element_format, mgather_launches, mscatter_launches
from .kept_launch import (HOST_KEEPING, KeptLaunch, check_index_ranges_with, read_addresses_with, tile_checks,
                          tile_operands)


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


def keep_on_host(call: CallPlan, operands: dict, backend: str, *, idx_capacity: int | None = None,
                 **checks) -> KeptLaunch | None:
    """:meth:`.kept_launch.KeptLaunch.of` for a plan that has just run over host memory on ``backend``: each launch
    bound by :func:`simt_pto.kernels.a5.simt.multicore_launcher` (``multicore``) or
    :func:`~simt_pto.kernels.a5.simt.simulator_launcher` (``simulator``); ``checks``: the kept launch's per-call
    checks. ``idx_capacity`` (a gather that makes its output, under a policy that refuses out-of-range indices, on
    ``multicore``): the launch checks the indices itself, range by range on its threads, instead of the
    ``indices`` step checking them all before it (which then only narrows them)."""
    if backend == "multicore":
        launcher = (simt.multicore_launcher if idx_capacity is None else
                    functools.partial(simt.multicore_launcher, idx_capacity=idx_capacity))
        # (its compiled entries read an operand of the launch's element size in the caller's dtype: no view a call)
        checks["launcher_reads_as"] = True
    else:
        launcher = simt.simulator_launcher  # (the simulator runs the kernel's Python: each operand in its dtype)
    read_addresses_with(simt.address_readers())  # (the repeated calls' operand addresses, by compiled code)
    check_index_ranges_with(simt.index_range_check())  # (and their index ranges)
    return KeptLaunch.of(call, operands, launcher, **checks)


def keep_gpu(call: CallPlan, plan, operands: tuple[str, ...], *, made: dict | None = None,
             apart: tuple = ()) -> KeptLaunch | None:
    """The kept launches of ``call``, which has just run on the GPU backend, taking the device arrays named
    ``operands`` as data pointers: its one launch (:func:`~simt_pto.kernels.a5.simt.single_gpu_launcher`), or each
    of its launches in order (:func:`~simt_pto.kernels.a5.simt.gpu_launchers`: the Conflict::Last owner path's
    reset, claim and write, whose owner array each call makes, :meth:`.kept_launch.KeptLaunch.run_device`), after
    the device index scan where ``plan`` leaves out-of-range indices undefined
    (:class:`~simt_pto.kernels.a5.direct_launch.IndexScan` over the ``idx`` of the first launch that reads it);
    None where any of them cannot be made."""
    made = dict(made or {})
    if len(call.steps) == 1:
        launch = simt.single_gpu_launcher(call, operands)
        steps = None if launch is None else ((launch, operands),)
    else:
        owners = {id(value): value for spec in call.launches for name, value in spec.args if name == "owner"}
        if len(owners) > 1:  # (one owner array, shared by the launches, is what a call makes afresh)
            return None
        for owner in owners.values():  # (any library's device array: read through its interface)
            info = owner.__cuda_array_interface__
            made["owner"] = (int(np.prod(info["shape"])), np.dtype(info["typestr"]))
        steps = simt.gpu_launchers(call, operands, made=tuple(made))
    if steps is None:
        return None
    scan = None
    if plan.checks_range:
        with first_use:
            from simt_pto.kernels.a5.direct_launch import IndexScan
        idx = next((spec.arguments["idx"] for spec in call.launches if "idx" in spec.arguments), None)
        scan = None if idx is None else IndexScan.of(idx, plan.capacity)
        if scan is None:
            return None
    return KeptLaunch(steps, made=made, apart=apart, scan=scan, device=True)


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


__all__ = ["copy_to_host", "holds_host_memory", "keep_gpu", "keep_on_host", "on_gpu", "run_kept", "run_mgather",
           "run_mscatter", "run_plan", "to_device"]
