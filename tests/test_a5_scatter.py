"""MSCATTER on the ``a5`` target (the SIMT kernels, on a GPU or Numba's CUDA simulator).

Oracles (``tests/oracles.py``): the serial loop ``for i in range(N): table[slot(idx[i])] op= src[i]``
in the element type. What each combination must satisfy (MSCATTER.md, "Conflict Resolution",
"Atomic Type Support", "Out-of-Bounds Behaviour"):

* atomic NONE + Conflict::Last: bit-exact to the serial loop, and the same bits on 3 repeated runs;
* atomic NONE + Conflict::Default: every written element holds one of its writers' values (exact where
  a slot has one writer), every other element keeps its value;
* Add on int32 / uint32 (wrap-around included), Max / Min on int32 / uint32 / float32: exact;
* Add on float32: within ``FLOAT32_ADD_TOL`` (below) of the float64 sum; bit-exact where a slot has at
  most one writer;
* Add on float16 / bfloat16: exact on small integers (every partial sum exact); on random values
  within ``HALF_ADD_TOL`` of the sequential oracle that rounds each add to the element type.

Atomics ignore ScatterConflict, so both conflicts run for them too. Tables sit inside guarded buffers;
the guards, and the src / idx tiles, must come back unchanged.
"""
from __future__ import annotations

import numpy as np
import pytest

import simt_pto as pto
from simt_pto import reference
from oracles import (CONFLICTS, SCATTER_POLICIES, GuardedTable, assert_one_of_colliders, budgeted, candidates,
                     case_rng, from_bits, index_tile, kind, make_tile, min_contiguous, round_up, random_bits, read_tile,
                     scatter, to_bits, writers)

A5_DTYPES = tuple(d.name for d in pto.dtypes.ELEMENT_DTYPES["a5"])
ATOMIC_OPS = {"none": pto.ScatterAtomicOp.NONE, "add": pto.ScatterAtomicOp.ADD, "max": pto.ScatterAtomicOp.MAX,
              "min": pto.ScatterAtomicOp.MIN}
A5_ATOMIC_DTYPES = {name: tuple(d.name for d in pto.dtypes.atomic_dtypes("a5", op)) for name, op in ATOMIC_OPS.items()}
KERNELS = ("row", "elem", "row_1x1", "elem_1x1")
"""simt_mscatter_row[_last]_kernel (also at (1, 1)), simt_mscatter_elem[_last]_kernel, and the (1, 1) Elem
scalar fallback (MScatterScalarImpl)."""

INT32_MAX = 2 ** 31 - 1

FLOAT32_ADD_TOL = "n * 2**-24 * (|t0| + sum|v_i|)"
"""float32 Add: |got - float64 sum| <= n * 2**-24 * (|t0| + sum |v_i|), n = the adds into the slot
(the classic bound on recursive summation in any order)."""
HALF_ADD_TOL = "2 * n * u * (|t0| + sum|v_i|), u = 2**-11 (float16) / 2**-8 (bfloat16)"
"""float16 / bfloat16 Add on random values: |got - sequential oracle| <= 2 * n * u * (|t0| + sum |v_i|): both
orders lie within n * u * sum of the exact sum."""
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}

# Integer Add wraps and float Add overflows to inf by design; the CUDA simulator's atomicAdd
# (``array[i] += v`` on a numpy scalar) and the oracle's cast to the element type warn about it.
pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered in scalar add:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")]


# -- values fit for each atomic ----------------------------------------------------------------------------------

def atomic_values(rng, shape, dtype, atomic, exact_halves=True):
    """Raw bits: anything for NONE; full-range integers (wrap-around) for integer atomics; finite floats
    with mixed signs (no -0.0, no NaN) for float atomics; small integers for 16-bit float Add."""
    if atomic == "none" or kind(dtype) in ("int", "uint"):
        return random_bits(rng, shape, dtype)
    if dtype in ("float16", "bfloat16"):
        if exact_halves:
            return to_bits(rng.integers(-8, 9, size=shape), dtype)
        return to_bits(rng.uniform(-4, 4, size=shape), dtype)
    vals = rng.standard_normal(shape) * 1000
    vals[vals == 0] = 1.0
    return to_bits(vals, dtype)


# -- running and checking one case -------------------------------------------------------------------------------

def run_scatter(table, src, idx, coalesce, atomic, policy, conflict, **kw):
    pto.mscatter(table.tensor, src, idx, coalesce=coalesce, atomic=atomic, oob=policy, conflict=conflict,
                 target="a5", **kw)


def check_scatter(table, src, idx, coalesce, indices, src_bits, capacity, policy, atomic, conflict, row_len=0,
                  halves_exact=True):
    """Run MSCATTER on a5 and check the table against the oracle for this (atomic, conflict).

    ``halves_exact``: float16 / bfloat16 Add data are small integers (:func:`atomic_values`), so every
    partial sum is exact and any order must give the oracle's bits; False for random values (tolerance)."""
    dtype = table.dtype
    initial, full0 = table.core(), table.snapshot()
    src0, idx0 = read_tile(src), read_tile(idx)
    run_scatter(table, src, idx, coalesce, atomic, policy, conflict)
    got = table.core()
    assert table.guards_intact(), "MSCATTER wrote outside the table"
    np.testing.assert_array_equal(read_tile(src), src0)     # raw bits: NaN payloads compare too
    np.testing.assert_array_equal(read_tile(idx), idx0)
    expected = scatter(initial, dtype, coalesce, indices, src_bits, capacity, policy, atomic, row_len)
    if atomic == "none" and conflict == "default":
        assert_one_of_colliders(got, initial, candidates(coalesce, indices, src_bits, capacity, policy, row_len))
    elif atomic == "add" and kind(dtype) == "float" and not (dtype in ("float16", "bfloat16") and halves_exact):
        check_float_add(got, initial, expected, dtype, coalesce, indices, src_bits, capacity, policy, row_len)
    else:
        np.testing.assert_array_equal(got, expected)
    if atomic == "none" and conflict == "last":          # deterministic: the same bits on every run
        for _ in range(2):
            table.reset(full0)
            run_scatter(table, src, idx, coalesce, atomic, policy, conflict)
            np.testing.assert_array_equal(table.core(), got)


