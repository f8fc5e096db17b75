"""MGATHER on the ``a5`` target (the SIMT kernels, on a GPU or Numba's CUDA simulator).

Every case is compared bit for bit (raw bits of the element width) with the sequential oracle of
``tests/oracles.py`` and, where the CPU simulator accepts the same call (RowMajor tiles, a
``Shape<1, 1, 1, R, C>`` table), with ``target="cpu"`` run on RowMajor twins of the tiles.
Tables sit inside guarded buffers (sentinels before and after, the tail inside the wrapped memory but
beyond ``Shape``); destination padding starts as sentinel and must stay so.

MGATHER.md: "A5 Form", "Out-of-Bounds Behaviour", "Tile Constraints (A5)", "Mode Resolution",
"Layout Support", "UB Memory Budget".
"""
from __future__ import annotations

import numpy as np
import pytest

import simt_pto as pto
from oracles import (GATHER_POLICIES, GuardedTable, budgeted, case_rng, gather_elem, gather_row, index_tile,
                     make_tile, min_contiguous, round_up, random_bits, read_tile, sentinel, to_bits)

A5_DTYPES = tuple(d.name for d in pto.dtypes.ELEMENT_DTYPES["a5"])
KERNELS = ("row", "elem", "row_1x1", "elem_1x1")
"""simt_mgather_row_kernel (also at (1, 1)), simt_mgather_elem_kernel, and the (1, 1) Elem scalar fallback."""

INT32_MAX = 2 ** 31 - 1


# -- running one case ------------------------------------------------------------------------------------------

def row_major_twin(tile):
    """The same logical contents in a RowMajor tile (the CPU simulator takes RowMajor tiles only).
    hifloat8 (not a CPU simulator dtype) becomes uint8: the gather moves bytes, and the CPU simulator
    only asks sizeof(Tile::DType) == sizeof(GlobalData::DType)."""
    name = "uint8" if tile.dtype.name == "hifloat8" else tile.dtype.name
    cols = round_up(tile.cols, min_contiguous(name))
    return make_tile(name, tile.rows, cols, valid=tile.valid, logical_bits=read_tile(tile))


def check_gather(dst, table, idx, coalesce, policy, expected, cpu=True):
    """Run MGATHER on a5; the valid region must equal ``expected`` (raw bits), the padding and the table
    (guards included) must be untouched, and the cpu target must agree."""
    before = table.snapshot()
    pto.mgather(dst, table.tensor, idx, coalesce=coalesce, oob=policy, target="a5")
    got = read_tile(dst)
    vr, vc = dst.valid
    np.testing.assert_array_equal(got[:vr, :vc], expected)
    pad = np.ones(got.shape, bool)
    pad[:vr, :vc] = False
    assert (got[pad] == sentinel(dst.dtype.name)).all(), "MGATHER wrote outside the valid region"
    np.testing.assert_array_equal(table.snapshot(), before)
    if cpu:
        twin = row_major_twin(dst)   # every cpu call gets a twin dst (hifloat8 -> uint8)
        cpu_idx = idx if idx.blayout == pto.BLayout.ROW_MAJOR else row_major_twin(idx)
        pto.mgather(twin, table.tensor, cpu_idx, coalesce=coalesce, oob=policy, target="cpu")
        np.testing.assert_array_equal(read_tile(twin)[:vr, :vc], got[:vr, :vc])


def row_indices(policy, capacity, n):
    """n Row indices with duplicates; out-of-range ones (capacity, -1, INT32_MAX) unless Undefined."""
    base = [2, capacity, capacity - 1, -1, 2, INT32_MAX, 0]
    safe = [2, 0, capacity - 1, 3 % capacity, 2, 1 % capacity, 0]
    return (safe if policy == "undefined" else base)[:n]


