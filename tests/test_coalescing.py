"""The coalescing analyzer (simt_pto.host.tools.coalescing, re-exported as simt_pto.coalescing) and ``simt-pto coalesce``.

Expected numbers are worked out by hand in the comments beside them, from the kernels' lane -> address mapping
(kernels/a5/mgather.py, mscatter.py) and the launch geometry formulas (MGATHER.md / MSCATTER.md, "Performance
Considerations - A5"): a request is one memory instruction of one warp over its active lanes; GM sectors are
32 bytes, segments 128 bytes; tables start at GM address 0 unless ``base_offset_bytes`` says otherwise.
Unless a test says ``call="tile"`` (or gives a tile-only option), the analyzer replays the launches of the
whole-array call (``pto.gather_plan`` / ``pto.scatter_plan``), in the hardware's form where the emulator moves rows
in wider units (``LaunchSpec.hardware``). The last tests replay small calls on the CUDA simulator, tile ops and
whole-array plans, with every array access recorded and check that the analyzer predicts exactly those (block,
warp, lane, element) accesses.
"""
from __future__ import annotations

import argparse
import json
import threading

import numpy as np
import pytest

import simt_pto as pto
from simt_pto import constraints
from simt_pto.enums import from_any
from simt_pto.call import mgather_policy, mscatter_policy

analyze = pto.coalescing.analyze
I32 = np.int32


def gm(summary):
    return (summary.requests, summary.sectors, summary.segments, summary.bytes_requested, summary.bytes_moved)


# -- hand-computed transaction counts --------------------------------------------------------------------------

def test_fully_coalesced_row():
    # float32, 32 cols: kRowWarps = min(4, 32) = 4, kWarpsPerRow = max(1, min(32 // 4, ceil(32 / 32))) = 1 -> 4 warps,
    # one row each. A row is 32 lanes x 4 B = 128 B starting at row * 128: 1 request, 1 segment, 4 sectors.
    r = analyze("mgather", "row", np.array([5, 0, 63, 17], I32), (64, 32), (4, 32), "float32")
    assert r.kernel == "simt_mgather_row_kernel" and r.geometry.launch_warps == 4
    # 4 rows: 4 requests, 4 x 4 = 16 sectors, 4 segments, 4 x 128 = 512 B requested and moved.
    assert gm(r.gm_loads) == (4, 16, 4, 512, 512)
    assert r.gm_loads.efficiency == 1.0 and r.gm_loads.histogram() == {4: 4}
    assert r.gm_loads.sectors_per_request == 4.0 and r.gm_loads.segments_per_request == 1.0
    assert r.gm_stores.requests == 0 and r.gm_stores.efficiency is None
    assert r.stream("table").per_warp.tolist() == [[1, 1, 1, 1]]
    dst, idx = r.stream("dst"), r.stream("idx")
    # dst rows are 128 B apart in a RowMajor 4x32 tile: 4 blocks per request, unit stride.
    assert (dst.requests, dst.sectors, dst.strides["unit"]) == (4, 16, 4)
    # every lane of a warp reads idx[r]: one broadcast UB read per row, 32 lanes.
    assert (idx.requests, idx.lanes, idx.sectors, idx.strides["broadcast"]) == (4, 128, 4, 4)


def test_row_scatter_stores_mirror_the_gather():
    # The same walk as the gather, stores instead of loads: 4 requests x 4 sectors, no GM loads.
    r = analyze("mscatter", "row", np.array([5, 0, 63, 17], I32), (64, 32), (4, 32), "float32", conflict="default")
    assert r.kernel == "simt_mscatter_row_kernel"
    assert gm(r.gm_stores) == (4, 16, 4, 512, 512) and r.gm_loads.requests == 0 and r.gm_atomics.requests == 0
    assert r.stream("src").kind == "load" and r.stream("src").requests == 4


def test_elem_32_distinct_rows(rng):
    # Elem, one warp (ceil(1 * 32 / 32) = 1), 32 indices each in a different 256-byte table row (64 float32):
    # 32 lanes -> 32 sectors in 32 segments, 32 x 4 = 128 B requested, 32 x 32 = 1024 B moved: 0.125.
    rows = rng.permutation(32)
    cols = rng.integers(0, 64, 32)
    idx = (rows * 64 + cols).astype(I32)[None, :]
    r = analyze("mgather", "elem", idx, (32, 64), (1, 32), "float32")
    assert r.kernel == "simt_mgather_elem_kernel" and r.geometry.launch_warps == 1
    assert gm(r.gm_loads) == (1, 32, 32, 128, 1024)
    assert r.gm_loads.efficiency == 0.125 and r.gm_loads.histogram() == {32: 1}
    # UB side stays regular: 32 consecutive float32 dst slots = 128 B = 4 blocks, unit stride.
    assert (r.stream("dst").sectors, r.stream("dst").strides["unit"]) == (4, 1)


def test_all_lanes_on_one_address():
    # 32 lanes on element 77 (byte 308): 1 sector, 1 segment; one distinct address = 4 B requested of 32 moved.
    r = analyze("mgather", "elem", np.full((1, 32), 77, I32), (4, 64), (1, 32), "float32")
    assert gm(r.gm_loads) == (1, 1, 1, 4, 32) and r.gm_loads.lanes == 32 and r.gm_loads.efficiency == 0.125


def test_atomics_on_one_address_serialise():
    # Elem atomic Add, int32, 32 lanes on slot 9: one atomic request, 1 sector; all 32 lanes on one address,
    # so 31 same-address rounds beyond the first.
    r = analyze("mscatter", "elem", np.full((1, 32), 9, I32), 64, (1, 32), "int32", atomic="add")
    assert r.kernel == "simt_mscatter_elem_kernel"
    assert gm(r.gm_atomics) == (1, 1, 1, 4, 32) and gm(r.gm_stores) == gm(r.gm_atomics) and r.gm_loads.requests == 0
    table = r.stream("table")
    assert (table.kind, table.max_lanes_per_address, table.serialized_lanes) == ("atomic", 32, 31)


