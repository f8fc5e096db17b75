"""Conflict::Last on the owner path, sized by the updates (host/a5_planner.py, issue 21 item 5).

The owner path keeps one owner per table slot (``dense``) or one per distinct slot the updates reach
(``compact``), as ``a5_planner.owner_layout`` chooses. Both must give the sequential result bit for bit, and a
few updates into a large table must cost memory in the number of updates, not in the table's size.
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import simt_pto as pto
from simt_pto.host import a5_planner, tuning
from simt_pto.enums import IndexRule

from conftest import as_bits, random_values, sentinel_bits
from oracles import serial_last

SCATTER_OOB = ("undefined", "skip", "clamp", "wrap")
MARGIN = 5
"""Guard rows (Row) / elements (Elem) on each side of the table, holding a sentinel."""


class Recorder:
    """Records ``(kernel, grid)`` of every launch the A5 runner makes (``kernels.a5.simt.launch``), and runs it."""

    def __init__(self, monkeypatch):
        from simt_pto.kernels.a5 import simt
        from simt_pto.plan import CallCache
        CallCache.clear_all()  # the next call builds its launches (a repeated signature runs the kept ones)
        self.launches = []
        real = simt.launch

        def launch(spec, backend, args=None):
            self.launches.append((spec.kernel, spec.grid))
            real(spec, backend, args)

        monkeypatch.setattr(simt, "launch", launch)

    def names(self):
        return [name for name, _ in self.launches]


def _guarded(values, margin=MARGIN):
    """``values`` inside a buffer with ``margin`` sentinel rows / elements on each side: (buffer, table view)."""
    bits = as_bits(values)
    buf = np.empty((bits.shape[0] + 2 * margin,) + bits.shape[1:], dtype=bits.dtype)
    buf[...] = sentinel_bits(f"uint{8 * bits.dtype.itemsize}")
    buf[margin:-margin] = bits
    return buf, buf[margin:-margin].view(values.dtype)


def _case(rng, coalesce, dtype, oob, cols):
    """A Last scatter with duplicates, untouched slots and (unless UNDEFINED) out-of-range and negative indices."""
    cap = 40
    n = 60
    hi = cap if oob == "undefined" else cap + 30
    idx = rng.integers(-3 if oob != "undefined" else 0, hi, n).astype(np.int32)
    idx[5] = idx[17] = idx[40]  # a slot written three times
    idx = np.where((idx >= 30) & (idx < cap), 7, idx).astype(np.int32)  # slots 30..39 stay unwritten
    if coalesce == "row":
        table = random_values(rng, (cap, cols), dtype)
        src = random_values(rng, (n, cols), dtype)
    else:
        table = random_values(rng, (cap * cols,), dtype)
        idx = np.repeat(idx, cols).reshape(n, cols)
        idx[:, 1:] += np.arange(1, cols, dtype=np.int32) * cap  # every row also reaches the higher slots
        src = random_values(rng, (n, cols), dtype)
    return table, src, idx


def _run(monkeypatch, layout, table, src, idx, coalesce, oob, strict=True, tile_rows=8):
    monkeypatch.setattr(a5_planner, "owner_layout", lambda capacity, updates: layout)
    rec = Recorder(monkeypatch)
    buf, view = _guarded(table)
    pto.scatter(view, src, idx, coalesce=coalesce, oob=oob, conflict="last", target="a5", last_path="owner",
                strict=strict, tile_rows=tile_rows)
    monkeypatch.undo()
    assert (buf[:MARGIN] == sentinel_bits(f"uint{8 * buf.dtype.itemsize}")).all(), "a write before the table"
    assert (buf[-MARGIN:] == sentinel_bits(f"uint{8 * buf.dtype.itemsize}")).all(), "a write after the table"
    return buf[MARGIN:-MARGIN], rec


# -- bit for bit: compact, dense and the serial loop -----------------------------------------------------------

@pytest.mark.parametrize("oob", SCATTER_OOB)
@pytest.mark.parametrize("coalesce, dtype, cols", [("row", "int8", 3), ("row", "float16", 4), ("row", "float32", 5),
                                                   ("elem", "int8", 1), ("elem", "bfloat16", 2),
                                                   ("elem", "float32", 3)])
def test_compact_and_dense_owners_give_the_serial_result(monkeypatch, rng, coalesce, dtype, cols, oob):
    table, src, idx = _case(rng, coalesce, dtype, oob, cols)
    want = serial_last(as_bits(table), as_bits(src), idx, coalesce, oob)
    got = {}
    for layout in ("dense", "compact"):
        got[layout], rec = _run(monkeypatch, layout, table, src, idx, coalesce, oob)
        claim = "simt_mscatter_compact_owner_claim_kernel" if layout == "compact" else \
            f"simt_mscatter_{coalesce}_owner_claim_kernel"
        assert claim in rec.names(), (layout, rec.names())  # the layout asked for is the one that ran
        np.testing.assert_array_equal(got[layout], want, err_msg=layout)
    assert got["dense"].tobytes() == got["compact"].tobytes()


@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_undefined_non_strict_drops_out_of_range_updates(monkeypatch, rng, coalesce):
    """UNDEFINED with ``strict=False`` masks: an out-of-range update is dropped (the compact id -1), on both layouts."""
    cols = 4 if coalesce == "row" else 1
    table = random_values(rng, (16, cols) if coalesce == "row" else (16,), "float32")
    idx = np.array([3, 99, 3, -1, 15, -2 ** 31, 0, 15], np.int32)  # -2**31 is 2147483648 as uint32
    src = random_values(rng, (idx.size, cols) if coalesce == "row" else (idx.size,), "float32")
    want = serial_last(as_bits(table), as_bits(src), idx, coalesce, "undefined")
    for layout in ("dense", "compact"):
        got, _ = _run(monkeypatch, layout, table, src, idx, coalesce, "undefined", strict=False)
        np.testing.assert_array_equal(got, want, err_msg=layout)


@pytest.mark.parametrize("layout", ["dense", "compact"])
def test_every_update_dropped_leaves_the_table(monkeypatch, rng, layout):
    table = random_values(rng, (32,), "int32")
    idx = np.array([32, -1, 1000, 32], np.int32)
    got, rec = _run(monkeypatch, layout, table, np.arange(4, dtype=np.int32), idx, "elem", "skip")
    np.testing.assert_array_equal(got, as_bits(table))
    if layout == "compact":
        assert rec.names() == []  # no slot reached: nothing to claim or write


def test_uint32_indices_past_int32(monkeypatch):
    """uint32 indices at and past 2**31 remap on the host exactly as in the kernels (the ISA's uint32 index)."""
    table = np.zeros(1000, np.int16)
    idx = np.array([2 ** 31, 5, 2 ** 32 - 1, 2 ** 31 + 1000, 5, 999], np.uint32)
    src = np.arange(1, 7, dtype=np.int16)
    for oob in ("wrap", "clamp", "skip"):
        want = serial_last(as_bits(table), as_bits(src), idx, "elem", oob)
        for layout in ("dense", "compact"):
            got, _ = _run(monkeypatch, layout, table, src, idx, "elem", oob)
            np.testing.assert_array_equal(got, want, err_msg=f"{oob} {layout}")


def test_compact_row_write_spans_several_blocks(monkeypatch, rng):
    """More distinct rows than one block's tile rows: the compact write's blocks split the distinct slots."""
    table = random_values(rng, (500, 24), "uint8")
    idx = rng.integers(0, 500, 300).astype(np.int32)
    src = random_values(rng, (300, 24), "uint8")
    want = serial_last(as_bits(table), as_bits(src), idx, "row", "undefined")
    got, rec = _run(monkeypatch, "compact", table, src, idx, "row", "undefined", tile_rows=16)
    np.testing.assert_array_equal(got, want)
    (grid,) = [g for name, g in rec.launches if name == "simt_mscatter_row_compact_owner_write_kernel"]
    assert grid == -(-np.unique(idx).size // 16) > 1


def test_compact_slots_numbers_the_distinct_slots():
    """Hand-computed: capacity 10, indices [5, -1, 3, 5, 100, 12] (-1 is 4294967295)."""
    raw = np.array([5, -1, 3, 5, 100, 12], np.int32)
    slots, ids = a5_planner.compact_slots(raw, 10, IndexRule.MASK, np.int32)
    assert slots.tolist() == [3, 5] and ids.tolist() == [1, -1, 0, 1, -1, -1] and ids.dtype == np.int32
    slots, ids = a5_planner.compact_slots(raw, 10, IndexRule.CLAMP)
    assert slots.tolist() == [3, 5, 9] and ids.tolist() == [1, 2, 0, 1, 2, 2]
    slots, ids = a5_planner.compact_slots(raw, 10, IndexRule.WRAP)  # 4294967295 % 10 == 5
    assert slots.tolist() == [0, 2, 3, 5] and ids.tolist() == [3, 3, 2, 3, 0, 1]


def test_compact_owner_on_the_simulator(simulator_backend, monkeypatch, rng):
    """The compact kernels' CUDA form (one lane per thread), run by Numba's CUDA simulator."""
    for coalesce, cols in (("row", 3), ("elem", 1)):
        table, src, idx = _case(rng, coalesce, "float32", "wrap", cols)
        want = serial_last(as_bits(table), as_bits(src), idx, coalesce, "wrap")
        got, rec = _run(monkeypatch, "compact", table, src, idx, coalesce, "wrap")
        assert "simt_mscatter_compact_owner_claim_kernel" in rec.names()
        np.testing.assert_array_equal(got, want, err_msg=coalesce)


# -- the choice, and what it costs ---------------------------------------------------------------------------------

def test_owner_layout_is_chosen_by_cost():
    assert a5_planner.owner_layout(1 << 16, 1) == "dense"  # a small table: no sort
    assert a5_planner.owner_layout(4 << 20, 1 << 20) == "dense"  # the table comparable to the updates
    assert a5_planner.owner_layout(1_500_000_000, 10) == "compact"
    assert a5_planner.owner_layout(1 << 33, 2) == "compact"
    slots = tuning.current().dense_owner_slots_per_update * 1000 + tuning.current().dense_owner_min_slots
    assert a5_planner.owner_layout(slots, 1000) == "dense" and a5_planner.owner_layout(slots + 1, 1000) == "compact"


@pytest.mark.parametrize("coalesce, shape", [("elem", (1 << 28,)), ("row", (1 << 24, 16))])
def test_few_updates_into_a_large_table_allocate_by_the_updates(monkeypatch, coalesce, shape):
    """Two Last updates into a 256 MB int8 table (never touched but for two slots): the call's numpy allocations
    (tracemalloc sees them all) stay far below one owner per table slot (1 GiB Elem, 64 MiB Row), and the
    launches after the sort are sized by the two updates, not by the table."""
    table = np.zeros(shape, np.int8)  # zero pages: only the written slots get memory
    idx = np.array([shape[0] - 1, 3], np.int32)
    src = np.array([[5] * shape[1], [-7] * shape[1]] if coalesce == "row" else [5, -7], np.int8)
    # compile (and cache) the compact path outside the measured call
    small = np.zeros((1 << 20,) + shape[1:], np.int8)
    pto.scatter(small, src, idx % small.shape[0], coalesce=coalesce, conflict="last", last_path="owner")
    rec = Recorder(monkeypatch)
    tracemalloc.start()
    try:
        pto.scatter(table, src, idx, coalesce=coalesce, conflict="last", last_path="owner")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"peak traced allocation {peak} bytes for 2 updates into {table.nbytes} bytes"
    assert all(grid == 1 for _, grid in rec.launches), rec.launches
    assert table[shape[0] - 1].tolist() == src[0].tolist() and table[3].tolist() == src[1].tolist()
    assert np.count_nonzero(table) == 2 * (shape[1] if coalesce == "row" else 1)


def test_auto_takes_the_compact_owner_for_few_updates(monkeypatch, tune):
    tune(serial_last_max_updates=0,  # multicore's serial loop would take 3 updates
         serial_last_max_table_bytes=0)  # ... and a 4 MB table
    table = np.zeros(1 << 22, np.uint8)
    idx = np.array([7, 1 << 21, 7], np.int32)
    rec = Recorder(monkeypatch)
    pto.scatter(table, np.array([1, 2, 3], np.uint8), idx, coalesce="elem", conflict="last", last_path="auto")
    assert rec.names() == ["simt_mscatter_owner_reset_kernel", "simt_mscatter_compact_owner_claim_kernel",
                           "simt_mscatter_elem_compact_owner_write_kernel"]
    assert table[7] == 3 and table[1 << 21] == 2 and np.count_nonzero(table) == 2