def elem_indices(rng, policy, capacity, shape):
    """Random in-range indices with collisions; some out-of-range ones unless Undefined."""
    idx = rng.integers(0, capacity, size=shape).astype(np.int64)
    if policy != "undefined":
        flat = idx.reshape(-1)
        bad = [capacity, capacity + 1, -1, -7, INT32_MAX, 1000]
        pos = rng.choice(flat.size, size=min(len(bad), flat.size), replace=False)
        flat[pos] = bad[: len(pos)]
    return idx


# -- every kernel x every A5 dtype x every GatherOOB ------------------------------------------------------------

@pytest.mark.parametrize("policy", GATHER_POLICIES)
@pytest.mark.parametrize("dtype", A5_DTYPES)
@pytest.mark.parametrize("kernel", KERNELS)
def test_gather_matrix(kernel, dtype, policy):
    rng = case_rng("gather", kernel, dtype, policy)
    mc = min_contiguous(dtype)
    if kernel in ("row", "row_1x1"):
        R, C, cap = (6, mc + 3, 6) if kernel == "row" else (1, 1, 6)
        table = GuardedTable(dtype, random_bits(rng, cap * C, dtype), shape=(cap, C))
        indices = row_indices(policy, cap, R) if kernel == "row" else [4 if policy == "undefined" else -1]
        dst = make_tile(dtype, 8 if R > 1 else 1, 2 * mc if R > 1 else mc, valid=(R, C))
        idx = index_tile(indices, "row")
        expected = gather_row(table.core(), cap, C, indices, policy)
        check_gather(dst, table, idx, "row", policy, expected)
    else:
        shape, cap = ((3, mc + 3), 40) if kernel == "elem" else ((1, 1), 40)
        table = GuardedTable(dtype, random_bits(rng, cap, dtype), shape=(cap,))
        if kernel == "elem":
            indices = elem_indices(rng, policy, cap, shape)
        else:
            indices = np.array([[17 if policy == "undefined" else -1]])
        dst = make_tile(dtype, 4 if shape[0] > 1 else 1, 2 * mc if shape[0] > 1 else mc, valid=shape)
        idx = index_tile(indices, "elem")
        expected = gather_elem(table.core(), cap, indices, policy)
        check_gather(dst, table, idx, "elem", policy, expected)


# -- layouts and shapes ----------------------------------------------------------------------------------------

def build_scenario(scenario, dtype, policy, rng):
    """(dst, table, idx, coalesce, expected, cpu_comparable) for one layout / shape scenario."""
    mc = min_contiguous(dtype)
    if scenario.startswith("row"):
        R, C, cap, idx_layout, idx_dtype, dst_layout = 5, 7, 6, "row", "int32", "row_major"
        if scenario == "row_colmajor_dst":
            dst_layout = "col_major"
        elif scenario == "row_col_idx":
            idx_layout = "col"
        elif scenario == "row_uint32_idx":
            idx_dtype = "uint32"
        elif scenario == "row_wide":       # kWarpsPerRow > 1: several warps share a row
            R, C = 2, 70
        elif scenario == "row_single":     # R = 1, a [1, 1] index tile
            R = 1
        table = GuardedTable(dtype, random_bits(rng, cap * C, dtype), shape=(cap, C))
        if policy == "undefined":
            indices = [(3 * r + 2) % cap for r in range(R)]
        elif idx_dtype == "uint32":
            indices = [2, 2 ** 31 + 5, 0xFFFFFFFF, cap, 1][:R]
        else:
            indices = row_indices(policy, cap, R)
        if dst_layout == "col_major":
            dst = make_tile(dtype, round_up(8, mc), 12, valid=(R, C), blayout="col_major")
        else:
            dst = make_tile(dtype, 8, round_up(C + 1, mc), valid=(R, C))
        idx = index_tile(indices, idx_layout, idx_dtype)
        return dst, table, idx, "row", gather_row(table.core(), cap, C, indices, policy)
    shape, cap, dst_layout, idx_layout, idx_dtype = (5, 6), 48, "row_major", "elem", "int32"
    if scenario == "elem_colmajor_both":
        dst_layout, idx_layout = "col_major", "elem_col"
    elif scenario == "elem_colmajor_dst":
        dst_layout = "col_major"
    elif scenario == "elem_colmajor_idx":
        idx_layout = "elem_col"
    elif scenario == "elem_uint32_idx":
        idx_dtype = "uint32"
    elif scenario == "elem_column":        # [N, 1]
        shape = (6, 1)
    elif scenario == "elem_5d_table":      # TableSize = prod(Shape[0..4])
        cap = 2 * 3 * 2 * 4
    table_shape = (2, 1, 3, 2, 4) if scenario == "elem_5d_table" else (cap,)
    table = GuardedTable(dtype, random_bits(rng, cap, dtype), shape=table_shape)
    indices = elem_indices(rng, policy, cap, shape)
    if idx_dtype == "uint32" and policy != "undefined":
        indices.reshape(-1)[:2] = [2 ** 31 + 3, 0xFFFFFFFE]
    if dst_layout == "col_major":
        dst = make_tile(dtype, round_up(8, mc), 8, valid=shape, blayout="col_major")
    else:
        dst = make_tile(dtype, 8, round_up(shape[1] + 1, mc), valid=shape)
    idx = index_tile(indices, idx_layout, idx_dtype)
    return dst, table, idx, "elem", gather_elem(table.core(), cap, indices, policy)