def check_float_add(got, initial, expected, dtype, coalesce, indices, src_bits, capacity, policy, row_len):
    """float Add: within the stated tolerance (FLOAT32_ADD_TOL vs the float64 sum for float32, HALF_ADD_TOL vs
    the sequential oracle for float16 / bfloat16); bit-exact where a slot has at most one writer."""
    t0 = from_bits(initial, dtype).astype(np.float64)
    exact, mag, count = t0.copy(), np.abs(t0), np.zeros(len(t0), int)
    for e, v in writers(coalesce, indices, src_bits, capacity, policy, row_len):
        x = float(from_bits(np.array([v]), dtype)[0])
        exact[e] += x
        mag[e] += abs(x)
        count[e] += 1
    g = from_bits(got, dtype).astype(np.float64)
    assert np.isfinite(g).all()
    single = count <= 1
    np.testing.assert_array_equal(got[single], expected[single])
    u = UNIT_ROUNDOFF[dtype]
    if dtype == "float32":
        err, tol = np.abs(g - exact), count * u * mag
    else:
        err, tol = np.abs(g - from_bits(expected, dtype).astype(np.float64)), 2 * count * u * mag
    assert (err <= tol).all(), f"float {dtype} Add off by {err.max()} (tolerance {tol[err.argmax()]})"


def row_indices(policy, capacity, n):
    """Row indices with collisions; out-of-range ones (capacity, -1, INT32_MAX) unless Undefined."""
    base = [2, capacity, capacity - 1, -1, 2, INT32_MAX, 0]
    safe = [2, 0, capacity - 1, 3 % capacity, 2, 2, 0]
    return (safe if policy == "undefined" else base)[:n]


def elem_indices(rng, policy, capacity, shape):
    """Random indices with many collisions (more sources than slots); some out of range unless Undefined."""
    idx = rng.integers(0, capacity, size=shape).astype(np.int64)
    if policy != "undefined":
        flat = idx.reshape(-1)
        bad = [capacity, capacity + 1, -1, -7, INT32_MAX, 1000]
        pos = rng.choice(flat.size, size=min(len(bad), flat.size), replace=False)
        flat[pos] = bad[: len(pos)]
    return idx


# -- every kernel x every A5 dtype x every ScatterOOB x every atomic x both conflicts -----------------------------

def _mid_word_add(dtype, atomic):
    return atomic == "add" and dtype in ("float16", "bfloat16")


def _forms(kernel, dtype, atomic):
    if kernel == "elem" and atomic != "none" and not _mid_word_add(dtype, atomic):
        return ("atomic",)
    if kernel == "row" and atomic != "none" and dtype in ("int32", "uint32", "float32"):
        return ("atomic", "alone")
    return (None,)


MATRIX = [(k, d, p, a, c, form) for k in KERNELS for a in ATOMIC_OPS for d in A5_ATOMIC_DTYPES[a]
          for p in SCATTER_POLICIES for c in CONFLICTS for form in _forms(k, d, a)]
"""The Elem kernel with an atomic op runs as the atomic kernel (``scatter_form``: on ``multicore`` a small one
would run its plain-store form, which ``test_elem_serial.py`` checks for every policy); a 16-bit float Add into these
tables (which start mid-word) has no other form. The Row kernel's Add, Max and Min on 32-bit elements run in both
forms (its plain-store form, ``simt_mscatter_row_serial_kernel``, is the one a small call takes on ``multicore``)."""


@pytest.mark.parametrize("kernel, dtype, policy, atomic, conflict, scatter_form", budgeted(MATRIX, None),
                         indirect=["scatter_form"])   # all 736
def test_scatter_matrix(kernel, dtype, policy, atomic, conflict, scatter_form):
    rng = case_rng("scatter", kernel, dtype, policy, atomic, conflict)
    mc = min_contiguous(dtype)
    if kernel in ("row", "row_1x1"):
        R, C, cap = (6, mc + 3, 6) if kernel == "row" else (1, 1, 6)
        table = GuardedTable(dtype, atomic_values(rng, cap * C, dtype, atomic), shape=(cap, C))
        indices = row_indices(policy, cap, R) if kernel == "row" else [4 if policy == "undefined" else -1]
        src_bits = atomic_values(rng, (R, C), dtype, atomic)
        src = make_tile(dtype, 8 if R > 1 else 1, 2 * mc if R > 1 else mc, valid=(R, C), logical_bits=src_bits)
        idx = index_tile(indices, "row")
        check_scatter(table, src, idx, "row", indices, src_bits, cap, policy, atomic, conflict, row_len=C)
    else:
        shape, cap = ((3, mc + 3), 24) if kernel == "elem" else ((1, 1), 40)
        table = GuardedTable(dtype, atomic_values(rng, cap, dtype, atomic), shape=(cap,))
        if kernel == "elem":
            indices = elem_indices(rng, policy, cap, shape)
        else:
            indices = np.array([[17 if policy == "undefined" else -1]])
        src_bits = atomic_values(rng, shape, dtype, atomic)
        src = make_tile(dtype, 4 if shape[0] > 1 else 1, 2 * mc if shape[0] > 1 else mc, valid=shape,
                        logical_bits=src_bits)
        idx = index_tile(indices, "elem")
        check_scatter(table, src, idx, "elem", indices, src_bits, cap, policy, atomic, conflict)


# -- layouts and shapes ------------------------------------------------------------------------------------------

SCENARIOS = ("row_colmajor_src", "row_col_idx", "row_uint32_idx", "row_wide", "row_heavy_collisions",
             "elem_colmajor_both", "elem_colmajor_src", "elem_colmajor_idx", "elem_uint32_idx", "elem_column",
             "elem_heavy_collisions", "elem_5d_table")


@pytest.mark.parametrize("scenario, dtype, policy, atomic, conflict", budgeted(
    [(s, d, p, a, c) for s in SCENARIOS for a in ATOMIC_OPS for d in A5_ATOMIC_DTYPES[a] for p in SCATTER_POLICIES
     for c in CONFLICTS], 240))
