"""One kernel source, three backends: bind the SIMT intrinsics, compile, launch.

A kernel factory (``simt_mgather_row_kernel(rule)``, ...) returns the kernel as plain Python written
against the intrinsics of :mod:`.intrinsics`. :func:`compile_kernel` makes a copy of it whose globals bind
those names (and the helpers of :mod:`.device`) for one backend family and compiles it there:

* ``"cuda"``: ``numba.cuda.jit(cache=True)``, one CUDA thread per SIMT thread, on a GPU or on Numba's
  CUDA simulator (whichever mode ``numba.cuda`` was imported in);
* ``"cpu"``: ``numba.njit(nogil=True, cache=True)``, one call per range of blocks; :func:`launch` spreads
  the blocks of a grid over a thread pool of the package's own, one worker per Numba thread
  (``NUMBA_NUM_THREADS``), and within a block runs the warps in order, each warp's lanes as one span.

The copy has the source's code and closure (the policy constants), so both backends share Numba's cache
index entry name and differ in the target of the key; the logic of a kernel exists once.

Nothing here imports ``numba.cuda`` unless a CUDA backend is used.
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading
import time

import numba
import numpy as np
from numba import njit

from simt_pto import geometry
from simt_pto.kernels import softfloat, store
from simt_pto.kernels.store import bind
from . import device, intrinsics

CHUNKS_PER_WORKER = 4
"""CPU launches split a grid into this many block ranges per worker (load balance for uneven blocks)."""


@functools.cache
def namespace(family: str) -> dict:
    """The intrinsics and the bound device helpers of a backend family (``"cpu"`` or ``"cuda"``), and the
    read-modify-write primitives of the store rule (:mod:`simt_pto.kernels.store`) bound to the atomics."""
    if family == "cpu":
        scope = dict(intrinsics.CPU)
        scope["add_bits"] = softfloat.add_bits_called  # one compiled adder, called (compile time; see there)
    elif family == "cuda":
        from numba.cuda.core import caching as cuda_caching
        from simt_pto.kernels import cache
        cache.install(cuda_caching.CacheImpl)  # numba-cuda keeps a locator list of its own
        scope = dict(intrinsics.cuda_intrinsics())
    else:
        raise ValueError(f"unknown backend family {family!r}")
    jit = _device_jit(family)
    for helper in device.HELPERS:
        scope[helper.__name__] = jit(bind(helper, scope))
    # lanes race: every read-modify-write of the store rule is an atomic
    scope.update(rmw_add=scope["atomic_add"], rmw_max=scope["atomic_max"], rmw_min=scope["atomic_min"],
                 rmw_add_half=scope["atomic_add_half"])
    for helper in store.HELPERS:
        scope[helper.__name__] = jit(bind(helper, scope))
    return scope


def family(backend: str) -> str:
    """The compiler family of an A5 backend: ``"cpu"``, or ``"cuda"`` for ``"gpu"`` and ``"simulator"``."""
    return "cpu" if backend == "cpu" else "cuda"


def _device_jit(family_name: str):
    """The decorator of an inlined device helper: ``njit(inline="always")`` or its CUDA twin."""
    if family_name == "cpu":
        return njit(inline="always")
    from numba import cuda
    return cuda.jit(device=True, inline="always")


@functools.cache
def _store_element(family_name: str, atomic: int, fmt: int):
    scope = namespace(family_name)
    if fmt in (store.F16_EDGE, store.BF16_EDGE):  # the table starts or ends mid-word: (words, edge, head)
        scope = {**scope, "rmw_add_half": scope["atomic_add_half_edge"]}
    return _device_jit(family_name)(bind(store.store_rule(atomic, fmt), scope))


def _policy_scope(source, family_name: str) -> dict:
    """What a kernel binds by its own policy: a scatter kernel's ``store_element`` (its closure holds ``atomic``
    and ``fmt``), so the Store / Add / Max / Min rule is written once and each specialization inlines one branch."""
    cells = dict(zip(source.__code__.co_freevars, (c.cell_contents for c in source.__closure__ or ())))
    if "atomic" in cells and "fmt" in cells:
        return {"store_element": _store_element(family_name, cells["atomic"], cells["fmt"])}
    return {}


@functools.cache
def compile_kernel(source, family_name: str):
    """The dispatcher of one kernel source (a factory's result) for a backend family (compiled per
    argument types on first call)."""
    bound = bind(source, {**namespace(family_name), **_policy_scope(source, family_name)})
    if family_name == "cpu":
        return njit(nogil=True, cache=True)(bound)
    from numba import cuda
    return cuda.jit(cache=True)(bound)


def argument_types(args) -> tuple:
    """The Numba types a kernel is specialised on for ``args``: the ``launch`` tuple (four int64), then
    each argument (Python ints as int64, as a launch passes them)."""
    int64 = numba.types.int64
    return (numba.types.UniTuple(int64, 4),) + tuple(
        int64 if isinstance(a, int) and not isinstance(a, bool) else numba.typeof(a) for a in args)


def cuda_source(source):
    """The CUDA-bound Python function of a kernel source (for ``numba.cuda.compile_ptx``)."""
    return bind(source, {**namespace("cuda"), **_policy_scope(source, "cuda")})


# -- launching ---------------------------------------------------------------------------------------------

_simulator_lock = threading.Lock()
_pool = None
_pool_lock = threading.Lock()
_trace: list | None = None


def cpu_workers() -> int:
    """Threads a ``cpu`` launch uses: Numba's thread count (``NUMBA_NUM_THREADS``, the cores by default)."""
    return max(1, int(numba.config.NUMBA_NUM_THREADS))


