"""Which machine runs the A5 kernels: a CUDA GPU, all the CPU's cores, or Numba's CUDA simulator.

The three run the same kernel source (``simt_pto.kernels.a5``):

* ``gpu``: the Numba CUDA kernels on a CUDA GPU;
* ``multicore``: the same kernels compiled by Numba for the CPU, the blocks of a launch spread over all cores,
  with real CPU atomics. Not to be confused with the ``cpu`` *target*, the CPU simulator's reference semantics
  in numpy; this backend was called ``cpu`` before, and that spelling still selects it, with a
  :class:`DeprecationWarning` (:func:`canonical_backend`);
* ``simulator``: Numba's CUDA simulator, which runs every thread as a Python thread: for stepping through
  a kernel (print, pdb), and as a second, interpreted run of the same source.

Order of precedence: :func:`set_a5_backend`, then the environment variable ``SIMT_PTO_A5_BACKEND`` =
``gpu`` | ``multicore`` | ``simulator`` | ``auto``; ``auto`` (the default) is the GPU when the CUDA driver reports
a device, else ``multicore``. Nothing is resolved at import: the first A5 call (or :func:`a5_backend`) does it.

``numba.cuda`` runs in simulator or real mode for the whole process, fixed when it is first imported, so
``gpu`` and ``simulator`` exclude each other in one process; ``multicore`` never needs ``numba.cuda`` and works
beside either. :func:`a5_backends` says what this process can use.

``gpu`` and ``simulator`` need numba-cuda, which the core install leaves out: it comes with the ``cuda`` extra
(``pip install "simt_pto[cuda]"``, with the numpy bound numba-cuda needs). Without it ``auto`` is ``multicore``,
:func:`a5_backends` lists ``multicore`` only, and asking for ``gpu`` or ``simulator`` raises
:class:`MissingExtraError` naming the extra. Numba's own built-in ``numba.cuda`` (what ``import numba.cuda``
loads when numba-cuda is not installed) is no CUDA backend of ours; a process that imported it first still runs
``multicore``.

Every A5 backend, and the ``a2a3`` target's loops, run Numba-compiled code (the ``multicore`` backend's atomics
are LLVM intrinsics that have no pure-Python form). With ``NUMBA_DISABLE_JIT`` set, :func:`a5_backend` (so the
first A5 call) and the first ``a2a3`` call raise :class:`JitRequiredError`; ``import simt_pto`` and the ``cpu``
target (plain numpy) still work.

The first use may come from several threads at once (a backend query in one, a first call in another): every import
of Numba, ``numba.cuda`` or a kernel module that simt_pto makes at a call goes through :func:`imported` or holds
:data:`first_use`, and so do the backend's choice and change. Python's per-module import locks alone do not make
that safe: two threads that enter a package with circular imports (Numba's) by different modules are each handed
the other's half-initialised module (``ImportError: cannot import name ... from partially initialized module``).
"""
from __future__ import annotations

import ctypes
import functools
import importlib
import importlib.util
import os
import sys
import threading
import warnings
from collections.abc import Callable
from types import ModuleType

from . import interrupts

ENV_VAR = "SIMT_PTO_A5_BACKEND"
BACKENDS = ("gpu", "multicore", "simulator")
CHOICES = ("auto",) + BACKENDS
"""What :func:`set_a5_backend` and ``SIMT_PTO_A5_BACKEND`` accept (besides the aliases below)."""
_ALIASES = {"sim": "simulator", "cudasim": "simulator", "cuda": "gpu", "host": "multicore"}
DEPRECATED = {"cpu": "multicore"}
"""Old spellings that still work, each with a :class:`DeprecationWarning` naming the new one. The backend was
renamed because ``cpu`` is also a target (the CPU simulator's semantics), which it is not."""
_requested: str | None = None
_resolved: str | None = None