def test_scatter_layouts(scenario, dtype, policy, atomic, conflict):
    rng = case_rng(scenario, dtype, policy, atomic, conflict)
    mc = min_contiguous(dtype)
    if scenario.startswith("row"):
        R, C, cap, idx_layout, idx_dtype, src_layout = 5, 7, 6, "row", "int32", "row_major"
        if scenario == "row_colmajor_src":
            src_layout = "col_major"
        elif scenario == "row_col_idx":
            idx_layout = "col"
        elif scenario == "row_uint32_idx":
            idx_dtype = "uint32"
        elif scenario == "row_wide":             # kWarpsPerRow > 1
            R, C = 2, 70
        elif scenario == "row_heavy_collisions":  # 12 rows into 2 table rows
            R, cap = 12, 2
        if policy == "undefined":
            indices = [(3 * r + 2) % cap for r in range(R)] if R < 12 else [r % 2 for r in range(R)]
        elif idx_dtype == "uint32":
            indices = [2, 2 ** 31 + 5, 0xFFFFFFFF, cap, 1][:R]
        elif R == 12:
            indices = [1, 0, 1, 1, -1, 3, 0, 1, 2, 1, 0, 1]
        else:
            indices = row_indices(policy, cap, R)
        table = GuardedTable(dtype, atomic_values(rng, cap * C, dtype, atomic), shape=(cap, C))
        src_bits = atomic_values(rng, (R, C), dtype, atomic)
        if src_layout == "col_major":
            src = make_tile(dtype, round_up(8, mc), 12, valid=(R, C), blayout="col_major", logical_bits=src_bits)
        else:
            src = make_tile(dtype, round_up(R, 8), round_up(C + 1, mc), valid=(R, C), logical_bits=src_bits)
        idx = index_tile(indices, idx_layout, idx_dtype)
        check_scatter(table, src, idx, "row", indices, src_bits, cap, policy, atomic, conflict, row_len=C)
        return
    shape, cap, src_layout, idx_layout, idx_dtype = (5, 6), 20, "row_major", "elem", "int32"
    if scenario == "elem_colmajor_both":
        src_layout, idx_layout = "col_major", "elem_col"
    elif scenario == "elem_colmajor_src":
        src_layout = "col_major"
    elif scenario == "elem_colmajor_idx":
        idx_layout = "elem_col"
    elif scenario == "elem_uint32_idx":
        idx_dtype = "uint32"
    elif scenario == "elem_column":
        shape = (6, 1)
    elif scenario == "elem_heavy_collisions":    # 40 elements into 3 slots
        shape, cap = (4, 10), 3
    elif scenario == "elem_5d_table":
        cap = 2 * 3 * 1 * 2 * 2
    table_shape = (2, 3, 1, 2, 2) if scenario == "elem_5d_table" else (cap,)
    table = GuardedTable(dtype, atomic_values(rng, cap, dtype, atomic), shape=table_shape)
    indices = elem_indices(rng, policy, cap, shape)
    if idx_dtype == "uint32" and policy != "undefined":
        indices.reshape(-1)[:2] = [2 ** 31 + 3, 0xFFFFFFFE]
    src_bits = atomic_values(rng, shape, dtype, atomic)
    if src_layout == "col_major":
        src = make_tile(dtype, round_up(8, mc), 8, valid=shape, blayout="col_major", logical_bits=src_bits)
    else:
        src = make_tile(dtype, 8, round_up(shape[1] + 1, mc), valid=shape, logical_bits=src_bits)
    idx = index_tile(indices, idx_layout, idx_dtype)
    check_scatter(table, src, idx, "elem", indices, src_bits, cap, policy, atomic, conflict)


# -- hand-computed goldens ---------------------------------------------------------------------------------------

def test_last_row_golden():
    """Rows 0 and 2 both write table row 1: row 2 (the larger source index) wins; row 3's -1 wraps to
    4294967295 % 4 = 3; table row 2 is untouched."""
    table = GuardedTable("int32", np.full(4 * 3, 7), shape=(4, 3))
    src = make_tile("int32", 4, 8, valid=(4, 3), logical_bits=[[10, 11, 12], [20, 21, 22], [30, 31, 32],
                                                                [40, 41, 42]])
    pto.mscatter(table.tensor, src, index_tile([1, 0, 1, -1]), coalesce="row", oob="wrap", conflict="last")
    np.testing.assert_array_equal(table.core().view(np.int32).reshape(4, 3),
                                  [[20, 21, 22], [30, 31, 32], [7, 7, 7], [40, 41, 42]])
    assert table.guards_intact()


def test_last_elem_golden():
    """Flat sources 0, 2 and 5 all write slot 3: source 5 wins. -1 clamps to 7; 8 (= capacity) clamps to 7
    too and comes later, so it wins slot 7."""
    table = GuardedTable("float32", to_bits(np.zeros(8), "float32"), shape=(8,))
    src_vals = np.array([[1.0, 2.0, 3.0], [4.0, -1.0, 6.0], [7.0, 8.0, 9.0]], np.float32)
    src = make_tile("float32", 3, 8, valid=(3, 3), logical_bits=to_bits(src_vals, "float32"))
    idx = index_tile([[3, 0, 3], [-1, 8, 3], [1, 1, 2]], "elem")
    pto.mscatter(table.tensor, src, idx, coalesce="elem", oob="clamp", conflict="last")
    np.testing.assert_array_equal(from_bits(table.core(), "float32"), [2.0, 8.0, 9.0, 6.0, 0, 0, 0, -1.0])


