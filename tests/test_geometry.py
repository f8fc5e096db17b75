"""A5 SIMT launch geometry (MGATHER.md / MSCATTER.md, "Performance Considerations — A5").

Row:  kRowWarps = min(validRows, 32); kWarpsPerRow = max(1, min(32 // kRowWarps, ceil(validCols / 32)));
      kLaunchWarps = kRowWarps * kWarpsPerRow.
Elem: kLaunchWarps = min(ceil(validRows * validCols / 32), 32).
Last: kLaunchWarps = min(ceil(slots / 32), 32).
The expected numbers below were worked out by hand from those formulas.
"""
from __future__ import annotations

import pytest

import simt_pto as pto

# (validRows, validCols) -> (kRowWarps, kWarpsPerRow, kLaunchWarps, rows walked by the busiest warp)
ROW_TABLE = [
    ((1, 8), (1, 1, 1, 1)),
    ((1, 32), (1, 1, 1, 1)),
    ((1, 33), (1, 2, 2, 1)),
    ((4, 64), (4, 2, 8, 1)),
    ((32, 1024), (32, 1, 32, 1)),
    ((64, 8), (32, 1, 32, 2)),
    ((3, 100), (3, 4, 12, 1)),
    ((1, 1024), (1, 32, 32, 1)),
    ((1, 4096), (1, 32, 32, 1)),
    ((5, 1000), (5, 6, 30, 1)),
    ((7, 33), (7, 2, 14, 1)),
    ((16, 31), (16, 1, 16, 1)),
    ((17, 256), (17, 1, 17, 1)),
    ((2, 512), (2, 16, 32, 1)),
    ((100, 8), (32, 1, 32, 4)),
    ((8, 200), (8, 4, 32, 1)),
    ((11, 40), (11, 2, 22, 1)),
    ((12, 1), (12, 1, 12, 1)),
]

# (validRows, validCols) -> kLaunchWarps
ELEM_TABLE = [
    ((1, 1), 1), ((1, 8), 1), ((1, 32), 1), ((1, 33), 2), ((8, 32), 8), ((3, 100), 10), ((32, 32), 32),
    ((64, 64), 32), ((5, 7), 2), ((31, 33), 32), ((2, 496), 31), ((2048, 8), 32),
]

# destination slots -> kLaunchWarps
LAST_TABLE = [(1, 1), (31, 1), (32, 1), (33, 2), (64, 2), (65, 3), (992, 31), (993, 32), (1000, 32), (1024, 32),
              (100000, 32)]


@pytest.mark.parametrize("shape, expected", ROW_TABLE, ids=[f"{r}x{c}" for (r, c), _ in ROW_TABLE])
def test_row_geometry(shape, expected):
    g = pto.row_geometry(*shape)
    row_warps, warps_per_row, launch, rows_per_warp = expected
    assert (g.scheme, g.row_warps, g.warps_per_row, g.launch_warps) == ("row", row_warps, warps_per_row, launch)
    assert g.block == (32, launch) and g.threads == 32 * launch
    assert g.rows_per_warp == rows_per_warp


@pytest.mark.parametrize("shape, launch", ELEM_TABLE, ids=[f"{r}x{c}" for (r, c), _ in ELEM_TABLE])
def test_elem_geometry(shape, launch):
    g = pto.elem_geometry(*shape)
    assert (g.scheme, g.launch_warps, g.work_items) == ("elem", launch, shape[0] * shape[1])
    assert g.block == (32, launch) and g.threads == 32 * launch


@pytest.mark.parametrize("slots, launch", LAST_TABLE)
def test_last_geometry(slots, launch):
    g = pto.last_geometry(slots)
    assert (g.scheme, g.launch_warps, g.work_items, g.block) == ("last", launch, slots, (32, launch))


def test_as_dict():
    d = pto.row_geometry(3, 100).as_dict()
    assert d == {"scheme": "row", "block": [32, 12], "launch_warps": 12, "threads": 384, "row_warps": 3,
                 "warps_per_row": 4, "rows_per_warp": 1, "work_items": 3}
    e = pto.elem_geometry(3, 100).as_dict()
    assert (e["scheme"], e["block"], e["threads"], e["work_items"]) == ("elem", [32, 10], 320, 300)


@pytest.mark.parametrize("shape", [(1, 8), (3, 100), (4, 64), (7, 33), (40, 70), (5, 1000), (33, 5)])
def test_row_mapping_covers_every_element_once(shape):
    """Walk the documented Row mapping: warp ``ty`` takes rows ``ty % kRowWarps`` (step kRowWarps) and column
    segment ``ty // kRowWarps``; lane ``tx`` takes columns ``segment * 32 + tx`` (step kWarpsPerRow * 32)."""
    rows, cols = shape
    g = pto.row_geometry(rows, cols)
    seen = {}
    for ty in range(g.launch_warps):
        segment = ty // g.row_warps
        for r in range(ty % g.row_warps, rows, g.row_warps):
            for tx in range(32):
                for c in range(segment * 32 + tx, cols, g.warps_per_row * 32):
                    seen[(r, c)] = seen.get((r, c), 0) + 1
    assert len(seen) == rows * cols and set(seen.values()) == {1}


@pytest.mark.parametrize("shape", [(1, 1), (3, 100), (32, 32), (64, 64), (2, 496)])
def test_elem_mapping_covers_every_position_once(shape):
    total = shape[0] * shape[1]
    g = pto.elem_geometry(*shape)
    hits = [0] * total
    for tid in range(g.threads):
        for pos in range(tid, total, g.threads):
            hits[pos] += 1
    assert set(hits) == {1}
    assert g.threads <= 32 * -(-total // 32)            # no warp is launched without a position to take
