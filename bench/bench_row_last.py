"""Row Conflict::Last on the ``multicore`` backend: its three forms side by side, and numpy in the same run.

For ``n`` source elements (``n / --cols`` rows of ``--cols`` elements) into a table of ``rows / --writers`` rows
(uniform random row indices, the default policies), each form is planned once and run through its kept launches
(``host/kept_launch.KeptLaunch``, what a repeated ``pto.scatter`` runs):

* ``serial``: the serial loop, ``simt_mscatter_row_kernel`` on the calling thread, every source row copied in order
  (what the dispatch takes up to ``HostTuning.serial_row_last_max_bytes`` of source rows, or into a table of at least
  ``serial_row_last_sparse_rows`` times the source's rows);
* ``owner``: the owner path (reset, claim each table row for its last source row, write each table row once);
* ``slot``: the slot-centric ``simt_mscatter_row_last_kernel``, one launch per tile (each table row scans every
  index of the tile), timed only while table rows x source rows is at most 2**22 (a call of several tiles keeps no
  launch: the public call is timed, as a user's repeated call runs);
* ``chosen``: what ``pto.scatter`` itself plans for the shape.

Every form's result is checked bitwise against the serial loop (``simt_pto.reference.last_writer_scatter``) before
the timing; numpy's peer is ``table[idx] = src`` with int64 indices. Then ``--rounds`` rounds
(``side_by_side.timed_rounds``: the forms' order reversed every other round; medians, numpy's over the form's).

Run: ``python bench/bench_row_last.py [--sizes 16K,64K,256K,1M,4M] [--cols 64] [--writers 16] [--dtypes float32]
[--rounds 21] [--json]``
"""
from __future__ import annotations

import numpy as np

import side_by_side
import simt_pto as pto
from simt_pto.host import tuning
from simt_pto.plan import CallCache

SLOT_MAX_WORK = 1 << 22
"""The largest table rows x source rows the slot-centric form is timed at (past it, seconds a call)."""

NO_SERIAL = dict(serial_row_last_max_bytes=0, serial_row_last_sparse_rows=1 << 62)
FORCED = {
    "serial": dict(serial_row_last_max_bytes=1 << 62),
    "owner": NO_SERIAL,
    "slot": NO_SERIAL,
    "chosen": {},
}
"""The thresholds (``simt_pto.host.tuning.HostTuning``) each form is planned under."""
LAST_PATH = {"serial": "auto", "owner": "owner", "slot": "slot", "chosen": "auto"}
"""The ``last_path=`` each form is called with."""


def _runner(form, table, src, idx):
    """``(kept launches, the form in words)`` of ``form`` for this call's signature: one full-path call keeps the
    launches (``host/kept_launch``; the signature cache was emptied first, so it holds this runner alone)."""
    CallCache.clear_all()
    options = dict(coalesce="row", conflict="last", target="a5", last_path=LAST_PATH[form])
    with tuning.tuned(**FORCED[form]):  # (which empties the call caches as it starts and ends)
        launches = pto.scatter_plan(table, src, idx, **options).launches
        pto.scatter(table.copy(), src, idx, **options)
        runner = side_by_side.kept_scatter()
    kernels = {launch.kernel for launch in launches}
    words = ("serial" if kernels == {"simt_mscatter_row_kernel"} else "slot" if "simt_mscatter_row_last_kernel" in kernels
             else "owner")
    if runner is None and LAST_PATH[form] == "slot":  # (a launch per tile is not kept: the public call, as users make it)
        return (lambda table, src, idx: pto.scatter(table, src, idx, **options)), "slot (full path)"
    if runner is None:
        raise SystemExit(f"{form}: the call kept no single runner (is the multicore backend in use?)")
    return runner, words


def measure(n: int, cols: int, writers: float, dtype: np.dtype, rounds: int, rng) -> dict:
    rows = max(1, n // cols)
    slots = max(1, int(rows / writers))
    table = np.zeros((slots, cols), dtype)
    idx = rng.integers(0, slots, rows, dtype=np.int32)
    src = rng.standard_normal((rows, cols), dtype=np.float32).astype(dtype)
    forms = tuple(f for f in ("serial", "owner", "slot", "chosen") if f != "slot" or slots * rows <= SLOT_MAX_WORK)
    runs, planned = side_by_side.checked_last_runs(forms, _runner, table, src, idx, f"n={n}, cols={cols}, {dtype}")
    timed = side_by_side.timed_rounds(runs, forms, rounds)
    for missing in {"serial", "owner", "slot", "chosen"} - set(forms):
        timed["ms"][missing], timed["vs_numpy"][missing], planned[missing] = float("nan"), float("nan"), "-"
    return {"n": n, "rows": rows, "slots": slots, "dtype": np.dtype(dtype).name, "planned": planned, **timed}


def main() -> None:
    ap = side_by_side.parser(__doc__, "16K,64K,256K,1M,4M")
    ap.add_argument("--cols", type=int, default=64, help="elements per row")
    ap.add_argument("--writers", type=float, default=16,
                    help="source rows per table row on average (the table holds rows / this; below 1: a sparse table)")
    args = ap.parse_args()
    side_by_side.require_multicore()
    rng = np.random.default_rng(0)
    rows = [measure(side_by_side.size(s), args.cols, args.writers, np.dtype(d), args.rounds, rng)
            for d in args.dtypes.split(",") for s in args.sizes.split(",")]
    side_by_side.report(rows, args.json, f"n elements in rows of {args.cols} into rows/{args.writers:g} table rows",
                        args.rounds, shown=("serial", "owner", "slot"), keys=("dtype", "n", "rows", "slots"))


if __name__ == "__main__":
    main()
