"""Conflict::Last, Elem, on the dense owner path (host/large_a5.py, issue 24): each owner is the largest flat source
position ``p`` that writes its slot (an atomic max), in 4 bytes while every position fits, and the write pass reads
``src[p]``. The result must be the serial loop's bit for bit, whatever the value bits (all ones, NaN payloads, -0.0);
the oracle is the loop itself, on raw bits, or the reference's last writer per slot.
"""
from __future__ import annotations

import numpy as np
import pytest

import simt_pto as pto
from simt_pto import geometry
from simt_pto.host import large, large_a5
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
    CallCache.clear_all()  # a signature that has run keeps its launches (host/fast_path.py): this one builds them
    table, src, idx = _case(rng, dtype, oob)
    want = serial_last(as_bits(table), as_bits(src), idx, "elem", oob)
    plan = large.scatter_plan(table.copy(), src, idx, coalesce="elem", oob=oob, last_path="owner", owner="dense")
    reset, claim, write = plan.launches
    assert [reset.kernel, claim.kernel, write.kernel] == [
        "simt_mscatter_owner_reset_kernel", "simt_mscatter_elem_owner_claim_kernel",
        "simt_mscatter_elem_owner_write_kernel"]
    assert reset.arguments["owner"].dtype == np.int32
    for _ in range(2):  # the full path, then the kept launches (host/fast_path.py)
        got = table.copy()
        pto.scatter(got, src, idx, coalesce="elem", oob=oob, conflict="last", last_path="owner")
        np.testing.assert_array_equal(as_bits(got), want)


def test_owners_widen_past_int32_positions():
    """A position owner is int32 while every flat position fits, int64 from ``2**31`` positions on."""
    assert large_a5._owner_dtype(2 ** 31 - 1) == np.int32 and large_a5._owner_dtype(2 ** 31) == np.int64


@pytest.mark.parametrize("dtype", ["float16", "float32", "int8"])
def test_the_owner_path_on_the_workers_with_prefetch(rng, dtype):
    """A claim past CPU_ONE_WORKER_CLAIMS updates runs on the worker threads with atomics, and one over at least
    CLAIM_PREFETCH_MIN_SLOTS owners prefetches them: against the reference's last writer per slot (indices with
    repeats, the table's last slots untouched), the full path and then the kept launches."""
    from simt_pto import reference
    from simt_pto.kernels.a5.device import CLAIM_PREFETCH_MIN_SLOTS
    CallCache.clear_all()
    slots = CLAIM_PREFETCH_MIN_SLOTS + 17
    n = 2 * large_a5.CPU_ONE_WORKER_CLAIMS + 3
    idx = rng.integers(0, slots - 5, n).astype(np.int32)
    src = random_values(rng, n, dtype)
    table = random_values(rng, slots, dtype)
    want = as_bits(reference.last_writer_scatter(table, idx.astype(np.int64), src))
    assert large_a5.owner_layout(slots, n) == "dense"
    for _ in range(2):
        got = table.copy()
        pto.scatter(got, src, idx, coalesce="elem", conflict="last", last_path="owner")
        np.testing.assert_array_equal(as_bits(got), want)


def _shape(launch):
    return launch.grid, launch.geometry.launch_warps


def _flat(count):
    return geometry.flat_grid(count), geometry.MAX_WARPS


def test_small_owner_passes_run_on_the_calling_thread():
    """On ``multicore`` a reset or write over at most CPU_ONE_WORKER_SLOTS slots, and a claim of at most
    CPU_ONE_WORKER_CLAIMS updates, is one block of one warp (the calling thread walks the items in order, no hand-off
    to the worker pool); larger passes, and every pass of a plan for another backend, keep the flat grid. Planning
    runs nothing."""
    for cap in (1 << 10, large_a5.CPU_ONE_WORKER_SLOTS + 1):
        for n in (1 << 12, large_a5.CPU_ONE_WORKER_CLAIMS + 1):
            table, src = np.zeros(cap, np.float32), np.ones(n, np.float32)
            idx = (np.arange(n, dtype=np.int64) * 7919 % cap).astype(np.int32)
            for backend in ("multicore", "simulator"):
                reset, claim, write = large.scatter_plan(table, src, idx, coalesce="elem", last_path="owner",
                                                         owner="dense", backend=backend).launches
                cpu = backend == "multicore"
                slots = (1, 1) if cpu and cap <= large_a5.CPU_ONE_WORKER_SLOTS else _flat(cap)
                claims = (1, 1) if cpu and n <= large_a5.CPU_ONE_WORKER_CLAIMS else _flat(n)
                assert (_shape(reset), _shape(claim), _shape(write)) == (slots, claims, slots), (cap, n, backend)