@pytest.mark.parametrize("base, want", [(0, (1, 2, 1, 64, 64)), (2, (1, 3, 1, 68, 96))])
def test_half_atomic_add_is_a_word_cas_loop(base, want):
    # float16 atomic Add: load the aligned 32-bit word of the table holding element e (byte ((base + 2e) >> 2) * 4),
    # then CAS it. Elements 0..31, base 0: words 0..15 = bytes 0..63: 2 sectors, 1 segment, 16 words x 4 B = 64 B
    # requested of 64 moved. Base 2: the elements are bytes 2..65, words at bytes 0, 4, ..., 64 (17 words): 68 B
    # requested, sectors 0..2 (96 B moved), 1 segment. Two lanes per word at most: 1 round beyond the first.
    r = analyze("mscatter", "elem", np.arange(32, dtype=I32)[None], (1, 64), (1, 32), "float16", atomic="add",
                base_offset_bytes=base)
    assert gm(r.gm_loads) == want
    assert gm(r.gm_atomics) == want
    assert (r.stream("table").max_lanes_per_address, r.stream("table").serialized_lanes) == (2, 1)


def test_unaligned_start():
    # base 16 B: row r occupies bytes [16 + 128 r, 143 + 128 r]: segments r and r + 1 (2), sectors 4r .. 4r + 4 (5).
    # 4 rows: 8 segments, 20 sectors, 512 B requested, 20 x 32 = 640 B moved: 512 / 640 = 0.8.
    idx = np.arange(4, dtype=I32)
    r = analyze("mgather", "row", idx, (8, 32), (4, 32), "float32", base_offset_bytes=16)
    assert gm(r.gm_loads) == (4, 20, 8, 512, 640)
    assert r.gm_loads.efficiency == 0.8 and r.gm_loads.histogram() == {5: 4}
    assert gm(analyze("mgather", "row", idx, (8, 32), (4, 32), "float32").gm_loads) == (4, 16, 4, 512, 512)
    with pytest.raises(ValueError, match="multiple of the element size"):
        analyze("mgather", "row", idx, (8, 32), (4, 32), "float32", base_offset_bytes=2)


def test_colmajor_tile_changes_ub_not_gm():
    idx = np.array([5, 0, 63, 17], I32)
    row = analyze("mgather", "row", idx, (64, 32), (4, 32), "float32")
    col = analyze("mgather", "row", idx, (64, 32), (4, 32), "float32", tile_layout="col_major")
    # GM identical: 4 requests, 16 sectors, 4 segments.
    assert gm(col.gm_loads) == gm(row.gm_loads) == (4, 16, 4, 512, 512)
    # ColMajor 4x32 float32 pads Rows to 8 (32 B): (r, c) at r + 8 c, so lane c is 8 x 4 = 32 B from lane c - 1:
    # 32 blocks per request, strided; RowMajor: 128 contiguous bytes = 4 blocks, unit.
    assert (col.stream("dst").sectors, col.stream("dst").strides["strided"]) == (4 * 32, 4)
    assert (row.stream("dst").sectors, row.stream("dst").strides["unit"]) == (4 * 4, 4)


def test_colmajor_elem_tile():
    # Elem 4x8 float32, one warp: lane p writes (p // 8, p % 8). RowMajor: offset p, 128 B = 4 blocks, unit.
    # ColMajor (Rows padded to 8): offset r + 8 c, block (r + 8 c) // 8 = c: 8 blocks; lane steps +8 within a row
    # and 1 - 7 * 8 = -55 across rows: irregular. The GM side is the same 32 consecutive elements: 4 sectors.
    idx = np.arange(32, dtype=I32).reshape(4, 8)
    row = analyze("mgather", "elem", idx, (4, 8), (4, 8), "float32")
    col = analyze("mgather", "elem", idx, (4, 8), (4, 8), "float32", tile_layout="col_major", idx_layout="row_major")
    assert gm(row.gm_loads) == gm(col.gm_loads) == (1, 4, 1, 128, 128)
    assert (row.stream("dst").sectors, row.stream("dst").strides["unit"]) == (4, 1)
    assert (col.stream("dst").sectors, col.stream("dst").strides["irregular"]) == (8, 1)


def test_index_tile_r_by_1():
    # An [R, 1] ColMajor index tile (the default for an (N, 1) array) holds the same R indices one after another:
    # same requests as [1, R].
    idx = np.array([3, 1, 2], I32)
    a = analyze("mgather", "row", idx, (4, 32), (3, 32), "float32")
    b = analyze("mgather", "row", idx[:, None], (4, 32), (3, 32), "float32")
    assert (a.idx_layout, b.idx_layout) == (pto.BLayout.ROW_MAJOR, pto.BLayout.COL_MAJOR)
    assert gm(a.gm_loads) == gm(b.gm_loads) == (3, 12, 3, 384, 384)
    assert b.stream("idx").requests == 3


def test_float16_row_two_warps_per_row():
    # float16, 64 cols, 2 rows: kRowWarps = 2, kWarpsPerRow = max(1, min(32 // 2, ceil(64 / 32))) = 2 -> 4 warps.
    # Warp ty takes row ty % 2, columns (ty // 2) * 32 + tx: 32 x 2 B = 64 B at row * 128 + seg * 64:
    # 2 sectors, 1 segment. 4 requests: 8 sectors, 4 segments, 256 B requested and moved.
    r = analyze("mgather", "row", np.array([1, 6], I32), (8, 64), (2, 64), "float16")
    assert (r.geometry.row_warps, r.geometry.warps_per_row, r.geometry.launch_warps) == (2, 2, 4)
    assert gm(r.gm_loads) == (4, 8, 4, 256, 256) and r.gm_loads.histogram() == {2: 4}
    assert r.stream("table").per_warp.tolist() == [[1, 1, 1, 1]]


