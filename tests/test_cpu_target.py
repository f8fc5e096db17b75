"""The ``cpu`` target (the CPU simulator's semantics) against plain-loop oracles written here.

MGATHER.md "CPU Reference Form": Row reads ``table[idx[r], :]`` (tableRows = Shape[3], row stride
Shape[4]); Elem reads ``table.data()[idx[i, j]]``; GatherOOB is modeled on the uint32-cast index.
MSCATTER.md "CPU Reference Form": always element-wise in row-major order, plain replace, the last writer
wins; atomic / OOB / conflict are not modeled. Values are compared as raw bits (NaN payloads included).
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import simt_pto as pto
from simt_pto import constraints
from simt_pto.enums import from_any
from simt_pto.kernels.index_policy import remap_index
from simt_pto.policy import index_rule
from simt_pto.call import mgather_policy
from conftest import SPEC_ELEMENT_DTYPES, as_bits, min_cols, random_values, sentinel_bits, uint32_of

CPU_DTYPES = SPEC_ELEMENT_DTYPES["cpu"]
GATHER_POLICIES = ("undefined", "clamp", "wrap", "zero")
INT32_MIN, INT32_MAX = -2 ** 31, 2 ** 31 - 1


def oracle_slot(index, capacity, policy):
    """The slot an index reads or writes, or None for "no slot" (Zero / Skip / non-strict Undefined)."""
    u = uint32_of(int(index))
    if policy == "clamp":
        return min(u, capacity - 1)
    if policy == "wrap":
        return u % capacity
    return u if u < capacity else None


def sentinel_tile(dtype, rows, cols, valid):
    tile = pto.Tile(dtype, rows, cols, valid=valid)
    tile.data.view(tile.dtype.bits)[:] = sentinel_bits(dtype)
    return tile


# -- the index policy itself ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["undefined", "clamp", "wrap", "zero", "skip"])
@pytest.mark.parametrize("capacity", [1, 10, 4096])
def test_remap_index_matches_the_uint32_rule(policy, capacity):
    enum = pto.ScatterOOB if policy == "skip" else pto.GatherOOB
    rule = index_rule(from_any(enum, policy), strict=False)
    for raw in (0, 1, 9, 10, 11, capacity - 1, capacity, -1, -2, INT32_MAX, INT32_MIN):
        slot, ok = remap_index(np.int32(raw), capacity, rule)
        want = oracle_slot(raw, capacity, policy)
        if want is None:
            assert not ok
        else:
            assert ok and slot == want, (raw, capacity, policy)


def test_negative_index_examples_from_the_enum_docs():
    # GatherOOB docs: -1 with capacity 10 gives 5 under Wrap (NumPy's % gives 9), 9 under Clamp.
    assert remap_index(np.int32(-1), 10, index_rule(pto.GatherOOB.WRAP)) == (5, True)
    assert remap_index(np.int32(-1), 10, index_rule(pto.GatherOOB.CLAMP)) == (9, True)
    assert remap_index(np.uint32(0xFFFFFFFF), 10, index_rule(pto.ScatterOOB.WRAP)) == (5, True)


@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_negative_index_wrap_and_clamp_on_cpu(coalesce):
    values = np.arange(10, dtype=np.int32) * 11                  # slot k holds 11 * k
    if coalesce == "row":
        table = pto.GlobalTensor(values.reshape(10, 1).repeat(8, axis=1).copy())   # 10 rows, row k = 11k
        dst = pto.Tile("int32", 2, 8)
        idx = pto.Tile.from_array(np.array([[-1, -1]], np.int32), 1, 8)
    else:
        table = pto.GlobalTensor(values)                             # 10 elements
        dst = pto.Tile("int32", 1, 8, valid=(1, 2))
        idx = pto.Tile.from_array(np.array([[-1, -1]], np.int32), 1, 8)
    pto.mgather(dst, table, idx, coalesce=coalesce, oob="wrap", target="cpu")
    assert (dst.valid_numpy() == 55).all()                      # uint32(-1) % 10 == 5
    pto.mgather(dst, table, idx, coalesce=coalesce, oob="clamp", target="cpu")
    assert (dst.valid_numpy() == 99).all()                      # min(uint32(-1), 9) == 9


@pytest.mark.parametrize("idx_dtype", [np.int32, np.uint32])
def test_mgather_uint32_and_int32_indices_agree(idx_dtype):
    table = pto.GlobalTensor(np.arange(80, dtype=np.float32).reshape(10, 8))
    raw = np.array([[-1, 12, 3]], dtype=np.int32).view(idx_dtype)      # the same 32 bits either way
    dst = pto.Tile("float32", 3, 8)
    pto.mgather(dst, table, pto.Tile.from_array(raw, 1, 8), oob="wrap", target="cpu")
    assert dst.numpy()[:, 0].tolist() == [40.0, 16.0, 24.0]            # rows 5, 2, 3


def test_mgather_row_with_an_rx1_index_tile():
    table = pto.GlobalTensor(np.arange(48, dtype=np.int16).reshape(3, 16))
    dst1 = pto.Tile("int16", 4, 16)
    pto.mgather(dst1, table, pto.Tile.from_array(np.array([[2, 0, 2, 1]], np.int32), 1, 8), target="cpu")
    dst2 = pto.Tile("int16", 4, 16)
    pto.mgather(dst2, table, pto.Tile.from_array(np.array([[2], [0], [2], [1]], np.int32), 4, 8), target="cpu")
    assert dst1.numpy().tolist() == dst2.numpy().tolist()
    assert dst2.numpy()[:, 0].tolist() == [32, 0, 32, 16]


# -- OutOfBoundsError under UNDEFINED ---------------------------------------------------------------------------

def test_out_of_bounds_gather_row_names_positions_and_values():
    table = pto.GlobalTensor(np.arange(80, dtype=np.float32).reshape(10, 8))
    dst = pto.Tile("float32", 4, 8).fill(-3.0)
    before = dst.data.tobytes()
    idx = pto.Tile.from_array(np.array([[3, 10, -1, 2]], np.int32), 1, 8)
    with pytest.raises(pto.OutOfBoundsError, match=(
            r"MGATHER on cpu: 2 index\(es\) out of range \[0, 10\) under OOB policy UNDEFINED "
            r"\(first, position: uint32 index: 1: 10, 2: 4294967295\)")) as info:
        pto.mgather(dst, table, idx, target="cpu")
    err = info.value
    assert isinstance(err, IndexError)
    assert (err.positions, err.values, err.count, err.capacity) == ([1, 2], [10, 4294967295], 2, 10)
    assert dst.data.tobytes() == before


def test_out_of_bounds_gather_elem_names_2d_positions_and_caps_the_list():
    table = pto.GlobalTensor(np.zeros(16, np.int32))
    bad = np.array([[0, 16, 1, 17, -1, 2, 99, 100], [5, 200, 3, 4, 5, 6, 7, 300]], np.int32)
    idx = pto.Tile.from_array(bad, 2, 8)
    dst = pto.Tile("int32", 2, 8)
    with pytest.raises(pto.OutOfBoundsError, match=r"7 index\(es\) out of range \[0, 16\)") as info:
        pto.mgather(dst, table, idx, coalesce="elem", target="cpu")
    err = info.value
    assert err.positions == [(0, 1), (0, 3), (0, 4), (0, 6), (0, 7)]      # the first five, row-major
    assert err.values == [16, 17, 4294967295, 99, 100]
    assert err.count == 7


def test_out_of_bounds_scatter_leaves_the_table_unchanged(guarded_table):
    g = guarded_table(4, 8, "float32")
    before = g.bits.copy()
    src = pto.Tile.from_array(np.ones((2, 8), np.float32))
    idx = pto.Tile.from_array(np.array([[0, 1, 2, 3, 4, 5, 6, 7], [8, 9, 31, 32, 10, 11, 12, -5]], np.int32))
    with pytest.raises(pto.OutOfBoundsError, match=re.escape(
            "MSCATTER on cpu: 2 index(es) out of range [0, 32) (the CPU simulator's MSCATTER ignores ScatterOOB "
            "and uses every index unchecked) (first, position: uint32 index: (1, 3): 32, (1, 7): 4294967291)")):
        pto.mscatter(g.tensor, src, idx, coalesce="elem", target="cpu")
    assert g.bits.tobytes() == before.tobytes()


@pytest.mark.parametrize("target", ["cpu", "a2a3", "a5"])
def test_out_of_bounds_check_on_every_target(target):
    """The strict check is part of the plan on every target; CLAMP (or strict=False) passes the same indices."""
    table = pto.GlobalTensor(np.zeros((6, 8), np.float32))
    idx = pto.Tile.from_array(np.array([[5, 6]], np.int32), 1, 8)

    def plan(oob, strict=True):
        return constraints.validated_mgather(mgather_policy(pto.Coalesce.ROW, oob, target, pto.GatherExec.SCALAR, strict, None),
                                             pto.Tile("float32", 2, 8), table, idx, None)

    with pytest.raises(pto.OutOfBoundsError, match=rf"MGATHER on {target}: 1 index\(es\) out of range \[0, 6\)"):
        plan("undefined")
    plan("clamp")
    plan("zero")
    plan("undefined", strict=False)


# -- MSCATTER: last writer in row-major order -------------------------------------------------------------------

def serial_scatter(table_bits, src_bits, idx_values, capacity, policy="undefined"):
    out = table_bits.copy()
    for i in range(idx_values.shape[0]):
        for j in range(idx_values.shape[1]):
            slot = oracle_slot(idx_values[i, j], capacity, policy)
            if slot is not None:
                out[slot] = src_bits[i, j]
    return out


@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_mscatter_row_walks_element_wise_last_writer_wins(dtype, guarded_table, rng):
    """The CPU simulator's MSCATTER walks element-wise in Row mode too (an [R, C] index, plain replace)."""
    coalesce = "row"
    C = 2 * min_cols(dtype)
    VC, R = C - 3, 3
    g = guarded_table(4, 10, dtype)
    capacity = 40
    start = g.core_bits()
    src_values = random_values(rng, (R, VC), dtype)
    idx_values = rng.integers(0, 6, size=(R, VC)).astype(np.int32)       # 6 slots for R * VC writers
    idx_values[2, VC - 1] = idx_values[0, 0]                             # the last writer of a shared slot
    src = sentinel_tile(dtype, 4, C, valid=(R, VC))
    src.set(src_values)
    idx = pto.Tile.from_array(idx_values, 4, C)
    expected = serial_scatter(g.bits, as_bits(src_values), idx_values, capacity)

    pto.mscatter(g.tensor, src, idx, coalesce=coalesce, target="cpu")

    assert g.bits.tobytes() == expected.tobytes()                        # slots 6.. untouched, guard intact
    assert g.guard_intact()
    assert (g.bits[6:capacity] == expected[6:capacity]).all()
    # deterministic: the same call on a fresh copy of the starting table gives the same bits
    again = guarded_table(4, 10, dtype, values=start.view(g.dtype.numpy))
    pto.mscatter(again.tensor, src, idx, coalesce=coalesce, target="cpu")
    assert again.bits.tobytes() == g.bits.tobytes()


