"""Elem scatter Add on the ``multicore`` backend: its two forms side by side, and numpy in the same run.

For ``n`` updates into ``4 n`` table elements (uniform random indices, the default policies, as in
``bench_peers.py``), each form is planned once and run through its kept launch (``host/fast_path.A5Scatter``, what a
repeated ``pto.scatter`` runs):

* ``alone``: the plain-store kernel on the calling thread (``simt_mscatter_elem_alone_kernel``: no locked
  instruction), what the dispatch runs up to ``host/a5.CPU_ALONE_MAX_UPDATES`` updates while nothing else writes the
  table;
* ``atomic``: the atomic kernel on every worker (one thread up to ``host/large_a5.CPU_ONE_THREAD_UPDATES``);
* ``chosen``: what ``pto.scatter`` itself plans for the shape.

The forms are forced through ``CPU_ALONE_MAX_UPDATES`` while each is planned. Every result is checked against the
exact sum within the reference's bound (``simt_pto.reference.UNIT_ROUNDOFF``: ``(k + 1) * eps * (|t0| + sum |c|)``
plus the smallest subnormal at a slot of ``k`` adds) before the timing; numpy's peer is ``np.add.at`` with int64
indices. Then ``--rounds`` rounds, each calling every form once and numpy once, the forms' order reversed every
other round; each figure is the median over the rounds, and each ratio is numpy's median over the form's. The table
accumulates over the rounds (as in ``bench_peers.py``; the values are standard normal, so it stays finite).

Run: ``python bench/bench_add_forms.py [--sizes 64K,256K,512K,1M,2M] [--dtypes float32,float16] [--rounds 21]
[--json]``
"""
from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

import simt_pto as pto
from simt_pto import reference
from simt_pto.host import a5, fast_path
from simt_pto.kernels.a5.simt import cpu_workers
from simt_pto.plan import CallCache

FORMS = ("alone", "atomic", "chosen")
FORCED = {"alone": 1 << 62, "atomic": -1, "chosen": None}
"""``host/a5.CPU_ALONE_MAX_UPDATES`` while each form is planned (None: as it is)."""


def _runner(form, table, src, idx):
    """The kept launch of ``form`` for this call's signature and the kernel it plans for the multicore backend: one
    full-path call keeps it (``host/fast_path``; its cache was emptied first, so it holds this runner alone)."""
    CallCache.clear_all()
    before = a5.CPU_ALONE_MAX_UPDATES
    if FORCED[form] is not None:
        a5.CPU_ALONE_MAX_UPDATES = FORCED[form]
    try:
        (launch,) = pto.scatter_plan(table, src, idx, coalesce="elem", atomic="add", target="a5").launches
        pto.scatter(table.copy(), src, idx, coalesce="elem", atomic="add", target="a5")
    finally:
        a5.CPU_ALONE_MAX_UPDATES = before
    runners = [r for r in fast_path._RUNNERS._entries.values() if isinstance(r, fast_path.A5Scatter)]
    if len(runners) != 1:
        raise SystemExit(f"{form}: the call kept no single runner (is the multicore backend in use?)")
    return runners[0], "alone" if launch.cpu_alone_kernel else "atomic"


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
    times = {name: [] for name in runs}
    for _ in range(3):
        for run in runs.values():
            run()
    for k in range(rounds):
        order = FORMS if k % 2 else FORMS[::-1]
        for name in (*order, "numpy"):
            t = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - t)
    med = {name: float(np.median(v)) for name, v in times.items()}
    return {"n": n, "dtype": np.dtype(dtype).name, "planned": planned, "ms": {name: m * 1e3 for name, m in med.items()},
            "vs_numpy": {form: med["numpy"] / med[form] for form in FORMS}}


def _size(text: str) -> int:
    scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1].upper(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64K,256K,512K,1M,2M")
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if pto.a5_backend() != "multicore":
        raise SystemExit(f"this benchmark times the multicore backend; the A5 backend is {pto.a5_backend()!r}")
    rng = np.random.default_rng(0)
    rows = [measure(_size(s), np.dtype(d), args.rounds, rng) for d in args.dtypes.split(",") for s in args.sizes.split(",")]
    if args.json:
        print(json.dumps({"machine": platform.machine(), "workers": cpu_workers(), "rows": rows}, indent=1))
        return
    print(f"A5 multicore, {cpu_workers()} workers, {platform.machine()}; n updates into 4n elements; medians of "
          f"{args.rounds} rounds, the forms' order alternating; numpy time / form time (above 1: faster)")
    print()
    print("| dtype | n | alone | atomic | chosen (as planned) | numpy ms |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        cells = " | ".join(f"{r['vs_numpy'][f]:.2f}x ({r['ms'][f]:.3f} ms)" for f in FORMS[:2])
        print(f"| {r['dtype']} | {r['n']} | {cells} | {r['vs_numpy']['chosen']:.2f}x ({r['planned']['chosen']}) | "
              f"{r['ms']['numpy']:.3f} |")


if __name__ == "__main__":
    main()
