"""The data model: Tile, GlobalTensor, the NZ helpers, TLOAD / TSTORE and dtype resolution.

Every expected layout is computed here from the spec's formulas with plain loops:
RowMajor ``r * Cols + c``, ColMajor ``c * Rows + r``, NZ tile
``(c // kC0) * (Rows * kC0) + r * kC0 + c % kC0`` (MGATHER.md, "NZ Layout (A2/A3)"), and NZ GM buffers
as 16 x kC0 fractal blocks concatenated block-row fastest, then block-col, then batch.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import simt_pto as pto
from conftest import as_bits, random_values, sentinel_bits


def rowmajor_offset(r, c, rows, cols):
    return r * cols + c


def colmajor_offset(r, c, rows, cols):
    return c * rows + r


def nz_tile_offset(r, c, rows, cols, kc0):
    return (c // kc0) * (rows * kc0) + r * kc0 + c % kc0


# (dtype, rows, cols, layout): each shape satisfies that layout's 32-byte / fractal rule.
LAYOUT_CASES = [
    ("float32", 3, 8, "row"), ("int8", 2, 64, "row"), ("bfloat16", 5, 16, "row"),
    ("float32", 8, 3, "col"), ("uint16", 16, 5, "col"), ("int8", 32, 2, "col"),
    ("float32", 16, 16, "nz"), ("float16", 32, 32, "nz"), ("int8", 16, 64, "nz"), ("uint32", 48, 8, "nz"),
]


def make_tile(dtype, rows, cols, layout, **kw):
    if layout == "row":
        return pto.Tile(dtype, rows, cols, **kw)
    if layout == "col":
        return pto.Tile(dtype, rows, cols, blayout="col_major", **kw)
    return pto.Tile(dtype, rows, cols, blayout="col_major", slayout="row_major", **kw)


def expected_offset(tile, r, c, layout):
    if layout == "row":
        return rowmajor_offset(r, c, tile.rows, tile.cols)
    if layout == "col":
        return colmajor_offset(r, c, tile.rows, tile.cols)
    return nz_tile_offset(r, c, tile.rows, tile.cols, 32 // tile.dtype.itemsize)


@pytest.mark.parametrize("dtype, rows, cols, layout", LAYOUT_CASES)
def test_tile_numpy_reads_storage_through_the_layout(dtype, rows, cols, layout, rng):
    tile = make_tile(dtype, rows, cols, layout, valid=(max(1, rows - 1), max(1, cols - 2)))
    tile.data[:] = random_values(rng, tile.data.shape, dtype)
    whole = as_bits(tile.numpy())
    storage = as_bits(tile.data)
    assert whole.shape == (rows, cols)
    for r in range(rows):
        for c in range(cols):
            assert whole[r, c] == storage[expected_offset(tile, r, c, layout)]
    vr, vc = tile.valid
    assert tile.valid_numpy().shape == (vr, vc)
    assert (as_bits(tile.valid_numpy()) == whole[:vr, :vc]).all()
    # numpy() is a copy: writing into it leaves the tile alone
    before = storage.copy()
    tile.numpy()[...] = 0
    assert (as_bits(tile.data) == before).all()


@pytest.mark.parametrize("dtype, rows, cols, layout", LAYOUT_CASES)
def test_tile_grid_is_a_view_through_the_layout(dtype, rows, cols, layout, rng):
    tile = make_tile(dtype, rows, cols, layout)
    if layout == "nz":
        with pytest.raises(ValueError, match="NZ"):
            tile.grid()
        return
    tile.data[:] = random_values(rng, tile.data.shape, dtype)
    grid = tile.grid()
    assert grid.shape == (rows, cols)
    r, c = rows - 1, cols // 2
    assert as_bits(grid[r:r + 1, c:c + 1])[0, 0] == as_bits(tile.data)[expected_offset(tile, r, c, layout)]
    grid[r, c] = tile.data[0]  # a view: the write lands in storage at the layout's offset
    assert as_bits(tile.data)[expected_offset(tile, r, c, layout)] == as_bits(tile.data)[0]


@pytest.mark.parametrize("dtype, rows, cols, layout", LAYOUT_CASES)
def test_tile_from_array_places_each_element_and_zero_pads(dtype, rows, cols, layout, rng):
    arr_rows, arr_cols = max(1, rows - 1), max(1, cols - 1)
    array = random_values(rng, (arr_rows, arr_cols), dtype)
    kw = {} if layout == "row" else {"blayout": "col_major"}
    if layout == "nz":
        kw["slayout"] = "row_major"
    tile = pto.Tile.from_array(array, rows, cols, **kw)
    assert tile.dtype == pto.dtypes.resolve(dtype)
    assert tile.valid == (arr_rows, arr_cols)          # valid defaults to the array's shape
    expected = np.zeros(rows * cols, dtype=pto.dtypes.resolve(dtype).bits)
    for r in range(arr_rows):
        for c in range(arr_cols):
            expected[expected_offset(tile, r, c, layout)] = as_bits(array)[r, c]
    assert (as_bits(tile.data) == expected).all()
    assert (as_bits(tile.valid_numpy()) == as_bits(array)).all()


@pytest.mark.parametrize("dtype, rows, cols, layout", LAYOUT_CASES)
def test_tile_fill_covers_the_padded_tile(dtype, rows, cols, layout):
    tile = make_tile(dtype, rows, cols, layout, valid=(1, 1))
    tile.fill(3)
    assert (tile.numpy() == np.asarray(3).astype(tile.dtype.numpy)).all()
    assert tile.numpy().shape == (rows, cols)


def test_from_array_defaults_and_one_d_input():
    tile = pto.Tile.from_array(np.array([1, 2, 3], dtype=np.int32), cols=8)
    assert (tile.rows, tile.cols, tile.valid) == (1, 8, (1, 3))
    assert tile.numpy().tolist() == [[1, 2, 3, 0, 0, 0, 0, 0]]
    # dtype converts: float values truncate into an int32 tile
    t2 = pto.Tile.from_array(np.array([[1.7, -2.2]]), 1, 8, dtype="int32", valid=(1, 1))
    assert t2.valid == (1, 1) and t2.numpy()[0, :2].tolist() == [1, -2]
    with pytest.raises(TypeError, match="expected a 1-D or 2-D array, got 3-D"):
        pto.Tile.from_array(np.zeros((2, 2, 8), np.float32))


def test_hifloat8_tiles_move_raw_bits():
    raw = np.array([[0x00, 0x7F, 0x80, 0xFF]], dtype=np.uint8)
    tile = pto.Tile.from_array(raw, 1, 32, dtype="hifloat8")
    assert tile.dtype.name == "hifloat8" and tile.dtype.kind == "opaque"
    assert tile.valid_numpy().tolist() == raw.tolist()
    signed = pto.Tile.from_array(np.array([[-1, 1]], dtype=np.int8), 1, 32, dtype="hifloat8")
    assert signed.valid_numpy().tolist() == [[0xFF, 0x01]]
    with pytest.raises(TypeError, match="hifloat8: pass the raw bits as a uint8 array, got float32"):
        pto.Tile.from_array(np.ones((1, 4), np.float32), 1, 32, dtype="hifloat8")


def test_tile_set_writes_the_top_left_corner():
    tile = pto.Tile("int16", 4, 16).fill(-1)
    tile.set(np.array([[1, 2], [3, 4]]))
    out = tile.numpy()
    assert out[:2, :2].tolist() == [[1, 2], [3, 4]]
    assert (out[2:, :] == -1).all() and (out[:, 2:] == -1).all()


def test_tile_properties():
    t = pto.Tile("float16", 4, 32, valid=(3, 20), addr=0x400, name="dst")
    assert t.nbytes == 4 * 32 * 2
    assert t.strides == (32, 1)
    assert pto.Tile("float32", 8, 4, blayout="col_major").strides == (1, 8)
    assert t.c0 == 16 and pto.Tile("int8", 1, 32).c0 == 32 and pto.Tile("float32", 1, 8).c0 == 8
    text = repr(t)
    assert "dst" in text and "0x400" in text and "valid 3x20" in text
    nzt = pto.Tile("float32", 16, 8, blayout="col_major", slayout="row_major")
    assert nzt.is_nz and not t.is_nz
    with pytest.raises(ValueError, match="NZ tiles have no 2-D strides"):
        nzt.strides


# -- dtypes ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("given, name", [
    ("half", "float16"), ("fp16", "float16"), ("float", "float32"), ("bf16", "bfloat16"), ("BFloat16", "bfloat16"),
    ("e4m3", "float8_e4m3"), ("float8_e5m2_t", "float8_e5m2"), ("hif8", "hifloat8"), ("int32_t", "int32"),
    (np.float16, "float16"), (np.dtype(np.uint8), "uint8"), (ml_dtypes.bfloat16, "bfloat16"),
    (ml_dtypes.float8_e4m3fn, "float8_e4m3"), (ml_dtypes.float8_e5m2, "float8_e5m2"), (np.int32, "int32"),
])
def test_dtype_resolution(given, name):
    assert pto.dtypes.resolve(given).name == name


def test_dtype_resolution_errors():
    with pytest.raises(TypeError, match="dtype: int64 is not a PTO element dtype"):
        pto.dtypes.resolve(np.int64)
    with pytest.raises(TypeError, match="cannot interpret 'float128x' as an element dtype"):
        pto.dtypes.resolve("float128x")


@pytest.mark.parametrize("name, itemsize", [("int8", 1), ("hifloat8", 1), ("float8_e5m2", 1), ("bfloat16", 2),
                                            ("uint16", 2), ("float32", 4), ("uint32", 4)])
def test_dtype_widths(name, itemsize):
    d = pto.dtypes.resolve(name)
    assert d.itemsize == itemsize and d.bits == np.dtype(f"uint{8 * itemsize}")


@pytest.mark.parametrize("name", [d.name for d in pto.dtypes.ALL_DTYPES])
def test_a_dtype_is_one_object_wherever_it_travels(name):
    """DTypes compare by identity (one object per name): a pickled one (a Dask worker's, a process pool's), a copy
    and a resolved spelling are the table's own object, and a policy holding one travels equal and hashes alike."""
    import copy
    import pickle

    from simt_pto.call import gather_policy
    d = pto.dtypes.resolve(name)
    assert pickle.loads(pickle.dumps(d)) is d and copy.copy(d) is d and copy.deepcopy(d) is d
    assert pto.dtypes.resolve(d.numpy if name not in ("hifloat8",) else name) is d
    policy = gather_policy("row", "clamp", "a5", None, None, True, name)
    shipped = pickle.loads(pickle.dumps(policy))
    assert shipped == policy and hash(shipped) == hash(policy) and shipped.dtype is d
    assert d != pto.dtypes.resolve("uint8" if name != "uint8" else "int8")


