"""The UB budget per target (MGATHER.md / MSCATTER.md, "UB Memory Budget"; simt_pto.ub).

A5: 256 KB UB - 8 KB reserved - 32 KB minimum DCache = 216 KB declarable through ``dyn_ubuf_size``;
128 KB is the safe working set without it. A2/A3: the static 192 KB UB and no ``dyn_ubuf_size``.
CPU: no UB. The working set is the padded ``dst``/``src`` tile plus the padded index tile.
"""
from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

import simt_pto as pto
from simt_pto import constraints, ub
from simt_pto.call import mgather_policy, mscatter_policy

KB = 1024
A5_SAFE = 131072            # 128 KB
A5_MAX_DYN = 221184         # 216 KB = 256 - 8 - 32
A2A3_UB = 196608            # 192 KB


def plan(op, target, tile, idx, table, coalesce="row", dyn_ubuf_size=None):
    if op == "MGATHER":
        policy = mgather_policy(coalesce, pto.GatherOOB.CLAMP, target, pto.GatherExec.SCALAR, True, dyn_ubuf_size)
        return constraints.validated_mgather(policy, tile, table, idx)
    policy = mscatter_policy(coalesce, pto.ScatterAtomicOp.NONE, pto.ScatterOOB.CLAMP, pto.ScatterConflict.LAST, target,
                             True, dyn_ubuf_size)
    return constraints.validated_mscatter(policy, table, tile, idx)


def row_working_set(total_bytes, extra_idx_cols=0, **tile_kw):
    """A Row call whose padded working set is ``total_bytes`` (+ 4 B per extra index column):
    a float32 ``R x 256`` tile (1 KB a row) plus a ``1 x 256`` int32 index tile (1 KB)."""
    rows = total_bytes // KB - 1
    assert rows * KB + KB == total_bytes
    tile = pto.Tile("float32", rows, 256, **tile_kw)
    idx = pto.Tile("int32", 1, 256 + extra_idx_cols, valid=(1, rows))
    table = pto.GlobalTensor(np.zeros((4, 256), np.float32))
    return tile, idx, table


def test_budget_values():
    assert ub.budget("MGATHER", "cpu") is None
    assert ub.budget("MGATHER", "cpu", 10 ** 9) is None
    assert ub.budget("MGATHER", "a2a3") == A2A3_UB
    assert ub.budget("MGATHER", "a5") == A5_SAFE
    assert ub.budget("MGATHER", "a5", A5_MAX_DYN) == A5_MAX_DYN
    assert ub.budget("MSCATTER", "a5", 32) == 32


def test_dyn_ubuf_size_limits():
    with pytest.raises(pto.ConstraintError, match=re.escape(
            "MGATHER on a5: dyn_ubuf_size = 221185 B exceeds 221184 B "
            "(rule: max dynUBufSize = 256 KB - 8 KB reserved - 32 KB min DCache = 216 KB)")):
        ub.budget("MGATHER", "a5", A5_MAX_DYN + 1)
    with pytest.raises(pto.ConstraintError, match=re.escape(
            "MSCATTER on a2a3: dyn_ubuf_size=4096 given; the working set must fit the static 196608 B UB "
            "(rule: A2/A3 has no dynUBufSize)")):
        ub.budget("MSCATTER", "a2a3", 4096)


@pytest.mark.parametrize("bad", [-32, True, "64KB", 1.5, np.float32(64)])
def test_dyn_ubuf_size_type_errors(bad):
    with pytest.raises(TypeError, match="MGATHER: dyn_ubuf_size must be a non-negative int \\(bytes\\) or None"):
        ub.budget("MGATHER", "a5", bad)


def test_dyn_ubuf_size_zero_means_no_dynamic_request():
    # <<<numBlocks, 0 / nullptr, stream>>>: the default 128 KB safe working set applies.
    assert ub.budget("MGATHER", "a5", 0) == 128 * KB


