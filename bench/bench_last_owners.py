"""Conflict::Last on the ``multicore`` backend: the owner forms side by side, and numpy in the same run.

For ``n`` updates into ``n / --writers`` slots (Elem, float32 / float16, uniform random indices, the default
policies), each form is planned once and run through its kept launches (``host/kept_launch.KeptLaunch``, what a
repeated ``pto.scatter`` runs):

* ``alone``: one shared owner array, the claim on the calling thread (``owner_claim_one_worker_updates``);
* ``shared``: one shared owner array claimed with atomics by every worker;
* ``private``: a copy of the owners per worker, claimed with plain stores, the claim being the range check
  (``host/a5_planner._claim_copies``; what the dispatch takes from ``owner_copy_min_updates`` updates on);
* ``serial``: no owners, the serial loop itself on the calling thread (``simt_mscatter_elem_serial_kernel``;
  what the dispatch takes up to ``serial_last_max_updates`` updates, or into a table of up to
  ``serial_last_max_table_bytes``);
* ``chosen``: what ``pto.scatter`` itself plans for the shape.

The forms are forced through the public thresholds table (``simt_pto.host.tuning.tuned``) while each is planned. Every form's result is
checked bitwise against the serial loop (``simt_pto.reference.last_writer_scatter``) before the timing; numpy's
peer is ``table[idx] = src`` with int64 indices, as in ``bench_peers.py``. Then ``--rounds`` rounds, each
calling every form once and numpy once, the forms' order reversed every other round (on this kind of machine a fixed
order alone moved two identical runners apart by up to 1.3x); each figure is the median over the rounds, and each
ratio is numpy's median over the form's.

Run: ``python bench/bench_last_owners.py [--sizes 256K,1M,4M] [--writers 16] [--dtypes float32,float16]
[--rounds 21] [--json]``
"""
from __future__ import annotations


import numpy as np

import side_by_side
import simt_pto as pto
from simt_pto.host import tuning
from simt_pto.plan import CallCache

FORMS = ("alone", "shared", "private", "serial", "chosen")


OWNERS = dict(serial_last_max_updates=0, serial_last_max_table_bytes=0)  # no serial loop: the owner path
FORCED = {
    "alone": dict(OWNERS, owner_claim_one_worker_updates=1 << 62, owner_copy_max_bytes=0),
    "shared": dict(OWNERS, owner_claim_one_worker_updates=0, owner_copy_max_bytes=0),
    "private": dict(OWNERS, owner_copy_min_updates=0, owner_copy_max_bytes=1 << 62, owner_copy_updates_per_slot=0),
    "serial": dict(serial_last_max_updates=1 << 62),
    "chosen": {},
}
"""The thresholds (``simt_pto.host.tuning.HostTuning``) each form is planned under."""


def _runner(form, table, src, idx):
    """``(kept launches, the form in words)`` of ``form`` for this call's signature: one full-path call keeps the
    launches (``host/kept_launch``; the signature cache was emptied first, so it holds this runner alone)."""
    CallCache.clear_all()
    with tuning.tuned(**FORCED[form]):  # (which empties the call caches as it starts and ends)
        launches = pto.scatter_plan(table, src, idx, coalesce="elem", conflict="last", target="a5").launches
        pto.scatter(table.copy(), src, idx, coalesce="elem", conflict="last", target="a5")
        runner = side_by_side.kept_scatter()
    if runner is None:
        raise SystemExit(f"{form}: the call kept no single runner (is the multicore backend in use?)")
    if len(launches) == 1:
        return runner, "serial"
    claim = launches[1]
    if "private" in claim.kernel:
        words = f"private x{claim.grid}"
    else:
        words = "alone" if claim.grid == 1 else "shared"
    return runner, words


def measure(n: int, writers: int, dtype: np.dtype, rounds: int, rng) -> dict:
    slots = max(1, n // writers)
    table = np.zeros(slots, dtype)
    idx = rng.integers(0, slots, n, dtype=np.int32)
    src = rng.standard_normal(n, dtype=np.float32).astype(dtype)
    runs, planned = side_by_side.checked_last_runs(FORMS, _runner, table, src, idx, f"n={n}, {dtype}")
    return {"n": n, "slots": slots, "dtype": np.dtype(dtype).name, "planned": planned,
            **side_by_side.timed_rounds(runs, FORMS, rounds)}


def main() -> None:
    ap = side_by_side.parser(__doc__, "256K,1M,4M")
    ap.add_argument("--writers", type=int, default=16, help="updates per slot on average (the table holds n / this)")
    args = ap.parse_args()
    side_by_side.require_multicore()
    rng = np.random.default_rng(0)
    rows = [measure(side_by_side.size(s), args.writers, np.dtype(d), args.rounds, rng)
            for d in args.dtypes.split(",") for s in args.sizes.split(",")]
    side_by_side.report(rows, args.json, f"n updates into n/{args.writers} slots", args.rounds,
                        shown=("alone", "shared", "private", "serial"), keys=("dtype", "n", "slots"))


if __name__ == "__main__":
    main()
