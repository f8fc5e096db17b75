"""Where the Dask route meets Dask itself (host/dask_route.py, issue 37): ``out=`` / ``store=`` under every
kind of scheduler and destination, empty chunks along any axis of ``idx`` / ``src`` / the table, and a repeated
call. Oracles: the in-memory ``pto.gather`` / ``pto.scatter`` on numpy arrays (the call the Dask route promises
to equal), or the refusal it raises.

The destinations that need worker processes run on one ``LocalCluster`` of two processes for the module (target
``cpu``: these tests are about where the result is written, not about the kernels); everything else runs under
the ``sync`` scheduler, in this process."""
from __future__ import annotations

import logging
import multiprocessing
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

pytest.importorskip("distributed", reason="needs the dask extra: pip install 'simt_pto[dask]' (README's test "
                    "install includes it)")

import dask  # noqa: E402
import dask.array as da  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

import simt_pto as pto  # noqa: E402
import simt_pto.dask as pto_dask  # noqa: E402
from simt_pto.host import dask_route  # noqa: E402
from conftest import as_bits, random_values  # noqa: E402

TARGETS = ("cpu", "a2a3", "a5")
GATHER_OOB = ("undefined", "clamp", "wrap", "zero")
SCATTER_OOB = ("undefined", "skip", "clamp", "wrap")
ROWS, COLS, ELEMS = 20, 3, 60


@pytest.fixture(scope="module")
def client():
    """Two worker processes, one thread each, on 127.0.0.1: the scheduler the issue's lost writes came from."""
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


@pytest.fixture
def sync():
    """The synchronous scheduler, also while the module's cluster is the default client."""
    with dask.config.set(scheduler="sync"):
        yield