def test_int8_widths():
    # int8 Elem, 32 consecutive elements: 32 B = 1 sector, efficiency 1.
    r = analyze("mgather", "elem", np.arange(32, dtype=I32)[None], (1, 256), (1, 32), "int8")
    assert gm(r.gm_loads) == (1, 1, 1, 32, 32)
    # every 4th element: bytes 0, 4, ..., 124: 4 sectors, 1 segment; 32 B requested of 128 moved = 0.25.
    r = analyze("mgather", "elem", (4 * np.arange(32, dtype=I32))[None], (1, 256), (1, 32), "int8")
    assert gm(r.gm_loads) == (1, 4, 1, 32, 128) and r.gm_loads.efficiency == 0.25
    # int8 Row, 32 cols: a row is 32 B = 1 sector; 4 rows: 4 requests, 4 sectors, 4 segments.
    r = analyze("mgather", "row", np.arange(4, dtype=I32), (4, 32), (4, 32), "int8")
    assert gm(r.gm_loads) == (4, 4, 4, 128, 128)


def test_masked_zero_row_issues_no_load():
    # idx[1] = 99 >= 10 rows under Zero: its warp writes T(0) to UB but issues no GM load.
    # 3 warps (kRowWarps = 3, kWarpsPerRow = 1); GM: 2 requests x 4 sectors; UB dst: 3 requests.
    r = analyze("mgather", "row", np.array([3, 99, 5], I32), (10, 32), (3, 32), "float32", oob="zero")
    assert gm(r.gm_loads) == (2, 8, 2, 256, 256)
    assert r.stream("table").per_warp.tolist() == [[1, 0, 1]]
    assert (r.stream("dst").requests, r.stream("idx").requests) == (3, 3)
    # Skip on scatter: the masked row reads no src and stores nothing.
    s = analyze("mscatter", "row", np.array([3, 99, 5], I32), (10, 32), (3, 32), "float32", oob="skip",
                conflict="default")
    assert gm(s.gm_stores) == (2, 8, 2, 256, 256) and s.stream("src").requests == 2
    # Elem Zero: 8 of 32 lanes out of range -> one request of 24 lanes.
    idx = np.arange(32, dtype=I32)[None].copy()
    idx[0, ::4] = 1000
    e = analyze("mgather", "elem", idx, (1, 64), (1, 32), "float32", oob="zero")
    assert (e.gm_loads.requests, e.gm_loads.lanes, e.stream("dst").lanes) == (1, 24, 32)


def test_out_of_range_is_refused_as_the_api_does():
    with pytest.raises(pto.OutOfBoundsError, match="out of range"):
        analyze("mgather", "row", np.array([3, 10], I32), (10, 32), (2, 32), "float32")
    with pytest.raises(pto.ConstraintError, match="Shape\\[4\\] == ValidCol"):
        analyze("mgather", "row", np.array([3], I32), (10, 32), (1, 16), "float32")
    # strict=False masks instead (the emulator's memory-safe result): one row, no load.
    r = analyze("mgather", "row", np.array([10], I32), (10, 32), (1, 32), "float32", strict=False)
    assert r.gm_loads.requests == 0


def test_last_row_kernel_by_hand():
    # Row Conflict::Last, table 4 rows x 8 float32, idx [2, 0, 2]: last_geometry(4) = 1 warp, lanes own slots 0..3.
    # Owners: slot 0 <- row 1, slot 2 <- row 2, slots 1, 3 none. Reverse scan reads: slot 0: rows 2, 1 (2);
    # slot 1: 3; slot 2: row 2 (1); slot 3: 3 -> 3 broadcast requests, 2 + 3 + 1 + 3 = 9 lane reads, each step
    # with >= 2 lanes. Found lanes 0, 2 store columns c = 0..7: 8 requests of 2 lanes at bytes 4c and 64 + 4c:
    # 2 sectors, 1 segment each: 16 sectors, 8 segments, 16 x 4 = 64 B requested, 512 moved.
    r = analyze("mscatter", "row", np.array([2, 0, 2], I32), (4, 8), (3, 8), "float32")
    assert r.kernel == "simt_mscatter_row_last_kernel" and r.geometry.launch_warps == 1
    scan = r.stream("idx")
    assert (scan.requests, scan.lanes, scan.strides["broadcast"]) == (3, 9, 3)
    assert scan.per_warp.tolist() == [[3]]
    assert gm(r.gm_stores) == (8, 16, 8, 64, 512) and r.gm_stores.lanes == 16
    # src rows 1 and 2 (bytes 32 + 4c, 64 + 4c): 2 blocks per request; lanes 0 and 2 are not neighbours.
    assert (r.stream("src").sectors, r.stream("src").strides["single"]) == (16, 8)


def test_last_elem_kernel_by_hand():
    # Elem Conflict::Last, flat table of 64 int32, idx [[5, 6, 5, 40]]: last_geometry(64) = 2 warps of 32 slots.
    # Owners: slot 5 <- p 2, slot 6 <- p 1, slot 40 <- p 3. Scan reads (4 positions): slot 5: 4 - 2 = 2,
    # slot 6: 3, slot 40: 1, every other slot 4. Warp 0: 4 steps, 30 x 4 + 2 + 3 = 125 lanes; warp 1: 4 steps,
    # 31 x 4 + 1 = 125 lanes. Stores: warp 0 lanes 5, 6 (bytes 20, 24: 1 sector), warp 1 lane 8 (byte 160):
    # 2 requests, 3 lanes, 2 sectors, 2 segments, 12 B requested, 64 moved.
    r = analyze("mscatter", "elem", np.array([[5, 6, 5, 40]], I32), 64, (1, 4), "int32")
    assert r.kernel == "simt_mscatter_elem_last_kernel" and r.geometry.launch_warps == 2
    scan = r.stream("idx")
    assert (scan.requests, scan.lanes) == (8, 250) and scan.per_warp.tolist() == [[4, 4]]
    assert gm(r.gm_stores) == (2, 2, 2, 12, 64) and r.gm_stores.lanes == 3


