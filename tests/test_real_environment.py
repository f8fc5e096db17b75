"""A user's real environment: operands that share memory, calls from several threads, Ctrl-C in the middle of a
call. Each case writes nothing it should not, loses nothing, and leaves no thread of the library writing after
the call has returned or raised. Faults that would show only by chance are made deterministic with the launch's
fault hook (``simt_pto.kernels.a5.simt.fault_hook``)."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import simt_pto as pto
from conftest import TARGETS



# -- operands that share memory with what the call writes ------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_a_scatter_whose_idx_is_a_view_of_the_table_is_refused_before_any_write(target, coalesce):
    # The reproduction: idx = table[:2] holds [1, 0], src[0] is larger than the table. Read after the
    # first write, the second index would point past the end.
    table = np.zeros((8, 4) if coalesce == "row" else 32, np.int32)
    flat = table.reshape(-1)
    flat[:2] = [1, 0]
    idx = flat[:2]
    src = np.full((2, 4) if coalesce == "row" else 2, 1000, np.int32)
    before = table.copy()
    atomic = "add" if target != "cpu" else "none"
    with pytest.raises(pto.ConstraintError, match="table .*shares memory with idx"):
        pto.scatter(table, src, idx, coalesce=coalesce, atomic=atomic, conflict="default" if target == "a5" else "last",
                    target=target)
    assert np.array_equal(table, before)


@pytest.mark.parametrize("target", TARGETS)
def test_a_scatter_whose_src_overlaps_the_table_is_refused(target):
    table = np.arange(64, dtype=np.float32).reshape(8, 8)
    before = table.copy()
    with pytest.raises(pto.ConstraintError, match="table .*shares memory with src"):
        pto.scatter(table, table[2:4], np.array([0, 1], np.int32), coalesce="row", target=target)
    assert np.array_equal(table, before)


@pytest.mark.parametrize("target", TARGETS)
def test_operands_that_are_only_read_may_overlap(target):
    table = np.arange(16, dtype=np.int32)
    assert pto.gather(table, table[2:5], coalesce="elem", target=target).tolist() == [2, 3, 4]
    # disjoint parts of one buffer are separate operands
    buffer = np.zeros(24, np.int32)
    table, idx, src = buffer[:16], buffer[16:20], buffer[20:24]
    idx[:] = [3, 1, 4, 1]
    src[:] = [7, 8, 9, 10]
    pto.scatter(table, src, idx, coalesce="elem", target=target)
    assert table[[3, 4]].tolist() == [7, 9] and table[1] in (8, 10)


@pytest.mark.parametrize("target", TARGETS)
def test_tile_ops_refuse_a_tile_over_the_table_memory(target):
    table = np.zeros(64, np.float32)
    idx = pto.Tile.from_array(np.arange(8, dtype=np.int32)[None, :], 1, 8)
    dst = pto.Tile("float32", 1, 8)
    dst.data = table[:8]  # a tile whose storage is the GM table
    with pytest.raises(pto.ConstraintError, match="dst .*shares memory with table"):
        pto.mgather(dst, pto.GlobalTensor(table.reshape(8, 8)), pto.Tile.from_array(np.array([[0]], np.int32), 1, 8,
                    valid=(1, 1)), coalesce="row", target=target)
    src = pto.Tile("int32", 1, 8)
    src.data = table[8:16].view(np.int32)
    with pytest.raises(pto.ConstraintError, match="table .*shares memory with src"):
        pto.mscatter(pto.GlobalTensor(table.view(np.int32)), src, idx, coalesce="elem", target=target)
    assert not table.any()


def test_the_l1_scratch_may_not_overlap_the_table():
    table = np.arange(16 * 64, dtype=np.float16).reshape(16, 64)
    dst = pto.Tile("float16", 16, 16, loc="mat", blayout="col_major", slayout="row_major")
    idx = pto.GlobalTensor(np.zeros((16, 16), np.int32))
    scratch = pto.GlobalTensor(table.reshape(-1)[: 16 * 16])
    before = table.copy()
    with pytest.raises(pto.ConstraintError, match="scratch .*shares memory with table"):
        pto.mgather(dst, pto.GlobalTensor(table), idx, coalesce="elem", exec="simt", scratch=scratch, target="a5")
    assert np.array_equal(table, before)


# -- float16 / bfloat16 atomic Add from several threads ----------------------------------------------------------

@pytest.fixture
def slow_launches():
    """Every block range of a ``cpu`` launch starts 2 ms late: a wide window between a call's staging of its
    boundary words and their write-back, so that an unserialised boundary loses updates every time."""
    from simt_pto.kernels.a5 import simt
    simt.fault_hook = lambda point: time.sleep(0.002) if point == "range-start" else None
    yield
    simt.fault_hook = None


def _add_ones_from_threads(call, threads=8, calls=8):
    errors = []

    def work():
        try:
            for _ in range(calls):
                call()
        except BaseException as error:  # noqa: BLE001 - reported by the test
            errors.append(error)
    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=60)
    assert not errors, errors
    return threads * calls


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("where", ["inside", "at_the_end"])
def test_concurrent_16_bit_adds_lose_no_update_at_a_mid_word_boundary(dtype, where, slow_launches):
    np_dtype = pto.dtypes.resolve(dtype).numpy
    # An odd-length view at an odd offset: both ends are half words. "at_the_end": the view ends where its
    # allocation ends, so its last word must be staged rather than CASed in place.
    base = np.zeros(40 if where == "inside" else 39, np_dtype)
    view = base[1:39] if where == "inside" else base[1:]
    view = view[: view.size - (1 - view.size % 2)]  # odd length
    n = view.size
    total = _add_ones_from_threads(lambda: pto.scatter(view, np.ones(n, np_dtype), np.arange(n, dtype=np.int32),
                                                       coalesce="elem", atomic="add", conflict="default"))
    assert view.astype(np.float32).tolist() == [float(total)] * n
    assert base[0] == 0 and (where == "at_the_end" or not base[view.size + 1:].astype(np.float32).any())


def test_concurrent_16_bit_tile_op_adds_lose_no_update(slow_launches):
    base = np.zeros(33, np.float16)
    view = base[1:]  # 32 elements at an odd offset: the first word is shared with base[0]
    n = view.size
    idx = pto.Tile.from_array(np.arange(n, dtype=np.int32)[None, :], 1, n)
    src = pto.Tile.from_array(np.ones((1, n), np.float16), 1, n)
    one = pto.Tile.from_array(np.ones((1, 1), np.float16), 1, 16, valid=(1, 1))
    one_idx = pto.Tile.from_array(np.zeros((1, 1), np.int32), 1, 8, valid=(1, 1))

    def call():
        pto.mscatter(pto.GlobalTensor(view), src, idx, coalesce="elem", atomic="add", conflict="default")
        pto.mscatter(pto.GlobalTensor(view), one, one_idx, coalesce="elem", atomic="add")  # the (1, 1) fallback
    total = _add_ones_from_threads(call)
    assert view[0] == 2 * total and (view[1:] == total).all() and base[0] == 0


def test_a_staged_boundary_word_is_not_changed_outside_the_tensor():
    # A float16 view that ends at its allocation's end: the last word would reach 2 bytes past it; the staged
    # form must leave the neighbouring element (the one before the view) alone too.
    base = np.full(7, 5.0, np.float16)
    view = base[1:]
    pto.scatter(view, np.ones(6, np.float16), np.arange(6, dtype=np.int32), coalesce="elem", atomic="add",
                conflict="default")
    assert base.tolist() == [5.0] + [6.0] * 6


# -- Ctrl-C during a long call -----------------------------------------------------------------------------------

@pytest.fixture
def fault_hook():
    from simt_pto.kernels.a5 import simt
    yield simt
    simt.fault_hook = None


@pytest.mark.parametrize("scatter_form", ["atomic"], indirect=True)  # the form that runs on several threads
def test_an_interrupted_multicore_launch_leaves_no_thread_writing(fault_hook, monkeypatch, scatter_form):
    simt = fault_hook
    monkeypatch.setattr(simt, "multicore_workers", lambda: 2)
    table = np.zeros(1 << 18, np.int32)  # large enough for a launch on several threads (HostTuning's *_one_thread_* thresholds)
    idx = np.arange(table.size, dtype=np.int32)
    src = np.ones(table.size, np.int32)
    pto.scatter(table, src, idx, coalesce="elem", atomic="add", conflict="default")  # compiled, warm
    table[:] = 0
    interrupted = threading.Event()

    def hook(point):
        if point == "launch-wait":
            interrupted.set()
            raise KeyboardInterrupt
        if point == "range-start":  # the workers start only once the caller has been interrupted
            assert interrupted.wait(10)
            time.sleep(0.01)
    simt.fault_hook = hook
    with pytest.raises(KeyboardInterrupt):
        pto.scatter(table, src, idx, coalesce="elem", atomic="add", conflict="default")
    simt.fault_hook = None
    after = table.copy()
    time.sleep(0.3)
    assert np.array_equal(table, after), "a worker wrote the table after the call had raised"
    assert set(np.unique(after).tolist()) <= {0, 1}  # some block ranges ran, the rest never started
    table[:] = 0
    pto.scatter(table, src, idx, coalesce="elem", atomic="add", conflict="default")  # the next call works
    assert (table == 1).all()


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals go to the main thread")
@pytest.mark.parametrize("scatter_form", ["atomic"], indirect=True)  # the form that runs on several threads
def test_ctrl_c_while_a_launch_wakes_its_helpers_is_held_until_they_are_woken(fault_hook, monkeypatch,
                                                                              scatter_form, ctrl_c_handled):
    # A SIGINT that lands between counting a launch's helpers and waking them would leave one counted that never
    # runs (and the call waiting for it forever): it is held until every helper is woken, then raised.
    import signal
    simt = fault_hook
    monkeypatch.setattr(simt, "multicore_workers", lambda: 2)
    table = np.zeros(1 << 18, np.int32)
    idx = np.arange(table.size, dtype=np.int32)
    src = np.ones(table.size, np.int32)
    pto.scatter(table, src, idx, coalesce="elem", atomic="add", conflict="default")  # compiled, warm
    table[:] = 0
    signalled = []

    def hook(point):
        if point == "helper-wake" and not signalled:
            signal.raise_signal(signal.SIGINT)
            signalled.append("the interrupt was held")  # not reached if it is raised here
    simt.fault_hook = hook
    with pytest.raises(KeyboardInterrupt):
        pto.scatter(table, src, idx, coalesce="elem", atomic="add", conflict="default")
    simt.fault_hook = None
    assert signalled == ["the interrupt was held"]
    after = table.copy()
    time.sleep(0.3)
    assert np.array_equal(table, after), "a worker wrote the table after the call had raised"
    table[:] = 0
    pto.scatter(table, src, idx, coalesce="elem", atomic="add", conflict="default")  # the next call works
    assert (table == 1).all()


@pytest.mark.parametrize("target", ["a2a3", "cpu"])
def test_an_interrupted_whole_array_call_on_a_sequential_target_stops_writing(target, monkeypatch):
    # The sequential targets run tile after tile on the caller's thread: an interrupt between two tiles leaves
    # the tiles before it written and nothing after.
    # The interrupt lands as the third tile starts: on cpu as its tile op is made (tiling.tile_plan), on a2a3 as its
    # rows' loop is entered (the scatter kernels.a2a3.rows_scatterer gives).
    from simt_pto.host import tiling
    from simt_pto.kernels import a2a3
    table = np.zeros(4096, np.int32)
    idx = np.arange(table.size, dtype=np.int32)
    src = np.ones(table.size, np.int32)
    calls = {"n": 0}

    def interrupt_the_third():
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
    if target == "cpu":
        real_plan = tiling.tile_plan

        def interrupting(*args, **kwargs):
            interrupt_the_third()
            return real_plan(*args, **kwargs)
        monkeypatch.setattr(tiling, "tile_plan", interrupting)
    else:
        real_scatterer = a2a3.rows_scatterer

        def interrupting_scatterer(*args, **kwargs):
            scatter, dtype = real_scatterer(*args, **kwargs)

            def interrupting(*rows_args):
                interrupt_the_third()
                scatter(*rows_args)
            return interrupting, dtype
        monkeypatch.setattr(a2a3, "rows_scatterer", interrupting_scatterer)
    with pytest.raises(KeyboardInterrupt):
        pto.scatter(table, src, idx, coalesce="elem", target=target, tile_rows=512)
    assert calls["n"] == 3
    assert table[:1024].tolist() == [1] * 1024 and not table[1024:].any()
    monkeypatch.undo()
    pto.scatter(table, src * 2, idx, coalesce="elem", target=target, tile_rows=512)
    assert (table == 2).all()


def test_an_interrupted_simulated_launch_waits_for_the_simulators_threads(simulator_backend, monkeypatch):
    # Ctrl-C lands in numba-cuda's polling loop while a block's threads run: they are numba-cuda's and cannot be
    # stopped, so the call waits for them before the interrupt leaves it, and later blocks never start.
    from numba.cuda.simulator import kernel as simulator
    table = np.zeros(64, np.int32)
    idx = np.arange(64, dtype=np.int32)
    src = np.ones(64, np.int32)
    pto.scatter(table, src, idx, coalesce="elem", atomic="add", conflict="default")
    table[:] = 0
    run, start, started = simulator.BlockThread.run, simulator.BlockThread.start, []

    def slow_run(self):
        time.sleep(0.05)
        run(self)

    def interrupting_start(self):
        start(self)
        started.append(self)
        if len(started) == 4:  # the caller is interrupted while the first threads of block 0 run
            raise KeyboardInterrupt
    monkeypatch.setattr(simulator.BlockThread, "run", slow_run)
    monkeypatch.setattr(simulator.BlockThread, "start", interrupting_start)
    with pytest.raises(KeyboardInterrupt):
        pto.scatter(table, src, idx, coalesce="elem", atomic="add", conflict="default")
    after = table.copy()
    assert not any(t.is_alive() for t in started)
    time.sleep(0.2)
    assert np.array_equal(table, after), "a simulator thread wrote the table after the call had raised"
    monkeypatch.undo()
    table[:] = 0
    pto.scatter(table, src, idx, coalesce="elem", atomic="add", conflict="default")
    assert (table == 1).all()
