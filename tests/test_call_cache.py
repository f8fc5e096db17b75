"""The memo of validated calls (issue 24, per-call overhead): a call of a signature seen before skips the shape, dtype,
layout, policy and budget rules (``simt_pto.plan.CallCache``: the tile ops in ``simt_pto.constraints``, the
whole-array calls in ``simt_pto.host.in_memory``), and is still checked in what depends on its own operands' memory and
values: their overlap, their alignment, the index values, the table's writability.

Each test makes the cache hold a signature first (a clean call), then changes one thing the cache must not hide,
and checks the result against numpy, or the refusal against the one a first, validating call gives (the caches
emptied by ``CallCache.clear_all``). Oracles: numpy indexing.
"""
from __future__ import annotations

import gc
import re
import threading
import types
import weakref

import numpy as np
import pytest

import conftest
import simt_pto as pto
from simt_pto import constraints, torch_rules
from simt_pto.errors import ConstraintError, OutOfBoundsError
from simt_pto.host import in_memory, kept_launch
from simt_pto.call import mgather_policy, scatter_policy
from simt_pto.plan import SIGNATURES, CallCache


@pytest.fixture(autouse=True)
def fresh_caches():
    CallCache.clear_all()
    yield
    CallCache.clear_all()


def _run_in_threads(worker, n):
    """``worker(k)`` for ``k`` in ``range(n)``, each on its own thread, all at once; returns when all are done."""
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def refusal(call):
    """``(type, message)`` of what ``call()`` raises."""
    with pytest.raises(Exception) as info:  # noqa: PT011 - the type is compared by the caller
        call()
    return type(info.value), str(info.value)


def first_and_cached_refusals(clean, bad):
    """The refusal of ``bad()`` validated from scratch, then again with ``clean()``'s signature cached (twice)."""
    CallCache.clear_all()
    first = refusal(bad)
    clean()
    return first, refusal(bad), refusal(bad)


def table_of(rows=64, cols=64, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, cols)).astype(dtype)


# -- whole-array calls -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["a5", "a2a3", "cpu"])
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_a_cached_whole_array_gather_reads_the_new_arrays(target, coalesce):
    for seed in range(3):  # one validating call, then two of the same signature over other arrays
        table = table_of(seed=seed)
        rng = np.random.default_rng(seed + 10)
        idx = rng.integers(0, 64 if coalesce == "row" else table.size, 40).astype(np.int32)
        got = pto.gather(table, idx, coalesce=coalesce, target=target, tile_rows=16)
        want = table[idx] if coalesce == "row" else table.ravel()[idx]
        assert np.array_equal(got, want)
    assert any(isinstance(entry, kept_launch.Entry) for entry in SIGNATURES._entries.values())


@pytest.mark.parametrize("target", ["a5", "a2a3"])
def test_a_cached_whole_array_scatter_writes_the_new_table(target):
    for seed in range(3):
        table = np.zeros((32, 16), np.int32)
        rng = np.random.default_rng(seed)
        idx = rng.permutation(32)[:12].astype(np.int32)
        src = rng.integers(-99, 99, (12, 16)).astype(np.int32)
        pto.scatter(table, src, idx, coalesce="row", target=target)
        want = np.zeros_like(table)
        want[idx] = src
        assert np.array_equal(table, want)


def test_the_cache_keeps_no_callers_array():
    table = table_of()
    idx = np.arange(8, dtype=np.int32)
    pto.gather(table, idx, target="a5")
    pto.scatter(np.zeros((64, 64), np.float32), table[:8].copy(), idx, target="a5")
    alive = weakref.ref(table)
    del table
    gc.collect()
    assert alive() is None
    for entry in SIGNATURES._entries.values():
        plan = entry.plan if isinstance(entry, (kept_launch.Entry, constraints.WholeArrayRules)) else entry
        assert plan.table is None or plan.table.array is None
        if isinstance(entry, kept_launch.Entry) and plan.tile is not None:  # (a planner's plan has no tiles)
            assert plan.tile.data.strides == (0,) and plan.idx.data.strides == (0,)  # no storage of their own


def test_a_misaligned_table_of_a_cached_signature_moves_narrower_units():
    # The Row move unit follows the table's address (a row is moved in 8-byte units only from an 8-byte aligned base):
    # the cache keys no address, so the second call, 4 bytes off, must launch 4-byte moves and still be right.
    memory = np.arange(64 * 64 + 1, dtype=np.float32)
    aligned = memory[:-1].reshape(64, 64) if memory.ctypes.data % 8 == 0 else memory[1:].reshape(64, 64)
    shifted = memory[1:].reshape(64, 64) if memory.ctypes.data % 8 == 0 else memory[:-1].reshape(64, 64)
    idx = np.array([5, 0, 63, 7], np.int32)
    units = []
    for table in (aligned, shifted, aligned):
        launch = pto.gather_plan(table, idx, target="a5", backend="multicore").launches[0]
        units.append(launch.arguments["table"].dtype.itemsize)
        assert np.array_equal(pto.gather(table, idx, target="a5"), table[idx])
    assert units == [8, 4, 8]


def _ctypes_address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def test_the_compiled_address_readers_read_what_numpy_says_for_every_one_dimensional_array():
    """The kept launch reads a 1-D array's address through a compiled reader of its element size
    (``simt.address_readers``, the entry of one specialization per size): any dtype of that size, read-only,
    strided, offset into a buffer; arrays of other sizes, and of other dimensions, through ctypes."""
    from simt_pto.kernels.a5 import simt
    readers = simt.address_readers()
    assert sorted(readers) == [1, 2, 4, 8]
    buffer = np.zeros(256, np.uint8)
    arrays = [np.arange(10, dtype=dtype) for dtype in (np.int8, np.float16, np.int32, np.float32, np.uint64, np.float64)]
    arrays += [buffer[3:].view(np.int8), buffer[2:66].view(np.float16), buffer[4:68].view(np.float32)[::3],
               np.frombuffer(bytes(64), np.float64), np.zeros(4, np.complex128)]
    for array in arrays:
        if array.itemsize in readers:
            assert readers[array.itemsize](array) == _ctypes_address(array), (array.dtype, array.strides)
        assert kept_launch._address(array) == _ctypes_address(array), (array.dtype, array.strides)
    table = np.zeros((8, 8), np.float32)[1:]
    assert kept_launch._address(table) == _ctypes_address(table)


def test_a_repeated_call_hands_the_address_readers_one_dimensional_arrays_alone(monkeypatch):
    """A reader writes one dimension's shape and stride where it unboxes its array: a repeated call of 2-D operands
    (a gather, a scatter) hands it their flat views, and its alignment key holds their addresses modulo 8."""
    table, src, idx = np.ones((16, 8), np.float32), np.ones((4, 8), np.float32), np.array([3, 1, 3, 0], np.int32)
    pto.gather(table, idx, target="a5")  # the first calls keep their launches (and hand the readers over)
    pto.scatter(table, src, idx, target="a5")
    seen = []

    def reader_of(read):
        def spy(array):
            assert array.ndim == 1, array.shape
            seen.append(array.ctypes.data)
            return read(array)
        return spy
    monkeypatch.setattr(kept_launch, "_ADDRESS_READERS", {k: reader_of(v) for k, v in kept_launch._ADDRESS_READERS.items()})
    for _ in range(2):
        assert np.array_equal(pto.gather(table, idx, target="a5"), table[idx])
        pto.scatter(table, src, idx, target="a5")
    assert seen.count(table.ctypes.data) == 4 and seen.count(src.ctypes.data) == 2
    key, _ = kept_launch.whole_operands(scatter_policy("row", "none", "undefined", "last", "a5", None, None, True,
                                                       "auto", None), table, idx, src)
    assert [operand[4] for operand in key.operands] == [table.ctypes.data & 7, src.ctypes.data & 7, 0]