def outcome(call):
    """What ``call`` gives, computed: a numpy array, or the refusal it raised (when called or computed)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the cpu target's atomic notice, on both sides
            result = call()
            return np.asarray(result.compute() if isinstance(result, da.Array) else result)
    except (pto.ConstraintError, pto.OutOfBoundsError, TypeError, ValueError) as error:
        return error


def assert_same(got, want, label=""):
    """The Dask call's outcome is the in-memory call's: the same bits, or the same refusal."""
    if isinstance(want, Exception):
        assert type(got) is type(want) and str(got) == str(want), (label, got, want)
        return
    assert not isinstance(got, Exception), (label, got)
    assert got.shape == want.shape and as_bits(got).tobytes() == as_bits(want).tobytes(), label


# -- empty chunks (issue 37, item 6) -------------------------------------------------------------------------

# name -> (idx chunks, src chunks beyond idx's trailing axes): an index chunk with no row, and one with no column
LAYOUTS = {
    "1-D, empty chunks": ((10,), ((3, 0, 7, 0),), ((2, 0, 0, 8),)),
    "2-D, empty along both axes": ((4, 5), ((2, 0, 2), (2, 0, 3)), ((1, 0, 3), (0, 5, 0))),
}
# coalesce -> name -> the table's chunks (Row: runs of rows; Elem: runs of the 1-D table's elements)
TABLE_CHUNKS = {"row": {"plain": (7, COLS), "an empty chunk": ((7, 0, 13), (COLS,))},
                "elem": {"plain": (13,), "an empty chunk": ((13, 0, 47),)}}
OPS = {
    "gather row": ("gather", "row", [{"oob": o} for o in GATHER_OOB]),
    "gather elem": ("gather", "elem", [{"oob": o} for o in GATHER_OOB]),
    "scatter row last": ("scatter", "row", [{"oob": o} for o in SCATTER_OOB]),
    "scatter elem last": ("scatter", "elem", [{"oob": o} for o in SCATTER_OOB]),
    "scatter row default": ("scatter", "row", [{"conflict": "default"}]),
    "scatter row atomics": ("scatter", "row", [{"atomic": a, "oob": "wrap"} for a in ("add", "max", "min")]),
    "scatter elem atomics": ("scatter", "elem", [{"atomic": a, "oob": "wrap"} for a in ("add", "max", "min")]),
}


def case_indices(rng, shape, capacity, kwargs):
    """Indices for one case: distinct slots for Conflict::Default (one writer each, so the result is one table);
    else duplicates, and under a remapping OOB policy values past both ends."""
    n = int(np.prod(shape))
    if kwargs.get("conflict") == "default":
        return rng.permutation(capacity)[:n].reshape(shape).astype(np.int32)
    idx = rng.integers(0, capacity, shape).astype(np.int32)
    if kwargs.get("oob", "undefined") != "undefined":
        idx.reshape(-1)[[0, n - 1]] = [-1, capacity + 3]
    return idx


@pytest.mark.parametrize("target, op_name", [(t, o) for t in TARGETS for o in OPS
                                             if not (t == "cpu" and "atomics" in o)])  # cpu: a plain replace
def test_empty_chunks_give_the_in_memory_result(sync, rng, target, op_name):
    """Index and source chunks with no row or no column, and a table chunk with no row: every op, OOB policy,
    conflict rule and atomic gives the in-memory call's result, or its refusal (a Row scatter raised
    "cannot reshape array of size 0 into shape (0,newaxis)")."""
    op, coalesce, variants = OPS[op_name]
    dtype = "int32" if any("atomic" in v for v in variants) else "float32"  # integer atomics: bit-exact
    table = random_values(rng, (ROWS, COLS) if coalesce == "row" else (ELEMS,), dtype)
    capacity = table.shape[0] if coalesce == "row" else table.size
    checked = 0
    for layout, (shape, idx_chunks, src_chunks) in LAYOUTS.items():
        for table_layout, chunks in TABLE_CHUNKS[coalesce].items():
            dtable = da.from_array(table, chunks=chunks)
            for kwargs in variants:
                idx = case_indices(rng, shape, capacity, kwargs)
                didx = da.from_array(idx, chunks=idx_chunks)
                label = (layout, table_layout, kwargs)
                if op == "gather":
                    want = outcome(lambda: pto.gather(table, idx, coalesce=coalesce, target=target, **kwargs))
                    got = outcome(lambda: pto.gather(dtable, didx, coalesce=coalesce, target=target, **kwargs))
                else:
                    row_shape = (COLS,) if coalesce == "row" else ()
                    src = random_values(rng, shape + row_shape, dtype)
                    dsrc = da.from_array(src, chunks=src_chunks + ((COLS,),) * (coalesce == "row"))
                    want = outcome(lambda: pto.scatter(table.copy(), src, idx, coalesce=coalesce, target=target,
                                                       **kwargs))
                    got = outcome(lambda: pto.scatter(dtable, dsrc, didx, coalesce=coalesce, target=target,
                                                      **kwargs))
                assert_same(got, want, label)
                checked += not isinstance(want, Exception)
    if not (target == "a2a3" and op_name == "scatter row default"):  # a2a3 has no Conflict::Default
        assert checked, "every case was refused: nothing was compared"


@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_ids_filtered_then_compute_chunk_sizes(sync, rng, coalesce):
    """README's recipe: filter ids with a mask, then ``compute_chunk_sizes()``; chunks the mask empties hold no
    index. Gather and scatter (numpy and Dask sources) equal the in-memory calls."""
    ids = da.from_array(np.arange(48, dtype=np.int32), chunks=8)
    kept = ids[(ids % 16 < 4) | (ids > 44)]
    kept.compute_chunk_sizes()
    assert 0 in kept.chunks[0]  # the mask emptied some chunks
    table = random_values(rng, (ROWS, COLS) if coalesce == "row" else (ELEMS,), "float32")
    dtable = da.from_array(table, chunks=(7, COLS) if coalesce == "row" else 13)
    idx = kept.compute()
    src = random_values(rng, idx.shape + ((COLS,) if coalesce == "row" else ()), "float32")
    assert_same(outcome(lambda: pto.gather(dtable, kept, coalesce=coalesce)),
                outcome(lambda: pto.gather(table, idx, coalesce=coalesce)))
    want = outcome(lambda: pto.scatter(table.copy(), src, idx, coalesce=coalesce))
    assert_same(outcome(lambda: pto.scatter(dtable, src, kept, coalesce=coalesce)), want, "numpy src")
    dsrc = da.from_array(src, chunks=(5,) + src.shape[1:])
    assert_same(outcome(lambda: pto.scatter(dtable, dsrc, kept, coalesce=coalesce)), want, "Dask src")


@pytest.mark.parametrize("shape", [(0,), (0, 4), (3, 0)])
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_a_call_with_no_index_is_the_in_memory_no_op(sync, rng, coalesce, shape):
    """An idx with no index, Dask or numpy: a gather's result has the right (empty) shape, a scatter returns the
    table's values, and ``out=`` / ``store=`` are written as that result."""
    table = random_values(rng, (ROWS, COLS) if coalesce == "row" else (ELEMS,), "float32")
    dtable = da.from_array(table, chunks=(7, COLS) if coalesce == "row" else 13)
    idx = np.zeros(shape, np.int32)
    src = np.zeros(shape + ((COLS,) if coalesce == "row" else ()), np.float32)
    gathered = pto.gather(table, idx, coalesce=coalesce)
    for kind, i in (("numpy", idx), ("Dask", da.from_array(idx, chunks=(max(1, shape[0]),) + shape[1:]))):
        assert_same(outcome(lambda: pto.gather(dtable, i, coalesce=coalesce)), gathered, kind)
        assert_same(outcome(lambda: pto.scatter(dtable, src, i, coalesce=coalesce)), table, kind)
        store = np.full_like(table, 7)
        assert pto_dask.scatter(dtable, src, i, coalesce=coalesce, store=store) is store
        assert_same(store, table, kind)