@pytest.mark.parametrize("op", ["MGATHER", "MSCATTER"])
@pytest.mark.parametrize("target, dyn, limit, how", [
    # the hint names only what makes the call fit: a dyn_ubuf_size A5 can declare, else smaller tiles
    ("a5", None, A5_SAFE, "the 128 KB safe A5 working set without dyn_ubuf_size; declare dyn_ubuf_size of at least "
                          "131104 B (A5 takes up to 221184 B)"),
    # 0 is no dynamic request (<<<n, 0, stream>>>): the refusal names the 128 KB budget it applies, not 0 B
    ("a5", 0, A5_SAFE, "the 128 KB safe A5 working set without dyn_ubuf_size; declare dyn_ubuf_size of at least "
                       "131104 B (A5 takes up to 221184 B)"),
    ("a5", A5_MAX_DYN, A5_MAX_DYN, "dyn_ubuf_size = 221184 B; use smaller tiles: 221216 B is more than the 221184 B "
                                   "A5 can declare"),
    ("a5", 140 * KB, 140 * KB, "dyn_ubuf_size = 143360 B; declare dyn_ubuf_size of at least 143392 B (A5 takes up "
                               "to 221184 B)"),
    ("a2a3", None, A2A3_UB, "the 192 KB A2/A3 UB; use smaller tiles: 196640 B is more than the 192 KB A2/A3 UB"),
])
def test_working_set_limit(op, target, dyn, limit, how):
    plan(op, target, *row_working_set(limit), dyn_ubuf_size=dyn)          # exactly the budget: inside
    rows = limit // KB - 1
    tile, idx, table = row_working_set(limit, extra_idx_cols=8)           # 32 B over
    name = "dst" if op == "MGATHER" else "src"
    with pytest.raises(pto.ConstraintError, match=re.escape(
            f"{op} on {target}: working set {name} {rows}x256 float32 = {rows * KB} B + idx 1x264 int32 = 1056 B "
            f"= {limit + 32} B exceeds {how} (rule: UB working set within budget)")):
        plan(op, target, tile, idx, table, dyn_ubuf_size=dyn)


def test_a5_above_128kb_needs_dyn_ubuf_size():
    tile, idx, table = row_working_set(200 * KB)
    with pytest.raises(pto.ConstraintError, match=re.escape("(rule: UB working set within budget)")):
        plan("MGATHER", "a5", tile, idx, table)
    plan("MGATHER", "a5", tile, idx, table, dyn_ubuf_size=200 * KB)


def test_a2a3_rejects_dyn_ubuf_size_on_the_op():
    tile, idx, table = row_working_set(4 * KB)
    with pytest.raises(pto.ConstraintError, match=re.escape("(rule: A2/A3 has no dynUBufSize)")):
        plan("MSCATTER", "a2a3", tile, idx, table, dyn_ubuf_size=8 * KB)


def test_elem_working_set_is_r_c_times_sizeof_t_plus_4():
    # MSCATTER.md: "the working set is R * C * (sizeof(T) + 4)"; 64 x 256 float32 + int32 = 128 KB exactly.
    table = pto.GlobalTensor(np.zeros(1000, np.float32))
    src = pto.Tile("float32", 64, 256)
    idx = pto.Tile("int32", 64, 256)
    plan("MSCATTER", "a5", src, idx, table, coalesce="elem")
    # one more padded 32-byte column block in the index tile: 64 x 264 x 4 = 67584 B
    with pytest.raises(pto.ConstraintError, match=re.escape(
            "idx 64x264 int32 = 67584 B = 133120 B exceeds the 128 KB safe A5 working set")):
        plan("MSCATTER", "a5", pto.Tile("float32", 64, 256), pto.Tile("int32", 64, 264, valid=(64, 256)),
             table, coalesce="elem")


def test_padding_counts_not_the_valid_region():
    tile = pto.Tile("float32", 128, 256, valid=(1, 256))                  # 128 KB padded, 1 KB valid
    idx = pto.Tile("int32", 1, 8, valid=(1, 1))
    table = pto.GlobalTensor(np.zeros((4, 256), np.float32))
    with pytest.raises(pto.ConstraintError, match=re.escape("= 131104 B exceeds")):
        plan("MGATHER", "a5", tile, idx, table)