@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_skip_leaves_out_of_range_untouched(coalesce):
    """Skip: the rows / elements whose index is out of range (capacity, -1, 2**31 - 1) are not written."""
    if coalesce == "row":
        table = GuardedTable("uint16", np.arange(3 * 4), shape=(3, 4))
        src = make_tile("uint16", 4, 16, valid=(4, 4), logical_bits=np.arange(100, 116).reshape(4, 4))
        pto.mscatter(table.tensor, src, index_tile([3, 1, -1, INT32_MAX]), coalesce="row", oob="skip")
        np.testing.assert_array_equal(table.core().reshape(3, 4), [[0, 1, 2, 3], [104, 105, 106, 107],
                                                                   [8, 9, 10, 11]])
    else:
        table = GuardedTable("uint16", np.arange(6), shape=(6,))
        src = make_tile("uint16", 1, 16, valid=(1, 5), logical_bits=[[100, 101, 102, 103, 104]])
        pto.mscatter(table.tensor, src, index_tile([[6, 2, -1, 4, INT32_MAX]], "elem"), coalesce="elem",
                     oob="skip")
        np.testing.assert_array_equal(table.core(), [0, 1, 101, 3, 103, 5])
    assert table.guards_intact()


# -- atomics -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["int32", "uint32"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_add_integer_wraparound(kernel, dtype):
    """n adds of 2 into one slot: int32 INT32_MAX - 1 wraps past INT32_MIN, uint32 0xFFFFFFFF past 0."""
    start = INT32_MAX - 1 if dtype == "int32" else 0xFFFFFFFF
    n = 1 if kernel.endswith("1x1") else 3
    if kernel.startswith("row"):
        table = GuardedTable(dtype, np.full(2, start, np.uint32), shape=(2, 1))
        src = make_tile(dtype, 8, 8, valid=(n, 1), logical_bits=np.full((n, 1), 2, np.uint32))
        pto.mscatter(table.tensor, src, index_tile([1] * n), coalesce="row", atomic="add")
    else:
        table = GuardedTable(dtype, np.full(2, start, np.uint32), shape=(2,))
        src = make_tile(dtype, 1, 8, valid=(1, n), logical_bits=np.full((1, n), 2, np.uint32))
        pto.mscatter(table.tensor, src, index_tile(np.ones((1, n)), "elem"), coalesce="elem", atomic="add")
    total = (start + 2 * n) & 0xFFFFFFFF          # int32: 0x80000000 + 2n - 2 is INT32_MIN + 2n - 2
    want = total - 2 ** 32 if dtype == "int32" and total >= 2 ** 31 else total
    assert want == {("int32", 1): -2 ** 31, ("int32", 3): -2 ** 31 + 4, ("uint32", 1): 1, ("uint32", 3): 5}[(dtype, n)]
    got = from_bits(table.core(), dtype)
    assert (int(got[0]), int(got[1])) == (int(from_bits(np.uint32(start), dtype)), want)
    assert table.guards_intact()