# -- GlobalTensor ---------------------------------------------------------------------------------------------

def test_global_tensor_defaults_2d():
    g = pto.GlobalTensor(np.zeros((6, 10), np.float32))
    assert g.shape == (1, 1, 1, 6, 10)
    assert g.stride == (60, 60, 60, 10, 1)
    assert (g.size, g.reach, g.table_size) == (60, 60, 60)
    assert g.layout == pto.Layout.ND and g.dtype.name == "float32"


def test_global_tensor_defaults_1d_and_3d():
    g = pto.GlobalTensor(np.zeros(17, np.int16))
    assert g.shape == (1, 1, 1, 1, 17) and g.stride == (17, 17, 17, 17, 1)
    g3 = pto.GlobalTensor(np.zeros((2, 3, 8), np.int8))
    assert g3.shape == (1, 1, 2, 3, 8) and g3.stride == (48, 48, 24, 8, 1)


def test_global_tensor_shape_over_part_of_the_memory():
    buf = np.arange(50, dtype=np.int32)
    g = pto.GlobalTensor(buf, shape=(4, 10), stride=(12, 1))
    assert g.shape == (1, 1, 1, 4, 10) and g.stride[3:] == (12, 1)
    assert g.reach == 3 * 12 + 9 + 1
    expected = [[r * 12 + c for c in range(10)] for r in range(4)]
    assert g.logical().tolist() == expected
    assert g.table_size == 40 and g.size == 50


