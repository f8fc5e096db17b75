"""The A5 kernels on the ``multicore`` backend (compiled for the CPU, all cores) against numpy, in the same run.

The timed region is the user's call: ``pto.gather`` / ``pto.scatter`` with ``target="a5"`` on the
``multicore`` backend and default policies (OOB UNDEFINED, strict: the index check is part of the cost, as numpy's
bounds check is part of its), inputs already allocated, the gather's output allocated by the call. After warm-up
pairs, ``--repeat`` rounds each time a block of our calls and a block of numpy's on the same data (``paired_times``),
and each ratio is the median of the rounds' (the machine's memory timings drift).

* ``row_gather``: 64-column float32 rows of a 256 MB table, 16M elements moved, vs ``table[rows]``;
* ``elem_gather``: 16M float32 elements from a 256 MB table vs ``table.ravel()[idx]``;
* ``scatter_add``: Elem scatter Add of 16M float32 into a 256 MB table vs ``np.add.at``;
* ``last``: Conflict::Last Elem scatter of 16M updates into a 1M-slot table (16 writers per slot on
  average), owner path, vs ``table[idx] = src`` (numpy's serial loop: the last writer wins);
* ``vs_simulator``: elements per second of one ``pto.mgather`` Elem tile op (64 x 128 float32) on the
  ``multicore`` backend over the same op on Numba's CUDA simulator.

Every ratio is peer time / our time (higher is better); every result is checked against numpy.

Run: ``python bench/bench_cpu.py [--small] [--repeat 5] [--json]``
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

import simt_pto as pto


def median_time(fn, repeat):
    fn()  # warm-up: compiles on the first run, pages the memory in
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


WARM_UP_PAIRS = (3, 30)
"""Warm-up pairs before the timed ones: at least the first, then more until the second or :data:`WARM_UP_SECONDS`."""

WARM_UP_SECONDS = 0.5
"""How long the warm-up pairs may go on past the first three."""

BLOCK_WARM_UP = (10, 0.02)
"""A round's block of calls first makes at least one untimed call, then more until this many calls or seconds."""

BLOCK_TIMED = (10, 0.05)
"""Then it times at least one call, and more until this many calls or seconds: the block's time is their median."""

METHODS = ("rounds", "pairs")
"""How :func:`paired_times` alternates the two callables once warmed up (the default first)."""


def paired_times(ours, peer, repeat, method="rounds"):
    """``(our median, peer median, median of the ratios peer / ours)`` over ``repeat`` rounds, after the warm-up
    pairs (:data:`WARM_UP_PAIRS`: three, then more up to 30 or half a second): the machine's memory timings drift
    from second to second (page faults, transparent huge pages, neighbours), and a round sees one state. A call's
    first few results can each be new memory that the kernel faults in page by page, which a loop of calls stops
    paying once the allocator keeps the memory (PyTorch's 4 MB ``index_select`` result: 1024 page faults a call for
    its first 9 or so calls on the development machine, none after); three warm-up pairs left it in that state at
    1M elements (docs/performance.md).

    ``method="rounds"``: each round is a block of calls of each, in turn (ours first in even rounds, the peer's in
    odd ones); a block makes untimed calls first (:data:`BLOCK_WARM_UP`), then times calls (:data:`BLOCK_TIMED`),
    and the round's ratio is the peer block's median over ours. What is timed is each callable's own repeated call,
    as a loop of it sees it: a call right after the other's leaves the caches as the other's call left them (at 4M
    float16, ``index_select`` took 260-270 µs right after our gather and 390-400 µs after a run of its own calls,
    and our first call after a run of its took 460 µs against 260; docs/performance.md), and which side that helps
    depends on the two. ``method="pairs"``: the figures of ``repeat`` back-to-back pairs, ours right before the
    peer's (each call timed right after the other's), as the benchmarks timed before."""
    if method not in METHODS:
        raise ValueError(f"method {method!r}: expected one of {', '.join(METHODS)}")
    least, most = WARM_UP_PAIRS
    started = time.perf_counter()
    for pair in range(most):  # compiles on the first call; pages the inputs in; lets fresh memory settle
        if pair >= least and time.perf_counter() - started > WARM_UP_SECONDS:
            break
        ours()
        peer()
    ours_t, peer_t = [], []
    for turn in range(repeat):
        if method == "pairs":
            for fn, out in ((ours, ours_t), (peer, peer_t)):
                t = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t)
        else:
            for fn, out in ((ours, ours_t), (peer, peer_t))[::1 if turn % 2 == 0 else -1]:
                out.append(block_time(fn))
    ratio = statistics.median(p / o for o, p in zip(ours_t, peer_t))
    return statistics.median(ours_t), statistics.median(peer_t), ratio


def block_time(fn) -> float:
    """The median time of ``fn()`` over one round's block: untimed calls, then timed ones (:func:`paired_times`)."""
    _calls_within(fn, *BLOCK_WARM_UP, timed=False)
    return statistics.median(_calls_within(fn, *BLOCK_TIMED, timed=True))


def _calls_within(fn, calls: int, seconds: float, timed: bool) -> list[float]:
    """Call ``fn()`` once, then again until ``calls`` calls or ``seconds`` have passed; each call's time if ``timed``."""
    times = []
    started = time.perf_counter()
    for made in range(calls):
        if made and time.perf_counter() - started > seconds:
            break
        t = time.perf_counter()
        fn()
        if timed:
            times.append(time.perf_counter() - t)
    return times


