"""``simt-pto validate-last``: prove Conflict::Last scatters deterministic at scale.

Runs one heavy-collision scatter workload K times with ``conflict=LAST`` on A5, compares every run
bitwise with the sequential golden (the ``a2a3`` target: tiles issued in order on one core) and with
each other, then runs ``conflict=DEFAULT`` the same way to show how much the racing stores vary.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from simt_pto.backend import a5_backend

from .large import scatter

SIM_LIMITS = dict(rows=512, cols=16, n=16384)
"""Workload size on the CUDA simulator (runs every thread as a Python thread): under a minute."""


@dataclass
class Workload:
    coalesce: str
    table: np.ndarray
    src: np.ndarray
    idx: np.ndarray

    @property
    def sources(self) -> int:
        return self.idx.size

    @property
    def collisions(self) -> int:
        """Writes that land on a slot another write also hits."""
        return int(self.idx.size - np.unique(self.idx).size)


def make_workload(coalesce, rows, cols, n, seed=0) -> Workload:
    rng = np.random.default_rng(seed)
    if coalesce == "row":
        n_rows = max(1, n // cols)
        idx = rng.integers(0, rows, n_rows, dtype=np.int32)
        # distinct values everywhere (exact in float32 up to 2**24), so a wrong winner always shows
        src = (np.arange(n_rows * cols, dtype=np.int64) % (1 << 24)).astype(np.float32).reshape(n_rows, cols)
        table = np.full((rows, cols), -1.0, np.float32)
    else:
        idx = rng.integers(0, rows * cols, n, dtype=np.int32)
        src = (np.arange(n, dtype=np.int64) % (1 << 24)).astype(np.float32)
        table = np.full(rows * cols, -1.0, np.float32)
    return Workload(coalesce, table, src, idx)


def backend_description(backend: str) -> str:
    """The A5 backend in words, for reports: ``cpu (2 worker threads)``, ``simulator``, ``gpu``."""
    if backend == "cpu":
        from simt_pto.kernels.a5.simt import cpu_workers
        return f"cpu (the A5 kernels compiled for the CPU, {cpu_workers()} worker threads)"
    if backend == "simulator":
        return "simulator (Numba's CUDA simulator)"
    return "gpu"


def _run(w: Workload, target, conflict, last_path="auto"):
    table = w.table.copy()
    start = time.perf_counter()
    scatter(table, w.src, w.idx, coalesce=w.coalesce, conflict=conflict, target=target, last_path=last_path)
    return table, time.perf_counter() - start


def _mismatches(a, b) -> int:
    return int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))


def validate_last(coalesce="row", rows=65536, cols=64, n=16_000_000, repeat=5, seed=0, last_path="auto",
                  out=print) -> int:
    backend = a5_backend()
    out(f"A5 backend: {backend_description(backend)}")
    if backend == "simulator":
        scaled = {k: min(v, SIM_LIMITS[k]) for k, v in dict(rows=rows, cols=cols, n=n).items()}
        if scaled != dict(rows=rows, cols=cols, n=n):
            out(f"CUDA simulator (no GPU): scaled down from rows={rows} cols={cols} n={n} to "
                f"rows={scaled['rows']} cols={scaled['cols']} n={scaled['n']} so it finishes in under a minute")
            rows, cols, n = scaled["rows"], scaled["cols"], scaled["n"]
    w = make_workload(coalesce, rows, cols, n, seed)
    elements = w.src.size
    out(f"workload: {coalesce} scatter, table {w.table.shape}, {w.sources} source {'rows' if coalesce == 'row' else 'elements'} "
        f"({elements} elements), {w.collisions} colliding writes, last_path={last_path}")
    golden, t_golden = _run(w, "a2a3", "last")
    out(f"golden: a2a3 sequential, {t_golden:.3f} s")
    failures = 0
    last_runs = []
    for k in tqdm(range(repeat), desc="LAST on a5", unit="run"):
        table, t = _run(w, "a5", "last", last_path)
        vs_golden = _mismatches(table, golden)
        vs_first = _mismatches(table, last_runs[0][0]) if last_runs else 0
        last_runs.append((table, t, vs_golden, vs_first))
        failures += vs_golden > 0 or vs_first > 0
    default_runs = []
    for k in tqdm(range(repeat), desc="DEFAULT on a5", unit="run"):
        table, t = _run(w, "a5", "default")
        default_runs.append((table, t, _mismatches(table, golden),
                             _mismatches(table, default_runs[0][0]) if default_runs else 0))
    out(f"{'run':>4} {'conflict':>8} {'time s':>9} {'elem/s':>12} {'!= golden':>10} {'!= run 0':>9}")
    for name, runs in (("LAST", last_runs), ("DEFAULT", default_runs)):
        for k, (_, t, vs_golden, vs_first) in enumerate(runs):
            out(f"{k:>4} {name:>8} {t:>9.4f} {elements / t:>12.3e} {vs_golden:>10} {vs_first:>9}")
    out(f"LAST: {len(last_runs)} runs, {sum(r[2] for r in last_runs)} mismatches against the golden, "
        f"{sum(r[3] for r in last_runs)} between runs: {'DETERMINISTIC' if not failures else 'NOT DETERMINISTIC'}")
    out(f"DEFAULT: slots differing from the golden per run: {[r[2] for r in default_runs]} "
        "(racing stores: any colliding writer may survive)")
    return 1 if failures else 0


def register(subparsers) -> None:
    p = subparsers.add_parser("validate-last", help="check Conflict::Last scatters bitwise against the sequential "
                                                    "golden, K times, at scale")
    from .cli import positive_int
    p.add_argument("--coalesce", choices=("row", "elem"), default="row")
    p.add_argument("--rows", type=positive_int, default=65536, help="table rows")
    p.add_argument("--cols", type=positive_int, default=64, help="table columns")
    p.add_argument("--n", type=positive_int, default=16_000_000, help="source elements (Row: at least --cols)")
    p.add_argument("--repeat", type=positive_int, default=5, help="runs of each conflict policy")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--last-path", choices=("auto", "slot", "owner"), default="auto")

    def run(a):
        if a.coalesce == "row" and a.n < a.cols:
            p.error(f"argument --n: a Row workload moves whole rows of --cols {a.cols} elements; got --n {a.n}")
        return validate_last(a.coalesce, a.rows, a.cols, a.n, a.repeat, a.seed, a.last_path)
    p.set_defaults(func=run)
