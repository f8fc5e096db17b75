"""A compile of the package's kernels survives what lands in the middle of it (issue 21: 3, "Ctrl-C during a first
compile", and 4d, "Fork during a compile"); simt_pto.kernels.cache.

Both faults depend on an exact moment; the tests make the moment happen: SIGINT is raised from inside Numba's type
inference, and a thread holds Numba's compiler lock while the main thread forks.
"""
from __future__ import annotations

import functools
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba.core import typed_passes

import simt_pto  # noqa: F401
from simt_pto import interrupts
from simt_pto.enums import ElementFormat, IndexRule, ScatterAtomicOp
from simt_pto.kernels import cache, cube_l1_walk, index_policy, softfloat, store
from simt_pto.kernels.a2a3 import mgather, mscatter, walk
from simt_pto.kernels.a5 import simt
from simt_pto.launch_spec import KernelPolicy



def _signal_in_type_inference(monkeypatch, signum) -> list:
    """The next compile receives ``signum`` from inside Numba's type inference pass, once; the list names the
    function whose compile it landed in."""
    run_pass = typed_passes.NopythonTypeInference.run_pass
    fired = []

    def interrupted(self, state):
        if not fired:
            fired.append(state.func_id.func_name)
            signal.raise_signal(signum)
        return run_pass(self, state)

    monkeypatch.setattr(typed_passes.NopythonTypeInference, "run_pass", interrupted)
    return fired


@pytest.fixture
def ctrl_c_in_type_inference(monkeypatch, ctrl_c_handled):
    """The next compile receives SIGINT (a Ctrl-C) from inside Numba's type inference pass, once."""
    return _signal_in_type_inference(monkeypatch, signal.SIGINT)


def _uncompiled_gather_loop():
    """``(loop, dst, args)``: an A2/A3 Row gather loop whose first compile is the caller's (a dispatcher of its own,
    not loaded from the disk cache), and the arguments of rows 3 and 0 of a 4 x 4 table into ``dst``."""
    loop = mgather._gather_loop.__wrapped__(walk.row_nd, IndexRule.MASK, False)
    loop._cache.disable()
    table = np.arange(16, dtype=np.uint32)
    dst = np.zeros(8, np.uint32)
    return loop, dst, (dst, 4, table, np.array([3, 0], np.uint32), 1, 2, 4, 4, 4)


def test_ctrl_c_during_a_first_compile_lets_the_compile_finish(ctrl_c_in_type_inference):
    """Numba's compiler, cut by KeyboardInterrupt, can leave its typing registries half-loaded (every later call then
    fails with a TypingError or "generator raised StopIteration"). The compile of an A2/A3 loop completes, then the
    interrupt reaches the caller, and the next call runs the compiled loop."""
    loop, dst, args = _uncompiled_gather_loop()
    handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        loop(*args)
    assert ctrl_c_in_type_inference == ["mgather_row_nd"]       # the interrupt landed inside the compile
    assert len(loop.signatures) == 1                          # which completed
    assert signal.getsignal(signal.SIGINT) is handler         # the caller's handler is back
    loop(*args)
    assert dst.tolist() == [12, 13, 14, 15, 0, 1, 2, 3]
    assert sum(loop.stats.cache_misses.values()) == 1         # compiled once


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="SIGALRM is POSIX")
def test_a_timeout_during_a_first_compile_lets_the_compile_finish(monkeypatch):
    """A timeout's SIGALRM handler that raises (as timeout decorators and pytest-timeout's signal method do) cut the
    compile as Ctrl-C did: a later ``RuntimeError: generator raised StopIteration``, or a crash in llvmlite. The
    compile completes, then the handler runs and its TimeoutError reaches the caller; the next call runs the loop."""
    def timed_out(signum, frame):
        raise TimeoutError("the call took too long")

    fired = _signal_in_type_inference(monkeypatch, signal.SIGALRM)
    previous = signal.signal(signal.SIGALRM, timed_out)
    try:
        loop, dst, args = _uncompiled_gather_loop()
        with pytest.raises(TimeoutError, match="took too long"):
            loop(*args)
        assert fired == ["mgather_row_nd"] and len(loop.signatures) == 1
        assert signal.getsignal(signal.SIGALRM) is timed_out
        loop(*args)
        assert dst.tolist() == [12, 13, 14, 15, 0, 1, 2, 3]
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_a_compile_in_another_thread_leaves_sigint_alone():
    """Only the main thread takes signals: a compile in a worker thread neither installs nor needs a handler."""
    import threading
    seen = []

    @cache.njit
    def plus_one(x):
        return x + 1

    def compile_in_worker():
        seen.append((plus_one(1), signal.getsignal(signal.SIGINT)))

    handler = signal.getsignal(signal.SIGINT)
    worker = threading.Thread(target=compile_in_worker)
    worker.start()
    worker.join(timeout=120)
    assert seen == [(2, handler)]


