"""Single-core speed of the a2a3 loops vs numpy, in the same run.

* element gather, float32, 16M random indices into a 64M-element (256 MB) table  vs ``table[idx]``
* row gather, float32, 256K random rows of 64 from a 1M x 64 (256 MB) table      vs ``table[rows]``
* element scatter-add, float32, 16M random indices into the 256 MB table          vs ``np.add.at``

The jitted loops are called directly (after one warm-up call), so the ratio measures the loop; the
numpy time is the faster of ``table[idx]`` (allocating) and ``np.take(..., out=)`` (preallocated),
with int64 indices prepared outside the timing (numpy's fastest index type). The
full public API call (``pto.mgather`` / ``pto.mscatter`` with a UB-sized tile, validation included)
is timed too, per call and per element. Ratios are numpy time / a2a3 time (>= 1.0x: a2a3 is faster).

Run: ``python bench/bench_a2a3.py [--small]``
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import simt_pto as pto
from simt_pto.kernels.a2a3 import mgather as mg
from simt_pto.kernels.a2a3 import mscatter as ms
from simt_pto.kernels import store
from simt_pto.kernels.index_policy import IDENTITY


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def line(name, t_a2a3, t_np, n):
    print(f"{name:<44} a2a3 {t_a2a3 * 1e3:9.2f} ms  numpy {t_np * 1e3:9.2f} ms  "
          f"({n / t_a2a3 / 1e6:7.1f} vs {n / t_np / 1e6:7.1f} Melem/s)  ratio {t_np / t_a2a3:5.2f}x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true", help="1M elements / 16 MB table (a quick smoke run)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = (1 << 20) if args.small else (1 << 24)             # elements moved
    table_n = 4 * n                                          # 256 MB of float32 at full size
    rep = args.repeat
    print(f"elements moved: {n:,}; table: {table_n:,} float32 ({table_n * 4 >> 20} MB); best of {rep}")

    table = rng.standard_normal(table_n).astype(np.float32)
    tbits = table.view(np.uint32)

    # -- element gather ---------------------------------------------------------------------------
    idx32 = rng.integers(0, table_n, n, dtype=np.int64).astype(np.uint32)
    idx64 = idx32.astype(np.int64)                           # numpy's fastest index type, prepared untimed
    cols = 4096
    rows = n // cols
    dst = np.empty(n, np.uint32)
    loop = mg.elem_nd_loop(IDENTITY)
    loop(dst, cols, tbits, idx32, cols, rows, cols, table_n)               # warm-up (compile / cache load)
    t_a = best(lambda: loop(dst, cols, tbits, idx32, cols, rows, cols, table_n), rep)
    out_n = np.empty(n, np.float32)
    t_n = min(best(lambda: table[idx64], rep), best(lambda: np.take(table, idx64, out=out_n), rep))
    assert np.array_equal(dst.view(np.float32), table[idx64])
    line("elem gather  (loop)      vs table[idx]", t_a, t_n, n)

    # -- row gather -------------------------------------------------------------------------------
    width = 64
    trows = table_n // width
    grows = n // width
    ridx32 = rng.integers(0, trows, grows, dtype=np.int64).astype(np.uint32)
    ridx64 = ridx32.astype(np.int64)
    table2 = table.reshape(trows, width)
    rloop = mg.row_nd_loop(IDENTITY)
    rloop(dst, width, tbits, ridx32, 1, grows, width, trows, width)
    t_a = best(lambda: rloop(dst, width, tbits, ridx32, 1, grows, width, trows, width), rep)
    out_r = np.empty((grows, width), np.float32)
    t_n = min(best(lambda: table2[ridx64], rep), best(lambda: np.take(table2, ridx64, axis=0, out=out_r), rep))
    assert np.array_equal(dst.view(np.float32).reshape(grows, width), table2[ridx64])
    line("row gather   (loop)      vs table[rows]", t_a, t_n, n)

    # -- element scatter-add ----------------------------------------------------------------------
    vals = rng.standard_normal(n).astype(np.float32)
    sloop = ms.elem_nd_loop(IDENTITY, store.ADD, store.NATIVE)
    work_a = table.copy()
    sloop(work_a, vals, cols, idx32[:cols], cols, 1, cols, table_n)       # warm-up on a slice
    work_a[:] = table
    work_n = table.copy()

    def run_a():
        sloop(work_a, vals, cols, idx32, cols, rows, cols, table_n)

    def run_n():
        np.add.at(work_n, idx64, vals)

    t_a = best(run_a, 1)     # accumulating: one timed pass each, then check equality
    t_n = best(run_n, 1)
    assert np.array_equal(work_a, work_n), "scatter-add differs from np.add.at (same sequential order)"
    line("scatter-add  (loop)      vs np.add.at", t_a, t_n, n)

    # -- the full public API, with UB-sized tiles (192 KB A2/A3 UB) ----------------------------------
    print("\nfull API call (validation + plan + loop), 64 x 128 float32 tile, per call:")
    R, C = 64, 128
    gt = pto.GlobalTensor(table)
    eidx = rng.integers(0, table_n, (R, C)).astype(np.int32)
    itile = pto.Tile.from_array(eidx)
    dtile = pto.Tile("float32", R, C)
    e64 = eidx.astype(np.int64)
    pto.mgather(dtile, gt, itile, coalesce="elem", target="a2a3")
    t_a = best(lambda: pto.mgather(dtile, gt, itile, coalesce="elem", target="a2a3"), 50)
    t_n = best(lambda: table[e64], 50)
    line("pto.mgather elem (API)   vs table[idx]", t_a, t_n, R * C)
    t_c = best(lambda: pto.mgather(dtile, gt, itile, coalesce="elem", target="cpu"), 50)
    print(f"{'  (cpu target, same call)':<44} {t_c * 1e6:9.1f} us")

    ridx = rng.integers(0, trows, R).astype(np.int32)
    rtile = pto.Tile.from_array(ridx[None, :])
    dtile_r = pto.Tile("float32", R, width)
    gt2 = pto.GlobalTensor(table2)
    r64 = ridx.astype(np.int64)
    pto.mgather(dtile_r, gt2, rtile, coalesce="row", target="a2a3")
    t_a = best(lambda: pto.mgather(dtile_r, gt2, rtile, coalesce="row", target="a2a3"), 50)
    t_n = best(lambda: table2[r64], 50)
    line("pto.mgather row (API)    vs table[rows]", t_a, t_n, R * width)

    stile = pto.Tile.from_array(rng.standard_normal((R, C)).astype(np.float32))
    scratch = table.copy()
    gts = pto.GlobalTensor(scratch)
    pto.mscatter(gts, stile, itile, coalesce="elem", atomic="add", target="a2a3")
    sv = stile.valid_numpy().reshape(-1)
    ef = e64.reshape(-1)
    t_a = best(lambda: pto.mscatter(gts, stile, itile, coalesce="elem", atomic="add", target="a2a3"), 50)
    t_n = best(lambda: np.add.at(scratch, ef, sv), 50)
    line("pto.mscatter elem add (API) vs np.add.at", t_a, t_n, R * C)


if __name__ == "__main__":
    main()
