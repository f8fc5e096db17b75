"""Conflict::Last, Elem, on the dense owner path: owner keys that carry their value (host/large_a5.py, issue 24).

An Elem owner is ``p << 32 | bits(src[p])``: the atomic max that picks the largest flat source position ``p`` carries
the winner's raw bits, and the write pass reads the owners alone. Past ``2**31`` positions the key would not fit;
those calls take the Row owner kernels with one-element rows. Both must give the serial loop's result bit for bit,
whatever the value bits (all ones, NaN payloads, -0.0); the oracle is the loop itself, on raw bits.
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
@pytest.mark.parametrize("form", ["keys", "one-element rows"])
def test_the_elem_owner_path_gives_the_serial_bits(monkeypatch, rng, dtype, oob, form):
    """Owner keys carry every value bit; where a position would not fit the key (forced here from 0 positions on),
    the call runs the Row owner kernels over one-element rows, flat position ``r * cols + c`` as the row: the same
    bits."""
    if form == "one-element rows":
        monkeypatch.setattr(large_a5, "PACKED_OWNER_MAX_UPDATES", 0)
    CallCache.clear_all()  # a signature that has run keeps its launches (host/fast_path.py): this one builds them
    table, src, idx = _case(rng, dtype, oob)
    want = serial_last(as_bits(table), as_bits(src), idx, "elem", oob)
    plan = large.scatter_plan(table.copy(), src, idx, coalesce="elem", oob=oob, last_path="owner", owner="dense")
    coalesce = "elem" if form == "keys" else "row"
    assert [launch.kernel for launch in plan.launches] == [
        "simt_mscatter_owner_reset_kernel", f"simt_mscatter_{coalesce}_owner_claim_kernel",
        f"simt_mscatter_{coalesce}_owner_write_kernel"]
    if form == "keys":
        assert plan.launches[0].arguments["owner"].dtype == np.int64  # p << 32 | bits
    else:
        assert plan.launches[1].arguments["valid_rows"] == idx.size
    got = table.copy()
    pto.scatter(got, src, idx, coalesce="elem", oob=oob, conflict="last", last_path="owner")
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