@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_add_float32_heavy_collisions(coalesce):
    """128 values (mixed signs and magnitudes) into 3 slots: within FLOAT32_ADD_TOL of the float64 sum."""
    rng = case_rng("f32add", coalesce)
    vals = (rng.standard_normal(128) * 10.0 ** rng.integers(-3, 4, 128)).astype(np.float32)
    init = np.array([0.5, -1e3, 3.0], np.float32)
    if coalesce == "row":
        table = GuardedTable("float32", to_bits(init.reshape(3, 1).repeat(8, 1), "float32"), shape=(3, 8))
        src_bits = to_bits(vals.reshape(16, 8), "float32")
        indices = list(rng.integers(0, 3, 16))
        src, idx = make_tile("float32", 16, 8, logical_bits=src_bits), index_tile(indices)
    else:
        table = GuardedTable("float32", to_bits(init, "float32"), shape=(3,))
        src_bits = to_bits(vals.reshape(4, 32), "float32")
        indices = rng.integers(0, 3, (4, 32))
        src, idx = make_tile("float32", 4, 32, logical_bits=src_bits), index_tile(indices, "elem")
    check_scatter(table, src, idx, coalesce, indices, src_bits, 3, "undefined", "add", "default",
                  row_len=8 if coalesce == "row" else 0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_add_half_small_integers_exact(kernel, dtype):
    """Small integers: every partial sum is exact in float16 / bfloat16, so any order gives the oracle's bits.
    Heavy collisions: every source hits slot 1 (Elem) / table row 1 (Row)."""
    n = 1 if kernel.endswith("1x1") else 12 if kernel == "row" else 24     # Row: one warp per source row
    src_vals = (np.arange(n) % 7 - 3).astype(np.float32)       # -3 .. 3: every partial sum within +-20
    if kernel.startswith("row"):
        coalesce, indices = "row", [1] * n
        table = GuardedTable(dtype, to_bits(np.full((3, 1), 5.0), dtype), shape=(3, 1))
        src_bits = to_bits(src_vals.reshape(n, 1), dtype)
        src, idx = make_tile(dtype, 16, 16, valid=(n, 1), logical_bits=src_bits), index_tile(indices)
    else:
        coalesce, indices = "elem", np.ones((1, n), np.int64)
        table = GuardedTable(dtype, to_bits(np.full(3, 5.0), dtype), shape=(3,))
        src_bits = to_bits(src_vals.reshape(1, n), dtype)
        src, idx = make_tile(dtype, 1, 32, valid=(1, n), logical_bits=src_bits), index_tile(indices, "elem")
    pto.mscatter(table.tensor, src, idx, coalesce=coalesce, atomic="add")
    got = from_bits(table.core(), dtype).astype(np.float64)
    np.testing.assert_array_equal(got, [5.0, 5.0 + src_vals.sum(), 5.0])
    np.testing.assert_array_equal(table.core(), scatter(to_bits(np.full(3, 5.0), dtype), dtype, coalesce, indices,
                                                        src_bits, 3, "undefined", "add", row_len=1))
    assert table.guards_intact()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("lead, n, tail", [(12, 6, 2), (12, 5, 2), (13, 6, 2), (12, 6, 1), (12, 5, 0)],
                         ids=["whole-words", "odd-table", "mid-word-start", "mid-word-end", "odd-end-of-buffer"])
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_add_half_on_any_word_alignment(coalesce, dtype, lead, n, tail):
    """The CAS loop works on whole 32-bit words: memory that covers whole words is used in place, memory
    that starts or ends mid-word is staged. Either way every slot gets its exact sum (small integers) and
    the elements around the table, inside and outside the wrapped memory, keep their bits."""
    init = np.arange(n) % 3 + 1.0
    indices = [i % n for i in range(2 * n)]            # every slot twice, the first and the last included
    vals = (np.arange(2 * n) % 5 - 2).astype(np.float64)
    want = init.copy()
    np.add.at(want, indices, vals)
    src_bits = to_bits(vals, dtype)
    if coalesce == "row":
        table = GuardedTable(dtype, to_bits(init, dtype), shape=(n, 1), lead=lead, tail=tail)
        src, idx = make_tile(dtype, 16, 16, valid=(2 * n, 1), logical_bits=src_bits.reshape(-1, 1)), index_tile(indices)
    else:
        table = GuardedTable(dtype, to_bits(init, dtype), shape=(n,), lead=lead, tail=tail)
        src, idx = make_tile(dtype, 1, 32, valid=(1, 2 * n), logical_bits=src_bits.reshape(1, -1)), \
            index_tile([indices], "elem")
    pto.mscatter(table.tensor, src, idx, coalesce=coalesce, atomic="add")
    np.testing.assert_array_equal(from_bits(table.core(), dtype).astype(np.float64), want)
    assert table.guards_intact()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("lead", [0, 1], ids=["odd-table", "mid-word-start"])
def test_add_half_stages_only_the_boundary_words(dtype, lead):
    """A table that ends (odd length) or starts (2 bytes past a 4-byte boundary) mid-word: the CAS runs on the
    table's own whole words and only the boundary element is staged, so 10 adds into a 1,000,001-element table
    allocate O(1) memory, not a copy of the table (2 MB there and back)."""
    import tracemalloc
    n = 1_000_001
    buf = np.zeros(n + 2, dtype=pto.dtypes.resolve(dtype).numpy)
    table = pto.GlobalTensor(buf[lead:lead + n])
    indices = [0, n - 1, 1, n - 2, 0, n - 1, 7, 500_000, 2, n - 1]
    vals = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], dtype=np.float64)
    src = make_tile(dtype, 1, 32, valid=(1, 10), logical_bits=to_bits(vals, dtype).reshape(1, -1))
    idx = index_tile([indices], "elem")
    pto.mscatter(table, src, idx, coalesce="elem", atomic="add")  # compiles the kernel: not measured
    tracemalloc.start()
    try:
        pto.mscatter(table, src, idx, coalesce="elem", atomic="add")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, f"{peak} bytes allocated for 10 adds"
    want = np.zeros(n)
    np.add.at(want, indices, 2 * vals)
    np.testing.assert_array_equal(table.array.astype(np.float64), want)
    assert not np.any(buf[:lead].astype(np.float64)) and not np.any(buf[lead + n:].astype(np.float64))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_add_half_random_values(coalesce, dtype):
    """Random values, rounded at every add: within HALF_ADD_TOL of the sequential float32-rounded oracle."""
    rng = case_rng("halfadd", coalesce, dtype)
    if coalesce == "row":
        table = GuardedTable(dtype, atomic_values(rng, 4 * 16, dtype, "add", exact_halves=False), shape=(4, 16))
        src_bits = atomic_values(rng, (10, 16), dtype, "add", exact_halves=False)
        indices = list(rng.integers(0, 4, 10))
        src, idx = make_tile(dtype, 16, 16, valid=(10, 16), logical_bits=src_bits), index_tile(indices)
    else:
        table = GuardedTable(dtype, atomic_values(rng, 5, dtype, "add", exact_halves=False), shape=(5,))
        src_bits = atomic_values(rng, (3, 20), dtype, "add", exact_halves=False)
        indices = rng.integers(0, 5, (3, 20))
        src, idx = make_tile(dtype, 3, 32, valid=(3, 20), logical_bits=src_bits), index_tile(indices, "elem")
    check_scatter(table, src, idx, coalesce, indices, src_bits, 5 if coalesce == "elem" else 4, "undefined", "add",
                  "last", row_len=16 if coalesce == "row" else 0, halves_exact=False)


