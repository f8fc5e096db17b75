"""Single-core speed of the a2a3 loops vs numpy, in the same run.

* element gather, float32, 16M random indices into a 64M-element (256 MB) table  vs ``table[idx]``
* row gather, float32, 256K random rows of 64 from a 1M x 64 (256 MB) table      vs ``table[rows]``
* element scatter-add, float32, 16M random indices into the 256 MB table          vs ``np.add.at``
* row scatter (a plain store), the row gather's shape                              vs ``table[rows] = src``
* the NZ walks on the same table read as an NZ tensor (64 logical columns): row and element gather, element
  scatter-add, row scatter                                                         vs numpy on the logical matrix

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
from simt_pto.enums import ElementFormat, IndexRule, ScatterAtomicOp
from simt_pto.kernels.a2a3 import mgather as mg
from simt_pto.kernels.a2a3 import mscatter as ms
from simt_pto.kernels.a2a3 import walk


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


def nz_walks(rng, tbits, n, rep):
    """The NZ walks (MGATHER.md / MSCATTER.md, "NZ Layout (A2/A3)") on the same table read as an NZ tensor
    ``Shape<1, 8, BRows, 16, 8>`` of float32 (64 logical columns, packed strides), against numpy on the logical
    (row-major) matrix: the walk pays the NZ offset arithmetic, numpy does not."""
    kc0, bcols = 8, 8
    lcols = bcols * kc0
    lrows = tbits.size // lcols
    s4, s3 = 1, kc0
    s2, s1 = 16 * kc0, lrows * kc0
    s0 = bcols * s1
    strides = (s0, s1, s2, s3, s4)
    logical = np.ascontiguousarray(tbits.reshape(bcols, lrows, kc0).transpose(1, 0, 2).reshape(lrows, lcols))
    rows = n // lcols                                        # tile rows: the tile holds n elements
    tile = np.empty(n, np.uint32)

    ridx = rng.integers(0, lrows, rows, dtype=np.int64).astype(np.uint32)
    ridx64 = ridx.astype(np.int64)
    loop = mg.gather_loop(walk.row_nz, IndexRule.IDENTITY)
    call = (tile, rows, tbits, ridx, 1, rows, lrows, 1, bcols, kc0, *strides)
    loop(*call)
    t_a = best(lambda: loop(*call), rep)
    t_n = best(lambda: logical[ridx64], rep)
    assert np.array_equal(tile.reshape(bcols, rows, kc0).transpose(1, 0, 2).reshape(rows, lcols), logical[ridx64])
    line("row gather NZ  (loop)    vs table[rows]", t_a, t_n, n)

    eidx = rng.integers(0, lrows * lcols, n, dtype=np.int64).astype(np.uint32)
    eidx64 = eidx.astype(np.int64)
    flat = logical.reshape(-1)
    loop = mg.gather_loop(walk.elem_nz, IndexRule.IDENTITY)
    call = (tile, rows, tbits, eidx, lcols, rows, lcols, lrows * lcols, lcols, bcols, kc0, *strides)
    loop(*call)
    t_a = best(lambda: loop(*call), rep)
    t_n = best(lambda: flat[eidx64], rep)
    got = tile.reshape(bcols, rows, kc0).transpose(1, 0, 2).reshape(-1)
    assert np.array_equal(got, flat[eidx64])
    line("elem gather NZ (loop)    vs table[idx]", t_a, t_n, n)

    src = rng.standard_normal(n).astype(np.float32)
    work = tbits.view(np.float32).copy()
    loop = ms.scatter_loop(walk.elem_nz, IndexRule.IDENTITY, ScatterAtomicOp.ADD, ElementFormat.NATIVE)
    call = (src, rows, work, eidx, lcols, rows, lcols, lrows * lcols, lcols, bcols, kc0, *strides)
    loop(*call)
    t_a = best(lambda: loop(*call), rep)
    work_n = flat.view(np.float32).copy()
    t_n = best(lambda: np.add.at(work_n, eidx64, src), 1)
    line("scatter-add NZ (loop)    vs np.add.at", t_a, t_n, n)

    loop = ms.scatter_loop(walk.row_nz, IndexRule.IDENTITY, ScatterAtomicOp.NONE, ElementFormat.NATIVE)
    work = tbits.copy()
    call = (tile, rows, work, ridx, 1, rows, lrows, 1, bcols, kc0, *strides)
    loop(*call)
    t_a = best(lambda: loop(*call), rep)
    work_n = logical.copy()
    src_n = tile.reshape(bcols, rows, kc0).transpose(1, 0, 2).reshape(rows, lcols)

    def run_n():
        work_n[ridx64] = src_n

    t_n = best(run_n, rep)
    line("row scatter NZ (loop)    vs table[rows]=src", t_a, t_n, n)


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
    loop = mg.gather_loop(walk.elem_nd, IndexRule.IDENTITY)
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
    rloop = mg.gather_loop(walk.row_nd, IndexRule.IDENTITY)
    rloop(dst, width, tbits, ridx32, 1, grows, width, trows, width)
    t_a = best(lambda: rloop(dst, width, tbits, ridx32, 1, grows, width, trows, width), rep)
    out_r = np.empty((grows, width), np.float32)
    t_n = min(best(lambda: table2[ridx64], rep), best(lambda: np.take(table2, ridx64, axis=0, out=out_r), rep))
    assert np.array_equal(dst.view(np.float32).reshape(grows, width), table2[ridx64])
    line("row gather   (loop)      vs table[rows]", t_a, t_n, n)

    # -- element scatter-add ----------------------------------------------------------------------
    vals = rng.standard_normal(n).astype(np.float32)
    sloop = ms.scatter_loop(walk.elem_nd, IndexRule.IDENTITY, ScatterAtomicOp.ADD, ElementFormat.NATIVE)
    work_a = table.copy()
    sloop(vals, cols, work_a, idx32[:cols], cols, 1, cols, table_n)       # warm-up on a slice
    work_a[:] = table
    work_n = table.copy()

    def run_a():
        sloop(vals, cols, work_a, idx32, cols, rows, cols, table_n)

    def run_n():
        np.add.at(work_n, idx64, vals)

    t_a = best(run_a, 1)     # accumulating: one timed pass each, then check equality
    t_n = best(run_n, 1)
    assert np.array_equal(work_a, work_n), "scatter-add differs from np.add.at (same sequential order)"
    line("scatter-add  (loop)      vs np.add.at", t_a, t_n, n)

    # -- row scatter (a plain store: each row a copy) -----------------------------------------------
    rsloop = ms.scatter_loop(walk.row_nd, IndexRule.IDENTITY, ScatterAtomicOp.NONE, ElementFormat.NATIVE)
    src_rows = dst[: grows * width]
    work_r = tbits.copy()
    rsloop(src_rows, width, work_r, ridx32, 1, grows, width, trows, width)
    t_a = best(lambda: rsloop(src_rows, width, work_r, ridx32, 1, grows, width, trows, width), rep)
    work_rn = tbits.reshape(trows, width).copy()
    rows_n = src_rows.reshape(grows, width)

    def run_rn():
        work_rn[ridx64] = rows_n

    t_n = best(run_rn, rep)
    line("row scatter  (loop)      vs table[rows]=src", t_a, t_n, n)

    nz_walks(rng, tbits, n, rep)

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
