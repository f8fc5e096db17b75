"""The ``a2a3`` target: the A2/A3 sequential MGATHER / MSCATTER loops.

Checked against the ``cpu`` golden where the semantics coincide, and against small independent
sequential oracles (plain Python loops, written here) elsewhere: Row scatter, atomic Add, the
ScatterOOB policies, stride-padded tables and the NZ paths (with a brute-force NZ layout built here,
not with simt_pto.nz).
"""
from __future__ import annotations

import zlib

import ml_dtypes
import numpy as np
import pytest

import simt_pto as pto
from simt_pto import dtypes as D
from oracles import nz_gm_offset, nz_logical, nz_shape, nz_tile_off, packed_strides

ALL = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "float16", "bfloat16", "float32"]
ADD_DTYPES = ["int8", "int16", "int32", "float16", "bfloat16", "float32"]
GATHER_OOB = ["undefined", "clamp", "wrap", "zero"]
SCATTER_OOB = ["undefined", "skip", "clamp", "wrap"]


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def seed(*parts):
    return zlib.crc32("/".join(parts).encode())


def dt(name):
    return D.resolve(name)


def pad_to(n, itemsize):
    """Smallest padded extent >= n whose byte size is a multiple of 32."""
    per = 32 // itemsize
    return -(-n // per) * per


def rand_bits(rng, shape, d):
    """Random raw bit patterns of dtype ``d`` (NaNs included for float types), as ``d.numpy``."""
    bits = d.bits
    vals = rng.integers(0, 1 << (8 * bits.itemsize), size=shape, dtype=np.uint64).astype(bits)
    return vals.view(d.numpy)


def rand_values(rng, shape, d):
    """Random finite numeric values of dtype ``d`` (for Add)."""
    if d.kind in ("int", "uint"):
        info = np.iinfo(d.numpy)
        return rng.integers(info.min, info.max + 1, size=shape).astype(d.numpy)
    return (rng.standard_normal(shape) * 8).astype(np.float32).astype(d.numpy)


def bits(a):
    a = np.asarray(a)
    return a.view(np.dtype(f"uint{8 * a.dtype.itemsize}"))


def uidx(v):
    """The uint32 cast every index goes through."""
    return int(v) & 0xFFFFFFFF


def remap(raw, cap, oob):
    """Python reference of the OOB policies: (slot, ok)."""
    u = uidx(raw)
    if oob == "clamp":
        return min(u, cap - 1), True
    if oob == "wrap":
        return u % cap, True
    if oob in ("zero", "skip", "masked"):
        return u, u < cap
    return u, True


def add_elem(a, b, d):
    """One add rounded in the element type: integers wrap, floats round once (float32 sum of two
    16-bit floats, then cast, is the correctly rounded sum)."""
    if d.kind == "int":
        return np.array(int(a) + int(b), dtype=np.int64).astype(d.numpy)
    s = np.float32(a) + np.float32(b)
    return np.array(s, dtype=np.float32).astype(d.numpy)


def _u32_as_i32(values):
    return (np.asarray(values, dtype=np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def row_idx_tile(values):
    """A [1, R] int32 RowMajor index tile (negative values stay negative: -1 is 4294967295 as uint32)."""
    v = _u32_as_i32(values)
    return pto.Tile.from_array(v[None, :], 1, pad_to(v.size, 4))


def elem_idx_tile(values):
    v = _u32_as_i32(values)
    return pto.Tile.from_array(v, v.shape[0], pad_to(v.shape[1], 4))


def nd_tile(d, rows, cols, rng=None):
    """A RowMajor tile (padded cols) with valid (rows, cols), filled with random bits."""
    t = pto.Tile(d, rows, pad_to(cols, d.itemsize), valid=(rows, cols))
    if rng is not None:
        t.data[...] = rand_bits(rng, t.data.shape, d)
    return t


def oob_indices(rng, n, cap, oob, shape=None):
    """Indices for ``oob``: in range for undefined, else a mix of in-range, OOB and negative ones."""
    shape = shape or (n,)
    if oob == "undefined":
        return rng.integers(0, cap, size=shape)
    v = rng.integers(0, cap, size=shape)
    flat = v.reshape(-1)
    k = max(1, flat.size // 4)
    pos = rng.choice(flat.size, size=k, replace=False)
    flat[pos[: k // 2 + 1]] = rng.integers(cap, 3 * cap + 5, size=k // 2 + 1)
    flat[pos[k // 2 + 1:]] = -rng.integers(1, 50, size=k - k // 2 - 1)
    return v


def nz_table(matrix, batches=1, stride=None, rng=None):
    """Lay ``matrix`` out as NZ GM memory by brute force; padding holds random sentinel bits."""
    d = dt(matrix.dtype)
    lrows, lcols = matrix.shape
    kc0 = 32 // matrix.dtype.itemsize
    shape = nz_shape(lrows, lcols, kc0, batches)
    stride = tuple(stride) if stride is not None else packed_strides(shape)
    size = sum((n - 1) * s for n, s in zip(shape, stride)) + 1 + 7
    flat = rand_bits(rng, size, d) if rng is not None else np.zeros(size, matrix.dtype)
    for lr in range(lrows):
        for lc in range(lcols):
            flat[nz_gm_offset(lr, lc, shape, stride)] = matrix[lr, lc]
    return pto.GlobalTensor(flat, shape, stride, layout="nz"), shape, stride


def nz_tile(d, rows, cols, valid=None, rng=None):
    t = pto.Tile(d, rows, cols, blayout="col_major", slayout="row_major", valid=valid)
    if rng is not None:
        t.data[...] = rand_bits(rng, t.data.shape, d)
    return t


def test_gather_uint32_index_tile_and_undefined_checks():
    d = dt("float32")
    table = np.arange(40, dtype=np.float32).reshape(8, 5)
    idx = pto.Tile.from_array(np.array([[7, 0, 3]], np.uint32), 1, 8)
    dst = nd_tile(d, 3, 5)
    pto.mgather(dst, pto.GlobalTensor(table), idx, target="a2a3")
    np.testing.assert_array_equal(dst.valid_numpy(), table[[7, 0, 3]])
    with pytest.raises(pto.OutOfBoundsError):
        pto.mgather(dst, pto.GlobalTensor(table), row_idx_tile([1, 8, 2]), target="a2a3")
    # strict=False: the memory-safe result, OOB rows read as zero
    pto.mgather(dst, pto.GlobalTensor(table), row_idx_tile([1, 8, -1]), target="a2a3", strict=False)
    np.testing.assert_array_equal(dst.valid_numpy(), np.stack([table[1], np.zeros(5), np.zeros(5)]))


# ---------------------------------------------------------------------------------------------
# MGATHER ND: 5-D and stride-padded tables (sequential oracle)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("oob", GATHER_OOB)
@pytest.mark.parametrize("dtype", ["int8", "float16", "float32"])
def test_gather_row_nd_stride_padded_5d(dtype, oob):
    rng = np.random.default_rng(7)
    d = dt(dtype)
    shape = (1, 2, 3, 4, 6)                       # tableRows = 2*3*4 = 24, row width 6
    s3 = 10                                        # stride-padded rows: Stride[3] = 10 > Shape[4]
    stride = (2 * 3 * 4 * s3, 3 * 4 * s3, 4 * s3, s3, 1)
    mem = rand_bits(rng, 24 * s3, d)
    R, C = 9, 5
    idx = oob_indices(rng, R, 24, oob)
    dst = nd_tile(d, R, C, rng)
    expect = bits(dst.data).copy()
    pto.mgather(dst, pto.GlobalTensor(mem.copy(), shape, stride), row_idx_tile(idx), oob=oob, target="a2a3")
    mb = bits(mem)
    for r in range(R):
        slot, ok = remap(idx[r], 24, oob)
        for c in range(C):
            expect[r * dst.cols + c] = mb[slot * s3 + c] if ok else 0
    np.testing.assert_array_equal(bits(dst.data), expect)


@pytest.mark.parametrize("oob", ["undefined", "wrap", "zero"])
def test_gather_elem_nd_5d_flat(oob):
    """Elem reads the flat memory ``table[safeIdx]`` with capacity prod(Shape[0..4])."""
    rng = np.random.default_rng(8)
    d = dt("uint16")
    shape, stride = (1, 1, 1, 3, 10), (30, 30, 30, 10, 1)
    mem = rand_bits(rng, 34, d)
    R, C = 2, 9
    idx = oob_indices(rng, R * C, 30, oob, (R, C))
    dst = nd_tile(d, R, C, rng)
    expect = bits(dst.data).copy()
    pto.mgather(dst, pto.GlobalTensor(mem.copy(), shape, stride), elem_idx_tile(idx), coalesce="elem", oob=oob,
                target="a2a3")
    for r in range(R):
        for c in range(C):
            slot, ok = remap(idx[r, c], 30, oob)
            expect[r * dst.cols + c] = bits(mem)[slot] if ok else 0
    np.testing.assert_array_equal(bits(dst.data), expect)


def scatter_oracle_nd(mem, src_vals, idx, mode, cap, oob, atomic, d, row_stride=0, cols=0):
    """Sequential oracle: rows in increasing r (Row) / elements in increasing (r, c) (Elem)."""
    out = mem.copy()
    if mode == "row":
        for r in range(len(idx)):
            slot, ok = remap(idx[r], cap, oob)
            if not ok:
                continue
            for c in range(cols):
                g = slot * row_stride + c
                out[g] = src_vals[r, c] if atomic == "none" else add_elem(out[g], src_vals[r, c], d)
    else:
        R, C = idx.shape
        for r in range(R):
            for c in range(C):
                slot, ok = remap(idx[r, c], cap, oob)
                if ok:
                    out[slot] = src_vals[r, c] if atomic == "none" else add_elem(out[slot], src_vals[r, c], d)
    return out


CASES_ND = ([("int16", "none", oob) for oob in SCATTER_OOB]                       # every policy
            + [(dtype, "none", "undefined") for dtype in ("uint8", "bfloat16", "float32")]
            + [(dtype, "add", "undefined") for dtype in ADD_DTYPES]                # every Add dtype
            + [("int8", "add", oob) for oob in ("skip", "clamp", "wrap")]
            + [("float16", "add", "wrap")])


@pytest.mark.parametrize("dtype,atomic,oob", CASES_ND)
def test_scatter_row_nd_oracle(dtype, atomic, oob):
    rng = np.random.default_rng(11)
    d = dt(dtype)
    shape = (1, 1, 2, 5, 7)                        # tableRows = 10, row width 7
    s3 = 9                                          # stride-padded: Stride[3] = 9 > Shape[4] = 7
    stride = (90, 90, 45, 9, 1)
    mem = rand_values(rng, 10 * s3 + 3, d)
    R, C = 8, 6
    idx = oob_indices(rng, R, 10, oob)
    idx[4] = idx[6] = idx[1]                       # duplicate rows
    src = nd_tile(d, R, C)
    vals = rand_values(rng, (R, C), d)
    src.set(vals)
    expect = scatter_oracle_nd(mem, vals, idx, "row", 10, oob, atomic, d, s3, C)
    table = mem.copy()
    pto.mscatter(pto.GlobalTensor(table, shape, stride), src, row_idx_tile(idx), coalesce="row", atomic=atomic,
                 oob=oob, target="a2a3")
    np.testing.assert_array_equal(bits(table), bits(expect))


@pytest.mark.parametrize("dtype,atomic,oob", CASES_ND)
def test_scatter_elem_nd_oracle(dtype, atomic, oob):
    rng = np.random.default_rng(12)
    d = dt(dtype)
    cap = 40
    mem = rand_values(rng, cap + 5, d)             # memory larger than the table
    R, C = 5, 7
    idx = oob_indices(rng, R * C, cap, oob, (R, C))
    idx[0, :3] = idx[4, 6]                         # duplicates
    src = nd_tile(d, R, C)
    vals = rand_values(rng, (R, C), d)
    src.set(vals)
    expect = scatter_oracle_nd(mem, vals, idx, "elem", cap, oob, atomic, d)
    table = mem.copy()
    pto.mscatter(pto.GlobalTensor(table, (1, 1, 1, 4, 10), (40, 40, 40, 10, 1)), src, elem_idx_tile(idx),
                 coalesce="elem", atomic=atomic, oob=oob, target="a2a3")
    np.testing.assert_array_equal(bits(table), bits(expect))


@pytest.mark.parametrize("coalesce", ["elem", "row"])
def test_scatter_add_float16_order(coalesce):
    """Each add is rounded in float16 in sequential order: 2048 + 1 + 1 = 2048 (ties to even),
    1 + 1 + 2048 = 2050."""
    d = dt("float16")
    for vals, want in (([2048, 1, 1], 2048), ([1, 1, 2048], 2050)):
        table = np.zeros((4, 16), np.float16)
        if coalesce == "elem":
            src = nd_tile(d, 1, 3)
            src.set(np.array([vals], np.float16))
            idx = elem_idx_tile([[5, 5, 5]])
        else:
            src = nd_tile(d, 3, 16)
            src.set(np.repeat(np.array(vals, np.float16)[:, None], 16, axis=1))
            idx = row_idx_tile([0, 0, 0])
        pto.mscatter(pto.GlobalTensor(table), src, idx, coalesce=coalesce, atomic="add", target="a2a3")
        got = table.reshape(-1)[5] if coalesce == "elem" else table[0]
        assert np.all(got == np.float16(want)), (vals, got)


def test_scatter_add_bfloat16_and_int8_wrap():
    d = dt("bfloat16")
    table = np.zeros(16, ml_dtypes.bfloat16)
    src = nd_tile(d, 1, 3)
    src.set(np.array([[256, 1, 1]], ml_dtypes.bfloat16))      # bf16 has 8 bits: 256 + 1 = 256
    pto.mscatter(pto.GlobalTensor(table), src, elem_idx_tile([[2, 2, 2]]), coalesce="elem", atomic="add",
                 target="a2a3")
    assert table[2] == 256
    d = dt("int8")
    table = np.full(32, 100, np.int8)
    src = nd_tile(d, 1, 2)
    src.set(np.array([[100, 100]], np.int8))
    pto.mscatter(pto.GlobalTensor(table), src, elem_idx_tile([[3, 3]]), coalesce="elem", atomic="add",
                 target="a2a3")
    assert table[3] == np.int8(np.int64(300) - 256)         # 100 + 100 + 100 wraps to 44


# ---------------------------------------------------------------------------------------------
# NZ
# ---------------------------------------------------------------------------------------------
def nz_case(dtype, layout):
    """(matrix, table tensor, shape, stride) for a packed / stride-padded / batched NZ table."""
    rng = np.random.default_rng(seed(dtype, layout))
    d = dt(dtype)
    kc0 = 32 // d.itemsize
    batches = 2 if layout == "batched" else 1
    lrows, lcols = 32, kc0 * 2 * batches
    matrix = rand_bits(rng, (lrows, lcols), d)
    shape = nz_shape(lrows, lcols, kc0, batches)
    stride = None
    if layout == "padded":
        s3, s4 = kc0, 1
        s2 = 16 * kc0 + kc0                   # a gap after every fractal block
        s1 = shape[2] * s2 + 2 * kc0
        s0 = shape[1] * s1 + 3 * kc0
        stride = (s0, s1, s2, s3, s4)
    elif layout == "batched":
        stride = None
    tensor, shape, stride = nz_table(matrix, batches, stride, rng)
    return rng, d, kc0, matrix, tensor, shape, stride


def test_nz_bruteforce_matches_library_layout():
    for dtype, batches in (("float32", 1), ("float16", 2), ("int8", 1)):
        d = dt(dtype)
        kc0 = 32 // d.itemsize
        m = rand_bits(np.random.default_rng(0), (32, kc0 * 2 * batches), d)
        mine, shape, stride = nz_table(m, batches)
        lib = pto.GlobalTensor.nz_from_matrix(m, batches=batches)
        assert lib.shape == tuple(shape) and lib.stride == tuple(stride)
        np.testing.assert_array_equal(bits(lib.host_flat()), bits(mine.host_flat())[: lib.size])


NZ_LAYOUTS = ["packed", "padded", "batched"]


@pytest.mark.parametrize("oob", GATHER_OOB)
@pytest.mark.parametrize("layout", NZ_LAYOUTS)
@pytest.mark.parametrize("dtype", ["int8", "float16", "float32"])
def test_gather_row_nz(dtype, layout, oob):
    rng, d, kc0, matrix, tensor, shape, stride = nz_case(dtype, layout)
    lrows, lcols = matrix.shape
    TR = 32                                        # padded tile rows (multiple of 16)
    R = 21                                         # valid rows need not be a multiple of 16
    dst = nz_tile(d, TR, lcols, valid=(R, lcols - 3), rng=rng)
    idx = oob_indices(rng, R, lrows, oob)
    expect = bits(dst.data).copy()
    if oob == "zero":
        expect[:] = 0                              # the whole tile is pre-zeroed once
    for r in range(R):
        slot, ok = remap(idx[r], lrows, oob)
        if ok:
            for c in range(lcols):                 # the DMA moves whole logical rows
                expect[nz_tile_off(r, c, TR, kc0)] = bits(matrix)[slot, c]
    pto.mgather(dst, tensor, row_idx_tile(idx), coalesce="row", oob=oob, target="a2a3")
    np.testing.assert_array_equal(bits(dst.data), expect)


@pytest.mark.parametrize("oob", GATHER_OOB)
@pytest.mark.parametrize("layout", NZ_LAYOUTS)
@pytest.mark.parametrize("dtype", ["int8", "bfloat16", "uint32"])
def test_gather_elem_nz(dtype, layout, oob):
    rng, d, kc0, matrix, tensor, shape, stride = nz_case(dtype, layout)
    lrows, lcols = matrix.shape
    cap = lrows * lcols
    TR, TC = 16, 2 * kc0
    R, C = 13, kc0 + 3                             # partial last block column
    dst = nz_tile(d, TR, TC, valid=(R, C), rng=rng)
    idx = oob_indices(rng, R * C, cap, oob, (R, C))
    expect = bits(dst.data).copy()
    for r in range(R):
        for c in range(C):
            slot, ok = remap(idx[r, c], cap, oob)
            expect[nz_tile_off(r, c, TR, kc0)] = bits(matrix)[slot // lcols, slot % lcols] if ok else 0
    pto.mgather(dst, tensor, elem_idx_tile(idx), coalesce="elem", oob=oob, target="a2a3")
    np.testing.assert_array_equal(bits(dst.data), expect)


def test_gather_row_nz_undefined_non_strict_zero_row():
    rng, d, kc0, matrix, tensor, shape, stride = nz_case("float32", "packed")
    dst = nz_tile(d, 16, matrix.shape[1], valid=(3, 8), rng=rng)
    before = bits(dst.data).copy()
    pto.mgather(dst, tensor, row_idx_tile([2, 99, 5]), oob="undefined", target="a2a3", strict=False)
    got = dst.numpy()
    np.testing.assert_array_equal(bits(got[0]), bits(matrix[2]))
    assert not bits(got[1]).any()
    np.testing.assert_array_equal(bits(got[2]), bits(matrix[5]))
    np.testing.assert_array_equal(bits(dst.data)[dst.offsets()[3:]], before[dst.offsets()[3:]])  # no pre-fill


def nz_scatter_cases():
    cases = []
    for layout in NZ_LAYOUTS:
        cases += [("uint16", layout, "none", "undefined"), ("float32", layout, "add", "skip")]
    cases += [("int8", "padded", "none", oob) for oob in ("skip", "clamp", "wrap")]
    cases += [("float16", "batched", "add", "wrap"), ("bfloat16", "padded", "add", "clamp"),
              ("int16", "packed", "add", "undefined"), ("int32", "batched", "add", "skip")]
    return cases


@pytest.mark.parametrize("dtype,layout,atomic,oob", nz_scatter_cases())
def test_scatter_row_nz(dtype, layout, atomic, oob):
    rng, d, kc0, matrix, tensor, shape, stride = nz_case(dtype, layout)
    matrix = rand_values(rng, matrix.shape, d)
    tensor, shape, stride = nz_table(matrix, shape[0], stride, rng)
    lrows, lcols = matrix.shape
    TR, R = 16, 9
    src = nz_tile(d, TR, lcols, valid=(R, lcols - 1))
    vals = rand_values(rng, (TR, lcols), d)
    for r in range(TR):
        for c in range(lcols):
            src.data[nz_tile_off(r, c, TR, kc0)] = vals[r, c]
    idx = oob_indices(rng, R, lrows, oob)
    idx[3] = idx[7] = idx[0] if uidx(idx[0]) < lrows else 1          # duplicates
    mem0 = tensor.host_flat().copy()
    expect = mem0.copy()
    for r in range(R):
        slot, ok = remap(idx[r], lrows, oob)
        if not ok:
            continue
        for c in range(lcols):                     # whole logical row, padding columns included
            g = nz_gm_offset(slot, c, shape, stride)
            expect[g] = vals[r, c] if atomic == "none" else add_elem(expect[g], vals[r, c], d)
    pto.mscatter(tensor, src, row_idx_tile(idx), coalesce="row", atomic=atomic, oob=oob, target="a2a3")
    np.testing.assert_array_equal(bits(tensor.host_flat()), bits(expect))


@pytest.mark.parametrize("dtype,layout,atomic,oob", nz_scatter_cases())
def test_scatter_elem_nz(dtype, layout, atomic, oob):
    rng, d, kc0, matrix, tensor, shape, stride = nz_case(dtype, layout)
    matrix = rand_values(rng, matrix.shape, d)
    tensor, shape, stride = nz_table(matrix, shape[0], stride, rng)
    lrows, lcols = matrix.shape
    cap = lrows * lcols
    TR, TC = 16, 2 * kc0
    R, C = 11, kc0 + 5
    src = nz_tile(d, TR, TC, valid=(R, C))
    vals = rand_values(rng, (TR, TC), d)
    for r in range(TR):
        for c in range(TC):
            src.data[nz_tile_off(r, c, TR, kc0)] = vals[r, c]
    idx = oob_indices(rng, R * C, cap, oob, (R, C))
    idx[0, kc0] = idx[1, 0] = idx[2, 2] = 17       # collide across block columns and rows
    mem0 = tensor.host_flat().copy()
    expect = mem0.copy()
    for bcol in range(-(-C // kc0)):               # block-col -> row -> col-in-block
        for r in range(R):
            for ci in range(kc0):
                c = bcol * kc0 + ci
                if c >= C:
                    break
                slot, ok = remap(idx[r, c], cap, oob)
                if not ok:
                    continue
                g = nz_gm_offset(slot // lcols, slot % lcols, shape, stride)
                expect[g] = vals[r, c] if atomic == "none" else add_elem(expect[g], vals[r, c], d)
    pto.mscatter(tensor, src, elem_idx_tile(idx), coalesce="elem", atomic=atomic, oob=oob, target="a2a3")
    np.testing.assert_array_equal(bits(tensor.host_flat()), bits(expect))


def test_scatter_elem_nz_walk_order_last_write():
    """NZ Elem walks block-col -> row -> col-in-block: (r=0, c=kC0) is written after (r=1, c=0)."""
    d = dt("float32")
    kc0 = 8
    matrix = np.zeros((16, 16), np.float32)
    tensor, shape, stride = nz_table(matrix)
    src = nz_tile(d, 16, 16, valid=(2, 16))
    src.set(np.arange(32, dtype=np.float32).reshape(2, 16) + 1)
    idx = np.full((2, 16), 100)
    idx[0, kc0] = 5                                # value 9, visited in block col 1
    idx[1, 0] = 5                                  # value 17, visited in block col 0
    idx[0, 0] = idx[1, kc0] = 6                    # values 1 and 25: (1, 8) is the later one
    pto.mscatter(tensor, src, elem_idx_tile(idx), coalesce="elem", target="a2a3")
    logical = nz_logical(tensor.host_flat(), shape, stride)
    assert logical[0, 5] == 9.0                    # row-major order would leave 17
    assert logical[0, 6] == 25.0


# ---------------------------------------------------------------------------------------------
# A2/A3-only rejections
# ---------------------------------------------------------------------------------------------
def _scatter(dtype, **kw):
    d = dt(dtype)
    table = np.zeros(64, d.numpy)
    src = nd_tile(d, 1, 4)
    return pto.mscatter(pto.GlobalTensor(table), src, elem_idx_tile([[0, 1, 2, 3]]), coalesce="elem",
                        target="a2a3", **kw)


@pytest.mark.parametrize("atomic", ["max", "min"])
@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_reject_max_min(atomic, dtype):
    with pytest.raises(pto.ConstraintError, match="Atomic Type Support"):
        _scatter(dtype, atomic=atomic)


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32"])
def test_reject_unsigned_add(dtype):
    with pytest.raises(pto.ConstraintError, match="Atomic Type Support"):
        _scatter(dtype, atomic="add")


@pytest.mark.parametrize("dtype", ["float8_e4m3", "float8_e5m2", "hifloat8"])
def test_reject_float8(dtype):
    d = dt(dtype)
    with pytest.raises(pto.ConstraintError, match="supported data types"):
        _scatter(dtype)
    dst = nd_tile(d, 1, 4)
    with pytest.raises(pto.ConstraintError, match="supported data types"):
        pto.mgather(dst, pto.GlobalTensor(np.zeros(64, np.uint8), dtype=d), elem_idx_tile([[0, 1, 2, 3]]),
                    coalesce="elem", target="a2a3")


def test_reject_conflict_default():
    with pytest.raises(pto.ConstraintError, match="ScatterConflict"):
        _scatter("int32", conflict="default")


def test_reject_nz_pairing_and_shape():
    d = dt("float32")
    tensor, _, _ = nz_table(np.zeros((16, 16), np.float32))
    with pytest.raises(pto.ConstraintError, match="NZ table pairs with an NZ"):
        pto.mgather(nd_tile(d, 2, 16), tensor, row_idx_tile([0, 1]), target="a2a3")
    with pytest.raises(pto.ConstraintError, match="ND table pairs with a RowMajor"):
        pto.mgather(nz_tile(d, 16, 16, valid=(2, 16)), pto.GlobalTensor(np.zeros((16, 16), np.float32)),
                    row_idx_tile([0, 1]), target="a2a3")
    bad = pto.GlobalTensor(np.zeros(256, np.float32), (1, 2, 1, 16, 8), layout="nz")
    bad16 = pto.GlobalTensor(np.zeros(512, np.float32), (1, 2, 1, 32, 8), layout="nz")
    with pytest.raises(pto.ConstraintError, match=r"staticShape\[3\] == 16"):
        pto.mgather(nz_tile(d, 16, 16, valid=(2, 16)), bad16, row_idx_tile([0, 1]), target="a2a3")
    pto.mgather(nz_tile(d, 16, 16, valid=(2, 16)), bad, row_idx_tile([0, 1]), target="a2a3")   # well-formed


def test_reject_row_nz_tile_narrower_than_logical_row():
    d = dt("float32")
    tensor, _, _ = nz_table(np.zeros((16, 32), np.float32))      # logical row = 32 columns
    dst = nz_tile(d, 16, 16, valid=(2, 16))
    with pytest.raises(pto.ConstraintError, match="whole logical row"):
        pto.mgather(dst, tensor, row_idx_tile([0, 1]), target="a2a3")


@pytest.mark.parametrize("coalesce", ["row", "elem"])
@pytest.mark.parametrize("op,oob", [("mgather", "zero"), ("mgather", "clamp"), ("mscatter", "skip")])
def test_a_repeated_nz_tile_op_takes_its_kept_loop(op, oob, coalesce, monkeypatch):
    """The second call of an NZ tile op's signature runs the loop its first call kept (no full path), and writes
    what the full path writes, bit for bit (the full path is checked against the brute force above); a Row NZ
    gather under ZERO keeps its pre-zeroing loop."""
    from simt_pto.host import dispatch
    from simt_pto.plan import CallCache
    rng, d, kc0, matrix, tensor, shape, stride = nz_case("float16", "padded")
    lrows, lcols = matrix.shape
    if coalesce == "row":
        tile = nz_tile(d, 16, lcols, valid=(9, lcols - 1), rng=rng)
        idx_tile = row_idx_tile(oob_indices(rng, 9, lrows, oob))
    else:
        tile = nz_tile(d, 16, 2 * kc0, valid=(11, kc0 + 5), rng=rng)
        idx_tile = elem_idx_tile(oob_indices(rng, 11 * (kc0 + 5), lrows * lcols, oob, (11, kc0 + 5)))
    tile_bits, table_bits = bits(tile.data).copy(), bits(tensor.host_flat()).copy()

    def call():
        tile.data.view(tile_bits.dtype)[...] = tile_bits
        tensor.host_flat().view(table_bits.dtype)[...] = table_bits
        if op == "mgather":
            pto.mgather(tile, tensor, idx_tile, coalesce=coalesce, oob=oob, target="a2a3")
        else:
            pto.mscatter(tensor, tile, idx_tile, coalesce=coalesce, atomic="add", oob=oob, target="a2a3")
        return bits(tile.data).copy(), bits(tensor.host_flat()).copy()
    CallCache.clear_all()
    full = call()  # validated, run on the full path, its loop kept
    monkeypatch.setattr(dispatch, "run_mgather", lambda plan: pytest.fail("the full path ran"))
    monkeypatch.setattr(dispatch, "run_mscatter", lambda plan: pytest.fail("the full path ran"))
    kept = call()
    np.testing.assert_array_equal(kept[0], full[0])
    np.testing.assert_array_equal(kept[1], full[1])
