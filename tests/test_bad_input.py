"""Bad and odd input (issue: bad input never corrupts memory, never writes after a refusal): each case here
failed before its fix. Oracles are plain numpy on ordinary arrays.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import requires_cuda

import simt_pto as pto

TARGETS = ("cpu", "a2a3", "a5")


# -- ndarray subclasses: their memory, seen as a plain array ---------------------------------------------------

pytestmark = pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")


@pytest.mark.parametrize("target", TARGETS)
def test_matrix_table_elem_scatter_and_row_gather(target):
    table = np.matrix(np.zeros((8, 32), np.float32))
    pto.scatter(table, np.array([1, 2, 3], np.float32), np.array([1, 2, 40], np.int32), coalesce="elem",
                target=target)
    want = np.zeros(256, np.float32)
    want[[1, 2, 40]] = [1, 2, 3]
    np.testing.assert_array_equal(np.asarray(table).ravel(), want)
    source = np.arange(256, dtype=np.float32).reshape(8, 32)
    got = pto.gather(np.matrix(source), np.array([1, 7], np.int32), coalesce="row", target=target)
    assert type(got) is np.ndarray
    np.testing.assert_array_equal(got, source[[1, 7]])


@pytest.mark.parametrize("target", ("a2a3", "a5"))
def test_matrix_table_row_scatter_writes_inside_the_table(target):
    """Was a heap corruption on a2a3 (np.matrix keeps reshape(-1) 2-D, so the loop walked past the buffer)."""
    buffer = np.full(8 * 32 + 64, -1.0, np.float32)  # the table, then a guard band
    table = buffer[:256].reshape(8, 32).view(np.matrix)
    pto.scatter(table, np.ones((2, 32), np.float32), np.array([1, 2], np.int32), coalesce="row", target=target)
    want = np.full((8, 32), -1.0, np.float32)
    want[[1, 2]] = 1.0
    np.testing.assert_array_equal(np.asarray(table), want)
    assert (buffer[256:] == -1.0).all(), "wrote past the table"


# -- masked arrays: refused, naming the argument, before anything is written --------------------------------------
# (read as their memory, a masked array's masked elements would be gathered and overwritten as any other, and its mask
# left as it was: numpy's own table[idx] keeps the mask, and its table[idx] = rows unmasks what it writes)

def _masked(array):
    """``array`` as a masked array with its first element masked."""
    mask = np.zeros(array.shape, bool)
    mask.flat[0] = True
    return np.ma.array(array, mask=mask)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("repeated", [False, True], ids=["first call", "after the signature ran"])
def test_a_masked_operand_is_refused_naming_it_and_nothing_is_written(target, repeated):
    rng = np.random.default_rng(5)
    table = rng.standard_normal((16, 32)).astype(np.float32)
    src = rng.standard_normal((4, 32)).astype(np.float32)
    idx = np.array([3, 0, 9, 15], np.int32)
    out = np.zeros((4, 32), np.float32)
    masked_table = _masked(table.copy())
    row = dict(coalesce="row", target=target)
    if repeated:  # the same shapes with plain arrays first: the repeated call's kept launch must refuse them too
        pto.gather(table.copy(), idx, **row)
        pto.gather(table.copy(), idx, out=out.copy(), **row)
        pto.scatter(table.copy(), src, idx, **row)
    calls = [("table", lambda: pto.gather(masked_table, idx, **row)),
             ("idx", lambda: pto.gather(table, _masked(idx), **row)),
             ("out", lambda: pto.gather(table, idx, out=_masked(out), **row)),
             ("table", lambda: pto.scatter(masked_table, src, idx, **row)),
             ("src", lambda: pto.scatter(table, _masked(src), idx, **row)),
             ("idx", lambda: pto.scatter(table, src, _masked(idx), **row))]
    before = table.copy(), masked_table.data.copy(), masked_table.mask.copy()
    for name, call in calls:
        with pytest.raises(TypeError, match=rf"^{name}: a numpy masked array, whose mask would be ignored"):
            call()
    assert np.array_equal(table, before[0]) and np.array_equal(masked_table.data, before[1])
    assert np.array_equal(masked_table.mask, before[2])
    assert not out.any()


def test_the_tile_api_refuses_masked_arrays():
    masked = np.ma.array(np.arange(16, dtype=np.float32).reshape(2, 8), mask=[[True] * 8, [False] * 8])
    for what, call in (("GlobalTensor array", lambda: pto.GlobalTensor(masked)),
                       ("Tile.from_array", lambda: pto.Tile.from_array(masked)),
                       ("Tile.set", lambda: pto.Tile("float32", 2, 8).set(masked)),
                       ("Tile.fill", lambda: pto.Tile("float32", 2, 8).fill(np.ma.array([1.0], mask=[True])))):
        with pytest.raises(TypeError, match=rf"^{what}: a numpy masked array"):
            call()
    # what the message offers works: the memory as it is, or the values with one in the masked places
    assert pto.Tile.from_array(masked.data).valid_numpy()[0, 0] == 0.0
    assert pto.Tile.from_array(masked.filled(-1.0)).valid_numpy()[0, 0] == -1.0


def test_a_dask_array_of_masked_chunks_is_refused():
    da = pytest.importorskip("dask.array", reason="needs the dask extra: pip install 'simt_pto[dask]'")
    table = da.ma.masked_array(da.zeros((8, 32), dtype=np.float32, chunks=(4, 32)), mask=True)
    idx = da.from_array(np.array([1, 2], np.int32), chunks=1)
    with pytest.raises(TypeError, match=r"^table: a Dask array of masked chunks"):
        pto.gather(table, idx, coalesce="row")
    with pytest.raises(TypeError, match=r"^idx: a Dask array of masked chunks"):
        pto.gather(da.zeros((8, 32), dtype=np.float32, chunks=(4, 32)), da.ma.masked_array(idx), coalesce="row")
    plain = da.zeros((8, 32), dtype=np.float32, chunks=(4, 32))
    for what, call in (("idx", lambda out: pto.gather(plain, np.ma.array(np.array([1, 2], np.int32)), coalesce="row")),
                       ("out", lambda out: pto.gather(plain, idx, coalesce="row", out=out))):
        out = np.ma.array(np.full((2, 32), 7.0, np.float32), mask=False)
        with pytest.raises(TypeError, match=rf"^{what}: a numpy masked array"):
            call(out)
        assert (out.data == 7.0).all()


# -- read-only arrays: read-only inputs work, a read-only output is refused before anything is written ----------

def _read_only(array):
    array = np.array(array)
    array.flags.writeable = False
    return array


@pytest.fixture(params=["multicore", pytest.param("simulator", marks=requires_cuda)])
def a5_backend_under_test(request):
    """The A5 backends without a GPU; the simulator used to copy every kernel argument back after a launch."""
    previous = pto.a5_backend()
    if request.param not in pto.a5_backends():
        pytest.skip(f"no {request.param} backend in this process")
    pto.set_a5_backend(request.param)
    try:
        yield request.param
    finally:
        pto.set_a5_backend(previous)


def test_scatter_with_read_only_src_and_idx(a5_backend_under_test):
    table = np.zeros(16, np.float32)
    src, idx = _read_only(np.array([1, 2, 3], np.float32)), _read_only(np.array([1, 2, 9], np.int32))
    pto.scatter(table, src, idx, coalesce="elem", target="a5")
    want = np.zeros(16, np.float32)
    want[[1, 2, 9]] = [1, 2, 3]
    np.testing.assert_array_equal(table, want)


def test_gather_from_read_only_table_and_idx(a5_backend_under_test):
    table, idx = _read_only(np.arange(16, dtype=np.float32)), _read_only(np.array([3, 0, 15], np.int32))
    np.testing.assert_array_equal(pto.gather(table, idx, coalesce="elem", target="a5"), [3, 0, 15])
    rows = pto.gather(table.reshape(2, 8), _read_only(np.array([1], np.int32)), coalesce="row", target="a5")
    np.testing.assert_array_equal(rows, [np.arange(8, 16)])


@pytest.mark.parametrize("coalesce", ["row", "elem"])
@pytest.mark.parametrize("target", TARGETS)
def test_read_only_table_is_refused_before_any_write(target, coalesce):
    table = _read_only(np.zeros((4, 8), np.float32))
    src = np.ones((2, 8), np.float32) if coalesce == "row" else np.ones(2, np.float32)
    with pytest.raises(pto.ConstraintError, match=r"MSCATTER on \w+: table is a read-only array .*written in place"):
        pto.scatter(table, src, np.array([1, 2], np.int32), coalesce=coalesce, target=target)
    assert not table.any()


@pytest.mark.parametrize("target, exec_", [("a2a3", "scalar"), ("a5", "scalar"), ("a5", "simt")])
def test_l1_gather_refuses_a_read_only_scratch(target, exec_):
    from test_l1 import ElemCase
    case = ElemCase("float32", "clamp")
    tile, _bits, scratch = case.fresh()
    scratch.array.flags.writeable = False
    with pytest.raises(pto.ConstraintError, match="scratch is a read-only array"):
        case.run(target, tile, scratch, exec_)


# -- aliasing ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_the_same_tile_as_destination_and_index_is_refused(target):
    tile = pto.Tile.from_array(np.arange(8, dtype=np.int32).reshape(1, 8))
    before = tile.numpy().copy()
    table = pto.GlobalTensor(np.arange(100, 164, dtype=np.int32))
    with pytest.raises(pto.ConstraintError, match="dst and idx share memory"):
        pto.mgather(tile, table, tile, coalesce="elem", target=target)
    np.testing.assert_array_equal(tile.numpy(), before)


@pytest.mark.parametrize("target", TARGETS)
def test_the_same_tile_as_source_and_index_is_refused(target):
    tile = pto.Tile.from_array(np.arange(8, dtype=np.int32).reshape(1, 8))
    table = np.zeros(16, np.int32)
    with pytest.raises(pto.ConstraintError, match="src and idx share memory"):
        pto.mscatter(pto.GlobalTensor(table), tile, tile, coalesce="elem", target=target)
    assert not table.any()


# -- whole-array calls on the cpu target ------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_whole_array_row_scatter_on_every_target(target):
    table = np.zeros((4, 8), np.float32)
    src = np.arange(24, dtype=np.float32).reshape(3, 8)
    idx = np.array([1, 3, 1], np.int32)
    want = table.copy()
    for r, row in enumerate(idx):  # the sequential order: the last writer of row 1 is source row 2
        want[row] = src[r]
    pto.scatter(table, src, idx, coalesce="row", target=target)
    np.testing.assert_array_equal(table, want)


def test_cpu_row_scatter_refuses_an_out_of_range_row_before_any_write():
    table = np.zeros((4, 8), np.float32)
    with pytest.raises(pto.OutOfBoundsError, match=r"out of range \[0, 4\) \(the CPU simulator's MSCATTER ignores"):
        pto.scatter(table, np.ones((2, 8), np.float32), np.array([0, -1], np.int32), coalesce="row", target="cpu")
    assert not table.any()


def test_whole_array_atomic_on_cpu_warns_and_replaces():
    table = np.zeros(4, np.float32)
    with pytest.warns(UserWarning, match=r"atomic ADD is a plain replace on the CPU simulator.*target='a2a3'"):
        pto.scatter(table, np.array([1, 2, 3, 4], np.float32), np.array([0, 1, 1, 1], np.int32), coalesce="elem",
                    atomic="add", target="cpu")
    np.testing.assert_array_equal(table, [1, 4, 0, 0])  # MSCATTER.md: "Atomic is always plain replace"


@pytest.mark.parametrize("coalesce, src_shape", [("row", (3, 8)), ("elem", (3,))])
@pytest.mark.parametrize("target", TARGETS)
def test_the_calls_own_shape_error_comes_before_the_targets_rules(target, coalesce, src_shape):
    table = np.zeros((4, 8), np.float32)
    with pytest.raises(pto.ConstraintError, match=r"src \(3(, 8)?,?\) float32, expected \(2,( 8)?\) float32"):
        pto.scatter(table, np.ones(src_shape, np.float32), np.array([0, 1], np.int32), coalesce=coalesce,
                    target=target)
    assert not table.any()


# -- values and arguments: refused, not wrapped or misread -----------------------------------------------------

@pytest.mark.parametrize("dtype, values, message", [
    ("int32", [2 ** 32 + 5], r"4294967301 is outside \[-2147483648, 2147483647\]"),
    ("int32", [np.nan], "NaN or infinity cannot be stored as int32"),
    ("uint8", [-1.0], r"-1.0 is outside \[0, 255\]"),
    ("int8", [np.inf], "NaN or infinity cannot be stored as int8"),
    ("float16", [1e10], r"10000000000.0 is beyond the largest float16 \(65504.0\)"),
    ("float8_e4m3", [1000], r"1000.0 is beyond the largest float8_e4m3 \(448.0\)"),
])
def test_from_array_refuses_a_value_the_dtype_cannot_hold(dtype, values, message):
    with pytest.raises(pto.ConstraintError, match=message):
        pto.Tile.from_array(np.array([values]), 1, 32, dtype=dtype, valid=(1, 1))


def test_a_gather_through_a_wrapped_index_is_impossible():
    """Was: the int64 index 2**32 + 5 became 5 in an int32 tile, and the gather read element 5."""
    with pytest.raises(pto.ConstraintError, match="values fit int32"):
        pto.Tile.from_array(np.array([[2 ** 32 + 5, 0, 0, 0, 0, 0, 0, 0]], np.int64), dtype="int32", valid=(1, 1))


@pytest.mark.parametrize("dtype, value, want", [("float16", 0.1, np.float16(0.1)), ("int32", 1.7, 1),
                                                ("bfloat16", np.inf, np.inf), ("float16", -65504.0, -65504.0)])
def test_ordinary_casts_still_cast(dtype, value, want):
    tile = pto.Tile(dtype, 1, 32).fill(value)
    assert tile.numpy()[0, 0] == want


def test_fill_refuses_a_value_the_dtype_cannot_hold():
    tile = pto.Tile("int8", 1, 32)
    with pytest.raises(pto.ConstraintError, match=r"Tile.fill: 1000 is outside \[-128, 127\]"):
        tile.fill(1000)
    assert not tile.numpy().any()


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(shape="16"), TypeError, "shape must be a tuple of 1 to 5 ints, got '16'"),
    (dict(shape=8), TypeError, "shape must be a tuple of 1 to 5 ints, got 8"),
    (dict(shape=(2.9, 4)), TypeError, r"shape must be a tuple of ints, got \(2.9, 4\) \(2.9 is a float\)"),
    (dict(shape=(16,), stride=(1.0,)), TypeError, "stride must be a tuple of ints"),
])
def test_global_tensor_refuses_a_malformed_shape(kwargs, error, message):
    with pytest.raises(error, match=message):
        pto.GlobalTensor(np.zeros(16, np.float32), **kwargs)


@pytest.mark.parametrize("args, kwargs, error, message", [
    (("int8", 2 ** 20, 2 ** 20), {}, pto.ConstraintError, r"a tile is on-chip memory \(UB, L1\)"),
    (("int8", 1, 32), dict(valid=5), TypeError, r"valid must be \(valid_rows, valid_cols\), got 5"),
    (("int8", 1, 32), dict(fractal="abc"), TypeError, "fractal must be an int"),
    ((None, 1, 32), {}, TypeError, "dtype: None is not an element dtype"),
])
def test_tile_arguments_are_named_in_the_error(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        pto.Tile(*args, **kwargs)


@pytest.mark.parametrize("dyn", [-1, 1.5, 1e9, True])
def test_dyn_ubuf_size_is_checked_on_every_target(dyn):
    with pytest.raises(TypeError, match="dyn_ubuf_size must be a non-negative int"):
        pto.gather(np.zeros(64, np.float32), np.array([1], np.int32), coalesce="elem", target="cpu",
                   dyn_ubuf_size=dyn)


# -- TLOAD / TSTORE cost the tile, not the table ------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(65536, 64), (4, 16, 1024, 64)])
def test_tload_and_tstore_cost_the_tile_not_the_table(shape):
    """Was: an 8 x 64 TLOAD from a 16 MB table built np.indices over the whole tensor (a 224 MB peak)."""
    import tracemalloc
    table = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)  # 16 MB
    gt = pto.GlobalTensor(table)
    tile = pto.Tile("float32", 8, 64)
    small = pto.GlobalTensor(np.zeros((8, 64), np.float32))
    pto.tload(tile, small)  # what a process's first TLOAD / TSTORE costs once (imports), outside the count
    pto.tstore(small, tile)
    tracemalloc.start()
    try:
        pto.tload(tile, gt)
        loaded = tile.numpy()
        tile.fill(-1.0)
        pto.tstore(gt, tile)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, f"peak {peak} B for an 8 x 64 tile"
    flat = table.reshape(-1, 64)
    np.testing.assert_array_equal(loaded, np.arange(8 * 64, dtype=np.float32).reshape(8, 64))
    assert (flat[:8] == -1.0).all() and flat[8, 0] == 8 * 64
