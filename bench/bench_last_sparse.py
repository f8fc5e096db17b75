"""Conflict::Last with few updates into a huge table: the owner path's cost in the number of updates.

A whole-array Elem ``pto.scatter(table, src, idx, conflict="last")`` (``target="a5"``, default
``last_path="auto"``) of ``n`` updates (10, 1000, 1M by default) into an int8 table of ``--table-elems``
elements (1.5e9 by default: 1.5 GB), against numpy's ``table[idx] = src`` on the same arrays. After warm-up
pairs, ``--repeat`` rounds each time a block of our calls and a block of numpy's, and the ratio is the median of
the rounds' (see ``bench_cpu.paired_times``).

Peak extra memory is the process's resident high-water mark over one call, above the resident size just
before it (the table and the inputs are paged in first): ``/proc/self/clear_refs`` resets the mark (Linux),
so each call is measured on its own; without it, ``ru_maxrss`` deltas, which only show a call that raises
the process's peak (said so in the output). Every result is checked against the serial Last order on the
touched slots, and the rest of the table against its fill value.

``--layout dense`` forces one owner per table slot (the path every owner call took before the compact
owners), for comparison at a table size that fits: 4 bytes of owners per table slot.

Run: ``python bench/bench_last_sparse.py [--table-elems 1.5e9] [--updates 10 1000 1000000] [--repeat 5] [--json]``
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time

import numpy as np

import simt_pto as pto
from bench_cpu import paired_times  # the one paired-rounds timer of the benchmarks
from simt_pto.host import a5_planner, a5_runner, in_memory

FILL = 7
"""The table's value before the calls (no update writes it: sources are drawn from -128..-1)."""


def _status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident size
        return True
    except OSError:
        return False


def peak_extra_mb(fn):
    """(MB the resident high-water mark rose during ``fn()`` above the resident size before it, method)."""
    if _reset_peak() and _status_kb("VmHWM") is not None:
        before = _status_kb("VmRSS")
        fn()
        return (_status_kb("VmHWM") - before) / 1024, "VmHWM"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024, "ru_maxrss delta (a lower bound)"


def check(table, src, idx):
    """The serial Last result on the touched slots (the largest position per slot wins), the fill elsewhere.
    Restores the fill on the touched slots."""
    reversed_idx = idx[::-1]
    slots, first = np.unique(reversed_idx, return_index=True)
    want = src[::-1][first]
    ok = np.array_equal(table[slots], want)
    table[slots] = FILL
    chunk = 1 << 26
    ok = ok and all(bool((table[i:i + chunk] == FILL).all()) for i in range(0, table.size, chunk))
    return ok


def scatter_last(table, src, idx, layout="auto"):
    """``pto.scatter(table, src, idx, coalesce="elem", conflict="last")`` on a5; ``layout`` "dense" / "compact"
    forces the owner path's layout (the same call's plan, :func:`simt_pto.host.in_memory.scatter_plan`)."""
    if layout == "auto":
        pto.scatter(table, src, idx, coalesce="elem", conflict="last", target="a5")
    else:
        a5_runner.run_plan(in_memory.scatter_plan(table, src, idx, coalesce="elem", conflict="last", target="a5", owner=layout))


def bench_one(table, n, repeat, rng, forced="auto"):
    idx = rng.integers(0, table.size, n, dtype=np.int64).astype(np.int32 if table.size < 2 ** 31 else np.uint32)
    if n > 1:
        idx[n // 2] = idx[0]  # a repeated slot: the later writer must win
    src = rng.integers(-128, 0, n, dtype=np.int8)

    def ours():
        scatter_last(table, src, idx, forced)

    def peer():
        table[idx] = src

    layout = a5_planner.owner_layout(table.size, n) if forced == "auto" else forced
    extra_mb, method = peak_extra_mb(ours)
    ok = check(table, src, idx)
    peer_mb, _ = peak_extra_mb(peer)
    t_ours, t_peer, ratio = paired_times(ours, peer, repeat)
    table[idx] = FILL  # the last call was numpy's: check ours again, after the timed rounds
    ours()
    ok = ok and check(table, src, idx)
    return {"updates": n, "layout": layout, "ours_s": t_ours, "numpy_s": t_peer, "numpy_over_ours": ratio,
            "peak_extra_mb": round(extra_mb, 1), "numpy_peak_extra_mb": round(peer_mb, 1), "memory_method": method,
            "correct": ok}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table-elems", type=float, default=1.5e9, help="int8 table size (default 1.5e9: 1.5 GB)")
    ap.add_argument("--updates", type=float, nargs="+", default=[10, 1000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--layout", choices=("auto", "dense", "compact"), default="auto",
                    help="the owner state: as owner_layout chooses, or forced")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    elems = int(args.table_elems)
    if elems < 1:
        ap.error(f"--table-elems must be positive, got {args.table_elems}")
    rng = np.random.default_rng(args.seed)
    # compile outside the measurements, on a small table
    small = np.zeros(1 << 20, np.int8)
    for layout in ("dense", "compact"):
        scatter_last(small, np.ones(3, np.int8), np.array([1, 5, 1], np.int32), layout)
    t = time.perf_counter()
    table = np.full(elems, FILL, np.int8)  # paged in before any measurement
    fill_s = time.perf_counter() - t
    rows = [bench_one(table, int(n), args.repeat, rng, args.layout) for n in args.updates]
    report = {"table_elems": elems, "table_bytes": table.nbytes, "fill_s": round(fill_s, 3), "layout": args.layout,
              "backend": pto.a5_backend(), "cpus": os.cpu_count(), "machine": platform.machine(),
              "numpy": np.__version__, "repeat": args.repeat, "results": rows}
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
    else:
        print(f"Conflict::Last, int8 table of {elems:,} elements ({table.nbytes / 2 ** 30:.2f} GiB), A5 backend "
              f"{report['backend']}, {report['cpus']} CPUs, owner layout {args.layout}; median of {args.repeat} pairs")
        print(f"{'updates':>10} {'layout':>8} {'ours':>10} {'numpy':>10} {'numpy/ours':>11} {'peak extra':>11} "
              f"{'numpy peak':>11} {'correct':>8}")
        for r in rows:
            print(f"{r['updates']:>10,} {r['layout']:>8} {r['ours_s'] * 1e3:>8.2f}ms {r['numpy_s'] * 1e3:>8.2f}ms "
                  f"{r['numpy_over_ours']:>11.3f} {r['peak_extra_mb']:>9.1f}MB {r['numpy_peak_extra_mb']:>9.1f}MB "
                  f"{str(r['correct']):>8}")
        print(f"memory: {rows[0]['memory_method'] if rows else '-'}")
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
