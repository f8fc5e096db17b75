"""``simt-pto validate-last``: prove Conflict::Last scatters deterministic at scale.

Runs one heavy-collision scatter workload K times with ``conflict=LAST`` on A5, compares every run
bitwise with the sequential golden (the ``a2a3`` target: tiles issued in order on one core) and with
each other, then runs ``conflict=DEFAULT`` the same way to show how much the racing stores vary.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from simt_pto import dtypes
from simt_pto.backend import a5_backend
from simt_pto.enums import ScatterOOB, from_any
from simt_pto.errors import ConstraintError, OutOfBoundsError
from simt_pto.host.arrays import checked_indices
from simt_pto.host.in_memory import scatter
from simt_pto.plan import check_indices
from simt_pto.policy import index_rule

from .arguments import int_range, load_npy, memory_problem, non_negative_int, positive_int

SIM_LIMITS = dict(rows=512, cols=16, n=16384)
"""Workload size on the CUDA simulator (runs every thread as a Python thread): under a minute."""
SYNTHETIC_SLOTS = 2 ** 31
"""Most slots the synthetic workload indexes: its indices are int32 (Row: table rows; Elem: rows x cols)."""
TABLES_KEPT = 5
"""Tables of the workload's size alive at once: the workload's, the golden, run 0 of each policy, the current run."""


@dataclass
class Workload:
    coalesce: str
    table: np.ndarray
    src: np.ndarray
    idx: np.ndarray
    oob: str = "undefined"
    dtype: str | None = None
    """The element dtype's name where the arrays carry raw bits (``hifloat8`` over uint8), else None."""

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
    """The A5 backend in words, for reports: ``multicore (... 2 worker threads)``, ``simulator``, ``gpu``."""
    if backend == "multicore":
        from simt_pto.kernels.a5.simt import multicore_workers
        return f"multicore (the A5 kernels compiled for the CPU, {multicore_workers()} worker threads)"
    if backend == "simulator":
        return "simulator (Numba's CUDA simulator)"
    return "gpu"


def _run(w: Workload, target, conflict, last_path="auto"):
    table = w.table.copy()
    start = time.perf_counter()
    scatter(table, w.src, w.idx, coalesce=w.coalesce, conflict=conflict, oob=w.oob, target=target,
            last_path=last_path, dtype=w.dtype)
    return table, time.perf_counter() - start


def _serial_last(w: Workload):
    """``for i in range(N): table[remap(idx[i])] = src[i]`` in Python: the sequential order Conflict::Last
    promises, for dtypes the A2/A3 loops do not take (float8, hifloat8)."""
    table = w.table.copy()
    flat = table.reshape(table.shape[0], -1) if w.coalesce == "row" else table.reshape(-1)
    src = w.src.reshape(len(w.idx), -1) if w.coalesce == "row" else w.src.reshape(-1)
    capacity = flat.shape[0]
    start = time.perf_counter()
    for i, index in enumerate(w.idx.reshape(-1).tolist()):
        u = index & 0xFFFFFFFF
        slot = min(u, capacity - 1) if w.oob == "clamp" else u % capacity if w.oob == "wrap" else u
        if slot < capacity:  # Skip drops the out-of-range ones (Undefined was checked to be in range)
            flat[slot] = src[i]
    return table, time.perf_counter() - start


def _golden(w: Workload):
    """(table, seconds, what): the A2/A3 loops, or the Python loop where they do not take the dtype."""
    name = w.dtype or w.table.dtype.name
    if any(d.name == name for d in dtypes.ELEMENT_DTYPES["a2a3"]):
        table, t = _run(w, "a2a3", "last")
        return table, t, "a2a3 sequential"
    table, t = _serial_last(w)
    return table, t, "a serial Python loop (A2/A3 does not take this dtype)"


def _mismatches(a, b) -> int:
    bits = np.dtype(f"u{a.dtype.itemsize}")
    return int(np.count_nonzero(a.view(bits) != b.view(bits)))