def test_global_tensor_reinterprets_and_views():
    buf = np.array([1.0, -2.0], dtype=np.float32)
    g = pto.GlobalTensor(buf, dtype="int32")
    assert g.dtype.name == "int32"
    assert g.host_flat().tolist() == buf.view(np.int32).tolist()
    g.host_flat()[0] = 7           # a view of the caller's memory
    assert buf.view(np.int32)[0] == 7
    assert g.numpy() is buf
    h = pto.GlobalTensor(np.zeros(32, np.uint8), dtype="hifloat8")
    assert h.dtype.name == "hifloat8"


def test_global_tensor_type_errors():
    with pytest.raises(TypeError, match="GlobalTensor: expected a numpy or device array, got list"):
        pto.GlobalTensor([1, 2, 3])


# -- NZ helpers -------------------------------------------------------------------------------------------------

def brute_force_nz(matrix, kc0, batches=1, block_col_pad=0):
    """NZ GM buffer of ``matrix`` built by concatenating 16 x kC0 blocks (block rows fastest), then
    ``block_col_pad`` zero elements after every block column. Returns (buffer, 5-D shape, 5-D stride)."""
    lrows, lcols = matrix.shape
    brows, bcols = lrows // 16, lcols // (kc0 * batches)
    pieces = []
    for b in range(batches):
        for bc in range(bcols):
            c0 = (b * bcols + bc) * kc0
            for br in range(brows):
                pieces.append(matrix[br * 16:(br + 1) * 16, c0:c0 + kc0].reshape(-1))
            pieces.append(np.zeros(block_col_pad, dtype=matrix.dtype))
    s1 = brows * 16 * kc0 + block_col_pad
    stride = (bcols * s1, s1, 16 * kc0, kc0, 1)
    return np.concatenate(pieces), (batches, bcols, brows, 16, kc0), stride