def bench_row_gather(rng, n, repeat):
    cols = 64
    table = rng.standard_normal((4 * n // cols, cols), dtype=np.float32)
    rows = rng.integers(0, table.shape[0], n // cols, dtype=np.int32)
    ours, peer, ratio = paired_times(lambda: pto.gather(table, rows, coalesce="row", target="a5"), lambda: table[rows], repeat)
    assert np.array_equal(pto.gather(table, rows, coalesce="row", target="a5"), table[rows])
    return ours, peer, ratio


def bench_elem_gather(rng, n, repeat):
    table = rng.standard_normal(4 * n, dtype=np.float32)
    idx = rng.integers(0, table.size, n, dtype=np.int32)
    ours, peer, ratio = paired_times(lambda: pto.gather(table, idx, coalesce="elem", target="a5"), lambda: table.ravel()[idx],
                              repeat)
    assert np.array_equal(pto.gather(table, idx, coalesce="elem", target="a5"), table[idx])
    return ours, peer, ratio


def bench_scatter_add(rng, n, repeat):
    table = np.zeros(4 * n, dtype=np.float32)
    idx = rng.integers(0, table.size, n, dtype=np.int32)
    src = rng.standard_normal(n, dtype=np.float32)
    ours, peer, ratio = paired_times(lambda: pto.scatter(table, src, idx, coalesce="elem", atomic="add", target="a5"),
                              lambda: np.add.at(table, idx, src), repeat)
    ours_table, peer_table = np.zeros_like(table), np.zeros_like(table)
    pto.scatter(ours_table, src, idx, coalesce="elem", atomic="add", target="a5")
    np.add.at(peer_table, idx, src)
    # 16M adds into 64M slots: almost every slot has at most one writer, so the order rarely matters
    np.testing.assert_allclose(ours_table, peer_table, rtol=1e-5, atol=1e-5)
    return ours, peer, ratio


def bench_last(rng, n, repeat):
    slots = max(1, n // 16)
    table = np.zeros(slots, dtype=np.float32)
    idx = rng.integers(0, slots, n, dtype=np.int32)
    src = np.arange(n, dtype=np.float32)
    ours, peer, ratio = paired_times(lambda: pto.scatter(table, src, idx, coalesce="elem", conflict="last", last_path="owner",
                                                  target="a5"), lambda: table.__setitem__(idx, src), repeat)
    got, want = np.zeros_like(table), np.zeros_like(table)
    pto.scatter(got, src, idx, coalesce="elem", conflict="last", last_path="owner", target="a5")
    want[idx] = src  # numpy's serial assignment: the last writer of each slot wins
    assert np.array_equal(got, want)
    return ours, peer, ratio


def tile_op_rate(backend, repeat):
    """Elements per second of one 64 x 128 float32 Elem ``pto.mgather`` tile op on ``backend``."""
    rng = np.random.default_rng(1)
    rows, cols = 64, 128
    table = pto.GlobalTensor(rng.standard_normal(1 << 16, dtype=np.float32))
    idx = pto.Tile.from_array(rng.integers(0, 1 << 16, (rows, cols), dtype=np.int32))
    dst = pto.Tile("float32", rows, cols)
    previous = pto.a5_backend()
    pto.set_a5_backend(backend)
    try:
        t = median_time(lambda: pto.mgather(dst, table, idx, coalesce="elem", target="a5"), repeat)
    finally:
        pto.set_a5_backend(previous)
    return rows * cols / t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="1M elements / 16 MB tables (a quick smoke run)")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--json", action="store_true", help="print one JSON object of the ratios as the last line")
    args = ap.parse_args(argv)
    if "multicore" not in pto.a5_backends():
        print("the multicore backend is not available in this process", file=sys.stderr)
        return 2
    pto.set_a5_backend("multicore")
    n = (1 << 20) if args.small else (1 << 24)
    rng = np.random.default_rng(0)
    from simt_pto.kernels.a5.simt import multicore_workers
    print(f"A5 backend multicore ({multicore_workers()} worker threads, {os.cpu_count()} cores, "
          f"{platform.processor() or platform.machine()}); "
          f"numpy {np.__version__}; {n:,} elements; median of {args.repeat}")
    ratios = {}
    for name, fn, peer in (("row_gather", bench_row_gather, "table[rows]"),
                           ("elem_gather", bench_elem_gather, "table.ravel()[idx]"),
                           ("scatter_add", bench_scatter_add, "np.add.at"),
                           ("last", bench_last, "table[idx] = src")):
        ours, theirs, ratio = fn(rng, n, args.repeat)
        ratios[name] = round(ratio, 3)
        print(f"{name:<12} a5/multicore {ours * 1e3:9.2f} ms   {peer:<20} {theirs * 1e3:9.2f} ms   ratio {ratio:6.2f}x")
    if "simulator" in pto.a5_backends():
        multicore_rate = tile_op_rate("multicore", args.repeat)
        sim_rate = tile_op_rate("simulator", 3)
        ratios["vs_simulator"] = round(multicore_rate / sim_rate, 1)
        print(f"{'vs_simulator':<12} 64x128 Elem tile op: multicore {multicore_rate:,.0f} elem/s, simulator "
              f"{sim_rate:,.0f} elem/s   ratio {multicore_rate / sim_rate:,.0f}x")
    else:  # (the CUDA simulator comes with the cuda extra)
        print(f"{'vs_simulator':<12} left out: Numba's CUDA simulator is not available in this process "
              "(pip install 'simt_pto[cuda]')")
    if args.json:
        print(json.dumps(ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
