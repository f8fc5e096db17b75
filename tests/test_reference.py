"""``simt_pto.reference``, pinned to cases worked out by hand from MGATHER.md / MSCATTER.md.

The reference is what selftest and the A5 tests compare the kernels with, so its own rules are checked
here on values small enough to follow in one's head.
"""
from __future__ import annotations

import numpy as np
import pytest

from simt_pto import reference as ref


@pytest.mark.parametrize("index,policy,expected", [
    (3, "undefined", 3), (10, "undefined", None), (-1, "zero", None),
    (-1, "clamp", 9), (2 ** 31, "clamp", 9), (12, "wrap", 2), (-1, "wrap", 4294967295 % 10), (9, "skip", 9),
])
def test_slot_casts_to_uint32_then_applies_the_policy(index, policy, expected):
    assert ref.slot(index, 10, policy) == expected
    assert ref.slots(np.array([index]), 10, policy)[0] == (-1 if expected is None else expected)


def test_gather_row_and_elem():
    table = np.arange(12, dtype=np.uint16)  # 4 rows of 3
    np.testing.assert_array_equal(ref.gather_row(table, 4, 3, [2, 7, -1], "zero"),
                                  [[6, 7, 8], [0, 0, 0], [0, 0, 0]])
    np.testing.assert_array_equal(ref.gather_row(table, 4, 3, [7], "clamp"), [[9, 10, 11]])
    np.testing.assert_array_equal(ref.gather_elem(table, 12, [[1, 13], [-1, 11]], "wrap"),
                                  [[1, 1], [4294967295 % 12, 11]])


def test_scatter_is_the_serial_loop_last_writer_wins():
    table = np.zeros(4, np.uint8)
    got = ref.scatter(table, "uint8", "elem", [[1, 1, 3, 1]], [[5, 6, 7, 8]], 4, "undefined")
    np.testing.assert_array_equal(got, [0, 8, 0, 7])
    assert ref.candidates("elem", [[1, 1, 3]], [[5, 6, 7]], 4, "skip") == {1: {5, 6}, 3: {7}}


@pytest.mark.parametrize("dtype,atomic,old,new,expected", [
    ("int8", "add", 100, 100, -56),          # wraps in the element type
    ("uint32", "add", 2 ** 32 - 1, 2, 1),
    ("int32", "max", -5, 3, 3), ("int32", "min", -5, 3, -5),
    ("float32", "max", -1.5, -2.5, -1.5),
    ("float16", "add", 2048.0, 1.0, 2048.0),  # 2049 rounds to even in float16
    ("bfloat16", "add", 256.0, 1.0, 256.0),
])
def test_combine_in_the_element_type(dtype, atomic, old, new, expected):
    bits = ref.combine(dtype, atomic, int(ref.to_bits([old], dtype)[0]), int(ref.to_bits([new], dtype)[0]))
    assert ref.from_bits(np.array([bits]), dtype)[0] == expected


def test_scatter_mismatches_names_the_wrong_elements():
    initial = np.zeros(4, np.uint32)
    src = np.array([[1, 2, 3]], np.uint32)
    right = np.array([0, 2, 0, 3], np.uint32)
    args = ("uint32", "elem", [[1, 1, 3]], src, 4, "undefined")
    assert ref.scatter_mismatches(right, initial, *args, "none", "last") == []
    assert ref.scatter_mismatches(np.array([0, 1, 0, 3], np.uint32), initial, *args, "none", "last") == \
        ["element 1: 0x1, expected 0x2"]
    # Conflict::Default: either writer may win element 1, but nothing may appear where nobody wrote
    assert ref.scatter_mismatches(np.array([0, 1, 0, 3], np.uint32), initial, *args, "none", "default") == []
    assert len(ref.scatter_mismatches(np.array([9, 1, 0, 3], np.uint32), initial, *args, "none", "default")) == 1


def test_float_add_bound_allows_any_order_and_nothing_more():
    """Three float32 adds into one element, in every order, lie within the bound; a result one bound away
    does not. A single contribution must be exact (t0 + c rounds once, whatever the order)."""
    initial = ref.to_bits(np.array([1.0, 0.0], np.float32), "float32")
    values = np.array([1e8, 1.0, -1e8], np.float32)
    src = ref.to_bits(np.r_[values, np.float32(0.5)].reshape(1, 4), "float32")
    idx = [[0, 0, 0, 1]]
    for order in ([0, 1, 2], [0, 2, 1], [1, 0, 2]):
        total = np.float32(1.0)
        for k in order:
            total = np.float32(total + values[k])
        got = ref.to_bits(np.array([total, 0.5], np.float32), "float32")
        assert ref.scatter_mismatches(got, initial, "float32", "elem", idx, src, 2, "undefined", "add", "last") == []
    exact, bound = ref.float_add_bound("float32", initial, ref.writers("elem", idx, src, 2, "undefined"))
    assert exact[0] == 2.0 and bound[0] == pytest.approx(4 * 2 ** -24 * (1 + 2e8 + 1), rel=1e-6)
    far = ref.to_bits(np.array([exact[0] + 2 * bound[0], 0.5], np.float32), "float32")
    assert len(ref.scatter_mismatches(far, initial, "float32", "elem", idx, src, 2, "undefined", "add", "last")) == 1
    off_single = ref.to_bits(np.array([2.0, 0.5000001], np.float32), "float32")
    assert ref.scatter_mismatches(off_single, initial, "float32", "elem", idx, src, 2, "undefined", "add", "last")


def test_last_writer_scatter_matches_the_serial_loop():
    rng = np.random.default_rng(0)
    table = np.full(50, -1, np.int64)
    slots = rng.integers(-1, 50, 400)
    src = np.arange(400)
    serial = table.copy()
    for i, s in enumerate(slots):
        if s >= 0:
            serial[s] = src[i]
    np.testing.assert_array_equal(ref.last_writer_scatter(table, slots, src), serial)
    rows = np.zeros((5, 2), np.int64)
    row_slots = np.array([1, 3, 1])
    row_src = np.arange(6).reshape(3, 2)
    np.testing.assert_array_equal(ref.last_writer_scatter(rows, row_slots, row_src),
                                  [[0, 0], [4, 5], [0, 0], [2, 3], [0, 0]])


def test_tile_offsets():
    assert ref.tile_offset("row_major", 4, 8, 1, 2) == 10 and ref.tile_offset("col_major", 4, 8, 1, 2) == 9
    assert ref.nz_tile_offset(32, 8, 3, 9) == 1 * 32 * 8 + 3 * 8 + 1