@pytest.mark.parametrize("collector_on", [True, False], ids=["collector-on", "collector-off"])
def test_a_compile_of_ours_pauses_the_garbage_collector_and_leaves_it_as_it_was(monkeypatch, collector_on):
    """The cyclic collector is off while one of our dispatchers compiles (seen from inside Numba's type inference),
    on again after it if it was on, and still off if the caller had turned it off."""
    import gc
    run_pass = typed_passes.NopythonTypeInference.run_pass
    seen = []

    def watching(self, state):
        seen.append(gc.isenabled())
        return run_pass(self, state)

    monkeypatch.setattr(typed_passes.NopythonTypeInference, "run_pass", watching)

    @cache.njit
    def plus_two(x):
        return x + 2

    was = gc.isenabled()
    (gc.enable if collector_on else gc.disable)()
    try:
        assert plus_two(1) == 3
        after = gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False] and after is collector_on


def _guarded(dispatcher) -> bool:
    compile_for_args = dispatcher.__dict__.get("_compile_for_args")
    return isinstance(compile_for_args, functools.partial) and compile_for_args.func is interrupts.completed


def test_every_jitted_entry_point_is_guarded():
    """The package's dispatchers are all made by simt_pto.kernels.cache (a plain ``numba.njit`` would compile
    without the guard)."""
    identity, store_op, native = IndexRule.IDENTITY, ScatterAtomicOp.NONE, ElementFormat.NATIVE
    dispatchers = [
        mgather.gather_loop(walk.row_nd, identity), mgather.gather_loop(walk.elem_nd, identity),
        mgather.gather_loop(walk.row_nz, identity, True), mgather.gather_loop(walk.elem_nz, identity), walk.nz_gm_offset,
        mscatter.scatter_loop(walk.row_nd, identity, store_op, native),
        mscatter.scatter_loop(walk.elem_nd, identity, ScatterAtomicOp.ADD, ElementFormat.F16),
        mscatter.scatter_loop(walk.row_nz, identity, store_op, native),
        mscatter.scatter_loop(walk.elem_nz, identity, ScatterAtomicOp.MAX, native),
        cube_l1_walk.l1_row_loop(IndexRule.IDENTITY, False), cube_l1_walk.l1_elem_loop(IndexRule.IDENTITY),
        index_policy.remap_index, index_policy.remap_array, softfloat.add_nonfinite_bits, softfloat.add_bits,
        store.sequential_store(ScatterAtomicOp.ADD, ElementFormat.NATIVE),
        simt.compile_kernel("simt_mgather_elem_kernel", KernelPolicy(rule=IndexRule.IDENTITY), "cpu"),
        simt.namespace("cpu")["store_max_f32"],
    ]
    assert [d for d in dispatchers if not _guarded(d)] == []


FORK_HELPERS = textwrap.dedent("""
    def held_elsewhere(lock):
        # another thread takes ``lock`` and keeps it 0.3 s (a compile, a first use); returned once it holds it
        import threading, time
        holding = threading.Event()

        def hold():
            with lock:
                holding.set()
                time.sleep(0.3)
        worker = threading.Thread(target=hold)
        worker.start()
        holding.wait()
        return worker

    def wait_for_child(pid, hung):
        # the forked child's exit code; past 60 s it is killed and the script exits saying ``hung``
        import os, sys, time
        deadline = time.monotonic() + 60
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                sys.exit(hung)
            time.sleep(0.02)
""")
"""What the fork scripts below hold a lock in another thread and wait for their child with (prepended to each)."""