def test_mscatter_row_major_order_hand_table():
    """A hand-computed table: slot 2 written three times, slot 0 once, slot 3 never; the last in row-major wins."""
    table = np.full(6, -1, dtype=np.int32)
    src = pto.Tile.from_array(np.array([[10, 11, 12], [13, 14, 15]], np.int32), 2, 8)
    idx = pto.Tile.from_array(np.array([[2, 0, 2], [5, 2, 1]], np.int32), 2, 8)
    pto.mscatter(pto.GlobalTensor(table), src, idx, coalesce="elem", target="cpu")
    assert table.tolist() == [11, 15, 14, -1, -1, 13]


@pytest.mark.parametrize("atomic, dtype", [("add", "int32"), ("add", "float32"), ("max", "int32"),
                                           ("min", "float32"), ("add", "float16")])
def test_cpu_ignores_atomic(atomic, dtype):
    npd = pto.dtypes.resolve(dtype).numpy
    table = np.full(4, 100, dtype=npd)
    src = pto.Tile.from_array(np.array([[1, 2, 3, 200]], npd), 1, min_cols(dtype))
    idx = pto.Tile.from_array(np.array([[1, 1, 2, 2]], np.int32), 1, 8)
    pto.mscatter(pto.GlobalTensor(table), src, idx, coalesce="elem", atomic=atomic, target="cpu")
    # plain replace, last writer: not 100 + 1 + 2 (add), not max(100, 3) (max), not min(100, 200) (min)
    assert table.tolist() == [100, 2, 200, 100]