# -- agreement with the launch geometry ----------------------------------------------------------------------

def test_row_requests_per_warp_follow_the_geometry():
    # (5, 1000) float32: kRowWarps = 5, kWarpsPerRow = max(1, min(32 // 5, ceil(1000 / 32))) = 6 -> 30 warps,
    # lanes step 6 * 32 = 192 columns. Warp ty: segment ty // 5, first column 32 * seg; iterations while
    # 32 seg + 192 k < 1000: seg 0, 1 -> 6 (960, 992 < 1000), seg 2..5 -> 5 (64 + 960 = 1024 >= 1000).
    # One row per warp: warps 0..9 make 6 requests, 10..29 make 5: 60 + 100 = 160; 5 x 1000 = 5000 lanes.
    r = analyze("mgather", "row", np.arange(5, dtype=I32), (16, 1000), (5, 1000), "float32")
    assert r.geometry == pto.row_geometry(5, 1000)
    assert r.stream("table").per_warp.tolist() == [[6] * 10 + [5] * 20]
    assert (r.gm_loads.requests, r.gm_loads.lanes) == (160, 5000)
    assert r.stream("dst").per_warp.tolist() == r.stream("table").per_warp.tolist()


def test_multi_block_row_requests_per_warp():
    # 600 rows in 256-row tiles: 3 blocks of 256, 256, 88 rows, each with the full tile's geometry (32 warps,
    # kWarpsPerRow 1). Blocks 0, 1: 256 / 32 = 8 rows per warp. Block 2: warp w takes rows w, w + 32, w + 64 < 88:
    # 3 for w < 24, 2 for the rest. 8 cols: one request per row, 600 in all.
    r = analyze("mgather", "row", np.arange(600, dtype=I32) % 1000, (1000, 8), (256, 8), "float32")
    assert (r.blocks, r.launches, r.geometry.launch_warps) == (3, 1, 32)
    assert r.stream("table").per_warp.tolist() == [[8] * 32, [8] * 32, [3] * 24 + [2] * 8]
    assert r.gm_loads.requests == 600


def test_elem_requests_per_warp_follow_the_geometry():
    # (64, 64): kLaunchWarps = min(ceil(4096 / 32), 32) = 32, 4096 / 1024 = 4 iterations per warp.
    r = analyze("mgather", "elem", np.arange(4096, dtype=I32).reshape(64, 64), 4096, (64, 64), "float32")
    assert r.geometry == pto.elem_geometry(64, 64)
    assert r.stream("table").per_warp.tolist() == [[4] * 32]
    # (3, 100): ceil(300 / 32) = 10 warps = 320 threads, one iteration; warp 9 has p = 288..299 active (12 lanes).
    r = analyze("mgather", "elem", np.arange(300, dtype=I32).reshape(3, 100), 300, (3, 100), "float32")
    assert r.geometry.launch_warps == 10 and r.stream("table").per_warp.tolist() == [[1] * 10]
    assert r.gm_loads.lanes == 300 and r.gm_loads.histogram()[2] == 1  # 12 x 4 = 48 B from byte 1152: 2 sectors


def test_last_requests_per_warp_follow_the_geometry():
    # Row Last over 100 table rows: last_geometry(100) = ceil(100 / 32) = 4 warps, one slot step each; every warp
    # has an unwritten slot, so it scans both index rows: 2 requests per warp.
    r = analyze("mscatter", "row", np.array([7, 50], I32), (100, 8), (2, 8), "float32")
    assert r.geometry == pto.last_geometry(100)
    assert r.stream("idx").per_warp.tolist() == [[2, 2, 2, 2]]


def test_scalar_fallback():
    # The (1, 1) Elem tile op runs on the scalar pipe: one one-lane access per tile.
    r = analyze("mgather", "elem", np.array([[7]], I32), 64, (1, 1), "float32", call="tile")
    assert (r.kernel, r.geometry) == ("MGatherScalarImpl", None)
    assert gm(r.gm_loads) == (1, 1, 1, 4, 32)


def test_a_whole_array_row_gather_is_replayed_as_the_hardware_moves_its_elements():
    """The whole-array Row gather moves each row in units of up to 8 bytes; its plan (``pto.gather_plan``) records
    the hardware's element moves in ``LaunchSpec.hardware``, and the analyzer counts those."""
    idx = np.array([3, 0, 7, 7, 1], I32)
    # the plan, built here too: a float32 row of 64 (256 B) on an 8-byte boundary moves as 32 uint64 units
    (launch,) = pto.gather_plan(np.zeros((8, 64), np.float32), idx, target="a5", backend="multicore").launches
    assert (launch.arguments["valid_cols"], launch.hardware.arguments["valid_cols"]) == (32, 64)
    r = analyze("mgather", "row", idx, (8, 64), None, "float32")
    assert (r.call, r.launch) == ("whole", "hardware (element moves)") and r.as_dict()["launch"] == r.launch
    assert "(hardware (element moves))" in r.format().splitlines()[0]
    # The hardware: 5 rows of 64 float32, kRowWarps = 5, kWarpsPerRow = max(1, min(32 // 5, ceil(64 / 32))) = 2:
    # 10 warps. Warp (row r, segment s) reads 32 lanes x 4 B = 128 B from byte 256 idx[r] + 128 s: one request,
    # 1 segment, 4 sectors. 10 requests, 40 sectors, 10 segments, 10 x 128 = 1280 B requested and moved. (The
    # emulator's uint64 launch would make 5 requests of 32 x 8 B = 256 B: 8 sectors each.)
    assert (r.geometry.row_warps, r.geometry.warps_per_row, r.blocks) == (5, 2, 1)
    assert gm(r.gm_loads) == (10, 40, 10, 1280, 1280) and r.gm_loads.histogram() == {4: 10}
    # dst: the call's out array, rows of 256 B one after another: 128 B = 4 blocks per request, unit stride.
    assert (r.stream("dst").requests, r.stream("dst").sectors, r.stream("dst").strides["unit"]) == (10, 40, 10)
    # A table 4 bytes past an 8-byte boundary moves in float32 units: the launch is the hardware's own. Each 128 B
    # then spans bytes 4 + 256 idx[r] + 128 s .. + 127: 5 sectors, 2 segments; 50 sectors, 20 segments, 1600 B moved.
    r4 = analyze("mgather", "row", idx, (8, 64), None, "float32", base_offset_bytes=4)
    assert r4.launch == "as launched" and r4.geometry == r.geometry
    assert gm(r4.gm_loads) == (10, 50, 20, 1280, 1600) and r4.gm_loads.histogram() == {5: 10}