def test_a_mid_word_half_table_of_a_cached_signature_takes_the_edge_format():
    # A float16 Add on a table that starts mid-word takes the boundary-word form, chosen per call from the address.
    memory = np.zeros(65, np.float16)
    even = memory[:-1] if memory.ctypes.data % 4 == 0 else memory[1:]
    odd = memory[1:] if memory.ctypes.data % 4 == 0 else memory[:-1]
    idx = np.array([0, 63, 5, 63], np.int32)
    src = np.array([1, 2, 3, 4], np.float16)
    for table in (even, odd, even):
        table[:] = 0
        pto.scatter(table, src, idx, coalesce="elem", atomic="add", conflict="default", target="a5")
        want = np.zeros(64, np.float16)
        np.add.at(want, idx, src)
        assert np.array_equal(table, want)
        memory[:] = 0


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_an_a2a3_signature_reads_no_address(dtype, no_full_path):
    # a2a3's loops move one element at a time whatever the address: a table (and source) at another address modulo 8
    # takes the kept launch of the first, and each element still gets every update (oracle: np.add.at, twice).
    rng = np.random.default_rng(3)
    memory, src_memory = np.zeros(64 * 64 + 4, dtype), np.zeros(8 * 64 + 4, dtype)
    idx = np.array([5, 0, 63, 5, 7, 0, 1, 5], np.int32)
    start = rng.standard_normal((64, 64)).astype(dtype)
    rows = rng.standard_normal((8, 64)).astype(dtype)
    for offset in (0, 1, 2, 3):  # 0, 2, 4, 6 bytes (float16) or 0, 4, 8, 12 (float32) past the first
        table = memory[offset:offset + 64 * 64].reshape(64, 64)
        src = src_memory[offset:offset + 8 * 64].reshape(8, 64)
        table[...], src[...] = start, rows
        pto.scatter(table, src, idx, coalesce="row", atomic="add", target="a2a3")
        if offset == 0:  # the first calls keep their launches: every later call runs them, at any address
            pto.gather(table, idx, coalesce="row", target="a2a3")
            no_full_path()
        pto.scatter(table, src, idx, coalesce="row", atomic="add", target="a2a3")
        want = start.copy()
        np.add.at(want, idx, rows)
        np.add.at(want, idx, rows)
        assert np.array_equal(table, want)
        got = pto.gather(table, idx, coalesce="row", target="a2a3")
        assert np.array_equal(got, table[idx])
    a5_policy, a2a3_policy = (scatter_policy("row", "add", "undefined", "last", target, None, None, True, "auto",
                                                  None) for target in ("a5", "a2a3"))
    even, odd = memory[:64 * 64].reshape(64, 64), memory[1:1 + 64 * 64].reshape(64, 64)
    src = src_memory[:8 * 64].reshape(8, 64)
    assert kept_launch.whole_operands(a2a3_policy, even, idx, src)[0].operands == \
        kept_launch.whole_operands(a2a3_policy, odd, idx, src)[0].operands
    assert kept_launch.whole_operands(a5_policy, even, idx, src)[0].operands != \
        kept_launch.whole_operands(a5_policy, odd, idx, src)[0].operands  # a5 plans by the address


def test_a_changed_dtype_or_shape_is_validated_again():
    idx = np.arange(8, dtype=np.int32)
    pto.gather(table_of(), idx, target="a5")
    assert np.array_equal(pto.gather(table_of(dtype=np.int16), idx, target="a5"), table_of(dtype=np.int16)[idx])
    first, again, third = first_and_cached_refusals(lambda: pto.gather(table_of(), idx, target="a5"),
                                                    lambda: pto.gather(table_of(dtype=np.float64), idx, target="a5"))
    assert first == again == third
    wide = table_of(cols=64 * 1024)  # one row is 256 KB: no tile fits the UB
    first, again, third = first_and_cached_refusals(lambda: pto.gather(table_of(), idx, target="a5"),
                                                    lambda: pto.gather(wide, idx, target="a5"))
    assert first == again == third and first[0] is ConstraintError


@pytest.mark.parametrize("target", ["a5", "a2a3"])
def test_a_changed_policy_is_validated_again(target):
    table = table_of()
    idx = np.array([3, 64, 70], np.int32)
    clamped = pto.gather(table, idx, oob="clamp", target=target)
    assert np.array_equal(clamped, table[np.minimum(idx, 63)])
    first, again, third = first_and_cached_refusals(
        lambda: pto.gather(table, idx, oob="clamp", target=target),
        lambda: pto.gather(table, idx, oob="undefined", target=target))
    assert first == again == third and first[0] is OutOfBoundsError
    masked = pto.gather(table, idx, oob="undefined", strict=False, target=target)
    assert np.array_equal(masked[0], table[3]) and not masked[1:].any()


def test_arguments_that_compare_equal_but_are_refused_stay_refused():
    # True == 1 and False == 0: a cached tile_rows=1 / dyn_ubuf_size=0 call must not admit True / False.
    table, idx = table_of(), np.arange(8, dtype=np.int32)
    for clean, bad in ((dict(tile_rows=1), dict(tile_rows=True)), (dict(dyn_ubuf_size=0), dict(dyn_ubuf_size=False))):
        first, again, third = first_and_cached_refusals(lambda: pto.gather(table, idx, target="a5", **clean),
                                                        lambda: pto.gather(table, idx, target="a5", **bad))
        assert first == again == third and first[0] is TypeError


@pytest.mark.parametrize("target", ["a5", "a2a3"])
def test_a_read_only_table_is_refused_after_a_writable_one(target):
    idx = np.arange(4, dtype=np.int32)
    src = np.ones((4, 64), np.float32)
    frozen = np.zeros((64, 64), np.float32)
    frozen.flags.writeable = False
    first, again, third = first_and_cached_refusals(lambda: pto.scatter(np.zeros((64, 64), np.float32), src, idx,
                                                                        target=target),
                                                    lambda: pto.scatter(frozen, src, idx, target=target))
    assert first == again == third and first[0] is ConstraintError
    assert not frozen.any()


@pytest.mark.parametrize("target", ["a5", "a2a3"])
def test_overlapping_operands_are_refused_after_a_disjoint_call(target):
    table = np.zeros((64, 64), np.float32)
    idx = np.arange(4, dtype=np.int32)
    first, again, third = first_and_cached_refusals(
        lambda: pto.scatter(table, np.ones((4, 64), np.float32), idx, target=target),
        lambda: pto.scatter(table, table[10:14], idx, target=target))  # src is a view of the table it writes
    assert first == again == third and first[0] is ConstraintError and "shares memory" in first[1]
    out = np.zeros((4, 64), np.float32)
    first, again, third = first_and_cached_refusals(
        lambda: pto.gather(table, idx, target=target, out=out),
        lambda: pto.gather(table, idx, target=target, out=table[:4]))
    assert first == again == third and first[0] is ConstraintError and "shares memory" in first[1]


@pytest.mark.parametrize("target", ["a5", "a2a3"])
def test_out_of_range_indices_of_a_cached_signature_are_refused_before_any_write(target):
    table = np.zeros((64, 64), np.float32)
    src = np.ones((4, 64), np.float32)
    first, again, third = first_and_cached_refusals(
        lambda: pto.scatter(table, src, np.array([0, 1, 2, 3], np.int32), target=target),
        lambda: pto.scatter(table, src, np.array([0, 1, 99, -1], np.int32), target=target))
    assert first == again == third and first[0] is OutOfBoundsError
    table[:] = 0
    with pytest.raises(OutOfBoundsError):
        pto.scatter(table, src, np.array([0, 1, 99, -1], np.int32), target=target)
    assert not table.any()


# -- the kept launches of repeated calls (host/kept_launch.py) -------------------------------------------------------

@pytest.mark.parametrize("target", ["a5", "a2a3"])
@pytest.mark.parametrize("coalesce", ["row", "elem"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.uint32, np.int64])
def test_a_repeated_gather_runs_without_the_full_path_and_reads_the_new_arrays(target, coalesce, index_dtype,
                                                                              no_full_path):
    shape = (5, 8)  # N-D indices: Row gathers (5, 8, 64), Elem (5, 8)
    capacity = 64 if coalesce == "row" else 64 * 64

    def call(seed):
        table = table_of(seed=seed)
        idx = np.random.default_rng(seed).integers(0, capacity, shape).astype(index_dtype)
        got = pto.gather(table, idx, coalesce=coalesce, target=target, tile_rows=16)
        want = table[idx] if coalesce == "row" else table.ravel()[idx]
        assert got.shape == want.shape and got.dtype == want.dtype and np.array_equal(got, want)
    call(0)
    no_full_path()
    for seed in (1, 2):
        call(seed)


