"""Conflict::Last, Elem, on the dense owner path (host/a5_planner.py, issue 24): each owner is the largest flat source
position ``p`` that writes its slot (an atomic max), in 4 bytes while every position fits, and the write pass reads
``src[p]``. The result must be the serial loop's bit for bit, whatever the value bits (all ones, NaN payloads, -0.0);
the oracle is the loop itself, on raw bits, or the reference's last writer per slot.
"""
from __future__ import annotations

import numpy as np
import pytest

import simt_pto as pto
from simt_pto import geometry
from simt_pto.host import a5_planner, in_memory, kept_launch, tuning
from simt_pto.plan import CallCache

from conftest import as_bits, random_values
from oracles import serial_last

DTYPES = ("int8", "uint8", "int16", "float16", "bfloat16", "int32", "uint32", "float32")
SCATTER_OOB = ("undefined", "skip", "clamp", "wrap")


def _case(rng, dtype, oob, shape=(12, 10)):
    """Many writers per slot (120 updates into 23 slots), every value's bits from the whole range, the highest bit
    patterns (all ones: a NaN for floats, -1 for signed integers) among them; out-of-range and negative indices
    unless UNDEFINED."""
    cap = 23
    idx = rng.integers(-2 if oob != "undefined" else 0, cap + (9 if oob != "undefined" else 0), shape)
    src = random_values(rng, shape, dtype)
    bits = as_bits(src).reshape(-1)
    bits[::7] = np.iinfo(bits.dtype).max
    bits[3::11] = 1 << (8 * bits.itemsize - 1)  # -0.0 for floats, the most negative integer
    table = random_values(rng, (cap,), dtype)
    return table, src, idx.astype(np.int32)


@pytest.mark.parametrize("oob", SCATTER_OOB)
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_elem_owner_path_gives_the_serial_bits(rng, dtype, oob):
    """Elem kernels over int32 position owners, the full path and then the signature's kept launches: the serial
    loop's bits."""
    CallCache.clear_all()  # a signature that has run keeps its launches (host/kept_launch.py): this one builds them
    table, src, idx = _case(rng, dtype, oob)
    want = serial_last(as_bits(table), as_bits(src), idx, "elem", oob)
    plan = in_memory.scatter_plan(table.copy(), src, idx, coalesce="elem", oob=oob, last_path="owner", owner="dense")
    reset, claim, write = plan.launches
    assert [reset.kernel, claim.kernel, write.kernel] == [
        "simt_mscatter_owner_reset_kernel", "simt_mscatter_elem_owner_claim_kernel",
        "simt_mscatter_elem_owner_write_kernel"]
    assert reset.arguments["owner"].dtype == np.int32
    for _ in range(2):  # the full path, then the kept launches (host/kept_launch.py)
        got = table.copy()
        pto.scatter(got, src, idx, coalesce="elem", oob=oob, conflict="last", last_path="owner")
        np.testing.assert_array_equal(as_bits(got), want)


def test_owners_widen_past_int32_positions():
    """A position owner is int32 while every flat position fits, int64 from ``2**31`` positions on."""
    assert a5_planner._owner_dtype(2 ** 31 - 1) == np.int32 and a5_planner._owner_dtype(2 ** 31) == np.int64


@pytest.mark.parametrize("claim", ["shared", "copies"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "int8"])
def test_the_owner_path_on_the_workers(rng, monkeypatch, tune, dtype, claim):
    """A claim past owner_claim_one_worker_updates updates runs on the worker threads: into one shared owner array with
    atomics, prefetching over at least CLAIM_PREFETCH_MIN_SLOTS owners (``shared``), or into a copy of the owners per
    worker (``copies``, :func:`a5_planner._claim_copies`). Against the reference's last writer per slot (indices with
    repeats, the table's last slots untouched), the full path and then the kept launches."""
    from simt_pto import reference
    from simt_pto.kernels.tuning import CLAIM_PREFETCH_MIN_SLOTS
    from simt_pto.kernels.a5.simt import multicore_workers
    CallCache.clear_all()
    if claim == "shared":
        tune(owner_copy_max_bytes=0)
    slots = CLAIM_PREFETCH_MIN_SLOTS + 17
    n = 2 * tuning.current().owner_claim_one_worker_updates + 3
    idx = rng.integers(0, slots - 5, n).astype(np.int32)
    src = random_values(rng, n, dtype)
    table = random_values(rng, slots, dtype)
    want = as_bits(reference.last_writer_scatter(table, idx.astype(np.int64), src))
    assert a5_planner.owner_layout(slots, n) == "dense"
    claim_launch = in_memory.scatter_plan(table, src, idx, coalesce="elem", last_path="owner",
                                      owner="dense", backend="multicore").launches[1]
    copies = multicore_workers() if claim == "copies" and multicore_workers() > 1 else 1
    assert claim_launch.kernel == ("simt_mscatter_elem_private_owner_claim_kernel" if copies > 1
                                   else "simt_mscatter_elem_owner_claim_kernel")
    assert claim_launch.arguments["owner"].size == copies * slots
    for _ in range(2):
        got = table.copy()
        pto.scatter(got, src, idx, coalesce="elem", conflict="last", last_path="owner")
        np.testing.assert_array_equal(as_bits(got), want)