class _FirstUseLock:
    """A re-entrant lock whose ``with`` block also holds the signals in the main thread
    (:data:`simt_pto.interrupts.CATCHABLE`): a first import of Numba cut by Ctrl-C leaves half-initialised modules
    behind, and every later call of the process fails. The hold starts before the lock is taken and ends after it is
    released, so an interrupt never leaves the lock held; while another thread holds the lock, the wait lets the
    signals that came through every :data:`_WAIT_STEP` seconds (Ctrl-C then leaves the wait, nothing taken).
    ``acquire`` / ``release`` take the lock alone (``os.fork()``'s guard).

    ``os.fork()`` waits for the lock from its first use on: a child that inherited it held by a thread it does not
    have would hang at its own first use. The kernels' fork guard (:func:`simt_pto.kernels.cache.install_fork_guard`)
    takes it too, with Numba's compiler lock, once they are loaded; before that, a fork made while another thread
    loads them is this guard's. ``import simt_pto`` registers nothing."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._holds: list = []  # one entry per ``with`` level, pushed and popped under the lock
        self._fork_guarded = False

    def _guard_forks(self) -> None:
        self._fork_guarded = True  # (two threads may both register: each pair of handlers takes and gives back once)
        # logging registers at-fork handlers as it is imported, which Numba's first import does under this lock; imported
        # during a fork's wait for the lock, its release would run after the fork without its acquire before it
        import logging  # noqa: F401
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(before=self._lock.acquire, after_in_parent=self._lock.release,
                                after_in_child=self._lock.release)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> _FirstUseLock:
        if not self._fork_guarded:  # (before the lock is first held: no fork can copy it held without waiting)
            self._guard_forks()
        while True:
            held = interrupts.hold(interrupts.CATCHABLE)
            try:
                if self._lock.acquire(timeout=_WAIT_STEP):
                    break
            except BaseException:
                interrupts.release(held)
                raise
            # another thread makes its first import meanwhile: a Ctrl-C that came during the wait is raised here,
            # with nothing held, rather than once that import (seconds, at a first compile) is over
            interrupts.release(held)
        self._holds.append(held)
        return self

    def __exit__(self, *exc_info: object) -> None:
        held = self._holds.pop()
        self._lock.release()
        interrupts.release(held)  # a Ctrl-C that arrived meanwhile is raised here, the first use complete


_WAIT_STEP = 0.05
"""Seconds the main thread waits for :data:`first_use` at a time, its signals held, before it lets those that came
through (:meth:`_FirstUseLock.__enter__`)."""

first_use = _FirstUseLock()
"""Held while simt_pto imports Numba, ``numba.cuda`` or one of its kernel modules for the first time, and while the
A5 backend is chosen or changed: one thread at a time makes these first imports, so that none sees another's
half-initialised module, and Ctrl-C waits for them to complete. Re-entrant (an import under it may import more under
it). Taken before Numba's compiler lock where both are held (a kernel module that compiles as it is imported), never
after it; ``os.fork()`` waits for it (:meth:`_FirstUseLock._guard_forks`)."""


def _initialised(module: ModuleType | None) -> bool:
    """Whether ``module`` (a ``sys.modules`` entry, or None) has finished running its top level: a module another
    thread is still importing is in ``sys.modules`` already, half-initialised."""
    return module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False)


def imported(name: str) -> ModuleType:
    """The module ``name``, imported under :data:`first_use` unless some thread has finished importing it already
    (then no lock is taken: a call that finds its modules loaded pays a dictionary lookup). Every call-time import
    of a Numba or ``numba.cuda`` module in simt_pto goes through here: ``cuda = imported("numba.cuda")``."""
    module = sys.modules.get(name)
    if _initialised(module):
        return module
    with first_use:
        return importlib.import_module(name)


CUDA_EXTRA = "cuda"
"""The extra that installs numba-cuda (the ``gpu`` and ``simulator`` backends): ``pip install "simt_pto[cuda]"``."""


class MissingExtraError(ImportError):
    """A backend or tool needs an optional part of the package that this install leaves out. The message says what
    asked for it and the command that installs it: ``A5 backend 'simulator' needs numba-cuda, which this install
    leaves out: pip install "simt_pto[cuda]"``; ``extra`` is the extra's name, ``install`` that command."""

    def __init__(self, what: str, needs: str, extra: str) -> None:
        self.what, self.needs, self.extra = what, needs, extra
        self.install = f'pip install "simt_pto[{extra}]"'
        super().__init__(f"{what} needs {needs}, which this install leaves out: {self.install}")


@functools.cache
def numba_cuda_installed() -> bool:
    """True when numba-cuda (the ``cuda`` extra) is installed; asked once, without importing it."""
    return importlib.util.find_spec("numba_cuda") is not None


