"""What one whole-array call walks through in simt_pto's own code: files entered, call events, and how many times
each policy argument is normalised (``from_any`` and ``flag_from_any``).

    python bench/call_trace.py [--target a5|a2a3] [--torch]

Traced with ``sys.setprofile`` over the package's files (``simt_pto/``, ``host/``, ``kernels/``, however they are
installed), Numba excluded, in a warm process: every call below ran once on another shape first, so the kernels
are compiled and the modules loaded. Six calls are traced:

* the first ``pto.gather(table, idx, coalesce="row", oob="clamp")`` of a new shape, its second call, and its fourth;
* the first ``pto.scatter(..., coalesce="elem", atomic="add")`` of a new shape, its second call, and its fourth.

The second call of a shape runs its kept launch through Numba's dispatcher; the third looks up the kernel's compiled
entry (``simt_pto.kernels.a5.simt.compiled_entry``), which later calls take: the profiler does not see a call of it
as a call into the kernel's file.

``--torch`` passes PyTorch CPU tensors instead of numpy arrays. Issue #38's targets: a first call enters at most 12
files with at most 150 call events and normalises each policy argument at most once; a repeated call enters at
most 5 files. The figures depend on the code and the Python version, not on the machine: on Python 3.11 Numba's
dispatcher reports each call of a kernel to the profiler as a call of the kernel's Python function (none of which
runs), which adds the kernel's file to a first call's list; 3.12 does not, and its list comprehensions make no
frames.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

import numpy as np

import simt_pto as pto

NORMALISERS = ("from_any", "flag_from_any")
"""The functions that turn a policy argument into its enum (or bool): counted per call."""


def _package_roots() -> tuple[str, ...]:
    """The folders the package's modules are read from (an editable install maps three)."""
    import simt_pto.host
    import simt_pto.kernels
    return tuple(os.path.dirname(m.__file__) + os.sep for m in (pto, simt_pto.host, simt_pto.kernels))


def trace(call) -> dict:
    """``call()`` under ``sys.setprofile``: the package files it entered, its call events in them, and the calls of
    each normaliser."""
    roots = _package_roots()
    files: set[str] = set()
    events = 0
    normalised: collections.Counter = collections.Counter()

    def profile(frame, event, arg):
        nonlocal events
        if event != "call":
            return
        path = frame.f_code.co_filename
        if not path.startswith(roots):
            return
        files.add(path)
        events += 1
        if frame.f_code.co_name in NORMALISERS:
            normalised[frame.f_locals.get("what") or frame.f_locals.get("name") or "?"] += 1

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return {"files": len(files), "events": events, "normalised": dict(normalised),
            "file_names": sorted(os.path.relpath(f, os.path.dirname(roots[0].rstrip(os.sep))) for f in files)}


def _operands(rows: int, cols: int, n: int, as_torch: bool):
    rng = np.random.default_rng(rows * 1000 + n)
    table = rng.standard_normal((rows, cols)).astype(np.float32)
    idx = rng.integers(0, rows, n).astype(np.int32)
    src_rows = rng.standard_normal((n, cols)).astype(np.float32)
    flat_idx = rng.integers(0, rows * cols, n).astype(np.int32)
    src_elems = rng.standard_normal(n).astype(np.float32)
    arrays = [table, idx, src_rows, flat_idx, src_elems]
    if as_torch:
        import torch
        arrays = [torch.from_numpy(a) for a in arrays]
    return arrays


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="a5", choices=("a5", "a2a3"))
    parser.add_argument("--torch", action="store_true", help="PyTorch CPU tensors instead of numpy arrays")
    parser.add_argument("--files", action="store_true", help="list the files each call entered")
    args = parser.parse_args(argv)

    def calls(table, idx, _src_rows, flat_idx, src_elems):
        gather = lambda: pto.gather(table, idx, coalesce="row", oob="clamp", target=args.target)  # noqa: E731
        scatter = lambda: pto.scatter(table.reshape(-1), src_elems, flat_idx, coalesce="elem",  # noqa: E731
                                      atomic="add", target=args.target)
        return gather, scatter

    warm_gather, warm_scatter = calls(*_operands(64, 64, 8, args.torch))
    warm_gather(), warm_scatter()  # compiled and loaded: what follows is a warm process's first call of a shape
    gather, scatter = calls(*_operands(96, 64, 12, args.torch))
    kind = "torch" if args.torch else "numpy"
    print(f"simt_pto call trace: target {args.target}, {kind} operands, python {sys.version.split()[0]}")
    print(f"{'call':<34} {'files':>5} {'events':>7}  normalised")
    for name, call, untraced in (("first gather (row, clamp)", gather, 0), ("repeated gather", gather, 0),
                                 ("repeated, steady (4th call)", gather, 1),
                                 ("first scatter (elem, add)", scatter, 0), ("repeated scatter", scatter, 0),
                                 ("repeated, steady (4th call)", scatter, 1)):
        for _ in range(untraced):
            call()
        got = trace(call)
        counts = ", ".join(f"{k} x{v}" for k, v in sorted(got["normalised"].items())) or "-"
        print(f"{name:<34} {got['files']:>5} {got['events']:>7}  {counts}")
        if args.files:
            print("    " + "\n    ".join(got["file_names"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