def test_the_call_replayed_is_the_whole_array_one_unless_a_tile_op_option_is_given():
    idx = np.arange(4, dtype=I32)
    whole = analyze("mgather", "row", idx, (8, 32), dtype="float32")
    assert whole.call == "whole" and whole.plan[0].startswith("launch simt_mgather_row_kernel")
    for option in (dict(tile_layout="col_major"), dict(idx_layout="row"), dict(tile_padded=(8, 32))):
        assert analyze("mgather", "row", idx, (8, 32), (4, 32), "float32", **option).call == "tile"
        with pytest.raises(ValueError, match="call='tile'"):
            analyze("mgather", "row", idx, (8, 32), (4, 32), "float32", call="whole", **option)
    tile = analyze("mgather", "row", idx, (8, 32), dtype="float32", call="tile")
    assert tile.call == "tile" and tile.launch == "as launched"
    assert gm(tile.gm_loads) == gm(whole.gm_loads) == (4, 16, 4, 512, 512)
    with pytest.raises(ValueError, match="call must be"):
        analyze("mgather", "row", idx, (8, 32), call="both")
    with pytest.raises(ValueError, match="slot-centric"):
        analyze("mscatter", "row", idx, (8, 32), call="tile", last_path="owner")
    with pytest.raises(ValueError, match="mscatter only"):
        analyze("mgather", "row", idx, (8, 32), last_path="owner")


@pytest.mark.parametrize("kw, names", [
    (dict(last_path="auto"), "simt_mscatter_elem_serial_kernel: the multicore backend's serial"),
    (dict(last_path="owner", owner="compact"), "simt_mscatter_compact_owner_claim_kernel: the compact owner path"),
])
def test_a_launch_kind_the_analyzer_does_not_model_is_refused_by_name(kw, names):
    with pytest.raises(ValueError, match=names):
        analyze("mscatter", "elem", np.array([[5, 6, 5, 40]], I32), 64, (1, 4), "int32", **kw)


def test_the_whole_array_slot_path_spreads_the_slots_over_blocks():
    # Row Conflict::Last, 2048 table rows of 8 float32, idx [5, 1500, 5] (one tile): last_geometry(2048) = 32 warps of
    # 1024 threads. The whole-array launch has grid ceil(2048 / 1024) = 2: thread g = b * 1024 + tid owns slot g.
    # Reverse scans of the 3 indices: slot 5 stops at row 2 (1 read), slot 1500 at row 1 (2), every other slot reads
    # all 3, so every warp makes 3 broadcast requests: 64 x 3 = 192; lanes 2046 x 3 + 1 + 2 = 6141.
    idx = np.array([5, 1500, 5], I32)
    r = analyze("mscatter", "row", idx, (2048, 8), None, "float32")
    assert (r.kernel, r.blocks, r.launches) == ("simt_mscatter_row_last_kernel", 2, 1)
    scan = r.stream("idx")
    assert (scan.requests, scan.lanes) == (192, 6141) and scan.per_warp.tolist() == [[3] * 32, [3] * 32]
    # Stores: slot 5 (block 0, warp 0, lane 5) and slot 1500 (block 1, thread 476: warp 14, lane 28), each its 8
    # columns, one request of one lane per column: 16 requests, 16 sectors, 16 x 4 = 64 B requested, 512 B moved.
    assert gm(r.gm_stores) == (16, 16, 16, 64, 512)
    want = np.zeros((2, 32), int)
    want[0, 0] = want[1, 14] = 8
    assert r.stream("table").per_warp.tolist() == want.tolist()
    # The tile op launches one block: each thread owns slots tid and tid + 1024, 2 x 3 scan steps per warp.
    t = analyze("mscatter", "row", idx, (2048, 8), None, "float32", call="tile")
    assert t.blocks == 1 and t.stream("idx").per_warp.tolist() == [[6] * 32] and gm(t.gm_stores) == gm(r.gm_stores)


def test_the_owner_path_row_by_hand():
    # Row Conflict::Last, owner path with one owner per table row: table 4 rows x 8 float32, idx [2, 0, 2].
    r = analyze("mscatter", "row", np.array([2, 0, 2], I32), (4, 8), None, "float32", last_path="owner",
                owner="dense")
    assert r.kernel == ("simt_mscatter_owner_reset_kernel -> simt_mscatter_row_owner_claim_kernel -> "
                        "simt_mscatter_row_owner_write_kernel")
    assert (r.launches, r.launch) == (3, "hardware (element moves)")  # a 32 B row moves as 4 uint64 units
    # Reset: 4 int32 owners, one request of 4 lanes, bytes 0..15: 1 sector, 16 B requested.
    assert gm(r.stream("owner reset")) == (1, 1, 1, 16, 32)
    # Claim: one warp, lane i takes source row 2 - i: idx bytes 8, 4, 0 (one UB block), atomic max on owner[2],
    # owner[0], owner[2] (bytes 8, 0, 8): one request, 1 sector, 2 distinct addresses (8 B); two lanes on owner[2].
    assert (r.stream("idx").requests, r.stream("idx").sectors, r.stream("idx").lanes) == (1, 1, 3)
    claim = r.stream("owner claim")
    assert gm(claim) == (1, 1, 1, 8, 32) and (claim.max_lanes_per_address, claim.serialized_lanes) == (2, 1)
    # Write, as the hardware moves elements: tile_rows 3 (the call's tiles), so rows 0..2 in block 0 (kRowWarps 3,
    # one warp a row), row 3 in block 1. Each row's warp reads its owner, all lanes on one address: 4 requests,
    # 4 sectors. Rows 0 (owner: source row 1) and 2 (source row 2) copy 8 float32 = 32 B: table bytes 0..31 and
    # 64..95, one sector each; src rows 1 and 2, one UB block each.
    assert gm(r.stream("owner")) == (4, 4, 4, 16, 128)
    assert r.stream("owner").per_warp.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert gm(r.stream("table")) == (2, 2, 2, 64, 64)
    assert r.stream("table").per_warp.tolist() == [[1, 0, 1], [0, 0, 0]]
    assert (r.stream("src").requests, r.stream("src").sectors, r.stream("src").strides["unit"]) == (2, 2, 2)