@pytest.mark.parametrize("dtype, lrows, lcols, batches, pad", [
    ("float32", 16, 8, 1, 0), ("float32", 32, 24, 1, 0), ("float16", 48, 32, 2, 0), ("int8", 16, 64, 1, 0),
    ("bfloat16", 32, 64, 2, 0), ("float32", 32, 16, 1, 8), ("uint16", 16, 48, 3, 16),
])
def test_nz_from_matrix_matches_a_brute_force_layout(dtype, lrows, lcols, batches, pad, rng):
    matrix = random_values(rng, (lrows, lcols), dtype)
    kc0 = 32 // matrix.dtype.itemsize
    expected, shape, stride = brute_force_nz(matrix, kc0, batches, pad)
    g = pto.GlobalTensor.nz_from_matrix(matrix, batches=batches, stride=stride if pad else None)
    assert g.layout == pto.Layout.NZ
    assert g.shape == shape and g.stride == stride
    flat = as_bits(g.host_flat())
    # the library stops at the last element; the brute force keeps the trailing pad (all zero)
    assert (flat == as_bits(expected)[: flat.size]).all()
    assert (as_bits(expected)[flat.size:] == 0).all()
    assert (as_bits(g.logical()) == as_bits(matrix)).all()
    assert (as_bits(pto.nz.from_nz(g.host_flat(), shape, stride)) == as_bits(matrix)).all()


def test_nz_tile_offsets_and_constants():
    assert (pto.nz.c0(1), pto.nz.c0(2), pto.nz.c0(4)) == (32, 16, 8)
    offs = pto.nz.tile_offsets(32, 16, 8)
    for r in range(32):
        for c in range(16):
            assert offs[r, c] == nz_tile_offset(r, c, 32, 16, 8)
    assert sorted(offs.reshape(-1).tolist()) == list(range(32 * 16))   # a permutation of the storage


def test_nz_shape_errors():
    with pytest.raises(ValueError, match=r"rows % 16 == 0 and cols % \(batches \* kC0 = 8\) == 0"):
        pto.GlobalTensor.nz_from_matrix(np.zeros((15, 8), np.float32))
    with pytest.raises(ValueError, match=r"batches \* kC0 = 16"):
        pto.GlobalTensor.nz_from_matrix(np.zeros((16, 8), np.float32), batches=2)


