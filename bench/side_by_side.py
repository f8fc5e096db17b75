"""What the benchmarks that run several forms of one call side by side share (``bench_add_forms.py``,
``bench_last_owners.py``, ``bench_row_last.py``): their command line, the kept launch a form's first call leaves,
the Conflict::Last forms' checked runs, the timed rounds, and the run's header.

Each round calls every form once, then numpy once; the forms' order is reversed every other round (on the
development machine a fixed order alone moved two identical runners apart by up to 1.3x). Each figure is the median
over the rounds, and each ratio numpy's median over the form's.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable

import numpy as np

import simt_pto as pto
from simt_pto import reference
from simt_pto.kernels.a5.simt import multicore_workers


def size(text: str) -> int:
    """``"256K"`` -> 262144, ``"1M"`` -> 1048576, ``"1000"`` -> 1000."""
    scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1].upper(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def parser(doc: str, sizes: str) -> argparse.ArgumentParser:
    """The options every such benchmark takes: ``--sizes`` (default ``sizes``), ``--dtypes``, ``--rounds``,
    ``--json``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--sizes", default=sizes)
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--json", action="store_true")
    return ap


def require_multicore() -> None:
    if pto.a5_backend() != "multicore":
        raise SystemExit(f"this benchmark times the multicore backend; the A5 backend is {pto.a5_backend()!r}")


def kept_scatter() -> Callable | None:
    """``run(table, src, idx)`` of the one whole-array scatter the signature cache keeps a launch for (the caller
    emptied the cache and ran one call): the kept launches on these C-contiguous numpy arrays, returning the table,
    or None where the launch sends the call to the full path. None when no single one is kept."""
    from simt_pto.host.kept_launch import Entry
    from simt_pto.plan import SIGNATURES
    kept = [e.kept for e in SIGNATURES._entries.values() if isinstance(e, Entry) and e.kept is not None]
    if len(kept) != 1:
        return None

    def run(table, src, idx):
        arrays = {"table": table.reshape(-1), "src": src.reshape(-1), "idx": idx.reshape(-1)}
        return table if kept[0].run(arrays) else None
    return run


def checked_last_runs(forms: tuple[str, ...], runner_of: Callable, table, src, idx, what: str) -> tuple[dict, dict]:
    """``(runs, planned)`` of a Conflict::Last benchmark: ``runs[form]`` runs ``form``'s kept launch
    (``runner_of(form, table, src, idx) -> (runner, planned words)``) on the call's arrays, once its result has been
    checked bitwise against the serial loop (``reference.last_writer_scatter``; ``what`` names the point in the
    error), and ``runs["numpy"]`` is numpy's ``table[idx] = src`` with int64 indices."""
    peer_idx = idx.astype(np.int64)
    want = reference.last_writer_scatter(table, peer_idx, src).view(np.uint8)
    runs, planned = {}, {}
    for form in forms:
        runner, planned[form] = runner_of(form, table, src, idx)
        got = table.copy()
        if runner(got, src, idx) is None or not np.array_equal(got.view(np.uint8), want):
            raise SystemExit(f"{form}: wrong result at {what}")
        runs[form] = (lambda r: lambda: r(table, src, idx))(runner)
    runs["numpy"] = lambda: table.__setitem__(peer_idx, src)
    return runs, planned


def timed_rounds(runs: dict[str, Callable[[], object]], forms: tuple[str, ...], rounds: int) -> dict:
    """``{"ms": median ms per run, "vs_numpy": numpy's median / the form's}`` over ``rounds`` rounds of every form
    in ``forms`` (their order alternating) and ``runs["numpy"]``, after three warm-up rounds."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(3):
        for run in runs.values():
            run()
    for k in range(rounds):
        order = forms if k % 2 else forms[::-1]
        for name in (*order, "numpy"):
            t = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - t)
    med = {name: float(np.median(v)) for name, v in times.items()}
    return {"ms": {name: m * 1e3 for name, m in med.items()},
            "vs_numpy": {form: med["numpy"] / med[form] for form in forms}}


def report(rows: list[dict], as_json: bool, shape: str, rounds: int, shown: tuple[str, ...],
           keys: tuple[str, ...] = ("dtype", "n")) -> None:
    """Print ``rows`` as JSON, or as a table: a header line saying what ``n`` means (``shape``), then per row its
    ``keys``, each form of ``shown`` (ratio and median), the form the dispatch chose, and numpy's median."""
    if as_json:
        print(json.dumps({"machine": platform.machine(), "workers": multicore_workers(), "rows": rows}, indent=1))
        return
    print(f"A5 multicore, {multicore_workers()} workers, {platform.machine()}; {shape}; medians of {rounds} rounds, the "
          f"forms' order alternating; numpy time / form time (above 1: faster)")
    print()
    head = [*keys, *shown, "chosen (as planned)", "numpy ms"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        cells = [str(r[key]) for key in keys] + [f"{r['vs_numpy'][f]:.2f}x ({r['ms'][f]:.3f} ms)" for f in shown]
        cells += [f"{r['vs_numpy']['chosen']:.2f}x ({r['planned']['chosen']})", f"{r['ms']['numpy']:.3f}"]
        print("| " + " | ".join(cells) + " |")


__all__ = ["checked_last_runs", "parser", "report", "require_multicore", "size", "timed_rounds"]
