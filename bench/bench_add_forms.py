"""Elem scatter Add on the ``multicore`` backend: its two forms side by side, and numpy in the same run.

For ``n`` updates into ``4 n`` table elements (uniform random indices, the default policies, as in
``bench_peers.py``), each form is planned once and run through its kept launch (``host/kept_launch.KeptLaunch``, what a
repeated ``pto.scatter`` runs):

* ``alone``: the plain-store kernel on the calling thread (``simt_mscatter_elem_serial_kernel``: no locked
  instruction), what the dispatch runs up to ``HostTuning.plain_add_max_updates`` updates while nothing else writes the
  table;
* ``atomic``: the atomic kernel on every worker (one thread up to ``HostTuning.atomic_scatter_one_thread_updates``);
* ``chosen``: what ``pto.scatter`` itself plans for the shape.

The forms are forced through the public thresholds table (``simt_pto.host.tuning.tuned``) while each is planned.
Every result is checked against the exact sum within the reference's bound
(``simt_pto.reference.UNIT_ROUNDOFF``: ``(k + 1) * eps * (|t0| + sum |c|)``
plus the smallest subnormal at a slot of ``k`` adds) before the timing; numpy's peer is ``np.add.at`` with int64
indices. Then ``--rounds`` rounds (``side_by_side.timed_rounds``: each form once and numpy once, the forms' order
reversed every other round; medians, numpy's over the form's). The table
accumulates over the rounds (as in ``bench_peers.py``; the values are standard normal, so it stays finite).

Run: ``python bench/bench_add_forms.py [--sizes 64K,256K,512K,1M,2M] [--dtypes float32,float16] [--rounds 21]
[--json]``
"""
from __future__ import annotations

import numpy as np

import side_by_side
import simt_pto as pto
from simt_pto import reference
from simt_pto.host import tuning
from simt_pto.plan import CallCache

FORMS = ("alone", "atomic", "chosen")
FORCED = {"alone": {"plain_add_max_updates": 1 << 62, "plain_rmw_max_updates": 1 << 62},
          "atomic": {"plain_add_max_updates": 0, "plain_rmw_max_updates": 0}, "chosen": {}}
"""The thresholds (``simt_pto.host.tuning.HostTuning``) each form is planned under."""


def _runner(form, table, src, idx):
    """The kept launch of ``form`` for this call's signature and the kernel it plans for the multicore backend: one
    full-path call keeps it (``host/kept_launch``; the signature cache was emptied first, so it holds this runner alone)."""
    CallCache.clear_all()
    with tuning.tuned(**FORCED[form]):  # (which empties the call caches as it starts and ends)
        (launch,) = pto.scatter_plan(table, src, idx, coalesce="elem", atomic="add", target="a5").launches
        pto.scatter(table.copy(), src, idx, coalesce="elem", atomic="add", target="a5")
        runner = side_by_side.kept_scatter()
    if runner is None:
        raise SystemExit(f"{form}: the call kept no single runner (is the multicore backend in use?)")
    return runner, "alone" if launch.multicore_plain_kernel else "atomic"


def check_sum(what: str, got, initial, idx, src) -> None:
    """``got`` against the exact float64 sum, within the reference's bound; bitwise where a slot has one add."""
    name = initial.dtype.name
    eps, tiny = reference.UNIT_ROUNDOFF[name], reference.SMALLEST_SUBNORMAL[name]
    start, add = initial.astype(np.float64), src.astype(np.float64)
    count = np.bincount(idx, minlength=initial.size)
    exact = start + np.bincount(idx, weights=add, minlength=initial.size)
    bound = (count + 1) * eps * (np.abs(start) + np.bincount(idx, weights=np.abs(add), minlength=initial.size)) + tiny
    with np.errstate(invalid="ignore"):
        off = np.where(count > 1, ~(np.abs(got.astype(np.float64) - exact) <= bound),
                       got != exact.astype(initial.dtype))
    if off.any():
        slot = int(np.flatnonzero(off)[0])
        raise SystemExit(f"{what}: slot {slot} holds {got[slot]!r}, exact sum {exact[slot]!r} +- {bound[slot]:.3g}")


def measure(n: int, dtype: np.dtype, rounds: int, rng) -> dict:
    table = np.zeros(4 * n, dtype)
    idx = rng.integers(0, table.size, n, dtype=np.int32)
    src = rng.standard_normal(n, dtype=np.float32).astype(dtype)
    peer_idx = idx.astype(np.int64)
    runs, planned = {}, {}
    for form in FORMS:
        runner, planned[form] = _runner(form, table, src, idx)
        got = table.copy()
        if runner(got, src, idx) is None:
            raise SystemExit(f"{form}: the kept launch refused the call")
        check_sum(f"{form} at n={n}, {dtype}", got, table, idx, src)
        runs[form] = (lambda r: lambda: r(table, src, idx))(runner)
    runs["numpy"] = lambda: np.add.at(table, peer_idx, src)
    return {"n": n, "dtype": np.dtype(dtype).name, "planned": planned, **side_by_side.timed_rounds(runs, FORMS, rounds)}


def main() -> None:
    args = side_by_side.parser(__doc__, "64K,256K,512K,1M,2M").parse_args()
    side_by_side.require_multicore()
    rng = np.random.default_rng(0)
    rows = [measure(side_by_side.size(s), np.dtype(d), args.rounds, rng)
            for d in args.dtypes.split(",") for s in args.sizes.split(",")]
    side_by_side.report(rows, args.json, "n updates into 4n elements", args.rounds, shown=("alone", "atomic"))


if __name__ == "__main__":
    main()
