"""A repeated two-thread Row gather with its helper thread woken as the call starts, against the same call with the
helper woken as its launch starts (``simt_pto.host.tuning.HostTuning.early_wake_helpers`` 1 and 0), beside
``torch.index_select`` on the same data in the same run.

    python bench/helper_start.py [--sizes 1M,2M,4M] [--dtypes float32,float16] [--blocks 16] [--pairs 15]

The shape is ``bench_peers.py``'s: n/64 rows of 64 columns from a table of 4n elements, int32 row indices (PyTorch:
int64). For each size and dtype, ``--blocks`` blocks alternate the two settings; a block makes 20 warm-up pairs, then
``--pairs`` pairs of our call and ``index_select``. Each figure is a median, µs. Every result is checked first.

The helper's start: in one more block of each setting, ``simt_pto.kernels.a5.simt.trace_multicore_launches`` records
each block range's thread and start; the figure is the median, over the calls, of the helper's first range's start
after the caller's. Without PyTorch the benchmark says so and leaves its column out.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # (PyTorch's threads sleep between its calls, as in bench_peers)

import numpy as np  # noqa: E402

import simt_pto as pto  # noqa: E402
from bench_peers import load_torch, parse_size, size_label  # noqa: E402
from simt_pto.host import tuning  # noqa: E402
from simt_pto.kernels.a5 import simt  # noqa: E402

SETTINGS = {"early": 1, "late": 0}
"""``early_wake_helpers`` of each column."""


def _helper_delay(call) -> float | None:
    """µs from the caller's first block range to the helper's in one traced ``call()`` (None: no helper ran)."""
    with simt.trace_multicore_launches() as ranges:
        call()
    caller = threading.get_ident()
    mine = [r[1] for r in ranges if r[0] == caller]
    theirs = [r[1] for r in ranges if r[0] != caller]
    return (min(theirs) - min(mine)) * 1e6 if mine and theirs else None


def run(n: int, dtype: np.dtype, blocks: int, pairs: int, torch) -> dict:
    rng = np.random.default_rng(n)
    cols = 64
    table = rng.standard_normal((4 * n // cols, cols), dtype=np.float32).astype(dtype)
    idx = rng.integers(0, table.shape[0], n // cols, dtype=np.int32)
    want = table[idx]
    ours = lambda: pto.gather(table, idx, coalesce="row")  # noqa: E731
    peer = None
    if torch is not None:
        t_table, t_idx = torch.from_numpy(table), torch.from_numpy(idx.astype(np.int64))
        peer = lambda: torch.index_select(t_table, 0, t_idx)  # noqa: E731
        assert np.array_equal(peer().numpy(), want), "torch.index_select"
    times = {name: [] for name in SETTINGS}
    peer_times: list[float] = []
    delays = {name: [] for name in SETTINGS}
    names = list(SETTINGS)
    for block in range(blocks + len(names)):
        name = names[block % len(names)]
        with tuning.tuned(early_wake_helpers=SETTINGS[name]):  # (the kept launch is made again under it)
            assert np.array_equal(ours(), want), f"our Row gather ({name})"
            for _ in range(20):
                ours()
                if peer is not None:
                    peer()
            if block >= blocks:  # the traced blocks, one per setting
                delays[name] = [d for d in (_helper_delay(ours) for _ in range(pairs)) if d is not None]
                continue
            for _ in range(pairs):
                start = time.perf_counter()
                ours()
                times[name].append(time.perf_counter() - start)
                if peer is not None:
                    start = time.perf_counter()
                    peer()
                    peer_times.append(time.perf_counter() - start)
    figures = {name: 1e6 * statistics.median(t) for name, t in times.items()}
    figures["index_select"] = 1e6 * statistics.median(peer_times) if peer_times else None
    for name, found in delays.items():
        figures[f"helper starts, {name}"] = statistics.median(found) if found else None
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1M,2M,4M")
    parser.add_argument("--dtypes", default="float32,float16")
    parser.add_argument("--blocks", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=15)
    args = parser.parse_args(argv)
    if simt.multicore_workers() < 2:
        print("helper_start: one worker thread (NUMBA_NUM_THREADS=1): no helper to wake")
        return 0
    torch, why_not = load_torch(simt.multicore_workers())
    if why_not:
        print(why_not)
    columns = ["early", "late", "index_select", "helper starts, early", "helper starts, late"]
    print(f"Row gather, 64 columns, medians, µs (helper starts: after the caller's first range); "
          f"{args.blocks} blocks of {args.pairs} pairs")
    print("| size | dtype | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 2) + "|")
    for size in map(parse_size, args.sizes.split(",")):
        for dtype in map(np.dtype, args.dtypes.split(",")):
            got = run(size, dtype, args.blocks, args.pairs, torch)
            cells = ["-" if got[c] is None else f"{got[c]:.1f}" for c in columns]
            print(f"| {size_label(size)} | {dtype.name} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
