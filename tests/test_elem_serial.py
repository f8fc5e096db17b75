"""The ``multicore`` backend's serial Elem scatter (``simt_mscatter_elem_serial_kernel``, issue 24): one thread's
loop over the positions in source order with plain loads and stores, and the registry of table writers that decides
when its read-modify-write form may run (``kernels/writers.py``).

* With an atomic op, an Elem scatter of at most ``host/tuning.current().plain_add_max_updates`` elements runs this form while no
  other launch writes memory its table shares, and the atomic kernel otherwise. Both forms must give the serial
  loop's result (``simt_pto.reference``: bitwise, a float Add within the reference's bound), write nothing outside
  the table, and compose with every other writer: calls from several threads into one table lose no update.
* With atomic NONE it is Conflict::Last's serial loop itself, the whole-array Elem Last of at most
  ``host/tuning.current().serial_last_max_updates`` updates or into a table of at most ``serial_last_max_table_bytes``: bit
  for bit the serial result.
"""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import simt_pto as pto
from simt_pto import reference
from simt_pto.enums import ElementFormat, IndexRule, ScatterAtomicOp
from simt_pto.host import a5_planner, in_memory, tuning
from simt_pto.kernels import tuning as kernel_tuning
from simt_pto.kernels import writers
from simt_pto.kernels.a5 import device, simt
from simt_pto.launch_spec import KernelPolicy

from conftest import as_bits, random_values
from oracles import GuardedTable, index_tile, make_tile, min_contiguous

ATOMICS = {name: tuple(d.name for d in pto.dtypes.atomic_dtypes("a5", op)) for name, op in
           (("add", ScatterAtomicOp.ADD), ("max", ScatterAtomicOp.MAX), ("min", ScatterAtomicOp.MIN))}
CASES = [(atomic, dtype) for atomic, dtypes in ATOMICS.items() for dtype in dtypes]
SCATTER_OOB = ("undefined", "skip", "clamp", "wrap")
GUARD = 16
"""Elements of sentinel on each side of the table, inside one buffer: a write outside the table lands there."""

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")


def _values(rng, shape, dtype, atomic):
    """Raw values: finite floats of mixed signs for a float Add (NaN and inf make no sum to bound), any bits
    otherwise (NaN payloads and -0.0 included: Max / Min order them, integers wrap)."""
    if atomic == "add" and pto.dtypes.resolve(dtype).kind == "float":
        return (rng.standard_normal(shape) * 100).astype(pto.dtypes.resolve(dtype).numpy)
    return random_values(rng, shape, dtype)


@pytest.mark.parametrize("oob", SCATTER_OOB)
@pytest.mark.parametrize("atomic, dtype", CASES)
def test_each_form_gives_the_serial_loops_result(rng, scatter_form, atomic, dtype, oob):
    """A whole-array Elem scatter (123 updates into 30 slots, out-of-range and negative indices unless UNDEFINED),
    the full path and then the signature's kept launch, against the serial loop; the guards around the table, the
    source and the indices keep their bits."""
    cap, shape = 30, (3, 41)  # an even count: a 16-bit table of whole words (a mid-word one has no plain form)
    low, high = (-3, cap + 7) if oob != "undefined" else (0, cap)
    idx = rng.integers(low, high, shape).astype(np.int32)
    src = _values(rng, shape, dtype, atomic)
    np_dtype = pto.dtypes.resolve(dtype).numpy
    buffer = np.zeros(cap + 2 * GUARD, np_dtype)
    as_bits(buffer)[:] = int("A5" * buffer.itemsize, 16)
    buffer[GUARD:GUARD + cap] = _values(rng, cap, dtype, atomic)
    initial = as_bits(buffer).copy()
    src_bits, idx_before = as_bits(src).copy(), idx.copy()
    for run in ("full path", "kept launch"):
        as_bits(buffer)[:] = initial
        table = buffer[GUARD:GUARD + cap]
        pto.scatter(table, src, idx, coalesce="elem", atomic=atomic, oob=oob, target="a5")
        got = as_bits(buffer)
        assert np.array_equal(got[:GUARD], initial[:GUARD]) and np.array_equal(got[-GUARD:], initial[-GUARD:]), run
        assert np.array_equal(as_bits(src), src_bits) and np.array_equal(idx, idx_before), run
        wrong = reference.scatter_mismatches(got[GUARD:-GUARD], initial[GUARD:-GUARD], dtype, "elem", idx,
                                             src_bits, cap, oob, atomic, "last")
        assert not wrong, f"{run}: " + "; ".join(wrong[:5])