@pytest.mark.parametrize("oob", ["undefined", "skip", "clamp", "wrap"])
@pytest.mark.parametrize("conflict", ["last", "default"])
def test_cpu_ignores_scatter_oob_and_conflict(oob, conflict):
    table = np.zeros(8, dtype=np.uint16)
    src = pto.Tile.from_array(np.array([[5, 6, 7, 8]], np.uint16), 1, 16)
    idx = pto.Tile.from_array(np.array([[7, 0, 7, 3]], np.int32), 1, 8)
    pto.mscatter(pto.GlobalTensor(table), src, idx, coalesce="elem", oob=oob, conflict=conflict, target="cpu")
    assert table.tolist() == [6, 0, 0, 8, 0, 0, 0, 7]
    # the policy is not modeled: an out-of-range index is UNDEFINED (strict) whatever oob says
    bad = pto.Tile.from_array(np.array([[8, 0, -1, 3]], np.int32), 1, 8)
    before = table.tobytes()
    with pytest.raises(pto.OutOfBoundsError,
                       match=r"2 index\(es\) out of range \[0, 8\) \(the CPU simulator.s MSCATTER ignores ScatterOOB"):
        pto.mscatter(pto.GlobalTensor(table), src, bad, coalesce="elem", oob=oob, conflict=conflict, target="cpu")
    assert table.tobytes() == before