def require_numba_cuda(what: str, extra: str = CUDA_EXTRA) -> None:
    """Check that ``what`` (a backend, a tool) can use numba-cuda in this process: :class:`MissingExtraError`
    naming ``extra`` when numba-cuda is not installed; RuntimeError when Numba's own built-in ``numba.cuda`` was
    imported first, which holds the name ``numba.cuda`` for the rest of the process."""
    if not numba_cuda_installed():
        raise MissingExtraError(what, "numba-cuda", extra)
    if cuda_mode() == "builtin":
        raise RuntimeError(f"{what} needs numba-cuda, but Numba's own built-in numba.cuda was imported first in "
                           "this process and holds the name numba.cuda; import simt_pto's CUDA backends before "
                           "it, or use 'multicore'")


class JitRequiredError(RuntimeError):
    """A target that runs Numba-compiled code was called with Numba's JIT disabled (``NUMBA_DISABLE_JIT``)."""


_numba_config: ModuleType | None = None
"""``numba.core.config`` once loaded (:func:`require_jit` reads it at every launch)."""


def _load_numba_config() -> ModuleType:
    global _numba_config
    _numba_config = imported("numba.core.config")
    return _numba_config


def require_jit(target: str) -> None:
    """Raise :class:`JitRequiredError` when Numba's JIT is disabled: ``target`` (``"a5"`` or ``"a2a3"``) runs
    compiled code. Without the JIT the ``multicore`` backend's atomic intrinsics cannot run at all, and the rest would
    run as Python over numpy scalars: far slower, and an integer wraparound the spec defines raises a warning."""
    config = _numba_config or _load_numba_config()  # every launch asks: a global once Numba is loaded
    if config.DISABLE_JIT:
        raise JitRequiredError(
            f"target {target!r} needs Numba's JIT compiler, and NUMBA_DISABLE_JIT="
            f"{os.environ.get('NUMBA_DISABLE_JIT', '1')} is set in this process: the A5 kernels (every backend) and "
            "the A2/A3 loops are Numba-compiled code; unset NUMBA_DISABLE_JIT (only target 'cpu', plain numpy, "
            "runs without the JIT)")


def canonical_backend(name: str, *, stacklevel: int = 1) -> str:
    """The A5 backend choice ``name`` spells: one of :data:`CHOICES` (``"auto"``, ``"gpu"``, ``"multicore"``,
    ``"simulator"``), matched case-insensitively, aliases included. The deprecated ``"cpu"`` gives
    ``"multicore"`` and a :class:`DeprecationWarning` naming the new spelling; the warning names the caller's line
    (``stacklevel`` 1, as :func:`warnings.warn` called there would; 2: the caller's caller). Anything else raises
    ValueError listing the valid names."""
    key = str(name).strip().lower()
    if key in DEPRECATED:
        new = DEPRECATED[key]
        warnings.warn(f"A5 backend {name!r} is deprecated: it is now called {new!r} (the CPU's cores running the "
                      f"compiled kernels; 'cpu' is the target of the CPU simulator's semantics)",
                      DeprecationWarning, stacklevel=stacklevel + 1)
        return new
    key = _ALIASES.get(key, key)
    if key not in CHOICES:
        raise ValueError(f"A5 backend: unknown choice {name!r}; expected one of {', '.join(CHOICES)}")
    return key


@functools.cache
def gpu_present() -> bool:
    """True when the CUDA driver loads and reports at least one device (asked once, without numba.cuda)."""
    for lib in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            cu = ctypes.CDLL(lib)
        except OSError:
            continue
        count = ctypes.c_int(0)
        try:
            return cu.cuInit(0) == 0 and cu.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0
        except Exception:
            return False
    return False


def cuda_mode() -> str | None:
    """How ``numba.cuda`` runs in this process: None (not imported), ``"gpu"`` or ``"simulator"`` (numba-cuda, in
    real or simulator mode), or ``"builtin"`` (Numba's own built-in ``numba.cuda``, what ``import numba.cuda``
    loads without numba-cuda: no backend of ours runs on it).

    Read from what was imported, never importing ``numba.cuda`` itself. With numba-cuda installed, ``import
    numba.cuda`` always loads it (its redirector), which keeps its mode in ``numba.cuda.core.config``. That import
    may still be under way in another thread: then this waits for it (:func:`imported`)."""
    module = sys.modules.get("numba.cuda")
    if module is None:
        return None
    if not _initialised(module):
        module = imported("numba.cuda")
    if not numba_cuda_installed() or getattr(module, "implementation", "NVIDIA") != "NVIDIA":
        return "builtin"
    config = imported("numba.cuda.core.config")  # numba-cuda's: present once its numba.cuda has been imported
    return "simulator" if config.ENABLE_CUDASIM else "gpu"


