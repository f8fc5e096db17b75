"""Shared fixtures: a seeded RNG, raw-bit helpers and tables with guard bands.

The oracles in the tests are written independently of the library: plain Python loops over raw bits.
Tables live inside a larger flat buffer whose tail (the guard band) holds a sentinel, so a stray
read shows as a wrong value and a stray write shows as a changed sentinel.
"""
from __future__ import annotations

import dataclasses

import contextlib
import glob
import importlib.util
import io
import os
import shutil
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

import simt_pto as pto

SEED = 20240531

# The element dtypes each target accepts, written from MGATHER.md / MSCATTER.md "Tile Constraints"
# (CPU: the base nine plus float8 on __CCE_AICORE__ builds; A2/A3: the base nine; A5: all twelve).
BASE_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "float16", "bfloat16", "float32")
SPEC_ELEMENT_DTYPES = {
    "cpu": BASE_DTYPES + ("float8_e4m3", "float8_e5m2"),
    "a2a3": BASE_DTYPES,
    "a5": BASE_DTYPES + ("hifloat8", "float8_e4m3", "float8_e5m2"),
}
ALL_DTYPE_NAMES = BASE_DTYPES + ("float8_e4m3", "float8_e5m2", "hifloat8")


# The optional parts of the package (pyproject.toml's extras). A core install (numpy, numba, ml_dtypes, tqdm: the
# second run of .ci/run) has neither; the tests that need one skip there, saying which extra to install.
CUDA_EXTRA = pto.backend.numba_cuda_installed()
"""numba-cuda is installed (the ``cuda`` extra): the ``gpu`` and ``simulator`` backends."""
CUDA_EXTRA_REASON = "needs the CUDA extra (numba-cuda): pip install 'simt_pto[cuda]'"
requires_cuda = pytest.mark.skipif(not CUDA_EXTRA, reason=CUDA_EXTRA_REASON)
"""For a test that needs numba-cuda: the CUDA simulator, numba-cuda's kernel cache, device arrays."""


def _toolchain_installed() -> bool:
    """numba-cuda and ``ptxas``: in the ``toolchain`` extra's ``nvidia`` wheels, else on PATH (where ``simt-pto
    inspect`` looks for it)."""
    if not CUDA_EXTRA:
        return False
    nvidia = importlib.util.find_spec("nvidia")
    roots = list(nvidia.submodule_search_locations or ()) if nvidia is not None else []
    return any(glob.glob(os.path.join(root, "*", "bin", "ptxas")) for root in roots) or bool(shutil.which("ptxas"))


TOOLCHAIN_EXTRA = _toolchain_installed()
TOOLCHAIN_EXTRA_REASON = ("needs the toolchain extra (numba-cuda and the CUDA compiler wheels): "
                          "pip install 'simt_pto[toolchain]'")
requires_toolchain = pytest.mark.skipif(not TOOLCHAIN_EXTRA, reason=TOOLCHAIN_EXTRA_REASON)
"""For a test that compiles a kernel to PTX / machine code (``simt-pto inspect``, the compile proof)."""


