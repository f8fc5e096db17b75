"""A scatter with an atomic op on the ``multicore`` backend in its two forms, against numpy and PyTorch, in one run.

    python bench/bench_scatter_atomics.py [--coalesce row|elem] [--atomic add|max|min] [--sizes 256K,1M,4M,16M]
                                          [--dtypes float32,int32] [--cols 64] [--repeat 7]

For ``n`` elements: Row, ``n / C`` random rows of ``C`` columns combined into a table of ``4n / C`` rows
(``table[idx[r], :] op= src[r, :]``; Add is the embedding-gradient update); Elem, ``n`` random updates into a table of
``4n`` elements. Ours, ``pto.scatter(table, src, idx, coalesce=..., atomic=op)``:

* ``plain``: the form a call takes (``simt_mscatter_row_serial_kernel`` / ``simt_mscatter_elem_serial_kernel``:
  plain read-modify-writes on the calling thread, in source order, while nothing else writes the table; forced here
  at every size through the HostTuning field that bounds it, :data:`LIMIT`);
* ``atomic``: the atomic kernel on every worker thread (that threshold set to 0).

Peers on the same data (as many threads as our pool, ``OMP_WAIT_POLICY=PASSIVE``): numpy's ``np.add.at`` /
``np.maximum.at`` / ``np.minimum.at``, and PyTorch's ``index_add_`` / ``index_reduce_(..., "amax" | "amin",
include_self=True)``. Each result is checked first: the plain form bitwise against numpy's (both in source order; a
Max / Min is exact in any order, so every Max / Min result is checked bitwise), an Add's atomic form and PyTorch's
within the bound of ``bench_peers.check_add`` (a float sum in any order; bitwise for integers). Then the four are
timed in rounds that alternate them, each figure the median of ``--repeat`` rounds; the ratios are peer time / ours
in the plain form (above 1: ours is faster). An Add is timed on the table its earlier calls left; a Max / Min on a
fresh copy of the table each time (copied untimed), since a repeated Max leaves nothing to change.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # (before PyTorch starts its OpenMP threads)

import numpy as np  # noqa: E402

import simt_pto as pto  # noqa: E402
from bench_peers import check_add, load_torch, parse_size, size_label  # noqa: E402
from simt_pto.host import tuning  # noqa: E402

TABLE_FACTOR = 4


def as_tensor(torch, array: np.ndarray):
    """A PyTorch tensor on ``array``'s memory (a bfloat16 one through its bits: ``torch.from_numpy`` takes no
    ml_dtypes array)."""
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


NUMPY_AT = {"add": np.add.at, "max": np.maximum.at, "min": np.minimum.at}
LIMIT = {("row", "add"): "plain_row_add_max_updates", ("row", "max"): "plain_row_rmw_max_updates",
         ("row", "min"): "plain_row_rmw_max_updates", ("elem", "max"): "plain_rmw_max_updates",
         ("elem", "min"): "plain_rmw_max_updates"}
"""The HostTuning field that bounds each (coalesce, op)'s plain form (an Elem Add: ``plain_add_max_updates`` and
``plain_half_add_max_updates``, by dtype)."""


def _limit_field(coalesce: str, atomic: str, dtype: np.dtype) -> str:
    if (coalesce, atomic) in LIMIT:
        return LIMIT[coalesce, atomic]
    return "plain_add_max_updates" if dtype.itemsize == 4 else "plain_half_add_max_updates"


def run(n: int, dtype: np.dtype, cols: int, repeat: int, torch, atomic: str = "add", coalesce: str = "row") -> dict:
    rng = np.random.default_rng(n + cols)
    if coalesce == "row":
        rows = n // cols
        table = (rng.standard_normal((TABLE_FACTOR * rows, cols)) * 8).astype(dtype)
        idx = rng.integers(0, table.shape[0], rows).astype(np.int32)
        src = (rng.standard_normal((rows, cols)) * 8).astype(dtype)
        elements = (idx.astype(np.int64)[:, None] * cols + np.arange(cols)).reshape(-1)
    else:
        table = (rng.standard_normal(TABLE_FACTOR * n) * 8).astype(dtype)
        idx = rng.integers(0, table.size, n).astype(np.int32)
        src = (rng.standard_normal(n) * 8).astype(dtype)
        elements = idx.astype(np.int64)
    want = table.copy()
    NUMPY_AT[atomic](want, idx, src)
    exact = dtype.kind in "iu" or atomic != "add"
    ours = {"plain": table.copy(), "atomic": table.copy()}
    field = _limit_field(coalesce, atomic, dtype)
    limits = {"plain": 1 << 62, "atomic": 0}
    for form, got in ours.items():
        with tuning.tuned(**{field: limits[form]}):
            pto.scatter(got, src, idx, coalesce=coalesce, atomic=atomic)
    if not np.array_equal(ours["plain"].view(f"u{dtype.itemsize}"), want.view(f"u{dtype.itemsize}")):
        raise AssertionError(f"the plain form differs from numpy's at {n} {dtype}")

    def check(what, got):  # bitwise for integers and Max / Min; a float sum within the bound of its adds in any order
        if exact:
            if not np.array_equal(got.view(f"u{dtype.itemsize}"), want.view(f"u{dtype.itemsize}")):
                raise AssertionError(f"{what} differs from numpy's at {n} {dtype}")
        else:
            check_add(what, got.reshape(-1), table.reshape(-1), elements, src.reshape(-1), dtype.name)
    check("the atomic form", ours["atomic"])
    calls = {form: (lambda got=got: pto.scatter(got, src, idx, coalesce=coalesce, atomic=atomic))
             for form, got in ours.items()}
    numpy_table = table.copy()
    calls["numpy"] = lambda: NUMPY_AT[atomic](numpy_table, idx, src)
    tables = {**ours, "numpy": numpy_table}
    if torch is not None:
        t_idx, t_src = torch.from_numpy(idx.astype(np.int64)), as_tensor(torch, src)
        torch_table = table.copy()
        t_table = as_tensor(torch, torch_table)
        if atomic == "add":
            calls["torch"] = lambda: t_table.index_add_(0, t_idx, t_src)
        else:
            reduce = "amax" if atomic == "max" else "amin"
            calls["torch"] = lambda: t_table.index_reduce_(0, t_idx, t_src, reduce, include_self=True)
        with warnings.catch_warnings():  # (index_reduce_ says it is in beta, once)
            warnings.simplefilter("ignore", UserWarning)
            calls["torch"]()
        check("PyTorch", torch_table)
        tables["torch"] = torch_table
    times: dict = {name: [] for name in calls}
    for _ in range(repeat):  # rounds alternating the forms and the peers
        for name, fn in calls.items():
            # our form's threshold set for its turn (which empties the call caches: a call then keeps its launch),
            # then the timed call; a peer's too, so that each figure is a second call
            with tuning.tuned(**({field: limits[name]} if name in limits else {})):
                fn()
                if atomic != "add":
                    np.copyto(tables[name], table)
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {name: 1e3 * float(np.median(t)) for name, t in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--coalesce", default="row", choices=("row", "elem"))
    ap.add_argument("--atomic", default="add", choices=tuple(NUMPY_AT))
    ap.add_argument("--sizes", default="256K,1M,4M,16M")
    ap.add_argument("--dtypes", default="float32,int32")
    ap.add_argument("--cols", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    if "multicore" not in pto.a5_backends():
        print("the multicore backend is not available in this process", file=sys.stderr)
        return 2
    pto.set_a5_backend("multicore")
    from simt_pto.kernels.a5.simt import multicore_workers
    torch, why_not = load_torch(multicore_workers())
    if why_not:
        print(f"NOTE: {why_not}", flush=True)
    shape = f"{args.cols} columns" if args.coalesce == "row" else "n updates into 4n elements"
    print(f"{args.coalesce.capitalize()} scatter {args.atomic.capitalize()}, {shape}, medians of {args.repeat} rounds, "
          "ms (peer / ours-plain in brackets)")
    numpy_name, torch_name = {"add": ("np.add.at", "index_add_"), "max": ("np.maximum.at", "index_reduce_"),
                              "min": ("np.minimum.at", "index_reduce_")}[args.atomic]
    print(f"{'size':>6} {'dtype':<8} {'plain':>9} {'atomic':>9} {numpy_name:>16} {torch_name:>16}")
    for n in (parse_size(s) for s in args.sizes.split(",")):
        for dtype in (pto.dtypes.resolve(d.strip()).numpy for d in args.dtypes.split(",")):
            got = run(n, dtype, args.cols, args.repeat, torch, args.atomic, args.coalesce)
            peers = [f"{got[name]:9.3f} ({got[name] / got['plain']:.2f}x)" if name in got else "-"
                     for name in ("numpy", "torch")]
            print(f"{size_label(n):>6} {dtype.name:<8} {got['plain']:9.3f} {got['atomic']:9.3f} {peers[0]:>16} "
                  f"{peers[1]:>16}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