SCENARIOS = ("row_colmajor_dst", "row_col_idx", "row_uint32_idx", "row_wide", "row_single",
             "elem_colmajor_both", "elem_colmajor_dst", "elem_colmajor_idx", "elem_uint32_idx", "elem_column",
             "elem_5d_table")


@pytest.mark.parametrize("scenario, dtype, policy",
                         budgeted([(s, d, p) for s in SCENARIOS for d in A5_DTYPES for p in GATHER_POLICIES], 200))
def test_gather_layouts(scenario, dtype, policy):
    dst, table, idx, coalesce, expected = build_scenario(scenario, dtype, policy, case_rng(scenario, dtype, policy))
    check_gather(dst, table, idx, coalesce, policy, expected, cpu=scenario != "elem_5d_table")


@pytest.mark.parametrize("coalesce, shape", [("row", (40, 3)), ("elem", (9, 130))],
                         ids=["row-40-rows-over-32-warps", "elem-1170-over-1024-threads"])
def test_gather_more_work_than_threads(coalesce, shape):
    """More rows than kRowWarps = 32 (warps walk a second row) / more elements than 1024 threads
    (the strided Elem loop)."""
    rng = case_rng("big", coalesce)
    R, C = shape
    if coalesce == "row":
        cap = 50
        table = GuardedTable("float32", random_bits(rng, cap * C, "float32"), shape=(cap, C))
        indices = list(rng.integers(-5, cap + 5, size=R))
        dst, idx = make_tile("float32", R, 8, valid=shape), index_tile(indices, "row")
        expected = gather_row(table.core(), cap, C, indices, "wrap")
    else:
        cap = 300
        table = GuardedTable("int16", random_bits(rng, cap, "int16"), shape=(cap,))
        indices = rng.integers(-20, cap + 20, size=shape)
        dst, idx = make_tile("int16", R, 144, valid=shape), index_tile(indices, "elem")
        expected = gather_elem(table.core(), cap, indices, "wrap")
    check_gather(dst, table, idx, coalesce, "wrap", expected)


# -- hand-computed goldens -------------------------------------------------------------------------------------

def test_gather_row_golden_negative_indices():
    """Row k of the table holds 10 * k + col. Capacity 4: -1 is 4294967295, Wrap -> 3, Clamp -> 3,
    Zero -> a zero row; 4 (= capacity) Wrap -> 0, Clamp -> 3, Zero -> zero row."""
    table_vals = (np.arange(4)[:, None] * 10 + np.arange(3)[None, :]).astype(np.int32)
    for policy, want_rows in [("wrap", [1, 3, 0, 3]), ("clamp", [1, 3, 3, 3]), ("zero", [1, None, None, 3])]:
        table = GuardedTable("int32", to_bits(table_vals, "int32"), shape=(4, 3))
        dst = make_tile("int32", 4, 8, valid=(4, 3))
        pto.mgather(dst, table.tensor, index_tile([1, -1, 4, 3]), coalesce="row", oob=policy)
        want = np.array([table_vals[r] if r is not None else [0, 0, 0] for r in want_rows], dtype=np.int32)
        np.testing.assert_array_equal(dst.valid_numpy(), want)
        assert table.guards_intact()