# -- out= / store=: checked before anything runs ----------------------------------------------------------------

class Setitem:
    """An array-like with ``__setitem__`` and ``shape`` that lives in the caller's process (a stand-in for any
    user store): pickled to a worker, it is a copy."""

    def __init__(self, shape, dtype):
        self.values = np.zeros(shape, dtype)
        self.shape, self.dtype = self.values.shape, self.values.dtype

    def __setitem__(self, key, value):
        self.values[key] = value


def read_only(shape, dtype):
    a = np.zeros(shape, dtype)
    a.flags.writeable = False
    return a


BAD_DESTINATIONS = {
    "a larger array": (lambda shape, dtype: np.zeros((shape[0] + 4,) + shape[1:], dtype), pto.ConstraintError,
                       r"has the (gathered|table's) shape and"),
    "another dtype": (lambda shape, dtype: np.zeros(shape, np.int8), pto.ConstraintError, r"has the (gathered|table's) shape and"),
    "a read-only array": (read_only, pto.ConstraintError, r"read-only"),
    "a Dask array": (lambda shape, dtype: da.zeros(shape, dtype=dtype), TypeError, r"Dask array cannot be written"),
    "no __setitem__": (lambda shape, dtype: (0,) * shape[0], TypeError, r"expected a numpy array"),
    "a store of another shape": (lambda shape, dtype: Setitem(shape[::-1] + (1,), dtype), pto.ConstraintError,
                                 r"has the (gathered|table's) shape and"),
}


@pytest.mark.parametrize("case", BAD_DESTINATIONS)
@pytest.mark.parametrize("op", ["gather", "scatter"])
def test_a_destination_that_cannot_take_the_result_is_refused_before_anything_runs(sync, rng, op, case):
    """A larger or other-dtype numpy destination was written partly, or cast, with no error."""
    make, error, message = BAD_DESTINATIONS[case]
    table = random_values(rng, (ROWS, COLS), "float32")
    dtable = da.from_array(table, chunks=(7, COLS))
    idx = da.from_array(rng.integers(0, ROWS, 9).astype(np.int32), chunks=4)
    shape = (9, COLS) if op == "gather" else (ROWS, COLS)
    dest = make(shape, np.float32)
    contents = (lambda: np.array(dest.values)) if isinstance(dest, Setitem) else \
        (lambda: np.array(dest)) if isinstance(dest, np.ndarray) else None
    before = contents() if contents else None
    what = "out" if op == "gather" else "store"
    with pytest.raises(error, match=message) as refused:
        if op == "gather":
            pto_dask.gather(dtable, idx, out=dest)
        else:
            pto_dask.scatter(dtable, np.ones((9, COLS), np.float32), idx, store=dest)
    assert what in str(refused.value)
    if contents:  # nothing was written
        assert np.array_equal(contents(), before)


