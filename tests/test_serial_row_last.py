"""The ``multicore`` backend's serial Row Conflict::Last: a whole-array Row scatter with Conflict::Last under
``last_path="auto"`` runs ``simt_mscatter_row_kernel`` (atomic NONE: plain stores) on the calling thread, whose walk
visits the source rows in order, so each table row ends with its last writer (MSCATTER.md, "Conflict Resolution"),
while the source is small (``host/tuning.current().serial_row_last_max_bytes``) or the table has many more rows
than the source (``serial_row_last_sparse_rows``); past both it takes the owner path, and never the slot-centric
kernels, which scan every index for every table row (``host/a5_planner.takes_serial_row_last``).

A CPU warp of the Row scatter kernel under atomic NONE copies its columns as runs (``kernels/a5/device.scatter_row``):
the rows here are wider than a warp and narrower than two, so a row is cut into lane spans of two warps."""
from __future__ import annotations

import numpy as np
import pytest

import simt_pto as pto
from simt_pto import reference
from simt_pto.enums import ScatterAtomicOp
from simt_pto.host import in_memory

from conftest import as_bits, random_values

SCATTER_OOB = ("undefined", "skip", "clamp", "wrap")
LAST_DTYPES = ("int8", "uint8", "int16", "float16", "bfloat16", "int32", "uint32", "float32")
GUARD_ROWS = 3
"""Rows of sentinel on each side of the table, inside one buffer: a write outside the table lands there."""


def _row_last_case(rng, dtype, oob, rows, cap, cols):
    low, high = (-3, cap + 7) if oob != "undefined" else (0, cap)
    idx = rng.integers(low, high, rows).astype(np.int32)
    return idx, random_values(rng, (rows, cols), dtype), random_values(rng, (cap + 2 * GUARD_ROWS, cols), dtype)


SHAPES = [(30, 11, 37, 1), (12, 5, 37, 2)]
"""(source rows, table rows, columns, warps per row): a row one warp's run, and a row cut into two warps' lane
spans (the copy's run per span)."""


@pytest.mark.parametrize("cpu_or_simulator_backend", ["multicore"], indirect=True)
@pytest.mark.parametrize("rows, cap, cols, warps_per_row", SHAPES)
@pytest.mark.parametrize("oob", SCATTER_OOB)
@pytest.mark.parametrize("dtype", LAST_DTYPES)
def test_a_small_row_last_is_the_serial_loop(cpu_or_simulator_backend, rng, dtype, oob, rows, cap, cols,
                                             warps_per_row):
    """A whole-array Row Conflict::Last of a few rows (several writers a table row, every bit pattern, out-of-range
    and negative indices unless UNDEFINED) is one launch of the Row scatter kernel on the calling thread, and gives
    the serial loop's bits, the full path and then the kept launch; the guard rows keep their bits."""
    idx, src, buffer = _row_last_case(rng, dtype, oob, rows, cap, cols)
    table = buffer[GUARD_ROWS:GUARD_ROWS + cap]
    (launch,) = pto.scatter_plan(table, src, idx, coalesce="row", oob=oob).launches
    assert (launch.kernel, launch.multicore_threads, launch.policy.atomic) == ("simt_mscatter_row_kernel", 1,
                                                                         ScatterAtomicOp.NONE)
    assert launch.geometry.warps_per_row == warps_per_row
    initial = as_bits(buffer).copy()
    for run in ("full path", "kept launch", "kept launch again"):
        as_bits(buffer)[:] = initial
        assert pto.scatter(table, src, idx, coalesce="row", oob=oob) is table
        got = as_bits(buffer)
        assert np.array_equal(got[:GUARD_ROWS], initial[:GUARD_ROWS]), run
        assert np.array_equal(got[-GUARD_ROWS:], initial[-GUARD_ROWS:]), run
        wrong = reference.scatter_mismatches(got[GUARD_ROWS:-GUARD_ROWS].reshape(-1),
                                             initial[GUARD_ROWS:-GUARD_ROWS].reshape(-1), dtype, "row", idx,
                                             as_bits(src), cap, oob, "none", "last", row_len=cols)
        assert not wrong, f"{run}: " + "; ".join(wrong[:5])


@pytest.mark.parametrize("cpu_or_simulator_backend", ["multicore"], indirect=True)
@pytest.mark.parametrize("form", ["serial", "owner"])
def test_every_row_last_form_chosen_on_multicore_gives_the_serial_loops_result(cpu_or_simulator_backend, rng, tune,
                                                                               form):
    """The two forms ``last_path="auto"`` chooses between on ``multicore``, each forced by the thresholds, over more
    source rows than a tile holds (several tiles, their order kept), against ``reference.last_writer_scatter``."""
    if form == "owner":
        tune(serial_row_last_max_bytes=0, serial_row_last_sparse_rows=1 << 40)
    else:
        tune(serial_row_last_max_bytes=1 << 40)
    rows, cap, cols = 700, 40, 19
    idx = rng.integers(0, cap, rows).astype(np.int32)
    src = random_values(rng, (rows, cols), "float32")
    table = random_values(rng, (cap, cols), "float32")
    kernels = {launch.kernel for launch in pto.scatter_plan(table, src, idx, coalesce="row").launches}
    assert ("simt_mscatter_row_kernel" in kernels) == (form == "serial")
    assert ("simt_mscatter_row_owner_write_kernel" in kernels) == (form == "owner")
    want = as_bits(reference.last_writer_scatter(table, idx.astype(np.int64), src))
    for run in ("full path", "kept launch"):
        got = table.copy()
        pto.scatter(got, src, idx, coalesce="row")
        assert np.array_equal(as_bits(got), want), run


def test_which_row_last_calls_are_the_serial_loop(tune):
    """On ``multicore`` with ``last_path="auto"``: the serial loop up to serial_row_last_max_bytes of source rows, or
    into a table of at least serial_row_last_sparse_rows times the source's rows; else the owner path, even where
    the slot-centric kernels' work is small; an explicit ``last_path`` and the other backends as before."""
    cols = 8
    tune(serial_row_last_max_bytes=64 * cols * 4, serial_row_last_sparse_rows=4)

    def kernels(rows, table_rows, backend="multicore", **options):
        table = np.zeros((table_rows, cols), np.float32)
        idx = np.arange(rows, dtype=np.int32) % table_rows
        call = in_memory.scatter_plan(table, np.ones((rows, cols), np.float32), idx, coalesce="row", backend=backend,
                                      **options)
        return [launch.kernel for launch in call.launches]
    serial, owner = ["simt_mscatter_row_kernel"], "simt_mscatter_row_owner_write_kernel"
    assert kernels(64, 10) == serial                        # the source's bytes at the limit
    assert owner in kernels(65, 10)                         # one row past it: slots x rows is 650, still the owner path
    assert kernels(65, 4 * 65) == kernels(1000, 4000) == serial  # a table of 4x the source's rows
    assert owner in kernels(1000, 4000 - 1)
    assert kernels(65, 10, last_path="slot") == ["simt_mscatter_row_last_kernel"]
    assert owner in kernels(64, 10, last_path="owner")
    assert kernels(64, 10, backend="simulator") == ["simt_mscatter_row_last_kernel"]