def test_gather_elem_golden_negative_indices():
    """Flat table of 10 elements holding 100 + k: -1 Wrap -> 5 (NumPy's % would give 9), Clamp -> 9."""
    table_vals = (100 + np.arange(10)).astype(np.int32)
    got = {}
    for policy in ("wrap", "clamp", "zero"):
        table = GuardedTable("int32", to_bits(table_vals, "int32"), shape=(10,))
        dst = make_tile("int32", 1, 8, valid=(1, 4))
        pto.mgather(dst, table.tensor, index_tile([[-1, 10, 3, -10]], "elem"), coalesce="elem", oob=policy)
        got[policy] = dst.valid_numpy()[0].tolist()
    # -10 is 4294967286: % 10 = 6
    assert got == {"wrap": [105, 100, 103, 106], "clamp": [109, 109, 103, 109], "zero": [0, 0, 103, 0]}


def test_gather_row_capacity_is_shape3():
    """A5 Row: tableRows = Shape[3] (not prod(Shape[0..3])); Shape[0..2] > 1 do not add rows."""
    vals = np.arange(2 * 4 * 8, dtype=np.int32)
    table = GuardedTable("int32", vals, shape=(2, 1, 1, 4, 8))
    dst = make_tile("int32", 2, 8, valid=(2, 8))
    pto.mgather(dst, table.tensor, index_tile([5, 3]), coalesce="row", oob="clamp")
    np.testing.assert_array_equal(dst.valid_numpy(), [vals[24:32], vals[24:32]])


# -- Undefined: refused out-of-range indices; strict=False gives zeros ---------------------------------------------

@pytest.mark.parametrize("layout", ["row", "col", "elem", "elem_col"])
def test_gather_undefined_names_the_logical_position_in_any_index_layout(layout):
    """The refusal reads the index tile through its layout: the position it names is the logical one,
    and the sentinel padding around the valid region (far out of range) is never read."""
    cap, R = 6, 3
    if layout in ("row", "col"):
        values, bad_at = [0, 5, 9], 2
        dst = make_tile("float32", 8, 8, valid=(R, 8))
    else:
        values = np.arange(R * 5).reshape(R, 5) % cap
        values[2, 1], bad_at = 7, (2, 1)
        dst = make_tile("float32", 8, 8, valid=(R, 5))
    table = GuardedTable("float32", np.arange(cap * 8, dtype=np.float32), shape=(cap, 8) if layout in (
        "row", "col") else (cap,))
    with pytest.raises(pto.OutOfBoundsError) as info:
        pto.mgather(dst, table.tensor, index_tile(values, layout), coalesce="row" if layout in ("row", "col") else "elem")
    assert (info.value.positions, info.value.values, info.value.count) == ([bad_at], [values[bad_at]], 1)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("index_dtype", ["int32", "uint32"])
def test_gather_undefined_out_of_range_raises(kernel, index_dtype):
    rng = case_rng("undef", kernel)
    row = kernel.startswith("row")
    R, C = (1, 1) if kernel.endswith("1x1") else (3, 8)
    cap = 5
    table = GuardedTable("float32", random_bits(rng, cap * C if row else cap, "float32"),
                         shape=(cap, C) if row else (cap,))
    if row:
        indices = [0, cap, 1] if R > 1 else [cap]
    else:
        indices = np.zeros((R, C), dtype=np.int64)
        indices[0, 0] = -1
    idx = index_tile(indices, "row" if row else "elem", index_dtype)
    dst = make_tile("float32", R, 8, valid=(R, C))
    before_table, before_dst = table.snapshot(), read_tile(dst)
    with pytest.raises(pto.OutOfBoundsError, match=r"MGATHER on a5: 1 index\(es\) out of range \[0, 5\)"):
        pto.mgather(dst, table.tensor, idx, coalesce="row" if row else "elem", oob="undefined")
    np.testing.assert_array_equal(table.snapshot(), before_table)
    np.testing.assert_array_equal(read_tile(dst), before_dst)