def test_cpu_has_no_ub():
    tile = pto.Tile("float32", 300, 256, addr=0)                          # 300 KB: over every UB budget
    idx = pto.Tile("int32", 1, 304, valid=(1, 300), addr=0)               # and overlapping the tile
    rows = np.arange(4 * 256, dtype=np.float32).reshape(4, 256)
    idx.set(np.full((1, 300), 7, np.int32))                               # clamps to row 3
    pto.mgather(tile, pto.GlobalTensor(rows), idx, oob="clamp", target="cpu", dyn_ubuf_size=10 ** 9)
    assert (tile.numpy() == rows[3]).all()


# -- placed tiles (TASSIGN) ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["MGATHER", "MSCATTER"])
@pytest.mark.parametrize("target", ["a2a3", "a5"])
def test_overlapping_tiles_are_rejected_naming_both(op, target):
    name = "dst" if op == "MGATHER" else "src"
    table = pto.GlobalTensor(np.zeros((6, 8), np.float32))
    tile = pto.Tile("float32", 4, 8, addr=0x100, name=name)               # [0x100, 0x180)
    idx = pto.Tile.from_array(np.array([[3, 0, 5, 3]], np.int32), 1, 8, addr=0x160)   # [0x160, 0x180)
    with pytest.raises(pto.ConstraintError, match=re.escape(
            f"{op} on {target}: {name} at [0x100, 0x180) overlaps idx at [0x160, 0x180) "
            "(rule: UB tiles do not overlap)")):
        plan(op, target, tile, idx, table)
    idx.addr = 0x180                                                      # touching: inside
    plan(op, target, tile, idx, table)
    idx.addr = 0x0                                                        # below the tile, touching nothing
    plan(op, target, tile, idx, table)
    idx.addr = 0xE0                                                       # [0xE0, 0x100): touching from below
    plan(op, target, tile, idx, table)
    idx.addr = 0x100                                                      # same start
    with pytest.raises(pto.ConstraintError, match=r"(idx|dst|src) at \[0x100, .*\) overlaps (idx|dst|src) at "
                                                  r"\[0x100, .*\) \(rule: UB tiles do not overlap\)"):
        plan(op, target, tile, idx, table)


@pytest.mark.parametrize("target, dyn, limit", [("a5", None, A5_SAFE), ("a5", A5_MAX_DYN, A5_MAX_DYN),
                                                ("a2a3", None, A2A3_UB)])
def test_placed_tile_must_end_inside_the_budget(target, dyn, limit):
    table = pto.GlobalTensor(np.zeros((6, 8), np.float32))
    idx = pto.Tile.from_array(np.array([[3, 0, 5, 3]], np.int32), 1, 8)
    tile = pto.Tile("float32", 4, 8, addr=limit - 128)                    # ends exactly at the budget
    plan("MGATHER", target, tile, idx, table, dyn_ubuf_size=dyn)
    tile.addr = limit - 96
    with pytest.raises(pto.ConstraintError, match=re.escape(
            f"MGATHER on {target}: dst at [{limit - 96:#x}, {limit + 32:#x}) ends past the {limit} B budget "
            "(rule: placed tiles inside the UB budget)")):
        plan("MGATHER", target, tile, idx, table, dyn_ubuf_size=dyn)


def test_every_rule_text_of_the_ub_layer_is_exercised():
    source = inspect.getsource(ub)
    rules = set(re.findall(r'ConstraintError\(op, target, "([^"]+)"', source))
    tested = {"A2/A3 has no dynUBufSize", "max dynUBufSize = 256 KB - 8 KB reserved - 32 KB min DCache = 216 KB",
              "UB working set within budget", "placed tiles inside the UB budget", "UB tiles do not overlap"}
    assert rules == tested
