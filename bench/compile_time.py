"""A cold compile of A5 kernel specializations with the package's inlining (``simt_pto.kernels.numba_inlining``:
each inlined helper's untyped IR built once per process and its scope copied once per copy of its IR) against
Numba's own (the IR built at each call site, the scope copied once per block), in one run.

    python bench/compile_time.py [--rounds 3] [--gpu]

Each specialization is compiled fresh (a new dispatcher, no disk cache) for the CPU (the ``multicore`` backend's
compile), and with ``--gpu`` to PTX for sm_80 (needs the toolchain extra; no GPU), once per form per round, the two
forms alternating; ours twice: with the helpers' remembered IR dropped first (the first kernel a process compiles)
and with it kept from the compiles before (any later one). Before timing anything it checks that the forms give the
same code (x86 opcodes for the CPU, the PTX's opcodes for the GPU). Prints the median seconds of each form per
specialization and the ratios (Numba's own / ours: above 1.0x, ours is faster).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

CALLS = (
    ("mgather", "row", dict(dtype="float32")),
    ("mgather", "elem", dict(dtype="float16", oob="clamp")),
    ("mscatter", "row", dict(atomic="max", dtype="int32")),
    ("mscatter", "elem", dict(atomic="add", dtype="float32")),
    ("mscatter", "elem", dict(atomic="add", dtype="float16")),
    ("mscatter", "row", dict(atomic="add", dtype="bfloat16")),
)
"""Tile-op calls whose kernel is timed: plain, Max, float32 and 16-bit float Adds (the deepest inlining)."""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gpu", action="store_true", help="also compile to PTX (the toolchain extra; no GPU needed)")
    args = parser.parse_args(argv)
    if args.gpu:
        os.environ.setdefault("SIMT_PTO_A5_BACKEND", "gpu")
        os.environ.pop("NUMBA_ENABLE_CUDASIM", None)

    import numba

    from simt_pto.host.tools import kernel_report
    from simt_pto.kernels import numba_inlining
    from simt_pto.kernels.a5 import simt

    @contextlib.contextmanager
    def ours_first():  # as a process's first compile: no helper's IR remembered
        numba_inlining._UNTYPED.clear()
        with numba_inlining.inlining_without_repeats():
            yield

    forms = {"ours": ours_first, "ours, kept": numba_inlining.inlining_without_repeats,
             "numba's": contextlib.nullcontext}

    def cpu(spec, signature):
        dispatcher = numba.njit(signature, nogil=True)(simt.bound_source(spec.kernel, spec.policy, "cpu"))
        return kernel_report.opcodes(next(iter(dispatcher.inspect_asm().values())), "#")

    def gpu(spec, signature):
        from numba import cuda
        ptx = cuda.compile_ptx(simt.bound_source(spec.kernel, spec.policy, "cuda"), signature, cc=(8, 0))[0]
        return kernel_report.opcodes(ptx, "//")

    compilers = [("cpu", cpu)] + ([("gpu", gpu)] if args.gpu else [])
    cases = []
    for op, coalesce, kw in CALLS:
        spec = kernel_report.launch_of(kernel_report.build_plan(op, coalesce, **kw))
        label = f"{op} {coalesce} {kw.get('atomic', '')} {kw['dtype']}".replace("  ", " ")
        cases.append((label, spec, kernel_report.signature(spec)))
    cpu(*cases[0][1:])  # Numba's own first-compile costs (its typing tables), outside the timing

    for family, compile_one in compilers:
        for label, spec, signature in cases:  # same code first
            made = {}
            for name, form in forms.items():
                with form():
                    made[name] = compile_one(spec, signature)
            if not made["ours"] == made["ours, kept"] == made["numba's"]:
                print(f"{family} {label}: the two forms compiled different code", file=sys.stderr)
                return 1
    print(f"cold compiles, {args.rounds} rounds, forms alternating; Python {sys.version.split()[0]}, Numba "
          f"{numba.__version__}; the same code from both forms (checked first)")
    print(f"{'family':<6} {'kernel of':<34} {'numba s':>8} {'ours s':>8} {'ratio':>7} {'kept s':>8} {'ratio':>7}")
    totals = {name: 0.0 for name in forms}
    for family, compile_one in compilers:
        for label, spec, signature in cases:
            times: dict[str, list[float]] = {name: [] for name in forms}
            for r in range(args.rounds):
                order = list(forms.items()) if r % 2 == 0 else list(reversed(forms.items()))
                for name, form in order:
                    start = time.perf_counter()
                    with form():
                        compile_one(spec, signature)
                    times[name].append(time.perf_counter() - start)
            medians = {name: statistics.median(ts) for name, ts in times.items()}
            for name, median in medians.items():
                totals[name] += median
            print(_row(family, label, medians))
    print(_row("all", "", totals))
    return 0


def _row(family: str, label: str, seconds: dict[str, float]) -> str:
    theirs, ours, kept = seconds["numba's"], seconds["ours"], seconds["ours, kept"]
    return (f"{family:<6} {label:<34} {theirs:>8.2f} {ours:>8.2f} {theirs / ours:>6.2f}x {kept:>8.2f} "
            f"{theirs / kept:>6.2f}x")


if __name__ == "__main__":
    sys.exit(main())
