"""One kernel source, three backends: bind the SIMT intrinsics, compile, launch.

A kernel factory (``simt_mgather_row_kernel(rule)``, ...) returns the kernel as plain Python written
against the intrinsics of :mod:`.intrinsics`. :func:`compile_kernel` makes a copy of it whose globals bind
those names (and the helpers of :mod:`.device`) for one backend family and compiles it there:

* ``"cuda"``: ``numba.cuda.jit(cache=True)``, one CUDA thread per SIMT thread, on a GPU or on Numba's
  CUDA simulator (whichever mode ``numba.cuda`` was imported in);
* ``"cpu"``: ``numba.njit(nogil=True, cache=True)``, one call per range of blocks; :func:`launch` spreads
  the blocks of a grid over one thread per Numba thread (``NUMBA_NUM_THREADS``): the calling thread and workers
  of a thread pool of the package's own; within a block it runs the warps in order, each warp's lanes as one span.

The copy has the source's code and closure (the policy constants), so both backends share Numba's cache
index entry name and differ in the target of the key; the logic of a kernel exists once.

Nothing here imports ``numba.cuda`` unless a CUDA backend is used.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import operator
import os
import threading
import time

import numba
import numpy as np

from simt_pto import geometry
from simt_pto.backend import first_use, imported
from simt_pto.enums import ElementFormat
from simt_pto.interrupts import uninterrupted
from simt_pto.launch_spec import CallPlan, KernelPolicy, LaunchSpec
from simt_pto.plan import CallCache
from simt_pto.kernels import cache, index_policy, softfloat, store, writers
from simt_pto.kernels.store import bind
from simt_pto.kernels.tuning import CHUNKS_PER_WORKER, HELPER_WAIT_POLLS
from . import device, intrinsics
from .mscatter import PLAIN_STORE_KERNELS

@functools.cache
def namespace(family: str) -> dict:
    """The intrinsics and the bound device helpers of a backend family (``"cpu"`` or ``"cuda"``), and the
    read-modify-write primitives of the store rule (:mod:`simt_pto.kernels.store`) bound to the atomics."""
    if family == "cpu":
        scope = dict(intrinsics.CPU)
    elif family == "cuda":
        scope = dict(intrinsics.cuda_intrinsics())  # MissingExtraError without numba-cuda, before importing it
        cache.install(imported("numba.cuda.core.caching").CacheImpl)  # numba-cuda keeps a locator list of its own
    else:
        raise ValueError(f"unknown backend family {family!r}")
    jit = _device_jit(family)
    # the CPU takes the 16-bit float adder as it is (its float32 casts are the CPU's); a GPU lane inlines every part
    for helper in (*(softfloat.HELPERS if family == "cuda" else ()), *device.HELPERS):
        scope[helper.__name__] = jit(bind(helper, scope))
    # lanes race: every read-modify-write of the store rule is an atomic
    scope.update(rmw_add=scope["atomic_add"], rmw_max=scope["atomic_max"], rmw_min=scope["atomic_min"],
                 rmw_add_half=scope["atomic_add_half"])
    for helper in store.HELPERS:
        scope[helper.__name__] = jit(bind(helper, scope))
    return scope


def family(backend: str) -> str:
    """The compiler family of an A5 backend: ``"cpu"`` (Numba's CPU compiler) for ``"multicore"``, or ``"cuda"``
    for ``"gpu"`` and ``"simulator"``."""
    return "cpu" if backend == "multicore" else "cuda"


def _device_jit(family_name: str):
    """The decorator of an inlined device helper: ``njit(inline="always")`` or its CUDA twin (both through
    :mod:`simt_pto.kernels.cache`, as every jitted function of the package)."""
    if family_name == "cpu":
        return cache.njit(inline="always")
    return cache.cuda_jit(device=True, inline="always")


@functools.cache
def _store_element(family_name: str, atomic: int, fmt: int):
    scope = namespace(family_name)
    if fmt in (ElementFormat.F16_EDGE, ElementFormat.BF16_EDGE):  # the table starts or ends mid-word: (words, edge, head)
        scope = {**scope, "rmw_add_half": scope["atomic_add_half_edge"]}
    return _device_jit(family_name)(bind(store.store_rule(atomic, fmt), scope))


@functools.cache
def _plain_store_element(atomic: int, fmt: int):
    """The store rule on the CPU with plain read-modify-writes (a kernel of ``PLAIN_STORE_KERNELS``, run on one
    thread while nothing else writes its table): the sequential primitives of :mod:`simt_pto.kernels.store` on the
    element views, for a float32 Max / Min their order-key forms (:data:`~simt_pto.kernels.store.SEQUENTIAL_HELPERS`),
    and for a 16-bit float table :func:`.intrinsics.cpu_plain_add_half` on its uint16 elements."""
    scope = namespace("cpu")
    scope = {**scope, "rmw_add": store.rmw_add, "rmw_max": store.rmw_max, "rmw_min": store.rmw_min,
             "rmw_add_half": intrinsics.cpu_plain_add_half, **store.sequential_helpers()}
    return _device_jit("cpu")(bind(store.store_rule(atomic, fmt), scope))


def kernel_source(kernel: str, policy: KernelPolicy):
    """The source of ``kernel`` (its spec name) specialised on ``policy``: its factory
    (:data:`simt_pto.kernels.a5.KERNELS`) called with the policy's compile-time constants."""
    from . import KERNELS
    try:
        factory = KERNELS[kernel]
    except KeyError:
        raise ValueError(f"unknown A5 kernel {kernel!r}; expected one of {', '.join(sorted(KERNELS))}") from None
    return factory(**policy.factory_args())


def _plain_store(kernel: str, family_name: str) -> bool:
    """Whether ``kernel``'s store rule is bound to plain read-modify-writes: a kernel of
    :data:`~.mscatter.PLAIN_STORE_KERNELS` (CPU only: one thread, nothing else writing its table)."""
    return family_name == "cpu" and kernel in PLAIN_STORE_KERNELS


def _policy_scope(kernel: str, policy: KernelPolicy, family_name: str) -> dict:
    """What a kernel binds by its policy: a scatter kernel's ``store_element`` (the Store / Add / Max / Min rule of
    its atomic op and element format, written once; each specialization inlines one branch), bound to the
    atomics, or for a plain-store kernel on the CPU to plain loads and stores."""
    if policy.atomic is None or policy.fmt is None:
        return {}
    if _plain_store(kernel, family_name):
        return {"store_element": _plain_store_element(policy.atomic, policy.fmt)}
    return {"store_element": _store_element(family_name, policy.atomic, policy.fmt)}


def bound_source(kernel: str, policy: KernelPolicy, family_name: str):
    """The kernel source with the intrinsics, device helpers and store rule of a backend family bound (what
    :func:`compile_kernel` compiles, and ``numba.cuda.compile_ptx`` for the compile proof)."""
    if kernel in PLAIN_STORE_KERNELS and family_name != "cpu":
        raise ValueError(f"{kernel} runs on the multicore backend only (one thread, plain stores); it has no "
                         f"{family_name} form")
    return bind(kernel_source(kernel, policy), {**namespace(family_name), **_policy_scope(kernel, policy, family_name)})



@functools.cache  # (a first call and each kept launch look up their kernels: a policy's compiled() is a dataclass replace)
def compile_kernel(kernel: str, policy: KernelPolicy, family_name: str):
    """The dispatcher of one kernel specialization for a backend family (compiled per argument types on first
    call). Its policy is part of its on-disk cache key, explicitly (``KernelPolicy.cache_key``); Numba's disk
    cache and compiles are made safe by :mod:`simt_pto.kernels.cache`. Policies that differ only in ``conflict``
    (which selects the kernel) share one dispatcher. On the CPU a kernel reads each index once, never past the
    table (:func:`read_once`)."""
    if family_name == "cpu":
        policy = read_once(kernel, policy)
    return _dispatcher(kernel, policy if policy.conflict is None else policy.compiled(), family_name)


def read_once(kernel: str, policy: KernelPolicy) -> KernelPolicy:
    """The policy ``kernel`` is compiled with for the ``multicore`` backend: its rule as
    :func:`simt_pto.kernels.index_policy.read_once` gives it (UNDEFINED's unchecked rule becomes Clamp's in a
    gather, Skip's mask in a scatter), except for a kernel that refuses an index past the table itself (one with a
    ``refused`` parameter: a Conflict::Last claim), which keeps its rule and its refusal (docs/guarantees.md, "An
    index is never used past its table")."""
    rule = index_policy.read_once(policy.rule, "MGATHER" if kernel.startswith("simt_mgather") else "MSCATTER")
    if rule == policy.rule or "refused" in _parameters(kernel, policy):
        return policy
    return KernelPolicy.of(rule, policy.atomic, policy.fmt, policy.conflict)


@functools.cache
def _parameters(kernel: str, policy: KernelPolicy) -> tuple[str, ...]:
    return tuple(inspect.signature(kernel_source(kernel, policy)).parameters)


def forget_compiled() -> None:
    """Forget the dispatchers this process made (a test that swaps a kernel factory in ``KERNELS``), and the
    repeated calls' launches that hold them (:func:`multicore_launcher`, kept in the call caches); the disk cache is
    untouched."""
    compile_kernel.cache_clear()
    _dispatcher.cache_clear()
    _ENTRIES.clear()
    CallCache.clear_all()


@functools.cache
def _dispatcher(kernel: str, policy: KernelPolicy, family_name: str):
    bound = bound_source(kernel, policy, family_name)
    if family_name == "cpu":
        # _nrt=False: a kernel allocates nothing, so it needs no reference counts; with them, every array a loop
        # passes to an inlined helper costs an atomic increment and decrement (a locked instruction) per iteration
        return cache.njit(nogil=True, cache=True, _nrt=False, key=policy.cache_key)(bound)
    return cache.cuda_jit(cache=True, key=policy.cache_key)(bound)


def argument_types(args) -> tuple:
    """The Numba types a kernel is specialised on for ``args``: the ``launch`` tuple (four int64), then
    each argument (Python ints as int64, as a launch passes them)."""
    int64 = numba.types.int64
    return (numba.types.UniTuple(int64, 4),) + tuple(
        int64 if isinstance(a, int) and not isinstance(a, bool) else numba.typeof(a) for a in args)


# -- launching ---------------------------------------------------------------------------------------------

_simulator_lock = threading.Lock()
_trace: list | None = None


def multicore_workers() -> int:
    """Threads a ``multicore`` launch uses: Numba's thread count (``NUMBA_NUM_THREADS``, the cores by default)."""
    return max(1, int(numba.config.NUMBA_NUM_THREADS))


@contextlib.contextmanager
def trace_multicore_launches():
    """Record ``(thread ident, start, end, blocks, first block)`` for every block range a ``multicore`` launch runs
    (tests)."""
    global _trace
    records: list = []
    _trace = records
    try:
        yield records
    finally:
        _trace = None


fault_hook = None
"""Tests only: ``fault_hook(point)`` is called at ``"range-start"`` (a thread, before a block range runs),
``"helper-wake"`` (the caller, before it wakes each helper thread early, :class:`EarlyWake`, and before it hands a
launch to its helpers) and ``"launch-wait"`` (the caller, once a ``multicore`` launch's helpers are started, before it
takes a block range itself), so that a test can raise there (or send a signal: an interrupt landing at that exact
moment) or hold a worker."""


_ENTRIES: dict = {}
"""``(dispatcher, argument kinds) -> compiled entry``: what :func:`compiled_entry` found (cleared with the
dispatchers, :func:`forget_compiled`)."""


def _argument_kind(value):
    """What Numba's type of a kernel argument depends on, read without Numba's ``typeof`` (about 10 µs an array on
    the development machine): an array's dtype, dimensions, layout flags, writability and alignment; a Python int's
    range (int64); a tuple's members. None for anything else (typed by Numba each time)."""
    if type(value) is np.ndarray:
        flags = value.flags
        return value.dtype, value.ndim, flags.c_contiguous, flags.f_contiguous, flags.writeable, flags.aligned
    if type(value) is int:
        return int if -(1 << 63) <= value < (1 << 63) else None
    if type(value) is tuple:
        kinds = tuple(map(_argument_kind, value))
        return None if None in kinds else kinds
    return None


def compiled_entry(dispatcher, args: tuple):
    """The compiled entry of ``dispatcher`` (one of our ``cpu`` kernels, or the index check ``_bits_below``) for
    arguments of exactly ``args``' Numba types (``dispatcher.overloads``, the entry point of its compile result), or
    None while it has none (the dispatcher compiles one at its next call with such arguments). Found once per
    dispatcher and kinds of arguments (:func:`_argument_kind`), not per call signature: calls of new shapes have the
    same kinds.

    A kept launch calls its kernel with arguments of one signature every time (:func:`multicore_launcher`): its arrays
    are the launch's own views, each 1-D and C-contiguous, of the dtype the signature fixes, and its other arguments
    are bound. The dispatcher would type every argument again to find that same entry: about 0.5 microseconds of a
    repeated 8-row call, measured (docs/performance.md). The entry unboxes each argument itself and refuses an array
    of another element size; it does not check an array's dimensions, which is why only a launch whose arrays are
    all 1-D by construction calls it, nor its dtype, which is why :func:`multicore_launcher` may hand it a float32
    array where the kernel moves uint32 bits (``reads_as``). Two flags of an array's type may differ from call to
    call without changing the signature's key: an index array's ``readonly`` (a kernel never writes its indices) and
    its ``aligned`` (an index read at an address that is not a multiple of 4, which x86-64 and AArch64 load as any
    other); the code the entry runs reads each element as its dtype either way."""
    kinds = tuple(map(_argument_kind, args))
    known = None not in kinds
    if known:
        entry = _ENTRIES.get((dispatcher, kinds))
        if entry is not None:
            return entry
    # (neither a dispatcher's ``overloads`` nor a compile result's ``entry_point`` is documented Numba API: a
    # release without them gives None here, and the launch calls its dispatcher)
    overloads = getattr(dispatcher, "overloads", None)
    compiled = None if overloads is None else overloads.get(tuple(map(dispatcher.typeof_pyval, args)))
    entry = getattr(compiled, "entry_point", None)
    if entry is not None and known:
        _ENTRIES[(dispatcher, kinds)] = entry
    return entry


def _run_range(kernel, launch, args):
    if fault_hook is not None:
        fault_hook("range-start")
    if _trace is None:
        kernel(launch, *args)
        return
    t0 = time.perf_counter()
    kernel(launch, *args)
    _trace.append((threading.get_ident(), t0, time.perf_counter(), launch[1] - launch[0], launch[0]))


class _Launch:
    """One ``multicore`` launch as its threads share it: the block ranges, handed out in order to the threads that
    ask (a cursor under a lock) until they run out or the launch is stopped, and the count of helper threads still
    running, whose last one clears :attr:`helpers_running` and releases :attr:`done`."""

    def __init__(self, kernel, grid: int, warps: int, args, chunks: int, check: tuple | None = None):
        self.kernel, self.grid, self.warps, self.args = kernel, grid, warps, args
        self.bounds = [grid * k // chunks for k in range(chunks + 1)]
        self._next = 0
        self._lock = threading.Lock()
        self.stopped = False
        self.helpers = 0
        self.errors: list[BaseException] = []
        self.done = threading.Lock()
        self.done.acquire()
        self.check = check  # (index bits, indices per block, capacity, the check): :func:`_launch_multicore`'s
        self.refused = False
        self.helpers_running = np.ones(1, np.int64)  # (1 until the last helper ends: what the caller polls, GIL released)

    def take(self):
        """``(lo, hi)`` of the next block range not yet started, or None."""
        with self._lock:
            k = self._next
            if self.stopped or k + 1 >= len(self.bounds):
                return None
            self._next = k + 1
        return self.bounds[k], self.bounds[k + 1]

    def run(self) -> None:
        """One thread's share: block ranges until none is left (or, with a :attr:`check`, until a range reads an index
        past the capacity: the launch is stopped and :attr:`refused`)."""
        while (taken := self.take()) is not None:
            if self.check is not None:
                bits, per_block, capacity, below = self.check
                if not below(bits, taken[0] * per_block, min(taken[1] * per_block, bits.size), capacity):
                    self.refused = self.stopped = True
                    return
            _run_range(self.kernel, (taken[0], taken[1], self.grid, self.warps), self.args)

    def helper_finished(self, error: BaseException | None) -> None:
        with self._lock:
            if error is not None:
                self.errors.append(error)
            self.helpers -= 1
            last = self.helpers == 0
        if last:
            self.helpers_running[0] = 0
            self.done.release()


class _Helper:
    """A thread of the package's own that runs the block ranges of the launches it is handed. It sleeps on a lock of
    its own (one release wakes it: the cheapest hand-off Python threads have, about as much as one wake-up of the
    kernel), takes its launch from a second one (:meth:`hand`: released before it looks, unless it was woken ahead
    of its launch, :class:`EarlyWake`), and goes back to the idle list before it reports its launch finished."""

    def __init__(self, pool: _HelperPool):
        self.pool = pool
        self.wake = threading.Lock()
        self.wake.acquire()
        self.handed = threading.Lock()
        self.handed.acquire()
        self.unhanded = np.ones(1, np.int64)  # (1 until :meth:`hand`: what a helper woken early polls, GIL released)
        self.launch: _Launch | None = None
        threading.Thread(target=self._loop, name="simt_pto-a5-multicore", daemon=True).start()

    def hand(self, launch: _Launch | None) -> None:
        """Give the helper its launch, or None: back to the idle list (an early wake whose launch did not come)."""
        self.launch = launch
        self.unhanded[0] = 0
        self.handed.release()  # (a system call only when the helper waits on it, which an early wake rarely does)

    def _loop(self) -> None:
        while True:
            self.wake.acquire()
            if not self.handed.acquire(blocking=False):
                # woken ahead of its launch (EarlyWake) and given the GIL while its caller still makes it: polled
                # without the GIL, so that the caller goes on meanwhile, then slept on
                _cleared_within(self.unhanded, HELPER_WAIT_POLLS)
                self.handed.acquire()
            launch, self.launch = self.launch, None
            self.unhanded[0] = 1
            if launch is None:
                self.pool.idle(self)
                continue
            error = None
            try:
                launch.run()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller of the launch
                error = exc
            self.pool.idle(self)
            launch.helper_finished(error)
            # (asleep until the next launch, the thread would otherwise hold this one: its call's arrays, of any size)
            del launch, error


class _HelperPool:
    """The helper threads of ``multicore`` launches (``multicore_workers() - 1``: the caller is a thread of its launch
    too). A launch takes the helpers its thread woke early (:class:`EarlyWake`), then those that are idle; launches
    from several threads at once share them, and one that finds none idle runs on its caller alone (the block
    ranges are the same either way)."""

    def __init__(self, size: int):
        self._lock = threading.Lock()
        self._idle = [_Helper(self) for _ in range(size)]

    def _take_idle(self, wanted: int) -> list:
        with self._lock:
            taken = self._idle[len(self._idle) - min(wanted, len(self._idle)):]
            del self._idle[len(self._idle) - len(taken):]
        return taken

    def wake_early(self, early: EarlyWake) -> None:
        """Wake up to ``early.wanted`` idle helpers, each listed in ``early`` as it is woken; each then waits to be
        handed a launch or None. Run SIGINT held: a helper woken and not listed would wait forever."""
        taken = self._take_idle(early.wanted)
        try:
            while taken:
                if fault_hook is not None:
                    fault_hook("helper-wake")
                helper = taken.pop()
                early.helpers.append(helper)
                helper.wake.release()
        finally:
            for helper in taken:  # (not woken: an exception in the hook)
                self.idle(helper)

    def start(self, launch: _Launch, wanted: int) -> None:
        """Hand ``launch`` to up to ``wanted`` helpers: those this thread woke early first, idle ones after them.
        Run SIGINT held: a helper counted in ``launch.helpers`` and never handed it would be waited for forever."""
        early = getattr(_woken_early, "pending", None)
        woken = []
        if early is not None:  # (this launch is the one they were woken for)
            _woken_early.pending = None
            woken, early.helpers = early.helpers[:wanted], early.helpers[wanted:]
        taken = self._take_idle(wanted - len(woken)) if len(woken) < wanted else []
        if fault_hook is not None and (woken or taken):
            try:
                fault_hook("helper-wake")
            except BaseException:  # nothing counted yet: the helpers go back where they were taken from
                for helper in taken:
                    self.idle(helper)
                if early is not None:
                    early.helpers = woken + early.helpers  # (handed None by the early wake's release)
                raise
        launch.helpers = len(woken) + len(taken)
        for helper in woken:
            helper.hand(launch)
        for helper in taken:
            helper.hand(launch)
            helper.wake.release()

    def idle(self, helper: _Helper) -> None:
        with self._lock:
            self._idle.append(helper)


_woken_early = threading.local()
"""``pending``: the :class:`EarlyWake` of this thread's next ``multicore`` launch, if any."""


class EarlyWake:
    """Helpers woken at the start of a call, before its launch is made (:func:`multicore_launcher`'s ``early_wake``).
    A woken thread starts running some 15-30 µs after the wake-up on the development machine, and it then needs the
    GIL, which it gets once its caller is in a kernel: woken as the launch starts (about 25 µs into a repeated
    call), the helper of a 1M float32 Row gather started its first block range 22 µs after its caller's; woken as
    the call starts, 8-12 µs after (docs/performance.md). Use::

        early = EarlyWake(helpers)
        try:
            early.wake()
            ...  # the call, whose first launch of several threads takes the helpers (_HelperPool.start)
        finally:
            early.release()  # the helpers no launch took back to the idle list
    """

    __slots__ = ("wanted", "helpers")

    def __init__(self, wanted: int):
        self.wanted, self.helpers = wanted, []

    def wake(self) -> None:
        # (none wanted: one worker; a call inside a call: one early wake a thread)
        if not self.wanted or getattr(_woken_early, "pending", None) is not None:
            return
        uninterrupted(_helper_pool().wake_early, self)
        _woken_early.pending = self

    def release(self) -> None:
        if getattr(_woken_early, "pending", None) is self:
            _woken_early.pending = None
        if self.helpers:
            uninterrupted(self._hand_back)

    def _hand_back(self) -> None:
        helpers, self.helpers = self.helpers, []
        for helper in helpers:
            helper.hand(None)


_pool: _HelperPool | None = None
_pool_lock = threading.Lock()


def _helper_pool() -> _HelperPool:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = _HelperPool(multicore_workers() - 1)
    return _pool


def _forget_pool():  # a forked child has none of the parent's threads
    global _pool, _pool_lock, _woken_early
    _pool, _pool_lock, _woken_early = None, threading.Lock(), threading.local()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _workers_and_chunks(grid: int, threads: int | None) -> tuple[int, int]:
    """``(workers, block ranges)`` of a ``multicore`` launch of ``grid`` blocks on up to ``threads`` threads."""
    workers = multicore_workers() if threads is None else max(1, min(threads, multicore_workers()))
    return workers, (min(grid, workers * CHUNKS_PER_WORKER) if workers > 1 else 1)


def _early_wake(grid: int, threads: int | None) -> EarlyWake:
    """An :class:`EarlyWake` of the helpers a launch of ``grid`` blocks on up to ``threads`` threads takes."""
    workers, chunks = _workers_and_chunks(grid, threads)
    return EarlyWake(min(workers, chunks) - 1 if chunks > 1 else 0)


def _launch_multicore(kernel, grid: int, warps: int, args, threads: int | None = None,
                      check: tuple | None = None) -> bool:
    """Run a grid on up to ``threads`` threads (default ``multicore_workers()``): ``CHUNKS_PER_WORKER`` block ranges per
    thread (load balance for uneven blocks), taken in order by the caller and by the idle helper threads (waking a
    helper costs a thread hand-off; a block range does not). One block, or one thread, runs in the calling thread
    alone.

    ``kernel``: the kernel's dispatcher, or its compiled entry (:func:`compiled_entry`).

    ``check = (bits, per_block, capacity, below)``: the launch reads the uint32 index ``bits``, ``per_block`` of
    them a block in order, and may read none at or past ``capacity``: each thread checks a range's indices
    (``below``: :func:`_bits_below` or its compiled entry) just before it runs the range (they are then in its
    cache for the kernel, and the threads share the check), and the launch stops at the first range that has one.
    False then: some blocks may have run, so only a launch whose writes are its call's own (a gather's new result)
    may be given a check. True otherwise."""
    workers, chunks = _workers_and_chunks(grid, threads)
    if chunks <= 1:
        if check is not None and not check[3](check[0], 0, check[0].size, check[2]):
            return False
        _run_range(kernel, (0, grid, grid, warps), args)
        return True
    launch = _Launch(kernel, grid, warps, args, chunks, check)
    try:
        # SIGINT held while helpers are handed the launch: an interrupt between two wake-ups would leave a helper
        # counted that never runs, and _stop would wait for it forever
        uninterrupted(_helper_pool().start, launch, min(workers, chunks) - 1)
        if fault_hook is not None:
            fault_hook("launch-wait")
        launch.run()  # the caller is one of the threads
        # the helpers end a range or two after the caller: polled first, as a lock's sleeper would wake 10-40 us late
        if launch.helpers and not _cleared_within(launch.helpers_running, HELPER_WAIT_POLLS):
            launch.done.acquire()
    except BaseException:
        _stop(launch)
        raise
    if launch.errors:
        raise launch.errors[0]
    return not launch.refused


_atomic_add = intrinsics.CPU["atomic_add"]


@cache.njit(nogil=True, cache=True)
def _cleared_within(flag, polls):
    """Whether ``flag[0]`` (a launch's :attr:`_Launch.helpers_running`, a helper's :attr:`_Helper.unhanded`) reads 0
    within ``polls`` atomic reads, made without the GIL, so that the thread that clears it runs its Python lines
    meanwhile."""
    for _ in range(polls):
        if _atomic_add(flag, 0, 0) == 0:  # (an atomic read: a plain load in a loop of no stores may be made once)
            return True
    return False


@cache.njit(nogil=True, cache=True)
def _bits_below(bits, lo, hi, capacity):
    """Whether every one of ``bits[lo:hi]`` (uint32) is below ``capacity``: one pass, no GIL (a launch's threads run
    it side by side)."""
    largest = numba.uint32(0)
    for i in range(lo, hi):
        v = bits[numba.uint64(i)]  # (unsigned: no wraparound test, so the loop vectorises, as fast as numpy's max)
        largest = v if v > largest else largest
    return hi <= lo or largest < capacity


@cache.njit(cache=True)
def _first_address(array):
    """The address of a 1-D array's first element."""
    return array.ctypes.data


@functools.cache
def index_range_check():
    """``below(bits, lo, hi, capacity)``: :func:`_bits_below`'s compiled entry (:func:`compiled_entry`) for a 1-D
    C-contiguous array of 4-byte indices, which it reads as their uint32 bits whatever their dtype (an int32 -1 is
    then past any table), or None where Numba gives no entry. A kept launch's index step calls it on the caller's
    int32 / uint32 indices as they are (0.4 µs for 8 of them on the development machine, against 0.8 µs for Python's
    ``max`` and ``min`` over their ``tolist()``)."""
    probe = np.zeros(1, np.uint32)
    _bits_below(probe, 0, 1, 1)  # (compiled, or loaded from the disk cache)
    entry = compiled_entry(_bits_below, (probe, 0, 1, 1))
    if entry is None or not entry(probe, 0, 1, 1) or entry(np.array([-1], np.int32), 0, 1, 1 << 31):
        return None
    return entry


@functools.cache
def address_readers() -> dict:
    """``{itemsize: read}``: ``read(array)``, the address of the first element of a 1-D numpy array of that element
    size (1, 2, 4 or 8 bytes, any dtype, writable or not, any stride), by :func:`_first_address`'s compiled entry
    (:func:`compiled_entry`): 0.19-0.27 µs a read on the development machine, against 0.78-1.16 µs through ctypes'
    buffer view, the cheapest way Python has (a repeated small call reads one or two). The entry checks an array's
    element size alone, and writes one dimension's shape and stride where it unboxes the array: never hand it an
    array of more dimensions. Empty where Numba gives no entry (addresses are then read through ctypes)."""
    readers = {}
    for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
        probe = np.zeros(1, dtype)
        _first_address(probe)  # (compiled, or loaded from the disk cache)
        entry = compiled_entry(_first_address, (probe,))
        if entry is None or entry(probe) != probe.ctypes.data:
            return {}
        readers[probe.itemsize] = entry
    return readers


def _launch_multicore_writer(kernel, alone, grid: int, warps: int, args, threads: int | None, table) -> None:
    """:func:`_launch_multicore`, registered as a writer of ``table`` when it writes one
    (:mod:`simt_pto.kernels.writers`); with an ``alone`` kernel (its plain-store form), that kernel on the calling
    thread instead, if nothing else is writing memory the table shares."""
    if table is None:
        _launch_multicore(kernel, grid, warps, args, threads)
        return
    if alone is not None and writers.table_writers.run_alone(table, _run_range, alone, (0, grid, grid, warps), args):
        return
    if grid == 1 or threads == 1:  # what _launch_multicore runs on its caller (a tile op: a few microseconds in all)
        write_shared(table, _run_range, kernel, (0, grid, grid, warps), args)
    else:
        write_shared(table, _launch_multicore, kernel, grid, warps, args, threads)


write_shared = writers.write_shared
"""``write_shared(table, write, *args)``: ``write(*args)``, a writer of the host array ``table`` whose updates compose
(atomics, stores), registered as such for its duration (:func:`simt_pto.kernels.writers.write_shared`)."""


def _stop(launch: _Launch) -> None:
    """After an exception in the caller (Ctrl-C): hand out no more block ranges and wait for the running ones, so
    that no thread of ours writes the caller's arrays once the exception leaves the call. A second interrupt during
    that wait (a few milliseconds: one block range) is held back until the wait is over."""
    launch.stopped = True
    while True:
        try:
            if launch.helpers:
                launch.done.acquire()
            return
        except BaseException:  # noqa: BLE001 - the first exception is the one the caller gets
            continue


def _simulator_input(arg):
    """``arg`` as the simulator takes an argument the launch does not write: an array (or a tuple of them) on a copy
    of its own, which the simulator's copy-back writes instead of the caller's memory."""
    if isinstance(arg, tuple):
        return tuple(_simulator_input(a) for a in arg)
    return arg.copy() if isinstance(arg, np.ndarray) else arg


def launch(spec: LaunchSpec, backend: str, args=None) -> None:
    """Run one launch (:class:`simt_pto.launch_spec.LaunchSpec`) on ``backend`` (``"multicore"``, ``"simulator"``
    or ``"gpu"``): ``spec.grid`` blocks of ``dim3(32, kLaunchWarps)`` threads. ``args`` are the kernel's arguments
    after ``launch`` (default ``spec.values()``): host arrays on ``multicore`` and the simulator, device arrays (or host
    arrays Numba copies) on the GPU."""
    grid, warps = int(spec.grid), int(spec.geometry.launch_warps)
    if not 1 <= warps <= geometry.MAX_WARPS or grid < 1:
        raise ValueError(f"SIMT launch of {spec.kernel}: grid {grid} x dim3(32, {warps}) is not a launch")
    args = spec.values() if args is None else tuple(args)
    kernel = compile_kernel(spec.kernel, spec.policy, family(backend))
    if backend == "multicore":
        table = args[[name for name, _ in spec.args].index("table")] if "table" in spec.writes else None
        alone = None if spec.multicore_plain_kernel is None else compile_kernel(spec.multicore_plain_kernel, spec.policy, "cpu")
        _launch_multicore_writer(kernel, alone, grid, warps, args, spec.multicore_threads, table)
        return
    if backend == "simulator":
        # The simulator copies every array argument back after the launch, whole: an input the launch does not
        # write (a gather's table, a scatter's source and indices) runs on a copy, so nothing is copied back into
        # the caller's memory, where it would undo what other threads' calls wrote meanwhile.
        args = [a if name in spec.writes else _simulator_input(a) for (name, _), a in zip(spec.args, args, strict=True)]
        table = args[[name for name, _ in spec.args].index("table")] if "table" in spec.writes else None
        if isinstance(writers.table_key(table), np.ndarray):
            # the simulator writes the table's copy back whole: a read-modify-write of all of it, so it runs as the
            # table's only writer (kernels/writers.py), registered before the simulator's lock is taken
            writers.table_writers.run_exclusive(table, _simulate, kernel, grid, warps, args)
        else:
            _simulate(kernel, grid, warps, args)
    else:
        kernel[grid, (geometry.WARP, warps)]((0, grid, grid, warps), *args)


def _simulate(kernel, grid: int, warps: int, args) -> None:
    """One launch on Numba's CUDA simulator, which keeps its thread state in globals and a launch's grid and block
    on the kernel object itself (its ``kernel[grid, block]`` sets them and returns the kernel, where a GPU kernel's
    makes a configuration of its own): configured and run under one lock, one launch at a time. (Configured before
    the lock, a launch ran with the grid another thread's launch of the same kernel had set meanwhile.)"""
    with _simulator_lock:
        try:
            kernel[grid, (geometry.WARP, warps)]((0, grid, grid, warps), *args)
        except BaseException:
            _join_simulator_threads()
            raise


def _operand_picker(spec: LaunchSpec, operands: tuple[str, ...]):
    """``(arguments, constants)``: ``arguments(arrays + constants)`` is ``spec``'s argument tuple with ``arrays`` in
    the places of the arguments named ``operands``, every other argument as ``spec`` has it; None when ``spec``
    holds an array outside ``operands`` (a launch whose other arrays belong to its call)."""
    constants, places = [], []
    for name, value in spec.args:  # (one loop: a new shape's launch is bound on its first call)
        if name in operands:
            places.append(operands.index(name))
        elif isinstance(value, (np.ndarray, tuple)):
            return None
        else:
            places.append(len(operands) + len(constants))
            constants.append(value)
    # the kernel's arguments in order, picked from (*arrays, *constants) by one C call: a tile op's launch costs a
    # few microseconds, most of them Python's
    pick = operator.itemgetter(*places)
    arguments = pick if len(places) > 1 else lambda source: (pick(source),)  # (itemgetter of one: no tuple)
    return arguments, tuple(constants)


def simulator_launcher(spec: LaunchSpec, operands: tuple[str, ...]):
    """``run(*arrays)``: ``spec``'s launch on Numba's CUDA simulator with ``arrays`` in the places of its arguments
    named ``operands`` (:func:`multicore_launcher`'s contract), run as :func:`launch` runs it there (one launch at a
    time, read-only inputs on copies, the table's only writer). None as :func:`multicore_launcher`."""
    picker = _operand_picker(spec, operands)
    if picker is None:
        return None
    arguments, constants = picker

    def run(*arrays) -> None:
        launch(spec, "simulator", arguments(arrays + constants))
    return run


def _indices_per_block(spec: LaunchSpec) -> int | None:
    """How many consecutive entries of its ``idx`` each block of a gather launch reads (Row: a block's rows, one
    index each; Elem: a block's flat positions), when the index is one dense run; None otherwise."""
    a = spec.arguments
    if "idx_step" in a and "tile_rows" in a:
        return int(a["tile_rows"]) if a["idx_step"] == 1 else None
    if {"idx_rs", "idx_cs", "valid_cols", "tile_rows"} <= set(a):
        dense = a["idx_cs"] == 1 and a["idx_rs"] == a["valid_cols"]
        return int(a["tile_rows"]) * int(a["valid_cols"]) if dense else None
    return None


def multicore_launcher(spec: LaunchSpec, operands: tuple[str, ...], idx_capacity: int | None = None,
                       reads_as: tuple[tuple[str, np.dtype], ...] = ()):
    """``run(*arrays)``: ``spec``'s launch on the ``multicore`` backend with ``arrays`` in the places of its arguments
    named ``operands`` (of the same Numba types as ``spec``'s), every other argument as ``spec`` has it. The kernel is
    looked up once, here: what a repeated call of one signature runs (``simt_pto.host.kept_launch.KeptLaunch``, for
    whole arrays and tile ops alike); from its second run on it calls the kernel's compiled entry
    (:func:`compiled_entry`), on the calling thread (one block range) or on every thread of the launch. None when
    ``spec`` holds an array outside ``operands`` (a launch whose other arrays belong to its call).

    ``idx_capacity`` (a gather whose output its call makes, under a policy that refuses out-of-range indices): the
    launch checks its uint32 ``idx`` operand against it, range by range on the threads that run the blocks
    (:func:`_launch_multicore`'s ``check``), and ``run`` returns False, its output to be dropped, when one is past
    it (True otherwise).

    ``reads_as``: ``(name, dtype)`` of operands the caller hands in a dtype of their own, of ``dtype``'s element
    size (a float32 table where the kernel moves uint32 bits, int32 indices read as uint32). A compiled entry reads
    an array's memory whatever its dtype (:func:`compiled_entry`), so once every kernel the launch calls is one,
    they are passed as they are, a view less each per call (a repeated 8-row call: about 0.4 µs each); until then,
    and wherever the launch calls a dispatcher (a fault hook or a trace set), each is viewed as ``dtype`` first, so
    a dispatcher never types, nor compiles for, the caller's own dtype."""
    picker = _operand_picker(spec, operands)
    if picker is None:
        return None
    arguments, constants = picker
    names = [name for name, _ in spec.args]
    typed_at = tuple((names.index(name), np.dtype(dtype)) for name, dtype in reads_as)
    grid, warps, threads = int(spec.grid), int(spec.geometry.launch_warps), spec.multicore_threads
    kernel = compile_kernel(spec.kernel, spec.policy, "cpu")
    whole_grid = (0, grid, grid, warps) if grid == 1 or threads == 1 else None  # what _launch_multicore runs on its caller
    # the kernel's compiled entry (compiled_entry), looked up from the launch's second one-range run on: a shape
    # called twice, a warm-up and a call (bench/new_shapes.py), pays no lookup
    direct, ran = None, False
    # raw: every kernel (and index check) this launch calls is a compiled entry, so the reads_as operands go as
    # they are (a fault hook or a trace, tests' tools, routes a launch through its dispatchers: typed then)
    raw = not typed_at
    if idx_capacity is not None and "table" not in spec.writes:
        idx_at, per_block = names.index("idx"), _indices_per_block(spec)
        direct_check = None  # the index check's compiled entry

        ranged = _RangeEntries(kernel, None, grid, warps)

        def run_checked(*arrays) -> bool:
            nonlocal direct, direct_check, ran, raw
            args = arguments(arrays + constants)
            if not raw or fault_hook is not None or _trace is not None:
                args = _typed(args, typed_at)
            bits = args[idx_at]
            if whole_grid is None and per_block is not None:
                entries = ranged.taken(args, (bits, 0, bits.size, idx_capacity))
                raw = raw or ranged.all_entries()
                return _launch_multicore(entries.kernel, grid, warps, args, threads,
                                         (bits, per_block, idx_capacity, entries.check))
            # (not through _launch_multicore's own one-range case: a small call's extra frames cost it about 0.7 us)
            # one range, or no block -> index map: all indices first (by the check's compiled entry, as the kernel's)
            if direct_check is None and ran:
                direct_check = compiled_entry(_bits_below, (bits, 0, bits.size, idx_capacity))
            if not (direct_check or _bits_below)(bits, 0, bits.size, idx_capacity):
                return False
            if whole_grid is None:
                entries = ranged.taken(args)
                raw = raw or (direct_check is not None and entries.all_entries())
                _launch_multicore(entries.kernel, grid, warps, args, threads)
            elif fault_hook is None and _trace is None:  # (_run_range, inline: a small call's one range)
                if direct is None and ran:
                    direct = compiled_entry(kernel, (whole_grid, *args))
                    raw = direct is not None and direct_check is not None
                ran = True
                (direct or kernel)(whole_grid, *args)
            else:
                _run_range(kernel, whole_grid, args)
            return True
        if whole_grid is None:
            run_checked.early_wake = functools.partial(_early_wake, grid, threads)
        return run_checked
    if "table" in spec.writes:  # a writer of the table: registered (kernels/writers.py), maybe in its plain-store form
        table_at = names.index("table")
        alone = None if spec.multicore_plain_kernel is None else compile_kernel(spec.multicore_plain_kernel, spec.policy, "cpu")

        direct_alone = None  # the plain-store kernel's compiled entry
        ranged = _RangeEntries(kernel, alone, grid, warps)

        def run_writer(*arrays) -> None:
            nonlocal direct, direct_alone, ran, raw
            args = arguments(arrays + constants)
            if not raw or fault_hook is not None or _trace is not None:
                args = _typed(args, typed_at)
            if whole_grid is None:
                entries = ranged.taken(args)
                raw = raw or entries.all_entries()
                _launch_multicore_writer(entries.kernel, entries.alone, grid, warps, args, threads, args[table_at])
                return
            if fault_hook is not None or _trace is not None:
                _launch_multicore_writer(kernel, alone, grid, warps, args, threads, args[table_at])
                return
            # (_launch_multicore_writer and _run_range, inline: a small call's one range, registered)
            table = args[table_at]
            seen, ran = ran, True  # (seen: a run before this one, so the entries are looked up)
            if alone is not None:
                if direct_alone is None and seen:
                    direct_alone = compiled_entry(alone, (whole_grid, *args))
                if writers.table_writers.run_alone(table, direct_alone or alone, whole_grid, *args):
                    return
            if direct is None and seen:
                direct = compiled_entry(kernel, (whole_grid, *args))
                # (a plan whose plain-store form has always run has no compiled atomic kernel yet: typed until then)
                raw = direct is not None and (alone is None or direct_alone is not None)
            write_shared(table, direct or kernel, whole_grid, *args)
        if whole_grid is None and alone is None:  # (a plain-store form runs on its caller: it would wake them for nothing)
            run_writer.early_wake = functools.partial(_early_wake, grid, threads)
        return run_writer

    ranged = _RangeEntries(kernel, None, grid, warps)

    def run(*arrays) -> None:
        nonlocal direct, ran, raw
        args = arguments(arrays + constants)
        if not raw or fault_hook is not None or _trace is not None:
            args = _typed(args, typed_at)
        if whole_grid is None:
            entries = ranged.taken(args)
            raw = raw or entries.all_entries()
            _launch_multicore(entries.kernel, grid, warps, args, threads)
        elif fault_hook is None and _trace is None:  # (_run_range, inline: a small call's one range)
            if direct is None and ran:
                direct = compiled_entry(kernel, (whole_grid, *args))
                raw = direct is not None
            ran = True
            (direct or kernel)(whole_grid, *args)
        else:
            _run_range(kernel, whole_grid, args)
    if whole_grid is None:
        run.early_wake = functools.partial(_early_wake, grid, threads)
    return run


def _typed(args: tuple, typed_at: tuple) -> tuple:
    """``args`` with each array at a position of ``typed_at`` (``(position, dtype)`` pairs) viewed as its dtype
    (:func:`multicore_launcher`'s ``reads_as``); ``args`` itself when there is none."""
    if not typed_at:
        return args
    typed = list(args)
    for at, dtype in typed_at:
        typed[at] = typed[at].view(dtype)
    return tuple(typed)


class _RangeEntries:
    """What a kept launch of several block ranges hands its threads (:func:`multicore_launcher`): its kernel, its
    plain-store form (or None) and its ranges' index check, as their compiled entries (:func:`compiled_entry`) from the
    launch's second run on, looked up once then; until then, and where an entry is missing (a kernel not compiled
    yet), the dispatcher."""

    __slots__ = ("kernel", "alone", "check", "_launch", "_runs", "_found")

    def __init__(self, kernel, alone, grid: int, warps: int):
        self.kernel, self.alone, self.check = kernel, alone, _bits_below
        self._launch, self._runs, self._found = (0, grid, grid, warps), 0, False

    def taken(self, args: tuple, check_args: tuple | None = None) -> _RangeEntries:
        """Itself, counting a run of the launch with ``args`` (and its index check's arguments, where it has one)."""
        runs = self._runs = self._runs + 1  # (a local: of two threads that count at once, one sees 2 or both do)
        if runs == 2:
            kernel = compiled_entry(self.kernel, (self._launch, *args))
            alone = None if self.alone is None else compiled_entry(self.alone, (self._launch, *args))
            check = None if check_args is None else compiled_entry(_bits_below, check_args)
            self.kernel, self.alone, self.check = kernel or self.kernel, alone or self.alone, check or _bits_below
            self._found = (kernel is not None and (self.alone is None or alone is not None)
                           and (check_args is None or check is not None))
        return self

    def all_entries(self) -> bool:
        """Whether the kernel, its plain-store form and its index check (those the launch has) are all compiled
        entries (:func:`multicore_launcher`'s ``reads_as``)."""
        return self._found


def _single_launch(call: CallPlan) -> LaunchSpec | None:
    """The launch of a plan that is one launch and nothing else (no host step, no guard), or None."""
    if len(call.steps) != 1 or call.guard_name is not None or not isinstance(call.steps[0], LaunchSpec):
        return None
    return call.steps[0]


def single_gpu_launcher(call: CallPlan, operands: tuple[str, ...]):
    """``launch(*pointers)``: the one launch of ``call`` (no host step, no guard), which has just run on the GPU
    backend, with the data pointers of device arrays in the places of its arguments named ``operands`` (1-D device
    arrays of the sizes and dtypes the launch had), every other argument as the launch has it
    (:func:`.direct_launch.direct_launch`). None for any other plan, for a launch that holds an array outside
    ``operands``, and where :func:`~.direct_launch.direct_launch` gives none."""
    spec = _single_launch(call)
    if spec is None:
        return None
    names = [name for name, _ in spec.args]
    if any(name not in operands and (isinstance(value, (np.ndarray, tuple)) or hasattr(value, "device_ctypes_pointer"))
           for name, value in spec.args) or not set(operands) <= set(names):
        return None
    with first_use:
        from .direct_launch import direct_launch
    grid, warps = int(spec.grid), int(spec.geometry.launch_warps)
    return direct_launch(compile_kernel(spec.kernel, spec.policy, family("gpu")), grid, (geometry.WARP, warps),
                         ((0, grid, grid, warps), *spec.values()), tuple(1 + names.index(name) for name in operands))


def gpu_launchers(call: CallPlan, operands: tuple[str, ...], made: tuple[str, ...] = ()) -> tuple | None:
    """``((launch, names), ...)``: each launch of ``call`` (launches only: no host step, no guard), which has just
    run on the GPU backend, as :func:`single_gpu_launcher` makes one, taking the data pointers of the device arrays
    named ``names`` (those of its arguments in ``operands`` or ``made``: arrays a call makes afresh, the
    Conflict::Last owners) in their places. None where a launch holds another array, an operand is taken by no
    launch, or :func:`~.direct_launch.direct_launch` gives none."""
    if call.guard_name is not None or not call.steps or not all(isinstance(s, LaunchSpec) for s in call.steps):
        return None
    with first_use:
        from .direct_launch import direct_launch
    out, taken_anywhere = [], set()
    for spec in call.steps:
        names = [name for name, _ in spec.args]
        taken = tuple(name for name in names if name in operands or name in made)
        if any(name not in taken and (isinstance(value, (np.ndarray, tuple)) or hasattr(value, "device_ctypes_pointer"))
               for name, value in spec.args):
            return None
        grid, warps = int(spec.grid), int(spec.geometry.launch_warps)
        launch = direct_launch(compile_kernel(spec.kernel, spec.policy, family("gpu")), grid, (geometry.WARP, warps),
                               ((0, grid, grid, warps), *spec.values()), tuple(1 + names.index(name) for name in taken))
        if launch is None:
            return None
        out.append((launch, taken))
        taken_anywhere.update(taken)
    return tuple(out) if set(operands) <= taken_anywhere else None


def _join_simulator_threads(timeout: float = 60.0) -> None:
    """After an exception in the caller during a simulated launch (Ctrl-C lands in numba-cuda's polling loop):
    wait for the simulator's threads of the block being run, which are numba-cuda's and cannot be stopped, so that
    none writes the caller's arrays once the exception leaves the call. Later blocks never start."""
    BlockThread = imported("numba.cuda.simulator.kernel").BlockThread
    deadline = time.monotonic() + timeout
    for thread in threading.enumerate():
        if isinstance(thread, BlockThread):
            while thread.is_alive() and time.monotonic() < deadline:
                try:
                    thread.join(max(0.0, deadline - time.monotonic()))
                except BaseException:  # noqa: BLE001 - a second Ctrl-C: keep waiting, the first one is raised
                    continue


def host_store(atomic: int, fmt: int):
    """The store rule of (ScatterAtomicOp value, element format) bound to the CPU atomics, callable from host code:
    ``host_store(atomic, fmt)(table, e, v)`` is one atomic ``table[e] op= v`` (the A5 ``(1, 1)`` scalar fallback),
    safe beside kernels that other threads run on the same table. Compiled in memory only: on disk it would share
    its cache entry with :func:`simt_pto.kernels.store.sequential_store`, the same source with other primitives."""
    return _store_element("cpu", atomic, fmt)


__all__ = ["argument_types", "bind", "bound_source", "compile_kernel", "gpu_launchers", "multicore_launcher",
           "multicore_workers",
           "simulator_launcher", "family",
           "forget_compiled", "host_store", "kernel_source", "launch", "namespace",
           "trace_multicore_launches", "write_shared"]