@pytest.mark.parametrize("kernel", KERNELS)
def test_gather_non_strict_undefined_reads_zero(kernel):
    rng = case_rng("nonstrict", kernel)
    row = kernel.startswith("row")
    R, C = (1, 1) if kernel.endswith("1x1") else (4, 8)
    cap = 5
    table = GuardedTable("uint16", random_bits(rng, cap * C if row else cap, "uint16"),
                         shape=(cap, C) if row else (cap,))
    if row:
        indices = [3, cap, -1, 1][:R] if R > 1 else [cap]
    else:
        indices = rng.integers(0, cap, size=(R, C))
        indices.reshape(-1)[:2] = [cap, -1][: indices.size]
    idx = index_tile(indices, "row" if row else "elem")
    dst = make_tile("uint16", 4, 16, valid=(R, C))
    pto.mgather(dst, table.tensor, idx, coalesce="row" if row else "elem", oob="undefined", strict=False)
    expected = (gather_row(table.core(), cap, C, indices, "zero") if row
                else gather_elem(table.core(), cap, indices, "zero"))
    np.testing.assert_array_equal(read_tile(dst)[:R, :C], expected)
    assert table.guards_intact()


# -- A5 rejections (ConstraintError, with the rule text) -------------------------------------------------------

def test_reject_nz_table():
    matrix = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    table = pto.GlobalTensor.nz_from_matrix(matrix)
    dst = make_tile("float32", 2, 8, valid=(2, 8))
    with pytest.raises(pto.ConstraintError, match=r"GM table Layout::ND only"):
        pto.mgather(dst, table, index_tile([0, 1]), coalesce="row")
    with pytest.raises(pto.ConstraintError, match=r"GM table Layout::ND only"):
        pto.mgather(dst, table, index_tile(np.zeros((2, 8)), "elem"), coalesce="elem")


def test_reject_row_table_shape4_not_valid_cols():
    table = GuardedTable("float32", np.zeros(4 * 8, np.uint32), shape=(4, 8))
    dst = make_tile("float32", 2, 8, valid=(2, 6))
    with pytest.raises(pto.ConstraintError,
                       match=r"table Shape\[4\] = 8, dst valid cols = 6 .*staticShape\[4\] == ValidCol"):
        pto.mgather(dst, table.tensor, index_tile([0, 1]), coalesce="row")
    # Just inside the rule: a table of row width 6.
    table = GuardedTable("float32", np.zeros(4 * 6, np.uint32), shape=(4, 6))
    pto.mgather(dst, table.tensor, index_tile([0, 1]), coalesce="row")


def test_reject_row_major_r_by_1_index_tile():
    table = GuardedTable("float32", np.zeros(4 * 8, np.uint32), shape=(4, 8))
    dst = make_tile("float32", 4, 8, valid=(3, 8))
    bad = make_tile("int32", 3, 8, valid=(3, 1), logical_bits=np.zeros((3, 1), np.uint32))   # RowMajor [3, 1]
    with pytest.raises(pto.ConstraintError, match=r"Row: an \[R, 1\] index tile is BLayout::ColMajor"):
        pto.mgather(dst, table.tensor, bad, coalesce="row")
    pto.mgather(dst, table.tensor, index_tile([0, 1, 2], "col"), coalesce="row")   # the ColMajor one is fine