def test_the_owner_path_elem_by_hand():
    # Elem Conflict::Last, owner path: 64 int32 slots, idx [[5, 6, 5, 40]] (the slot kernel's case above).
    r = analyze("mscatter", "elem", np.array([[5, 6, 5, 40]], I32), 64, (1, 4), "int32", last_path="owner",
                owner="dense")
    assert r.kernel.endswith("simt_mscatter_elem_owner_write_kernel") and r.launch == "as launched"
    # Reset: 64 int32 owners, 2 requests of 32 lanes x 4 B: 4 sectors, 1 segment each.
    assert gm(r.stream("owner reset")) == (2, 8, 2, 256, 256)
    # Claim: lane i takes position 3 - i: idx bytes 12, 8, 4, 0 (one block); atomics on slots 40, 5, 6, 5 (bytes
    # 160, 20, 24, 20): one request, sectors 5 and 0, segments 1 and 0, 3 distinct addresses = 12 B.
    claim = r.stream("owner claim")
    assert gm(claim) == (1, 2, 2, 12, 64) and (claim.lanes, claim.max_lanes_per_address) == (4, 2)
    assert (r.stream("idx").requests, r.stream("idx").sectors) == (1, 1)
    # Write: every slot's owner read (2 requests of 128 B); slots 5, 6 (owners 2, 1) in request 0 store bytes 20, 24
    # (1 sector), slot 40 (owner 3) in request 1 byte 160: the same table stores as the slot kernel's.
    assert gm(r.stream("owner")) == (2, 8, 2, 256, 256)
    assert gm(r.stream("table")) == (2, 2, 2, 12, 64) and r.stream("table").lanes == 3
    # src: positions 2, 1 (bytes 8, 4) then 3 (byte 12): 2 requests, one block each.
    assert (r.stream("src").requests, r.stream("src").sectors, r.stream("src").lanes) == (2, 2, 3)


# -- agreement with the kernels as they run (CUDA simulator, every access recorded) -----------------------------

class _Recorder(np.ndarray):
    """An ndarray that logs each scalar access made from a simulated CUDA thread."""

    log: list | None = None
    arg = ""

    def _note(self, kind, key):
        t = threading.current_thread()
        if _Recorder.log is not None and hasattr(t, "threadIdx") and isinstance(key, (int, np.integer)):
            _Recorder.log.append((self.arg, kind, t.blockIdx.x, t.threadIdx.y, t.threadIdx.x, int(key)))

    def __getitem__(self, key):
        self._note("ld", key)
        return super().__getitem__(key)

    def __setitem__(self, key, value):
        self._note("st", key)
        return super().__setitem__(key, value)


def _recorded_run(spec):
    """Run one launch on the simulator with each array argument (by its parameter name) recording its accesses."""
    from simt_pto.kernels.a5 import simt

    def wrap(name, a):
        if isinstance(a, np.ndarray):
            return a.view(type(f"Rec_{name}", (_Recorder,), {"arg": name}))
        if isinstance(a, tuple):
            return tuple(wrap(name, x) for x in a)
        return a

    spec = spec.with_args(**{name: wrap(name, value) for name, value in spec.args})
    _Recorder.log = []
    try:
        simt.launch(spec, "simulator")
        return _Recorder.log
    finally:
        _Recorder.log = None


SIM_CASES = [
    # op, coalesce, dtype, table shape, tile (R, C), kwargs
    ("mgather", "row", "float32", (20, 40), (5, 40), dict(oob="clamp")),
    ("mgather", "row", "float16", (9, 70), (3, 70), dict(tile_layout="col_major", idx_layout="col", oob="wrap")),
    ("mgather", "elem", "int8", (6, 40), (4, 12), dict(oob="zero", idx_layout="col_major")),
    ("mscatter", "row", "int32", (30, 20), (6, 20), dict(atomic="add", oob="skip")),
    ("mscatter", "row", "float32", (12, 33), (4, 33), dict(conflict="default")),
    ("mscatter", "elem", "float32", (8, 10), (3, 10), dict(atomic="max", tile_layout="col_major")),
    ("mscatter", "row", "uint16", (16, 8), (4, 8), dict(oob="skip")),
    ("mscatter", "elem", "float32", (5, 8), (2, 5), dict(oob="wrap")),
]