# -- TLOAD / TSTORE ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "float8_e4m3"])
def test_tload_tstore_round_trip(dtype, layout, rng):
    src = random_values(rng, (8, 40), dtype)
    g = pto.GlobalTensor(src)
    rows = 32 if layout == "col" else 6
    tile = make_tile(dtype, rows, 64, layout, valid=(5, 33))
    tile.data.view(tile.dtype.bits)[:] = sentinel_bits(dtype)
    pto.tload(tile, g)
    got = as_bits(tile.numpy())
    assert (got[:5, :33] == as_bits(src)[:5, :33]).all()
    outside = np.ones((rows, 64), bool)
    outside[:5, :33] = False
    assert (got[outside] == sentinel_bits(dtype)).all()          # only the valid region is loaded

    out = np.empty_like(src)
    out.view(as_bits(src).dtype)[:] = sentinel_bits(dtype)
    pto.tstore(pto.GlobalTensor(out), tile)
    ob = as_bits(out)
    assert (ob[:5, :33] == as_bits(src)[:5, :33]).all()
    mask = np.ones(src.shape, bool)
    mask[:5, :33] = False
    assert (ob[mask] == sentinel_bits(dtype)).all()              # only the valid region is stored


def test_tload_from_a_stride_padded_tensor():
    buf = np.arange(60, dtype=np.int32)
    g = pto.GlobalTensor(buf, shape=(4, 9), stride=(15, 1))
    tile = pto.tload(pto.Tile("int32", 4, 16, valid=(4, 9)), g)
    assert tile.valid_numpy().tolist() == [[r * 15 + c for c in range(9)] for r in range(4)]


def test_tload_tstore_nz(rng):
    matrix = random_values(rng, (32, 16), "float16")
    g = pto.GlobalTensor.nz_from_matrix(matrix)
    tile = pto.tload(pto.Tile("float16", 32, 16, blayout="col_major", slayout="row_major"), g)
    assert (as_bits(tile.numpy()) == as_bits(matrix)).all()
    # the NZ tile's storage is the packed NZ buffer itself (same fractal order, one block column)
    assert (as_bits(tile.data) == as_bits(g.host_flat())).all()
    back = pto.GlobalTensor.nz_from_matrix(np.zeros_like(matrix))
    pto.tstore(back, tile)
    assert (as_bits(back.logical()) == as_bits(matrix)).all()


def test_tload_tstore_errors():
    g = pto.GlobalTensor(np.zeros((4, 8), np.float32))
    with pytest.raises(pto.ConstraintError, match=r"TLOAD: tile float16 vs tensor float32 "
                                                  r"\(rule: sizeof\(tile.dtype\) == sizeof\(gtensor.dtype\)\)"):
        pto.tload(pto.Tile("float16", 4, 16), g)
    with pytest.raises(pto.ConstraintError, match=r"TSTORE: tile valid 5x8 exceeds the tensor's logical 4x8"):
        pto.tstore(g, pto.Tile("float32", 5, 8))
    with pytest.raises(TypeError, match=r"TLOAD: expected \(Tile, GlobalTensor\)"):
        pto.tload(g, pto.Tile("float32", 4, 8))
    # same width, different type: TLOAD moves the bits
    ints = pto.tload(pto.Tile("int32", 1, 8), pto.GlobalTensor(np.array([1.0] * 8, np.float32)))
    assert ints.numpy()[0, 0] == np.float32(1.0).view(np.int32)


class _DeviceArrayStandIn:
    """Only the ``__cuda_array_interface__`` of a device array: what GlobalTensor reads at construction."""

    def __init__(self, typestr, shape, strides=None):
        self.__cuda_array_interface__ = dict(typestr=typestr, shape=shape, strides=strides, data=(0, False),
                                             version=2)


@pytest.mark.parametrize("typestr, name", [("<f4", "float32"), ("<f2", "float16"), ("|i1", "int8"),
                                           ("<V2", "bfloat16")])
def test_device_array_dtype_from_its_interface(typestr, name):
    """``<V2`` is how PyTorch exports bfloat16 (after ml_dtypes); the rest are numpy typestrs."""
    t = pto.GlobalTensor(_DeviceArrayStandIn(typestr, (4, 8)))
    assert t.on_device and t.dtype.name == name and t.shape == (1, 1, 1, 4, 8)


def test_device_array_must_be_c_contiguous():
    with pytest.raises(pto.ConstraintError, match="C-contiguous"):
        pto.GlobalTensor(_DeviceArrayStandIn("<f4", (4, 8), strides=(4, 16)))