def test_a_torch_destination_keeps_torchs_in_place_rules(sync, rng):
    """A leaf that requires grad is written only under ``torch.no_grad()`` (as by ``index_put_``), and the write
    bumps its version counter. The Dask route wrote it through a detached view, unseen by autograd."""
    torch = pytest.importorskip("torch")
    table = random_values(rng, (ROWS, COLS), "float32")
    dtable = da.from_array(table, chunks=(7, COLS))
    idx = np.arange(5, dtype=np.int32)
    out = torch.zeros(5, COLS, requires_grad=True)
    with pytest.raises(pto.ConstraintError, match="out is a leaf that requires grad"):
        pto_dask.gather(dtable, idx, out=out)
    assert not out.detach().any() and out._version == 0
    with torch.no_grad():
        assert pto_dask.gather(dtable, idx, out=out) is out
    assert_same(out.detach().numpy(), table[idx])
    assert out._version > 0


# -- out= / store=: written under every scheduler -------------------------------------------------------------

def destination(kind, shape, tmp_path):
    """``(destination, read it back as numpy)`` of ``kind``, zeroed."""
    if kind == "numpy":
        d = np.zeros(shape, np.float32)
        return d, lambda: d
    if kind == "other byte order":
        d = np.zeros(shape, np.dtype(np.float32).newbyteorder())
        return d, lambda: d.astype(np.float32)  # a byte swap: bit for bit
    if kind == "memmap":
        d = np.memmap(tmp_path / f"memmap-{len(shape)}-{shape[0]}.bin", dtype=np.float32, mode="w+", shape=shape)
        return d, lambda: np.asarray(d)
    if kind == "setitem":
        d = Setitem(shape, np.float32)
        return d, lambda: d.values
    if kind == "torch":
        torch = pytest.importorskip("torch")
        d = torch.zeros(shape)
        return d, lambda: d.numpy()
    raise AssertionError(kind)


def gather_and_scatter_into(kind, rng, tmp_path):
    """A Row gather into ``out`` and a Row scatter into ``store`` of ``kind``, with an index chunk that holds no
    index, checked against the in-memory calls; also returns the two destinations."""
    table = random_values(rng, (ROWS, COLS), "float32")
    dtable = da.from_array(table, chunks=(7, COLS))
    idx = rng.integers(0, ROWS, 9).astype(np.int32)
    didx = da.from_array(idx, chunks=((4, 0, 5),))
    src = random_values(rng, (9, COLS), "float32")
    out, read_out = destination(kind, (9, COLS), tmp_path)
    store, read_store = destination(kind, (ROWS, COLS), tmp_path)
    assert pto_dask.gather(dtable, didx, out=out, target="cpu") is out
    assert pto_dask.scatter(dtable, src, didx, store=store, target="cpu") is store
    assert_same(np.array(read_out()), pto.gather(table, idx, target="cpu"), "out")
    assert_same(np.array(read_store()), pto.scatter(table.copy(), src, idx, target="cpu"), "store")
    return out, store


@pytest.mark.parametrize("kind", ["numpy", "other byte order", "memmap", "setitem", "torch"])
def test_out_and_store_in_the_callers_memory_are_written_on_a_process_cluster(client, rng, tmp_path, kind):
    """The workers' writes went to their pickled copies: the call returned the destination unwritten, no error
    (a torch tensor: a TypeError from the worker). Now the caller's process writes the computed blocks."""
    out, store = gather_and_scatter_into(kind, rng, tmp_path)
    if kind == "torch":  # as torch's own in-place writes: autograd sees that the tensor changed
        assert out._version > 0 and store._version > 0


def test_out_and_store_are_written_under_the_processes_scheduler(rng, tmp_path):
    with dask.config.set(scheduler="processes", num_workers=2):
        gather_and_scatter_into("numpy", rng, tmp_path)