@pytest.mark.parametrize("atomic, dtype", CASES)
def test_each_form_of_a_tile_op_over_padded_tiles_gives_the_serial_loops_result(rng, scatter_form, atomic,
                                                                                dtype):
    """The tile op over tiles whose rows are padded past their valid columns (the walk that steps through rows and
    columns, not the flat one), into a table of whole 32-bit words (so a 16-bit float Add has its plain form too),
    both forms against the serial loop; the guards after the table keep their bits."""
    cap, (rows, cols) = 40, (3, 11)
    table = GuardedTable(dtype, as_bits(_values(rng, cap, dtype, atomic)), (cap,), lead=16, tail=32)
    initial = table.core()
    pad = 2 * min_contiguous(dtype)
    idx_values = rng.integers(-3, cap + 5, (rows, cols))
    src_bits = as_bits(_values(rng, (rows, cols), dtype, atomic))
    src = make_tile(dtype, 4, pad, valid=(rows, cols), logical_bits=src_bits)
    idx = index_tile(idx_values, "elem", cols=pad)
    pto.mscatter(table.tensor, src, idx, coalesce="elem", atomic=atomic, oob="skip", target="a5")
    assert table.guards_intact()
    wrong = reference.scatter_mismatches(table.core(), initial, dtype, "elem", idx_values, src_bits, cap, "skip",
                                         atomic, "last")
    assert not wrong, "; ".join(wrong[:5])


@pytest.mark.parametrize("atomic, dtype", [("add", "float32"), ("add", "float16"), ("max", "float32"),
                                           ("min", "int32")])
def test_a_table_past_the_near_prefetch_size_gets_the_serial_loops_result(rng, scatter_form, atomic, dtype):
    """The serial walk prefetches further ahead in a table past ``SERIAL_PREFETCH_NEAR_BYTES`` (its distance chosen
    at run time from the table's bytes): an Elem scatter into such a table, in both forms, against the serial loop,
    with out-of-range indices skipped; the guards around the table keep their bits."""
    np_dtype = pto.dtypes.resolve(dtype).numpy
    cap = kernel_tuning.SERIAL_PREFETCH_NEAR_BYTES // np_dtype.itemsize + 1000  # even: whole 32-bit words
    idx = rng.integers(-5, cap + 5, 3000).astype(np.int32)
    idx[::7] = cap - 1 - np.arange(idx[::7].size)  # collisions near the end of the table
    src = _values(rng, idx.shape, dtype, atomic)
    buffer = np.zeros(cap + 2 * GUARD, np_dtype)
    as_bits(buffer)[:] = int("A5" * buffer.itemsize, 16)
    buffer[GUARD:GUARD + cap] = _values(rng, cap, dtype, atomic)
    initial = as_bits(buffer).copy()
    pto.scatter(buffer[GUARD:GUARD + cap], src, idx, coalesce="elem", atomic=atomic, oob="skip", target="a5")
    got = as_bits(buffer)
    assert np.array_equal(got[:GUARD], initial[:GUARD]) and np.array_equal(got[-GUARD:], initial[-GUARD:])
    wrong = reference.scatter_mismatches(got[GUARD:-GUARD], initial[GUARD:-GUARD], dtype, "elem", idx,
                                         as_bits(src), cap, "skip", atomic, "last")
    assert not wrong, "; ".join(wrong[:5])