def _tiles(op, coalesce, dtype, table_shape, tile, idx_vals, kw, rng):
    d = pto.dtypes.resolve(dtype)
    lay = from_any(pto.BLayout, kw.get("tile_layout", "row_major"))
    R, C = tile
    unit = 32 // d.itemsize
    padded = (R, -(-C // unit) * unit) if lay == pto.BLayout.ROW_MAJOR else (-(-R // unit) * unit, C)
    data = pto.Tile(d, *padded, blayout=lay, valid=(R, C))
    data.data[:] = rng.integers(0, 100, data.data.size).astype(d.numpy)
    if coalesce == "row":
        if kw.get("idx_layout") == "col":
            idx = pto.Tile.from_array(idx_vals[:, None], -(-R // 8) * 8, 1, dtype="int32", blayout="col_major")
        else:
            idx = pto.Tile.from_array(idx_vals[None, :], 1, -(-R // 8) * 8, dtype="int32")
    else:
        ilay = from_any(pto.BLayout, kw.get("idx_layout", lay))
        ipad = (R, -(-C // 8) * 8) if ilay == pto.BLayout.ROW_MAJOR else (-(-R // 8) * 8, C)
        idx = pto.Tile.from_array(idx_vals, *ipad, dtype="int32", blayout=ilay)
    table = pto.GlobalTensor(np.zeros(table_shape, dtype=d.numpy), dtype=d)
    return data, idx, table


@pytest.mark.parametrize("op, coalesce, dtype, table_shape, tile, kw", SIM_CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-{'-'.join(f'{v}' for v in c[5].values())}" for c in SIM_CASES])
def test_analyzer_matches_the_simulated_kernel(op, coalesce, dtype, table_shape, tile, kw, rng, simulator_backend):
    from simt_pto.host.a5_planner import mgather_launches, mscatter_launches
    R, C = tile
    capacity = table_shape[0] if coalesce == "row" else table_shape[0] * table_shape[1]
    shape = (R,) if coalesce == "row" else (R, C)
    high = capacity + capacity // 3 if "oob" in kw else capacity  # out-of-range ones only under a policy
    idx_vals = rng.integers(0, high, shape).astype(I32)
    idx_vals.flat[-1] = idx_vals.flat[0]  # at least one repeat
    data, idx, table = _tiles(op, coalesce, dtype, table_shape, tile, idx_vals, kw, rng)
    co = from_any(pto.Coalesce, coalesce)
    if op == "mgather":
        policy = mgather_policy(co, kw.get("oob", "undefined"), "a5", pto.GatherExec.SCALAR, True, None)
        plan = constraints.validated_mgather(policy, data, table, idx)
        (launch,) = mgather_launches(plan).launches
    else:
        policy = mscatter_policy(co, kw.get("atomic", "none"), kw.get("oob", "undefined"), kw.get("conflict", "last"), "a5",
                                 True, None)
        plan = constraints.validated_mscatter(policy, table, data, idx)
        (launch,) = mscatter_launches(plan).launches
    log = _recorded_run(launch)
    arg = idx_vals[:, None] if coalesce == "row" and kw.get("idx_layout") == "col" else idx_vals
    report = analyze(op, coalesce, arg, table_shape, tile, dtype, keep_lanes=True, call="tile", **kw)
    assert report.kernel == launch.kernel and report.geometry == launch.geometry
    assert report.launch == "as launched" and launch.hardware is None
    recorded = {}
    for arg, kind, b, ty, tx, k in log:
        recorded.setdefault((arg, kind), []).append((b, ty, tx, k))
    store_kind = "st"  # plain stores; the simulator's atomics read then write the same element
    expect = {"table": ("table", "ld" if op == "mgather" else store_kind), "idx": ("idx", "ld"),
              "dst": ("dst", "st"), "src": ("src", "ld")}
    for stream in report.streams:
        trace = stream.lane_trace()
        trace[:, 3] //= stream.itemsize
        got = sorted(map(tuple, trace.tolist()))
        want = sorted(recorded.get(expect[stream.name], []))
        assert got == want, f"{stream.name}: analyzer {len(got)} accesses, kernel {len(want)}"
        assert len(got) == stream.lanes
    assert sum(len(v) for k, v in recorded.items() if k[0] in ("idx", "dst", "src")) == \
        sum(s.lanes for s in report.streams if s.space == "ub")


WHOLE_CASES = [
    # op, coalesce, dtype, table shape, index shape, tile_rows, kwargs
    ("mgather", "row", "float32", (20, 40), (12,), 5, dict(oob="clamp")),  # widened: the hardware's launch
    ("mgather", "elem", "int8", (6, 40), (6, 12), 4, dict(oob="zero")),
    ("mscatter", "row", "int32", (30, 20), (9,), 4, dict(atomic="add", oob="skip")),
    ("mscatter", "row", "uint16", (16, 8), (10,), 4, dict(oob="skip")),  # slot-centric, 3 launches
    ("mscatter", "elem", "float32", (5, 8), (4, 5), 2, dict(oob="wrap")),  # slot-centric, 2 launches
    ("mscatter", "row", "float32", (12, 8), (10,), None, dict(last_path="owner", owner="dense", oob="wrap")),
    ("mscatter", "elem", "int32", (5, 8), (3, 7), None, dict(last_path="owner", owner="dense")),
]

_WHOLE_ARGS = {
    # stream -> (argument, access) per kernel family; the simulator's atomics read then write the element
    "gather": {"table": ("table", "ld"), "idx": ("idx", "ld"), "dst": ("dst", "st")},
    "scatter": {"table": ("table", "st"), "idx": ("idx", "ld"), "src": ("src", "ld")},
    "reset": {"owner reset": ("owner", "st")},
    "claim": {"idx": ("idx", "ld"), "owner claim": ("owner", "st")},
    "write": {"owner": ("owner", "ld"), "table": ("table", "st"), "src": ("src", "ld")},
}


def _family(kernel):
    for part in ("reset", "claim", "write"):
        if f"_{part}_" in kernel:
            return part
    return "gather" if "mgather" in kernel else "scatter"


@pytest.mark.parametrize("op, coalesce, dtype, table_shape, idx_shape, tile_rows, kw", WHOLE_CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-{'-'.join(f'{v}' for v in c[6].values())}" for c in WHOLE_CASES])
def test_analyzer_matches_the_simulated_whole_array_launches(op, coalesce, dtype, table_shape, idx_shape, tile_rows,
                                                             kw, rng, simulator_backend):
    """Every launch of the whole-array plan (its hardware form where the emulator widens), run on the simulator with
    every access recorded: the analyzer predicts exactly those (block, warp, lane, element) accesses. A tile's
    slot-centric launch takes its tile's slice of the call's arrays: its blocks and offsets follow the tiles'."""
    d = pto.dtypes.resolve(dtype)
    row = coalesce == "row"
    capacity = table_shape[0] if row else table_shape[0] * table_shape[1]
    high = capacity + capacity // 3 if kw.get("oob", "undefined") != "undefined" else capacity
    idx = rng.integers(0, high, idx_shape).astype(I32)
    idx.flat[-1] = idx.flat[0]  # at least one repeat
    table = np.zeros(table_shape, d.numpy)
    options = dict(coalesce=coalesce, oob=kw.get("oob", "undefined"), target="a5", tile_rows=tile_rows,
                   backend="multicore")
    if op == "mgather":
        call = pto.gather_plan(table, idx, **options)
    else:
        src = rng.integers(0, 100, idx_shape + ((table_shape[1],) if row else ())).astype(d.numpy)
        call = pto.scatter_plan(table, src, idx, atomic=kw.get("atomic", "none"), last_path=kw.get("last_path", "slot"),
                                owner=kw.get("owner"), **options)
    report = analyze(op, coalesce, idx, table_shape, None if tile_rows is None else (tile_rows, table_shape[1] if row
                     else idx_shape[-1]), dtype, keep_lanes=True, **kw)
    assert report.call == "whole" and report.launches == len(call.launches)
    recorded: dict = {}
    block0 = first_row = 0  # the slot-centric launches: blocks and index rows of the tiles before
    for launch in call.launches:
        spec = launch.hardware or launch
        slot_centric = spec.kernel.endswith("_last_kernel")
        if slot_centric:  # the tile's rows begin first_row rows into the call's index and source
            offsets = {"idx": first_row * (1 if row else spec.arguments["valid_cols"]),
                       "src": first_row * spec.arguments["src_rs"]}
        for arg, kind, b, ty, tx, k in _recorded_run(spec):
            for stream, want in _WHOLE_ARGS[_family(spec.kernel)].items():
                if want == (arg, kind):
                    if slot_centric:
                        k += offsets.get(arg, 0)
                    recorded.setdefault(stream, []).append((b + (block0 if slot_centric else 0), ty, tx, k))
        if slot_centric:
            block0, first_row = block0 + spec.grid, first_row + spec.arguments["valid_rows"]
    assert {s.name for s in report.streams if s.lanes} == set(recorded)
    for stream in report.streams:
        trace = stream.lane_trace()
        trace[:, 3] //= stream.itemsize
        got = sorted(map(tuple, trace.tolist()))
        assert got == sorted(recorded.get(stream.name, [])), f"{stream.name}: {len(got)} accesses predicted"
        assert len(got) == stream.lanes


# -- the command line ------------------------------------------------------------------------------------------

def _cli(argv, capsys):
    from simt_pto.host.tools import coalesce_cli as coalesce
    parser = argparse.ArgumentParser(prog="simt-pto")
    coalesce.register(parser.add_subparsers(dest="command", required=True))
    try:
        args = parser.parse_args(["coalesce", *argv])
        status = args.func(args)
    except SystemExit as exit_:  # argparse's error: usage and one line on stderr
        status = exit_.code
    out = capsys.readouterr()
    return status, out.out, out.err


def test_cli_json(tmp_path, capsys):
    path = tmp_path / "idx.npy"
    np.save(path, np.arange(0, 4096, 64, dtype=I32))  # 64 indices, each 64 float16 apart: one per 128-byte row
    status, out, _ = _cli(["--op", "mgather", "--coalesce", "elem", "--idx", str(path), "--table", "64x64",
                           "--dtype", "float16", "--tile", "64x1", "--json"], capsys)
    assert status == 0
    report = json.loads(out)
    for part in ("gm_loads", "gm_stores"):
        assert {"requests", "segments_per_request", "sectors_per_request", "bytes_requested", "bytes_moved",
                "efficiency"} <= set(report[part])
    # 64 lanes in 2 warps, every lane its own 128-byte row: 2 requests x 32 sectors; 2 B of each 32 moved.
    assert (report["gm_loads"]["requests"], report["gm_loads"]["sectors_per_request"]) == (2, 32.0)
    assert report["gm_loads"]["efficiency"] == 2 / 32 and report["gm_stores"]["requests"] == 0


def test_cli_text_and_errors(tmp_path, capsys):
    path = tmp_path / "idx.npy"
    np.save(path, np.array([0, 5, 99], dtype=I32))
    status, out, _ = _cli(["--op", "mscatter", "--idx", str(path), "--table", "100x32", "--atomic", "add"], capsys)
    assert status == 0 and "simt_mscatter_row_kernel" in out and "GM atomics" in out
    status, _, err = _cli(["--op", "mscatter", "--idx", str(path), "--table", "50x32"], capsys)
    assert status == 2 and "out of range" in err


def test_cli_call_and_last_path(tmp_path, capsys):
    path = tmp_path / "idx.npy"
    np.save(path, np.array([2, 0, 2], dtype=I32))
    argv = ["--op", "mscatter", "--idx", str(path), "--table", "4x8"]
    status, out, _ = _cli([*argv, "--last-path", "owner", "--json"], capsys)
    report = json.loads(out)
    assert status == 0 and report["call"] == "whole" and report["launches"] == 3
    assert [line.split()[1] for line in report["plan"] if line.startswith("launch")] == [
        "simt_mscatter_owner_reset_kernel", "simt_mscatter_row_owner_claim_kernel",
        "simt_mscatter_row_owner_write_kernel"]
    assert {"owner reset", "owner claim", "owner"} <= {s["name"] for s in report["streams"]}
    status, out, _ = _cli([*argv, "--call", "tile"], capsys)
    assert status == 0 and "tile op, one tile:" in out and "simt_mscatter_row_last_kernel" in out
    status, _, err = _cli([*argv, "--call", "tile", "--last-path", "owner"], capsys)
    assert status == 2 and "slot-centric" in err
    status, _, err = _cli([*argv, "--coalesce", "elem", "--last-path", "auto"], capsys)
    assert status == 2 and "simt_mscatter_elem_serial_kernel" in err
