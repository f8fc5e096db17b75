"""Coalescing benchmark: the A5 kernels' effective bandwidth beside the analyzer's predicted efficiency (issue 7).

    python bench/coalescing_bench.py [--quick] [--analyze-only] [--simulate] [--out DIR] [--repeats N] [--no-peers]

For every point of a workload matrix (MGATHER / MSCATTER x Row / Elem x atomics; float32 / float16 / int8;
row widths 8..1024; index patterns sequential, sorted random, uniform random, strided by k rows, Zipf hot set,
all-identical; tile shapes that change kLaunchWarps) it reports:

* the emulator's effective GB/s on the GPU: ``(2 x elements moved x itemsize + indices x 4) / kernel time``,
  median of repeats timed with CUDA events around the kernel launch alone (arrays staged on the device before,
  an idle spin kernel ahead of the start event so that launch overhead on the host is not timed). Index arrays
  longer than one tile run as one multi-block launch, block ``b`` = tile ``b`` (as ``simt_pto.host.in_memory``);
* the analyzer's predicted GM efficiency and sectors per request (:mod:`simt_pto.host.tools.coalescing`, on a prefix of
  the indices), and beside it the sectors and requests the GPU counts for the same launch: through CUPTI's Range
  Profiler in this process (``--counters cupti``, the ``counters`` extra; ``coalescing_counters.md``: the model
  against the counters per point and kind, a summary per kernel family, the points ranked differently), or
  Nsight Compute when ``ncu`` is on PATH (``--counters ncu``);
* peers in the same run when importable: torch ``index_select`` / ``take`` / ``index_add_`` / ``index_reduce_`` /
  ``scatter_reduce_`` / deterministic ``index_put_``, cupy ``take`` / ``cupyx.scatter_add`` / ``scatter_max``
  (same byte count; the peers get int64 indices, staged before timing).

Writes ``coalescing.md`` (table), ``coalescing.csv`` and PNG plots into ``bench/out/``. Without a CUDA GPU it says
so and runs the analyzer-only part (the predicted-efficiency table and plots). ``--quick`` is a reduced matrix
(under 2 minutes on an H100); ``--simulate`` sends a few tiny points through the GPU code path on Numba's CUDA
simulator (checks staging, launch and results; its timings mean nothing).
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PATTERNS = ("sequential", "sorted_random", "uniform_random", "strided", "zipf", "identical")
STRIDE_ROWS = 4
"""The "strided" pattern steps this many table rows per index (Elem: this many rows' worth of elements)."""
ZIPF_A = 1.2
HOT_SET = 1024
"""The "zipf" pattern: rank k of a random hot set of HOT_SET slots is drawn with probability ~ k ** -ZIPF_A."""
CONTENDED_MAX = 1 << 14
"""Atomic points with heavy collisions (Zipf, identical) use at most this many indices: same-address atomics
serialise, and the float16 CAS loops retry, so the full count would take seconds per launch."""
WIDTHS_FULL = (8, 16, 32, 64, 128, 256, 512, 1024)
WIDTHS_QUICK = (8, 128, 1024)
SMALL_TILE = {"row": 4, "elem": 64}
"""The "small" tile variant: 4 rows (Row: kLaunchWarps = 4 x kWarpsPerRow) or 64 positions (Elem: 2 warps)."""


@dataclasses.dataclass(frozen=True)
class Series:
    op: str          # "mgather" / "mscatter"
    coalesce: str    # "row" / "elem"
    atomic: str      # "none" (MSCATTER: Conflict::Default), "last" (atomic none, Conflict::Last), "add", "max"
    dtype: str

    @property
    def label(self) -> str:
        kind = "" if self.op == "mgather" else f" {self.atomic}"
        return f"{self.op} {self.coalesce}{kind} {self.dtype}"


SERIES_FULL = [Series("mgather", co, "none", dt) for co in ("row", "elem") for dt in ("float32", "float16", "int8")] + [
    Series("mscatter", co, at, dt) for co in ("row", "elem")
    for at, dts in (("none", ("float32", "float16", "int8")), ("add", ("float32", "float16")), ("max", ("float32",)),
                    ("last", ("float32",)))
    for dt in dts]
SERIES_QUICK = [Series("mgather", "row", "none", "float32"), Series("mgather", "row", "none", "float16"),
                Series("mgather", "row", "none", "int8"), Series("mgather", "elem", "none", "float32"),
                Series("mscatter", "row", "none", "float32"), Series("mscatter", "row", "add", "float32"),
                Series("mscatter", "row", "add", "float16"), Series("mscatter", "elem", "add", "float32"),
                Series("mscatter", "elem", "max", "float32"), Series("mscatter", "row", "last", "float32")]


@dataclasses.dataclass(frozen=True)
class Point:
    series: Series
    cols: int
    pattern: str
    tile: str          # "default" / "small"
    n: int             # index count (Row: rows; Elem: positions)
    table_rows: int

    @property
    def capacity(self) -> int:
        return self.table_rows if self.series.coalesce == "row" else self.table_rows * self.cols

    @property
    def elements(self) -> int:
        return self.n * (self.cols if self.series.coalesce == "row" else 1)

    def nbytes(self, itemsize) -> int:
        return 2 * self.elements * itemsize + 4 * self.n


def matrix(quick: bool, simulate: bool = False) -> list[Point]:
    """The workload points: every series x width x pattern at the default tile, plus small-tile points."""
    if simulate:  # the CUDA simulator runs every thread in Python: tiny sizes
        series, widths, payload, table_cap = SERIES_QUICK, (8, 40), 1 << 10, 1 << 13
    elif quick:
        series, widths, payload, table_cap = SERIES_QUICK, WIDTHS_QUICK, 8 << 20, 64 << 20
    else:
        series, widths, payload, table_cap = SERIES_FULL, WIDTHS_FULL, 64 << 20, 256 << 20
    min_rows, min_elems, last_rows, last_slots = (16, 128, 8, 64) if simulate else (256, 4096, 256, 4096)
    points = []
    for s in series:
        isz = np.dtype(s.dtype).itemsize
        for cols in widths:
            if s.atomic == "last":  # slot-centric: one tile per call, O(slots x indices): small tables
                rows = last_rows if s.coalesce == "row" else last_slots
                table_rows = last_slots if s.coalesce == "row" else max(1, last_slots // cols)
                n = rows if s.coalesce == "row" else min(rows, table_rows * cols)
                patterns = ("sequential", "uniform_random", "zipf") if quick or simulate else PATTERNS
                points += [Point(s, cols, p, "default", n, table_rows) for p in patterns]
                continue
            table_rows = max(64, min(65536, table_cap // (cols * isz)))
            n = max(min_rows, payload // (cols * isz)) if s.coalesce == "row" else \
                max(min_elems, payload // max(isz, 4))  # Elem: at most payload / 4 indices
            tiles = ("default", "small") if (not quick or (s.dtype == "float32" and s.atomic in ("none", "add"))) \
                else ("default",)
            for tile in tiles:
                pats = PATTERNS if tile == "default" else ("sequential", "uniform_random")
                if simulate:
                    pats = ("uniform_random", "zipf") if tile == "default" else ("sequential",)
                points += [Point(s, cols, p, tile, min(n, CONTENDED_MAX) if s.atomic in ("add", "max") and
                                 p in ("zipf", "identical") else n, table_rows) for p in pats]
    return points


def make_indices(pattern: str, n: int, capacity: int, cols: int, coalesce: str, rng, prefix: int | None = None):
    """int32 indices of one pattern, all in ``[0, capacity)``: the first ``prefix`` (default all) of ``n``, drawn
    so that a prefix has the distribution of the same prefix of the whole array."""
    m = n if prefix is None else min(n, prefix)
    if pattern == "sequential":
        idx = np.arange(m) % capacity
    elif pattern == "sorted_random":  # n uniform draws in sorted order: cumulative exponential gaps, no sort
        gaps = np.cumsum(rng.exponential(size=m))
        total = gaps[-1] + rng.gamma(n + 1 - m)  # the sum of all n + 1 gaps
        idx = np.minimum((gaps / total * capacity).astype(np.int64), capacity - 1)
    elif pattern == "uniform_random":
        idx = rng.integers(0, capacity, m)
    elif pattern == "strided":
        step = STRIDE_ROWS if coalesce == "row" else STRIDE_ROWS * cols
        idx = (np.arange(m) * step) % capacity
    elif pattern == "zipf":
        hot = rng.choice(capacity, size=min(HOT_SET, capacity), replace=False)
        cdf = np.cumsum(1.0 / np.arange(1, len(hot) + 1) ** ZIPF_A)
        idx = hot[np.minimum(np.searchsorted(cdf, rng.random(m) * cdf[-1]), len(hot) - 1)]
    elif pattern == "identical":
        idx = np.full(m, capacity // 2)
    else:
        raise ValueError(f"unknown index pattern {pattern!r}")
    return idx.astype(np.int32)


# -- prediction ---------------------------------------------------------------------------------------------

def _conflict(s: Series) -> str:
    return "last" if s.atomic == "last" else "default"


def _atomic(s: Series) -> str:
    return "none" if s.atomic in ("none", "last") else s.atomic


def tile_rows_for(p: Point) -> int | None:
    if p.tile == "default":
        return None
    return SMALL_TILE[p.series.coalesce]


def sample_size(p: Point, sample_lanes: int) -> int:
    """How many of the point's indices the analyzer replays: whole tiles, about ``sample_lanes`` lanes."""
    per_index = p.cols if p.series.coalesce == "row" else 1
    unit = tile_rows_for(p) or (256 if p.series.coalesce == "row" else 4096)
    return min(p.n, max(unit, (sample_lanes // per_index) // unit * unit))


def predict(p: Point, idx: np.ndarray, sample_lanes: int):
    """The analyzer on a prefix of the indices, for the point's whole-array call: the launches of the plan
    :meth:`Device.build` times (Conflict::Last on its slot-centric path, the analyzer's default ``last_path``)."""
    from simt_pto.host.tools import coalescing
    s = p.series
    tr = tile_rows_for(p)
    tile = None if tr is None else ((tr, p.cols) if s.coalesce == "row" else (tr, 1))
    n = min(len(idx), sample_size(p, sample_lanes))
    return coalescing.analyze(s.op, s.coalesce, idx[:n], (p.table_rows, p.cols), tile, s.dtype,
                              atomic=_atomic(s), conflict=_conflict(s), call="whole", last_path="slot")


# -- the GPU side ---------------------------------------------------------------------------------------------

class Device:
    """Stages a point's arrays, times the emulator's kernel (and the peers), checks gathers bit for bit."""

    def __init__(self, repeats: int, peers: bool):
        from numba import cuda
        from simt_pto.host import a5_runner
        self.cuda, self.a5, self.repeats = cuda, a5_runner, repeats
        self.on_gpu = a5_runner.on_gpu()
        self.spin = self._spinner() if self.on_gpu else None
        self.torch = self.cupy = None
        if peers and self.on_gpu:
            try:
                import torch
                self.torch = torch if torch.cuda.is_available() else None
            except ImportError:
                pass
            try:
                import cupy
                import cupyx  # noqa: F401
                self.cupy = cupy
            except ImportError:
                pass

    def _spinner(self):
        cuda = self.cuda
        try:
            @cuda.jit
            def spin(n):
                for _ in range(n):
                    cuda.nanosleep(1000)
            spin[1, 1](1)
            cuda.synchronize()
            return spin
        except Exception as exc:  # noqa: BLE001 - timing still works, with host launch overhead inside it
            print(f"note: no spin kernel ({exc}); launch overhead is inside the timings")
            return None

    def _time(self, fn, event_factory) -> float:
        """Median seconds of ``fn`` between two events (one warm-up call first)."""
        fn()
        self.cuda.synchronize()
        times = []
        for _ in range(self.repeats):
            start, end = event_factory()
            if self.spin is not None:
                self.spin[1, 1](200)  # ~200 us of GPU work while the host enqueues the launch
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return statistics.median(times)

    def _numba_events(self):
        return self.cuda.event(timing=True), self.cuda.event(timing=True)

    def stage(self, a):
        return self.a5.to_device(a) if self.on_gpu else a

    # -- the emulator ------------------------------------------------------------------------------------
    def build(self, p: Point, idx: np.ndarray, table_host: np.ndarray, rng):
        """(run, check, indices used, kernel, geometry, grid) for the point: the launch of the whole-array call
        (``simt_pto.host.in_memory.gather_plan`` / ``scatter_plan``, validated as the API validates it; block ``b``
        runs tile ``b``), in the hardware's element-width form where the emulator widens Row moves (the launch the
        analyzer models); Conflict::Last runs the first tile's slot-centric launch (one launch per tile)."""
        from simt_pto.host import in_memory
        from simt_pto.kernels.a5 import simt
        s = p.series
        d = np.dtype(s.dtype)
        row = s.coalesce == "row"
        tr = tile_rows_for(p)  # None: the whole-array ops' default, fitted to the UB budget
        table = table_host if row else table_host.reshape(-1)
        used = np.ascontiguousarray(idx[:p.n], dtype=np.int32)
        # host arrays (plans built for the multicore backend): this class stages them itself, before timing
        common = dict(coalesce=s.coalesce, target="a5", tile_rows=tr, backend="multicore")
        if s.op == "mgather":
            call = in_memory.gather_plan(table, used, **common)
        else:
            nbytes = p.n * (p.cols if row else 1) * d.itemsize
            src = np.resize(rng.integers(0, 64, 1 << 12).astype(np.uint8), nbytes).view(d)
            call = in_memory.scatter_plan(table, src.reshape(p.n, p.cols) if row else src, used,
                                      atomic=_atomic(s), conflict=_conflict(s), last_path="slot", **common)
        launch = call.launches[0]
        # Last: the first tile only (the slot-centric kernel reverse-scans its tile for every table slot)
        n_used = launch.arguments["valid_rows"] if s.atomic == "last" else p.n
        used = used[:n_used]
        launch = launch.hardware or launch
        kernel = simt.compile_kernel(launch.kernel, launch.policy, "cuda")  # the CUDA copy of the one source
        dev = {name: self.stage(value) for name, value in launch.args}
        ordered = tuple(dev.values())
        grid, block = launch.grid, launch.geometry.block
        launch_tuple = (0, grid, grid, launch.geometry.launch_warps)

        def run():
            kernel[grid, block](launch_tuple, *ordered)

        def check():
            if s.op != "mgather":
                return True
            out = dev["dst"]
            got = out.copy_to_host() if hasattr(out, "copy_to_host") else out
            bits = table_host.view(launch.arguments["dst"].dtype)
            want = bits[used] if row else bits.reshape(-1)[used]
            return bool(np.array_equal(got.reshape(want.shape), want))

        return run, check, n_used, launch.kernel, launch.geometry, grid

    def time_emulator(self, run) -> float:
        return self._time(run, self._numba_events)

    # -- peers ---------------------------------------------------------------------------------------------
    def peers(self, p: Point, idx: np.ndarray, table_host: np.ndarray, n_used: int) -> dict[str, float]:
        s, out = p.series, {}
        idx = idx[:n_used]
        row = s.coalesce == "row"
        if self.torch is not None:
            torch = self.torch
            tdt = {"float32": torch.float32, "float16": torch.float16, "int8": torch.int8}[s.dtype]
            table = torch.as_tensor(table_host, device="cuda").to(tdt)
            flat = table.reshape(-1)
            ti = torch.as_tensor(idx.astype(np.int64), device="cuda")
            src = (torch.ones(len(idx), p.cols, device="cuda") if row else torch.ones(len(idx), device="cuda")).to(tdt)
            def tev():
                return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            fns = {}
            if s.op == "mgather":
                fns["torch.index_select" if row else "torch.take"] = (
                    (lambda: torch.index_select(table, 0, ti)) if row else (lambda: torch.take(flat, ti)))
            elif s.atomic == "add":
                fns["torch.index_add_"] = (lambda: table.index_add_(0, ti, src)) if row else \
                    (lambda: flat.index_add_(0, ti, src))
            elif s.atomic == "max":
                fns["torch.index_reduce_(amax)" if row else "torch.scatter_reduce_(amax)"] = (
                    (lambda: table.index_reduce_(0, ti, src, "amax")) if row else
                    (lambda: flat.scatter_reduce_(0, ti, src, "amax")))
            else:
                def put(target=table if row else flat):
                    torch.use_deterministic_algorithms(True)
                    try:
                        target.index_put_((ti,), src)
                    finally:
                        torch.use_deterministic_algorithms(False)
                fns["torch.index_put_(deterministic)"] = put
            for name, fn in fns.items():
                out[name] = self._peer_time(fn, tev)
        if self.cupy is not None:
            cp = self.cupy
            import cupyx
            table = cp.asarray(table_host)
            flat = table.reshape(-1)
            ci = cp.asarray(idx.astype(np.int64))
            src = cp.ones((len(idx), p.cols) if row else len(idx), dtype=table.dtype)
            def cev():
                return cp.cuda.Event(), cp.cuda.Event()
            fns = {}
            if s.op == "mgather":
                fns["cupy.take"] = (lambda: cp.take(table, ci, axis=0)) if row else (lambda: cp.take(flat, ci))
            elif s.atomic == "add":
                fns["cupyx.scatter_add"] = lambda: cupyx.scatter_add(table if row else flat, ci, src)
            elif s.atomic == "max":
                fns["cupyx.scatter_max"] = lambda: cupyx.scatter_max(table if row else flat, ci, src)
            for name, fn in fns.items():
                out[name] = self._peer_time(fn, cev, cupy_events=True)
        return out

    def _peer_time(self, fn, events, cupy_events=False) -> float:
        try:
            if not cupy_events:
                return self._time(fn, events)
            cp = self.cupy
            fn()
            cp.cuda.Device().synchronize()
            times = []
            for _ in range(self.repeats):
                start, end = events()
                if self.spin is not None:
                    self.spin[1, 1](200)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
            return statistics.median(times)
        except Exception as exc:  # noqa: BLE001 - a peer that does not support the dtype is reported as n/a
            print(f"  peer failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}")
            return math.nan


# -- ncu (optional) ---------------------------------------------------------------------------------------------

NCU_METRICS = {
    "ld_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "ld_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "st_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "st_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "atom_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_atom.sum",
    "red_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_red.sum",
    "ld_pct": "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",
    "st_pct": "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct",
}


def ncu_measure(p: Point, timeout: int = 120) -> dict | None:
    """Run one point under Nsight Compute (this script in ``--ncu-point`` mode) and read its sector metrics."""
    ncu = shutil.which("ncu")
    if ncu is None:
        return None
    cmd = [ncu, "--csv", "--page", "raw", "--metrics", ",".join(NCU_METRICS.values()), "-k", "regex:simt_",
           "--launch-count", "1", sys.executable, str(Path(__file__).resolve()), "--ncu-point",
           json.dumps(_point_json(p))]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"  ncu failed: {exc}")
        return None
    rows = [r for r in csv.reader(line for line in res.stdout.splitlines() if line.startswith('"'))]
    if len(rows) < 3:
        print(f"  ncu gave no metrics (rc {res.returncode}): {res.stderr.strip()[:200]}")
        return None
    header, values = rows[0], rows[-1]
    out = {}
    for key, metric in NCU_METRICS.items():
        if metric in header:
            try:
                out[key] = float(values[header.index(metric)].replace(",", ""))
            except ValueError:
                pass
    return out


def _point_json(p: Point) -> dict:
    return {"series": dataclasses.asdict(p.series), **{k: v for k, v in dataclasses.asdict(p).items() if k != "series"}}


def _point_from_json(text: str) -> Point:
    d = json.loads(text)
    return Point(Series(**d.pop("series")), **d)


def run_ncu_point(text: str) -> int:
    """``--ncu-point``: stage one point and launch its kernel once (Nsight Compute profiles that launch)."""
    p = _point_from_json(text)
    rng = np.random.default_rng(0)
    idx = make_indices(p.pattern, p.n, p.capacity, p.cols, p.series.coalesce, rng)
    table_host = _table(p, rng)
    dev = Device(repeats=1, peers=False)
    dev.spin = None
    run, *_ = dev.build(p, idx, table_host, rng)
    run()
    dev.cuda.synchronize()
    return 0


# -- driver -------------------------------------------------------------------------------------------------

_TABLES: dict = {}


def _table(p: Point, rng) -> np.ndarray:
    """The point's table: small random integers in its dtype (shared by the points of one shape and dtype)."""
    key = (p.series.dtype, p.table_rows, p.cols)
    if key not in _TABLES:
        _TABLES.clear()
        block = rng.integers(-100, 100, 1 << 16).astype(p.series.dtype)
        _TABLES[key] = np.resize(block, (p.table_rows, p.cols))
    return _TABLES[key]


def cupti_measure(run) -> dict | None:
    """The GPU's own counters for the launch ``run()`` makes (CUPTI's Range Profiler,
    :mod:`simt_pto.host.tools.gpu_counters`): ``kind -> (sectors, requests)`` for ``ld``, ``st``, ``atom``
    (``red`` included), or None with the reason printed."""
    from numba import cuda

    from simt_pto.host.tools import counter_check, gpu_counters

    def launch_and_wait():
        run()
        cuda.synchronize()
    try:
        return counter_check.measured(gpu_counters.measure(launch_and_wait), ("simt_",))
    except (gpu_counters.CountersUnavailable, gpu_counters.CuptiError, ValueError) as exc:
        print(f"  counters: {exc}")
        return None


def counter_source(requested: str, gpu: bool, no_ncu: bool) -> str | None:
    """Where the measured sectors come from: ``"cupti"`` (in process), ``"ncu"`` (Nsight Compute, a subprocess per
    point) or None. ``"auto"``: CUPTI when its library loads, else ncu when it is on PATH."""
    if not gpu or requested == "none":
        return None
    if requested in ("auto", "cupti"):
        from simt_pto.host.tools import gpu_counters
        try:
            gpu_counters.require()
            return "cupti"
        except gpu_counters.CountersUnavailable as exc:
            print(f"CUPTI counters unavailable: {exc}")
            if requested == "cupti":
                return None
    if not no_ncu and shutil.which("ncu") is not None:
        return "ncu"
    return None


def run_points(points, device: Device | None, sample_lanes: int, counters: str | None, log=print) -> list[dict]:
    rows = []
    rng_seed = 20240531
    t0 = time.time()
    for i, p in enumerate(points):
        rng = np.random.default_rng(rng_seed + i)
        s = p.series
        prefix = None if device is not None else sample_size(p, sample_lanes)  # analyzer only: just the sample
        idx = make_indices(p.pattern, p.n, p.capacity, p.cols, s.coalesce, rng, prefix)
        rep = predict(p, idx, sample_lanes)
        main = rep.gm_loads if s.op == "mgather" else rep.gm_stores
        isz = np.dtype(s.dtype).itemsize
        row = {"op": s.op, "coalesce": s.coalesce, "atomic": s.atomic, "dtype": s.dtype, "cols": p.cols,
               "pattern": p.pattern, "tile": f"{rep.tile_shape[0]}x{rep.tile_shape[1]}", "tile_kind": p.tile,
               "launch_warps": rep.geometry.launch_warps if rep.geometry is not None else 0,
               "kernel": rep.kernel, "indices": p.n, "table_rows": p.table_rows,
               "pred_efficiency": main.efficiency, "pred_sectors_per_request": main.sectors_per_request,
               "pred_segments_per_request": main.segments_per_request,
               "pred_emulated_efficiency": rep.emulated()["ld" if s.op == "mgather" else
                                                          ("atom" if s.atomic in ("add", "max") else "st")].efficiency,
               "gbps": math.nan, "check": "", "peers": {}}
        if device is not None:
            table_host = _table(p, rng)
            run, check, n_used, _, geo, grid = device.build(p, idx, table_host, rng)
            t = device.time_emulator(run) if device.on_gpu else math.nan
            if not device.on_gpu:
                run()
            row["check"] = "ok" if check() else "MISMATCH"
            row["blocks"] = grid
            nbytes = dataclasses.replace(p, n=n_used).nbytes(isz)
            row["gbps"] = nbytes / t / 1e9 if t and not math.isnan(t) else math.nan
            row["peers"] = {k: nbytes / v / 1e9 for k, v in device.peers(p, idx, table_host, n_used).items()}
            if counters == "ncu":
                m = ncu_measure(p)
                if m:
                    row.update({f"ncu_{k}": v for k, v in m.items()})
            elif counters == "cupti":
                from simt_pto.host.tools import counter_check
                m = cupti_measure(run)
                if m:
                    row["measured"] = {kind: list(v) for kind, v in m.items()}
                    row["predicted"] = {kind: list(v) for kind, v in counter_check.predicted(rep).items()}
        rows.append(row)
        if (i + 1) % 25 == 0 or i + 1 == len(points):
            log(f"  {i + 1}/{len(points)} points, {time.time() - t0:.0f} s")
    return rows


def point_label(r: dict) -> str:
    kind = "" if r["op"] == "mgather" else f" {r['atomic']}"
    return f"{r['op']} {r['coalesce']}{kind} {r['dtype']} {r['cols']} cols {r['pattern']} {r['tile_kind']}"


def write_counter_comparison(rows, out: Path, device: str | None) -> str:
    """The model beside the GPU's counters (:mod:`simt_pto.host.tools.counter_check`), every measured point:
    ``coalescing_counters.md`` (a summary per kernel family, the pairs ranked differently, the full table) and
    ``coalescing_counters.json``; returns the summary."""
    from simt_pto.host.tools import counter_check as cc
    measured = [r for r in rows if "measured" in r]
    checks = [(point_label(r), cc.compare({k: tuple(v) for k, v in r["predicted"].items()},
                                          {k: tuple(v) for k, v in r["measured"].items()})) for r in measured]
    families: dict = {}
    for r, (_, kinds) in zip(measured, checks):
        fam = families.setdefault(f"{r['op']} {r['coalesce']}" + ("" if r["op"] == "mgather" else f" {r['atomic']}"),
                                  {"points": 0, "agree": 0, "worst": 0.0})
        fam["points"] += 1
        fam["agree"] += all(k.agrees() for k in kinds)
        fam["worst"] = max([fam["worst"]] + [abs(k.error) for k in kinds if k.error is not None])
    ranks = {}
    for kind in cc.KINDS:
        pts = [(label, k.predicted, k.measured) for label, kinds in checks for k in kinds
               if k.kind == kind and k.predicted is not None and k.measured is not None]
        ranks[kind] = cc.rank_disagreements(pts)
    summary = [f"The coalescing model against {device or 'the GPU'}'s counters (CUPTI): sectors per request per "
               f"access kind within {cc.TOLERANCE:.0%} of the model, per kernel family", "",
               "| family | points | all kinds within | worst error |", "|---|---|---|---|"]
    summary += [f"| {name} | {f['points']} | {f['agree']} | {f['worst']:.1%} |" for name, f in families.items()]
    summary += ["", "Pairs of points the model and the GPU order differently: " +
                ("; ".join(f"{kind}: {len(p)}" for kind, p in ranks.items()) or "none")]
    text = "\n".join(summary) + "\n"
    detail = cc.format_checks(checks, device or "the GPU")
    disorder = "".join(f"- {kind}: {a} / {b}\n" for kind, pairs in ranks.items() for a, b in pairs)
    (out / "coalescing_counters.md").write_text(text + "\n" + (disorder and "Ranked differently:\n\n" + disorder + "\n")
                                                + detail)
    (out / "coalescing_counters.json").write_text(json.dumps(
        {"device": device, "tolerance": cc.TOLERANCE,
         "points": [{"point": label, **{k: r[k] for k in ("op", "coalesce", "atomic", "dtype", "cols", "pattern",
                                                          "tile_kind", "kernel", "predicted", "measured")},
                     "agrees": all(k.agrees() for k in kinds)}
                    for r, (label, kinds) in zip(measured, checks)],
         "ranked_differently": {k: [list(p) for p in v] for k, v in ranks.items()}}, indent=1))
    return text


def _fmt(v, spec=".3f"):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def write_table(rows, path: Path, gpu: bool) -> str:
    peer_names = sorted({k for r in rows for k in r["peers"]})
    head = ["op", "coalesce", "atomic", "dtype", "cols", "pattern", "tile", "kLaunchWarps", "pred eff",
            "pred sect/req", "pred eff (as emulated)"]
    if gpu:
        head += ["GB/s", "check"] + [f"{n} GB/s" for n in peer_names]
    if any("ncu_ld_sectors" in r for r in rows):
        head += ["ncu ld sect/req", "ncu st sect/req", "ncu ld eff", "ncu st eff"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["op"], r["coalesce"], r["atomic"], r["dtype"], str(r["cols"]), r["pattern"], r["tile"],
                 str(r["launch_warps"]), _fmt(r["pred_efficiency"]), _fmt(r["pred_sectors_per_request"], ".2f"),
                 _fmt(r["pred_emulated_efficiency"])]
        if gpu:
            cells += [_fmt(r["gbps"], ".1f"), r["check"]] + [_fmt(r["peers"].get(n), ".1f") for n in peer_names]
        if "ncu st eff" in head:
            cells += [_fmt(_ratio(r.get("ncu_ld_sectors"), r.get("ncu_ld_requests")), ".2f"),
                      _fmt(_ratio(r.get("ncu_st_sectors"), r.get("ncu_st_requests")), ".2f"),
                      _fmt(_pct(r.get("ncu_ld_pct"))), _fmt(_pct(r.get("ncu_st_pct")))]
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def _ratio(a, b):
    return a / b if a is not None and b else None


def _pct(v):
    return v / 100 if v is not None else None


def write_csv(rows, path: Path) -> None:
    peer_names = sorted({k for r in rows for k in r["peers"]})
    keys = [k for k in rows[0] if k != "peers"]
    extra = sorted({k for r in rows for k in r if k not in keys and k != "peers"})
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(keys + extra + [f"peer_gbps:{n}" for n in peer_names])
        for r in rows:
            w.writerow([r.get(k, "") for k in keys + extra] + [r["peers"].get(n, "") for n in peer_names])


def write_plots(rows, out: Path, gpu: bool) -> list[Path]:
    """GB/s (analyzer-only: predicted efficiency) vs row width per index pattern, and predicted vs measured."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install 'simt_pto[bench]'): no plots")
        return []
    metric, ylabel = ("gbps", "effective GB/s") if gpu else ("pred_efficiency", "predicted GM efficiency")
    files = []
    for pattern in PATTERNS:
        sel = [r for r in rows if r["pattern"] == pattern and r["tile_kind"] == "default" and r["atomic"] != "last"]
        if not sel:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=not gpu)
        for ax, op in zip(axes, ("mgather", "mscatter")):
            series = sorted({(r["coalesce"], r["atomic"], r["dtype"]) for r in sel if r["op"] == op})
            for k, (co, at, dt) in enumerate(series):  # markers shrink along the list: coinciding lines stay visible
                pts = sorted((r["cols"], r[metric]) for r in sel if (r["op"], r["coalesce"], r["atomic"], r["dtype"])
                             == (op, co, at, dt))
                label = f"{co} {dt}" if op == "mgather" else f"{co} {at} {dt}"
                ax.plot([c for c, _ in pts], [v for _, v in pts], marker="osD^vP*X"[k % 8], markersize=max(3, 10 - k),
                        linestyle="-" if co == "row" else "-.", label=label)
            if gpu:
                peers = sorted({(r["coalesce"], r["atomic"], r["dtype"], n) for r in sel if r["op"] == op
                                for n in r["peers"] if r["dtype"] == "float32"})
                for co, at, dt, name in peers:
                    pts = sorted((r["cols"], r["peers"].get(name, math.nan)) for r in sel
                                 if (r["op"], r["coalesce"], r["atomic"], r["dtype"]) == (op, co, at, dt))
                    ax.plot([c for c, _ in pts], [v for _, v in pts], linestyle="--", marker="x",
                            label=f"{name} ({co} {dt})")
            ax.set_xscale("log", base=2)
            if gpu:
                ax.set_yscale("log")
            ax.set_xlabel("row width (elements)")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{op.upper()}, {pattern.replace('_', ' ')} indices")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / f"coalescing_{'gbps' if gpu else 'predicted'}_{pattern}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path)
    measured = [r for r in rows if r.get("ncu_ld_pct") is not None or r.get("ncu_st_pct") is not None]
    fig, ax = plt.subplots(figsize=(6, 5.5))
    if measured:
        xs = [r["pred_emulated_efficiency"] for r in measured]
        ys = [_pct(r.get("ncu_ld_pct") if r["op"] == "mgather" else r.get("ncu_st_pct")) for r in measured]
        ax.scatter(xs, ys, s=14)
        ax.set_xlabel("predicted efficiency (GM + UB arrays, as emulated on the GPU)")
        ax.set_ylabel("measured efficiency (ncu bytes used per sector)")
        ax.plot([0, 1], [0, 1], color="grey", linewidth=0.8)
        ax.set_title("predicted vs measured efficiency (ncu)")
    elif gpu:  # no ncu: bandwidth relative to the same series' sequential point, against the predicted ratio
        base = {(r["op"], r["coalesce"], r["atomic"], r["dtype"], r["cols"]): r for r in rows
                if r["pattern"] == "sequential" and r["tile_kind"] == "default"}
        xs, ys = [], []
        for r in rows:
            b = base.get((r["op"], r["coalesce"], r["atomic"], r["dtype"], r["cols"]))
            if b and r["tile_kind"] == "default" and b["gbps"] and b["pred_efficiency"] and r["pred_efficiency"]:
                xs.append(r["pred_efficiency"] / b["pred_efficiency"])
                ys.append(r["gbps"] / b["gbps"])
        ax.scatter(xs, ys, s=14)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.plot([1e-3, 1], [1e-3, 1], color="grey", linewidth=0.8)
        ax.set_xlabel("predicted efficiency / sequential's")
        ax.set_ylabel("measured GB/s / sequential's")
        ax.set_title("predicted vs measured (no ncu: bandwidth relative to sequential)")
    else:
        ax.text(0.5, 0.5, "no GPU in this run:\nnothing measured to compare with", ha="center", va="center")
        ax.set_axis_off()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path = out / "coalescing_predicted_vs_measured.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    files.append(path)
    return files


def pivot(rows) -> str:
    """Predicted GM efficiency per series and pattern (columns: row widths), default tiles."""
    widths = sorted({r["cols"] for r in rows})
    keys = sorted({(r["op"], r["coalesce"], r["atomic"], r["dtype"]) for r in rows})
    lines = ["| series | pattern | " + " | ".join(f"{w}" for w in widths) + " |", "|---|---|" + "---|" * len(widths)]
    for key in keys:
        for pattern in PATTERNS:
            vals = {r["cols"]: r["pred_efficiency"] for r in rows
                    if (r["op"], r["coalesce"], r["atomic"], r["dtype"]) == key and r["pattern"] == pattern
                    and r["tile_kind"] == "default"}
            if vals:
                lines.append(f"| {' '.join(key)} | {pattern} | " + " | ".join(_fmt(vals.get(w), ".2f") for w in widths)
                             + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="reduced matrix (under 2 minutes on the GPU)")
    parser.add_argument("--analyze-only", action="store_true", help="the analyzer's predictions only, even on a GPU")
    parser.add_argument("--simulate", action="store_true",
                        help="tiny points through the GPU code path on the CUDA simulator (results checked, no timing)")
    parser.add_argument("--out", type=Path, default=HERE / "out", help="output folder (default bench/out)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per point (default 10, quick 5)")
    parser.add_argument("--no-peers", action="store_true", help="skip torch / cupy peers")
    parser.add_argument("--no-ncu", action="store_true", help="skip Nsight Compute even when ncu is on PATH")
    parser.add_argument("--counters", choices=("auto", "cupti", "ncu", "none"), default="auto",
                        help="where the measured sectors come from on a GPU: CUPTI in this process (the counters "
                             "extra), Nsight Compute, or none (default auto: CUPTI, else ncu when on PATH)")
    parser.add_argument("--sample-lanes", type=int, default=None,
                        help="lanes the analyzer replays per point (default 2**18, quick 2**17)")
    parser.add_argument("--ncu-point", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.simulate:
        os.environ["SIMT_PTO_A5_BACKEND"] = "simulator"
    if args.ncu_point:
        return run_ncu_point(args.ncu_point)
    import simt_pto as pto
    backend = pto.a5_backend()
    gpu = backend == "gpu" and not args.analyze_only and not args.simulate
    if backend != "gpu" and not args.simulate:
        print(f"no CUDA GPU here (the A5 backend is {backend}): running the analyzer-only part, "
              "predicted efficiency without bandwidth")
    elif args.analyze_only:
        print("--analyze-only: predicted efficiency without bandwidth")
    points = matrix(args.quick, args.simulate)
    sample = args.sample_lanes or (1 << 10 if args.simulate else 1 << 17 if args.quick else 1 << 18)
    device = Device(args.repeats or (5 if args.quick else 10), not args.no_peers) if (gpu or args.simulate) else None
    counters = counter_source(args.counters, gpu, args.no_ncu)
    device_name = None
    if gpu:
        import numba.cuda
        device_name = numba.cuda.get_current_device().name
        device_name = device_name.decode() if isinstance(device_name, bytes) else str(device_name)
        print(f"GPU: {device_name}; peers: "
              f"{', '.join(n for n, m in (('torch', device.torch), ('cupy', device.cupy)) if m) or 'none'}; "
              f"measured sectors: {counters or 'none'}")
    print(f"{len(points)} points ({'quick' if args.quick else 'simulate' if args.simulate else 'full'} matrix)")
    t0 = time.time()
    rows = run_points(points, device, sample, counters)
    args.out.mkdir(parents=True, exist_ok=True)
    write_table(rows, args.out / "coalescing.md", gpu)
    write_csv(rows, args.out / "coalescing.csv")
    plots = write_plots(rows, args.out, gpu)
    print()
    print("Predicted GM efficiency (gather: loads, scatter: stores / atomics), default tiles; columns are row widths:")
    print(pivot(rows))
    if any("measured" in r for r in rows):
        print()
        print(write_counter_comparison(rows, args.out, device_name))
    if gpu:
        ok = sum(r["check"] == "ok" for r in rows if r["op"] == "mgather")
        print(f"\ngather results checked bit for bit: {ok} of {sum(r['op'] == 'mgather' for r in rows)} ok")
    if args.simulate:
        bad = [r for r in rows if r["check"] != "ok"]
        print(f"\nsimulated: {len(rows) - len(bad)} of {len(rows)} points ran and checked ok")
    print(f"\nwrote {args.out / 'coalescing.md'}, {args.out / 'coalescing.csv'} and {len(plots)} plot(s) "
          f"in {time.time() - t0:.0f} s")
    return 1 if any(r["check"] == "MISMATCH" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