def a5_backends() -> tuple[str, ...]:
    """The A5 backends this process can use: ``multicore`` always; with numba-cuda (the ``cuda`` extra)
    ``simulator`` unless ``numba.cuda`` runs in real mode, and ``gpu`` when a device is present and ``numba.cuda``
    is not in simulator mode. Numba's built-in ``numba.cuda``, imported first, leaves ``multicore`` only."""
    if not numba_cuda_installed():
        return ("multicore",)
    mode = cuda_mode()
    if mode == "builtin":
        return ("multicore",)
    out = []
    if mode != "simulator" and gpu_present():
        out.append("gpu")
    out.append("multicore")
    if mode != "gpu":
        out.append("simulator")
    return tuple(out)


def _prepare_cuda(backend: str) -> None:
    """Make ``numba.cuda`` import in the mode ``backend`` needs (or check the mode it already runs in); raises
    :class:`MissingExtraError` without numba-cuda."""
    require_numba_cuda(f"A5 backend {backend!r}")
    mode = cuda_mode()
    if mode is not None:
        if mode != backend:
            raise RuntimeError(f"A5 backend {backend!r}: numba.cuda already runs as {mode} in this process "
                               f"(its mode is fixed at first import); use {mode!r} or 'multicore'")
        return
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1" if backend == "simulator" else "0"
    if "numba" in sys.modules:  # numba reads its config at import: make it see the choice
        imported("numba.core.config").reload_config()


def _resolve(choice: str) -> str:
    if choice == "auto":
        usable = numba_cuda_installed() and cuda_mode() in (None, "gpu")
        return "gpu" if usable and gpu_present() else "multicore"
    return choice


ON_CHANGE: list[Callable[[], None]] = []
"""Called after :func:`set_a5_backend` changes the backend: ``simt_pto.plan`` adds ``CallCache.clear_all`` (the
kept launches of the calls so far are bound to the old backend's kernels, and must not run on the new one)."""


def set_a5_backend(name: str) -> str:
    """Choose ``"gpu"``, ``"multicore"``, ``"simulator"`` or ``"auto"`` for the A5 target; returns the backend.
    The old ``"cpu"`` still selects ``"multicore"``, with a :class:`DeprecationWarning` (:func:`canonical_backend`).

    Raises ValueError for an unknown name, :class:`MissingExtraError` for ``gpu`` / ``simulator`` without
    numba-cuda (the ``cuda`` extra), RuntimeError for either when ``numba.cuda`` already runs in the other mode (or
    is Numba's built-in one), and :class:`JitRequiredError` when Numba's JIT is disabled.
    """
    global _requested, _resolved
    choice = canonical_backend(name, stacklevel=2)
    with first_use:  # one choice at a time, none while another thread imports numba or numba.cuda
        require_jit("a5")
        backend = _resolve(choice)
        if backend != "multicore":
            _prepare_cuda(backend)
        changed = _resolved is not None and backend != _resolved
        _requested, _resolved = choice, backend
    if changed:
        for forget in ON_CHANGE:
            forget()
    return backend


def a5_backend() -> str:
    """``"gpu"``, ``"multicore"`` or ``"simulator"``: where A5 kernels run in this process (resolved on first use;
    ``SIMT_PTO_A5_BACKEND=cpu`` selects ``"multicore"`` with a :class:`DeprecationWarning`).

    Raises :class:`JitRequiredError` when Numba's JIT is disabled (``NUMBA_DISABLE_JIT``): no A5 backend runs then;
    :class:`MissingExtraError` when ``SIMT_PTO_A5_BACKEND`` asks for ``gpu`` / ``simulator`` without numba-cuda.
    """
    global _resolved
    require_jit("a5")
    resolved = _resolved
    if resolved is None:
        with first_use:  # one choice at a time: the first thread resolves, the others find its choice
            if _resolved is None:
                backend = _resolve(_requested or canonical_backend(os.environ.get(ENV_VAR, "auto"), stacklevel=2))
                if backend != "multicore":
                    _prepare_cuda(backend)
                _resolved = backend
            resolved = _resolved
    return resolved
