"""Atomic Add / Max / Min from several threads into one table, on any mix of targets and A5 backends, lose no update
(``kernels/writers.py``): every writer of a host table registers it for as long as it writes it, and a writer that
updates it with plain read-modify-writes (an A2/A3 Add loop, a launch on the CUDA simulator, which copies the table in
and back out, a mid-word float16 Add's staged boundary element, a non-contiguous table's contiguous copy written back)
runs as the only writer of its memory.

Where the race is a matter of timing (an A2/A3 loop beside an A5 kernel on a 2-core machine), the tests widen it:
the A2/A3 loop is replaced by one that loads the table, waits for the other writer, then adds and stores, so the
other writer's update is lost unless the registry holds it back. The oracles are numpy's ``add.at`` /
``maximum.at`` / ``minimum.at`` over every update.
"""
from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import simt_pto as pto

from conftest import supports

WINDOW_S = 0.5
"""How long a widened A2/A3 loop (or a staged boundary element) waits, loaded, for the other writer to finish."""


def tile_of(values, dtype=None) -> pto.Tile:
    """A ``[1, n]`` RowMajor tile holding ``values`` (its columns padded to the 32-byte rule)."""
    values = np.asarray(values, dtype)
    per_block = 32 // values.itemsize
    tile = pto.Tile(values.dtype, 1, -(-values.size // per_block) * per_block, valid=(1, values.size))
    tile.data[:values.size] = values
    return tile


def tile_scatter(table, idx, src, atomic, target):
    """A tile op: one MSCATTER Elem of ``src`` through ``idx`` into the flat ``table``."""
    pto.mscatter(pto.GlobalTensor(table.reshape(-1)), tile_of(src), tile_of(idx, np.int32), coalesce="elem",
                 atomic=atomic, target=target)


def whole_scatter(table, idx, src, atomic, target):
    """A whole-array scatter (``table`` may be a non-contiguous view)."""
    pto.scatter(table, src, idx, coalesce="elem", atomic=atomic, target=target)


def scalar_scatters(table, idx, src, atomic, target):
    """``(1, 1)`` tile ops, one per update (the A5 scalar fallback)."""
    flat = pto.GlobalTensor(table.reshape(-1))
    for i, v in zip(idx.tolist(), src.tolist()):
        pto.mscatter(flat, tile_of([v], src.dtype), tile_of([i], np.int32), coalesce="elem", atomic=atomic,
                     target=target)


CALLS = {"tile": tile_scatter, "whole": whole_scatter, "scalar": scalar_scatters}
ORACLES = {"add": np.add, "max": np.maximum, "min": np.minimum}


def assert_no_writer_registered():
    from simt_pto.kernels import writers
    assert writers.table_writers.busy() == 0


pytestmark = pytest.mark.usefixtures("threads_switch_often")  # (conftest: calls interleave)


def run_threads(*work) -> None:
    """Run each of ``work`` on a thread of its own, started together; raise the first error."""
    barrier, errors = threading.Barrier(len(work), timeout=60), []

    def run(job):
        try:
            barrier.wait()
            job()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
    threads = [threading.Thread(target=run, args=(job,)) for job in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "a writer thread is still running (a deadlock?)"
    if errors:
        raise errors[0]


class WidenedA2A3Loop:
    """The A2/A3 scatter loop as a read-modify-write with a wide window: it loads the whole table, says so
    (``loaded``), waits up to ``window`` seconds for ``other_done``, then adds into what it loaded and stores it
    all back. ``other_done_inside``: whether the other writer finished inside the window."""

    def __init__(self, monkeypatch, fault=None, window=WINDOW_S):
        from simt_pto.kernels.a2a3 import mscatter
        self.loaded, self.other_done, self.fault = threading.Event(), threading.Event(), fault
        self.other_done_inside = None
        real_loop = mscatter.scatter_loop

        def widened(*policy):
            loop = real_loop(*policy)

            def run(tile, tile_rs, table, *rest):
                loaded = table.copy()
                self.loaded.set()
                self.other_done_inside = self.other_done.wait(window)
                if self.fault is not None:
                    raise self.fault
                loop(tile, tile_rs, loaded, *rest)
                table[...] = loaded
            return run
        monkeypatch.setattr(mscatter, "scatter_loop", widened)
        from simt_pto.plan import CallCache
        CallCache.clear_all()  # the kept launches bound the real loop: the next calls bind this one

    def other(self, job):
        """``job``, the other writer: started once the A2/A3 loop has loaded the table."""
        def run():
            assert self.loaded.wait(30)
            try:
                job()
            finally:
                self.other_done.set()
        return run


# -- an A2/A3 Add loop is the only writer of its table while it runs ---------------------------------------------

@pytest.mark.parametrize("a2a3_call, a5_call", [("tile", "tile"), ("whole", "whole"), ("tile", "scalar"),
                                                ("whole", "tile")])
def test_an_a2a3_add_loop_runs_as_the_only_writer_of_its_table(monkeypatch, a2a3_call, a5_call):
    """An A5 call (multicore: a kernel, its plain-store form, or the (1, 1) atomic) into the table an A2/A3 Add is
    updating waits until the A2/A3 loop has stored: none of its adds is lost."""
    table = np.zeros(64, np.int32)
    rng = np.random.default_rng(7)
    idx_a2a3, idx_a5 = rng.integers(0, 64, 48), rng.integers(0, 64, 24)
    src_a2a3, src_a5 = np.full(48, 3, np.int32), np.full(24, 5, np.int32)
    for call, target, idx, src in ((a2a3_call, "a2a3", idx_a2a3, src_a2a3), (a5_call, "a5", idx_a5, src_a5)):
        CALLS[call](np.zeros(64, np.int32), idx, src, "add", target)  # compiled and kept before they race
    widened = WidenedA2A3Loop(monkeypatch)
    _race_adds(widened, table, (a2a3_call, idx_a2a3, src_a2a3), (a5_call, idx_a5, src_a5), "the A2/A3 loop")


def _race_adds(widened, table, a2a3, a5, loop: str) -> None:
    """The A2/A3 Add ``a2a3`` and, while ``widened`` holds its loop with the table loaded, the A5 Add ``a5`` (each
    ``(call, idx, src)``) into ``table``: every add of both lands, the A5 call waited for ``loop``, and no writer
    stays registered."""
    (a2a3_call, idx_a2a3, src_a2a3), (a5_call, idx_a5, src_a5) = a2a3, a5
    run_threads(lambda: CALLS[a2a3_call](table, idx_a2a3, src_a2a3, "add", "a2a3"),
                widened.other(lambda: CALLS[a5_call](table, idx_a5, src_a5, "add", "a5")))
    expected = np.zeros(table.size, np.int64)
    np.add.at(expected, idx_a2a3, src_a2a3)
    np.add.at(expected, idx_a5, src_a5)
    np.testing.assert_array_equal(table, expected)
    assert widened.other_done_inside is False, f"the A5 call wrote while {loop} had the table loaded"
    assert_no_writer_registered()


@pytest.mark.parametrize("a2a3_call", ["tile", "whole"])
def test_a_repeated_a2a3_add_runs_its_kept_loop_as_the_only_writer_of_its_table(monkeypatch, a2a3_call):
    """A repeated A2/A3 Add runs the loop its signature's first call kept (``simt_pto.host.kept_launch``): that loop
    too holds its table as its only writer, so an A5 call into the table waits and none of its adds is lost."""
    from simt_pto.host import dispatch, in_memory
    table = np.zeros(64, np.int32)
    rng = np.random.default_rng(8)
    idx_a2a3, idx_a5 = rng.integers(0, 64, 48), rng.integers(0, 64, 24)
    src_a2a3, src_a5 = np.full(48, 3, np.int32), np.full(24, 5, np.int32)
    widened = WidenedA2A3Loop(monkeypatch)  # (it empties the signature cache)
    widened.other_done.set()  # the first calls, which keep their launches (the widened loop), do not wait
    CALLS[a2a3_call](np.zeros(64, np.int32), idx_a2a3, src_a2a3, "add", "a2a3")
    CALLS["tile"](np.zeros(64, np.int32), idx_a5, src_a5, "add", "a5")
    widened.loaded.clear()
    widened.other_done.clear()

    def refuse(*args, **kwargs):
        raise AssertionError("the A2/A3 call took the full path")
    monkeypatch.setattr(dispatch, "run_mscatter", refuse)  # (the A5 tile op takes its kept launch too)
    monkeypatch.setattr(in_memory, "full_scatter", refuse)
    _race_adds(widened, table, (a2a3_call, idx_a2a3, src_a2a3), ("tile", idx_a5, src_a5), "the kept A2/A3 loop")


def test_an_a2a3_add_loop_holds_up_no_writer_of_another_table(monkeypatch):
    """Tables that share no memory never wait for each other: the A5 call into another table (the other half of
    the same buffer) finishes while the A2/A3 loop has its table loaded."""
    buffer = np.zeros(128, np.int32)
    mine, other = buffer[:64], buffer[64:]
    idx = np.arange(64)
    CALLS["tile"](np.zeros(64, np.int32), idx, np.ones(64, np.int32), "add", "a2a3")
    CALLS["tile"](np.zeros(64, np.int32), idx, np.ones(64, np.int32), "add", "a5")
    widened = WidenedA2A3Loop(monkeypatch, window=30)  # (it ends as soon as the other call is done)
    run_threads(lambda: CALLS["tile"](mine, idx, np.ones(64, np.int32), "add", "a2a3"),
                widened.other(lambda: CALLS["tile"](other, idx, np.full(64, 2, np.int32), "add", "a5")))
    assert widened.other_done_inside is True
    np.testing.assert_array_equal(buffer, np.repeat([1, 2], 64))
    assert_no_writer_registered()


def test_an_interrupted_a2a3_loop_leaves_no_registration(monkeypatch):
    """Ctrl-C inside the A2/A3 writer: the call raises, its table is unchanged, no registration is left behind,
    and the next calls of both targets into that table run (none waits for the interrupted one)."""
    table = np.zeros(64, np.int32)
    idx, src = np.arange(64), np.ones(64, np.int32)
    CALLS["tile"](np.zeros(64, np.int32), idx, src, "add", "a2a3")
    widened = WidenedA2A3Loop(monkeypatch, fault=KeyboardInterrupt())
    widened.other_done.set()  # no other writer: the loop raises at once
    with pytest.raises(KeyboardInterrupt):
        CALLS["tile"](table, idx, src, "add", "a2a3")
    assert not table.any()
    assert_no_writer_registered()
    monkeypatch.undo()
    run_threads(lambda: CALLS["tile"](table, idx, src, "add", "a5"),
                lambda: CALLS["whole"](table, idx, src, "add", "a2a3"))
    np.testing.assert_array_equal(table, np.full(64, 2))
    assert_no_writer_registered()


# -- threads on every target and call form, into one table ---------------------------------------------------------

def _updates(rng, n, atomic, dtype):
    idx = rng.integers(0, 512, n).astype(np.int32)
    if atomic == "add":
        return idx, np.ones(n, dtype)
    return idx, rng.integers(-10**6, 10**6, n).astype(dtype)


@pytest.mark.parametrize("atomic, dtype", [("add", "int32"), ("max", "int32"), ("min", "int32"), ("max", "float32"),
                                           ("min", "float32")])
def test_threads_on_any_mix_of_targets_lose_no_update(atomic, dtype):
    """Five threads update one table: tile ops into all of it, whole-array calls into it and into two strided views
    of it (each updated through a contiguous copy written back), each on ``a2a3`` where the capability table gives
    that target the op, else on ``a5``; the table ends as the oracle applies every update."""
    base = np.full((256, 2), {"add": 0, "max": -10**7, "min": 10**7}[atomic], dtype)
    rng = np.random.default_rng(11)
    on_a2a3 = "a2a3" if supports("a2a3", dtype, atomic) else "a5"
    # (call, column of base it writes (None: all of base), target, calls, updates per call)
    jobs = [("tile", None, on_a2a3, 300, 64), ("tile", None, "a5", 300, 64), ("whole", None, on_a2a3, 80, 3000),
            ("whole", 0, on_a2a3, 80, 1500), ("whole", 1, "a5", 80, 1500)]
    work, expected = [], base.astype(np.float64 if dtype == "float32" else np.int64).reshape(-1)
    for call, column, target, calls, n in jobs:
        table = base if column is None else base[:, column]  # a column: a strided view
        updates = [_updates(rng, n, atomic, dtype) for _ in range(calls)]  # new values each call: none repeats
        for idx, src in updates:
            idx %= table.size
            ORACLES[atomic].at(expected, idx if column is None else idx * 2 + column, src)  # its place in base
        CALLS[call](table, *updates[0], atomic, target)  # compiled and kept before the threads race
        work.append(lambda call=call, table=table, target=target, updates=updates[1:]:
                    [CALLS[call](table, idx, src, atomic, target) for idx, src in updates])
    run_threads(*work)
    np.testing.assert_array_equal(base.reshape(-1), expected.astype(dtype))
    assert_no_writer_registered()


@pytest.mark.parametrize("atomic", ["max", "min"])
def test_threads_into_one_strided_table_lose_no_update(atomic):
    """Whole-array calls from four threads into one strided view (each through a contiguous copy written back):
    none writes its copy back over another's updates."""
    base = np.zeros((500, 3), np.float32)
    view = base[:, 1]
    rng = np.random.default_rng(5)
    updates = [[_updates(rng, 2000, atomic, "float32") for _ in range(10)] for _ in range(4)]  # per thread, per call
    expected = np.zeros(500, np.float64)
    for idx, src in sum(updates, []):
        idx %= 500
        ORACLES[atomic].at(expected, idx, src)
    run_threads(*[lambda calls=calls: [whole_scatter(view, idx, src, atomic, "a5") for idx, src in calls]
                  for calls in updates])
    np.testing.assert_array_equal(view, expected.astype(np.float32))
    assert not base[:, [0, 2]].any(), "a write-back touched elements outside the view"
    assert_no_writer_registered()


# -- Numba's CUDA simulator writes its copy of the table back whole ----------------------------------------------

@pytest.mark.parametrize("atomic", ["add", "max"])
def test_a_simulated_launch_loses_no_update_of_other_writers(simulator_backend, atomic):
    """Launches on the simulator (a copy of the table in, the whole copy back out) beside another writer of the
    table, which writes until they are done: an A2/A3 Add loop, or for Max (which A2/A3 lacks) the A5 ``(1, 1)``
    fallback's CPU atomic. Every update of both lands."""
    table = np.zeros(32, np.int32)
    idx = np.arange(32)
    sim_src = np.ones(32, np.int32) if atomic == "add" else np.arange(32, dtype=np.int32)
    tile_scatter(np.zeros(32, np.int32), idx, sim_src, atomic, "a5")  # compiled before they race
    CALLS["tile" if atomic == "add" else "scalar"](np.zeros(32, np.int32), idx[:1], sim_src[:1], atomic,
                                                  "a2a3" if atomic == "add" else "a5")
    rounds, writing, simulated, others = 2, threading.Event(), threading.Event(), []

    def simulate():
        assert writing.wait(30)
        for _ in range(rounds):
            tile_scatter(table, idx, sim_src, atomic, "a5")
        simulated.set()

    def value(k):  # the other writer's k-th Max: above the simulated ones, in no order (the largest at any time)
        return 100 + k * 7919 % 10007

    def other_writer():  # numba-cuda runs each SIMT thread as a Python thread: its launches take a while
        while not simulated.wait(0):
            k = len(others)
            if atomic == "add":
                tile_scatter(table, idx, np.ones(32, np.int32), "add", "a2a3")
            else:
                scalar_scatters(table, np.array([k % 32]), np.array([value(k)], np.int32), "max", "a5")
            others.append(k)
            writing.set()
    run_threads(simulate, other_writer)
    expected = np.zeros(32, np.int64)
    for _ in range(rounds):
        ORACLES[atomic].at(expected, idx, sim_src)
    for k in others:
        if atomic == "add":
            expected += 1
        else:
            expected[k % 32] = max(expected[k % 32], value(k))
    np.testing.assert_array_equal(table, expected)
    assert_no_writer_registered()


@pytest.mark.parametrize("read_as", ["gather table", "scatter source"])
def test_a_simulated_launch_writes_nothing_back_into_memory_it_only_reads(simulator_backend, read_as):
    """The simulator copies every array argument back after a launch; an array the launch only reads (a gather's
    table, a scatter's source) must not be: another thread's adds into that memory, made while the launch ran, would
    be undone. Every add of the other writer lands, and the simulated calls give their own results."""
    table = np.zeros(32, np.int32)
    idx = np.arange(32, dtype=np.int32)
    other = np.zeros(32, np.int32)

    def simulated_call():
        if read_as == "gather table":
            got = pto.gather(table, idx, coalesce="elem", target="a5")
            assert got.shape == (32,) and np.all(got >= 0)
        else:
            pto.scatter(other, table, idx, coalesce="elem", target="a5")
    simulated_call()  # compiled before they race
    tile_scatter(np.zeros(32, np.int32), idx, np.ones(32, np.int32), "add", "a2a3")
    rounds, writing, simulated, adds = 2, threading.Event(), threading.Event(), []

    def simulate():
        assert writing.wait(30)
        for _ in range(rounds):
            simulated_call()
        simulated.set()

    def other_writer():
        while not simulated.wait(0):
            tile_scatter(table, idx, np.ones(32, np.int32), "add", "a2a3")
            adds.append(1)
            writing.set()
    run_threads(simulate, other_writer)
    np.testing.assert_array_equal(table, np.full(32, len(adds)))
    assert_no_writer_registered()


def assert_waits_for_a_plain_writer(held, write, written, message: str) -> None:
    """``write()`` in a thread while a plain (exclusive) writer holds ``held``, part of ``written``: it must not
    write ``written`` until that writer leaves, then must finish."""
    from simt_pto.kernels import writers
    registry = writers.table_writers
    token = registry.token()
    registry.enter_exclusive(token, held)  # a plain writer of that memory, running
    done = threading.Event()

    def run():
        write()
        done.set()
    thread = threading.Thread(target=run)
    try:
        thread.start()
        assert not done.wait(0.3), message
        assert not written.any()
    finally:
        registry.leave_exclusive(token)
    thread.join(30)
    assert done.is_set()


def test_a_tstore_registers_its_stores_as_a_writer_of_its_tensor():
    """TSTORE's plain stores into a host GlobalTensor wait while a plain writer holds memory the tensor shares (as a
    gather's ``out=`` does, below)."""
    table = np.zeros((2, 8), np.float32)
    tile = pto.Tile.from_array(np.arange(16, dtype=np.float32).reshape(2, 8))
    assert_waits_for_a_plain_writer(table[1, 2:3], lambda: pto.tstore(pto.GlobalTensor(table), tile), table,
                                    "TSTORE wrote beside a plain writer of its tensor's memory")
    np.testing.assert_array_equal(table, np.arange(16, dtype=np.float32).reshape(2, 8))
    assert_no_writer_registered()


@pytest.mark.parametrize("target", ["a5", "a2a3"])
@pytest.mark.parametrize("call", ["first", "repeated"])
def test_a_gather_into_out_registers_its_stores_as_a_writer_of_out(target, call):
    """A gather's stores into the caller's ``out`` compose with atomics but not with a plain read-modify-write of
    the same memory (a plain Elem Add would lose a store landing between its load and its store): the gather
    registers ``out`` as a composing writer, so it waits while a plain writer holds that memory, on its first call
    (the full path) and on a repeated one (the kept launch)."""
    table = np.arange(64, dtype=np.float32).reshape(16, 4)
    idx = np.array([3, 1, 15, 0], np.int32)
    out = np.zeros((4, 4), np.float32)
    if call == "repeated":
        pto.gather(table, idx, out=np.zeros_like(out), target=target)  # the signature's first call, kept
    assert_waits_for_a_plain_writer(out[1:2], lambda: pto.gather(table, idx, out=out, target=target), out,
                                    "the gather wrote out beside a plain writer of its memory")
    np.testing.assert_array_equal(out, table[idx])
    assert_no_writer_registered()


# -- a float16 Add's staged boundary element -----------------------------------------------------------------------

def test_a_staged_boundary_element_is_written_by_its_call_alone(monkeypatch, cpu_or_simulator_backend):
    """An odd-length float16 table that ends its allocation ends mid-word: A5 stages its last element, adds into
    the staged copy and writes it back after the launch. An A2/A3 Add into that element in between would be
    overwritten: it waits for the A5 call instead."""
    from simt_pto.host import boundary_words
    table = np.zeros(5, np.float16)  # its own allocation: the last element's word reaches past it
    idx, ones = np.arange(5), np.ones(5, np.float16)
    CALLS["tile"](np.zeros(5, np.float16), idx, ones, "add", "a2a3")
    staged, a2a3_done, inside = threading.Event(), threading.Event(), []
    stage = boundary_words.BoundaryWords.stage

    def widened_stage(self):
        stage(self)
        if self.pieces:
            staged.set()
            inside.append(a2a3_done.wait(WINDOW_S))
    monkeypatch.setattr(boundary_words.BoundaryWords, "stage", widened_stage)

    def a2a3_add():
        assert staged.wait(60)
        try:
            CALLS["tile"](table, idx, ones, "add", "a2a3")
        finally:
            a2a3_done.set()
    run_threads(lambda: CALLS["tile"](table, idx, ones, "add", "a5"), a2a3_add)
    np.testing.assert_array_equal(table, np.full(5, 2, np.float16))
    assert inside == [False], "the A2/A3 add ran while the A5 call had the boundary element staged"
    assert_no_writer_registered()


# -- the registry's rule, on its own -------------------------------------------------------------------------------

def test_an_exclusive_writer_waits_for_overlapping_writers_and_turns_new_ones_away():
    """An exclusive writer waits for a composing writer of memory its table shares, not for one of another table;
    once it is announced, a new composing writer of that memory waits until it is done."""
    from simt_pto.kernels import writers
    registry = writers.TableWriters()
    buffer = np.zeros(200, np.int32)
    table, other = buffer[:100], buffer[100:]
    order, running = [], threading.Event()
    first = registry.token()
    registry.enter_shared(first, table[50:])  # a composing writer in flight

    def exclusive():
        registry.run_exclusive(table, lambda: order.append("exclusive"))

    def late_shared():
        token = registry.token()
        try:
            registry.enter_shared(token, table[:10])
            order.append("late shared")
        finally:
            registry.leave_shared(token)
    waiter = threading.Thread(target=exclusive)
    waiter.start()
    while not registry._exclusive:  # announced
        running.wait(0.001)
    late = threading.Thread(target=late_shared)
    late.start()
    token = registry.token()
    registry.enter_shared(token, other)  # another table: no wait
    order.append("other table")
    registry.leave_shared(token)
    running.wait(0.05)
    assert order == ["other table"]
    registry.leave_shared(first)
    waiter.join(10)
    late.join(10)
    assert order == ["other table", "exclusive", "late shared"] and registry.busy() == 0


def test_an_interrupt_while_an_exclusive_writer_waits_leaves_no_registration(monkeypatch):
    from simt_pto.kernels import writers
    registry = writers.TableWriters()
    table = np.zeros(10, np.int32)
    token = registry.token()
    registry.enter_shared(token, table)

    def interrupted():
        raise KeyboardInterrupt
    monkeypatch.setattr(writers, "_wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        registry.run_exclusive(table, pytest.fail, "ran beside a composing writer")
    registry.leave_shared(token)
    assert registry.busy() == 0
    assert registry.run_alone(table, lambda: None)  # nothing left that a plain writer would defer to


def test_a_gpu_call_on_a_host_table_runs_as_its_only_writer(monkeypatch):
    """On the GPU backend a host table is copied to the device and the whole copy back after the launches: the call
    is a read-modify-write of all of it, so it runs as the table's only writer. No GPU here: the staged run is
    replaced by one that loads the table, waits, and stores it back plus one, as the copy back would; an A5 Add
    from another thread must come after it, or be lost."""
    from simt_pto.host import a5_runner
    table = np.zeros(64, np.int32)
    plan = pto.scatter_plan(table, np.ones(4, np.int32), np.arange(4), coalesce="elem", atomic="add", target="a5")
    started = threading.Event()

    def staged_copy_back(call, backend):
        assert backend == "gpu"
        loaded = table.copy()
        started.set()
        threading.Event().wait(WINDOW_S)
        table[:] = loaded + 1  # the device's result, copied back over the whole host table

    monkeypatch.setattr(a5_runner, "_run_staged", staged_copy_back)
    gpu_call = threading.Thread(target=a5_runner.run_plan, args=(plan, "gpu"))
    gpu_call.start()
    assert started.wait(10)
    pto.scatter(table, np.full(3, 5, np.int32), np.array([0, 1, 63]), coalesce="elem", atomic="add", target="a5")
    gpu_call.join()
    expected = np.ones(64, np.int32)
    np.add.at(expected, [0, 1, 63], 5)
    assert np.array_equal(table, expected)
    assert_no_writer_registered()


KEPT_ADD_IN_A_FORKED_CHILD = r"""
import os, signal, sys
import numpy as np
import simt_pto as pto
from simt_pto.host import in_memory
from simt_pto.kernels import writers

table, src, idx = np.zeros(64, np.float32), np.ones(8, np.float32), np.arange(8, dtype=np.int32)
pto.scatter(table, src, idx, coalesce="elem", atomic="add", target="a2a3")  # keeps its loop (a plain Add: exclusive)
writers.table_writers._exclusive[1 << 40] = writers._Exclusive(table, None)  # a parent thread's writer at the fork
pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGALRM, lambda *args: os._exit(5))  # a child held back for ever ends itself: no orphan
    signal.alarm(30)
    in_memory.full_scatter = lambda *args, **kwargs: os._exit(4)  # the child's call must take the kept loop
    pto.scatter(table, src, idx, coalesce="elem", atomic="add", target="a2a3")
    os._exit(0 if table[0] == 2 else 3)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="os.fork is POSIX only")
def test_a_kept_a2a3_add_in_a_forked_child_registers_in_the_childs_registry():
    """A forked child has none of its parent's threads, so none of their writers (its registry starts empty). A
    loop kept in the parent and run in the child registers in the child's registry: in the parent's, a writer of a
    thread the child does not have would hold it back for ever."""
    import subprocess
    p = subprocess.run([sys.executable, "-c", KEPT_ADD_IN_A_FORKED_CHILD], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])  # 5: the child waited 30 s on a writer it does not have


def test_threads_adding_rows_and_elements_into_one_table_lose_no_update(monkeypatch):
    """Four threads add into one table at once: two by Row scatters (small enough for the plain-store form, which
    runs only while nothing else writes the table), two by Elem scatters into its flat view; the table ends as the
    oracle applies every update, and some Row scatter ran its plain-store form."""
    from simt_pto.kernels import writers
    plain_runs = []
    run_alone = writers.table_writers.run_alone

    def counted(*args):
        ran = run_alone(*args)
        plain_runs.append(ran)
        return ran
    monkeypatch.setattr(writers.table_writers, "run_alone", counted)
    table = np.zeros((256, 8), np.int32)
    expected = np.zeros_like(table)
    rng = np.random.default_rng(23)
    work = []
    for k in range(4):
        row = k < 2
        updates = []
        for _ in range(120):
            idx = rng.integers(0, table.shape[0] if row else table.size, 64 if row else 512).astype(np.int32)
            src = rng.integers(-1000, 1000, (idx.size, 8) if row else idx.size).astype(np.int32)
            np.add.at(expected if row else expected.reshape(-1), idx, src)
            updates.append((idx, src))
        target = table if row else table.reshape(-1)
        coalesce = "row" if row else "elem"
        pto.scatter(target, updates[0][1], updates[0][0], coalesce=coalesce, atomic="add", target="a5")
        work.append(lambda target=target, coalesce=coalesce, updates=updates[1:]:
                    [pto.scatter(target, src, idx, coalesce=coalesce, atomic="add", target="a5")
                     for idx, src in updates])
    run_threads(*work)
    np.testing.assert_array_equal(table, expected)
    assert_no_writer_registered()
    assert any(plain_runs)


def test_a_writer_looks_at_the_registry_while_a_collection_changes_it():
    """A writer reads the other writers' entries while other threads' writers enter and leave. A garbage collection
    that starts mid-read can run a finalizer and switch threads; here the finalizer itself changes the registry at
    every collection (the collector runs at nearly every allocation): the look still completes (it read a copy)."""
    import gc

    from simt_pto.kernels import writers

    registry = {token: np.zeros(4) for token in range(8)}
    table = np.zeros(4)
    changes = []

    class Churn:
        """Cyclic garbage whose finalizer enters a writer and leaves another of itself behind."""

        def __init__(self):
            self.cycle = self

        def __del__(self):
            if len(changes) < 200:
                changes.append(1)
                registry[1000 + len(changes)] = np.zeros(4)
                Churn()

    threshold = gc.get_threshold()
    gc.set_threshold(1)
    try:
        Churn()
        for _ in range(50):
            assert writers._overlapping(table, registry, -1) == []
            assert not writers._overlaps(table, registry, -1)
    finally:
        gc.set_threshold(*threshold)
        changed = len(changes)
        changes.extend([1] * 200)  # (no further churn)
        gc.collect()
    assert changed > 50  # (the registry did change, many times, while the writer looked)