def test_a_refused_call_writes_nothing_on_a_process_cluster(client, rng):
    """Out-of-range Dask indices under UNDEFINED: the refusal reaches the caller and ``out`` stays as it was
    (every block the caller would write depends on the refusal)."""
    dtable = da.from_array(random_values(rng, (ROWS, COLS), "float32"), chunks=(7, COLS))
    idx = rng.integers(0, ROWS, 9).astype(np.int32)
    idx[6] = ROWS
    out = np.full((9, COLS), 7, np.float32)
    with pytest.raises(pto.OutOfBoundsError, match=r"idx\[6\] = 20|1 index"):
        pto_dask.gather(dtable, da.from_array(idx, chunks=3), out=out, target="cpu")
    assert (out == 7).all()


def test_a_repeated_call_with_numpy_operands_is_one_graph(client, rng):
    """A numpy ``idx`` / ``src`` became a Dask array of a random name under task keys named by the call's token:
    computing the same call twice gave the scheduler one key with two sets of dependencies ("Detected different
    `run_spec`", which distributed warns can deadlock)."""
    table = random_values(rng, (ROWS, COLS), "float32")
    dtable = da.from_array(table, chunks=(7, COLS))
    idx = rng.integers(0, ROWS, 9).astype(np.int32)
    src = random_values(rng, (9, COLS), "float32")
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logger = logging.getLogger("distributed.scheduler")  # "distributed" does not propagate to pytest's handler
    logger.addHandler(handler)
    try:
        results = [pto_dask.scatter(dtable, src, idx, target="cpu").compute() for _ in range(2)]
        results += [pto_dask.gather(dtable, idx, target="cpu").compute() for _ in range(2)]
    finally:
        logger.removeHandler(handler)
    assert not [r for r in records if "run_spec" in r.getMessage()]
    want = pto.scatter(table.copy(), src, idx, target="cpu")
    for got, expected in zip(results, (want, want, table[idx], table[idx])):
        assert_same(got, expected)


# -- Zarr: a store the workers write themselves --------------------------------------------------------------------

def test_aligned_gives_each_store_chunk_one_block():
    """:func:`dask_route._aligned` moves block boundaries up to the store's chunk multiples (zarr 3: its shards)."""
    class Store:
        chunks = (3, 2)
        shards = None
    result = da.zeros((10, 4), chunks=((2, 2, 0, 2, 4), (1, 3)))
    aligned = dask_route._aligned(result, Store())
    assert aligned.chunks == ((3, 3, 4), (2, 2))
    Store.shards = (6, 4)
    assert dask_route._aligned(result, Store()).chunks == ((6, 4), (4,))
    assert dask_route._aligned(aligned, type("S", (), {"chunks": (1, 1)})()) is aligned  # nothing to move


@pytest.mark.parametrize("scheduler", ["cluster", "process pool"])
def test_a_zarr_store_is_written_whatever_its_chunks(request, rng, tmp_path, scheduler):
    """A Zarr array on disk is written by the workers; with store chunks that span two result blocks, two worker
    processes wrote one chunk each with a per-process lock, and one write was lost (a process pool). A Zarr
    array in memory is written from the caller's process."""
    zarr = pytest.importorskip("zarr")
    table = random_values(rng, (ELEMS,), "float32")
    dtable = da.from_array(table, chunks=13)
    idx = rng.integers(0, ELEMS, 120).astype(np.int32)
    on_disk = zarr.open_array(str(tmp_path / "out.zarr"), mode="w", shape=idx.shape, dtype="f4", chunks=(10,))
    in_memory = zarr.zeros(idx.shape, dtype="f4", chunks=(10,))
    if scheduler == "cluster":
        request.getfixturevalue("client")
    # (spawned: a forked child of a process that has imported JAX, as an earlier test in this worker may have, can
    # deadlock on a lock one of JAX's threads held at the fork)
    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) if scheduler == "process pool" else None
    try:
        with dask.config.set(scheduler=pool) if pool else dask.config.set({}):
            for out in (on_disk, in_memory):
                assert pto_dask.gather(dtable, da.from_array(idx, chunks=3), coalesce="elem", out=out,
                                          target="cpu") is out
                assert_same(np.asarray(out[...]), table[idx], "on disk" if out is on_disk else "in memory")
    finally:
        if pool:
            pool.shutdown()
