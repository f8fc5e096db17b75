"""Whole-array gather / scatter over a Dask table on a local Dask cluster, against Dask's own ops (issue 25).

    python bench/bench_dask.py                                # 4 GB float32 table, 100M indices, 4 workers x 3 GB
    python bench/bench_dask.py --table-gb 0.5 --n 10e6       # a scaled run
    python bench/bench_dask.py --cols 16                      # Row mode: a (R, 16) table, n / 16 rows per op
    python bench/bench_dask.py --scheduler tcp://host:8786    # an existing cluster instead of a local one

The table (float32, chunked along its rows, about ``--chunk-mb`` per chunk), the indices (uint32, uniform over the
table) and the sources are made on the workers, block by block, from seeded generators: nothing of them passes
through this process, and the golden regenerates any block the same way. The table is larger than one worker's
memory limit and at most 40% of the cluster's (said, unless ``--scheduler``). The gathers read it persisted on the
workers; the scatters read it chunk by chunk as from storage (each chunk made by its own task, as
``da.from_zarr`` reads one: ``make_s`` says what making all of them costs) and persist their result, the new
table (a persisted table and a persisted result would be two tables at once, beyond the workers' limits).

Each op is timed from the call to its result persisted on the cluster (``persist`` + ``wait``), after
``simt_pto.dask.warm`` loaded the kernels on every worker:

* **gather** (Elem; Row with ``--cols``): ``simt_pto.dask.gather(table, idx)`` vs Dask's own ``table[idx]``;
* **Last**: ``simt_pto.dask.scatter(table, src, idx)`` (Conflict::Last); Dask has no ordered scatter to compare;
* **Add**: ``simt_pto.dask.scatter(..., atomic="add")`` vs the best Dask-native scatter-add found: per (index chunk,
  table chunk) ``np.bincount`` of the chunk's updates with their weights (kept as float32), built with
  ``da.blockwise`` and summed over the index chunks (``da.bincount`` itself makes one capacity-long float64 array
  per index chunk: it is run only where that fits a worker, ``--try-bincount``).

Every result is checked against a serial golden computed here chunk by chunk (regenerated table chunk, the updates
it owns in source order): gathers and Last bit for bit, Add within ``simt_pto.reference``'s bound
``(k + 1) * eps * (|t0| + sum |c_i|)`` at a slot with ``k`` updates. Figures: millions of indices per second and
the peer's time over ours. Writes ``bench/out/bench_dask.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

SEED_TABLE, SEED_IDX, SEED_SRC = 11, 22, 33


# -- the data, block by block, from seeds (the same here and on the workers) ----------------------------------

def table_block(t, shape):
    """Table chunk ``t`` (values in [-8, 8))."""
    return (np.random.default_rng([SEED_TABLE, t]).random(shape, dtype=np.float32) * 16 - 8).astype(np.float32)


def idx_block(b, n, capacity):
    return np.random.default_rng([SEED_IDX, b]).integers(0, capacity, n, dtype=np.uint32)


def src_block(b, shape):
    return np.random.default_rng([SEED_SRC, b]).random(shape, dtype=np.float32) * 2 - 1


def _made(make, *args):
    def fill(block_info=None):
        info = block_info[None]
        return make(info["chunk-location"][0], tuple(info["chunk-shape"]), *args)
    return fill


def dask_data(da, rows, cols, chunk_rows, n, idx_chunk):
    """(table, idx, src) as Dask arrays made on the workers."""
    table_shape = (rows, cols) if cols else (rows,)
    table = da.map_blocks(_made(table_block), dtype=np.float32,
                          chunks=((chunk_rows,) * (rows // chunk_rows) + ((rows % chunk_rows,) if rows % chunk_rows else ()),)
                          + ((cols,) if cols else ()))
    assert table.shape == table_shape
    idx_chunks = ((idx_chunk,) * (n // idx_chunk) + ((n % idx_chunk,) if n % idx_chunk else ()),)
    idx = da.map_blocks(_made(lambda b, shape, cap: idx_block(b, shape[0], cap), rows), dtype=np.uint32,
                        chunks=idx_chunks)
    src = da.map_blocks(_made(src_block), dtype=np.float32, chunks=idx_chunks + (((cols,),) if cols else ()))
    return table, idx, src


def host_indices(idx, src, capacity):
    """The indices and sources here, block by block (the golden's inputs)."""
    starts = np.concatenate(([0], np.cumsum(idx.chunks[0])))
    host_idx = np.empty(idx.shape, np.uint32)
    host_src = np.empty(src.shape, np.float32)
    for b, (a, z) in enumerate(zip(starts[:-1], starts[1:])):
        host_idx[a:z] = idx_block(b, z - a, capacity)
        host_src[a:z] = src_block(b, (z - a,) + src.shape[1:])
    return host_idx, host_src


# -- the golden, table chunk by table chunk ------------------------------------------------------------------

class Golden:
    """The updates / lookups grouped by owning table chunk once (stable: source order kept within a chunk)."""

    def __init__(self, idx, bounds):
        self.bounds = bounds
        owner = np.searchsorted(bounds[1:-1], idx, side="right").astype(np.uint16)
        self.order = np.argsort(owner, kind="stable")
        self.cuts = np.concatenate(([0], np.cumsum(np.bincount(owner, minlength=len(bounds) - 1))))
        self.idx = idx

    def owned(self, t):
        """(positions in source order, local slots) of the indices chunk ``t`` owns."""
        positions = self.order[self.cuts[t]:self.cuts[t + 1]]
        return positions, self.idx[positions].astype(np.int64) - self.bounds[t]


def golden_gather(golden, chunks_shape, n, cols):
    out = np.empty((n, cols) if cols else n, np.float32)
    for t, shape in enumerate(chunks_shape):
        positions, local = golden.owned(t)
        out[positions] = table_block(t, shape)[local]
    return out


def check_last(result, golden, chunks_shape, src):
    from simt_pto import reference
    for t, shape in enumerate(chunks_shape):
        positions, local = golden.owned(t)
        want = reference.last_writer_scatter(table_block(t, shape), local, src[positions])
        got = result.blocks[t].compute()
        if got.view(np.uint32).tobytes() != want.view(np.uint32).tobytes():
            return f"chunk {t}: {int(np.count_nonzero(got.view(np.uint32) != want.view(np.uint32)))} elements differ"
    return "bitwise"


def check_add(result, golden, chunks_shape, src):
    """Within (k + 1) * eps * (|t0| + sum |c_i|) + the smallest subnormal of the exact sum (reference's bound)."""
    from simt_pto.reference import SMALLEST_SUBNORMAL, UNIT_ROUNDOFF
    worst = 0.0
    for t, shape in enumerate(chunks_shape):
        positions, local = golden.owned(t)
        t0 = table_block(t, shape).reshape(-1).astype(np.float64)
        values = src[positions].astype(np.float64)
        size = t0.size
        if values.ndim == 2:  # Row: every element of the row
            local = (local[:, None] * values.shape[1] + np.arange(values.shape[1])).reshape(-1)
            values = values.reshape(-1)
        exact = t0 + np.bincount(local, weights=values, minlength=size)
        magnitude = np.abs(t0) + np.bincount(local, weights=np.abs(values), minlength=size)
        count = np.bincount(local, minlength=size)
        bound = (count + 1) * UNIT_ROUNDOFF["float32"] * magnitude + SMALLEST_SUBNORMAL["float32"]
        got = result.blocks[t].compute().reshape(-1).astype(np.float64)
        err = np.abs(got - exact)
        if not (err <= bound).all():
            return f"chunk {t}: {int(np.count_nonzero(~(err <= bound)))} elements outside the bound"
        worst = max(worst, float((err / bound).max()))
    return f"within the bound (worst error {worst:.2f} of it)"


# -- Dask-native peers -------------------------------------------------------------------------------------------

def blockwise_scatter_add(da, table, idx, src):
    """Scatter-add from Dask's own primitives: per (index chunk, table chunk) ``np.bincount`` of the updates the
    table chunk owns (summed in float64, kept as float32: a chunk-long float64 array per pair would not fit the
    workers), ``da.blockwise`` over both chunk axes, summed over the index chunks and added to the table."""
    starts = np.concatenate(([0], np.cumsum(table.chunks[0]))).astype(np.int64)
    cols = table.shape[1] if table.ndim == 2 else 0

    def partial(idx_b, src_b, t_b):
        t = int(t_b[0])
        lo, hi = starts[t], starts[t + 1]
        mine = (idx_b >= lo) & (idx_b < hi)
        local = idx_b[mine].astype(np.int64) - lo
        if cols:  # Row: the row's elements
            local = (local[:, None] * cols + np.arange(cols)).reshape(-1)
            sums = np.bincount(local, weights=src_b[mine].reshape(-1), minlength=(hi - lo) * cols)
            return sums.astype(np.float32).reshape(1, -1, cols)
        return np.bincount(local, weights=src_b[mine], minlength=hi - lo).astype(np.float32)[None, :]

    owners = da.arange(len(table.chunks[0]), chunks=1)
    if cols:
        parts = da.blockwise(partial, "btc", idx, "b", src, "bc", owners, "t", dtype=np.float32,
                             adjust_chunks={"b": lambda _: 1, "t": table.chunks[0]}, concatenate=True)
    else:
        parts = da.blockwise(partial, "bt", idx, "b", src, "b", owners, "t", dtype=np.float32,
                             adjust_chunks={"b": lambda _: 1, "t": table.chunks[0]})
    return table + parts.sum(axis=0, split_every=2, dtype=np.float32)


def bincount_scatter_add(da, table, idx, src):
    """``da.bincount`` (Elem): each index chunk's ``np.bincount`` is capacity-long float64, then summed."""
    sums = da.bincount(idx, weights=src, minlength=table.shape[0])
    return (table.astype(np.float64) + sums.rechunk(table.chunks)).astype(np.float32)


# -- the run -------------------------------------------------------------------------------------------------------

def _collect():
    import gc
    gc.collect()


def timed(make):
    """(persisted result, seconds from the call to the result persisted on the cluster)."""
    import dask
    from distributed import wait
    start = time.perf_counter()
    made = make()
    result = dask.persist(*made) if isinstance(made, tuple) else made.persist()
    wait(result)
    return result, time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table-gb", type=float, default=4.0, help="table size in GB (1e9 bytes), default 4")
    parser.add_argument("--n", type=float, default=100e6, help="indices (Elem) or index elements (Row) per op")
    parser.add_argument("--cols", type=int, default=0, help="Row mode with this row width (default: Elem, 1-D table)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--memory-limit", default="3GB", help="per worker (default 3GB)")
    parser.add_argument("--threads", type=int, default=1, help="threads per worker")
    parser.add_argument("--chunk-mb", type=float, default=128, help="table chunk size in MB (default 128)")
    parser.add_argument("--idx-chunk", type=float, default=4e6, help="indices per index chunk (default 4M)")
    parser.add_argument("--ops", default="gather,last,add", help="comma-separated: gather, last, add")
    parser.add_argument("--no-peers", action="store_true", help="time only simt_pto's ops")
    parser.add_argument("--try-bincount", action="store_true", help="also time da.bincount where it may fit")
    parser.add_argument("--scheduler", help="address of an existing scheduler (tcp://host:port)")
    args = parser.parse_args(argv)

    import dask
    import dask.array as da
    from dask.utils import parse_bytes
    from distributed import Client, LocalCluster

    import simt_pto.dask

    cols = args.cols
    row_bytes = 4 * max(cols, 1)
    rows = int(args.table_gb * 1e9) // row_bytes
    chunk_rows = max(1, int(args.chunk_mb * 1e6) // row_bytes)
    n = int(args.n) // max(cols, 1)  # Row: n index elements in n / C rows
    idx_chunk = max(1, int(args.idx_chunk) // max(cols, 1))
    table_bytes = rows * row_bytes
    limit = parse_bytes(args.memory_limit)

    if args.scheduler:
        cluster, client = None, Client(args.scheduler)
    else:
        if not (table_bytes > limit and table_bytes <= 0.4 * limit * args.workers):
            print(f"note: a {table_bytes / 1e9:.2f} GB table is not larger than one worker's {limit / 1e9:.1f} GB and "
                  f"at most 40% of the cluster's {args.workers * limit / 1e9:.1f} GB")
        cluster = LocalCluster(n_workers=args.workers, threads_per_worker=args.threads, memory_limit=args.memory_limit,
                               processes=True, host="127.0.0.1", dashboard_address=None)
        client = Client(cluster)
    report = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "python": platform.python_version(),
              "dask": dask.__version__, "workers": len(client.nthreads()),
              "memory_limit": args.memory_limit, "table": f"{table_bytes / 1e9:.2f} GB float32 "
              + (f"({rows} x {cols}, Row)" if cols else f"({rows} elements, Elem)"),
              "n": n, "index elements": n * max(cols, 1), "ops": {}}
    try:
        start = time.perf_counter()
        took = simt_pto.dask.warm(client, dtypes=("float32",))
        report["warm_s"] = round(time.perf_counter() - start, 2)
        print(f"warm: {report['warm_s']} s ({', '.join(f'{s:.1f}' for s in took.values())} s per worker)")
        stored, idx, src = dask_data(da, rows, cols, chunk_rows, n, idx_chunk)
        (table, idx, src), made = timed(lambda: (stored, idx, src))
        report["make_s"] = round(made, 2)
        print(f"table {report['table']} in {len(table.chunks[0])} chunks, {n} indices in {len(idx.chunks[0])} chunks: "
              f"made on the workers in {made:.1f} s")
        host_idx, host_src = host_indices(idx, src, rows)
        bounds = np.concatenate(([0], np.cumsum(table.chunks[0]))).astype(np.int64)
        golden = Golden(host_idx, bounds)
        chunk_shapes = [(r, cols) if cols else (r,) for r in table.chunks[0]]
        coalesce = "row" if cols else "elem"
        rate = lambda s: n * max(cols, 1) / s / 1e6  # noqa: E731  (million index elements per second)

        def record(op, seconds, check):
            report["ops"][op] = line = {"ours_s": round(seconds, 2), "M_per_s": round(rate(seconds), 2), "check": check}
            print(f"{op}: {json.dumps(line)}", flush=True)

        def record_peer(op, peer, peer_s, peer_check):
            line = report["ops"][op]
            line.update(peer=peer, peer_s=round(peer_s, 2), peer_M_per_s=round(rate(peer_s), 2),
                        peer_check=peer_check, peer_over_ours=round(peer_s / line["ours_s"], 2))
            print(f"{op}: {json.dumps(line)}", flush=True)

        ops = args.ops.split(",")
        if "gather" in ops:
            result, seconds = timed(lambda: simt_pto.dask.gather(table, idx, coalesce=coalesce))
            want = golden_gather(golden, chunk_shapes, n, cols)
            got = result.compute()
            record("gather", seconds,
                   "bitwise" if got.view(np.uint32).tobytes() == want.view(np.uint32).tobytes() else "MISMATCH")
            del result, got
            if not args.no_peers:
                result, peer_s = timed(lambda: table[idx])
                got = result.compute()
                record_peer("gather", "table[idx]", peer_s,
                            "bitwise" if got.view(np.uint32).tobytes() == want.view(np.uint32).tobytes() else "MISMATCH")
                del result, got
            del want
        # The scatters read the table chunk by chunk as from storage (``stored``: each chunk made by its task, as
        # da.from_zarr would read it) and keep their result, a new table, on the workers: the persisted table and
        # a persisted result would hold two tables at once, more than a worker's limit allows here.
        del table
        client.run(_collect)
        table = stored
        if "last" in ops:
            result, seconds = timed(lambda: simt_pto.dask.scatter(table, src, idx, coalesce=coalesce))
            record("last", seconds, check_last(result, golden, chunk_shapes, host_src))
            del result
        if "add" in ops:
            result, seconds = timed(lambda: simt_pto.dask.scatter(table, src, idx, coalesce=coalesce, atomic="add"))
            record("add", seconds, check_add(result, golden, chunk_shapes, host_src))
            del result
            if not args.no_peers:
                result, peer_s = timed(lambda: blockwise_scatter_add(da, table, idx, src))
                record_peer("add", "da.blockwise(np.bincount) per chunk pair", peer_s,
                            check_add(result, golden, chunk_shapes, host_src))
                del result
            if args.try_bincount and not cols:
                need = 8 * rows
                if need * 3 > limit:
                    report["ops"]["add_bincount"] = (f"not run: each index chunk's np.bincount is {need / 1e9:.2f} GB "
                                                     f"of float64, beyond a {limit / 1e9:.1f} GB worker")
                    print(report["ops"]["add_bincount"])
                else:
                    result, peer_s = timed(lambda: bincount_scatter_add(da, table, idx, src))
                    report["ops"]["add_bincount"] = {"peer_s": round(peer_s, 2),
                                                     "check": check_add(result, golden, chunk_shapes, host_src)}
                    print(f"add_bincount: {report['ops']['add_bincount']}")
                    del result
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "bench_dask.json").write_text(json.dumps(report, indent=2))
    bad = [op for op, line in report["ops"].items() if isinstance(line, dict)
           and any("MISMATCH" in str(v) or "outside" in str(v) or "differ" in str(v) for v in line.values())]
    if bad:
        print(f"FAILED checks: {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