def test_the_serial_walk_prefetches_further_ahead_past_the_near_size():
    near = kernel_tuning.SERIAL_PREFETCH_NEAR_BYTES
    assert kernel_tuning.SERIAL_PREFETCH_AHEAD_NEAR < kernel_tuning.SERIAL_PREFETCH_AHEAD
    assert device.serial_prefetch_ahead(near) == kernel_tuning.SERIAL_PREFETCH_AHEAD_NEAR
    assert device.serial_prefetch_ahead(near + 1) == kernel_tuning.SERIAL_PREFETCH_AHEAD


def _plain_up_to(alone_kernel, serial: str, most: int) -> None:
    """``alone_kernel`` (a planner's choice of plain-store kernel) names ``serial`` for an Add on the element type
    itself of ``most`` elements and none for one more."""
    assert alone_kernel(ScatterAtomicOp.ADD, ElementFormat.NATIVE, most) == serial
    assert alone_kernel(ScatterAtomicOp.ADD, ElementFormat.NATIVE, most + 1) is None


def test_which_launches_have_a_plain_store_form():
    """Only an Elem scatter with an atomic op, not a mid-word 16-bit float Add, names the plain-store kernel: an Add
    on the element type itself of at most plain_add_max_updates elements, a float16 / bfloat16 Add of at most
    plain_half_add_max_updates, Max / Min of at most plain_rmw_max_updates; the plan says so."""
    limits = tuning.current()
    most, rmw, half = limits.plain_add_max_updates, limits.plain_rmw_max_updates, limits.plain_half_add_max_updates
    serial = "simt_mscatter_elem_serial_kernel"
    _plain_up_to(a5_planner.elem_alone_kernel, serial, most)
    for atomic, fmt, limit in ((ScatterAtomicOp.MAX, ElementFormat.F32_ORDER, rmw),
                               (ScatterAtomicOp.MIN, ElementFormat.NATIVE, rmw),
                               (ScatterAtomicOp.MAX, ElementFormat.NATIVE, rmw),
                               (ScatterAtomicOp.ADD, ElementFormat.F16, half),
                               (ScatterAtomicOp.ADD, ElementFormat.BF16, half)):
        assert a5_planner.elem_alone_kernel(atomic, fmt, 1) == serial
        assert a5_planner.elem_alone_kernel(atomic, fmt, limit) == serial
        assert a5_planner.elem_alone_kernel(atomic, fmt, limit + 1) is None, (atomic, fmt)
    assert a5_planner.elem_alone_kernel(ScatterAtomicOp.NONE, ElementFormat.NATIVE, 64) is None
    assert a5_planner.elem_alone_kernel(ScatterAtomicOp.ADD, ElementFormat.F16_EDGE, 64) is None
    assert a5_planner.elem_alone_kernel(ScatterAtomicOp.ADD, ElementFormat.BF16_EDGE, 64) is None
    table, idx = np.zeros(64, np.float32), np.arange(40, dtype=np.int32)
    plan = in_memory.scatter_plan(table, np.ones(40, np.float32), idx, coalesce="elem", atomic="add")
    (launch,) = plan.launches
    assert launch.kernel == "simt_mscatter_elem_kernel"  # what a GPU, the simulator and the analyzer see
    assert launch.multicore_plain_kernel == "simt_mscatter_elem_serial_kernel"
    assert any("simt_mscatter_elem_serial_kernel on the calling thread" in line for line in plan.describe())
    halves = np.zeros(65, np.float16)[1:]  # starts mid-word: the boundary words' guarded form
    (launch,) = in_memory.scatter_plan(halves, np.ones(40, np.float16), idx, coalesce="elem", atomic="add").launches
    assert launch.multicore_plain_kernel is None
    for conflict in ("last", "default"):
        (launch,) = in_memory.scatter_plan(table, np.ones(40, np.float32), idx, coalesce="elem", conflict=conflict,
                                       last_path="slot").launches
        assert launch.multicore_plain_kernel is None