@pytest.mark.parametrize("writers", ["many", "one"])
@pytest.mark.parametrize("oob", SCATTER_OOB)
@pytest.mark.parametrize(("cpu_or_simulator_backend", "dtype"),  # the element widths the write reads; one on the
                         [("multicore", "int8"), ("multicore", "bfloat16"), ("multicore", "float32"),  # simulator
                          ("simulator", "float32")], indirect=["cpu_or_simulator_backend"])
def test_the_owner_copies_give_the_serial_bits(cpu_or_simulator_backend, rng, monkeypatch, dtype, oob, writers):
    """The claim into a copy of the owners per block, forced onto small shapes (3 blocks, so that the CPU workers
    share blocks, and the simulator runs it with its CUDA atomics): each block claims its share of the positions into
    its own copy, and the write takes each slot's largest owner. Many writers per slot (:func:`_case`), or one
    (every position then wins its slot, so none may be missed). The serial loop's bits, full path then kept
    launches."""
    CallCache.clear_all()
    monkeypatch.setattr(a5_planner, "_claim_copies", lambda updates, slots, owner_dtype, backend: 3)
    table, src, idx = _case(rng, dtype, oob, shape=(17, 10))
    if writers == "one":
        table = random_values(rng, (211,), dtype)
        idx = rng.permutation(table.size)[:idx.size].astype(np.int32).reshape(idx.shape)
    want = serial_last(as_bits(table), as_bits(src), idx, "elem", oob)
    _, claim, write = in_memory.scatter_plan(table, src, idx, coalesce="elem", oob=oob, last_path="owner",
                                         owner="dense").launches
    assert (claim.kernel, write.kernel) == ("simt_mscatter_elem_private_owner_claim_kernel",
                                            "simt_mscatter_elem_private_owner_write_kernel")
    assert (claim.grid, write.arguments["copies"], claim.arguments["owner"].size) == (3, 3, 3 * table.size)
    for _ in range(2):
        got = table.copy()
        pto.scatter(got, src, idx, coalesce="elem", oob=oob, conflict="last", last_path="owner")
        np.testing.assert_array_equal(as_bits(got), want)


