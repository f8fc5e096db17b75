"""The A5 kernels on the ``multicore`` backend against numpy and PyTorch (CPU), 256K to 256M elements, in one run.

Ours: ``pto.gather`` / ``pto.scatter`` with ``target="a5"`` on the ``multicore`` backend and default policies (OOB
UNDEFINED, strict: the index check is part of our cost), int32 indices, the gather's output allocated by the call.
Peers, on the same data:

=================  =========================  ============================================================
op                 numpy                      PyTorch (CPU)
=================  =========================  ============================================================
Row gather         ``table[rows]``            ``torch.index_select(table, 0, rows)``
Elem gather        ``table[idx]``             ``torch.take(table, idx)``
Elem scatter Add   ``np.add.at(table, idx,    ``table.index_add_(0, idx, src)``
                   src)``
Conflict::Last     ``table[idx] = src``       ``table.index_put_((idx,), src)`` under
                                              ``torch.use_deterministic_algorithms(True)``
=================  =========================  ============================================================

and plain Numba ``prange`` loops, each with nothing in it but the move (:data:`LOOP_PEERS`): for the Row gather, a
parallel copy of as many bytes as it moves (``out[i] = src[i]`` over 8-byte words: what this machine's memory gives
two streams), timed twice: into memory allocated before the timing, against our gather into ``out=`` memory
allocated likewise (the copy's rate is reported, and a run in which it falls below :data:`COPY_GBPS` says so), and
into a new array each call, against our gather making its result; the gather as a plain row copy
(``out[i, :] = table[rows[i], :]``) into a new array each call; and, against our gather into ``out=``, a read of the
same rows that writes nothing, prefetched as our kernel prefetches (``row_ceilings``: the rate random rows of the table
get from this machine's memory, which bounds any gather of them; the table shows the share of the copy's rate that
this read reaches, copy time / read time, timed against the copy in rounds of their own: the most a gather of those
rows can reach); for the Elem gather, a gather that allocates its output (the "ceiling": what this machine's memory
gives a parallel loop); for the float32 Elem scatter Add, ``table[idx[i]] += src[i]`` with the LLVM atomic our
kernel issues.

Shapes, for ``n`` elements moved: Row gather, ``n / C`` random rows of a ``(4n / C) x C`` table, ``C`` 64 columns
(``--row-cols``: the row width in elements; the README table is 64); Elem gather and
scatter Add, ``n`` random indices into a ``4n``-element table; Conflict::Last, ``n`` updates into ``n / 16`` slots (16
writers per slot on average; the owner path). Each op runs for float32 and float16.

Method. Every result is checked before anything is timed: the gathers bitwise against numpy; Conflict::Last (ours,
numpy's and PyTorch's) bitwise against ``simt_pto.reference.last_writer_scatter`` (the serial loop's result:
numpy's ``table[idx] = src`` promises no order for repeated indices); float Add (ours, numpy's and PyTorch's) within
the error bound of ``simt_pto.reference.float_add_bound`` (bitwise where a slot has at most one add). Then each peer
is timed against us in rounds (``bench_cpu.paired_times``: 3 to 30 warm-up pairs, then ``--repeat`` rounds, each a
block of our calls and a block of the peer's on the same data, in turn; a block makes up to 10 untimed calls, then
times up to 10 and keeps their median), and each figure is the median of the per-round ratios ``peer time / our
time``: above 1 we are faster. A block times each side's own repeated call, in the state its own calls leave the
caches in; ``--method pairs`` times back-to-back pairs instead, each call right after the other side's. PyTorch runs
with as many threads as our thread pool (``torch.set_num_threads``) and with ``OMP_WAIT_POLICY=PASSIVE`` set before
it is imported, so that its OpenMP threads sleep between its calls instead of spinning on the cores our next call
needs; the peers get int64 indices (their fastest index type), converted before the timing (``--peer-index int32``:
the very int32 array ours takes, converted inside each timed call, as a caller holding int32 indices sees it).

Per-call overhead, on ``a5`` (the ``multicore`` backend) and on ``a2a3``: calls per second of a whole-array
``pto.gather`` of 8 rows of a 64 x 64 float32 table and of one 8 x 64 Row ``pto.mgather`` tile op, against numpy's
``table[idx]`` on the same 8 rows, and of the in-place whole-array ``pto.scatter`` of those 8 rows and one 8 x 64 Row
``pto.mscatter`` tile op, against numpy's ``table[idx] = rows``: the ratio is our time per call / numpy's (the
target: at most 5x, issue #40).

Without PyTorch the benchmark says so and runs the numpy and ceiling columns. Outputs: ``peers.md`` (the tables),
``peers.csv`` (one line per op x dtype x size x peer; the ``read bound`` line's ``ours_ms`` is the read's time) and
``peers.json`` (that and the environment) under
``--out`` (default ``bench/out``).

Run: ``python bench/bench_peers.py [--sizes 256K,1M,4M,16M,64M,256M | all] [--dtypes float32,float16]
[--ops row_gather,elem_gather,scatter_add,last] [--row-cols 64] [--repeat 7] [--method rounds|pairs] [--no-overhead]
[--overhead-only]``.
The default sizes stop at 64M (about 12 minutes on 2 cores); 256M needs about 12 GB of memory and a long time.
"""
from __future__ import annotations