def test_which_row_scatters_have_a_plain_store_form():
    """A Row scatter names its plain-store kernel (``simt_mscatter_row_serial_kernel``) for an atomic op, not a
    16-bit float Add into a table that starts or ends mid-word: an Add of at most plain_row_add_max_updates elements,
    a Max / Min of at most plain_row_rmw_max_updates; the plan says so. (Tile ops run it too:
    ``test_a5_scatter.py``'s matrix checks the Row atomics in both forms.)"""
    serial = "simt_mscatter_row_serial_kernel"
    limits = tuning.current()
    _plain_up_to(a5_planner.row_alone_kernel, serial, limits.plain_row_add_max_updates)
    for atomic, fmt, limit in ((ScatterAtomicOp.ADD, ElementFormat.F16, limits.plain_row_add_max_updates),
                               (ScatterAtomicOp.ADD, ElementFormat.BF16, limits.plain_row_add_max_updates),
                               (ScatterAtomicOp.MAX, ElementFormat.F32_ORDER, limits.plain_row_rmw_max_updates),
                               (ScatterAtomicOp.MIN, ElementFormat.F32_ORDER, limits.plain_row_rmw_max_updates),
                               (ScatterAtomicOp.MAX, ElementFormat.NATIVE, limits.plain_row_rmw_max_updates),
                               (ScatterAtomicOp.MIN, ElementFormat.NATIVE, limits.plain_row_rmw_max_updates)):
        assert a5_planner.row_alone_kernel(atomic, fmt, 1) == serial, (atomic, fmt)
        assert a5_planner.row_alone_kernel(atomic, fmt, limit) == serial, (atomic, fmt)
        assert a5_planner.row_alone_kernel(atomic, fmt, limit + 1) is None, (atomic, fmt)
    for atomic, fmt in ((ScatterAtomicOp.ADD, ElementFormat.F16_EDGE), (ScatterAtomicOp.ADD, ElementFormat.BF16_EDGE),
                        (ScatterAtomicOp.NONE, ElementFormat.NATIVE)):
        assert a5_planner.row_alone_kernel(atomic, fmt, 1) is None, (atomic, fmt)
    halves, rows8 = np.zeros(64 * 8 + 1, np.float16), np.arange(40, dtype=np.int32)
    for table16, plain in ((halves[:-1].reshape(64, 8), serial), (halves[1:].reshape(64, 8), None)):  # a word / mid-word
        (launch,) = in_memory.scatter_plan(table16, np.ones((40, 8), np.float16), rows8, coalesce="row",
                                           atomic="add").launches
        assert launch.multicore_plain_kernel == plain
    table, rows = np.zeros((64, 8), np.float32), np.arange(40, dtype=np.int32)
    for atomic in ("add", "max", "min"):
        plan = in_memory.scatter_plan(table, np.ones((40, 8), np.float32), rows, coalesce="row", atomic=atomic)
        (launch,) = plan.launches
        assert (launch.kernel, launch.multicore_plain_kernel) == ("simt_mscatter_row_kernel", serial), atomic
        assert any(f"{serial} on the calling thread" in line for line in plan.describe()), atomic
    (launch,) = in_memory.scatter_plan(table, np.ones((40, 8), np.float32), rows, coalesce="row").launches
    assert launch.multicore_plain_kernel is None  # a store (Conflict::Default) is no read-modify-write


def test_the_plain_store_kernel_has_no_cuda_form():
    policy = KernelPolicy(rule=IndexRule.IDENTITY, atomic=ScatterAtomicOp.ADD, fmt=ElementFormat.NATIVE)
    with pytest.raises(ValueError, match="multicore backend only"):
        simt.bound_source("simt_mscatter_elem_serial_kernel", policy, "cuda")


# -- the registry ---------------------------------------------------------------------------------------------

def test_a_plain_writer_runs_only_while_nothing_else_writes_memory_its_table_shares():
    registry = writers.TableWriters()
    table, other = np.zeros(100, np.int32), np.zeros(100, np.int32)
    ran = []
    token = registry.token()
    registry.enter_shared(token, table)
    assert not registry.run_alone(table[50:], ran.append, "overlapping view")
    assert not registry.run_alone((table[:10].view(np.uint32), table[:10]), ran.append, "a pair over it")
    assert registry.run_alone(other, ran.append, "another table")
    assert registry.run_alone(np.zeros(3, np.int32), ran.append, "a third")
    registry.leave_shared(token)
    assert registry.run_alone(table, ran.append, "free again")
    assert ran == ["another table", "a third", "free again"] and registry.busy() == 0

    def nested():  # a plain writer in flight refuses another plain writer of the same memory
        ran.append(registry.run_alone(table[:1], ran.append, "inside"))
    assert registry.run_alone(table, nested)
    assert ran[-1] is False and registry.busy() == 0