@pytest.mark.parametrize("where", ["first", "block edge", "last", "negative"])
def test_the_private_claim_refuses_an_index_past_the_table_before_any_write(rng, monkeypatch, where):
    """Under UNDEFINED (out-of-range indices refused), the repeated call of a signature whose claim takes private
    owners leaves the range check to that claim: an index past the table, at any position (the first and last of
    the source, the first of a block's share, a negative index: past the table after the uint32 cast), sets its
    block's ``refused`` flag, and the call is refused with the full path's error before the write: the table, the
    source and the indices keep their bits."""
    from simt_pto.errors import OutOfBoundsError
    monkeypatch.setattr(a5_planner, "_claim_copies", lambda updates, slots, owner_dtype, backend: 3)
    table = random_values(rng, (23,), "float32")
    src = random_values(rng, (17, 10), "float32")
    clean = rng.integers(0, 23, (17, 10)).astype(np.int32)
    bad = clean.copy()
    at = {"first": 0, "block edge": 170 // 3, "last": 169, "negative": 85}[where]
    bad.reshape(-1)[at] = -1 if where == "negative" else 23

    def refusal():
        got, src_before, bad_before = table.copy(), src.copy(), bad.copy()
        with pytest.raises(OutOfBoundsError) as info:
            pto.scatter(got, src, bad, coalesce="elem", conflict="last", last_path="owner")
        np.testing.assert_array_equal(as_bits(got), as_bits(table))
        np.testing.assert_array_equal(as_bits(src), as_bits(src_before))
        np.testing.assert_array_equal(bad, bad_before)
        return str(info.value)

    CallCache.clear_all()
    first = refusal()  # the full path's range check
    pto.scatter(table.copy(), src, clean, coalesce="elem", conflict="last", last_path="owner")  # keeps the launches

    def no_range_pass(*args):
        raise AssertionError("the kept launches ran a range pass before the claim")
    monkeypatch.setattr(kept_launch, "all_below", no_range_pass)
    assert first == refusal() == refusal()


def test_owner_copies_are_taken_for_few_owners_on_the_workers(monkeypatch):
    """A copy of the owners per worker on ``multicore``, only for a claim of more than owner_copy_min_updates
    updates on several workers into owners of at most owner_copy_max_bytes, with at least
    owner_copy_updates_per_slot updates per owner of all copies."""
    from simt_pto.host import a5_planner as host
    monkeypatch.setattr(host, "multicore_workers", lambda: 2)
    i32, many = np.dtype(np.int32), 1 << 22
    most = tuning.current().owner_copy_max_bytes // 4
    assert host._claim_copies(many, most, i32, "multicore") == 2
    assert host._claim_copies(many, most + 1, i32, "multicore") == 1  # a copy past the cache budget
    assert host._claim_copies(many, most // 2 + 1, np.dtype(np.int64), "multicore") == 1
    for backend in ("gpu", "simulator"):
        assert host._claim_copies(many, most, i32, backend) == 1
    least = tuning.current().owner_copy_min_updates
    assert host._claim_copies(least, 64, i32, "multicore") == 1  # the claim runs on the calling thread alone
    assert host._claim_copies(least + 1, 64, i32, "multicore") == 2
    slots = (least + 1) // (2 * tuning.current().owner_copy_updates_per_slot)
    assert host._claim_copies(least + 1, slots, i32, "multicore") == 2
    assert host._claim_copies(least + 1, slots + 1, i32, "multicore") == 1  # the copies' passes would weigh
    monkeypatch.setattr(host, "multicore_workers", lambda: 1)
    assert host._claim_copies(many, 64, i32, "multicore") == 1


def _shape(launch):
    return launch.grid, launch.geometry.launch_warps


def _flat(count):
    return geometry.flat_grid(count), geometry.MAX_WARPS


def test_small_owner_passes_run_on_the_calling_thread(monkeypatch):
    """On ``multicore`` a reset over at most owner_reset_one_worker_slots owners, a write over at most owner_write_one_worker_slots
    slots, and a claim of at most owner_claim_one_worker_updates updates into one shared owner array, is one block of one warp
    (the calling thread walks the items in order, no hand-off to the worker pool); a claim into a copy of the owners
    per worker is a block of one warp per copy; larger passes, and every pass of a plan for another backend, keep the
    flat grid. Planning runs nothing."""
    monkeypatch.setattr(a5_planner, "multicore_workers", lambda: 2)
    one, copies = (1, 1), (2, 1)
    few, some = 1 << 10, tuning.current().owner_write_one_worker_slots + 1
    many = tuning.current().owner_copy_max_bytes // 4 + 1  # int32 owners past what a copy may hold
    least, claims = tuning.current().owner_copy_min_updates, tuning.current().owner_claim_one_worker_updates
    most = tuning.current().owner_copy_max_bytes // 4  # int32 owners a copy may hold
    per_slot = tuning.current().owner_copy_updates_per_slot
    assert some < tuning.current().owner_reset_one_worker_slots < most < many
    assert 2 * some * per_slot > least + 1 and 2 * most * per_slot > claims + 1  # too few updates a slot for copies
    cases = [  # (slots, updates): (reset, claim, write), each on one thread or the flat grid, copies of the owners
        ((few, 1 << 12), (one, one, one), 1),
        ((few, least), (one, one, one), 1),
        ((few, least + 1), (one, copies, one), 2),
        ((few, claims + 1), (one, copies, one), 2),
        ((some, least + 1), (one, one, _flat(some)), 1),  # too few updates per owner for copies: shared, one thread
        ((most, claims + 1), (_flat(most), _flat(claims + 1), _flat(most)), 1),  # ... shared, on the workers
        ((many, 1 << 12), (_flat(many), one, _flat(many)), 1),
        ((many, claims + 1), (_flat(many), _flat(claims + 1), _flat(many)), 1),
    ]
    for (cap, n), (reset_shape, claim_shape, write_shape), owner_copies in cases:
        table, src = np.zeros(cap, np.float32), np.ones(n, np.float32)
        idx = (np.arange(n, dtype=np.int64) * 7919 % cap).astype(np.int32)
        for backend in ("multicore", "simulator"):
            reset, claim, write = in_memory.scatter_plan(table, src, idx, coalesce="elem", last_path="owner",
                                                     owner="dense", backend=backend).launches
            if backend == "multicore":
                want = (reset_shape, claim_shape, write_shape)
            else:
                owner_copies = 1
                want = (_flat(cap), _flat(n), _flat(cap))
            assert (_shape(reset), _shape(claim), _shape(write)) == want, (cap, n, backend)
            assert claim.arguments["owner"].size == owner_copies * cap
            assert write.arguments.get("copies", 1) == owner_copies