@pytest.fixture
def threads_switch_often():
    """Python threads switch every 10 µs instead of 5 ms while a test runs, so that calls interleave (a race between
    a range check and the launch after it needs the switch that short to be hit within a test)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(interval)


@pytest.fixture
def simulator_backend():
    """Run the test's A5 calls on Numba's CUDA simulator (the default here is the ``multicore`` backend, or the
    GPU where one is present), then restore the backend. Skips where ``numba.cuda`` runs in real mode, and where
    numba-cuda (the ``cuda`` extra) is not installed."""
    if not CUDA_EXTRA:
        pytest.skip(CUDA_EXTRA_REASON)
    previous = pto.a5_backend()
    if "simulator" not in pto.a5_backends():
        pytest.skip("numba.cuda runs in real mode in this process: no simulator")
    pto.set_a5_backend("simulator")
    try:
        yield "simulator"
    finally:
        pto.set_a5_backend(previous)


def _runs_on_the_simulator(item) -> bool:
    """A test that takes :func:`simulator_backend`, is marked ``simulator``, or has a parameter naming the simulator
    (``cpu_or_simulator_backend``'s ``"simulator"``, a path such as ``"simulator atomic"``)."""
    if "simulator_backend" in getattr(item, "fixturenames", ()) or item.get_closest_marker("simulator"):
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    return any(isinstance(v, str) and (v == "simulator" or v.startswith("simulator ")) for v in params.values())


def pytest_collection_modifyitems(session, config, items):
    """The tests that run on the CUDA simulator go first, in their order. ``numba.cuda``'s mode is fixed at its first
    import in a process, and a test that compiles for a GPU (real mode) before them would leave them skipped: with
    ``-n``, which tests a worker had run before them depended on the scheduling, so a CI run skipped some of them."""
    items.sort(key=lambda item: not _runs_on_the_simulator(item))


@pytest.fixture(params=["multicore", "simulator"])
def cpu_or_simulator_backend(request):
    """The test once on the ``multicore`` backend (the A5 kernels compiled for the CPU's worker threads) and once on
    Numba's CUDA simulator (:func:`simulator_backend`: the CUDA intrinsics, one thread per SIMT thread); a test may
    pick them per case (``indirect`` parametrisation)."""
    if request.param == "simulator":
        return request.getfixturevalue("simulator_backend")
    previous = pto.a5_backend()
    pto.set_a5_backend("multicore")
    request.addfinalizer(lambda: pto.set_a5_backend(previous))
    return "multicore"


class ScatterForm:
    """What :func:`scatter_form` forced, and how many plain-store launches ran under it."""

    def __init__(self, name: str | None):
        self.name, self.alone_runs = name, 0


@pytest.fixture
def no_full_path(monkeypatch):
    """``arm()``: from then on a whole-array call that takes the full path (wrap, validate, plan) fails the test: a
    repeated call must run its signature's kept launch (simt_pto.host.kept_launch)."""
    def arm():
        from simt_pto.host import in_memory

        def refuse(*args, **kwargs):
            raise AssertionError("the call took the full path")
        monkeypatch.setattr(in_memory, "full_gather", refuse)
        monkeypatch.setattr(in_memory, "full_scatter", refuse)
    return arm


@pytest.fixture
def ctrl_c_handled():
    """SIGINT as a terminal hands it to a Python program, for this test: Python's own handler (``KeyboardInterrupt``)
    installed and the signal not blocked in this thread; what was there is restored after. A process started in the
    background by a non-interactive shell (``pytest ... &`` in a script) inherits SIGINT ignored, and Python then
    leaves it ignored: a test of what Ctrl-C does would see none arrive. A child process started during the test gets
    the default disposition (a handled signal is reset on exec), so its Python installs its own handler too."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals go to the main thread")
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}) if hasattr(signal, "pthread_sigmask") else None
    try:
        yield
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, handler)


@pytest.fixture
def tune():
    """``tune(name=value, ...)``: host thresholds for this test (:func:`simt_pto.host.tuning.configure`, which also
    empties the call caches), the table of before restored after it."""
    from simt_pto.host import tuning
    before = tuning.current()
    yield tuning.configure
    tuning.configure(**dataclasses.asdict(before))


@pytest.fixture(params=["alone", "atomic"])
def scatter_form(request, monkeypatch, tune):
    """The test's A5 scatters with an atomic op in one of the two forms the ``multicore`` backend has: ``"alone"``, the
    plain-store kernel on the calling thread (``simt_mscatter_elem_serial_kernel`` for an Elem scatter,
    ``simt_mscatter_row_serial_kernel`` for a Row scatter; not a 16-bit float Add into a table that starts or ends
    mid-word; each runs while nothing else writes the table, up to ``HostTuning.plain_add_max_updates`` /
    ``plain_rmw_max_updates`` / ``plain_half_add_max_updates`` / ``plain_row_add_max_updates`` /
    ``plain_row_rmw_max_updates`` elements), or
    ``"atomic"``, the atomic kernel (which it runs otherwise); None (indirect parametrisation) changes nothing. The
    fixture checks at the end that the form ran: at least one plain-store launch for ``"alone"``, none for
    ``"atomic"``. On another backend (a GPU, the simulator) every launch is the atomic kernel: ``"alone"`` skips,
    ``"atomic"`` changes nothing (the fixture reads the backend when it is set up: list a backend fixture before
    it)."""
    from simt_pto.kernels import writers
    from simt_pto.plan import CallCache
    form = ScatterForm(request.param)
    if form.name == "alone" and pto.a5_backend() != "multicore":
        pytest.skip(f"the plain-store form is the multicore backend's (the A5 backend is {pto.a5_backend()!r})")
    if form.name is None or pto.a5_backend() != "multicore":
        yield form
        return
    most = 1 << 62 if form.name == "alone" else 0
    tune(plain_add_max_updates=most, plain_rmw_max_updates=most, plain_half_add_max_updates=most,
         plain_row_add_max_updates=most, plain_row_rmw_max_updates=most)
    registry = writers.table_writers
    run_alone = registry.run_alone

    def counted(*args):
        ran = run_alone(*args)
        form.alone_runs += ran
        return ran
    monkeypatch.setattr(registry, "run_alone", counted)
    CallCache.clear_all()  # kept plans and runners were built under the other form
    yield form
    CallCache.clear_all()
    assert (form.alone_runs > 0) == (form.name == "alone"), f"form {form.name!r}: {form.alone_runs} plain-store runs"


BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


def bench_module(name: str):
    """``bench/<name>.py`` loaded as a module, with ``bench/`` on the path while it loads (a bench script imports the
    others beside it)."""
    sys.path.insert(0, BENCH)
    try:
        spec = importlib.util.spec_from_file_location(name, os.path.join(BENCH, f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(BENCH)
    return module


@pytest.fixture
def rng() -> np.random.Generator:
    """A NumPy generator with a fixed seed: every run draws the same cases."""
    return np.random.default_rng(SEED)


def bits_dtype(dtype) -> np.dtype:
    """The unsigned integer dtype of the same width as ``dtype`` (a name, DType or numpy dtype)."""
    return pto.dtypes.resolve(dtype).bits


def as_bits(array: np.ndarray) -> np.ndarray:
    """``array`` reinterpreted as unsigned integers of its width (compare floats bit for bit)."""
    array = np.ascontiguousarray(array)
    return array.view(np.dtype(f"uint{8 * array.dtype.itemsize}"))


def random_values(rng, shape, dtype) -> np.ndarray:
    """Random raw bits reinterpreted as ``dtype`` (NaNs included: the ops move bits, not values)."""
    d = pto.dtypes.resolve(dtype)
    info = np.iinfo(d.bits)
    raw = rng.integers(0, int(info.max) + 1, size=shape, dtype=np.uint64).astype(d.bits)
    return raw.view(d.numpy)


def sentinel_bits(dtype) -> int:
    """A recognisable bit pattern (0xA5 repeated) for ``dtype``'s width."""
    return int("A5" * pto.dtypes.resolve(dtype).itemsize, 16)


class GuardedTable:
    """A ``rows x cols`` table in the head of a flat buffer, the ``margin`` elements behind it a sentinel.

    ``tensor`` is the GlobalTensor (its shape covers only the head); ``bits`` the whole buffer as raw bits.
    """

    def __init__(self, values: np.ndarray, margin: int, dtype):
        d = pto.dtypes.resolve(dtype)
        self.dtype = d
        self.rows, self.cols = values.shape
        self.core = self.rows * self.cols
        self.margin = margin
        self.buffer = np.empty(self.core + margin, dtype=d.numpy)
        self.bits = self.buffer.view(d.bits)
        self.bits[:] = sentinel_bits(d)
        self.bits[: self.core] = as_bits(values).reshape(-1)
        self.tensor = pto.GlobalTensor(self.buffer, shape=(self.rows, self.cols), dtype=d)

    def core_bits(self) -> np.ndarray:
        """The table's own elements as a ``(rows, cols)`` raw-bit copy."""
        return self.bits[: self.core].reshape(self.rows, self.cols).copy()

    def guard_intact(self) -> bool:
        return bool((self.bits[self.core:] == sentinel_bits(self.dtype)).all())


@pytest.fixture
def guarded_table(rng):
    """Factory: ``guarded_table(rows, cols, dtype, margin=37, values=None)`` -> :class:`GuardedTable`.

    Without ``values`` the table holds random bits of ``dtype``.
    """

    def make(rows, cols, dtype, margin=37, values=None):
        d = pto.dtypes.resolve(dtype)
        values = random_values(rng, (rows, cols), d) if values is None else np.asarray(values)
        if values.dtype != d.numpy:
            values = values.astype(d.numpy)
        return GuardedTable(values, margin, d)

    return make


def uint32_of(index: int) -> int:
    """The ISA's cast of an int32 index to uint32: ``-1`` is ``4294967295``."""
    return index & 0xFFFFFFFF


def min_cols(dtype) -> int:
    """Smallest padded RowMajor Cols for ``dtype`` under the 32-byte rule (MGATHER.md, "Minimum Tile Shape")."""
    return 32 // pto.dtypes.resolve(dtype).itemsize


# -- one test body on every target that supports the case ---------------------------------------------------------

TARGETS = ("cpu", "a2a3", "a5")
SPEC_ATOMIC_DTYPES = {
    # MSCATTER.md, "Atomic Type Support". The CPU simulator takes these but runs a plain replace.
    ("cpu", "add"): ("int32", "uint32", "float32", "float16"),
    ("a2a3", "add"): ("int8", "int16", "int32", "float16", "bfloat16", "float32"),
    ("a5", "add"): ("int32", "uint32", "float32", "float16", "bfloat16"),
    ("a5", "max"): ("int32", "uint32", "float32"),
    ("a5", "min"): ("int32", "uint32", "float32"),
}


def supports(target: str, dtype: str, atomic: str = "none") -> bool:
    """Whether ``target``'s spec accepts ``dtype`` as an element type, and ``atomic`` on it."""
    if dtype not in SPEC_ELEMENT_DTYPES[target]:
        return False
    return atomic == "none" or dtype in SPEC_ATOMIC_DTYPES.get((target, atomic), ())


def for_targets(targets=TARGETS, dtypes=ALL_DTYPE_NAMES, atomic="none", **axes):
    """Parametrize a test over ``target`` x ``dtype`` x each of ``axes`` (name -> values), keeping only the
    (target, dtype) pairs the spec supports (CuPy's ``for_all_dtypes`` style): one body, every target."""
    names = ["target", "dtype", *axes]
    cases = [(t, d) for t in targets for d in dtypes if supports(t, d, atomic)]
    for values in axes.values():
        cases = [c + (v,) for c in cases for v in values]
    return pytest.mark.parametrize(",".join(names), [pytest.param(*c, id="-".join(map(str, c))) for c in cases])


def run_simt_pto(*argv) -> subprocess.CompletedProcess:
    """``simt-pto ARGV`` in this process, as its console script runs it (no interpreter per call): the exit code
    and what it printed."""
    from simt_pto.host.tools import cli
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as exit_:
            code = exit_.code
    return subprocess.CompletedProcess(["simt-pto", *argv], code, out.getvalue(), err.getvalue())


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    """``python -c code`` in a fresh interpreter with ``env`` added to the environment (what a process sees at
    ``import simt_pto``): the exit code and what it printed."""
    return subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **env), capture_output=True, text=True,
                          timeout=120)


# -- arrays of another library: producers that export one protocol only -------------------------------------------

class DLPackOnly:
    """Exports ``base``'s memory over DLPack and nothing else (no __array__, no __array_interface__)."""

    def __init__(self, base):
        self._base = base

    def __dlpack__(self, **kwargs):
        return self._base.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._base.__dlpack_device__()


class ArrayInterfaceOnly:
    """Exports ``base``'s memory through ``__array_interface__`` only."""

    def __init__(self, base):
        self._base = base

    @property
    def __array_interface__(self):
        return self._base.__array_interface__