FORK_DURING_COMPILE = FORK_HELPERS + textwrap.dedent("""
    import os, sys, threading, time
    import simt_pto.kernels                     # the first kernel use: installs the at-fork handlers
    from numba import njit
    from numba.core.compiler_lock import global_compiler_lock

    worker = held_elsewhere(global_compiler_lock)  # a compile running in another thread holds the compiler lock
    pid = os.fork()                             # while the lock is held
    if pid == 0:
        @njit
        def plus_one(x):
            return x + 1
        os._exit(0 if plus_one(1) == 2 else 3)
    status = wait_for_child(pid, "the child hung at its first compile")
    worker.join()
    sys.exit(status)
""")


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="os.fork is POSIX only")
def test_fork_during_a_compile_gives_a_child_that_compiles():
    """The child of a fork inherits Numba's compiler lock in the state the parent's threads left it: held by a thread
    the child does not have, its first compile would wait forever. The fork waits for the compile instead."""
    p = subprocess.run([sys.executable, "-c", FORK_DURING_COMPILE], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


FORK_DURING_FIRST_USE = FORK_HELPERS + textwrap.dedent("""
    import os, sys, threading, time
    import numpy as np
    import simt_pto as pto
    from simt_pto.backend import first_use

    worker = held_elsewhere(first_use)          # another thread's first use holds the lock while it loads
    assert "simt_pto.kernels" not in sys.modules  # (the kernels' own fork guard is not installed yet)
    started = time.monotonic()
    pid = os.fork()                             # while the lock is held
    if pid == 0:
        table = np.arange(12, dtype=np.float32).reshape(6, 2)
        rows = np.array([5, 0, 3], dtype=np.int32)
        os._exit(0 if np.array_equal(pto.gather(table, rows, target="a2a3"), table[rows]) else 3)
    waited = time.monotonic() - started
    status = wait_for_child(pid, "the child hung at its first use")
    worker.join()
    assert waited > 0.1, waited                 # the fork waited for the other thread's first use
    sys.exit(status)
""")


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="os.fork is POSIX only")
def test_fork_during_another_threads_first_use_gives_a_child_that_calls():
    """A fork made while another thread makes simt_pto's first use (it holds ``first_use`` while it loads Numba and
    the kernels), before the kernels' fork guard exists: the fork waits for it, and the child's own first call runs.
    (The child inherited the lock held by a thread it does not have, and its first call waited forever.)"""
    p = subprocess.run([sys.executable, "-c", FORK_DURING_FIRST_USE], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


CTRL_C_IN_FIRST_IMPORT = textwrap.dedent("""
    import importlib.abc, signal, sys
    import numpy as np
    import simt_pto as pto
    assert "numba" not in sys.modules                      # the first call imports Numba

    class CtrlCInside(importlib.abc.MetaPathFinder):      # SIGINT arrives while Numba's modules are being imported
        fired = []
        def find_spec(self, name, path, target=None):
            if name == sys.argv[2] and not self.fired:
                self.fired.append(name)
                signal.raise_signal(signal.SIGINT)         # (the handler runs at once: KeyboardInterrupt, here)
            return None

    sys.meta_path.insert(0, CtrlCInside())
    table, idx = np.arange(12, dtype=np.float32).reshape(3, 4), np.array([2, 0], np.int32)
    try:
        pto.gather(table, idx, target=sys.argv[1])
        print("not interrupted")
    except KeyboardInterrupt:
        print("interrupted in", CtrlCInside.fired)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    print(pto.gather(table, idx, target=sys.argv[1]).tolist())
""")


@pytest.mark.parametrize("target", ["a2a3", "a5"])
@pytest.mark.parametrize("module", ["numba.core.types", "numba.core.typing.templates"])
def test_ctrl_c_during_the_first_import_of_numba_leaves_a_process_that_works(target, module, ctrl_c_handled):
    """A first call imports Numba (``import simt_pto`` does not). Ctrl-C in the middle of that import left
    half-initialised modules in ``sys.modules``: every later call of the process failed (ImportError, AttributeError,
    KeyError from a registration made twice). The import completes, then the interrupt reaches the caller, and the
    next call gives the rows."""
    p = subprocess.run([sys.executable, "-c", CTRL_C_IN_FIRST_IMPORT, target, module], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [f"interrupted in ['{module}']", "[[8.0, 9.0, 10.0, 11.0], [0.0, 1.0, 2.0, 3.0]]"]
