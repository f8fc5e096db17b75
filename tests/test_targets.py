"""The behaviours every target shares, one test body each, run on every target whose spec supports the case
(``for_targets`` in conftest): the Row and Elem gather with each GatherOOB policy, the memory-safe non-strict
UNDEFINED, and the scatter whose colliding writes the last writer in source order wins.

The oracles are those of :mod:`simt_pto.reference` (plain loops over raw bits, written from the spec): what
differs between targets (the CPU simulator's plain-replace scatter, A2/A3's NZ walks, the A5 kernel variants,
each target's refusals) is tested in that target's own file.
"""
from __future__ import annotations

import numpy as np

import simt_pto as pto
from simt_pto import reference as ref
from conftest import for_targets, min_cols, random_values, sentinel_bits
from oracles import index_tile as oracle_index_tile, make_tile

GATHER_POLICIES = ("undefined", "clamp", "wrap", "zero")
INT32_MIN = -2 ** 31


def index_tile(values):
    """A RowMajor ``[R, C]`` index tile holding ``values`` (-1 stays the uint32 4294967295)."""
    return oracle_index_tile(np.atleast_2d(values), "elem")


def indices(rng, shape, capacity, policy):
    """Random indices with duplicates; out of range ones (-1, capacity, INT32_MIN) unless UNDEFINED."""
    idx = rng.integers(0, capacity, size=shape).astype(np.int64)
    flat = idx.reshape(-1)
    if policy != "undefined":
        flat[:3] = (-1, capacity, INT32_MIN)[: flat.size]
    flat[-1] = flat[len(flat) // 2]
    return idx


def assert_valid_region(tile, expected_bits):
    """The valid region holds ``expected_bits``; the padding keeps the sentinel."""
    got = tile.numpy().view(tile.dtype.bits)
    vr, vc = tile.valid
    np.testing.assert_array_equal(got[:vr, :vc], expected_bits)
    padding = np.ones(got.shape, bool)
    padding[:vr, :vc] = False
    assert (got[padding] == sentinel_bits(tile.dtype)).all(), "wrote the padding"


@for_targets(policy=GATHER_POLICIES)
def test_mgather_row(target, dtype, policy, guarded_table, rng):
    cols = 2 * min_cols(dtype)
    valid_cols, table_rows, rows = cols - 3, 7, 5
    table = guarded_table(table_rows, valid_cols, dtype)
    before = table.bits.copy()
    dst = make_tile(dtype, rows + 1, cols, valid=(rows, valid_cols))
    idx = indices(rng, (1, rows), table_rows, policy)
    pto.mgather(dst, table.tensor, index_tile(idx), coalesce="row", oob=policy, target=target)
    assert_valid_region(dst, ref.gather_row(table.bits[:table.core], table_rows, valid_cols, idx[0], policy))
    np.testing.assert_array_equal(table.bits, before)       # a gather never writes its table (or the guard)


@for_targets(policy=GATHER_POLICIES)
def test_mgather_elem(target, dtype, policy, guarded_table, rng):
    cols = 2 * min_cols(dtype)
    valid_cols, rows = cols - 3, 3
    table = guarded_table(5, 9, dtype)
    before = table.bits.copy()
    dst = make_tile(dtype, rows + 1, cols, valid=(rows, valid_cols))
    idx = indices(rng, (rows, valid_cols), 45, policy)
    pto.mgather(dst, table.tensor, index_tile(idx), coalesce="elem", oob=policy, target=target)
    assert_valid_region(dst, ref.gather_elem(table.bits[:table.core], 45, idx, policy))
    np.testing.assert_array_equal(table.bits, before)


@for_targets(dtypes=("int8", "bfloat16", "float32", "uint32"), coalesce=("row", "elem"))
def test_non_strict_undefined_gather_reads_zero(target, dtype, coalesce, guarded_table):
    table = guarded_table(4, min_cols(dtype), dtype)
    capacity = 4 if coalesce == "row" else table.core
    idx = np.array([[1, capacity, -1, 0]])
    dst = (make_tile(dtype, 4, table.cols, valid=(4, table.cols)) if coalesce == "row"
           else make_tile(dtype, 1, table.cols, valid=(1, 4)))
    pto.mgather(dst, table.tensor, index_tile(idx), coalesce=coalesce, oob="undefined", strict=False, target=target)
    core = table.bits[:table.core]
    want = (ref.gather_row(core, 4, table.cols, idx[0], "zero") if coalesce == "row"
            else ref.gather_elem(core, capacity, idx, "zero"))   # "no slot" reads T(0), as GatherOOB::Zero
    assert_valid_region(dst, want)
    assert table.guard_intact()


@for_targets()
def test_mscatter_elem_last_writer_wins(target, dtype, guarded_table, rng):
    """Elem, atomic NONE, Conflict::Last: 33 writers into 6 slots; every target gives the serial loop."""
    cols = 2 * min_cols(dtype)
    valid_cols, rows = cols - 3, 3
    table = guarded_table(4, 10, dtype)
    initial = table.bits[:table.core].copy()
    values = random_values(rng, (rows, valid_cols), dtype)
    idx = rng.integers(0, 6, size=(rows, valid_cols))
    src = make_tile(dtype, 4, cols, valid=(rows, valid_cols))
    src.set(values)
    pto.mscatter(table.tensor, src, index_tile(idx), coalesce="elem", conflict="last", target=target)
    want = ref.scatter(initial, dtype, "elem", idx, values.view(table.bits.dtype), table.core, "undefined")
    np.testing.assert_array_equal(table.bits[:table.core], want)
    assert table.guard_intact()


@for_targets(dtypes=("int8", "bfloat16", "float8_e5m2", "uint32"))
def test_non_strict_undefined_scatter_drops_out_of_range_writes(target, dtype, guarded_table, rng):
    table = guarded_table(2, 8, dtype)
    initial = table.bits[:table.core].copy()
    values = random_values(rng, (2, 8), dtype)
    idx = np.array([[0, 16, 3, -1, 3, 15, 17, INT32_MIN], [2, 2, 100, 9, -16, 4, 16, 0]])
    src = pto.Tile.from_array(values, 2, min_cols(dtype))
    pto.mscatter(table.tensor, src, index_tile(idx), coalesce="elem", strict=False, target=target)
    want = ref.scatter(initial, dtype, "elem", idx, values.view(table.bits.dtype), 16, "skip")
    np.testing.assert_array_equal(table.bits[:table.core], want)
    assert table.guard_intact()


@for_targets(targets=("a2a3", "a5"), dtypes=("int32", "float32", "float16", "bfloat16", "int8"), atomic="add")
def test_mscatter_elem_add_accumulates_every_collision(target, dtype, guarded_table, rng):
    """Atomic Add with small integers (every partial sum exact, so any order gives the serial loop's bits)."""
    table = guarded_table(2, 8, dtype, values=rng.integers(-3, 4, (2, 8)))
    initial = table.bits[:table.core].copy()
    values = rng.integers(-3, 4, (3, 16)).astype(table.dtype.numpy)
    idx = rng.integers(0, 5, (3, 16))
    src = pto.Tile.from_array(values, 3, max(16, min_cols(dtype)))
    pto.mscatter(table.tensor, src, index_tile(idx), coalesce="elem", atomic="add", target=target)
    want = ref.scatter(initial, dtype, "elem", idx, values.view(table.bits.dtype), 16, "undefined", "add")
    np.testing.assert_array_equal(table.bits[:table.core], want)
