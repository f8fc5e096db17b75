"""The per-call time of whole-array calls whose shape changes from call to call (a batch of a different length each
time), beside the same call repeated on one shape.

    python bench/new_shapes.py [--shapes 400] [--target a5|a2a3]

A call of a shape seen before runs its kept launch; the first call of a new shape is planned (validated, its tiles
cut, its launches built and kept). A workload whose batch length varies pays that planning on every call. The
calls: a Row gather of ``n`` rows of a 4096 x 64 float32 table (``pto.gather(table, idx, coalesce="row",
oob="clamp")``) and an Elem Add scatter of ``n`` values into the same table seen flat (``pto.scatter(..., coalesce=
"elem", atomic="add")``), for ``n`` = 8, 9, 10, ... (``--shapes`` lengths, each new to the process), each followed by
the same call again (its shape now known). Figures: the median per-call time of each, after the first 50 lengths
(warm caches), and numpy's ``table[idx]`` on the same indices as a yardstick. Every gather is checked against numpy.
The figures depend on the machine; compare them within one run.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

import simt_pto as pto

WARM = 50
"""Lengths whose times are left out: the first calls load and compile."""


def measure(shapes: int, target: str) -> dict[str, float]:
    """Median µs per call: ``"gather, new shape"``, ``"gather, repeated"``, the scatter's two, and numpy's gather."""
    rng = np.random.default_rng(0)
    table = rng.standard_normal((4096, 64), dtype=np.float32)
    flat = table.reshape(-1).copy()
    times: dict[str, list[float]] = {k: [] for k in ("gather, new shape", "gather, repeated", "scatter, new shape",
                                                     "scatter, repeated", "numpy table[idx]")}
    for at, n in enumerate(range(8, 8 + shapes)):
        idx = rng.integers(0, table.shape[0], n).astype(np.int32)
        flat_idx = rng.integers(0, flat.size, n).astype(np.int32)
        src = rng.standard_normal(n, dtype=np.float32)
        steps = (("gather, new shape", lambda: pto.gather(table, idx, coalesce="row", oob="clamp", target=target)),
                 ("gather, repeated", lambda: pto.gather(table, idx, coalesce="row", oob="clamp", target=target)),
                 ("scatter, new shape", lambda: pto.scatter(flat, src, flat_idx, coalesce="elem", atomic="add",
                                                            target=target)),
                 ("scatter, repeated", lambda: pto.scatter(flat, src, flat_idx, coalesce="elem", atomic="add",
                                                           target=target)),
                 ("numpy table[idx]", lambda: table[idx]))
        for name, call in steps:
            start = time.perf_counter()
            got = call()
            elapsed = time.perf_counter() - start
            if name.startswith("gather") and not np.array_equal(got, table[idx]):
                sys.exit(f"{name} of {n} rows: wrong result")
            if at >= WARM:
                times[name].append(elapsed)
    return {name: statistics.median(ts) * 1e6 for name, ts in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", type=int, default=400, help=f"batch lengths, each a new shape (default 400, > {WARM})")
    ap.add_argument("--target", default="a5", choices=("a5", "a2a3"))
    args = ap.parse_args(argv)
    if args.shapes <= WARM:
        ap.error(f"--shapes must be more than {WARM}")
    print(f"whole-array calls of {args.shapes} batch lengths (8, 9, ...), target {args.target}, median µs per call "
          f"after the first {WARM}")
    for name, us in measure(args.shapes, args.target).items():
        print(f"{name:<22} {us:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