def _big_row_gather(dyn_ubuf_size):
    """dst 128 x 256 float32 = 128 KiB padded (plus a 1 KiB index tile) but only 2 x 8 valid: the working
    set is over the 128 KB default, the launch is one warp."""
    table = GuardedTable("float32", to_bits(np.arange(3 * 8), "float32"), shape=(3, 8))
    dst = make_tile("float32", 128, 256, valid=(2, 8))
    idx = index_tile([2, 0], "row", cols=256)
    pto.mgather(dst, table.tensor, idx, coalesce="row", dyn_ubuf_size=dyn_ubuf_size)
    return dst


def test_working_set_over_128k_needs_dyn_ubuf_size():
    with pytest.raises(pto.ConstraintError, match=r"UB working set within budget"):
        _big_row_gather(None)
    with pytest.raises(pto.ConstraintError, match=r"max dynUBufSize = 256 KB - 8 KB reserved - 32 KB min DCache"):
        _big_row_gather(216 * 1024 + 1)
    with pytest.raises(pto.ConstraintError, match=r"UB working set within budget"):
        _big_row_gather(128 * 1024 + 1024 - 1)      # declared, but smaller than dst + idx
    dst = _big_row_gather(216 * 1024)
    np.testing.assert_array_equal(dst.valid_numpy(), [np.arange(16, 24), np.arange(8)])


# -- one contiguous run a row ------------------------------------------------------------------------------------

ROW_RUN_WIDTHS = {"int8": list(range(1, 67)) + [100, 128, 256],  # every run length to 64 bytes, inline; then memcpy
                  "int16": list(range(1, 34)) + [50, 64],
                  "float32": list(range(1, 18)) + [25, 32, 64]}


@pytest.mark.parametrize("dtype", sorted(ROW_RUN_WIDTHS))
def test_a_row_run_of_every_length_is_copied_whole_and_nothing_past_it(dtype):
    """A CPU warp that owns whole rows copies each as one run (inline up to 64 bytes, by memcpy past it): every length,
    at every byte offset the views below give, moves its row's bits and no byte on either side of the result (a
    gather into ``out=``) or of the table (a Row scatter of distinct rows)."""
    rng = case_rng("row-runs", dtype)
    sentinel = np.uint8(0xA5)
    for cols in ROW_RUN_WIDTHS[dtype]:
        rows, picked = 40, 70  # (more rows than a block's 32 row warps: each warp owns whole rows)
        table = rng.integers(0, 256, rows * cols * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype)
        table = table.reshape(rows, cols)
        idx = rng.integers(0, rows, picked).astype(np.int32)
        lead = 1 + cols % 3  # elements before the view: its start moves across the byte offsets
        buffer = np.full((picked * cols + 2 * lead) * np.dtype(dtype).itemsize, sentinel, np.uint8).view(dtype)
        out = buffer[lead:lead + picked * cols].reshape(picked, cols)
        pto.gather(table, idx, coalesce="row", target="a5", out=out)
        assert np.array_equal(out.view(np.uint8), table[idx].view(np.uint8)), cols
        guard = buffer.view(np.uint8).reshape(-1)
        width = lead * np.dtype(dtype).itemsize
        assert (guard[:width] == sentinel).all() and (guard[-width:] == sentinel).all(), cols

        targets = rng.permutation(rows)[:picked // 3].astype(np.int32)
        src = rng.integers(0, 256, targets.size * cols * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype)
        src = src.reshape(targets.size, cols)
        store = np.full((rows * cols + 2 * lead) * np.dtype(dtype).itemsize, sentinel, np.uint8).view(dtype)
        written = store[lead:lead + rows * cols].reshape(rows, cols)
        written[:] = table
        want = table.copy()
        want[targets] = src
        pto.scatter(written, src, targets, coalesce="row", conflict="default", target="a5")
        assert np.array_equal(written.view(np.uint8), want.view(np.uint8)), cols
        guard = store.view(np.uint8).reshape(-1)
        assert (guard[:width] == sentinel).all() and (guard[-width:] == sentinel).all(), cols