def test_a_composing_writer_waits_for_a_plain_one_on_memory_they_share():
    registry = writers.TableWriters()
    table, other = np.zeros(100, np.int32), np.zeros(100, np.int32)
    running, release, entered = threading.Event(), threading.Event(), []

    def plain():
        running.set()
        assert release.wait(10)

    def shared(array, name):
        token = registry.token()
        try:
            registry.enter_shared(token, array)
            entered.append(name)
        finally:
            registry.leave_shared(token)

    alone = threading.Thread(target=registry.run_alone, args=(table, plain))
    alone.start()
    assert running.wait(10)
    waiting = threading.Thread(target=shared, args=(table[90:], "overlapping"))
    waiting.start()
    shared(other, "separate")  # another table: no wait
    time.sleep(0.05)
    assert entered == ["separate"]
    release.set()
    alone.join(10)
    waiting.join(10)
    assert entered == ["separate", "overlapping"] and registry.busy() == 0


@pytest.mark.parametrize("cpu_or_simulator_backend", ["multicore"], indirect=True)  # its fault hook
@pytest.mark.parametrize("scatter_form", ["alone", "atomic"], indirect=True)
@pytest.mark.parametrize("coalesce", ["elem", "row"])
def test_an_exception_inside_a_launch_leaves_no_writer_registered(cpu_or_simulator_backend, scatter_form, coalesce,
                                                                  monkeypatch):
    """An exception (Ctrl-C) as a block range starts: the call raises, nothing is written, no registration is left
    behind, and the next call runs in the same form (an Elem scatter Add, and a Row one: 1000 rows of 4)."""
    shape = (1000,) if coalesce == "elem" else (1000, 4)
    table, idx = np.zeros(shape, np.int32), np.arange(1000, dtype=np.int32)[::-1].copy()
    src = np.ones(shape, np.int32)
    pto.scatter(table, src, idx, coalesce=coalesce, atomic="add")

    def hook(point):
        if point == "range-start":
            raise KeyboardInterrupt
    monkeypatch.setattr(simt, "fault_hook", hook)
    table[:] = 0
    with pytest.raises(KeyboardInterrupt):
        pto.scatter(table, src, idx, coalesce=coalesce, atomic="add")
    assert writers.table_writers.busy() == 0 and not table.any()
    monkeypatch.setattr(simt, "fault_hook", None)
    runs = scatter_form.alone_runs
    pto.scatter(table, src, idx, coalesce=coalesce, atomic="add")
    assert (table == 1).all() and writers.table_writers.busy() == 0
    assert (scatter_form.alone_runs > runs) == (scatter_form.name == "alone")


def test_threads_adding_into_one_table_lose_no_update(scatter_form):
    """Four threads add into one table and into views that overlap it, each call small enough for the plain-store
    form; whichever form each call gets, every update lands (int32: the exact counts times the values)."""
    table = np.zeros(4096, np.int32)
    views = (table, table[1024:], table[:3072], table)
    calls, n = 40, 20000
    rngs = [np.random.default_rng(k) for k in range(4)]
    work = [(v, rngs[k].integers(0, v.size, n).astype(np.int32), np.full(n, k + 1, np.int32))
            for k, v in enumerate(views)]
    expected = np.zeros(table.size, np.int64)
    for k, (view, idx, src) in enumerate(work):
        offset = 1024 if k == 1 else 0
        np.add.at(expected, idx.astype(np.int64) + offset, calls * (k + 1))
    barrier, errors = threading.Barrier(4), []

    def worker(k):
        view, idx, src = work[k]
        try:
            barrier.wait(10)
            for _ in range(calls):
                pto.scatter(view, src, idx, coalesce="elem", atomic="add")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors
    assert np.array_equal(table, expected.astype(np.int32))
    assert writers.table_writers.busy() == 0


