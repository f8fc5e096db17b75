"""The worst of several runs of ``bench/bench_peers.py``: each cell's lowest ratio over the runs (the figure README's
CPU table states), with the range beside it.

    python bench/worst_of_runs.py bench/out/run1/peers.json bench/out/run2/peers.json bench/out/run3/peers.json

Each run's ``peers.json`` holds one ratio per op, dtype, size and peer (peer time / our time: above 1, we are faster)
and its per-call overhead rows (our time / numpy's: below the target is met). Prints one markdown table per kind of
figure, the cells as ``worst (lowest-highest)``; a cell missing from some run is marked with the runs it has. Runs of
different Row widths (``--row-cols``) or timing methods (``--method``) are refused: they measure different things.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict

from bench_peers import size_label  # (bench_peers only sets OMP_WAIT_POLICY on import, for PyTorch)


def worst_cells(runs: list[dict]) -> dict:
    """``(op, dtype, size, peer) -> [ratio per run]`` over the runs' results."""
    cells: dict = defaultdict(list)
    for run in runs:
        for row in run["results"]:
            cells[(row["op"], row["dtype"], row["size"], row["peer"])].append(row["ratio"])
    return cells


def markdown(runs: list[dict]) -> str:
    cells = worst_cells(runs)
    sizes = sorted({key[2] for key in cells})
    lines = [f"Worst of {len(runs)} runs (lowest-highest), peer time / our time:", "",
             "| op | peer | dtype | " + " | ".join(size_label(n) for n in sizes) + " |",
             "|---|---|---|" + "---|" * len(sizes)]
    for op, peer, dtype in sorted({(k[0], k[3], k[1]) for k in cells}):
        row = []
        for n in sizes:
            got = cells.get((op, dtype, n, peer), [])
            if not got:
                row.append("")
                continue
            note = "" if len(got) == len(runs) else f", {len(got)} of {len(runs)} runs"
            row.append(f"{min(got):.2f}x ({min(got):.2f}-{max(got):.2f}{note})")
        lines.append(f"| {op} | {peer} | {dtype} | " + " | ".join(row) + " |")
    overhead: dict = defaultdict(list)
    for run in runs:
        for row in run.get("overhead", []):
            overhead[row["case"]].append((row["times_numpy"], row["us_per_call"], row["numpy_us_per_call"]))
    if overhead:
        lines += ["", f"Per call, our time / numpy's, worst of {len(runs)} runs (lowest-highest); µs per call:", "",
                  "| call | ours / numpy | ours µs | numpy µs |", "|---|---|---|---|"]
        for case, got in overhead.items():
            ratios, ours, numpy_us = zip(*got)
            lines.append(f"| {case} | {max(ratios):.1f}x ({min(ratios):.1f}-{max(ratios):.1f}) | "
                         f"{min(ours):.1f}-{max(ours):.1f} | {min(numpy_us):.2f}-{max(numpy_us):.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="peers.json of each run")
    args = ap.parse_args(argv)
    runs = []
    for path in args.runs:
        with open(path) as f:
            runs.append(json.load(f))
    widths = {run.get("environment", {}).get("row_cols", 64) for run in runs}  # (runs before --row-cols: 64)
    if len(widths) > 1:
        print(f"worst_of_runs: the runs' Row gathers have rows of different widths ({', '.join(map(str, sorted(widths)))} "
              "columns: bench_peers.py --row-cols); compare runs of one width", file=sys.stderr)
        return 2
    methods = {run.get("environment", {}).get("method", "pairs") for run in runs}  # (runs before --method: pairs)
    if len(methods) > 1:
        print(f"worst_of_runs: the runs were timed by different methods ({', '.join(sorted(methods))}: "
              "bench_peers.py --method); compare runs of one method", file=sys.stderr)
        return 2
    print(markdown(runs), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
