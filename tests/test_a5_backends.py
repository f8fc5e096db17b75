"""The A5 backends: the ``multicore`` backend runs the kernels compiled for the CPU on several threads with exact
atomics; backend selection; concurrent callers on every backend (the simulator serialised).

The oracles are numpy one-liners over integer data (``np.bincount``, a serial Python loop for Last), so a
wrong count, a lost update or a wrong winner shows exactly.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from conftest import run_python

import simt_pto as pto
from simt_pto.kernels.a5 import simt


@pytest.fixture
def multicore_backend():
    previous = pto.a5_backend()
    pto.set_a5_backend("multicore")
    try:
        yield "multicore"
    finally:
        pto.set_a5_backend(previous)


def serial_last(table, src, idx):
    """``for i in range(N): table[idx[i]] = src[i]``: the sequential order Conflict::Last must match."""
    out = table.copy()
    for i, slot in enumerate(idx.tolist()):
        out[slot] = src[i]
    return out


# -- selection ---------------------------------------------------------------------------------------------

def test_multicore_backend_is_always_available():
    assert "multicore" in pto.a5_backends()


def test_auto_is_multicore_without_a_gpu(monkeypatch):
    from simt_pto import backend
    monkeypatch.setattr(backend, "gpu_present", lambda: False)
    previous = pto.a5_backend()
    try:
        assert pto.set_a5_backend("auto") == "multicore"
        assert pto.a5_backend() == "multicore"
    finally:
        pto.set_a5_backend(previous)


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="unknown choice 'tpu'; expected one of auto, gpu, multicore, simulator"):
        pto.set_a5_backend("tpu")


def test_environment_variable_chooses_the_backend():
    out = run_python("import simt_pto as pto; print(pto.a5_backend())", SIMT_PTO_A5_BACKEND="multicore")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "multicore"


def test_multicore_backend_never_imports_numba_cuda():
    code = textwrap.dedent("""
        import sys, numpy as np, simt_pto as pto
        pto.set_a5_backend("multicore")
        t = np.arange(64, dtype=np.float32)
        assert (pto.gather(t, np.array([3, 1], np.int32), coalesce="elem") == [3, 1]).all()
        print("numba.cuda" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_a_cpu_kernel_is_typed_without_the_one_lane_branches():
    """A span's width is a constant of each backend family (``SPAN_LANES``: 32 on the CPU, 1 on CUDA), which Numba's
    dead-branch pruning reads before typing: a CPU Row gather's typed IR holds the warp's contiguous copy of
    ``copy_row_segment`` and none of a GPU lane's loads issued four ahead (typed and lowered, they cost compile time
    only, for LLVM to drop)."""
    import inspect

    import numba

    from simt_pto.host.tools import kernel_report
    from simt_pto.kernels.a5 import device

    assert simt.namespace("cpu")["SPAN_LANES"] == 32
    spec = kernel_report.launch_of(kernel_report.build_plan("mgather", "row", dtype="float32"))
    signature = kernel_report.signature(spec)
    dispatcher = numba.njit(signature, nogil=True)(simt.bound_source(spec.kernel, spec.policy, "cpu"))
    typed = dispatcher.overloads[dispatcher.signatures[0]].type_annotation
    source, first = inspect.getsourcelines(device.copy_row_segment)
    path = inspect.getsourcefile(device.copy_row_segment)
    lines = {stmt.loc.line for block in typed.blocks.values() for stmt in block.body if stmt.loc.filename == path}
    one_lane = {first + i for i, text in enumerate(source) if "v3 = src[" in text or "v1 = src[" in text}
    warp_run = {first + i for i, text in enumerate(source) if "copy_run(dst" in text}
    assert one_lane and warp_run
    assert warp_run <= lines, "the CPU's contiguous copy is missing from the typed kernel"
    assert not lines & one_lane, f"one-lane lines {sorted(lines & one_lane)} of copy_row_segment were typed for the CPU"


# -- the multicore backend: blocks on several threads, exact atomics ----------------------------------------------------

@pytest.mark.skipif(simt.multicore_workers() < 2, reason="NUMBA_NUM_THREADS is 1: one worker thread")
def test_multicore_backend_runs_blocks_on_several_threads_at_once(multicore_backend):
    rng = np.random.default_rng(3)
    table = rng.standard_normal(1 << 20).astype(np.float32)
    # 8M indices: a call of several milliseconds even on a fast host, long enough for a helper woken late to overlap
    idx = rng.integers(0, table.size, 1 << 23, dtype=np.int32)
    pto.gather(table, idx, coalesce="elem")  # compile outside the trace
    for _attempt in range(5):
        with simt.trace_multicore_launches() as ranges:
            out = pto.gather(table, idx, coalesce="elem")
        np.testing.assert_array_equal(out, table[idx])
        assert sum(r[3] for r in ranges) == -(-idx.size // 4096)  # every block ran once
        threads = {r[0] for r in ranges}
        overlap = any(a[0] != b[0] and a[1] < b[2] and b[1] < a[2] for a in ranges for b in ranges)
        if len(threads) >= 2 and overlap:
            return
    pytest.fail(f"block ranges never ran on two threads at once: {ranges}")


def test_a_launchs_caller_polls_for_its_helpers_end_without_the_gil():
    """The caller, out of block ranges, polls the launch's flag in compiled code without the GIL before it sleeps:
    it sees another thread clear the flag while it polls (a Python thread, which runs only if the poll has let the
    GIL go), and gives up after its polls when nothing clears it."""
    running = np.ones(1, np.int64)
    assert not simt._cleared_within(running, 1000)  # nothing clears it: False once the polls are spent
    running[0] = 0
    assert simt._cleared_within(running, 1)
    running[0] = 1
    cleared = threading.Event()

    def clear():  # needs the GIL: it runs only because the poll has let it go
        running[0] = 0
        cleared.set()

    helper = threading.Timer(0.01, clear)
    helper.start()
    try:
        assert simt._cleared_within(running, 1 << 28)  # (about a second of polls: the clear comes after 10 ms)
    finally:
        helper.join()
    assert cleared.is_set()


def test_a_launch_whose_helper_outlasts_the_callers_polls_still_waits_for_it(multicore_backend, monkeypatch):
    """Whether the caller sleeps at once (no polls) or once its polls run out (the helper held 50 ms past them),
    the call returns only when the helper's ranges are done: the results are whole."""
    if simt.multicore_workers() < 2:
        pytest.skip("NUMBA_NUM_THREADS is 1: no helper thread")
    rng = np.random.default_rng(5)
    table = rng.standard_normal((4096, 64)).astype(np.float32)
    idx = rng.integers(0, table.shape[0], 1 << 16, dtype=np.int32)
    want = table[idx]
    for polls in (0, simt.HELPER_WAIT_POLLS):
        monkeypatch.setattr(simt, "HELPER_WAIT_POLLS", polls)
        slow = threading.Event()

        def hold_the_helper(point):  # the helper's ranges start late: the caller is out of ranges first
            if point == "range-start" and threading.current_thread() is not threading.main_thread():
                slow.wait(0.05)

        monkeypatch.setattr(simt, "fault_hook", hold_the_helper)
        for _ in range(3):
            np.testing.assert_array_equal(pto.gather(table, idx, coalesce="row"), want)
        monkeypatch.setattr(simt, "fault_hook", None)


def _all_helpers_idle(timeout: float = 5.0) -> bool:
    """Whether every helper thread is back on the idle list within ``timeout`` seconds."""
    pool = simt._helper_pool()
    deadline = time.monotonic() + timeout
    while len(pool._idle) < simt.multicore_workers() - 1:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


@pytest.fixture
def early_wakes(multicore_backend, monkeypatch):
    """``(woken, left)``: per early wake of the test's calls, the helpers it woke, and those no launch took from it
    (handed nothing, back to the idle list)."""
    if simt.multicore_workers() < 2:
        pytest.skip("NUMBA_NUM_THREADS is 1: no helper thread")
    woken, left = [], []
    wake, release = simt.EarlyWake.wake, simt.EarlyWake.release

    def recorded_wake(self):
        wake(self)
        woken.append(len(self.helpers))

    def recorded_release(self):
        left.append(len(self.helpers))
        release(self)
    monkeypatch.setattr(simt.EarlyWake, "wake", recorded_wake)
    monkeypatch.setattr(simt.EarlyWake, "release", recorded_release)
    return woken, left


def test_a_repeated_launch_on_several_threads_wakes_its_helpers_as_the_call_starts(early_wakes):
    """A kept launch of several threads wakes its helpers before it makes the launch, and the launch takes them:
    they run block ranges, and the results are whole."""
    woken, left = early_wakes
    rng = np.random.default_rng(6)
    table = rng.standard_normal((4096, 64)).astype(np.float32)
    idx = rng.integers(0, table.shape[0], 1 << 15, dtype=np.int32)
    np.testing.assert_array_equal(pto.gather(table, idx, coalesce="row"), table[idx])  # the first call: planned
    assert woken == []  # (the full path wakes its helpers as its launch starts)
    for _attempt in range(20):
        assert _all_helpers_idle()
        woken.clear(), left.clear()
        with simt.trace_multicore_launches() as ranges:
            np.testing.assert_array_equal(pto.gather(table, idx, coalesce="row"), table[idx])
        assert woken == [simt.multicore_workers() - 1] and left == [0]  # woken early, all taken by the launch
        if {r[0] for r in ranges} - {threading.get_ident()}:
            return  # a helper ran ranges of the launch (it may find none left, where the caller ran them all)
    pytest.fail("no helper woken early ran a block range in 20 calls")


def test_a_repeated_launch_wakes_its_helpers_as_it_starts_where_the_tuning_says_so(early_wakes):
    """``HostTuning.early_wake_helpers = 0``: the kept launch wakes its helpers as its launch starts, none early;
    the results are whole either way."""
    from simt_pto.host import tuning
    woken, _left = early_wakes
    rng = np.random.default_rng(7)
    table = rng.standard_normal((4096, 64)).astype(np.float32)
    idx = rng.integers(0, table.shape[0], 1 << 15, dtype=np.int32)
    with tuning.tuned(early_wake_helpers=0):
        for _ in range(3):  # planned, then kept twice
            np.testing.assert_array_equal(pto.gather(table, idx, coalesce="row"), table[idx])
        assert woken == []
    for _ in range(2):  # planned again under the table in force, then kept
        np.testing.assert_array_equal(pto.gather(table, idx, coalesce="row"), table[idx])
    assert woken == [simt.multicore_workers() - 1]


def test_helpers_woken_for_a_call_that_takes_the_full_path_go_back_idle(early_wakes):
    """A repeated Row scatter whose source is the table's own memory is sent to the full path (which refuses it)
    after its helpers were woken: they are handed nothing, go back to the idle list, and the next call runs."""
    woken, left = early_wakes
    rng = np.random.default_rng(8)
    table = rng.integers(0, 100, (1 << 15, 64)).astype(np.int32)  # 8 MB of rows: a launch on several threads
    idx = rng.permutation(table.shape[0]).astype(np.int32)
    src = rng.integers(0, 100, table.shape).astype(np.int32)
    for _ in range(2):  # planned, then kept
        pto.scatter(table, src, idx, coalesce="row")
    woken.clear(), left.clear()
    with pytest.raises(ValueError, match="shares memory"):
        pto.scatter(table, table, idx, coalesce="row")  # (of the kept signature)
    assert woken == [simt.multicore_workers() - 1] and left == woken  # woken, then handed back
    assert _all_helpers_idle()
    want = table.copy()
    want[idx] = src
    pto.scatter(table, src, idx, coalesce="row")
    np.testing.assert_array_equal(table, want)


@pytest.mark.parametrize("at", ["its early wake", "the launch's hand-off"])
def test_an_interrupt_before_a_launch_takes_its_early_woken_helpers_leaves_them_idle(early_wakes, monkeypatch, at):
    """KeyboardInterrupt raised as the call wakes its helper early (it is not woken), or as the launch is about to
    take the helper woken early (it is handed nothing): the call raises it, the helper goes back to the idle list,
    and the next call is whole."""
    woken, left = early_wakes
    rng = np.random.default_rng(9)
    table = rng.standard_normal((4096, 64)).astype(np.float32)
    idx = rng.integers(0, table.shape[0], 1 << 15, dtype=np.int32)
    for _ in range(2):  # planned, then kept
        pto.gather(table, idx, coalesce="row")
    woken.clear(), left.clear()
    wakes = []

    def interrupt(point):
        if point == "helper-wake":
            wakes.append(point)
            if len(wakes) == (1 if at == "its early wake" else 2):
                raise KeyboardInterrupt
    monkeypatch.setattr(simt, "fault_hook", interrupt)
    with simt.trace_multicore_launches() as ranges, pytest.raises(KeyboardInterrupt):
        pto.gather(table, idx, coalesce="row")
    monkeypatch.setattr(simt, "fault_hook", None)
    assert ranges == []  # no block range ran
    assert left == ([0] if at == "its early wake" else [simt.multicore_workers() - 1])  # those woken: handed back
    assert _all_helpers_idle()
    np.testing.assert_array_equal(pto.gather(table, idx, coalesce="row"), table[idx])


@pytest.mark.parametrize("coalesce", ["elem", "row"])
@pytest.mark.parametrize("dtype", ["int32", "uint32"])
def test_integer_add_is_exact_under_heavy_contention(multicore_backend, coalesce, dtype):
    rng = np.random.default_rng(7)
    slots, n = 16, 1 << 22  # ~10 ms per call: the worker threads overlap
    idx = rng.integers(0, slots, n, dtype=np.int32)
    if coalesce == "elem":
        src = rng.integers(0, 1000, n).astype(dtype)
        want = np.bincount(idx, weights=src.astype(np.float64), minlength=slots).astype(dtype)
    else:
        src = rng.integers(0, 1000, (n // 64, 64)).astype(dtype)
        idx = idx[: n // 64]
        want = np.zeros((slots, 64), np.int64)
        np.add.at(want, idx, src.astype(np.int64))
        want = want.astype(dtype)
    for _run in range(3):
        table = np.zeros(want.shape, dtype)
        pto.scatter(table, src, idx, coalesce=coalesce, atomic="add")
        np.testing.assert_array_equal(table, want)


@pytest.mark.parametrize("atomic, reduce", [("max", np.maximum), ("min", np.minimum)])
@pytest.mark.parametrize("dtype", ["int32", "uint32", "float32"])
def test_max_min_are_exact_under_heavy_contention(multicore_backend, atomic, reduce, dtype):
    rng = np.random.default_rng(11)
    slots, n = 8, 1 << 22
    idx = rng.integers(0, slots, n, dtype=np.int32)
    src = (rng.integers(-(1 << 20), 1 << 20, n) if dtype != "uint32" else rng.integers(0, 1 << 31, n)).astype(dtype)
    if dtype == "uint32":
        start = np.full(slots, 0xFFFFFFFF if atomic == "min" else 0, dtype=np.uint32)
    else:
        start = np.full(slots, (1 << 21) * (1 if atomic == "min" else -1)).astype(dtype)
    want = start.copy()
    reduce.at(want, idx, src)
    for _run in range(3):
        table = start.copy()
        pto.scatter(table, src, idx, coalesce="elem", atomic=atomic)
        np.testing.assert_array_equal(table, want)


@pytest.mark.parametrize("dtype, per_slot", [("float16", 1024), ("bfloat16", 128)])
def test_half_cas_add_gives_the_sequential_bits_where_order_cannot_matter(multicore_backend, dtype, per_slot):
    """Adding 1.0 ``per_slot`` times is exact in the element type whatever the order (every partial sum is a
    small integer), so the CAS loop must give the sequential sum's bits on every run."""
    d = pto.dtypes.resolve(dtype)
    slots = 64
    idx = np.repeat(np.arange(slots, dtype=np.int32), per_slot)
    np.random.default_rng(5).shuffle(idx)
    src = np.ones(idx.size, dtype=d.numpy)
    want = np.full(slots, per_slot, dtype=np.float32).astype(d.numpy)
    for _run in range(3):
        table = np.zeros(slots, dtype=d.numpy)
        pto.scatter(table, src, idx, coalesce="elem", atomic="add")
        np.testing.assert_array_equal(table.view(d.bits), want.view(d.bits))


@pytest.mark.parametrize("coalesce", ["elem", "row"])
def test_last_owner_path_is_the_serial_result_on_every_run(multicore_backend, coalesce):
    rng = np.random.default_rng(13)
    if coalesce == "elem":
        table = np.full(4096, -1.0, np.float32)
        idx = rng.integers(0, table.size, 1 << 17, dtype=np.int32)
        src = np.arange(idx.size, dtype=np.float32)
    else:
        table = np.full((512, 32), -1.0, np.float32)
        idx = rng.integers(0, table.shape[0], 8192, dtype=np.int32)
        src = np.arange(idx.size * 32, dtype=np.float32).reshape(idx.size, 32)
    want = serial_last(table, src, idx)
    for _run in range(3):
        got = table.copy()
        pto.scatter(got, src, idx, coalesce=coalesce, conflict="last", last_path="owner")
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


# -- concurrent callers ---------------------------------------------------------------------------------------

def _concurrent_calls(n_calls, size, workers=8):
    """``n_calls`` whole-array gathers and atomic scatter-adds from ``workers`` Python threads at once, each on
    its own output; returns the number of wrong results."""
    rng = np.random.default_rng(17)
    table = rng.integers(-1000, 1000, size).astype(np.float32)
    cases = [rng.integers(0, size, size // 2, dtype=np.int32) for _ in range(n_calls)]
    barrier = threading.Barrier(min(workers, n_calls))

    def call(k):
        idx = cases[k]
        if k < barrier.parties:
            barrier.wait()
        if k % 2:
            return np.array_equal(pto.gather(table, idx, coalesce="elem"), table[idx])
        out = np.zeros(size, np.int32)
        pto.scatter(out, np.ones(idx.size, np.int32), idx, coalesce="elem", atomic="add")
        return np.array_equal(out, np.bincount(idx, minlength=size).astype(np.int32))

    with ThreadPoolExecutor(workers) as pool:
        return sum(not ok for ok in pool.map(call, range(n_calls)))


def test_concurrent_callers_on_the_cpu_backend(multicore_backend):
    assert _concurrent_calls(32, 1 << 16) == 0


def test_concurrent_callers_on_the_simulator(simulator_backend):
    assert _concurrent_calls(6, 64, workers=3) == 0


@pytest.mark.parametrize("layer", ["workqueue", "default"])
def test_concurrent_callers_under_each_numba_threading_layer(layer):
    code = textwrap.dedent("""
        import sys
        sys.path.insert(0, sys.argv[1])
        import simt_pto as pto
        from test_a5_backends import _concurrent_calls
        pto.set_a5_backend("multicore")
        print(_concurrent_calls(24, 1 << 15))
    """)
    env = dict(os.environ)
    env.pop("NUMBA_THREADING_LAYER", None)
    if layer != "default":
        env["NUMBA_THREADING_LAYER"] = layer
    out = subprocess.run([sys.executable, "-c", code, os.path.dirname(__file__)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "0"