# -- Conflict::Last ----------------------------------------------------------------------------------------------

LAST_DTYPES = ("int8", "uint8", "int16", "float16", "bfloat16", "int32", "uint32", "float32")


@pytest.mark.parametrize("cpu_or_simulator_backend", ["multicore"], indirect=True)
@pytest.mark.parametrize("oob", SCATTER_OOB)
@pytest.mark.parametrize("dtype", LAST_DTYPES)
def test_a_small_elem_last_is_the_serial_loop(cpu_or_simulator_backend, rng, dtype, oob):
    """A whole-array Elem Conflict::Last (``last_path="auto"``) of a few updates is one launch of the serial kernel on
    the calling thread, and gives the serial loop's bits (many writers a slot, every bit pattern, out-of-range and
    negative indices unless UNDEFINED), the full path and then the kept launch; the guards keep their bits."""
    cap, shape = 23, (12, 10)
    low, high = (-3, cap + 7) if oob != "undefined" else (0, cap)
    idx = rng.integers(low, high, shape).astype(np.int32)
    src = random_values(rng, shape, dtype)
    buffer = random_values(rng, cap + 2 * GUARD, dtype)
    initial = as_bits(buffer).copy()
    (launch,) = pto.scatter_plan(buffer[GUARD:GUARD + cap], src, idx, coalesce="elem", oob=oob).launches
    assert (launch.kernel, launch.multicore_threads, launch.policy.atomic) == ("simt_mscatter_elem_serial_kernel", 1,
                                                                         ScatterAtomicOp.NONE)
    for run in ("full path", "kept launch"):
        as_bits(buffer)[:] = initial
        pto.scatter(buffer[GUARD:GUARD + cap], src, idx, coalesce="elem", oob=oob)
        got = as_bits(buffer)
        assert np.array_equal(got[:GUARD], initial[:GUARD]) and np.array_equal(got[-GUARD:], initial[-GUARD:]), run
        wrong = reference.scatter_mismatches(got[GUARD:-GUARD], initial[GUARD:-GUARD], dtype, "elem", idx,
                                             as_bits(src), cap, oob, "none", "last")
        assert not wrong, f"{run}: " + "; ".join(wrong[:5])


def test_which_elem_last_calls_are_the_serial_loop(tune):
    """On ``multicore`` with ``last_path="auto"`` up to serial_last_max_updates updates, or into a table of up to
    serial_last_max_table_bytes (Elem only); past both, with an explicit ``last_path``, for a Row scatter, or planned
    for another backend, the kernels of before."""
    most = 64
    tune(serial_last_max_updates=most, serial_last_max_table_bytes=40 * 4 - 1)
    table = np.zeros(40, np.float32)

    def kernels(n, backend="multicore", **options):
        idx = np.arange(n, dtype=np.int32) % table.size
        call = in_memory.scatter_plan(table, np.ones(n, np.float32), idx, coalesce="elem", backend=backend, **options)
        return [launch.kernel for launch in call.launches]
    assert kernels(most) == ["simt_mscatter_elem_serial_kernel"]
    assert "simt_mscatter_elem_serial_kernel" not in kernels(most + 1)
    tune(serial_last_max_table_bytes=40 * 4)  # the table's bytes: any number of updates
    assert kernels(most + 1) == kernels(4 * most) == ["simt_mscatter_elem_serial_kernel"]
    tune(serial_last_max_table_bytes=40 * 4 - 1)
    assert kernels(most, last_path="slot") == ["simt_mscatter_elem_last_kernel"]
    assert kernels(most, last_path="owner")[1] == "simt_mscatter_elem_owner_claim_kernel"
    assert "simt_mscatter_elem_serial_kernel" not in kernels(most, backend="simulator")
    rows = in_memory.scatter_plan(np.zeros((40, 8), np.float32), np.ones((most, 8), np.float32),
                              np.arange(most, dtype=np.int32) % 40, coalesce="row").launches
    assert all(launch.kernel != "simt_mscatter_elem_serial_kernel" for launch in rows)
