"""MGATHER GM -> L1 (a ``TileType::Mat`` NZ destination) on ``a2a3`` and ``a5``.

MGATHER.md, "GM → L1 Gather (TileType::Mat destination)", "Constraints (MGatherCheckGm2L1)" and
"A5 only — SIMT executor for Elem GM → L1 (GatherExec::Simt)".

The oracle is built here: the logical gather of ``tests/oracles.py`` (plain loops over raw bits), laid
out in NZ by :func:`nz_storage`, a brute-force walk of the fractal blocks written from the spec's
picture (block columns of ``kC0`` columns, one after the other; inside one, ``Rows`` rows of ``kC0``
contiguous elements), not from ``simt_pto.nz``. Every executor (a2a3 scalar, a5 scalar, a5 SIMT) must
give the same raw bits in the L1 tile and, for Elem, in the GM scratch: its first ``Rows * Cols``
elements exactly (zeros at padding and OOB lanes), its sentinel tail untouched. Tables sit in guarded
buffers, so a stray read shows as a sentinel and a stray write as a changed guard.
"""
from __future__ import annotations

import types

import numpy as np
import pytest

import simt_pto as pto
from simt_pto import constraints
from simt_pto import l1_gather as l1mod
from simt_pto.call import mgather_policy
from oracles import (GATHER_POLICIES, NUMPY_TYPES, GuardedTable, bits_type, case_rng, gather_elem, random_bits,
                     sentinel, slot)

A2A3_DTYPES = tuple(d.name for d in pto.dtypes.ELEMENT_DTYPES["a2a3"])
A5_DTYPES = tuple(d.name for d in pto.dtypes.ELEMENT_DTYPES["a5"])
INT32_MAX = 2 ** 31 - 1
TILE_ROWS = 32
VALID_ROWS = 19          # two fractal rows, the second partly valid
SCRATCH_TAIL = 11        # sentinel elements of scratch memory beyond Rows * Cols


def kc0(dtype: str) -> int:
    return 32 // np.dtype(NUMPY_TYPES[dtype]).itemsize


# -- the NZ layout, brute force -------------------------------------------------------------------------------