ROUNDING_CASES = {
    # (table value, added value) -> the sum rounded to nearest, ties to even, in the element type
    "float16": [(1.0, 2.0 ** -11, 1.0),                        # tie: 1 + half an ulp -> even 1.0
                (1.0, 3 * 2.0 ** -11, 1.0 + 2.0 ** -9),        # tie between 1 + 2**-10 (odd) and 1 + 2**-9 (even)
                (1.0, 2.0 ** -11 + 2.0 ** -20, 1.0 + 2.0 ** -10),  # just above the tie: up
                (2048.0, 1.0, 2048.0),                         # 2049 is a tie: even 2048
                (65504.0, 32.0, np.inf),                       # past max + half an ulp: overflow
                (-1.0, 1.0, 0.0)],                             # x + (-x) = +0
    "bfloat16": [(1.0, 2.0 ** -8, 1.0),
                 (1.0, 3 * 2.0 ** -8, 1.0 + 2.0 ** -6),
                 (1.0, 2.0 ** -8 + 2.0 ** -14, 1.0 + 2.0 ** -7),
                 (256.0, 1.0, 256.0),
                 (3.0e38, 3.0e38, np.inf),
                 (-1.0, 1.0, 0.0)],
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_add_half_rounds_to_nearest_even(kernel, dtype):
    """One add per slot, so order cannot matter: each sum must be the correctly rounded (RNE) one, bit for
    bit, as the oracle's (np.float32(a) + np.float32(b)).astype(T) and the hand values say."""
    cases = [ROUNDING_CASES[dtype][1]] if kernel.endswith("1x1") else ROUNDING_CASES[dtype]
    init = to_bits(np.array([t for t, _, _ in cases], np.float32), dtype)
    add = to_bits(np.array([v for _, v, _ in cases], np.float32), dtype)
    n = len(cases)
    if kernel.startswith("row"):
        table = GuardedTable(dtype, init, shape=(n, 1))
        src = make_tile(dtype, 8, 16, valid=(n, 1), logical_bits=add.reshape(n, 1))
        pto.mscatter(table.tensor, src, index_tile(range(n)), coalesce="row", atomic="add")
    else:
        table = GuardedTable(dtype, init, shape=(n,))
        src = make_tile(dtype, 1, 16, valid=(1, n), logical_bits=add.reshape(1, n))
        pto.mscatter(table.tensor, src, index_tile([range(n)], "elem"), coalesce="elem", atomic="add")
    want = to_bits(np.array([w for _, _, w in cases], np.float32), dtype)
    np.testing.assert_array_equal(table.core(), want)
    np.testing.assert_array_equal(want, scatter(init, dtype, "elem", [list(range(n))], add.reshape(1, n), n,
                                                "undefined", "add"))
    assert table.guards_intact()


FLOAT_INIT = [-5.0, 3.0, -1.0, 0.5, -2.5, 7.0]
FLOAT_IDX = [0, 0, 1, 1, 2, 2, 3, 4, 4]
FLOAT_SRC = [-3.0, -7.0, -4.0, 2.0, -0.5, -3.0, -0.25, 1.5, -9.0]
FLOAT_WANT = {"max": [-3.0, 3.0, -0.5, 0.5, 1.5, 7.0], "min": [-7.0, -4.0, -3.0, -0.25, -9.0, 7.0]}


@pytest.mark.parametrize("atomic", ["max", "min"])
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_max_min_float32_negative_and_mixed_signs(coalesce, atomic):
    """float32 Max / Min on integer atomics over the bit patterns: negatives against negatives, negatives
    against positives, both ways. Slot 5 is written by nobody."""
    if coalesce == "row":
        table = GuardedTable("float32", to_bits(np.repeat(FLOAT_INIT, 2), "float32"), shape=(6, 2))
        src_bits = to_bits(np.repeat(np.array(FLOAT_SRC)[:, None], 2, 1), "float32")
        src = make_tile("float32", 16, 8, valid=(9, 2), logical_bits=src_bits)
        pto.mscatter(table.tensor, src, index_tile(FLOAT_IDX), coalesce="row", atomic=atomic)
        got = from_bits(table.core(), "float32").reshape(6, 2)
        np.testing.assert_array_equal(got, np.repeat(np.array(FLOAT_WANT[atomic])[:, None], 2, 1))
    else:
        table = GuardedTable("float32", to_bits(FLOAT_INIT, "float32"), shape=(6,))
        src = make_tile("float32", 1, 16, valid=(1, 9), logical_bits=to_bits([FLOAT_SRC], "float32"))
        pto.mscatter(table.tensor, src, index_tile([FLOAT_IDX], "elem"), coalesce="elem", atomic=atomic)
        np.testing.assert_array_equal(from_bits(table.core(), "float32"), FLOAT_WANT[atomic])
    assert table.guards_intact()


@pytest.mark.parametrize("atomic", ["max", "min"])
@pytest.mark.parametrize("dtype", ["int32", "uint32"])
def test_max_min_integers_signedness(dtype, atomic):
    """0x80000000 and 0xFFFFFFFF are the smallest int32 values but the largest uint32 ones."""
    init = np.array([0x00000005, 0x7FFFFFFF, 0x80000000, 0], np.uint32)
    src = np.array([[0xFFFFFFFF, 0x80000000, 0x00000001, 0x7FFFFFFF, 0xFFFFFFFF, 0x00000010]], np.uint32)
    indices = [[0, 0, 1, 2, 2, 3]]
    table = GuardedTable(dtype, init, shape=(4,))
    pto.mscatter(table.tensor, make_tile(dtype, 1, 8, valid=(1, 6), logical_bits=src), index_tile(indices, "elem"),
                 coalesce="elem", atomic=atomic)
    want = scatter(init, dtype, "elem", indices, src, 4, "undefined", atomic)
    np.testing.assert_array_equal(table.core(), want)
    hand = {("int32", "max"): [5, 0x7FFFFFFF, 0x7FFFFFFF, 0x10], ("int32", "min"): [0x80000000, 1, 0x80000000, 0],
            ("uint32", "max"): [0xFFFFFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 0x10], ("uint32", "min"): [5, 1, 0x7FFFFFFF, 0]}
    np.testing.assert_array_equal(want, hand[(dtype, atomic)])


# -- Default without collisions is exact ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["int8", "float16", "float32", "hifloat8"])
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_default_without_collisions_is_exact(coalesce, dtype):
    """MSCATTER.md: "For collision-free index sets the result is identical to Last"."""
    rng = case_rng("nocollide", coalesce, dtype)
    mc = min_contiguous(dtype)
    if coalesce == "row":
        cap, C = 8, 5
        indices = list(rng.permutation(cap)[:6])
        table = GuardedTable(dtype, random_bits(rng, cap * C, dtype), shape=(cap, C))
        src_bits = random_bits(rng, (6, C), dtype)
        src, idx = make_tile(dtype, 8, mc, valid=(6, C), logical_bits=src_bits), index_tile(indices)
    else:
        cap = 40
        indices = rng.permutation(cap)[:24].reshape(3, 8)
        table = GuardedTable(dtype, random_bits(rng, cap, dtype), shape=(cap,))
        src_bits = random_bits(rng, (3, 8), dtype)
        src, idx = make_tile(dtype, 3, mc, valid=(3, 8), logical_bits=src_bits), index_tile(indices, "elem")
    initial = table.core()
    pto.mscatter(table.tensor, src, idx, coalesce=coalesce, conflict="default")
    want = scatter(initial, dtype, coalesce, indices, src_bits, cap, "undefined", "none", row_len=5)
    np.testing.assert_array_equal(table.core(), want)
    assert table.guards_intact()


# -- Undefined: refused out-of-range indices; strict=False drops the write -------------------------------------------

@pytest.mark.parametrize("atomic, conflict", [("none", "last"), ("none", "default"), ("add", "last"),
                                              ("max", "default")])
@pytest.mark.parametrize("kernel", KERNELS)
def test_undefined_out_of_range_raises_and_writes_nothing(kernel, atomic, conflict):
    rng = case_rng("undef", kernel, atomic, conflict)
    row = kernel.startswith("row")
    R, C = (1, 1) if kernel.endswith("1x1") else (3, 8)
    cap = 5
    table = GuardedTable("int32", random_bits(rng, cap * C if row else cap, "int32"),
                         shape=(cap, C) if row else (cap,))
    if row:
        indices = [0, -1, 1] if R > 1 else [cap]
    else:
        indices = np.zeros((R, C), np.int64)
        indices[-1, -1] = cap
    src = make_tile("int32", R, 8, valid=(R, C), logical_bits=random_bits(rng, (R, C), "int32"))
    before = table.snapshot()
    with pytest.raises(pto.OutOfBoundsError, match=r"MSCATTER on a5: 1 index\(es\) out of range \[0, 5\)"):
        pto.mscatter(table.tensor, src, index_tile(indices, "row" if row else "elem"),
                     coalesce="row" if row else "elem", atomic=atomic, conflict=conflict, oob="undefined")
    np.testing.assert_array_equal(table.snapshot(), before)


@pytest.mark.parametrize("atomic, conflict", [("none", "last"), ("none", "default"), ("add", "last")])
@pytest.mark.parametrize("kernel", KERNELS)
def test_non_strict_undefined_drops_out_of_range_writes(kernel, atomic, conflict):
    rng = case_rng("nonstrict", kernel, atomic, conflict)
    row = kernel.startswith("row")
    R, C = (1, 1) if kernel.endswith("1x1") else (4, 8)
    cap = 5
    table = GuardedTable("uint32", random_bits(rng, cap * C if row else cap, "uint32"),
                         shape=(cap, C) if row else (cap,))
    if row:
        indices = [3, cap, -1, 1] if R > 1 else [-1]
    else:
        indices = rng.permutation(np.arange(R * C) % cap).reshape(R, C) if R > 1 else np.array([[cap]])
        indices.reshape(-1)[:2] = [cap, -1][: indices.size]
    src_bits = random_bits(rng, (R, C), "uint32")
    src = make_tile("uint32", R, 8, valid=(R, C), logical_bits=src_bits)
    initial = table.core()
    pto.mscatter(table.tensor, src, index_tile(indices, "row" if row else "elem"), coalesce="row" if row else "elem",
                 atomic=atomic, conflict=conflict, oob="undefined", strict=False)
    coalesce = "row" if row else "elem"
    if conflict == "default":
        assert_one_of_colliders(table.core(), initial, candidates(coalesce, indices, src_bits, cap, "skip", C))
    else:
        np.testing.assert_array_equal(table.core(), scatter(initial, "uint32", coalesce, indices, src_bits, cap,
                                                            "skip", atomic, row_len=C))
    assert table.guards_intact()


# -- A5 rejections (ConstraintError, with the rule text) -------------------------------------------------------

def _elem_call(dtype, atomic):
    table = GuardedTable(dtype, np.zeros(8, pto.dtypes.resolve(dtype).bits), shape=(8,))
    src = make_tile(dtype, 1, min_contiguous(dtype), valid=(1, 2))
    return lambda: pto.mscatter(table.tensor, src, index_tile([[0, 1]], "elem"), coalesce="elem", atomic=atomic)


def test_reject_max_on_float16():
    with pytest.raises(pto.ConstraintError, match=r"atomic Max on a5 supports int32, uint32, float32; got float16 "
                                                  r"\(rule: Atomic Type Support\)"):
        _elem_call("float16", "max")()


def test_reject_add_on_int8():
    with pytest.raises(pto.ConstraintError, match=r"atomic Add on a5 supports int32, uint32, float32, float16, "
                                                  r"bfloat16; got int8 \(rule: Atomic Type Support\)"):
        _elem_call("int8", "add")()


@pytest.mark.parametrize("atomic", ["add", "max", "min"])
def test_reject_every_unsupported_atomic_dtype(atomic):
    """Every A5 dtype outside the atomic's row of the spec table is refused, and every one inside accepted."""
    spec = {"add": {"int32", "uint32", "float32", "float16", "bfloat16"}, "max": {"int32", "uint32", "float32"},
            "min": {"int32", "uint32", "float32"}}[atomic]
    for dtype in A5_DTYPES:
        if dtype in spec:
            _elem_call(dtype, atomic)()
        else:
            with pytest.raises(pto.ConstraintError, match=rf"atomic {atomic.capitalize()} on a5 .*got {dtype}"):
                _elem_call(dtype, atomic)()


def test_reject_nz_table():
    table = pto.GlobalTensor.nz_from_matrix(np.zeros((16, 8), np.float32))
    src = make_tile("float32", 2, 8, valid=(2, 8))
    with pytest.raises(pto.ConstraintError, match=r"GM table Layout::ND only"):
        pto.mscatter(table, src, index_tile([0, 1]), coalesce="row")


def test_reject_row_table_shape4_not_valid_cols():
    table = GuardedTable("float32", np.zeros(4 * 8, np.uint32), shape=(4, 8))
    src = make_tile("float32", 2, 8, valid=(2, 6))
    with pytest.raises(pto.ConstraintError, match=r"MSCATTER on a5: table Shape\[4\] = 8, src valid cols = 6 "
                                                  r".*staticShape\[4\] == ValidCol"):
        pto.mscatter(table.tensor, src, index_tile([0, 1]), coalesce="row")
    np.testing.assert_array_equal(table.core(), 0)


def test_reject_row_major_r_by_1_index_tile():
    table = GuardedTable("float32", np.zeros(4 * 8, np.uint32), shape=(4, 8))
    src = make_tile("float32", 4, 8, valid=(3, 8))
    bad = make_tile("int32", 3, 8, valid=(3, 1), logical_bits=np.zeros((3, 1), np.uint32))
    with pytest.raises(pto.ConstraintError, match=r"Row: an \[R, 1\] index tile is BLayout::ColMajor"):
        pto.mscatter(table.tensor, src, bad, coalesce="row")


def test_working_set_over_128k_needs_dyn_ubuf_size():
    """src 128 x 256 float32 (128 KiB padded) + a 1 KiB index tile, but only 2 x 8 valid: cheap to run."""
    def call(dyn):
        table = GuardedTable("float32", to_bits(np.zeros(3 * 8), "float32"), shape=(3, 8))
        src = make_tile("float32", 128, 256, valid=(2, 8), logical_bits=to_bits(np.arange(16).reshape(2, 8),
                                                                                 "float32"))
        pto.mscatter(table.tensor, src, index_tile([2, 0], cols=256), coalesce="row", dyn_ubuf_size=dyn)
        return table

    with pytest.raises(pto.ConstraintError, match=r"UB working set within budget"):
        call(None)
    with pytest.raises(pto.ConstraintError, match=r"max dynUBufSize = 256 KB - 8 KB reserved - 32 KB min DCache"):
        call(216 * 1024 + 1)
    table = call(216 * 1024)
    np.testing.assert_array_equal(from_bits(table.core(), "float32").reshape(3, 8),
                                  [np.arange(8, 16), np.zeros(8), np.arange(8)])


@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_max_min_float32_signed_zero_and_nan_order(coalesce):
    """The SIMT float32 Max / Min order the bit patterns like sign-magnitude integers (kernels/a5/device.py,
    ``store_max_f32``): -0.0 < +0.0 whichever comes first, a NaN with the sign clear is above every number
    (it wins Max, loses Min). Pinned for the SIMT kernels; MSCATTER.md leaves NaN and signed zero open."""
    nan = np.float32("nan")
    init = np.array([-0.0, 0.0, 1.0, nan, -3.0], np.float32)
    src_vals = np.array([0.0, -0.0, nan, 1.0, -2.0], np.float32)
    want = {"max": [0.0, 0.0, nan, nan, -2.0], "min": [-0.0, -0.0, 1.0, 1.0, -3.0]}
    for atomic in ("max", "min"):
        if coalesce == "row":
            table = GuardedTable("float32", to_bits(init.reshape(5, 1), "float32"), shape=(5, 1))
            src = make_tile("float32", 8, 8, valid=(5, 1), logical_bits=to_bits(src_vals.reshape(5, 1), "float32"))
            pto.mscatter(table.tensor, src, index_tile(range(5)), coalesce="row", atomic=atomic)
        else:
            table = GuardedTable("float32", to_bits(init, "float32"), shape=(5,))
            src = make_tile("float32", 1, 8, valid=(1, 5), logical_bits=to_bits(src_vals[None, :], "float32"))
            pto.mscatter(table.tensor, src, index_tile([range(5)], "elem"), coalesce="elem", atomic=atomic)
        np.testing.assert_array_equal(table.core(), to_bits(np.array(want[atomic], np.float32), "float32"))


EDGE_BITS = (0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00800000, 0x80800000, 0x3F800000, 0xBF800000,
             0x40490FDB, 0xC0490FDB, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7F800001, 0xFF800001,
             0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0xFFFFFFFF)
"""32-bit patterns at the edges of each order: float32 zeros, denormals, normals, the largest finite, infinities
and NaNs (signalling, quiet, payloads) of both signs; as integers 0, 1, INT32_MAX, INT32_MIN, -1 and UINT32_MAX."""


@pytest.mark.parametrize("scatter_form", ["alone", "atomic"], indirect=True)
@pytest.mark.parametrize("coalesce", ["row", "elem"])
@pytest.mark.parametrize("atomic", ["max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "uint32"])
def test_max_min_of_every_pair_of_edge_values(scatter_form, coalesce, atomic, dtype):
    """Every ordered pair of :data:`EDGE_BITS` (the table's value, the update's), one update per element, in both
    forms of the multicore backend (the atomic kernel; the plain one, whose float32 compares order keys instead of
    branching on the sign): each element as the reference's ``combine``, bit for bit; the guards around the table
    keep their bits."""
    n = len(EDGE_BITS)
    old = np.repeat(np.array(EDGE_BITS, np.uint32), n)
    new = np.tile(np.array(EDGE_BITS, np.uint32), n)
    buffer = np.full(old.size + 32, 0xA5A5A5A5, np.uint32)
    buffer[16:-16] = old
    table = buffer[16:-16].view(dtype)
    src = new.view(dtype).copy()
    if coalesce == "row":  # one row of n * n columns: each column one update
        pto.scatter(table.reshape(1, -1), src.reshape(1, -1), np.zeros(1, np.int32), coalesce="row", atomic=atomic)
    else:
        pto.scatter(table, src, np.arange(old.size, dtype=np.int32), coalesce="elem", atomic=atomic)
    want = [reference.combine(dtype, atomic, o, v) for o, v in zip(old.tolist(), new.tolist())]
    got = buffer[16:-16]
    wrong = [f"{atomic}({o:#010x}, {v:#010x}) = {g:#010x}, expected {w:#010x}"
             for o, v, g, w in zip(old.tolist(), new.tolist(), got.tolist(), want) if g != w]
    assert not wrong, f"{len(wrong)} of {old.size}: " + "; ".join(wrong[:6])
    assert (buffer[:16] == 0xA5A5A5A5).all() and (buffer[-16:] == 0xA5A5A5A5).all()


@pytest.mark.parametrize("atomic", ["max", "min"])
@pytest.mark.parametrize("t0, v", [(-0.0, 0.0), (0.0, -0.0), (1.0, np.nan), (-1.0, -2.0), (3.0, -1.0), (-3.0, 1.0)])
def test_scalar_fallback_orders_float32_like_the_simt_kernel(atomic, t0, v):
    """The (1, 1) MScatterScalarImpl and a SIMT launch agree bit for bit on signed zeros and NaN."""
    results = []
    for n in (1, 2):
        table = np.full(4, t0, np.float32)
        src = pto.Tile.from_array(np.full((1, n), v, np.float32), 1, 8, valid=(1, n))
        idx = pto.Tile.from_array(np.zeros((1, n), np.int32), 1, 8, valid=(1, n))
        pto.mscatter(pto.GlobalTensor(table), src, idx, coalesce="elem", atomic=atomic, target="a5")
        results.append(table.view(np.uint32)[0])
    assert results[0] == results[1]
