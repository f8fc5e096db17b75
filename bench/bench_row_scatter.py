"""The Row scatter Add on the ``multicore`` backend in its two forms, against numpy and PyTorch, in one run.

    python bench/bench_row_scatter.py [--sizes 256K,1M,4M,16M] [--dtypes float32,int32] [--cols 64] [--repeat 7]

For ``n`` elements: ``n / C`` random rows of ``C`` columns added into a table of ``4n / C`` rows (``table[idx[r], :]
+= src[r, :]``, the embedding-gradient update). Ours, ``pto.scatter(table, src, idx, coalesce="row", atomic="add")``:

* ``plain``: the form a call takes (``simt_mscatter_row_serial_kernel``: plain read-modify-writes on the calling
  thread, rows in source order, while nothing else writes the table; up to ``HostTuning.plain_row_add_max_updates``);
* ``atomic``: the atomic kernel on every worker thread (the threshold set to 0 for the run).

Peers on the same data: numpy's ``np.add.at(table, idx, src)`` and PyTorch's ``table.index_add_(0, idx, src)`` (as
many threads as our pool, ``OMP_WAIT_POLICY=PASSIVE``). Each result is checked first: the plain form bitwise
against ``np.add.at`` (both add in source order), the atomic form and PyTorch within the bound of
``bench_peers.check_add`` (a float sum in any order; bitwise for integers). Then the four are timed in rounds that
alternate them, each figure the median of ``--repeat`` rounds; the ratios are peer time / ours in the plain form
(above 1: ours is faster).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

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


def run(n: int, dtype: np.dtype, cols: int, repeat: int, torch) -> dict:
    rows = n // cols
    rng = np.random.default_rng(n + cols)
    table = (rng.standard_normal((TABLE_FACTOR * rows, cols)) * 8).astype(dtype)
    idx = rng.integers(0, table.shape[0], rows).astype(np.int32)
    src = (rng.standard_normal((rows, cols)) * 8).astype(dtype)
    want = table.copy()
    np.add.at(want, idx, src)
    exact = dtype.kind in "iu"
    ours = {"plain": table.copy(), "atomic": table.copy()}
    limits = {"plain": tuning.current().plain_row_add_max_updates, "atomic": 0}
    for form, got in ours.items():
        with tuning.tuned(plain_row_add_max_updates=limits[form]):
            pto.scatter(got, src, idx, coalesce="row", atomic="add")
    elements = (idx.astype(np.int64)[:, None] * cols + np.arange(cols)).reshape(-1)
    if not np.array_equal(ours["plain"].view(f"u{dtype.itemsize}"), want.view(f"u{dtype.itemsize}")):
        raise AssertionError(f"the plain form differs from np.add.at at {n} {dtype}")

    def check(what, got):  # bitwise for integers; a float within the bound of its adds in any order
        if exact:
            if not np.array_equal(got, want):
                raise AssertionError(f"{what} differs from np.add.at at {n} {dtype}")
        else:
            check_add(what, got.reshape(-1), table.reshape(-1), elements, src.reshape(-1), dtype.name)
    check("the atomic form", ours["atomic"])
    calls = {form: (lambda got=got: pto.scatter(got, src, idx, coalesce="row", atomic="add"))
             for form, got in ours.items()}
    numpy_table = table.copy()
    calls["numpy"] = lambda: np.add.at(numpy_table, idx, src)
    if torch is not None:
        t_idx, t_src = torch.from_numpy(idx.astype(np.int64)), as_tensor(torch, src)
        t_table = as_tensor(torch, table.copy())
        t_table.index_add_(0, t_idx, t_src)
        check("index_add_", t_table.view(torch.int16).numpy().view(dtype) if dtype.name == "bfloat16"
              else t_table.numpy())
        calls["torch"] = lambda: t_table.index_add_(0, t_idx, t_src)
    times: dict = {name: [] for name in calls}
    for _ in range(repeat):  # rounds alternating the forms and the peers
        for name, fn in calls.items():
            # our form's threshold set for its turn (which empties the call caches: a call then keeps its launch),
            # then the timed call; a peer's too, so that each figure is a second call
            with tuning.tuned(**({"plain_row_add_max_updates": limits[name]} if name in limits else {})):
                fn()
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {name: 1e3 * float(np.median(t)) for name, t in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    print(f"Row scatter Add, {args.cols} columns, medians of {args.repeat} rounds, ms (peer / ours-plain in brackets)")
    print(f"{'size':>6} {'dtype':<8} {'plain':>9} {'atomic':>9} {'np.add.at':>16} {'index_add_':>16}")
    for n in (parse_size(s) for s in args.sizes.split(",")):
        for dtype in (pto.dtypes.resolve(d.strip()).numpy for d in args.dtypes.split(",")):
            got = run(n, dtype, args.cols, args.repeat, torch)
            peers = [f"{got[name]:9.3f} ({got[name] / got['plain']:.2f}x)" if name in got else "-"
                     for name in ("numpy", "torch")]
            print(f"{size_label(n):>6} {dtype.name:<8} {got['plain']:9.3f} {got['atomic']:9.3f} {peers[0]:>16} "
                  f"{peers[1]:>16}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
