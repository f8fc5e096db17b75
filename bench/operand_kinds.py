"""The per-call time of a repeated small whole-array call with PyTorch / JAX operands, beside the same call with
numpy operands (issue #38's target: at most 1.5x).

    python bench/operand_kinds.py [--calls 300] [--target a5|a2a3]

The call: 8 rows of a 64 x 64 float32 table, int32 row indices (``pto.gather``), and the in-place Row scatter of 8
rows into it (``pto.scatter``, Conflict::Last, ``a5`` only: the sequential targets' scatters run tile by tile).
Each kind's call runs ``--calls`` times in rounds that alternate the kinds (numpy, torch, JAX, numpy, ...), after
warm-up calls that keep its launch; each figure is the median of its per-call times, and each ratio the median of
the per-round ratios against numpy's call in the same round. Every result is checked against numpy first. A JAX
scatter returns a new JAX array by design (a copy), so only the JAX gather is measured; its result is a new JAX
array too. Its making is timed alone beside it: by ``jnp.asarray`` (JAX's public floor on this machine) and by
``simt_pto.host.arrays.jax_result`` (what the gather uses: jaxlib's constructor, without a copy).

Without PyTorch or JAX the benchmark says so and leaves that column out.

``--jax-results`` times instead a repeated JAX Row gather of 1K to 64K rows of 64 float32 (256 KB to 16 MB results)
from a 64K-row table, with the result made at JAX's 64-byte boundary (JAX takes its memory as it is) against the
result made wherever numpy puts it (JAX copies it): the threshold
``simt_pto.host.tuning.HostTuning.jax_zero_copy_result_bytes`` set to its default and to never, alternating in rounds
of 30 calls; medians per form and the per-round ratios.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

import simt_pto as pto


def _per_call(fn, calls: int) -> float:
    """Seconds per call of ``fn``, over ``calls`` back-to-back calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def measure(calls: int, target: str) -> list[tuple[str, float, float | None]]:
    """``(case, median µs per call, median ratio to numpy's same call)`` per operand kind and op."""
    rng = np.random.default_rng(0)
    table = rng.standard_normal((64, 64), dtype=np.float32)
    rows = np.array([3, 17, 42, 0, 63, 8, 25, 50], dtype=np.int32)
    src = rng.standard_normal((8, 64), dtype=np.float32)
    written = table.copy()
    want_gather = table[rows]
    want_scatter = table.copy()
    want_scatter[rows] = src
    gathers = {"numpy": lambda: pto.gather(table, rows, target=target)}
    scatters = {"numpy": lambda: pto.scatter(written, src, rows, target=target)}
    extras = {}
    try:
        import torch
    except ImportError as error:
        print(f"PyTorch is not installed ({error}): its column is left out")
    else:
        t_table, t_rows, t_src = torch.from_numpy(table), torch.from_numpy(rows), torch.from_numpy(src)
        t_written = torch.from_numpy(written)
        gathers["torch"] = lambda: pto.gather(t_table, t_rows, target=target)
        scatters["torch"] = lambda: pto.scatter(t_written, t_src, t_rows, target=target)
    try:
        import jax.numpy as jnp
    except ImportError as error:
        print(f"JAX is not installed ({error}): its column is left out")
    else:
        j_table, j_rows = jnp.asarray(table), jnp.asarray(rows)
        gathers["jax"] = lambda: pto.gather(j_table, j_rows, target=target)
        from simt_pto.host.arrays import jax_result
        extras["jax: jnp.asarray of the 8 x 64 result alone"] = lambda: jnp.asarray(want_gather)
        extras["jax: jax_result of a new 8 x 64 result alone"] = lambda: jax_result(want_gather.copy())
    for kind, fn in gathers.items():
        for _ in range(3):  # the first call keeps the launch; the next ones take it
            got = np.asarray(fn())
        if got.tobytes() != want_gather.tobytes():
            sys.exit(f"{kind} gather: wrong result")
    if target != "a5":
        scatters = {}
    for kind, fn in scatters.items():
        written[...] = table
        for _ in range(3):
            fn()
        if written.tobytes() != want_scatter.tobytes():
            sys.exit(f"{kind} scatter: wrong result")
    rounds = max(1, calls // 10)
    out = []
    for op, fns in (("gather", gathers), ("scatter", scatters)):
        times: dict[str, list[float]] = {kind: [] for kind in fns}
        for _ in range(rounds):
            for kind, fn in fns.items():
                times[kind].append(_per_call(fn, 10))
        for kind, ts in times.items():
            ratio = None if kind == "numpy" else statistics.median(t / n for t, n in zip(ts, times["numpy"]))
            out.append((f"{op}, {kind} operands", statistics.median(ts) * 1e6, ratio))
    for name, fn in extras.items():
        out.append((name, statistics.median(_per_call(fn, 10) for _ in range(rounds)) * 1e6, None))
    return out


def jax_results(rounds: int = 7) -> None:
    """The ``--jax-results`` comparison (module docstring)."""
    import jax.numpy as jnp

    from simt_pto.host import tuning
    rng = np.random.default_rng(0)
    table = rng.standard_normal((65536, 64)).astype(np.float32)
    j_table = jnp.asarray(table)
    forms = (("made anywhere (copied)", 1 << 62), ("made at the boundary", tuning.HostTuning().jax_zero_copy_result_bytes))
    print(f"repeated JAX Row gathers from a 64K x 64 float32 table, {rounds} rounds of 30 calls per form, target a5 "
          f"({pto.a5_backend()})")
    for rows in (1024, 4096, 16384, 65536):
        idx = rng.integers(0, len(table), rows).astype(np.int32)
        j_idx = jnp.asarray(idx)
        medians: dict[str, list[float]] = {name: [] for name, _ in forms}
        for _ in range(rounds):
            for name, threshold in forms:
                with tuning.tuned(jax_zero_copy_result_bytes=threshold):
                    for _ in range(3):  # the first call keeps the launch
                        got = pto.gather(j_table, j_idx)
                    if not np.array_equal(np.asarray(got), table[idx]):
                        sys.exit(f"{rows} rows, {name}: wrong result")
                    times = []
                    for _ in range(30):
                        start = time.perf_counter()
                        pto.gather(j_table, j_idx)
                        times.append(time.perf_counter() - start)
                medians[name].append(statistics.median(times))
        (copied, c_times), (aligned, a_times) = medians.items()
        ratios = " ".join(f"{c / a:.2f}" for c, a in zip(c_times, a_times))
        print(f"{rows:>6} rows ({rows * 256 // 1024:>5} KB): {copied} {statistics.median(c_times) * 1e6:8.0f} µs, "
              f"{aligned} {statistics.median(a_times) * 1e6:8.0f} µs; copied / boundary per round: {ratios}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=300, help="calls per kind (default 300)")
    ap.add_argument("--target", default="a5", choices=("a5", "a2a3"))
    ap.add_argument("--jax-results", action="store_true",
                    help="time large repeated JAX gathers, result made at JAX's boundary or not (needs JAX)")
    args = ap.parse_args(argv)
    if args.jax_results:
        jax_results()
        return 0
    print(f"repeated 8-row calls on a 64 x 64 float32 table, target {args.target} "
          f"({pto.a5_backend() if args.target == 'a5' else 'sequential'}), median of {args.calls} calls")
    print(f"{'case':<52} {'µs/call':>8}  vs numpy")
    for case, us, ratio in measure(args.calls, args.target):
        print(f"{case:<52} {us:>8.1f}  {'' if ratio is None else f'{ratio:.2f}x'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
