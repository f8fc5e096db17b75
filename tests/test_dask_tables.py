"""Whole-array gather / scatter over Dask tables on a Dask cluster (host/dask_route.py, issue 25): on a
``LocalCluster`` of two worker processes on the loopback address, every result against the in-memory call (the
reference the issue names) and against numpy / ``simt_pto.reference`` oracles written from the spec: every mode,
every OOB policy, Conflict::Last and Default, the atomics, chunk boundaries, numpy and Dask operands, the
UNDEFINED refusal in both forms, and a worker restarted between two calls."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("distributed", reason="needs the dask extra: pip install 'simt_pto[dask]' (README's test "
                    "install includes it)")

import dask  # noqa: E402
import dask.array as da  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

import simt_pto as pto  # noqa: E402
from simt_pto import reference  # noqa: E402
import simt_pto.dask as pto_dask  # noqa: E402
from simt_pto.host import in_memory  # noqa: E402
from conftest import as_bits, random_values, run_python  # noqa: E402

GATHER_OOB = ("undefined", "clamp", "wrap", "zero")
SCATTER_OOB = ("undefined", "skip", "clamp", "wrap")
IDX_CHUNK = 23  # index chunks that do not line up with the table's

# name -> (table shape, table chunks, coalesce): Row over 4 row chunks (the last one short); Elem over a 1-D table
# in 5 chunks, and over a 2-D table chunked by whole rows (runs of 80 flat elements)
TABLES = {
    "row": ((150, 4), (40, 4), "row"),
    "elem-1d": ((300,), (64,), "elem"),
    "elem-2d": ((60, 5), (16, 5), "elem"),
}


@pytest.fixture(scope="module")
def client():
    """One cluster for the module: two worker processes, one thread each, on 127.0.0.1, kernels warmed."""
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as c:
        pto_dask.warm(c, dtypes=("float32", "int32", "float16"))
        yield c


def make_table(rng, name, dtype, values=None):
    shape, chunks, coalesce = TABLES[name]
    table = random_values(rng, shape, dtype) if values is None else values(shape).astype(dtype)
    return table, da.from_array(table, chunks=chunks), coalesce


def capacity(table, coalesce):
    return table.shape[0] if coalesce == "row" else table.size


def chunk_starts(name):
    """The first slot of every table chunk (rows, Row; flat elements, Elem)."""
    shape, chunks, coalesce = TABLES[name]
    per = chunks[0] if coalesce == "row" or len(shape) == 1 else chunks[0] * shape[1]
    return list(range(0, capacity(np.empty(shape), coalesce), per))


def indices(rng, cap, n, oob, shape=None):
    """``n`` indices (or ``shape``): in range under UNDEFINED, else with negatives and values past the capacity."""
    lo, hi = (0, cap) if oob == "undefined" else (-4, cap + 9)
    return rng.integers(lo, hi, n if shape is None else shape).astype(np.int32)


def oracle_gather(table, idx, coalesce, oob):
    """numpy's ``table[slot(idx)]`` after the spec's uint32 cast and remap (reference.slots); no slot reads 0."""
    flat = table if coalesce == "row" else table.reshape(-1)
    slots = reference.slots(idx, flat.shape[0], oob)
    out = flat[np.maximum(slots, 0)].copy()
    out[slots < 0] = 0
    return out


def to_dask(x, chunks=IDX_CHUNK):
    """``x`` as a Dask array cut into runs of ``chunks`` rows."""
    return da.from_array(x, chunks=(chunks,) + x.shape[1:])


# -- gather --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, dtype", [("row", "float32"), ("row", "float16"), ("elem-1d", "int32"),
                                         ("elem-2d", "float32")])
@pytest.mark.parametrize("kind", ["dask", "numpy"])
def test_gather_every_oob_policy_is_the_in_memory_gather(client, rng, name, dtype, kind):
    table, dtable, coalesce = make_table(rng, name, dtype)
    cap = capacity(table, coalesce)
    cases = {}
    for oob in GATHER_OOB:
        idx = indices(rng, cap, 97, oob)
        idx[:4] = [s - 1 for s in chunk_starts(name)[1:4]] + [cap - 1]  # the last slot of chunks
        cases[oob] = idx, pto_dask.gather(dtable, to_dask(idx) if kind == "dask" else idx, coalesce=coalesce,
                                             oob=oob)
    got = dask.compute({oob: result for oob, (_, result) in cases.items()})[0]
    for oob, (idx, result) in cases.items():
        assert isinstance(result, da.Array)
        assert result.chunks[0] == (to_dask(idx).chunks[0] if kind == "dask" else (97,))
        want = in_memory.gather(table, idx, coalesce=coalesce, oob=oob)
        assert got[oob].shape == want.shape and as_bits(got[oob]).tobytes() == as_bits(want).tobytes(), oob
        assert as_bits(got[oob]).tobytes() == as_bits(oracle_gather(table, idx, coalesce, oob)).tobytes(), oob


def test_elem_gather_with_2d_indices_cut_both_ways(client, rng):
    table, dtable, _ = make_table(rng, "elem-2d", "int32")
    idx = indices(rng, table.size, None, "wrap", shape=(13, 9))
    result = pto_dask.gather(dtable, da.from_array(idx, chunks=(5, 4)), coalesce="elem", oob="wrap")
    assert result.chunks == ((5, 5, 3), (4, 4, 1))  # chunked like idx
    got = result.compute()
    assert np.array_equal(got, in_memory.gather(table, idx, coalesce="elem", oob="wrap"))
    assert np.array_equal(got, oracle_gather(table, idx, "elem", "wrap"))


def test_gather_under_undefined_without_strict_reads_zero(client, rng):
    table, dtable, _ = make_table(rng, "row", "float32")
    idx = np.array([3, 150, -1, 149, 40], dtype=np.int32)
    got = pto_dask.gather(dtable, to_dask(idx, 2), strict=False).compute()
    assert as_bits(got).tobytes() == as_bits(in_memory.gather(table, idx, strict=False)).tobytes()
    assert not got[[1, 2]].any()


def test_row_gather_and_scatter_with_indices_of_any_shape(client, rng):
    """Row indices of shape (B, L) gather (B, L, C), as F.embedding does; a scatter takes src of that shape."""
    table, dtable, _ = make_table(rng, "row", "float32")
    idx = rng.integers(0, 150, (6, 11)).astype(np.int32)
    src = random_values(rng, (6, 11, 4), "float32")
    gathered = pto_dask.gather(dtable, da.from_array(idx, chunks=(4, 5)))
    scattered = pto_dask.scatter(dtable, src, da.from_array(idx, chunks=(4, 5)))
    assert gathered.shape == (6, 11, 4) and gathered.chunks[:2] == ((4, 2), (5, 5, 1))
    got_gather, got_scatter = dask.compute(gathered, scattered)
    assert np.array_equal(as_bits(got_gather), as_bits(table[idx]))
    assert np.array_equal(as_bits(got_scatter), as_bits(in_memory.scatter(table.copy(), src, idx)))


@pytest.mark.parametrize("dtype", ["float32", "int16"])
@pytest.mark.parametrize("name", ["row", "elem-2d"])
@pytest.mark.parametrize("op", ["gather", "scatter"])
def test_tables_and_sources_in_the_other_byte_order_are_the_in_memory_call(client, rng, op, name, dtype):
    """A table and ``src`` in the other byte order (``>f4`` on a little-endian host) are taken as the in-memory call
    takes them: the same values and the same result dtype (a gather's native, a scatter's the table's own). They
    were refused as "not a PTO element dtype"."""
    table, _, coalesce = make_table(rng, name, dtype)
    swapped = table.dtype.newbyteorder("S")
    assert not swapped.isnative
    dtable = da.from_array(table.astype(swapped), chunks=TABLES[name][1])
    flat = table if coalesce == "row" else table.reshape(-1)
    idx = rng.permutation(flat.shape[0])[:37].astype(np.int32)  # in range and unique: numpy's own [] is the oracle
    if op == "gather":
        got = pto.gather(dtable, to_dask(idx), coalesce=coalesce).compute()
        want = pto.gather(table.astype(swapped), idx, coalesce=coalesce)
        oracle = flat[idx]
    else:
        src = source(rng, table, coalesce, idx)
        got = pto.scatter(dtable, to_dask(src.astype(swapped)), to_dask(idx), coalesce=coalesce).compute()
        want = pto.scatter(table.astype(swapped), src.astype(swapped), idx, coalesce=coalesce)
        oracle = table.copy()
        (oracle if coalesce == "row" else oracle.reshape(-1))[idx] = src
    assert got.dtype == want.dtype and got.shape == want.shape == oracle.shape
    native = table.dtype
    assert as_bits(got.astype(native)).tobytes() == as_bits(want.astype(native)).tobytes() == as_bits(oracle).tobytes()


@pytest.mark.parametrize("order", ["native", "other"])
def test_out_and_store_of_either_byte_order_next_to_a_table_in_the_other_one(rng, order):
    """``store`` of a table in the other byte order takes the table's dtype in either byte order (it was refused
    even in the table's own), and a gather's ``out`` in the other byte order with ``dtype=`` is written byte-swapped
    (its raw bytes were written as native ones)."""
    table, _, _ = make_table(rng, "row", "float32")
    swapped = table.dtype.newbyteorder("S")
    dtable = da.from_array(table.astype(swapped), chunks=TABLES["row"][1])
    idx = rng.permutation(table.shape[0])[:20].astype(np.int32)
    src = random_values(rng, (20, 4), "float32")
    store = np.zeros(table.shape, table.dtype if order == "native" else swapped)
    out = np.zeros(src.shape, store.dtype)
    with dask.config.set(scheduler="sync"):
        assert pto_dask.scatter(dtable, src, idx, store=store) is store
        assert pto_dask.gather(dtable, idx, dtype="float32", out=out) is out
    scattered = table.copy()
    scattered[idx] = src
    assert as_bits(store.astype(table.dtype)).tobytes() == as_bits(scattered).tobytes()
    assert as_bits(out.astype(table.dtype)).tobytes() == as_bits(table[idx]).tobytes()


def test_int64_indices_behave_as_their_uint32_cast_and_values_outside_are_refused(client, rng):
    """Dask makes int64 indices: values in [-2**31, 2**32) are those values as int32 / uint32; one outside is
    refused at compute time with the in-memory call's error, naming its position in idx."""
    table, dtable, _ = make_table(rng, "elem-1d", "int32")
    idx = rng.integers(-3, 310, 70)
    idx[5] = 2 ** 32 - 2  # the uint32 cast of -2
    got = pto_dask.gather(dtable, to_dask(idx), coalesce="elem", oob="wrap").compute()
    assert np.array_equal(got, in_memory.gather(table, idx.astype(np.int32), coalesce="elem", oob="wrap"))
    idx[[40, 60]] = [2 ** 32, -2 ** 31 - 1]
    with pytest.raises(pto.ConstraintError) as local:
        in_memory.gather(table, idx, coalesce="elem", oob="wrap")
    with pytest.raises(pto.ConstraintError) as distributed:
        pto_dask.gather(dtable, to_dask(idx), coalesce="elem", oob="wrap").compute()
    assert str(distributed.value) == str(local.value)
    assert "idx[40] = 4294967296" in str(distributed.value)


# -- scatter: Conflict::Last, every OOB policy ----------------------------------------------------------------

def scatter_mismatches(got, table, src, idx, coalesce, oob, atomic="none", conflict="last"):
    """reference.scatter_mismatches (the serial loop, the writers of each slot, the float Add bound) on raw bits."""
    dtype = pto.dtypes.resolve(table.dtype).name
    row_len = table.shape[1] if coalesce == "row" else 0
    flat_idx = idx if coalesce == "row" else idx.reshape(-1)
    src_bits = as_bits(src).reshape(len(flat_idx), -1) if coalesce == "row" else as_bits(src).reshape(-1)
    return reference.scatter_mismatches(as_bits(got).reshape(-1), as_bits(table).reshape(-1), dtype, coalesce,
                                        flat_idx, src_bits, capacity(table, coalesce), oob, atomic, conflict,
                                        row_len)


def source(rng, table, coalesce, idx):
    shape = (len(idx), table.shape[1]) if coalesce == "row" else idx.shape
    return random_values(rng, shape, table.dtype)


@pytest.mark.parametrize("name, dtype", [("row", "float32"), ("elem-1d", "float16"), ("elem-2d", "int32")])
@pytest.mark.parametrize("kinds", ["dask-dask", "numpy-dask", "dask-numpy", "numpy-numpy"])
def test_last_keeps_the_largest_global_position_under_every_oob_policy(client, rng, name, dtype, kinds):
    """Few slots, many writers each, spread over every index chunk: the survivor is the globally last one."""
    table, dtable, coalesce = make_table(rng, name, dtype)
    cap = capacity(table, coalesce)
    idx_kind, src_kind = kinds.split("-")
    cases = {}
    for oob in SCATTER_OOB:
        idx = indices(rng, cap, 120, oob)
        idx[::3] = rng.choice([0, 39, 40, cap - 1], idx[::3].size)  # duplicates, chunk ends and starts
        src = source(rng, table, coalesce, idx)
        cases[oob] = idx, src, pto_dask.scatter(
            dtable, to_dask(src) if src_kind == "dask" else src, to_dask(idx) if idx_kind == "dask" else idx,
            coalesce=coalesce, oob=oob)
    got = dask.compute({oob: result for oob, (_, _, result) in cases.items()})[0]
    for oob, (idx, src, result) in cases.items():
        assert result.chunks == dtable.chunks and result.dtype == table.dtype
        want = in_memory.scatter(table.copy(), src, idx, coalesce=coalesce, oob=oob)
        assert as_bits(got[oob]).tobytes() == as_bits(want).tobytes(), oob
        slots = reference.slots(idx, cap, oob)
        flat_src = src if coalesce == "row" else src.reshape(-1)
        serial = reference.last_writer_scatter(table if coalesce == "row" else table.reshape(-1), slots, flat_src)
        assert as_bits(got[oob]).reshape(-1).tobytes() == as_bits(serial).reshape(-1).tobytes(), oob
    assert np.array_equal(as_bits(dtable.compute()), as_bits(table))  # the input is unchanged


def test_last_with_2d_indices_cut_along_both_axes(client, rng):
    """Index chunks that are not runs of the flat source order: the last writer is still the largest C-order
    position of the whole idx."""
    table, dtable, _ = make_table(rng, "elem-1d", "float32")
    idx = rng.integers(0, 12, (14, 9)).astype(np.int32)  # 126 writes into 12 slots
    src = random_values(rng, idx.shape, "float32")
    got = pto_dask.scatter(dtable, da.from_array(src, chunks=(4, 2)), da.from_array(idx, chunks=(5, 4)),
                              coalesce="elem").compute()
    serial = table.copy()
    for i, v in zip(idx.reshape(-1), src.reshape(-1)):
        serial[i] = v
    assert as_bits(got).tobytes() == as_bits(serial).tobytes()


def test_scatter_under_undefined_without_strict_drops_out_of_range(client, rng):
    table, dtable, _ = make_table(rng, "row", "int32")
    idx = np.array([3, 150, -1, 149], dtype=np.int32)
    src = random_values(rng, (4, 4), "int32")
    got = pto_dask.scatter(dtable, src, to_dask(idx, 2), strict=False).compute()
    assert np.array_equal(got, in_memory.scatter(table.copy(), src, idx, strict=False))


# -- scatter: Conflict::Default and the atomics ------------------------------------------------------------------

@pytest.mark.parametrize("name", ["row", "elem-2d"])
def test_default_leaves_each_slot_one_of_its_writers(client, rng, name):
    table, dtable, coalesce = make_table(rng, name, "float32")
    idx = rng.integers(0, 45, 150).astype(np.int32)  # about three writers a slot, across chunk 0 and 1
    src = source(rng, table, coalesce, idx)
    got = pto_dask.scatter(dtable, to_dask(src), to_dask(idx), coalesce=coalesce, conflict="default").compute()
    assert not scatter_mismatches(got, table, src, idx, coalesce, "undefined", conflict="default")


@pytest.mark.parametrize("atomic", ["add", "max", "min"])
@pytest.mark.parametrize("name", ["row", "elem-1d"])
def test_integer_atomics_are_bitwise(client, rng, name, atomic):
    table, dtable, coalesce = make_table(rng, name, "int32")
    cap = capacity(table, coalesce)
    idx = indices(rng, cap, 200, "wrap")
    src = source(rng, table, coalesce, idx)  # random bits: int32 Add wraps
    got = pto_dask.scatter(dtable, to_dask(src), to_dask(idx), coalesce=coalesce, atomic=atomic,
                              oob="wrap").compute()
    assert np.array_equal(got, in_memory.scatter(table.copy(), src, idx, coalesce=coalesce, atomic=atomic, oob="wrap"))
    ufunc = {"add": np.add, "max": np.maximum, "min": np.minimum}[atomic]
    expected = table.copy()
    ufunc.at(expected if coalesce == "row" else expected.reshape(-1), reference.slots(idx, cap, "wrap"),
             src if coalesce == "row" else src.reshape(-1))
    assert np.array_equal(got, expected)


@pytest.mark.parametrize("atomic, dtype", [("add", "float32"), ("add", "float16"), ("max", "float32"),
                                           ("min", "float32")])
def test_float_atomics_within_the_reference_bound(client, rng, atomic, dtype):
    """Float Add within reference.float_add_bound of the exact sum (any order); Max / Min bitwise."""
    table, dtable, coalesce = make_table(rng, "row", dtype, values=lambda s: rng.uniform(-4, 4, s))
    idx = rng.integers(0, 150, 300).astype(np.int32)
    src = rng.uniform(-4, 4, (300, 4)).astype(dtype)
    got = pto_dask.scatter(dtable, to_dask(src), to_dask(idx), atomic=atomic).compute()
    assert not scatter_mismatches(got, table, src, idx, "row", "undefined", atomic=atomic)


# -- chunk boundaries ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["row", "elem-2d"])
def test_all_updates_in_one_chunk_leave_the_others_as_they_were(client, rng, name):
    """Every index hits chunk 1, at both its ends among others; chunks 0, 2 and 3 get no update and are the
    table's own chunks in the result."""
    table, dtable, coalesce = make_table(rng, name, "float32")
    starts = chunk_starts(name)
    lo, hi = starts[1], starts[2]
    idx = np.concatenate([[lo, hi - 1, hi - 1], rng.integers(lo, hi, 40)]).astype(np.int32)
    src = source(rng, table, coalesce, idx)
    result = pto_dask.scatter(dtable, src, to_dask(idx, 9), coalesce=coalesce)
    got = result.compute()
    assert as_bits(got).tobytes() == as_bits(in_memory.scatter(table.copy(), src, idx, coalesce=coalesce)).tobytes()
    flat_got, flat_table = as_bits(got).reshape(-1), as_bits(table).reshape(-1)
    per_slot = 1 if coalesce == "elem" else table.shape[1]
    assert np.array_equal(flat_got[: lo * per_slot], flat_table[: lo * per_slot])
    assert np.array_equal(flat_got[hi * per_slot:], flat_table[hi * per_slot:])
    gathered = pto_dask.gather(dtable, to_dask(idx, 9), coalesce=coalesce).compute()
    assert as_bits(gathered).tobytes() == as_bits(oracle_gather(table, idx, coalesce, "undefined")).tobytes()


def test_a_chunk_of_the_indices_with_nothing_for_a_table_chunk(client, rng):
    """Index chunks each confined to one table chunk, and one table chunk that nobody reads or writes."""
    table, dtable, _ = make_table(rng, "elem-1d", "int32")
    idx = np.concatenate([rng.integers(0, 64, 10), rng.integers(128, 192, 10), [63, 127 + 1, 299]]).astype(np.int32)
    src = random_values(rng, idx.shape, "int32")
    got_scatter, got_gather = dask.compute(pto_dask.scatter(dtable, to_dask(src, 10), to_dask(idx, 10),
                                                               coalesce="elem"),
                                           pto_dask.gather(dtable, to_dask(idx, 10), coalesce="elem"))
    assert np.array_equal(got_scatter, in_memory.scatter(table.copy(), src, idx, coalesce="elem"))
    assert np.array_equal(got_scatter[64:128], table[64:128])
    assert np.array_equal(got_gather, table[idx])


# -- refusals ----------------------------------------------------------------------------------------------------------

def bad_indices(rng, cap):
    idx = rng.integers(0, cap, 60).astype(np.int32)
    idx[[7, 30, 31, 50]] = [cap, -1, cap + 5, -cap]
    return idx


@pytest.mark.parametrize("op", ["gather", "scatter"])
def test_numpy_indices_out_of_range_are_refused_before_anything_is_built(client, rng, op):
    table, dtable, _ = make_table(rng, "row", "float32")
    idx = bad_indices(rng, 150)
    src = random_values(rng, (60, 4), "float32")
    args = (idx,) if op == "gather" else (src, idx)
    with pytest.raises(pto.OutOfBoundsError) as local:
        getattr(in_memory, op)(table.copy(), *args)
    with pytest.raises(pto.OutOfBoundsError) as distributed:
        getattr(pto_dask, op)(dtable, *args)
    assert str(distributed.value) == str(local.value)
    assert "4 index(es) out of range [0, 150)" in str(distributed.value)


@pytest.mark.parametrize("op", ["gather", "scatter"])
@pytest.mark.parametrize("name", ["row", "elem-2d"])
def test_dask_indices_out_of_range_are_refused_at_compute_time_with_the_same_error(client, rng, op, name):
    table, dtable, coalesce = make_table(rng, name, "float32")
    cap = capacity(table, coalesce)
    idx = bad_indices(rng, cap)
    src = source(rng, table, coalesce, idx)
    args = (idx,) if op == "gather" else (src, idx)
    with pytest.raises(pto.OutOfBoundsError) as local:
        getattr(in_memory, op)(table.copy(), *args, coalesce=coalesce)
    dargs = (to_dask(idx, 13),) if op == "gather" else (to_dask(src, 13), to_dask(idx, 13))
    result = getattr(pto_dask, op)(dtable, *dargs, coalesce=coalesce)  # builds; nothing runs yet
    with pytest.raises(pto.OutOfBoundsError) as distributed:
        result.compute()
    assert str(distributed.value) == str(local.value)
    assert (distributed.value.count, distributed.value.positions) == (4, [7, 30, 31, 50])


def test_a_refused_scatter_writes_nothing_to_its_store(rng):
    """The refusal is a reduction every chunk's write depends on: a store target stays untouched."""
    table, dtable, _ = make_table(rng, "elem-1d", "int32")
    idx = bad_indices(rng, table.size)
    store = np.full(table.shape, -7, dtype=np.int32)
    with dask.config.set(scheduler="sync"), pytest.raises(pto.OutOfBoundsError):
        pto_dask.scatter(dtable, to_dask(idx), to_dask(idx), coalesce="elem", store=store)
    assert (store == -7).all()
    good = idx % table.size
    with dask.config.set(scheduler="sync"):
        assert pto_dask.scatter(dtable, to_dask(good), to_dask(good), coalesce="elem", store=store) is store
    assert np.array_equal(store, in_memory.scatter(table.copy(), good, good, coalesce="elem"))
    out = np.zeros(good.shape, np.int32)
    with dask.config.set(scheduler="sync"):
        assert pto_dask.gather(dtable, to_dask(good), coalesce="elem", out=out) is out
    assert np.array_equal(out, table[good])


OTHER_F8 = np.dtype(np.float64).newbyteorder("S")
REFUSED = {
    "src of another width": ("scatter", lambda t, s, i: (t, s[:, :3], i), {}),
    "float indices": ("gather", lambda t, s, i: (t, i.astype(np.float32)), {}),
    "Max on a2a3": ("scatter", lambda t, s, i: (t, s, i), {"atomic": "max", "target": "a2a3"}),
    "Default on a2a3": ("scatter", lambda t, s, i: (t, s, i), {"conflict": "default", "target": "a2a3"}),
    "a float64 table": ("gather", lambda t, s, i: (t.astype(np.float64), i), {}),
    "a float64 table in the other byte order": ("gather", lambda t, s, i: (t.astype(OTHER_F8), i), {}),
    "a float64 table under a scatter": ("scatter", lambda t, s, i: (t.astype(np.float64), s.astype(np.float64), i),
                                        {}),
    "a float64 src in the other byte order": ("scatter", lambda t, s, i: (t, s.astype(OTHER_F8), i), {}),
    "a 3-D table": ("gather", lambda t, s, i: (t.reshape(10, 4, 4), i), {}),
    "a tile too large for the UB": ("gather", lambda t, s, i: (t, i), {"tile_rows": 5, "dyn_ubuf_size": 64}),
}


@pytest.mark.parametrize("case", REFUSED)
def test_calls_the_in_memory_op_refuses_are_refused_with_its_error(rng, case):
    """Refused when the call is made (nothing is built), with the in-memory call's error and message."""
    op, arguments, kwargs = REFUSED[case]
    table = random_values(rng, (40, 4), "float32")
    src, idx = np.zeros((5, 4), np.float32), np.zeros(5, np.int32)
    with pytest.raises((pto.ConstraintError, TypeError)) as local:
        getattr(in_memory, op)(*arguments(table, src, idx), **kwargs)
    t, *rest = arguments(table, src, idx)
    with pytest.raises(local.type) as distributed:
        getattr(pto_dask, op)(da.from_array(t, chunks=(10,) + t.shape[1:]), *rest, **kwargs)
    assert str(distributed.value) == str(local.value)



@pytest.mark.parametrize("target", ["a2a3", "a5"])
@pytest.mark.parametrize("tile_rows", [1, 2])
@pytest.mark.parametrize("op", ["gather", "scatter"])
def test_an_elem_call_whose_tiles_hold_long_index_rows_runs_as_the_in_memory_call(client, rng, op, tile_rows, target):
    """Index rows of 4096 with ``tile_rows`` 1 or 2: the in-memory call's tiles hold whole rows, within the UB. Each
    chunk's call takes its indices as one flat run of as many elements per tile; on A2/A3 a flat tile pads each
    element to a row of eight, and one of 4096 elements overflowed the UB, so the call was refused at compute time
    although the in-memory call runs. Oracles: ``np.add.at`` and numpy indexing."""
    table = rng.integers(-9, 9, 50000).astype(np.int32)
    idx = rng.integers(0, 50000, (7, 4096)).astype(np.int32)
    dtable, didx = da.from_array(table, chunks=20000), da.from_array(idx, chunks=(3, 4096))
    if op == "gather":
        got = pto_dask.gather(dtable, didx, coalesce="elem", target=target, tile_rows=tile_rows).compute()
        assert np.array_equal(got, table[idx])
        return
    src = rng.integers(-9, 9, idx.shape).astype(np.int32)
    got = pto_dask.scatter(dtable, src, didx, coalesce="elem", atomic="add", target=target,
                           tile_rows=tile_rows).compute()
    want = table.copy()
    np.add.at(want, idx.reshape(-1), src.reshape(-1))
    assert np.array_equal(got, want)


def test_a_numpy_scalar_index_next_to_a_dask_table_is_the_0d_index_the_in_memory_call_reads(client, rng):
    table = random_values(rng, (40, 4), "float32")
    dtable = da.from_array(table, chunks=(10, 4))
    assert np.array_equal(as_bits(pto_dask.gather(dtable, np.int32(7)).compute()), as_bits(table[7]))
    src = random_values(rng, (4,), "float32")
    want = in_memory.scatter(table.copy(), src, np.int32(7))
    assert np.array_equal(as_bits(pto_dask.scatter(dtable, src, np.uint16(7)).compute()), as_bits(want))
    assert np.array_equal(as_bits(want[7]), as_bits(src))

def test_tables_cut_along_columns_and_numpy_tables_under_a_scatter_are_refused(rng):
    table = random_values(rng, (40, 8), "float32")
    with pytest.raises(pto.ConstraintError, match=r"rechunk\(\{1: -1\}\) \(rule: a Dask table is chunked along its rows only"):
        pto_dask.gather(da.from_array(table, chunks=(10, 4)), np.zeros(3, np.int32))
    with pytest.raises(TypeError, match="table: a scatter with Dask indices"):
        pto_dask.scatter(table, to_dask(np.zeros((3, 8), np.float32)), np.zeros(3, np.int32))


# -- the graph: tasks per chunk pair, none per index ------------------------------------------------------------

def test_tasks_scale_with_chunk_pairs_not_with_indices(rng):
    table, dtable, _ = make_table(rng, "row", "float32")
    sizes = []
    for n in (40, 4000):
        idx = da.from_array(rng.integers(0, 150, n).astype(np.int32), chunks=n // 4)
        src = da.from_array(random_values(rng, (n, 4), "float32"), chunks=(n // 4, 4))
        graph_g = dict(pto_dask.gather(dtable, idx).__dask_graph__())
        graph_s = dict(pto_dask.scatter(dtable, src, idx).__dask_graph__())
        sizes.append((len(graph_g), len(graph_s)))
    assert sizes[0] == sizes[1]
    index_chunks, table_chunks = 4, 4
    assert sizes[0][0] <= 4 * (index_chunks * table_chunks) + 4 * (index_chunks + table_chunks)


# -- workers ---------------------------------------------------------------------------------------------------------

def test_warm_reaches_every_worker(client):
    took = pto_dask.warm(client, dtypes=("int32",))
    assert set(took) == set(client.nthreads())


def test_warm_reaches_every_worker_when_the_clients_worker_list_is_empty(client, monkeypatch):
    # distributed's periodic refresh replaces the client's copy of the scheduler's identity with one that lists no
    # worker; a scheduler_info() read just after it gives none (seen in a test run)
    monkeypatch.setattr(client, "scheduler_info", lambda *a, **k: {"workers": {}})
    took = pto_dask.warm(client, dtypes=("int32",))
    assert set(took) == set(client.nthreads()) and len(took) == 2


def test_a_worker_restarted_between_two_calls(client, rng):
    table, dtable, coalesce = make_table(rng, "row", "float32")
    dtable = dtable.persist()
    idx = rng.integers(0, 150, 90).astype(np.int32)
    src = random_values(rng, (90, 4), "float32")
    want = in_memory.scatter(table.copy(), src, idx)
    first = pto_dask.scatter(dtable, to_dask(src), to_dask(idx)).compute()
    worker = sorted(client.nthreads())[0]
    client.restart_workers([worker])
    client.wait_for_workers(2)
    second = pto_dask.scatter(dtable, to_dask(src), to_dask(idx)).compute()
    assert as_bits(first).tobytes() == as_bits(want).tobytes() == as_bits(second).tobytes()


# -- the entry point: pto.gather / pto.scatter hand a Dask array here -------------------------------------------

def test_pto_gather_and_scatter_take_dask_arrays(client, rng):
    table, dtable, _ = make_table(rng, "row", "float32")
    idx = rng.integers(-3, 160, 50).astype(np.int32)
    src = random_values(rng, (50, 4), "float32")
    gathered = pto.gather(dtable, to_dask(idx), oob="clamp")
    scattered = pto.scatter(dtable, to_dask(src), to_dask(idx), oob="wrap")
    assert isinstance(gathered, da.Array) and isinstance(scattered, da.Array)
    assert np.array_equal(as_bits(gathered.compute()), as_bits(in_memory.gather(table, idx, oob="clamp")))
    assert np.array_equal(as_bits(scattered.compute()), as_bits(in_memory.scatter(table.copy(), src, idx, oob="wrap")))


def test_pto_scatter_refuses_dask_indices_at_compute_time(client, rng):
    table, dtable, _ = make_table(rng, "elem-1d", "int32")
    idx = bad_indices(rng, table.size)
    with pytest.raises(pto.OutOfBoundsError, match="4 index"):
        pto.scatter(dtable, to_dask(idx), to_dask(idx), coalesce="elem").compute()


def test_ordinary_calls_never_import_dask():
    """The core tells a Dask array apart without importing Dask: numpy calls leave it unloaded."""
    probe = ("import sys, numpy as np, simt_pto as pto; t = np.zeros((4, 2), np.float32); i = np.zeros(3, np.int32); "
             "pto.gather(t, i, target='cpu'); pto.scatter(t, np.ones((3, 2), np.float32), i, target='cpu'); "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))")
    done = run_python(probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_old_import_path_warns_and_gives_the_same_functions():
    """``simt_pto.host.dask_tables`` stays for one release, as a deprecated alias of ``simt_pto.dask``."""
    import importlib
    import sys
    sys.modules.pop("simt_pto.host.dask_tables", None)
    with pytest.warns(DeprecationWarning, match="import simt_pto.dask instead"):
        old = importlib.import_module("simt_pto.host.dask_tables")
    assert (old.gather, old.scatter, old.warm) == (pto_dask.gather, pto_dask.scatter, pto_dask.warm)