def test_cpu_row_stride_is_shape4_not_stride3():
    """MGATHER.md, "CPU Reference Form": Row mode uses ``tableRows = Shape[3]`` and row stride ``Shape[4]``,
    whatever Stride[3] says (A2/A3 honours Stride[3]; the CPU simulator does not)."""
    buf = np.arange(40, dtype=np.int32)
    table = pto.GlobalTensor(buf, shape=(3, 8), stride=(12, 1))
    dst = pto.Tile("int32", 2, 8)
    pto.mgather(dst, table, pto.Tile.from_array(np.array([[2, 1]], np.int32), 1, 8), target="cpu")
    assert dst.numpy().tolist() == [list(range(16, 24)), list(range(8, 16))]


@pytest.mark.parametrize("rows", [[], [7, 9]], ids=["no-index", "every-row-out-of-range"])
def test_a_cpu_row_scatter_with_no_row_left_keeps_its_rules(rows):
    """Dropping out-of-range rows (not strict) may leave nothing to write; the call's own rules still refuse it, as
    the same call with a row in range is refused, and nothing is written."""
    table = np.arange(12, dtype=np.uint8).reshape(6, 2)
    before = table.copy()
    idx = np.array(rows, dtype=np.int32)
    src = np.ones((len(rows), 2), dtype=np.uint8)
    with pytest.raises(pto.ConstraintError, match="atomic Max on cpu supports int32, float32; got uint8"):
        pto.scatter(table, src, idx, coalesce="row", atomic="max", strict=False, target="cpu")
    table.flags.writeable = False
    with pytest.raises(pto.ConstraintError, match="read-only"):
        pto.scatter(table, src, idx, coalesce="row", strict=False, target="cpu")
    assert np.array_equal(table, before)