@pytest.mark.parametrize("coalesce", ["row", "elem"])
@pytest.mark.parametrize("bad_at", ["first", "middle", "last"])
def test_a_repeated_multicore_gather_checks_its_indices_on_its_threads(coalesce, bad_at, tune, no_full_path):
    """A repeated gather on ``multicore`` that runs on several threads checks each block range's indices just
    before it runs them (``simt.multicore_launcher``'s ``idx_capacity``): an index past the table anywhere, in the
    first, a middle or the last range, is refused as the first call refuses it, naming it, and a good call after it
    still runs from the kept launch with the right values. The launch's ranges, traced: none holding the bad index
    ran."""
    from simt_pto.kernels.a5 import simt
    tune(elem_gather_one_thread_elems=64)  # small calls on every thread (one range per thread at least)
    rows, cols = 512, 16
    table = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    capacity = rows if coalesce == "row" else rows * cols
    n = 64 * 64 if coalesce == "row" else 16 * 4096
    rng = np.random.default_rng(11)
    good = rng.integers(0, capacity, n).astype(np.int32)

    def gather(idx):
        return pto.gather(table, idx, coalesce=coalesce, tile_rows=64 if coalesce == "row" else None)
    want = table[good] if coalesce == "row" else table.ravel()[good]
    assert np.array_equal(gather(good), want)
    no_full_path()
    assert np.array_equal(gather(good), want)  # the kept launch
    bad = good.copy()
    at = {"first": 3, "middle": n // 2 + 5, "last": n - 2}[bad_at]
    bad[at] = capacity + 7
    with simt.trace_multicore_launches() as ranges:
        with pytest.raises(AssertionError, match="took the full path"):  # refused by the kept launch: the full path
            gather(bad)                                                    # would raise the refusal
    per_block = 64 if coalesce == "row" else 4096  # indices a block reads: its rows (Row), its positions (Elem)
    assert not [r for r in ranges if r[4] * per_block <= at < (r[4] + r[3]) * per_block]  # checked before it ran
    assert np.array_equal(gather(good[::-1].copy()), want[::-1])  # good calls still run from the kept launch


@pytest.mark.parametrize("target", ["a5", "a2a3"])
@pytest.mark.parametrize("coalesce", ["row", "elem"])
@pytest.mark.parametrize("oob", ["clamp", "wrap"])
def test_a_repeated_call_reads_negative_int32_indices_as_their_uint32_cast(target, coalesce, oob, no_full_path):
    """A repeated call (its kept launch, which takes the index bits as uint32) casts as the ISA does: -1 is
    4294967295, which Clamp takes to the last slot and Wrap to ``4294967295 % capacity`` (oracle:
    :func:`simt_pto.reference.slots`)."""
    from simt_pto import reference
    table = table_of(rows=16, cols=8)
    capacity = 16 if coalesce == "row" else table.size
    src_shape = (8, 8) if coalesce == "row" else (8,)

    def call(seed):
        rng = np.random.default_rng(seed)
        idx = rng.integers(-3 * capacity, 3 * capacity, 8).astype(np.int32)
        idx[0] = -1
        reached = reference.slots(idx, capacity, oob)
        got = pto.gather(table, idx, coalesce=coalesce, oob=oob, target=target)
        assert np.array_equal(got, table[reached] if coalesce == "row" else table.ravel()[reached])
        written = np.zeros_like(table) if coalesce == "row" else np.zeros(table.size, table.dtype)
        src = rng.integers(-9, 9, src_shape).astype(np.float32)  # (whole numbers: every order of adds is exact)
        want = written.copy()
        np.add.at(want, reached, src)
        pto.scatter(written, src, idx, coalesce=coalesce, atomic="add", oob=oob, target=target)
        assert np.array_equal(written, want)
    call(0)
    no_full_path()
    for seed in (1, 2):
        call(seed)


@pytest.mark.parametrize("target", ["a5", "a2a3"])
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_indices_a_repeated_gather_cannot_take_get_the_full_paths_refusal(target, coalesce):
    table = table_of()
    capacity = 64 if coalesce == "row" else table.size
    clean = lambda dtype: pto.gather(table, np.arange(4, dtype=dtype), coalesce=coalesce, target=target)  # noqa: E731
    out_of_range = lambda: pto.gather(table, np.array([0, capacity, 1, 2], np.int32), coalesce=coalesce,  # noqa: E731
                                      target=target)
    first, again, third = first_and_cached_refusals(lambda: clean(np.int32), out_of_range)
    assert first == again == third and first[0] is OutOfBoundsError
    too_wide = lambda: pto.gather(table, np.array([0, 1, 2 ** 40, 2], np.int64), coalesce=coalesce,  # noqa: E731
                                  target=target)
    first, again, third = first_and_cached_refusals(lambda: clean(np.int64), too_wide)
    assert first == again == third and first[0] is ConstraintError and "1099511627776" in first[1]


@pytest.mark.parametrize("coalesce, atomic, conflict", [("elem", "add", "default"), ("row", "add", "default"),
                                                       ("row", "none", "default"), ("elem", "none", "last"),
                                                       ("row", "none", "last")])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_a_repeated_scatter_runs_without_the_full_path_and_writes_the_new_table(coalesce, atomic, conflict,
                                                                                index_dtype, monkeypatch):
    from simt_pto import reference
    slots, cols, n = 64, 8, 40

    def call(seed):
        rng = np.random.default_rng(seed)
        table = rng.integers(-50, 50, (slots, cols) if coalesce == "row" else slots * cols).astype(np.int32)
        capacity = slots if coalesce == "row" else slots * cols
        idx = rng.integers(0, capacity, n).astype(index_dtype)
        if conflict == "default" and atomic == "none":
            idx = rng.permutation(capacity)[:n].astype(index_dtype)  # no collisions: one result
        src = rng.integers(-9, 9, (n, cols) if coalesce == "row" else n).astype(np.int32)
        want = table.copy()
        if atomic == "add":
            np.add.at(want, idx, src)
        elif conflict == "last":
            want = reference.last_writer_scatter(want, idx.astype(np.int64), src)
        else:
            want[idx] = src
        got = pto.scatter(table, src, idx, coalesce=coalesce, atomic=atomic, conflict=conflict, target="a5",
                          last_path="owner")
        assert got is table and np.array_equal(table, want)
    call(0)

    def full_path(*args, **kwargs):
        raise AssertionError("the call took the full path")
    monkeypatch.setattr(in_memory, "_scatter", full_path)
    for seed in (1, 2):
        call(seed)


@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_a_repeated_last_scatter_reuses_the_owner_array_of_the_last_call_and_never_reads_it(coalesce, monkeypatch):
    """The owner array a finished owner-path call leaves for the next call of its size holds the last call's claims;
    filled with the largest keys there are (every slot owned by a position past the end), it must change nothing:
    the reset marks every owner unowned first. Threads calling at once each get an owner array of their own."""
    from simt_pto import reference
    from simt_pto.host import kept_launch
    slots, cols, n = 96, 4, 300

    def call(seed):
        rng = np.random.default_rng(seed)
        table = rng.integers(-50, 50, (slots, cols) if coalesce == "row" else slots * cols).astype(np.int32)
        capacity = slots if coalesce == "row" else slots * cols
        idx = rng.integers(0, capacity, n).astype(np.int32)
        src = rng.integers(-9, 9, (n, cols) if coalesce == "row" else n).astype(np.int32)
        want = reference.last_writer_scatter(table.copy(), idx.astype(np.int64), src)
        pto.scatter(table, src, idx, coalesce=coalesce, target="a5", last_path="owner")  # (dense: a small table)
        return np.array_equal(table, want)
    assert call(0)
    monkeypatch.setattr(in_memory, "_scatter", lambda *a, **k: pytest.fail("the call took the full path"))
    assert call(1)
    (spare,) = kept_launch._SPARE_OWNER._entries.values()
    spare.fill(np.iinfo(spare.dtype).max)  # a claim of every slot, by a position no update has
    assert call(2)
    assert next(iter(kept_launch._SPARE_OWNER._entries.values())) is spare  # the same array, taken and given back
    failures = []
    _run_in_threads(lambda k: failures.extend(seed for seed in range(10 * k, 10 * k + 10) if not call(seed)), 4)
    assert not failures
    assert len(kept_launch._SPARE_OWNER) == 1  # one spare however many calls ran at once
    CallCache.clear_all()
    assert len(kept_launch._SPARE_OWNER) == 0  # and the caches' reset lets it go


def test_a_small_launch_runs_on_the_calling_thread_and_a_large_one_on_several():
    from simt_pto.kernels.a5 import simt
    table = table_of()
    with simt.trace_multicore_launches() as ranges:
        assert np.array_equal(pto.gather(table, np.arange(8, dtype=np.int32), target="a5"), table[:8])
    assert ranges and {r[0] for r in ranges} == {threading.get_ident()}
    small = pto.gather_plan(table, np.zeros(1 << 10, np.int32), coalesce="elem", backend="multicore")
    large_call = pto.gather_plan(np.zeros(1 << 20, np.float32), np.zeros(1 << 20, np.int32), coalesce="elem",
                                 backend="multicore")
    assert small.launches[0].multicore_threads == 1 and large_call.launches[0].multicore_threads is None
    # a 256K Elem gather is a quarter-millisecond call: the helper's wake-up would be a large part of it
    quarter_ms = pto.gather_plan(np.zeros(1 << 20, np.float32), np.zeros(1 << 18, np.int32), coalesce="elem",
                                 backend="multicore")
    assert quarter_ms.launches[0].multicore_threads == 1
    assert "multicore threads<=1" in small.describe()[0] and "threads" not in large_call.describe()[0]



@pytest.mark.parametrize(("rows", "cols", "dtype", "one_thread"), [
    (1 << 14, 16, np.float16, True),  # 16384 rows of 32 B (512 KB): the row limit
    ((1 << 14) + 1, 16, np.float16, False),  # a row more, far below the byte limit
    (1 << 12, 128, np.float32, True),  # 4096 rows of 512 B: the byte limit (2 MB)
    ((1 << 12) + 1, 128, np.float32, False),  # a row more: past it
])
def test_a_row_copy_runs_on_the_calling_thread_while_its_bytes_and_its_rows_are_few(rows, cols, dtype, one_thread):
    """The Row gather, the Row scatter under Conflict::Default and the owner path's Row write run on the calling
    thread alone up to ``row_copy_one_thread_bytes`` bytes and ``row_copy_one_thread_rows`` rows, on several past
    either (narrow rows: a row costs its index and its miss whatever its width)."""
    table, idx = np.zeros((rows, cols), dtype), np.arange(rows, dtype=np.int32)
    gather = pto.gather_plan(table, idx, coalesce="row", backend="multicore")
    default = pto.scatter_plan(table, table.copy(), idx, coalesce="row", conflict="default", backend="multicore")
    owner = pto.scatter_plan(table, table.copy(), idx, coalesce="row", last_path="owner", owner="dense",
                             backend="multicore")
    write = [launch for launch in owner.launches if launch.kernel == "simt_mscatter_row_owner_write_kernel"]
    assert len(write) == 1
    want = 1 if one_thread else None
    assert [gather.launches[0].multicore_threads, default.launches[0].multicore_threads,
            write[0].multicore_threads] == [want] * 3

def test_threads_calling_one_signature_get_their_own_results():
    tables = [table_of(seed=s) for s in range(4)]
    indices = [np.random.default_rng(s).integers(0, 64, 24).astype(np.int32) for s in range(4)]
    barrier = threading.Barrier(4)
    failures = []

    def worker(k):
        target = ("a5", "a2a3")[k % 2]
        barrier.wait()
        for _ in range(50):
            got = pto.gather(tables[k], indices[k], target=target)
            if not np.array_equal(got, tables[k][indices[k]]):
                failures.append(k)
    _run_in_threads(worker, 4)
    assert not failures



def _last_writers(table, src, idx):
    """The Conflict::Last oracle: the positions of ``idx`` written in order, each overwriting the one before."""
    want = table.copy()
    rows = want.reshape(-1) if src.ndim == 1 else want
    for p, slot in enumerate(idx.tolist()):
        rows[slot] = src[p]
    return want


@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_threads_scattering_last_through_one_kept_launch_each_get_their_own_owners(coalesce, monkeypatch):
    """Several threads repeat a Conflict::Last scatter of one signature on the owner path at once: each call takes an
    owner array from the kept launch's one-array pool or makes its own, so no two calls share one and every table
    gets its own last writers."""
    taken = []
    take = kept_launch._take_owner

    def counted_take(size, dtype):
        taken.append(size)
        return take(size, dtype)
    monkeypatch.setattr(kept_launch, "_take_owner", counted_take)  # (before the signature's kept launch is made)
    rows, cols, n, rounds = 300, 8, 5000, 25
    capacity = rows if coalesce == "row" else rows * cols
    barrier = threading.Barrier(4)
    failures = []

    def worker(k):
        rng = np.random.default_rng(100 + k)
        barrier.wait()
        for r in range(rounds):
            table = table_of(rows=rows, cols=cols, seed=1000 * k + r)
            idx = rng.integers(0, capacity, n).astype(np.int32)
            src = rng.standard_normal((n, cols) if coalesce == "row" else n).astype(np.float32)
            want = _last_writers(table, src, idx)
            pto.scatter(table if coalesce == "row" else table.reshape(-1), src, idx, coalesce=coalesce,
                        target="a5", last_path="owner")
            if not np.array_equal(table, want):
                failures.append((k, r))
    _run_in_threads(worker, 4)
    assert not failures
    assert len(taken) >= 4 * (rounds - 1) - 3  # the repeated calls ran their kept launch (each takes an owner)

def test_the_caches_are_bounded():
    cache = CallCache(maxsize=4)
    for k in range(10):
        cache.put(("key", k), k)
    assert len(cache) == 4 and cache.get(("key", 9)) == 9 and cache.get(("key", 0)) is None
    cache.put(["unhashable"], 1)  # an unhashable key is never kept, and finds nothing
    assert cache.get(["unhashable"]) is None and len(cache) == 4
    for rows in range(1, 300):  # more signatures than the whole-array cache keeps
        pto.gather(table_of(rows=4, cols=8), np.zeros(rows, np.int32), target="cpu")
    assert len(SIGNATURES) <= SIGNATURES.maxsize


# -- tile ops --------------------------------------------------------------------------------------------------

def row_tiles(rows=8, cols=64):
    return pto.Tile("float32", rows, cols), pto.Tile("int32", 1, max(8, rows), valid=(1, rows))


def test_a_cached_tile_op_reads_and_writes_the_new_operands():
    for seed in range(3):
        table = table_of(seed=seed)
        idx = np.random.default_rng(seed).integers(0, 64, 8).astype(np.int32)
        dst, idx_tile = row_tiles()
        idx_tile.set(idx.reshape(1, 8))
        gt = pto.GlobalTensor(table)
        policy = mgather_policy(pto.Coalesce.ROW, pto.GatherOOB.UNDEFINED, "a5", pto.GatherExec.SCALAR, True, None)
        plan = constraints.validated_mgather(policy, dst, gt, idx_tile)
        assert plan.tile is dst and plan.idx is idx_tile and plan.table is gt
        pto.mgather(dst, gt, idx_tile, coalesce="row", target="a5")
        assert np.array_equal(dst.valid_numpy(), table[idx])
        target = np.zeros((64, 64), np.float32)
        pto.mscatter(pto.GlobalTensor(target), dst, idx_tile, coalesce="row", target="a5")
        want = np.zeros_like(target)
        want[idx] = table[idx]
        assert np.array_equal(target, want)
    for entry in constraints._PLANS._entries.values():
        assert entry.tile is None and entry.idx is None and entry.table is None


def _forbid_the_full_tile_path(monkeypatch):
    """Make validating or building a tile MGATHER fail: a call that still runs took its signature's kept launch."""
    from simt_pto.host import a5_runner

    def full_path(*args, **kwargs):
        raise AssertionError("the call took the full path")
    monkeypatch.setattr(a5_runner, "mgather_launches", full_path)
    monkeypatch.setattr(constraints, "validated_mgather", full_path)


@pytest.mark.parametrize("coalesce", ["row", "elem"])
@pytest.mark.parametrize("index_dtype", ["int32", "uint32"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_a_repeated_tile_gather_runs_its_kept_launch_on_the_new_operands(coalesce, index_dtype, dtype, monkeypatch):
    from simt_pto.host import a5_runner
    if a5_runner.a5_backend() != "multicore":
        pytest.skip("the kept launches are the multicore backend's")
    rng = np.random.default_rng(5)

    def call(seed, data_of_its_own=False):
        table = table_of(seed=seed, dtype=dtype)
        if coalesce == "row":
            dst, idx_tile = pto.Tile(dtype, 8, 64), pto.Tile(index_dtype, 1, 32, valid=(1, 8))
            idx = rng.integers(0, 64, (1, 8)).astype(index_dtype)
        else:
            dst, idx_tile = pto.Tile(dtype, 4, 32, valid=(4, 16)), pto.Tile(index_dtype, 4, 32, valid=(4, 16))
            idx = rng.integers(0, table.size, (4, 16)).astype(index_dtype)
        if data_of_its_own:  # the tile's storage swapped for another buffer: the launch must follow it
            dst.data = np.full_like(dst.data, 7)
        idx_tile.set(idx)
        pto.mgather(dst, pto.GlobalTensor(table), idx_tile, coalesce=coalesce, target="a5")
        want = table[idx[0]] if coalesce == "row" else table.ravel()[idx]
        assert np.array_equal(dst.valid_numpy().view(np.uint8), want.view(np.uint8))
    call(0)
    _forbid_the_full_tile_path(monkeypatch)
    call(1)
    call(2, data_of_its_own=True)


@pytest.mark.parametrize("coalesce", ["row", "elem"])
@pytest.mark.parametrize("oob", ["clamp", "wrap", "zero", "undefined-unchecked"])
def test_a_repeated_tile_gather_applies_its_oob_policy_to_the_new_indices(coalesce, oob, monkeypatch):
    """Indices out of range go through the kept launch under every policy that places or drops them (oracle:
    ``simt_pto.reference``; ``undefined`` with ``strict=False`` reads 0 there, the emulator's memory-safe result)."""
    from simt_pto import reference
    from simt_pto.host import a5_runner
    if a5_runner.a5_backend() != "multicore":
        pytest.skip("the kept launches are the multicore backend's")
    policy, strict = ("undefined", False) if oob == "undefined-unchecked" else (oob, True)
    table = table_of(rows=16, cols=32)
    gt = pto.GlobalTensor(table)
    rng = np.random.default_rng(9)
    capacity = 16 if coalesce == "row" else table.size
    if coalesce == "row":
        dst, idx_tile = pto.Tile("float32", 8, 32), pto.Tile("int32", 1, 8)
    else:
        dst, idx_tile = pto.Tile("float32", 4, 8), pto.Tile("int32", 4, 8)
    clean = rng.integers(0, capacity, idx_tile.valid).astype(np.int32)
    wild = np.where(rng.random(idx_tile.valid) < 0.5, clean, rng.integers(capacity, 3 * capacity, idx_tile.valid))
    wild.ravel()[0] = -1  # 4294967295 after the uint32 cast
    wild = wild.astype(np.int32)

    def gather(indices):
        idx_tile.set(indices)
        pto.mgather(dst, gt, idx_tile, coalesce=coalesce, oob=policy, strict=strict, target="a5")
        return dst.valid_numpy()
    gather(clean)
    _forbid_the_full_tile_path(monkeypatch)
    got = gather(wild)
    bits = table.view(np.uint32).ravel()
    oracle_policy = "zero" if policy == "undefined" else policy
    want = (reference.gather_row(bits, capacity, 32, wild[0], oracle_policy) if coalesce == "row"
            else reference.gather_elem(bits, capacity, wild, oracle_policy)).view(np.float32)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("coalesce", ["row", "elem"])
@pytest.mark.parametrize("atomic, conflict, dtype", [("none", "last", "float32"), ("none", "default", "int8"),
                                                     ("add", "default", "float32"), ("add", "default", "float16"),
                                                     ("max", "default", "int32"), ("none", "last", "float16")])
@pytest.mark.parametrize("index_dtype", ["int32", "uint32"])
def test_a_repeated_tile_scatter_runs_its_kept_launch_on_the_new_operands(coalesce, atomic, conflict, dtype,
                                                                          index_dtype, monkeypatch):
    """Oracles: ``reference.last_writer_scatter`` (Last), ``np.add.at`` / ``np.maximum.at`` (atomics), numpy's
    assignment for Default with distinct slots."""
    from simt_pto import reference
    from simt_pto.host import a5_runner
    if a5_runner.a5_backend() != "multicore":
        pytest.skip("the kept launches are the multicore backend's")
    slots, cols = 40, 32
    capacity = slots if coalesce == "row" else slots * cols

    def call(seed):
        rng = np.random.default_rng(seed)
        table = rng.integers(-20, 20, (slots, cols)).astype(dtype)
        if coalesce == "row":
            src, idx_tile = pto.Tile(dtype, 8, cols), pto.Tile(index_dtype, 1, 32, valid=(1, 8))
            idx = (rng.permutation(slots)[:8] if conflict == "default" and atomic == "none"
                   else rng.integers(0, slots, 8))[None, :].astype(index_dtype)
            values = rng.integers(-9, 9, (8, cols)).astype(dtype)
        else:
            src, idx_tile = pto.Tile(dtype, 4, 32, valid=(4, 16)), pto.Tile(index_dtype, 4, 32, valid=(4, 16))
            idx = (rng.permutation(capacity)[:64] if conflict == "default" and atomic == "none"
                   else rng.integers(0, capacity // 4, 64)).reshape(4, 16).astype(index_dtype)
            values = rng.integers(-9, 9, (4, 16)).astype(dtype)
        src.set(values)
        idx_tile.set(idx)
        flat_idx = idx.ravel().astype(np.int64)
        want = table.copy() if coalesce == "row" else table.ravel().copy()
        updates = values if coalesce == "row" else values.ravel()
        if atomic == "add":
            np.add.at(want, flat_idx, updates)
        elif atomic == "max":
            np.maximum.at(want, flat_idx, updates)
        elif conflict == "last":
            want = reference.last_writer_scatter(want, flat_idx, updates)
        else:
            want[flat_idx] = updates
        pto.mscatter(pto.GlobalTensor(table), src, idx_tile, coalesce=coalesce, atomic=atomic, conflict=conflict,
                     target="a5")
        assert np.array_equal(table.reshape(want.shape), want)
    call(0)

    def full_path(*args, **kwargs):
        raise AssertionError("the call took the full path")
    monkeypatch.setattr(a5_runner, "mscatter_launches", full_path)
    monkeypatch.setattr(constraints, "validated_mscatter", full_path)
    call(1)
    call(2)



# (op, coalesce, atomic, the table's declared dtype, its memory's): each memory dtype of the declared dtype's size
REINTERPRETED = [("mscatter", "elem", "add", "float32", "int32"), ("mscatter", "row", "add", "float32", "uint32"),
                 ("mscatter", "row", "max", "int32", "uint32"), ("mscatter", "elem", "min", "uint32", "int32"),
                 ("mscatter", "elem", "add", "int32", "float32"), ("mscatter", "elem", "add", "float16", "int16"),
                 ("mscatter", "row", "none", "float32", "int32"), ("mgather", "row", "none", "float32", "int32"),
                 ("mgather", "elem", "none", "float16", "uint16")]


@pytest.mark.parametrize("target, op, coalesce, atomic, declared, memory", [
    pytest.param(target, *case, id="-".join((target, *case))) for case in REINTERPRETED for target in conftest.TARGETS
    # (the CPU simulator's MSCATTER walks element-wise with a plain replace: its own tests check it)
    if conftest.supports(target, case[3], case[2]) and (target != "cpu" or case[0] == "mgather")])
def test_a_repeated_tile_op_reads_reinterpreted_memory_as_its_declared_dtype(target, op, coalesce, atomic, declared,
                                                                           memory):
    """A GlobalTensor's ``dtype`` may reinterpret its memory (``"float32"`` over int32 memory). Calls of one shape
    alternate between memory of the declared dtype and memory reinterpreted as it, past the calls where a kept launch
    binds its kernel: each reads and writes the table as the declared dtype. (A kept launch took the memory of a
    later call as it was: an integer add into a float32 table, and every call of the signature after it too.)
    Oracles: numpy's ``add.at`` / ``maximum.at`` / ``minimum.at`` / indexing on the table viewed as declared."""
    slots, cols, rng = 16, 8, np.random.default_rng(5)
    capacity = slots if coalesce == "row" else slots * cols
    for memory_dtype in (declared, memory, memory, declared, declared, memory, declared):
        # negative values too: a signed and an unsigned Max / Min differ on them (-1 as uint32 is 4294967295)
        start = rng.integers(-9, 9, (slots, cols)).astype(declared)
        table = start.copy().view(memory_dtype)
        tensor = pto.GlobalTensor(table, dtype=declared)
        if coalesce == "row":
            idx = rng.permutation(slots)[:4] if atomic == "none" else rng.integers(0, slots, 4)
            tile, idx_tile = pto.Tile(declared, 4, cols), pto.Tile("int32", 1, 32, valid=(1, 4))
            idx_tile.set(idx[None, :].astype(np.int32))
        else:
            idx = (rng.permutation(capacity)[:32] if atomic == "none" else rng.integers(0, capacity, 32)).reshape(2, 16)
            tile, idx_tile = pto.Tile(declared, 2, 16), pto.Tile("int32", 2, 16)
            idx_tile.set(idx.astype(np.int32))
        want = start.copy() if coalesce == "row" else start.reshape(-1).copy()
        if op == "mgather":
            pto.mgather(tile, tensor, idx_tile, coalesce=coalesce, target=target)
            assert tile.valid_numpy().tobytes() == want[idx.reshape(-1) if coalesce == "row" else idx].tobytes()
            assert table.tobytes() == start.tobytes()
            continue
        updates = rng.integers(-9, 9, (4, cols) if coalesce == "row" else (2, 16)).astype(declared)
        tile.set(updates)
        flat_idx, flat_updates = idx.reshape(-1), updates if coalesce == "row" else updates.reshape(-1)
        if atomic == "none":
            want[flat_idx] = flat_updates
        else:
            {"add": np.add, "max": np.maximum, "min": np.minimum}[atomic].at(want, flat_idx, flat_updates)
        conflict = {"conflict": "default"} if target == "a5" else {}  # (A2/A3 has none: sequential)
        pto.mscatter(tensor, tile, idx_tile, coalesce=coalesce, atomic=atomic, target=target, **conflict)
        assert table.view(declared).tobytes() == want.tobytes(), memory_dtype

@pytest.mark.parametrize("target, op, coalesce", [
    (target, op, coalesce) for target in conftest.TARGETS for op in ("mgather", "mscatter") for coalesce in ("row", "elem")
    if (target, op, coalesce) != ("cpu", "mscatter", "row")])  # (the CPU simulator's MSCATTER walks element-wise)
def test_a_tile_op_over_memory_shrunk_in_place_is_refused_before_anything_is_read_or_written(target, op, coalesce):
    """A GlobalTensor keeps its array; numpy lets a caller shrink that array in place with ``refcheck=False`` (its
    own views then read freed memory). A call of a signature seen before, over the shrunk memory, must not reach the
    old extent: it is refused by the rule that holds shape and stride inside the memory, naming the elements left,
    and the shrunk array is left as it was. (The kept launch and the full path took the old extent: an index of 1000
    into the 32 elements left was read and written.)"""
    table = np.empty((64, 16), np.float32)  # (an array that owns its memory: numpy resizes no other)
    table[...] = np.arange(64 * 16).reshape(64, 16)
    tensor = pto.GlobalTensor(table)
    if coalesce == "row":
        tile, idx_tile = pto.Tile("float32", 2, 16), pto.Tile("int32", 1, 8, valid=(1, 2))
        far = [[60, 1] + [0] * 6]
    else:
        tile, idx_tile = pto.Tile("float32", 1, 8), pto.Tile("int32", 1, 8)
        far = [[1000, 1, 2, 3, 4, 5, 6, 7]]
    idx_tile.set(np.zeros((1, 8), np.int32))
    call = (lambda: pto.mgather(tile, tensor, idx_tile, coalesce=coalesce, target=target)) if op == "mgather" else (
        lambda: pto.mscatter(tensor, tile, idx_tile, coalesce=coalesce, target=target))
    for _ in range(3):  # the signature's kept launch made and run
        call()
    table.resize((2, 16), refcheck=False)  # 32 elements left
    idx_tile.set(np.array(far, np.int32))
    tile.fill(-1.0)
    left = table.copy()
    with pytest.raises(pto.ConstraintError, match=re.escape("but its memory holds 32 elements now (rule: shape / "
                                                            "stride stay inside the memory)")):
        call()
    assert table.tobytes() == left.tobytes()
    if op == "mgather":
        assert (tile.numpy() == -1.0).all()


def test_a_mid_word_half_table_after_a_kept_tile_add_takes_the_edge_format(monkeypatch):
    """A kept float16 Add launch works on the table's 32-bit words; a table of its signature that starts mid-word
    must take the full path's boundary-word form instead (chosen per call from the address: on x86 a misaligned
    word CAS would still add right, so the test watches which plan ran)."""
    from simt_pto.host import a5_planner, a5_runner, boundary_words
    plans = []

    def recorded(plan, build=a5_planner.mscatter_launches):
        plans.append(build(plan))
        return plans[-1]
    monkeypatch.setattr(a5_runner, "mscatter_launches", recorded)
    memory = np.zeros(65, np.float16)
    even = memory[:-1] if memory.ctypes.data % 4 == 0 else memory[1:]
    odd = memory[1:] if memory.ctypes.data % 4 == 0 else memory[:-1]
    src, idx_tile = pto.Tile("float16", 1, 16), pto.Tile("int32", 1, 16)
    src.set(np.arange(1, 17, dtype=np.float16).reshape(1, 16))
    idx = np.array([[0, 63, 5, 63, 1, 2, 3, 4, 62, 61, 0, 0, 7, 8, 9, 10]], np.int32)
    idx_tile.set(idx)
    for table in (even, even, odd, even, odd):
        memory[:] = 0
        pto.mscatter(pto.GlobalTensor(table), src, idx_tile, coalesce="elem", atomic="add", conflict="default",
                     target="a5")
        want = np.zeros(64, np.float16)
        np.add.at(want, idx.ravel(), src.valid_numpy().ravel())
        assert np.array_equal(table, want)
        assert memory[0 if table is odd else 64] == 0  # the byte pair outside the table is untouched
    # built: the first even table's plan (then kept), and each odd table's, in its boundary-word form
    assert [call.guard_name for call in plans] == [None] + [boundary_words.BoundaryWords.GUARD_NAME] * 2


def test_a_changed_tile_is_validated_again():
    table = pto.GlobalTensor(table_of())
    dst, idx_tile = row_tiles()
    pto.mgather(dst, table, idx_tile, target="a5")
    dst.valid_rows = 4  # fewer rows than the index tile names: the mode rule refuses it, cached or not
    first, again, third = first_and_cached_refusals(lambda: None, lambda: pto.mgather(dst, table, idx_tile,
                                                                                      target="a5"))
    assert first == again == third and first[0] is ConstraintError


def test_a_tile_op_on_a_read_only_table_is_refused_after_a_writable_one():
    src, idx_tile = row_tiles()
    frozen = np.zeros((64, 64), np.float32)
    frozen.flags.writeable = False
    first, again, third = first_and_cached_refusals(
        lambda: pto.mscatter(pto.GlobalTensor(np.zeros((64, 64), np.float32)), src, idx_tile, target="a5"),
        lambda: pto.mscatter(pto.GlobalTensor(frozen), src, idx_tile, target="a5"))
    assert first == again == third and first[0] is ConstraintError


@pytest.mark.parametrize("op", ["mgather", "mscatter"])
def test_tile_operands_that_overlap_are_refused_after_a_disjoint_call_and_nothing_is_written(op):
    table = np.zeros((64, 64), np.float32)
    gt = pto.GlobalTensor(table)
    tile, idx_tile = row_tiles()
    tile.fill(3)

    def call(data_tile, index_tile):
        if op == "mgather":
            return pto.mgather(data_tile, gt, index_tile, target="a5")
        return pto.mscatter(gt, data_tile, index_tile, target="a5")
    call(tile, idx_tile)
    aliased, _ = row_tiles()
    aliased.data = table[8:16].reshape(-1)  # the data tile's storage inside the table the op reads or writes
    first, again, third = first_and_cached_refusals(lambda: call(tile, idx_tile), lambda: call(aliased, idx_tile))
    assert first == again == third and first[0] is ConstraintError and "shares memory" in first[1]
    shared_idx = pto.Tile("int32", 1, 8)
    shared_idx.data = tile.data[:8].view(np.int32)  # the index tile inside the data tile
    first, again, third = first_and_cached_refusals(lambda: call(tile, idx_tile), lambda: call(tile, shared_idx))
    assert first == again == third and first[0] is ConstraintError and "UB tiles do not overlap" in first[1]
    before, tile_before = table.copy(), tile.data.copy()
    for bad in (lambda: call(aliased, idx_tile), lambda: call(tile, shared_idx)):
        with pytest.raises(ConstraintError):
            bad()
    assert np.array_equal(table, before) and np.array_equal(tile.data, tile_before)


def test_out_of_range_tile_indices_are_refused_after_a_clean_call():
    gt = pto.GlobalTensor(np.zeros((64, 64), np.float32))
    src, idx_tile = row_tiles()
    pto.mscatter(gt, src, idx_tile, target="a5")
    bad = pto.Tile.from_array(np.array([[0, 1, 2, 3, 4, 5, 6, 64]], np.int32))
    src.fill(1)
    first, again, third = first_and_cached_refusals(lambda: pto.mscatter(gt, src, idx_tile, target="a5"),
                                                    lambda: pto.mscatter(gt, src, bad, target="a5"))
    assert first == again == third and first[0] is OutOfBoundsError


@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_out_of_range_tile_gather_indices_are_refused_after_a_clean_call_and_nothing_is_written(coalesce):
    gt = pto.GlobalTensor(table_of())
    if coalesce == "row":
        dst, idx_tile = row_tiles()
        bad = pto.Tile.from_array(np.array([[0, 1, 2, 3, 4, 5, 6, 64]], np.int32))
    else:
        dst, idx_tile = pto.Tile("float32", 2, 8), pto.Tile("int32", 2, 8)
        bad = pto.Tile.from_array(np.arange(16, dtype=np.int32).reshape(2, 8) * 300)  # the last ones > 4096
    dst.fill(5)
    first, again, third = first_and_cached_refusals(
        lambda: pto.mgather(dst, gt, idx_tile, coalesce=coalesce, target="a5"),
        lambda: pto.mgather(dst, gt, bad, coalesce=coalesce, target="a5"))
    assert first == again == third and first[0] is OutOfBoundsError
    clean = dst.valid_numpy().copy()
    with pytest.raises(OutOfBoundsError):
        pto.mgather(dst, gt, bad, coalesce=coalesce, target="a5")
    assert np.array_equal(dst.valid_numpy(), clean)


def test_a_placed_tile_moved_onto_another_is_refused_after_a_clean_call():
    gt = pto.GlobalTensor(table_of())
    dst, idx_tile = row_tiles()
    dst.addr, idx_tile.addr = 0, 0x800
    pto.mgather(dst, gt, idx_tile, target="a5")
    idx_tile.addr = 0x100  # inside dst's 2 KB
    first, again, third = first_and_cached_refusals(lambda: None,
                                                    lambda: pto.mgather(dst, gt, idx_tile, target="a5"))
    assert first == again == third and first[0] is ConstraintError and "overlaps" in first[1]


def test_threads_running_tile_ops_of_one_signature_get_their_own_results():
    tables = [table_of(seed=s) for s in range(4)]
    barrier = threading.Barrier(4)
    failures = []

    def worker(k):
        dst, idx_tile = row_tiles()
        idx = np.random.default_rng(k).integers(0, 64, 8).astype(np.int32)
        idx_tile.set(idx.reshape(1, 8))
        gt = pto.GlobalTensor(tables[k])
        barrier.wait()
        for _ in range(100):
            pto.mgather(dst, gt, idx_tile, target="a5")
            if not np.array_equal(dst.valid_numpy(), tables[k][idx]):
                failures.append(k)
    _run_in_threads(worker, 4)
    assert not failures


def test_threads_adding_through_one_kept_tile_scatter_lose_no_update():
    """Tile scatters of one signature from several threads into one table: the kept launch's adds are atomic, so
    every update lands (oracle: the counts times the values)."""
    table = np.zeros((64, 32), np.int32)
    gt = pto.GlobalTensor(table)
    rows = np.array([[1, 5, 5, 9, 1, 63, 0, 5]], np.int32)
    calls = 200

    def worker(k):
        src, idx_tile = pto.Tile("int32", 8, 32), pto.Tile("int32", 1, 8)
        src.fill(k + 1)
        idx_tile.set(rows)
        for _ in range(calls):
            pto.mscatter(gt, src, idx_tile, coalesce="row", atomic="add", conflict="default", target="a5")
    _run_in_threads(worker, 4)
    want = np.zeros_like(table)
    for k in range(4):
        np.add.at(want, rows[0], np.full((8, 32), (k + 1) * calls, np.int32))
    assert np.array_equal(table, want)


# -- device arrays: the signature and checks of the GPU runners (the launches themselves run in
#    tests/test_device_arrays.py, on a GPU) ---------------------------------------------------------------------------

class FakeDeviceArray:
    """An object exporting ``__cuda_array_interface__`` (what the fast path reads of a device array)."""

    def __init__(self, shape, typestr="<f4", pointer=1 << 20, strides=None, stream=None, read_only=False):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (pointer, read_only),
                                         "strides": strides, "version": 3}
        if stream is not None:
            self.__cuda_array_interface__["stream"] = stream


def _device_signature(table, idx, options, src=None):
    """The call and operands :func:`~simt_pto.host.kept_launch.device_operands` reads of a whole-array call with
    ``options`` (coalesce, then atomic: a scatter with ``src``)."""
    from simt_pto.call import gather_policy, scatter_policy
    from simt_pto.host.kept_launch import device_operands
    if src is None:
        return device_operands(gather_policy(options[0], "undefined", "a5", None, None, True, None), table, idx)
    policy = scatter_policy(options[0], options[1], "undefined", "last", "a5", None, None, True, "auto", None)
    return device_operands(policy, table, idx, src)


def test_a_device_signature_holds_what_validation_reads_and_not_the_address():
    options = ("elem", "add")
    table, idx, src = FakeDeviceArray((64, 8)), FakeDeviceArray((100,), "<i4", 1 << 24), FakeDeviceArray((100,))
    key, operands = _device_signature(table, idx, options, src)
    assert operands == {"table": (1 << 20, 64 * 8 * 4), "src": (1 << 20, 400), "idx": (1 << 24, 400)}
    moved = _device_signature(FakeDeviceArray((64, 8), pointer=(1 << 20) + 4096), idx, options, src)
    assert moved[0] == key and moved[1]["table"] == ((1 << 20) + 4096, 2048)
    changed = [FakeDeviceArray((64, 9)), FakeDeviceArray((64, 8), "<i4"), FakeDeviceArray((64, 8), read_only=True),
               FakeDeviceArray((64, 8), pointer=(1 << 20) + 4)]  # the last: another Row move unit / element format
    assert all(_device_signature(t, idx, options, src)[0] != key for t in changed)
    assert _device_signature(table, idx, ("elem", "max"), src)[0] != key
    assert _device_signature(table, idx, ("elem", "add"))[0] != key  # a gather of the same arrays
    assert _device_signature(table, idx, (pto.Coalesce.ELEM, pto.ScatterAtomicOp.ADD), src)[0] == key  # one call


@pytest.mark.parametrize("table, idx", [
    (FakeDeviceArray((8, 8), strides=(64, 4)), FakeDeviceArray((4,), "<i4")),        # strides given: full path
    (FakeDeviceArray((8, 8), stream=7), FakeDeviceArray((4,), "<i4")),               # a stream of its own
    (FakeDeviceArray((8, 8)), FakeDeviceArray((4,), "<i8")),                         # int64: narrowed on the host
    (FakeDeviceArray((0, 8), pointer=0), FakeDeviceArray((4,), "<i4")),              # empty
    (np.zeros((8, 8), np.float32), FakeDeviceArray((4,), "<i4")),                    # host table
])
def test_device_calls_a_runner_cannot_serve_have_no_signature(table, idx):
    assert _device_signature(table, idx, ("elem",)) is None


def test_the_last_owner_paths_launches_run_in_order_on_an_owner_array_of_their_own(monkeypatch):
    """A device kept launch of several steps (the Conflict::Last owner path: reset, claim, write) puts each call's
    pointers and its owner array's in place, launch by launch; the owner array is made once and kept for the next
    call, and a call that starts while another holds it makes its own."""
    from simt_pto.host.kept_launch import KeptLaunch
    monkeypatch.setattr(kept_launch, "imported", lambda name: types.SimpleNamespace(synchronize=lambda: None))
    made = []

    def new_device_array(template, size, dtype=None):
        made.append((template, size, np.dtype(dtype)))
        return FakeDeviceArray((size,), np.dtype(dtype).str, pointer=(1 << 30) + len(made) * 4096)
    monkeypatch.setattr(kept_launch, "new_device_array", new_device_array)
    launched = []
    inner = []
    steps = (("reset", ("owner",)), ("claim", ("owner", "idx")), ("write", ("table", "src", "owner")))

    def launch(name, names):
        def run(*pointers):
            launched.append((name, dict(zip(names, pointers))))
            if inner and name == "claim":  # another call of the same signature while this one holds the owners
                inner.pop()()
        return run
    kept = KeptLaunch(tuple((launch(name, names), names) for name, names in steps),
                      made={"owner": (64, np.dtype(np.int32))}, apart=(("table", "idx"), ("table", "src")),
                      device=True)
    table, idx, src = 1 << 20, 1 << 24, 1 << 26
    pointers = {"table": (table, 4096), "idx": (idx, 400), "src": (src, 400)}
    first_owner, second_owner = (1 << 30) + 4096, (1 << 30) + 2 * 4096
    assert kept.run_device(pointers, "template") is True
    assert launched == [("reset", {"owner": first_owner}), ("claim", {"owner": first_owner, "idx": idx}),
                        ("write", {"table": table, "src": src, "owner": first_owner})]
    assert made == [("template", 64, np.dtype(np.int32))]
    launched.clear()
    assert kept.run_device(pointers, "template") is True  # the spare owner array: nothing made
    assert [p["owner"] for _, p in launched] == [first_owner] * 3 and len(made) == 1
    launched.clear()
    inner.append(lambda: kept.run_device(pointers, "template"))
    assert kept.run_device(pointers, "template") is True
    assert [(n, p["owner"]) for n, p in launched] == [("reset", first_owner), ("claim", first_owner),
                                                       ("reset", second_owner), ("claim", second_owner),
                                                       ("write", second_owner), ("write", first_owner)]
    launched.clear()
    assert kept.run_device({**pointers, "src": (table + 4000, 400)}, "template") is None  # shares table bytes
    assert launched == []


class FakeView:
    """What a GPU plan's launch holds for a device array: a pointer, a size and a dtype."""

    def __init__(self, pointer, size, dtype):
        self.device_ctypes_pointer = types.SimpleNamespace(value=pointer)
        self.size, self.dtype = size, np.dtype(dtype)
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": self.dtype.str, "data": (pointer, False),
                                         "version": 3}


def _device_owner_plan(idx_at=1 << 24):
    """A dense owner plan (reset, claim, write) built for the host, its arrays replaced by device-array stand-ins
    as the GPU's plan holds them: the table at 1 << 20, the source at 1 << 26, the indices at ``idx_at``, the owners
    at 1 << 28."""
    table = np.zeros((64, 8), np.float32)
    idx = np.random.default_rng(5).integers(0, 64, 200).astype(np.int32)
    src = np.ones((200, 8), np.float32)
    host = in_memory.scatter_plan(table, src, idx, coalesce="row", oob="skip", last_path="owner", owner="dense",
                                  backend="multicore")
    fakes = {"table": FakeView(1 << 20, table.size, np.float32), "src": FakeView(1 << 26, src.size, np.float32),
             "idx": FakeView(idx_at, idx.size, np.uint32), "owner": FakeView(1 << 28, 64, np.int32)}
    steps = tuple(spec.with_args(**{n: fakes[n] for n, _ in spec.args if n in fakes}) for spec in host.steps)
    from simt_pto.launch_spec import CallPlan
    pointers = {"table": (1 << 20, table.nbytes), "src": (1 << 26, src.nbytes), "idx": (1 << 24, idx.nbytes)}
    return CallPlan(steps), pointers, host


def test_a_device_plan_of_several_launches_is_kept_when_each_takes_its_operands_whole(monkeypatch):
    """``in_memory._takes_whole`` over the owner path's three launches: every operand taken whole by the launches
    that take it; an index view that starts elsewhere is not. ``a5_runner.keep_gpu`` then keeps the three launches
    (:func:`simt_pto.kernels.a5.simt.gpu_launchers`, stood in for) with the owner array made per call, sized as the
    plan's."""
    from simt_pto.host import a5_runner
    from simt_pto.kernels.a5 import simt
    call, pointers, host = _device_owner_plan()
    assert in_memory._takes_whole(call, pointers)
    moved, _, _ = _device_owner_plan(idx_at=(1 << 24) + 64)
    assert not in_memory._takes_whole(moved, pointers)
    assert not in_memory._takes_whole(call, {**pointers, "dst": (1 << 30, 4)})  # an operand no launch takes
    asked = []

    def fake_gpu_launchers(plan, operands, made=()):
        asked.append((plan, operands, made))
        return tuple((spec.kernel, ()) for spec in plan.steps)
    monkeypatch.setattr(simt, "gpu_launchers", fake_gpu_launchers)
    kept = a5_runner.keep_gpu(call, types.SimpleNamespace(checks_range=False), ("table", "idx", "src"),
                              apart=(("table", "idx"), ("table", "src")))
    assert asked == [(call, ("table", "idx", "src"), ("owner",))]
    assert kept.made == {"owner": (64, np.dtype(np.int32))} and kept.device
    assert [k for k, _ in kept.steps] == ["simt_mscatter_owner_reset_kernel", "simt_mscatter_row_owner_claim_kernel",
                                          "simt_mscatter_row_owner_write_kernel"]


def test_a_first_torch_call_under_inference_mode_leaves_plain_tensors_their_kept_launch(monkeypatch, no_full_path):
    """The dispatch keys of a plain dense tensor, read once per process, are read outside inference mode: a process
    whose first torch call ran under ``torch.inference_mode()`` still runs a plain tensor's repeated scatter through
    its kept launch (it took the full path for the life of the process when the keys were an inference tensor's)."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch_rules, "PLAIN_KEYS", [])
    with torch.inference_mode():
        plain, keys = torch_rules.plain_keys(torch)
    assert plain == keys(torch.from_numpy(np.zeros(4, np.float32)))
    table = torch.zeros(16 * 8)
    src, idx = torch.ones(4), torch.tensor([3, 9, 3, 0], dtype=torch.int32)
    pto.scatter(table, src, idx, coalesce="elem", atomic="add", target="a5")  # (keeps the launch)
    no_full_path()
    pto.scatter(table, src, idx, coalesce="elem", atomic="add", target="a5")
    want = np.zeros(16 * 8, np.float32)
    np.add.at(want, [3, 9, 3, 0, 3, 9, 3, 0], 1.0)
    assert np.array_equal(table.numpy(), want)


def test_a_repeated_multicore_gather_of_torch_tensors_checks_its_indices_on_its_threads(tune, no_full_path):
    """The in-launch index check of a repeated gather, with PyTorch CPU tensors (their kept launch is numpy's)."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    tune(elem_gather_one_thread_elems=64)
    table = torch.arange(512 * 16, dtype=torch.float32)
    good = torch.from_numpy(np.random.default_rng(12).integers(0, table.numel(), 16 * 4096).astype(np.int32))
    assert torch.equal(pto.gather(table, good, coalesce="elem"), table[good.long()])
    no_full_path()
    assert torch.equal(pto.gather(table, good, coalesce="elem"), table[good.long()])
    bad = good.clone()
    bad[-3] = table.numel()
    with pytest.raises(AssertionError, match="took the full path"):
        pto.gather(table, bad, coalesce="elem")


def test_the_gpu_launchers_of_a_dense_owner_plan_take_the_operands_and_the_owners_by_name(monkeypatch):
    """What :func:`simt_pto.kernels.a5.simt.gpu_launchers` binds of a Conflict::Last owner plan (built here for the
    host, with numpy arrays where the GPU's plan has device arrays): each launch the operands and owner array it
    takes, in its argument order; a compact owner plan, whose launches also take the slots it numbered on the host
    from one call's indices, none."""
    from simt_pto.kernels.a5 import direct_launch, simt
    bound = []

    def fake_direct_launch(dispatcher, grid, block, values, operands):
        bound.append((dispatcher, operands))
        return dispatcher
    monkeypatch.setattr(direct_launch, "direct_launch", fake_direct_launch)
    monkeypatch.setattr(simt, "compile_kernel", lambda name, policy, family: name)
    rng = np.random.default_rng(5)
    table = np.zeros((64, 8), np.float32)
    idx = rng.integers(0, 64, 200).astype(np.int32)
    src = np.ones((200, 8), np.float32)
    dense = in_memory.scatter_plan(table, src, idx, coalesce="row", last_path="owner", owner="dense",
                                   backend="multicore")
    steps = simt.gpu_launchers(dense, ("table", "idx", "src"), made=("owner",))
    assert [(kernel, names) for kernel, names in steps] == [
        ("simt_mscatter_owner_reset_kernel", ("owner",)),
        ("simt_mscatter_row_owner_claim_kernel", ("owner", "idx")),
        ("simt_mscatter_row_owner_write_kernel", ("table", "src", "owner"))]
    for spec, (_, operands) in zip(dense.launches, bound):  # each pointer's place: its argument's, after `launch`
        names = [name for name, _ in spec.args]
        assert [names[at - 1] for at in operands] == [n for n in names if n in ("table", "idx", "src", "owner")]
    assert simt.gpu_launchers(dense, ("table", "idx", "src")) is None  # the owners are neither operand nor made
    compact = in_memory.scatter_plan(table, src, idx, coalesce="row", last_path="owner", owner="compact",
                                     backend="multicore")
    assert simt.gpu_launchers(compact, ("table", "idx", "src"), made=("owner",)) is None


def test_a_device_scatter_runner_checks_overlap_and_indices_before_it_launches(monkeypatch):
    from simt_pto.host import kept_launch
    from simt_pto.host.kept_launch import KeptLaunch
    monkeypatch.setattr(kept_launch, "imported", lambda name: types.SimpleNamespace(synchronize=lambda: None))
    launched = []

    class Scan:
        refuse = False

        def out_of_range(self, pointer):
            return self.refuse

    scan = Scan()
    kept = KeptLaunch(((lambda *pointers: launched.append(pointers), ("table", "idx", "src")),),
                      apart=(("table", "idx"), ("table", "src")), scan=scan, device=True)

    def run(table_at, idx_at, src_at):
        return kept.run_device({"table": (table_at, 4096), "idx": (idx_at, 400), "src": (src_at, 400)}, None)
    table_at = 1 << 20
    assert run(table_at, table_at + 4096, table_at + 8192) is True
    assert launched == [(table_at, table_at + 4096, table_at + 8192)]
    for idx_at, src_at in ((table_at + 4092, table_at + 8192), (table_at + 8192, table_at - 399)):
        assert run(table_at, idx_at, src_at) is None  # one byte shared
    scan.refuse = True
    assert run(table_at, table_at + 4096, table_at + 8192) is None
    assert len(launched) == 1