def nz_storage(logical: np.ndarray, k: int) -> np.ndarray:
    """The storage of an NZ tile holding ``logical`` (``Rows x Cols``): block column after block column,
    each block column ``Rows`` rows of ``k`` contiguous elements."""
    rows, cols = logical.shape
    out = []
    for block in range(cols // k):
        for r in range(rows):
            for ci in range(k):
                out.append(logical[r, block * k + ci])
    return np.array(out, dtype=logical.dtype)


def nz_logical(storage: np.ndarray, rows: int, cols: int, k: int) -> np.ndarray:
    """The inverse of :func:`nz_storage`."""
    out = np.empty((rows, cols), dtype=storage.dtype)
    pos = 0
    for block in range(cols // k):
        for r in range(rows):
            for ci in range(k):
                out[r, block * k + ci] = storage[pos]
                pos += 1
    return out


def test_nz_helpers_against_the_spec_formula():
    """Pin the brute-force walk to the spec's offset (c / kC0) * (Rows * kC0) + r * kC0 + (c % kC0)."""
    rows, cols, k = 32, 16, 8
    logical = np.arange(rows * cols, dtype=np.uint32).reshape(rows, cols)
    storage = nz_storage(logical, k)
    for r in range(rows):
        for c in range(cols):
            assert storage[(c // k) * (rows * k) + r * k + (c % k)] == logical[r, c]
    np.testing.assert_array_equal(nz_logical(storage, rows, cols, k), logical)


# -- building a case --------------------------------------------------------------------------------------------

def mat_tile(dtype, rows, cols, valid, fill_bits):
    """An L1 NZ tile whose whole storage holds ``fill_bits``."""
    tile = pto.Tile(dtype, rows, cols, loc="mat", blayout="col_major", slayout="row_major", valid=valid)
    tile.data.view(bits_type(dtype))[:] = fill_bits
    return tile


def gm_index(values, index_dtype="int32", row_pad=0):
    """A GM index tensor: 1-D for Row; for Elem ``[R, C]`` inside memory rows of ``C + row_pad``."""
    v = np.asarray(values, dtype=np.int64)
    vals = (v & 0xFFFFFFFF).astype(np.uint32) if index_dtype == "uint32" else v.astype(np.int32)
    if vals.ndim == 1 or not row_pad:
        return pto.GlobalTensor(np.ascontiguousarray(vals))
    R, C = vals.shape
    mem = np.full((R, C + row_pad), 7, dtype=vals.dtype)   # 7: an in-range decoy the op must not read
    mem[:, :C] = vals
    return pto.GlobalTensor(mem, shape=(R, C), stride=(C + row_pad, 1))


def guarded_scratch(dtype, n):
    """Scratch memory of ``n + SCRATCH_TAIL`` elements, all sentinel: ``(bits, GlobalTensor)``."""
    bits = np.full(n + SCRATCH_TAIL, sentinel(dtype), dtype=bits_type(dtype))
    mem = bits if dtype == "hifloat8" else bits.view(NUMPY_TYPES[dtype])
    return bits, pto.GlobalTensor(mem, dtype=dtype)


def row_indices(policy, capacity, n):
    base = [2, capacity, capacity - 1, -1, 2, INT32_MAX, 0, 5, capacity + 3, 1]
    if policy == "undefined":
        base = [i % capacity if 0 <= i < capacity else (3 * k + 1) % capacity for k, i in enumerate(base)]
    return [base[k % len(base)] for k in range(n)]


def elem_indices(rng, policy, capacity, shape):
    idx = rng.integers(0, capacity, size=shape).astype(np.int64)
    if policy != "undefined":
        flat = idx.reshape(-1)
        bad = [capacity, capacity + 1, -1, -7, INT32_MAX, 1000, 2 ** 31 + 9]
        flat[rng.choice(flat.size, size=len(bad), replace=False)] = bad
    return idx


class RowCase:
    """Row: a stride-padded ND table (rows of ``vc + 5`` elements in memory rows of ``vc + 8``)."""

    def __init__(self, dtype, policy, index_dtype="int32"):
        rng = case_rng("l1-row", dtype, policy, index_dtype)
        k = kc0(dtype)
        self.dtype, self.policy, self.k = dtype, policy, k
        self.rows, self.cols = TILE_ROWS, 2 * k
        self.vr, self.vc = VALID_ROWS, k + 3
        # tableRows 23 of Shape[4] = kC0 + 5 columns, in memory rows of Stride[3] = kC0 + 8 elements
        self.cap, shape4, self.width = 23, k + 5, k + 8
        self.table = GuardedTable(dtype, random_bits(rng, self.cap * self.width, dtype),
                                  shape=(self.cap * self.width,))
        self.table.tensor = pto.GlobalTensor(self.table.tensor.array, shape=(self.cap, shape4),
                                             stride=(self.width, 1), dtype=dtype)
        self.indices = row_indices(policy, self.cap, self.vr)
        self.idx = gm_index(self.indices, index_dtype)

    def fresh_tile(self):
        return mat_tile(self.dtype, self.rows, self.cols, (self.vr, self.vc), sentinel(self.dtype))

    def expected_logical(self):
        """The whole padded tile: untouched (sentinel) outside the copied rows, except that Zero pre-zeros
        everything first; a non-strict Undefined writes a zero row (valid columns) for an OOB index."""
        fill = 0 if self.policy == "zero" else sentinel(self.dtype)
        out = np.full((self.rows, self.cols), fill, dtype=bits_type(self.dtype))
        core = self.table.core()
        for r, index in enumerate(self.indices):
            s = slot(index, self.cap, self.policy)
            for c in range(self.vc):
                if s is not None:
                    out[r, c] = core[s * self.width + c]
                elif self.policy != "zero":
                    out[r, c] = 0
        return out

    def run(self, target, tile, **kw):
        pto.mgather(tile, self.table.tensor, self.idx, coalesce="row", oob=self.policy, target=target, **kw)


class ElemCase:
    """Elem: a flat guarded table of 50, an ``[R, C]`` index in memory rows padded by 3."""

    def __init__(self, dtype, policy, index_dtype="int32"):
        rng = case_rng("l1-elem", dtype, policy, index_dtype)
        k = kc0(dtype)
        self.dtype, self.policy, self.k = dtype, policy, k
        self.rows, self.cols = TILE_ROWS, 2 * k
        self.vr, self.vc = VALID_ROWS, k + 3
        self.cap = 50
        self.table = GuardedTable(dtype, random_bits(rng, self.cap, dtype), shape=(self.cap,))
        self.indices = elem_indices(rng, policy, self.cap, (self.vr, self.vc))
        self.idx = gm_index(self.indices, index_dtype, row_pad=3)
        self.n = self.rows * self.cols

    def fresh(self):
        tile = mat_tile(self.dtype, self.rows, self.cols, (self.vr, self.vc), sentinel(self.dtype))
        bits, scratch = guarded_scratch(self.dtype, self.n)
        return tile, bits, scratch

    def expected_logical(self):
        out = np.zeros((self.rows, self.cols), dtype=bits_type(self.dtype))
        out[: self.vr, : self.vc] = gather_elem(self.table.core(), self.cap, self.indices, self.policy)
        return out

    def run(self, target, tile, scratch, exec_="scalar", **kw):
        pto.mgather(tile, self.table.tensor, self.idx, coalesce="elem", oob=self.policy, target=target,
                    exec=exec_, scratch=scratch, **kw)


def tile_bits(tile):
    return tile.data.view(bits_type(tile.dtype.name)).copy()


def logical_bits(tile):
    """``tile.numpy()`` (the library's NZ -> logical view) as raw bits."""
    return np.ascontiguousarray(tile.numpy()).view(bits_type(tile.dtype.name))


# -- every mode x OOB x exec x dtype, both targets --------------------------------------------------------------

MATRIX_ROW = [(t, d, p) for t, dts in (("a2a3", A2A3_DTYPES), ("a5", A5_DTYPES)) for d in dts for p in GATHER_POLICIES]
MATRIX_ELEM = [(t, e, d, p) for t, execs, dts in (("a2a3", ("scalar",), A2A3_DTYPES),
                                                  ("a5", ("scalar", "simt"), A5_DTYPES))
               for e in execs for d in dts for p in GATHER_POLICIES]


@pytest.mark.parametrize("target,dtype,policy", MATRIX_ROW)
def test_row(target, dtype, policy):
    case = RowCase(dtype, policy)
    before = case.table.snapshot()
    tile = case.fresh_tile()
    case.run(target, tile)
    want = case.expected_logical()
    np.testing.assert_array_equal(tile_bits(tile), nz_storage(want, case.k))
    np.testing.assert_array_equal(logical_bits(tile), want)
    np.testing.assert_array_equal(case.table.snapshot(), before)


@pytest.mark.parametrize("target,exec_,dtype,policy", MATRIX_ELEM)
def test_elem(target, exec_, dtype, policy):
    case = ElemCase(dtype, policy)
    before = case.table.snapshot()
    tile, scratch_bits, scratch = case.fresh()
    case.run(target, tile, scratch, exec_)
    want = nz_storage(case.expected_logical(), case.k)
    np.testing.assert_array_equal(scratch_bits[: case.n], want)                 # zeros at padding / OOB lanes
    assert (scratch_bits[case.n:] == sentinel(dtype)).all(), "wrote beyond Rows * Cols of the scratch"
    np.testing.assert_array_equal(tile_bits(tile), want)                        # the bulk copy, whole tile
    np.testing.assert_array_equal(logical_bits(tile), case.expected_logical())
    np.testing.assert_array_equal(case.table.snapshot(), before)


@pytest.mark.parametrize("dtype,policy", (("int8", "undefined"), ("bfloat16", "clamp"), ("float32", "wrap"),
                                          ("float16", "zero")))
def test_elem_executors_bitwise_identical(dtype, policy):
    """a2a3 scalar, a5 scalar and a5 SIMT (run twice) leave the same bits in the tile and the scratch."""
    case = ElemCase(dtype, policy, index_dtype="uint32")
    results = []
    for target, exec_ in (("a2a3", "scalar"), ("a5", "scalar"), ("a5", "simt"), ("a5", "simt")):
        tile, scratch_bits, scratch = case.fresh()
        case.run(target, tile, scratch, exec_)
        results.append((tile_bits(tile), scratch_bits.copy()))
    for tile_b, scratch_b in results[1:]:
        np.testing.assert_array_equal(tile_b, results[0][0])
        np.testing.assert_array_equal(scratch_b, results[0][1])


@pytest.mark.parametrize("target", ("a2a3", "a5"))
def test_row_uint32_index_and_row_targets_agree(target):
    case = RowCase("float16", "wrap", index_dtype="uint32")
    tile = case.fresh_tile()
    case.run(target, tile)
    np.testing.assert_array_equal(logical_bits(tile), case.expected_logical())


# -- Undefined: refused before any write, or the memory-safe result --------------------------------------------

@pytest.mark.parametrize("target", ("a2a3", "a5"))
def test_row_undefined_out_of_range_is_refused_before_any_write(target):
    case = RowCase("float32", "clamp")          # indices with OOB ones
    case.policy = "undefined"
    tile = case.fresh_tile()
    with pytest.raises(pto.OutOfBoundsError, match=r"out of range \[0, 23\)"):
        case.run(target, tile)
    assert (tile_bits(tile) == sentinel("float32")).all()


@pytest.mark.parametrize("target,exec_", (("a2a3", "scalar"), ("a5", "scalar"), ("a5", "simt")))
def test_elem_undefined_out_of_range_is_refused_before_any_write(target, exec_):
    case = ElemCase("int16", "zero")
    case.policy = "undefined"
    tile, scratch_bits, scratch = case.fresh()
    with pytest.raises(pto.OutOfBoundsError, match=r"out of range \[0, 50\)"):
        case.run(target, tile, scratch, exec_)
    assert (tile_bits(tile) == sentinel("int16")).all()
    assert (scratch_bits == sentinel("int16")).all(), "the scratch was written before the check"


@pytest.mark.parametrize("target", ("a2a3", "a5"))
def test_row_undefined_not_strict_writes_zero_rows(target):
    case = RowCase("uint8", "clamp")
    case.policy = "undefined"
    tile = case.fresh_tile()
    case.run(target, tile, strict=False)
    want = np.full((case.rows, case.cols), sentinel("uint8"), dtype=np.uint8)
    core = case.table.core()
    for r, index in enumerate(case.indices):
        s = slot(index, case.cap, "undefined")
        want[r, : case.vc] = 0 if s is None else core[s * case.width: s * case.width + case.vc]
    np.testing.assert_array_equal(logical_bits(tile), want)


@pytest.mark.parametrize("target,exec_", (("a2a3", "scalar"), ("a5", "scalar"), ("a5", "simt")))
def test_elem_undefined_not_strict_reads_zero(target, exec_):
    case = ElemCase("float32", "zero")
    tile, scratch_bits, scratch = case.fresh()
    case.policy = "undefined"
    case.run(target, tile, scratch, exec_, strict=False)
    case.policy = "zero"                         # the memory-safe result is Zero's
    np.testing.assert_array_equal(logical_bits(tile), case.expected_logical())


# -- table / index readings ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ("a2a3", "a5"))
def test_row_table_rows_span_dims_0_to_3(target):
    """tableRows = prod(Shape[0..3]); row i at i * Stride[3]."""
    rng = case_rng("l1-5d", target)
    mem = random_bits(rng, 2 * 3 * 8, "float32")
    table = pto.GlobalTensor(mem.view(np.float32), shape=(2, 1, 1, 3, 8))
    tile = mat_tile("float32", 16, 8, (4, 8), sentinel("float32"))
    pto.mgather(tile, table, gm_index([5, 0, 6, 3]), coalesce="row", oob="clamp", target=target)
    got = logical_bits(tile)
    for r, i in enumerate([5, 0, 5, 3]):
        np.testing.assert_array_equal(got[r], mem[i * 8:(i + 1) * 8])
    assert (got[4:] == sentinel("float32")).all()


@pytest.mark.parametrize("target", ("a2a3", "a5"))
def test_row_column_index_tensor(target):
    """An ``[R, 1]`` packed index column reads the same as ``Shape<1, 1, 1, 1, R>``."""
    table = pto.GlobalTensor(np.arange(64, dtype=np.int32).reshape(8, 8))
    a = mat_tile("int32", 16, 8, (3, 8), 0)
    b = mat_tile("int32", 16, 8, (3, 8), 0)
    pto.mgather(a, table, pto.GlobalTensor(np.array([[4], [1], [7]], np.int32)), target=target)
    pto.mgather(b, table, pto.GlobalTensor(np.array([4, 1, 7], np.int32)), target=target)
    np.testing.assert_array_equal(a.data, b.data)
    np.testing.assert_array_equal(a.numpy()[:3], np.arange(64).reshape(8, 8)[[4, 1, 7]])


def test_simt_launch_geometry_and_dispatch():
    from simt_pto.geometry import l1_elem_geometry
    from simt_pto.host.a5_planner import mgather_l1_launches, mgather_launches
    from simt_pto.launch_spec import HostStep
    assert l1_elem_geometry(16, 8).block == (32, 4)          # 128 elements: 4 warps
    assert l1_elem_geometry(16, 16).launch_warps == 8
    assert l1_elem_geometry(64, 64).launch_warps == 32       # capped at 32
    assert l1_elem_geometry(16, 32).work_items == 512
    case = ElemCase("float16", "clamp")
    tile, _, scratch = case.fresh()
    simt = constraints.validated_mgather(mgather_policy(pto.Coalesce.ELEM, pto.GatherOOB.CLAMP, "a5", pto.GatherExec.SIMT, True, None),
                                         tile, case.table.tensor, case.idx, scratch)
    call = mgather_l1_launches(simt)
    (launch,) = call.launches
    assert launch.kernel == "simt_mgather_l1_elem_kernel"
    assert launch.geometry.block == (32, min(-(-case.n // 32), 32)) and launch.geometry.scheme == "l1_elem"
    assert isinstance(call.steps[-1], HostStep) and "copy_gm_to_cbuf" in call.steps[-1].name  # the AIC's copy
    (routed,) = mgather_launches(simt).launches                   # the one A5 dispatch routes L1 plans
    assert (routed.kernel, routed.policy, routed.geometry) == (launch.kernel, launch.policy, launch.geometry)
    scalar = constraints.validated_mgather(mgather_policy(pto.Coalesce.ELEM, pto.GatherOOB.CLAMP, "a5", pto.GatherExec.SCALAR, True, None),
                                           tile, case.table.tensor, case.idx, scratch)
    scalar_call = mgather_l1_launches(scalar)                    # the cube core's scalar walk: no launch
    assert scalar_call.launches == () and len(scalar_call.steps) == 1


# -- every MGatherCheckGm2L1 rejection -----------------------------------------------------------------------------

def _elem_call(target="a5", dtype="float32", exec_="scalar", tile=None, table=None, idx=None, scratch="auto",
               coalesce="elem", oob="clamp"):
    k = kc0(dtype) if dtype in NUMPY_TYPES else 8
    d = pto.dtypes.resolve(dtype)
    tile = tile if tile is not None else pto.Tile(d, 16, 2 * k, loc="mat", blayout="col_major",
                                                  slayout="row_major")
    table = table if table is not None else pto.GlobalTensor(np.zeros(64, d.numpy), dtype=d)
    if idx is None:
        idx = pto.GlobalTensor(np.zeros((16, 2 * k), np.int32)) if coalesce == "elem" else \
            pto.GlobalTensor(np.zeros(16, np.int32))
    if scratch == "auto":
        scratch = pto.GlobalTensor(np.zeros(16 * 2 * k, d.numpy), dtype=d) if coalesce == "elem" else None
    pto.mgather(tile, table, idx, coalesce=coalesce, oob=oob, target=target, exec=exec_, scratch=scratch)


def _nz(dtype, rows=16, cols=None, valid=None):
    return pto.Tile(dtype, rows, cols or 2 * kc0(dtype), loc="mat", blayout="col_major", slayout="row_major",
                    valid=valid)


REJECTIONS = [
    ("simt on a2a3", dict(target="a2a3", exec_="simt"), r"GatherExec::Simt is A5 only"),
    ("simt with row", dict(coalesce="row", exec_="simt"), r"SIMT executor is only supported for Coalesce::Elem"),
    ("float8 on a2a3", dict(target="a2a3", dtype="float8_e4m3"), r"float8_e4m3 is not supported on a2a3"),
    ("float8 row on a2a3", dict(target="a2a3", dtype="float8_e5m2", coalesce="row"),
     r"float8_e5m2 is not supported on a2a3"),
    ("hifloat8 on a2a3", dict(target="a2a3", dtype="hifloat8"), r"hifloat8 is not supported on a2a3"),
    ("UB index tile", dict(idx=pto.Tile("int32", 16, 16)), r"AIC cannot read the AIV's UB"),
    ("int16 index", dict(idx=pto.GlobalTensor(np.zeros((16, 16), np.int16))), r"idx dtype is int16.*int32_t / uint32_t"),
    ("float index", dict(idx=pto.GlobalTensor(np.zeros((16, 16), np.float32))), r"idx dtype is float32"),
    ("table dtype", dict(table=pto.GlobalTensor(np.zeros(64, np.int32))), r"GlobalTable::DType == __gm__ T"),
    ("table DN", dict(table=pto.GlobalTensor(np.zeros((8, 8), np.float32), layout="dn")), r"Layout::ND"),
    ("table NZ", dict(table=pto.GlobalTensor.nz_from_matrix(np.zeros((16, 8), np.float32))), r"Layout::ND"),
    ("scratch dtype", dict(scratch=pto.GlobalTensor(np.zeros(256, np.int32))), r"GlobalScratch::DType"),
    ("scratch too small", dict(scratch=pto.GlobalTensor(np.zeros(255, np.float32))),
     r"Rows \* Cols = 16 \* 16 = 256"),
    ("elem without scratch", dict(scratch=None), r"4-operand form"),
    ("row with scratch", dict(coalesce="row", scratch=pto.GlobalTensor(np.zeros(256, np.float32))),
     r"3-operand form"),
    ("dst not NZ", dict(tile=pto.Tile("float32", 16, 16, loc="mat")), r"dst is BLayout ROW_MAJOR \+ SLayout NONE_BOX.*NZ form"),
    ("elem idx too small", dict(idx=pto.GlobalTensor(np.zeros(256, np.int32))), r"Shape\[3\] >= validRows"),
    ("elem idx stride", dict(idx=pto.GlobalTensor(np.zeros((16, 32), np.int32), shape=(16, 16), stride=(32, 2))),
     r"Stride\[4\] == 1"),
    ("row idx too few", dict(coalesce="row", idx=pto.GlobalTensor(np.zeros(15, np.int32))),
     r"holds 15 indices, dst valid rows = 16"),
    ("row idx not packed", dict(coalesce="row", idx=pto.GlobalTensor(np.zeros(32, np.int32), shape=(16,),
                                                                      stride=(2,))), r"packed index tensor"),
    ("row cols > Shape[4]", dict(coalesce="row", table=pto.GlobalTensor(np.zeros((64, 8), np.float32))),
     r"valid cols 16 > table Shape\[4\] = 8"),
    ("row table Stride[4]", dict(coalesce="row", table=pto.GlobalTensor(np.zeros((64, 32), np.float32),
                                                                         shape=(64, 16), stride=(32, 2))),
     r"contiguous table row \(Stride\[4\] == 1\)"),
    ("row reach", dict(coalesce="row", table=pto.GlobalTensor(np.zeros(400, np.float32), shape=(2, 1, 1, 4, 16),
                                                              stride=(64, 64, 64, 100, 1))),
     r"row 7 ends at element 715, memory holds 400"),
    ("elem tableSize > memory", dict(table=pto.GlobalTensor(np.zeros(20, np.float32), shape=(4, 8), stride=(4, 1))),
     r"tableSize 32 > 20 elements of memory"),
]


@pytest.mark.parametrize("kw,match", [pytest.param(kw, m, id=name) for name, kw, m in REJECTIONS])
def test_rejections(kw, match):
    with pytest.raises(pto.ConstraintError, match=match) as err:
        _elem_call(**kw)
    assert err.value.rule and err.value.target in ("a2a3", "a5")


def test_rejection_names_op_target_rule():
    with pytest.raises(pto.ConstraintError) as err:
        _elem_call(target="a2a3", exec_="simt")
    assert str(err.value).startswith("MGATHER on a2a3: exec=SIMT on a2a3 (rule: GatherExec::Simt is A5 only")


@pytest.mark.parametrize("target", ("a2a3", "a5"))
def test_rejection_writes_nothing(target):
    tile = _nz("float32")
    tile.fill(3.0)
    bits, scratch = guarded_scratch("float32", 256)
    scratch = pto.GlobalTensor(scratch.array, shape=(255,))   # Shape one element short of Rows * Cols
    with pytest.raises(pto.ConstraintError, match="scratch holds at least"):
        _elem_call(target=target, tile=tile, scratch=scratch)
    assert (tile.data == 3.0).all() and (bits == sentinel("float32")).all()


def test_cpu_has_no_l1_path():
    with pytest.raises(pto.ConstraintError, match=r"MGATHER on cpu.*dst is MAT"):
        _elem_call(target="cpu")


def test_nz_destination_extent_rules():
    """Cols % kC0 and Rows % 16: the Tile constructor already refuses such NZ tiles; the GM -> L1 check
    still states the rule, exercised here on stubs."""
    with pytest.raises(pto.ConstraintError, match=r"Cols % kC0 == 0"):
        pto.Tile("float32", 16, 12, loc="mat", blayout="col_major", slayout="row_major")
    stub = dict(loc=pto.TileType.MAT, is_nz=True, fractal=512, dtype=pto.dtypes.resolve("float32"),
                blayout=pto.BLayout.COL_MAJOR, slayout=pto.SLayout.ROW_MAJOR)
    with pytest.raises(pto.ConstraintError, match=r"TileDst::Cols % \(C0_SIZE_BYTE / sizeof\(T\)\) == 0.*"):
        l1mod.check_nz_destination("a5", types.SimpleNamespace(rows=16, cols=12, **stub))
    with pytest.raises(pto.ConstraintError, match=r"dst Rows = 8.*FRACTAL_NZ_ROW \(16\)"):
        l1mod.check_nz_destination("a2a3", types.SimpleNamespace(rows=8, cols=16, **stub))
    with pytest.raises(pto.ConstraintError, match=r"SFractalSize == 512"):
        l1mod.check_nz_destination("a5", types.SimpleNamespace(rows=16, cols=16, **dict(stub, fractal=1024)))
    l1mod.check_nz_destination("a5", types.SimpleNamespace(rows=16, cols=16, **stub))


def test_row_itemsize_rule():
    """Row needs sizeof(T) <= 4. Every element dtype of either target is at most 4 bytes, so no API call
    can break the rule; the check is exercised on an 8-byte stand-in dtype."""
    assert max(d.itemsize for t in ("a2a3", "a5") for d in pto.dtypes.ELEMENT_DTYPES[t]) <= 4
    wide = pto.dtypes.DType("float64", np.dtype(np.float64), "float")
    with pytest.raises(pto.ConstraintError, match=r"dst dtype float64 is 8 bytes.*sizeof\(T\) <= 4"):
        l1mod.check_row_itemsize("a5", wide)
    l1mod.check_row_itemsize("a5", pto.dtypes.resolve("float32"))