def _worker_pool():
    global _pool
    with _pool_lock:
        if _pool is None:
            from concurrent.futures import ThreadPoolExecutor
            _pool = ThreadPoolExecutor(max_workers=cpu_workers(), thread_name_prefix="simt_pto-a5-cpu")
        return _pool


def _forget_pool():  # a forked child has none of the parent's threads
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


@contextlib.contextmanager
def trace_cpu_launches():
    """Record ``(thread ident, start, end, blocks)`` for every block range a ``cpu`` launch runs (tests)."""
    global _trace
    records: list = []
    _trace = records
    try:
        yield records
    finally:
        _trace = None


def _run_range(kernel, launch, args):
    if _trace is None:
        kernel(launch, *args)
        return
    t0 = time.perf_counter()
    kernel(launch, *args)
    _trace.append((threading.get_ident(), t0, time.perf_counter(), launch[1] - launch[0]))


def _launch_cpu(kernel, grid: int, warps: int, args) -> None:
    workers = cpu_workers()
    chunks = min(grid, workers * CHUNKS_PER_WORKER) if workers > 1 else 1
    if chunks <= 1:
        _run_range(kernel, (0, grid, grid, warps), args)
        return
    bounds = [grid * k // chunks for k in range(chunks + 1)]
    pool = _worker_pool()
    futures = [pool.submit(_run_range, kernel, (bounds[k], bounds[k + 1], grid, warps), args) for k in range(chunks)]
    errors = [f.exception() for f in futures]  # the caller waits: the pool's threads are the cores
    for error in errors:
        if error is not None:
            raise error


def _writeable(arg):
    if isinstance(arg, tuple):
        return tuple(_writeable(a) for a in arg)
    if isinstance(arg, np.ndarray) and not arg.flags.writeable:
        return arg.copy()
    return arg


def launch(source, grid: int, warps: int, args, backend: str) -> None:
    """Run one kernel source over ``grid`` blocks of ``dim3(32, warps)`` threads on ``backend``
    (``"cpu"``, ``"simulator"`` or ``"gpu"``). ``args`` are the kernel's arguments after ``launch``:
    host arrays on ``cpu`` and the simulator, device arrays (or host arrays Numba copies) on the GPU."""
    grid, warps = int(grid), int(warps)
    if not 1 <= warps <= geometry.MAX_WARPS or grid < 1:
        raise ValueError(f"SIMT launch: grid {grid} x dim3(32, {warps}) is not a launch")
    kernel = compile_kernel(source, family(backend))
    if backend == "cpu":
        _launch_cpu(kernel, grid, warps, args)
        return
    config = kernel[grid, (geometry.WARP, warps)]
    if backend == "simulator":
        # The simulator copies every array argument back after the launch: a read-only input (which no
        # kernel writes) runs on a copy, so nothing is copied back into the caller's array.
        args = [_writeable(a) for a in args]
        with _simulator_lock:  # the simulator keeps its thread state in globals: one launch at a time
            config((0, grid, grid, warps), *args)
    else:
        config((0, grid, grid, warps), *args)


__all__ = ["argument_types", "bind", "compile_kernel", "cpu_workers", "cuda_source", "family", "launch", "namespace",
           "trace_cpu_launches"]