import os

# Before anything can import PyTorch (its OpenMP runtime reads this once): idle OpenMP threads sleep instead of
# spinning for 200 ms after each torch call, which would take the cores from our next call.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import csv  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402

import simt_pto as pto  # noqa: E402
from simt_pto import reference  # noqa: E402
from simt_pto.kernels.tuning import ROW_PREFETCH_BYTES  # noqa: E402

from bench_cpu import METHODS, paired_times  # noqa: E402

OPS = ("row_gather", "elem_gather", "scatter_add", "last")
OP_TITLES = {
    "row_gather": ("Row gather, {cols} columns", "`table[rows]`", "`index_select`"),
    "elem_gather": ("Elem gather", "`table[idx]`", "`torch.take`"),
    "scatter_add": ("Elem scatter Add", "`np.add.at`", "`index_add_`"),
    "last": ("Conflict::Last (n updates into n/16 slots)", "`table[idx] = src`", "deterministic `index_put_`"),
}
DEFAULT_SIZES = ("256K", "1M", "4M", "16M", "64M")
ALL_SIZES = DEFAULT_SIZES + ("256M",)
ROW_COLS = 64
"""The Row gather's row width in elements unless ``--row-cols`` says otherwise (README's table)."""
TABLE_FACTOR = 4
LAST_WRITERS_PER_SLOT = 16
CHECK_SLOTS = 1 << 25
"""The float Add check walks the table in slices of this many slots (float64 sums of a 1G-slot table would not fit)."""


def parse_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if scale > 1 else text) * scale