def validate_last(coalesce="row", rows=65536, cols=64, n=16_000_000, repeat=5, seed=0, last_path="auto",
                  out=print, workload: Workload | None = None) -> int:
    """Run a Conflict::Last scatter ``repeat`` times on A5 against the sequential golden (the synthetic
    heavy-collision workload, or ``workload``: the user's arrays), then Conflict::Default; 0 when every Last run
    is bitwise the golden and each other."""
    backend = a5_backend()
    out(f"A5 backend: {backend_description(backend)}")
    if workload is not None:
        return _validate(workload, repeat, last_path, out)
    if backend == "simulator":
        scaled = {k: min(v, SIM_LIMITS[k]) for k, v in dict(rows=rows, cols=cols, n=n).items()}
        if scaled != dict(rows=rows, cols=cols, n=n):
            out(f"CUDA simulator (no GPU): scaled down from rows={rows} cols={cols} n={n} to "
                f"rows={scaled['rows']} cols={scaled['cols']} n={scaled['n']} so it finishes in under a minute")
            rows, cols, n = scaled["rows"], scaled["cols"], scaled["n"]
    return _validate(make_workload(coalesce, rows, cols, n, seed), repeat, last_path, out)


def _validate(w: Workload, repeat, last_path, out) -> int:
    elements = w.src.size
    what = "rows" if w.coalesce == "row" else "elements"
    out(f"workload: {w.coalesce} scatter, table {w.table.shape} {w.dtype or w.table.dtype}, {w.sources} source "
        f"{what} ({elements} elements), {w.collisions} colliding writes, oob={w.oob}, last_path={last_path}")
    golden, t_golden, how = _golden(w)
    out(f"golden: {how}, {t_golden:.3f} s")
    failures = 0
    last_runs = []
    for k in tqdm(range(repeat), desc="LAST on a5", unit="run", disable=None):  # None: only onto a terminal
        table, t = _run(w, "a5", "last", last_path)
        vs_golden = _mismatches(table, golden)
        vs_first = _mismatches(table, last_runs[0][0]) if last_runs else 0
        last_runs.append((None if last_runs else table, t, vs_golden, vs_first))  # keep run 0's table only
        failures += vs_golden > 0 or vs_first > 0
    default_runs = []
    for k in tqdm(range(repeat), desc="DEFAULT on a5", unit="run", disable=None):
        table, t = _run(w, "a5", "default")
        default_runs.append((None if default_runs else table, t, _mismatches(table, golden),
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


def _load(parser, flag, path):
    """The array of a ``.npy`` file (:func:`~simt_pto.host.tools.arguments.load_npy`: a regular file whose header
    fits its size, C-contiguous, native byte order); anything else ends in ``parser.error`` naming the file."""
    try:
        return load_npy(path)
    except ValueError as exc:
        parser.error(f"argument {flag}: {path}: {exc}")


def _table_shape(text):
    try:
        rows, cols = (int(p) for p in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ROWSxCOLS, got {text!r}") from None
    if rows < 1 or cols < 1:
        raise argparse.ArgumentTypeError(f"expected positive ROWSxCOLS, got {text!r}")
    return rows, cols


def workload_from_files(parser, a) -> Workload:
    """The user's workload from ``--idx`` / ``--src`` and ``--table-file`` or ``--table-shape``; a bad file ends
    in ``parser.error`` naming the file and the problem."""
    if a.table_file is None and a.table_shape is None:
        parser.error("argument --idx: give the table too: --table-file TABLE.npy or --table-shape RxC --dtype D")
    if a.table_file is not None and a.table_shape is not None:
        parser.error("argument --table-shape: not allowed with argument --table-file")
    idx, src = _load(parser, "--idx", a.idx), _load(parser, "--src", a.src)
    try:  # int64 (numpy's default) and any integer dtype whose values fit the uint32 cast: a checked int32 copy
        idx = checked_indices(idx, "MSCATTER", "a5")
    except ConstraintError as e:
        parser.error(f"argument --idx: {a.idx}: {e.detail} (rule: {e.rule})")
    if a.table_file is not None:
        table = _load(parser, "--table-file", a.table_file)
    else:
        try:
            d = dtypes.resolve(a.dtype or "float32")
        except (TypeError, ValueError) as exc:
            parser.error(f"argument --dtype: {exc}")
        problem = memory_problem(TABLES_KEPT * a.table_shape[0] * a.table_shape[1] * d.itemsize)
        if problem:
            parser.error(f"argument --table-shape: a {a.table_shape[0]}x{a.table_shape[1]} {d.name} table kept "
                         f"{TABLES_KEPT} times {problem}")
        table = np.empty(a.table_shape, d.numpy)
        table.view(d.bits)[...] = int("A5" * d.itemsize, 16)  # a sentinel: an untouched slot shows
    # N-D indices as the whole-array ops take them: one source row (Row) or element (Elem) per index, in C order
    if a.coalesce == "row":
        if table.ndim != 2:
            parser.error(f"argument --table-file: {a.table_file}: a Row table is 2-D, got shape {table.shape}")
        if src.shape != idx.shape + (table.shape[1],):
            parser.error(f"argument --src: {a.src}: a Row source is idx's shape plus the table's columns, "
                         f"{idx.shape + (table.shape[1],)}, got {src.shape}")
        capacity = table.shape[0]
        src = src.reshape(idx.size, table.shape[1])
    else:
        if src.shape != idx.shape:
            parser.error(f"argument --src: {a.src}: an Elem source has idx's shape, {idx.shape}, got {src.shape}")
        capacity = table.size
        src = src.reshape(-1)
    idx_shape, idx = idx.shape, idx.reshape(-1)
    if a.dtype and src.dtype != table.dtype and src.dtype.kind in "ui" and src.dtype.itemsize == table.dtype.itemsize:
        src = src.view(table.dtype)  # raw bits of the --dtype element (float8 over uint8)
    if src.dtype != table.dtype:
        parser.error(f"argument --src: {a.src}: dtype {src.dtype} differs from the table's {table.dtype}")
    dtype = a.dtype if a.dtype and np.dtype(dtypes.resolve(a.dtype).numpy) != table.dtype else None
    try:  # the whole-array call's own refusal, before anything runs, named after the file and the flag
        check_indices("MSCATTER", "a5", capacity, index_rule(from_any(ScatterOOB, a.oob, "oob")),
                     idx.reshape(idx_shape).view(np.uint32))  # an N-D file's positions are N-D
    except OutOfBoundsError as e:
        parser.error(f"argument --idx: {a.idx}: {e.count} index(es) out of range [0, {capacity}) under --oob "
                     f"undefined (first: position {e.positions[0]}, uint32 index {e.values[0]}); pick --oob skip, "
                     "clamp or wrap")
    return Workload(a.coalesce, table, src, idx, oob=a.oob, dtype=dtype)


def check_synthetic_size(parser, coalesce, rows, cols, n) -> None:
    """``parser.error`` unless the synthetic workload can be built: at most :data:`SYNTHETIC_SLOTS` slots for its
    int32 indices, and its arrays within this machine's memory (on the CUDA simulator, at the sizes it scales
    down to)."""
    if coalesce == "elem" and rows * cols > SYNTHETIC_SLOTS:
        parser.error(f"argument --cols: an Elem table of --rows x --cols slots takes int32 indices: at most "
                     f"{SYNTHETIC_SLOTS} slots, got {rows} x {cols} = {rows * cols}")
    if a5_backend() == "simulator":
        rows, cols, n = (min(v, SIM_LIMITS[k]) for k, v in dict(rows=rows, cols=cols, n=n).items())
    table_bytes = TABLES_KEPT * rows * cols * 4  # float32
    sources = max(1, n // cols) * cols if coalesce == "row" else n
    source_bytes = sources * 4 + (sources // cols if coalesce == "row" else sources) * 4  # float32 values, int32 idx
    problem = memory_problem(table_bytes + source_bytes)
    if problem:
        flag = "--n" if source_bytes >= table_bytes else "--rows"
        parser.error(f"argument {flag}: this workload ({rows}x{cols} float32 tables kept {TABLES_KEPT} times, {sources} "
                     f"source elements and their indices) {problem}; pick smaller --rows, --cols or --n")


DESCRIPTION = """Run one scatter workload with many colliding indices several times on the A5 target with
conflict=last, and compare every run bit for bit with the sequential result (the a2a3 target: tiles issued in order
on one core) and with each other; then run conflict=default the same way to show how much racing stores vary. The
workload is synthetic (--rows, --cols, --n, --seed) or read from your .npy files (--idx with --src, and --table-file
or --table-shape)."""
"""``simt-pto validate-last --help`` (argparse refills the lines)."""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "validate-last", help="check Conflict::Last scatters bitwise against the sequential golden, K times, at scale",
        description=DESCRIPTION, epilog="Exit status: 0 when every Last run matched, 1 when one did not, 2 for a bad argument.")
    p.add_argument("--coalesce", choices=("row", "elem"), default="row",
                   help="row: scatter whole rows; elem: scatter single elements (default row)")
    p.add_argument("--rows", type=int_range(1, SYNTHETIC_SLOTS),
                   help="table rows of the synthetic workload (default 65536)")
    p.add_argument("--cols", type=positive_int, help="table columns of the synthetic workload (default 64)")
    p.add_argument("--n", type=positive_int, help="source elements of the synthetic workload (default 16000000; "
                                                  "Row: at least --cols)")
    p.add_argument("--repeat", type=positive_int, default=5, help="runs of each conflict policy (default 5)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of the synthetic workload (default 0)")
    p.add_argument("--last-path", choices=("auto", "slot", "owner"), default="auto",
                   help="how Conflict::Last runs: slot (the slot-centric kernels), owner (claim each slot for its "
                        "last writer, then write it) or auto (owner once the slot-centric kernels would cost more; "
                        "the default)")
    p.add_argument("--idx", metavar="IDX.npy", help="your indices (any integer dtype with values in [-2**31, 2**32), "
                                                    "any shape, taken in C order): with --src, instead of the "
                                                    "synthetic workload")
    p.add_argument("--src", metavar="SRC.npy", help="your source: Row idx's shape plus (C,); Elem idx's shape")
    p.add_argument("--table-file", metavar="TABLE.npy", help="the table to scatter into (Row 2-D)")
    p.add_argument("--table-shape", type=_table_shape, metavar="RxC", help="or a table of this shape, filled with "
                                                                           "a sentinel (with --dtype)")
    p.add_argument("--dtype", help="element dtype of --table-shape (default float32), or a reinterpretation of "
                                   "the files' bits (hifloat8 over uint8)")
    p.add_argument("--oob", choices=("undefined", "skip", "clamp", "wrap"), default="undefined",
                   help="ScatterOOB of your workload")

    def run(a):
        if a.idx is not None or a.src is not None:
            if a.idx is None or a.src is None:
                p.error("argument --idx: --idx and --src go together")
            for flag in ("rows", "cols", "n"):
                if getattr(a, flag) is not None:
                    p.error(f"argument --{flag}: not allowed with argument --idx (your workload has its own shape)")
            workload = workload_from_files(p, a)
            return validate_last(a.coalesce, repeat=a.repeat, last_path=a.last_path, workload=workload)
        for flag in ("table_file", "table_shape", "dtype"):
            if getattr(a, flag) is not None:
                p.error(f"argument --{flag.replace('_', '-')}: only with --idx / --src")
        rows, cols, n = a.rows or 65536, a.cols or 64, a.n or 16_000_000
        if a.coalesce == "row" and n < cols:
            p.error(f"argument --n: a Row workload moves whole rows of --cols {cols} elements; got --n {n}")
        check_synthetic_size(p, a.coalesce, rows, cols, n)
        return validate_last(a.coalesce, rows, cols, n, a.repeat, a.seed, a.last_path)
    p.set_defaults(func=run)