def size_label(n: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def bits(a: np.ndarray) -> np.ndarray:
    """The raw bits of ``a`` (bitwise comparison: NaN payloads and signed zeros count)."""
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def same_bits(got, want, what: str) -> None:
    got = np.asarray(got)
    if got.shape != want.shape or not np.array_equal(bits(got), bits(want)):
        bad = np.flatnonzero(bits(got).reshape(-1) != bits(want).reshape(-1))[:5] if got.shape == want.shape else []
        raise AssertionError(f"{what}: result differs from the reference (first positions {list(bad)})")


PEER_INDEX = np.int64
"""The peers' index dtype (``--peer-index``): int64, their fastest (converted before the timing), or int32, the very
array ours takes (numpy and PyTorch then convert it inside each timed call, as a caller holding int32 indices sees)."""

METHOD = "rounds"
"""How each peer is timed against us (``--method``, :func:`bench_cpu.paired_times`): in rounds of blocks of each
side's own calls, or in back-to-back pairs."""


def peer_indices(idx: np.ndarray) -> np.ndarray:
    return idx if PEER_INDEX == np.int32 else idx.astype(PEER_INDEX)


# -- peers ---------------------------------------------------------------------------------------------------------

def load_torch(threads: int):
    """PyTorch with ``threads`` intra-op threads, or None (and why) when it cannot be imported."""
    try:
        import torch
    except ImportError as error:
        return None, f"PyTorch is not installed ({error}): the torch columns are left out"
    torch.set_num_threads(threads)
    return torch, None


_ceiling = None


def ceiling_gather():
    """``out = np.empty(n); out[i] = table[idx[i]]`` for every ``i`` in a Numba ``prange``: the plain parallel loop
    (compiled once, on first use; raw bits, so one loop serves every element width)."""
    global _ceiling
    if _ceiling is None:
        @numba.njit(parallel=True)
        def prange_gather(table, idx):
            out = np.empty(idx.size, table.dtype)
            for i in numba.prange(idx.size):
                out[i] = table[idx[i]]
            return out
        _ceiling = prange_gather
    return _ceiling


_row_ceilings = None


def row_ceilings():
    """``(copy, row_copy, row_read)``: the Row gather's ceilings, each one plain Numba ``prange`` loop (compiled once,
    on first use; raw bits, so one loop serves every element width). The first two have nothing in them but the move
    and write the memory they are given, as our gather writes its ``out=`` or a new array:

    * ``copy(src, out)``: ``out[i] = src[i]`` over 8-byte words: a plain parallel copy of as many bytes as the gather
      moves, what this machine's memory gives two streams (read and write);
    * ``row_copy(table, rows, out)``: ``out[i, :] = table[rows[i], :]``: the gather itself as a plain loop;
    * ``row_read(words, rows, ahead, line_words)``: the sum of the first word of each 64-byte line of each row
      ``rows[i]`` of ``words`` (the table viewed as words), the row ``ahead`` positions on prefetched first, as our
      kernel prefetches: the rows the gather reads, read and not written, in the same random order. It is the rate
      this machine's memory gives random rows of this table (a bound for any gather of them); the copy reads one
      stream in order, which the hardware prefetcher follows, so a gather of a table much larger than the caches
      stays below the copy by the share this loop shows."""
    global _row_ceilings
    if _row_ceilings is None:
        from simt_pto.kernels.a5.intrinsics import _cpu_prefetch_lines  # the read prefetch our kernel issues

        @numba.njit(parallel=True)
        def prange_copy(src, out):
            for i in numba.prange(src.size):
                out[i] = src[i]
            return out

        @numba.njit(parallel=True)
        def prange_row_copy(table, rows, out):
            for i in numba.prange(rows.size):
                out[i, :] = table[rows[i], :]
            return out
        @numba.njit(parallel=True)
        def prange_row_read(words, rows, ahead, line_words):
            total = numba.uint64(0)
            for i in numba.prange(rows.size):
                if i + ahead < rows.size:
                    _cpu_prefetch_lines(words[rows[i + ahead]], 0, words.shape[1])
                row = words[rows[i]]
                for w in range(0, row.size, line_words):
                    total += row[w]
            return total
        _row_ceilings = prange_copy, prange_row_copy, prange_row_read
    return _row_ceilings


COPY_GBPS = 18.0
"""The plain parallel copy's rate (read + write, GB/s) on the 2-core development machine at 64M elements (issue #40):
a run whose copy falls below it says so (the host was busy, or the machine is another)."""


_atomic_loop = None


def atomic_add_loop():
    """``table[idx[i]] += src[i]`` for every ``i`` in a Numba ``prange``, each add the same LLVM ``atomicrmw fadd``
    our float32 Add kernel issues (the plain loop our Elem scatter Add is held against; float32 only)."""
    global _atomic_loop
    if _atomic_loop is None:
        from simt_pto.kernels.a5.intrinsics import _cpu_rmw_add  # the multicore backend's float32 atomic add

        @numba.njit(parallel=True)
        def prange_add(table, idx, src):
            for i in numba.prange(idx.size):
                _cpu_rmw_add(table, numba.uint64(numba.uint32(idx[i])), src[i])
        _atomic_loop = prange_add
    return _atomic_loop


# -- the ops -------------------------------------------------------------------------------------------------------
# Each returns {peer name: (our median s, peer median s, median ratio)} after checking every result.

def run_pairs(ours, peers: dict, repeat: int) -> dict:
    out = {}
    for name, fn in peers.items():
        out[name] = paired_times(ours, fn, repeat, METHOD)
        gc.collect()
    return out


def row_gather(rng, n, dtype, torch, repeat, cols=ROW_COLS):
    rows = n // cols
    table = rng.standard_normal((TABLE_FACTOR * rows, cols), dtype=np.float32).astype(dtype)
    idx = rng.integers(0, table.shape[0], rows, dtype=np.int32)
    pidx = peer_indices(idx)
    want = table[pidx]
    ours = lambda: pto.gather(table, idx, coalesce="row", target="a5")  # noqa: E731
    same_bits(ours(), want, "a5 Row gather")
    peers = {"numpy": lambda: table[pidx]}
    if torch is not None:
        t_table, t_idx = torch.from_numpy(table), torch.from_numpy(pidx)
        peers["torch"] = lambda: torch.index_select(t_table, 0, t_idx)
        same_bits(peers["torch"]().numpy(), want, "torch.index_select")
    copy, row_copy, row_read = row_ceilings()
    word = next(w for w in (8, 4, 2, 1) if cols * dtype.itemsize % w == 0)  # the copy's widest word a row holds
    words = want.reshape(-1).view(f"u{word}")  # the gathered bytes
    table_bits = bits(table)
    # into new memory each call, as our gather's result (numpy's allocator: large arrays on huge pages)
    peers["new copy"] = lambda: copy(words, np.empty_like(words))
    same_bits(peers["new copy"](), words, "prange copy")
    shape = want.shape
    peers["row copy"] = lambda: row_copy(table_bits, idx, np.empty(shape, table_bits.dtype))
    same_bits(peers["row copy"]().view(dtype), want, "prange row copy")
    out = run_pairs(ours, peers, repeat)
    # into memory allocated once, before the timing (its pages touched): our gather's out= against the copy's
    into, copied = np.zeros_like(want), np.zeros_like(words)
    ours_into = lambda: pto.gather(table, idx, coalesce="row", target="a5", out=into)  # noqa: E731
    same_bits(ours_into(), want, "a5 Row gather into out=")
    copy_into = lambda: copy(words, copied)  # noqa: E731
    same_bits(copy_into(), words, "prange copy into memory allocated once")
    # the rows read, not written, prefetched as far ahead as our kernel prefetches them
    row_words = table.view(f"u{word}")
    line_words = max(1, 64 // word)
    ahead = max(1, ROW_PREFETCH_BYTES // max(cols * dtype.itemsize, 64))
    read = lambda: row_read(row_words, idx, ahead, line_words)  # noqa: E731
    if read() != row_words[idx][:, ::line_words].sum(dtype=np.uint64):
        raise AssertionError("prange row read: its sum differs from numpy's sum of the same words")
    del want
    out.update(run_pairs(ours_into, {"copy": copy_into, "row read": read}, repeat))
    # the bound itself: the read against the copy in the same rounds ("read bound": its ours_ms is the read's time,
    # its ratio copy time / read time, the most a gather of these rows can reach of the copy's rate)
    out.update(run_pairs(read, {"read bound": copy_into}, repeat))
    return out


def elem_gather(rng, n, dtype, torch, repeat):
    table = rng.standard_normal(TABLE_FACTOR * n, dtype=np.float32).astype(dtype)
    idx = rng.integers(0, table.size, n, dtype=np.int32)
    pidx = peer_indices(idx)
    want = table[pidx]
    ours = lambda: pto.gather(table, idx, coalesce="elem", target="a5")  # noqa: E731
    same_bits(ours(), want, "a5 Elem gather")
    table_bits, loop = bits(table), ceiling_gather()
    peers = {"numpy": lambda: table[pidx]}
    if torch is not None:
        t_table, t_idx = torch.from_numpy(table), torch.from_numpy(pidx)
        peers["torch"] = lambda: torch.take(t_table, t_idx if PEER_INDEX == np.int64 else t_idx.long())  # needs int64
        same_bits(peers["torch"]().numpy(), want, "torch.take")
    peers["ceiling"] = lambda: loop(table_bits, idx)
    same_bits(peers["ceiling"]().view(dtype), want, "prange gather")
    del want
    return run_pairs(ours, peers, repeat)


def check_add(what: str, got, initial, idx, src, dtype_name: str) -> None:
    """Check a float Add result against the exact sum (float64) within :func:`simt_pto.reference.float_add_bound`'s
    bound ``(k + 1) * eps * (|t0| + sum |c_i|) + smallest subnormal`` at a slot with ``k`` adds, bitwise where
    ``k <= 1`` (one rounding of an exact sum). Vectorised, a slice of the table at a time (float64 sums of a whole
    1G-slot table would not fit in memory)."""
    eps, tiny = reference.UNIT_ROUNDOFF[dtype_name], reference.SMALLEST_SUBNORMAL[dtype_name]
    for lo in range(0, initial.size, CHECK_SLOTS):
        hi = min(lo + CHECK_SLOTS, initial.size)
        hit = (idx >= lo) & (idx < hi)
        slot, add = idx[hit] - lo, src[hit].astype(np.float64)
        start = initial[lo:hi].astype(np.float64)
        count = np.bincount(slot, minlength=hi - lo)
        exact = start + np.bincount(slot, weights=add, minlength=hi - lo)
        bound = (count + 1) * eps * (np.abs(start) + np.bincount(slot, weights=np.abs(add), minlength=hi - lo)) + tiny
        part = got[lo:hi]
        with np.errstate(invalid="ignore"):
            off = np.where(count > 1, ~(np.abs(part.astype(np.float64) - exact) <= bound),
                           bits(part) != bits(exact.astype(initial.dtype)))
        if off.any():
            first = int(np.flatnonzero(off)[0])
            raise AssertionError(f"{what}: slot {lo + first} holds {part[first]!r}, exact sum {exact[first]!r} "
                                 f"+- {bound[first]:.3g} ({count[first]} adds)")


def scatter_add(rng, n, dtype, torch, repeat):
    table = np.zeros(TABLE_FACTOR * n, dtype=dtype)
    idx = rng.integers(0, table.size, n, dtype=np.int32)
    pidx = peer_indices(idx)
    src = rng.standard_normal(n, dtype=np.float32).astype(dtype)
    loop = atomic_add_loop() if dtype == np.float32 else None
    t_src, t_idx = (torch.from_numpy(src), torch.from_numpy(pidx)) if torch is not None else (None, None)
    # each result on a fresh copy of the table, checked and dropped before the next (at 256M a copy is 4 GB)
    runs = {"a5 Elem scatter Add": lambda t: pto.scatter(t, src, idx, coalesce="elem", atomic="add", target="a5"),
            "np.add.at": lambda t: np.add.at(t, pidx, src)}
    if torch is not None:
        runs["index_add_"] = lambda t: torch.from_numpy(t).index_add_(0, t_idx, t_src)
    if loop is not None:
        runs["prange atomic loop"] = lambda t: loop(t, idx, src)
    for what, run in runs.items():
        got = table.copy()
        run(got)
        check_add(what, got, table, idx, src, np.dtype(dtype).name)
        del got
        gc.collect()
    ours = lambda: pto.scatter(table, src, idx, coalesce="elem", atomic="add", target="a5")  # noqa: E731
    peers = {"numpy": lambda: np.add.at(table, pidx, src)}
    if torch is not None:
        t_table = torch.from_numpy(table)
        peers["torch"] = lambda: t_table.index_add_(0, t_idx, t_src)
    if loop is not None:
        peers["atomic loop"] = lambda: loop(table, idx, src)
    return run_pairs(ours, peers, repeat)


def last(rng, n, dtype, torch, repeat):
    slots = max(1, n // LAST_WRITERS_PER_SLOT)
    table = np.zeros(slots, dtype=dtype)
    idx = rng.integers(0, slots, n, dtype=np.int32)
    pidx = peer_indices(idx)
    src = rng.standard_normal(n, dtype=np.float32).astype(dtype)
    want = reference.last_writer_scatter(table, pidx, src)  # the serial loop's result, in no order of numpy's
    same_bits(pto.scatter(table.copy(), src, idx, coalesce="elem", conflict="last", target="a5"), want,
              "a5 Conflict::Last")
    got = table.copy()
    got[pidx] = src
    same_bits(got, want, "numpy table[idx] = src")

    def index_put(t_table, t_idx, t_src):
        # accumulate=False under the deterministic flag is PyTorch's serial, last-writer-wins index_put_ on CPU; its
        # default (parallel) form leaves any one of a slot's writers
        torch.use_deterministic_algorithms(True)
        try:
            t_table.index_put_((t_idx,), t_src, accumulate=False)
        finally:
            torch.use_deterministic_algorithms(False)

    ours = lambda: pto.scatter(table, src, idx, coalesce="elem", conflict="last", target="a5")  # noqa: E731
    peers = {"numpy": lambda: table.__setitem__(pidx, src)}
    if torch is not None:
        t_table, t_idx, t_src = torch.from_numpy(table), torch.from_numpy(pidx), torch.from_numpy(src)
        got = torch.from_numpy(table.copy())
        index_put(got, t_idx, t_src)
        same_bits(got.numpy(), want, "torch deterministic index_put_")
        peers["torch"] = lambda: index_put(t_table, t_idx, t_src)
    del want, got
    return run_pairs(ours, peers, repeat)


BENCHES = {"row_gather": row_gather, "elem_gather": elem_gather, "scatter_add": scatter_add, "last": last}


# -- per-call overhead ---------------------------------------------------------------------------------------------

def calls_per_round(fn, seconds=0.02) -> int:
    """How many calls of ``fn`` take about ``seconds`` (so that one timed round is well above the timer's grain)."""
    fn()
    k, t = 1, 0.0
    while t < seconds and k < 1 << 20:
        k *= 2
        start = time.perf_counter()
        for _ in range(k):
            fn()
        t = time.perf_counter() - start
    return k


def overhead(repeat: int) -> list[dict]:
    """Calls per second of tiny calls (8 rows of a 64 x 64 float32 table) against numpy on the same rows: its
    ``table[idx]`` for the gathers, ``table[idx] = rows`` for the tile scatter."""
    rng = np.random.default_rng(1)
    table = rng.standard_normal((64, 64), dtype=np.float32)
    rows = np.array([3, 17, 42, 0, 63, 8, 25, 50], dtype=np.int32)
    want = table[rows]
    gt = pto.GlobalTensor(table)
    idx_tile = pto.Tile.from_array(rows.reshape(1, 8))
    written = np.zeros_like(table)  # numpy's scatter writes here

    gather_peer = lambda: table[rows]  # noqa: E731
    peer_out = np.empty_like(want)
    gather_into_peer = lambda: np.take(table, rows, axis=0, out=peer_out)  # noqa: E731
    scatter_peer = lambda: written.__setitem__(rows, want)  # noqa: E731
    expected = np.zeros_like(table)
    expected[rows] = want
    cases = []
    for target in ("a5", "a2a3"):
        where = "a5 (multicore)" if target == "a5" else "a2a3"
        dst = pto.Tile("float32", 8, 64)
        written = np.zeros_like(table)
        written_gt = pto.GlobalTensor(written)

        def whole_gather(target=target):
            return pto.gather(table, rows, coalesce="row", target=target)

        def whole_gather_into(target=target, into=np.empty_like(want)):
            return pto.gather(table, rows, coalesce="row", target=target, out=into)

        def whole_scatter(target=target, written=written):
            pto.scatter(written, want, rows, coalesce="row", target=target)

        def tile_gather(target=target, dst=dst):
            pto.mgather(dst, gt, idx_tile, coalesce="row", target=target)

        def tile_scatter(target=target, dst=dst, written_gt=written_gt):
            pto.mscatter(written_gt, dst, idx_tile, coalesce="row", target=target)

        same_bits(whole_gather(), want, f"{target} whole-array gather")
        same_bits(whole_gather_into(), want, f"{target} whole-array gather into out=")
        tile_gather()
        same_bits(dst.valid_numpy(), want, f"{target} tile gather")
        tile_scatter()
        same_bits(written, expected, f"{target} tile scatter")
        written[...] = 0
        whole_scatter()
        same_bits(written, expected, f"{target} whole-array scatter")
        cases += [(f"whole-array pto.gather, 8 rows, {where}", 5.0, whole_gather, gather_peer),
                  (f"whole-array pto.gather into out=, 8 rows, {where}, vs numpy's take(..., out=)", 5.0,
                   whole_gather_into, gather_into_peer),
                  (f"whole-array pto.scatter, 8 rows in place (Conflict::Last), {where}, vs numpy's table[idx] = rows",
                   5.0, whole_scatter, scatter_peer),
                  (f"8 x 64 Row pto.mgather tile op, {where}", 5.0, tile_gather, gather_peer),
                  (f"8 x 64 Row pto.mscatter tile op (Conflict::Last), {where}, vs numpy's table[idx] = rows", 5.0,
                   tile_scatter, scatter_peer)]
    out = []
    for name, target, fn, peer in cases:
        k = calls_per_round(fn)

        def ours_k(fn=fn, k=k):
            for _ in range(k):
                fn()

        def peer_k(k=k, peer=peer):
            for _ in range(k):
                peer()

        ours_t, peer_t, ratio = paired_times(ours_k, peer_k, repeat, METHOD)
        out.append({"case": name, "calls_per_s": k / ours_t, "numpy_calls_per_s": k / peer_t,
                    "us_per_call": ours_t / k * 1e6, "numpy_us_per_call": peer_t / k * 1e6,
                    "times_numpy": 1.0 / ratio, "target_times_numpy": target})
    return out


# -- reporting -----------------------------------------------------------------------------------------------------

def environment(torch, torch_note: str | None) -> dict:
    from simt_pto.kernels.a5.simt import multicore_workers
    env = {"python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
           "simt_pto": pto.__version__, "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
           "a5_backend": pto.a5_backend(), "workers": multicore_workers(),
           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "peer_index": np.dtype(PEER_INDEX).name,
           "torch": None if torch is None else torch.__version__,
           "torch_threads": None if torch is None else torch.get_num_threads(), "torch_note": torch_note}
    try:
        env["numba_threading_layer"] = numba.threading_layer()
    except ValueError:  # no parallel function has run yet
        env["numba_threading_layer"] = None
    return env


LOOP_PEERS = {
    "row_gather": (("copy", "Row gather into `out=` vs a plain parallel copy of the same bytes, both into memory "
                            "allocated once (copy time / ours: the share of the copy's rate; target at least 0.6 "
                            "from 16M)"),
                   ("new copy", "Row gather vs a plain parallel copy of the same bytes, both into a new array each "
                                "call (the share of the copy's rate)"),
                   ("row copy", "Row gather vs a plain `prange` row copy (`out[i, :] = table[rows[i], :]`) into a "
                                "new array each call"),
                   ("row read", "Row gather into `out=` vs a plain `prange` read of the same rows, prefetched as "
                                "ours, nothing written (from 16M: the rate random rows get from this machine's "
                                "memory)"),
                   ("read bound", "That read of the rows vs the plain copy, in the same rounds (copy time / read "
                                  "time: the share of the copy's rate the read reaches, the most a gather of these "
                                  "rows can reach, since it reads them too)")),
    "elem_gather": (("ceiling", "Elem gather vs a plain Numba `prange` gather (the ceiling; target at least 0.8 "
                                "from 1M)"),),
    "scatter_add": (("atomic loop", "Elem scatter Add vs a plain `prange` loop of the same LLVM atomic"),),
}
"""The plain loops each op is held against beyond numpy and PyTorch: (peer name, row title)."""


def copy_gbps(n: int, dtype: str, ms: float) -> float:
    """The plain copy's rate in GB/s, reads and writes counted: ``n`` elements of ``dtype`` in ``ms``."""
    return 2 * n * np.dtype(dtype).itemsize / (ms * 1e-3) / 1e9


def markdown(rows: list[dict], sizes: list[int], dtypes: list[str], ops: list[str], torch_present: bool,
             overhead_rows: list[dict], env: dict, repeat: int) -> str:
    """The run's tables: the ratios per op, dtype and size, the plain loops', the copy's rate, the times, the per-call
    overhead (``env["row_cols"]``: the Row gather's row width)."""
    labels = [size_label(n) for n in sizes]
    lines = [f"A5 `multicore` ({env['workers']} worker threads, {env['cores']} cores, {env['cpu']}); python {env['python']}, "
             f"numpy {env['numpy']}, numba {env['numba']}, "
             + (f"PyTorch {env['torch']} ({env['torch_threads']} threads, OMP_WAIT_POLICY={env['omp_wait_policy']})"
                if torch_present else "PyTorch absent") + f"; peers' indices {env['peer_index']}; median of {repeat} "
             + ("rounds, each a block of each side's own calls in turn." if env.get("method", "rounds") == "rounds"
                else "back-to-back pairs of calls."), ""]
    if rows:
        peers_note = "numpy / PyTorch" if torch_present else "numpy / PyTorch, which is not installed here (n/a)"
        lines += [f"Peer time / our time (above 1: we are faster); {peers_note}.", "",
                  "| op | dtype | " + " | ".join(labels) + " |", "|---|---|" + "---|" * len(labels)]
        by_key = {(r["op"], r["dtype"], r["size"], r["peer"]): r for r in rows}
        for op in ops:
            title, np_peer, torch_peer = OP_TITLES[op]
            title = title.format(cols=env.get("row_cols", ROW_COLS))
            for dtype in dtypes:
                cells = []
                for n in sizes:
                    numpy_r, torch_r = by_key.get((op, dtype, n, "numpy")), by_key.get((op, dtype, n, "torch"))
                    if numpy_r is None:
                        cells.append("")
                        continue
                    cell = f"{numpy_r['ratio']:.2f}x"
                    cell += f" / {torch_r['ratio']:.2f}x" if torch_r else " / n/a"
                    cells.append(cell)
                peer_names = np_peer + (f" / {torch_peer}" if torch_present else "")
                lines.append(f"| {title}, vs {peer_names} | {dtype} | " + " | ".join(cells) + " |")
            for loop_peer, loop_title in LOOP_PEERS.get(op, ()):
                for dtype in dtypes:
                    if not any((op, dtype, n, loop_peer) in by_key for n in sizes):
                        continue
                    cells = [f"{by_key[(op, dtype, n, loop_peer)]['ratio']:.2f}x" if (op, dtype, n, loop_peer) in by_key
                             else "" for n in sizes]
                    lines.append(f"| {loop_title} | {dtype} | " + " | ".join(cells) + " |")
            for dtype in dtypes if op == "row_gather" else ():
                if not any((op, dtype, n, "copy") in by_key for n in sizes):
                    continue
                cells = []
                for n in sizes:
                    r = by_key.get((op, dtype, n, "copy"))
                    if r is None:
                        cells.append("")
                        continue
                    cols = env.get("row_cols", ROW_COLS)
                    rate = copy_gbps(n // cols * cols, dtype, r["peer_ms"])  # (the bytes the gather moves)
                    cells.append(f"{rate:.1f}" + (f" (below {COPY_GBPS:.0f})" if rate < COPY_GBPS else ""))
                lines.append(f"| the plain parallel copy's rate, GB/s read + write (this machine: about "
                             f"{COPY_GBPS:.0f}) | {dtype} | " + " | ".join(cells) + " |")
        lines += ["", "Times (median ms, ours / peer; in a `read bound` line, the read's / the copy's):", "",
                  "| op | dtype | size | peer | ours ms | peer ms | ratio |", "|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['op']} | {r['dtype']} | {size_label(r['size'])} | {r['peer']} | {r['ours_ms']:.3f} | "
                         f"{r['peer_ms']:.3f} | {r['ratio']:.2f}x |")
    if overhead_rows:
        lines += ["", "Per-call overhead (8 rows of a 64 x 64 float32 table), against numpy's `table[idx]` (the tile "
                  "scatter: `table[idx] = rows`):", "",
                  "| call | calls/s | numpy calls/s | µs per call | numpy µs | our time / numpy's | target |",
                  "|---|---|---|---|---|---|---|"]
        for r in overhead_rows:
            met = "met" if r["times_numpy"] <= r["target_times_numpy"] else "not met"
            lines.append(f"| {r['case']} | {r['calls_per_s']:,.0f} | {r['numpy_calls_per_s']:,.0f} | "
                         f"{r['us_per_call']:.1f} | {r['numpy_us_per_call']:.2f} | {r['times_numpy']:.1f}x | "
                         f"<= {r['target_times_numpy']:.0f}x ({met}) |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    global PEER_INDEX, METHOD
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(DEFAULT_SIZES),
                    help="elements moved, comma-separated (256K, 1M, ...), or 'all' (adds 256M: ~12 GB, long); "
                         f"default {','.join(DEFAULT_SIZES)}")
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of {', '.join(OPS)}")
    ap.add_argument("--row-cols", type=int, default=ROW_COLS,
                    help=f"the Row gather's row width in elements (default {ROW_COLS}, README's table)")
    ap.add_argument("--repeat", type=int, default=7, help="timed rounds (or pairs) per figure, after 3 to 30 warm-up pairs")
    ap.add_argument("--method", choices=METHODS, default=METHODS[0],
                    help="rounds: a block of each side's calls in turn (default); pairs: back-to-back pairs of calls")
    ap.add_argument("--peer-index", choices=("int64", "int32"), default="int64",
                    help="the peers' index dtype: int64 (their fastest, converted before the timing; default) or int32 "
                         "(the array ours takes)")
    ap.add_argument("--no-overhead", action="store_true", help="skip the per-call overhead measurement")
    ap.add_argument("--overhead-only", action="store_true", help="only the per-call overhead measurement")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"), help="folder for peers.md/.csv/.json")
    args = ap.parse_args(argv)
    sizes = [parse_size(s) for s in (ALL_SIZES if args.sizes.strip().lower() == "all" else args.sizes.split(","))]
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    unknown = set(ops) - set(OPS)
    if unknown:
        ap.error(f"--ops: unknown {', '.join(sorted(unknown))}; expected some of {', '.join(OPS)}")
    if args.row_cols < 1 or ("row_gather" in ops and min(sizes) < args.row_cols):
        ap.error(f"--row-cols: expected a width from 1 to the smallest size ({size_label(min(sizes))}), "
                 f"got {args.row_cols}")
    if "multicore" not in pto.a5_backends():
        print("the multicore backend is not available in this process", file=sys.stderr)
        return 2
    pto.set_a5_backend("multicore")
    PEER_INDEX = np.dtype(args.peer_index).type
    METHOD = args.method
    from simt_pto.kernels.a5.simt import multicore_workers
    torch, torch_note = load_torch(multicore_workers())
    if torch_note:
        print(f"NOTE: {torch_note}", flush=True)
    if os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE":
        print(f"NOTE: OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}: PyTorch's idle threads spin and slow our "
              "next call", flush=True)
    rows: list[dict] = []
    if not args.overhead_only:
        for n in sizes:
            for op in ops:
                for dtype in dtypes:
                    rng = np.random.default_rng(n)
                    start = time.perf_counter()
                    width = {"cols": args.row_cols} if op == "row_gather" else {}
                    result = BENCHES[op](rng, n, np.dtype(dtype), torch, args.repeat, **width)
                    gc.collect()
                    for peer, (ours_t, peer_t, ratio) in result.items():
                        rows.append({"op": op, "dtype": dtype, "size": n, "peer": peer, "ours_ms": ours_t * 1e3,
                                     "peer_ms": peer_t * 1e3, "ratio": ratio})
                    summary = "  ".join(f"{peer} {r:.2f}x" for peer, (_, _, r) in result.items())
                    print(f"{op:<12} {dtype:<8} {size_label(n):>5}  {summary}   ({time.perf_counter() - start:.0f} s)",
                          flush=True)
    overhead_rows = [] if args.no_overhead else overhead(max(args.repeat, 9))
    env = environment(torch, torch_note)
    env["row_cols"] = args.row_cols
    env["method"] = args.method
    text = markdown(rows, sizes, dtypes, ops, torch is not None, overhead_rows, env, args.repeat)
    print()
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "peers.md").write_text(text)
    with open(out / "peers.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["op", "dtype", "size", "peer", "ours_ms", "peer_ms", "ratio"])
        writer.writeheader()
        writer.writerows(rows)
    (out / "peers.json").write_text(json.dumps({"environment": env, "repeat": args.repeat, "results": rows,
                                                "overhead": overhead_rows}, indent=1))
    print(f"wrote {out / 'peers.md'}, {out / 'peers.csv'}, {out / 'peers.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
