"""Property-based fuzzing of the whole-array ops on every target (Hypothesis).

Property: a call either returns the result of the independent oracle below (bitwise; the values of float
Adds are small integers, exact in every order), with the table of a gather, the inputs of a scatter and the
memory around the table unchanged; or it raises ConstraintError, TypeError or OutOfBoundsError with the table
and the memory around it bitwise unchanged. Never a crash, a raw Numba / numpy error, or a write after a
refusal.

The oracle is a plain loop over the ISA's rules: indices cast to uint32, then Clamp (``min(u, cap - 1)``),
Wrap (``u % cap``), Zero / Skip (masked), Undefined (refused under strict, masked otherwise); the CPU
simulator's MSCATTER ignores ScatterOOB and the atomic (plain replace); Conflict::Last and every sequential
target let the last writer in source order win; Conflict::Default on A5 leaves one of the writers.

Budget: the default profile (60 calls, a fixed set) keeps to the test suite's time; ``SIMT_PTO_FUZZ=long``
(or ``--hypothesis-profile=long``) runs a long random campaign of ``SIMT_PTO_FUZZ_EXAMPLES`` calls (100,000).
"""
from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from conftest import requires_cuda

import simt_pto as pto

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("long", max_examples=int(os.environ.get("SIMT_PTO_FUZZ_EXAMPLES", "100000")), deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("SIMT_PTO_FUZZ", "ci"))

TARGETS = ("cpu", "a2a3", "a5")
DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "float16", "bfloat16", "float32", "float8_e4m3",
          "float8_e5m2", "hifloat8", "float64", "int64")
ALLOWED = (pto.ConstraintError, TypeError, pto.OutOfBoundsError)
SPECIAL_INDICES = (-1, -7, 2 ** 31 - 1, -(2 ** 31))  # as uint32: 4294967295, ..., 2**31 - 1, 2**31
WIDE_INDICES = (2 ** 32, -(2 ** 31) - 1, 2 ** 40, -(2 ** 62))  # int64 values outside [-2**31, 2**32): refused
GUARD = 16


@pytest.fixture(autouse=True, scope="module")
def _multicore_backend():
    previous = pto.a5_backend()
    pto.set_a5_backend("multicore")
    yield
    pto.set_a5_backend(previous)


# -- the oracle -------------------------------------------------------------------------------------------------

def policy(op, target, oob, strict):
    """What happens to an out-of-range index: "clamp", "wrap", "mask" or "refuse"."""
    if op == "scatter" and target == "cpu":
        oob = "undefined"  # the CPU simulator's MSCATTER uses every index unchecked
    if oob in ("clamp", "wrap"):
        return oob
    if oob in ("zero", "skip"):
        return "mask"
    return "refuse" if strict else "mask"


def remap(index, capacity, rule):
    """``(slot, in range)`` of one index under ``rule``; the index is cast to uint32 first (-1 is 4294967295)."""
    u = int(index) & 0xFFFFFFFF
    if rule == "clamp":
        return min(u, capacity - 1), True
    if rule == "wrap":
        return u % capacity, True
    return u, u < capacity


def bits(array):
    array = np.ascontiguousarray(array)
    return array.view(f"u{array.dtype.itemsize}")


def as_int(value_bits, dtype):
    """A raw-bit integer as a Python int of the integer dtype (for wrapping adds and max / min)."""
    d = np.dtype(dtype)
    return int(np.array([value_bits], f"u{d.itemsize}").view(d)[0])


def combine(old_bits, new_bits, atomic, dtype):
    """One sequential update in the element type, on raw bits. Float values are small integers: exact."""
    if atomic == "none":
        return new_bits
    d = pto.dtypes.resolve(dtype)
    if d.numpy.kind in "iu":
        old, new = as_int(old_bits, d.numpy), as_int(new_bits, d.numpy)
        result = {"add": old + new, "max": max(old, new), "min": min(old, new)}[atomic]
        return int(np.array([result % (1 << (8 * d.itemsize))], np.uint64).astype(d.bits)[0])
    old = float(np.array([old_bits], d.bits).view(d.numpy)[0])
    new = float(np.array([new_bits], d.bits).view(d.numpy)[0])
    result = {"add": old + new, "max": max(old, new), "min": min(old, new)}[atomic]
    return int(np.array([result], np.float64).astype(d.numpy).view(d.bits)[0])


# -- inputs -----------------------------------------------------------------------------------------------------

@st.composite
def values_for(draw, dtype, shape, small):
    """Random raw bits (NaNs and all: the ops move bits), or small integers where arithmetic is checked."""
    d = pto.dtypes.resolve(dtype) if dtype not in ("float64", "int64") else None
    np_dtype = np.dtype(dtype) if d is None else d.numpy
    n = int(np.prod(shape))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    if small and (d is None or d.kind != "opaque"):
        signed = np_dtype.kind != "u"
        raw = rng.integers(-3 if signed else 0, 4, n)
        return raw.astype(np.float64).astype(np_dtype).reshape(shape)
    width = np_dtype.itemsize
    raw = rng.integers(0, 1 << (8 * width), n, dtype=np.uint64).astype(f"u{width}")
    return raw.view(np_dtype).reshape(shape)


@st.composite
def calls(draw, targets=TARGETS, max_rows=9, max_cols=40, max_n=70):
    op = draw(st.sampled_from(("gather", "scatter")))
    target = draw(st.sampled_from(targets))
    coalesce = draw(st.sampled_from(("row", "elem")))
    dtype = draw(st.sampled_from(DTYPES))
    rows, cols = draw(st.integers(1, max_rows)), draw(st.integers(1, max_cols))
    capacity = rows if coalesce == "row" else rows * cols
    n = draw(st.integers(0, max_n))
    in_range = st.integers(0, capacity - 1)
    out_of_range = st.one_of(st.sampled_from(SPECIAL_INDICES), st.integers(capacity, capacity + 5))
    idx = draw(st.lists(st.one_of(in_range, in_range, in_range, out_of_range), min_size=n, max_size=n))
    idx_dtype = draw(st.sampled_from(("int32", "int32", "uint32", "int64", "int64", "uint64", "int16")))
    if idx_dtype == "int16":  # a narrower dtype: every value fits the uint32 cast
        idx = [i if -(2 ** 15) <= i < 2 ** 15 else -1 for i in idx]
    if idx_dtype == "int64" and n and draw(st.booleans()):  # a value no int32 / uint32 holds: refused
        idx[draw(st.integers(0, n - 1))] = draw(st.sampled_from(WIDE_INDICES))
    unsigned = idx_dtype in ("uint32", "uint64")
    idx = np.array([i & 0xFFFFFFFF if unsigned else i for i in idx], dtype=np.int64).astype(idx_dtype)
    if n and n % 2 == 0 and draw(st.booleans()):
        idx = idx.reshape(2, n // 2)  # a 2-D index array: Elem gathers its shape, Row (2, n / 2, C)
    atomic = draw(st.sampled_from(("none", "none", "add", "max", "min"))) if op == "scatter" else "none"
    oob = draw(st.sampled_from(("undefined", "clamp", "wrap", "zero" if op == "gather" else "skip")))
    call = dict(op=op, target=target, coalesce=coalesce, dtype=dtype, oob=oob, atomic=atomic,
                conflict=draw(st.sampled_from(("last", "default"))) if op == "scatter" else None,
                strict=draw(st.booleans()), last_path=draw(st.sampled_from(("auto", "slot", "owner"))))
    small = atomic != "none"
    call["table"] = draw(values_for(dtype, (rows, cols) if coalesce == "row" else (rows * cols,), small))
    call["src"] = draw(values_for(dtype, idx.shape + (cols,) if coalesce == "row" else idx.shape, small))
    call["idx"] = idx
    call["odd"] = draw(st.sampled_from(("plain", "plain", "read_only_idx", "read_only_src", "read_only_table",
                                        "strided_idx", "fortran_idx", "matrix_table", "strided_table",
                                        "strided_src")))
    return call


def _read_only(a):
    a = a.copy()
    a.flags.writeable = False
    return a


def prepare(call):
    """The arrays as the call passes them: the table inside a guarded buffer (sentinels around it; for a strided
    table also between its elements). Returns ``(buffer, table, idx, src, covered)``: ``covered`` the flat
    positions of the buffer that the table's elements occupy, in the table's C order."""
    table = call["table"]
    odd = call["odd"]
    strided = odd == "strided_table"
    # a strided table: every other element of a 1-D buffer, or the left half of a two-times-wider 2-D array
    span = 2 * table.size if strided else table.size
    buffer = np.empty(span + 2 * GUARD, table.dtype)
    bits(buffer)[:] = 0xA5

    def table_in(flat):  # the table's elements within a buffer-sized 1-D array
        if strided and table.ndim == 1:
            return flat[GUARD:GUARD + span:2]
        if strided:
            return flat[GUARD:GUARD + span].reshape(table.shape[0], 2 * table.shape[1])[:, :table.shape[1]]
        return flat[GUARD:GUARD + span].reshape(table.shape)

    covered = table_in(np.arange(buffer.size))
    bits(buffer)[covered] = bits(table)
    table_view = table_in(buffer)
    idx, src = call["idx"], call["src"]
    if odd == "read_only_idx":
        idx = _read_only(idx)
    elif odd == "read_only_src":
        src = _read_only(src)
    elif odd == "read_only_table":
        table_view.flags.writeable = False
    elif odd == "strided_idx":
        idx = np.repeat(idx, 2, axis=0)[::2]
    elif odd == "fortran_idx":
        idx = np.asfortranarray(idx)
    elif odd == "strided_src":
        src = np.repeat(src, 2, axis=-1)[..., ::2]
    elif odd == "matrix_table" and table_view.ndim == 2:
        table_view = table_view.view(np.matrix)
    return buffer, table_view, idx, src, covered.reshape(-1)


def oracle_gather(call):
    table, idx = call["table"], call["idx"]
    rule = policy("gather", call["target"], call["oob"], call["strict"])
    rows_first = table if call["coalesce"] == "row" else table.reshape(-1)
    capacity = rows_first.shape[0]
    out = np.zeros(idx.shape + ((table.shape[1],) if call["coalesce"] == "row" else ()), table.dtype)
    for pos in np.ndindex(idx.shape):
        slot, ok = remap(idx[pos], capacity, rule)
        if not ok and rule == "refuse":
            return "refuse"
        if ok:
            out[pos] = rows_first[slot]
    return out


def oracle_scatter(call):
    """(expected table bits, per-slot writers for Conflict::Default) or "refuse"."""
    table, idx, src, atomic = call["table"], call["idx"], call["src"], call["atomic"]
    target = call["target"]
    rule = policy("scatter", target, call["oob"], call["strict"])
    row = call["coalesce"] == "row"
    width = table.shape[1] if row else 1
    out = bits(table).reshape(-1).copy()
    capacity = out.size // width
    src_bits = bits(src).reshape(-1, width)
    effective = "none" if target == "cpu" else atomic
    writers = {}
    for p, index in enumerate(idx.reshape(-1)):
        slot, ok = remap(index, capacity, rule)
        if not ok:
            if rule == "refuse":
                return "refuse", None
            continue
        for c in range(width):
            e = slot * width + c
            out[e] = combine(int(out[e]), int(src_bits[p, c]), effective, call["dtype"])
            writers.setdefault(e, set()).add(int(src_bits[p, c]))
    return out, writers


# -- the property -----------------------------------------------------------------------------------------------

def run(call, table, idx, src):
    kw = dict(coalesce=call["coalesce"], oob=call["oob"], target=call["target"], strict=call["strict"])
    dtype = call["dtype"] if call["dtype"] == "hifloat8" else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # cpu atomics: a plain replace, by design
        warnings.simplefilter("ignore", PendingDeprecationWarning)  # np.matrix
        if call["op"] == "gather":
            return pto.gather(table, idx, dtype=dtype, **kw)
        return pto.scatter(table, src, idx, atomic=call["atomic"], conflict=call["conflict"],
                           last_path=call["last_path"], dtype=dtype, **kw)


def has_wide_index(call) -> bool:
    return any(v < -(2 ** 31) or v >= 2 ** 32 for v in call["idx"].reshape(-1).tolist())


def refusal_is_expected(call, refusal) -> None:
    """What the whole-array ops take since issue 23 is never the reason of a refusal: another integer index dtype
    (within range), a non-contiguous operand, an N-D index array. (An index outside [-2**31, 2**32) is always
    refused: the property checks that no such call runs.)"""
    message = str(refusal)
    if has_wide_index(call):  # refused (for that or an earlier reason: the table is wrapped first)
        return
    for taken in ("C-contiguous", "index dtype", "one index per row", "is outside [-2147483648"):
        assert taken not in message, message


@given(calls())
def test_whole_array_calls_match_the_oracle_or_refuse_cleanly(call):
    buffer, table, idx, src, covered = prepare(call)
    before = bits(buffer).copy()
    idx_before, src_before = idx.copy(), np.array(src, copy=True)
    try:
        result = run(call, table, idx, src)
    except ALLOWED as refusal:
        event(f"refused: {type(refusal).__name__}")
        assert np.array_equal(bits(buffer), before), "a refused call wrote"
        refusal_is_expected(call, refusal)
        return
    finally:
        assert np.array_equal(idx, idx_before) and np.array_equal(bits(np.asarray(src)), bits(src_before)), \
            "an input changed"
    event(f"ran: {call['op']} on {call['target']}")
    assert not has_wide_index(call), "an index outside [-2**31, 2**32) was not refused"
    outside = np.ones(buffer.size, bool)
    outside[covered] = False
    assert np.array_equal(bits(buffer)[outside], before[outside]), "wrote outside the table"
    core = bits(buffer)[covered]
    if call["op"] == "gather":
        want = oracle_gather(call)
        assert not isinstance(want, str), "an out-of-range index under strict UNDEFINED was not refused"
        assert np.array_equal(core, before[covered]), "a gather wrote its table"
        assert np.asarray(result).shape == want.shape
        assert np.array_equal(bits(np.asarray(result)).reshape(-1), bits(want).reshape(-1))
        return
    want, writers = oracle_scatter(call)
    assert not isinstance(want, str), "an out-of-range index under strict UNDEFINED was not refused"
    assert result is table, "a scatter returns the table it updated"
    if call["target"] == "a5" and call["atomic"] == "none" and call["conflict"] == "default":
        old = before[covered]
        for e in range(core.size):
            assert core[e] == old[e] if e not in writers else int(core[e]) in writers[e], f"slot {e}"
        return
    assert np.array_equal(core, want), "scatter result"


# -- tile ops: layouts, valid < padded, index tile shapes -------------------------------------------------------

@st.composite
def tile_calls(draw):
    from oracles import min_contiguous
    op = draw(st.sampled_from(("mgather", "mscatter")))
    target = draw(st.sampled_from(TARGETS))
    coalesce = draw(st.sampled_from(("row", "elem")))
    dtype = draw(st.sampled_from(DTYPES[:12]))  # the element dtypes (float64 / int64 are refused above)
    vr, vc = draw(st.integers(1, 6)), draw(st.integers(1, 20))
    blayout = draw(st.sampled_from(("row_major", "row_major", "col_major")))
    unit = min_contiguous(dtype)
    pad_r, pad_c = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    if blayout == "row_major":
        rows, cols = vr + pad_r, -(-(vc + pad_c) // unit) * unit
    else:
        rows, cols = -(-(vr + pad_r) // unit) * unit, vc + pad_c
    t_rows = draw(st.integers(1, 8))
    t_cols = vc if coalesce == "row" else draw(st.integers(1, 24))
    capacity = t_rows if coalesce == "row" else t_rows * t_cols
    n = vr if coalesce == "row" else vr * vc
    in_range = st.integers(0, capacity - 1)
    out_of_range = st.one_of(st.sampled_from(SPECIAL_INDICES), st.integers(capacity, capacity + 3))
    indices = draw(st.lists(st.one_of(in_range, in_range, out_of_range), min_size=n, max_size=n))
    if coalesce == "row":
        idx_layout = draw(st.sampled_from(("row", "col", "elem")))  # "elem": an [R, C] index tile (cpu's walk)
    else:
        idx_layout = draw(st.sampled_from(("elem", "elem_col")))
    atomic = draw(st.sampled_from(("none", "none", "add", "max", "min"))) if op == "mscatter" else "none"
    oob = draw(st.sampled_from(("undefined", "clamp", "wrap", "zero" if op == "mgather" else "skip")))
    small = atomic != "none"
    return dict(op=op, target=target, coalesce=coalesce, dtype=dtype, valid=(vr, vc), shape=(rows, cols),
                blayout=blayout, indices=indices, idx_layout=idx_layout,
                index_dtype=draw(st.sampled_from(("int32", "uint32"))), atomic=atomic, oob=oob,
                conflict=draw(st.sampled_from(("last", "default"))), strict=draw(st.booleans()),
                table=draw(values_for(dtype, (t_rows, t_cols), small)),
                data=draw(values_for(dtype, (vr, vc), small)), alias=draw(st.integers(0, 19)) == 0)


def _index_values(call):
    vr, vc = call["valid"]
    values = np.array(call["indices"], np.int64)
    if call["idx_layout"] in ("row", "col"):
        return values.reshape(vr)
    if call["coalesce"] == "row":  # [R, C] index tile in Row mode: the row index repeated along the row
        return np.repeat(values[:, None], vc, axis=1)
    return values.reshape(vr, vc)


@given(tile_calls())
def test_tile_ops_match_the_oracle_or_refuse_cleanly(call):
    from oracles import index_tile, make_tile, read_tile, sentinel
    dtype, (vr, vc) = call["dtype"], call["valid"]
    d = pto.dtypes.resolve(dtype)
    idx_values = _index_values(call)
    idx = index_tile(idx_values, call["idx_layout"], call["index_dtype"])
    data = make_tile(dtype, *call["shape"], valid=(vr, vc), blayout=call["blayout"],
                     logical_bits=bits(call["data"]) if call["op"] == "mscatter" else None)
    table = call["table"]
    buffer = np.empty(table.size + 2 * GUARD, d.numpy)
    bits(buffer)[:] = 0xA5
    bits(buffer)[GUARD:GUARD + table.size] = bits(table).reshape(-1)
    gt = pto.GlobalTensor(buffer[GUARD:GUARD + table.size], shape=table.shape, dtype=d)
    if call["alias"]:
        idx = data  # the same tile as data and index
    before, data_before, idx_before = bits(buffer).copy(), read_tile(data), read_tile(idx)
    kw = dict(coalesce=call["coalesce"], oob=call["oob"], target=call["target"], strict=call["strict"])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            if call["op"] == "mgather":
                pto.mgather(data, gt, idx, **kw)
            else:
                pto.mscatter(gt, data, idx, atomic=call["atomic"], conflict=call["conflict"], **kw)
    except ALLOWED as refusal:
        event(f"tile op refused: {type(refusal).__name__}: {getattr(refusal, 'rule', '')}")
        assert np.array_equal(bits(buffer), before), "a refused call wrote the table"
        assert np.array_equal(read_tile(data), data_before), "a refused call wrote the tile"
        return
    event(f"tile op ran: {call['op']} on {call['target']}")
    assert not call["alias"], "the same tile as data and index was accepted"
    assert np.array_equal(read_tile(idx), idx_before), "the index tile changed"
    guard = np.r_[bits(buffer)[:GUARD], bits(buffer)[-GUARD:]]
    assert (guard == np.r_[before[:GUARD], before[-GUARD:]]).all(), "wrote outside the table"
    core = bits(buffer)[GUARD:GUARD + table.size]
    got = read_tile(data)
    pad = np.ones(got.shape, bool)
    pad[:vr, :vc] = False
    if call["op"] == "mgather":
        assert (got[pad] == sentinel(dtype)).all(), "wrote the padding"
        assert np.array_equal(core, before[GUARD:GUARD + table.size]), "a gather wrote its table"
        wc = call["coalesce"] == "row"
        whole = dict(table=table, idx=idx_values if not wc else idx_values.reshape(vr, -1)[:, 0], target=call["target"],
                     oob=call["oob"], strict=call["strict"], coalesce=call["coalesce"])
        want = oracle_gather(whole)
        assert not isinstance(want, str), "an out-of-range index under strict UNDEFINED was not refused"
        assert np.array_equal(got[:vr, :vc], bits(want).reshape(vr, vc))
        return
    assert np.array_equal(got, data_before), "a scatter wrote its source tile"
    cpu = call["target"] == "cpu"
    if call["coalesce"] == "row" and not cpu:
        idx_flat = idx_values.reshape(vr, -1)[:, 0]
        src = call["data"]
    else:  # Elem, and the CPU simulator's element-wise walk in either mode
        if call["coalesce"] == "row" and idx_values.ndim == 1:
            return  # the cpu walk needs an [R, C] index: such a call is refused above
        idx_flat = idx_values.reshape(-1)
        src = call["data"].reshape(-1)
    whole = dict(table=table if call["coalesce"] == "row" and not cpu else table.reshape(-1), idx=idx_flat, src=src,
                 atomic=call["atomic"], target=call["target"], oob=call["oob"], strict=call["strict"],
                 coalesce="row" if call["coalesce"] == "row" and not cpu else "elem", dtype=dtype)
    want, writers = oracle_scatter(whole)
    assert not isinstance(want, str), "an out-of-range index under strict UNDEFINED was not refused"
    if call["target"] == "a5" and call["atomic"] == "none" and call["conflict"] == "default":
        old = before[GUARD:GUARD + table.size]
        for e in range(core.size):
            assert core[e] == old[e] if e not in writers else int(core[e]) in writers[e], f"slot {e}"
        return
    assert np.array_equal(core, want), "scatter result"


@pytest.mark.simulator
@requires_cuda
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(calls(targets=("a5",), max_rows=4, max_cols=16, max_n=12))
def test_whole_array_calls_on_the_simulator(call):
    """The same property, a smaller budget, the A5 kernels interpreted by Numba's CUDA simulator."""
    if "simulator" not in pto.a5_backends():
        pytest.skip("numba.cuda runs in real mode in this process: no simulator")
    pto.set_a5_backend("simulator")
    try:
        test_whole_array_calls_match_the_oracle_or_refuse_cleanly.hypothesis.inner_test(call)
    finally:
        pto.set_a5_backend("multicore")


# -- NZ layouts (A2/A3 only): block-stride tables, fractal tiles, the NZ walk order ---------------------------

@st.composite
def nz_calls(draw):
    """An MGATHER / MSCATTER between an NZ GM table (packed or stride-padded, one or two batches) and an NZ
    tile; cpu and a5 have no NZ path and must refuse."""
    op = draw(st.sampled_from(("mgather", "mscatter")))
    target = draw(st.sampled_from(("a2a3", "a2a3", "a2a3", "cpu", "a5")))
    coalesce = draw(st.sampled_from(("row", "elem")))
    dtype = draw(st.sampled_from(DTYPES[:9] * 3 + DTYPES[9:12]))  # mostly the dtypes A2/A3 supports
    kc0 = 32 // pto.dtypes.resolve(dtype).itemsize
    batches, bcols, brows = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    shape = (batches, bcols, brows, 16, kc0)
    gaps = draw(st.lists(st.integers(0, 3), min_size=4, max_size=4)) if draw(st.booleans()) else [0, 0, 0, 0]
    s3 = kc0 + gaps[3]
    s2 = 16 * s3 + gaps[2] * kc0
    s1 = brows * s2 + gaps[1] * kc0
    s0 = bcols * s1 + gaps[0] * kc0
    stride = (s0, s1, s2, s3, draw(st.sampled_from((1,) * 7 + (2,))))  # Stride[4] != 1 is refused
    lrows, lcols = brows * 16, batches * bcols * kc0
    tile_rows = 16 * draw(st.integers(1, 2))
    tile_cols = lcols if coalesce == "row" and draw(st.integers(0, 5)) else kc0 * draw(st.integers(1, 3))
    vr = draw(st.integers(1, tile_rows))
    vc = draw(st.integers(1, min(tile_cols, lcols) if coalesce == "row" else tile_cols))
    capacity = lrows if coalesce == "row" else lrows * lcols
    n = vr if coalesce == "row" else vr * vc
    in_range = st.integers(0, capacity - 1)
    out_of_range = st.one_of(st.sampled_from(SPECIAL_INDICES), st.integers(capacity, capacity + 3))
    indices = draw(st.lists(st.one_of(in_range, in_range, in_range, out_of_range), min_size=n, max_size=n))
    if draw(st.integers(0, 3)) == 0 and n > 1:  # collisions: the walk order decides
        indices[-1] = indices[0]
    atomic = draw(st.sampled_from(("none", "none", "add", "add", "max"))) if op == "mscatter" else "none"
    small = atomic != "none"
    memory = sum((e - 1) * s for e, s in zip(shape, stride)) + 1 + draw(st.integers(0, 5))
    return dict(op=op, target=target, coalesce=coalesce, dtype=dtype, kc0=kc0, shape=shape, stride=stride,
                tile=(tile_rows, tile_cols), valid=(vr, vc), indices=indices, atomic=atomic,
                oob=draw(st.sampled_from(("undefined", "clamp", "wrap", "zero" if op == "mgather" else "skip"))),
                strict=draw(st.booleans()), memory=draw(values_for(dtype, (memory,), small)),
                tile_bits=draw(values_for(dtype, (tile_rows * tile_cols,), small)))


def nz_expected(call):
    """(expected table memory bits, expected tile bits) by the A2/A3 NZ walks of MGATHER.md / MSCATTER.md
    ("NZ Layout (A2/A3)"), or "refuse" for an out-of-range index under strict UNDEFINED."""
    from oracles import nz_gm_offset, nz_tile_off
    op, kc0, (tile_rows, _), (vr, vc) = call["op"], call["kc0"], call["tile"], call["valid"]
    shape, stride = call["shape"], call["stride"]
    lcols = shape[0] * shape[1] * kc0
    row = call["coalesce"] == "row"
    capacity = shape[2] * 16 if row else shape[2] * 16 * lcols
    rule = policy(op[1:], "a2a3", call["oob"], call["strict"])
    memory, tile = bits(call["memory"]).copy(), bits(call["tile_bits"]).copy()

    def gm(slot, c=None):  # Row: (logical row, column); Elem: the linear index
        return nz_gm_offset(slot, c, shape, stride) if row else nz_gm_offset(slot // lcols, slot % lcols, shape, stride)

    if row:
        walk = [(r, None) for r in range(vr)]
    else:  # block-col -> row -> col-in-block
        walk = [(r, c) for b in range(-(-vc // kc0)) for r in range(vr) for c in range(b * kc0, min(b * kc0 + kc0, vc))]
    values = np.array(call["indices"], np.int64)
    if op == "mgather" and row and call["oob"] == "zero":
        tile[:] = 0  # NZ Row, GatherOOB::Zero: the whole tile is zeroed once before the row DMAs
    for r, c in walk:
        slot, ok = remap(values[r if row else r * vc + c], capacity, rule)
        if not ok and rule == "refuse":
            return "refuse"
        columns = range(lcols) if row else (c,)  # a Row DMA moves the whole logical row
        for cc in columns:
            t = nz_tile_off(r, cc, tile_rows, kc0)
            if op == "mgather":
                if ok:
                    tile[t] = memory[gm(slot, cc) if row else gm(slot)]
                elif not (row and call["oob"] == "zero"):
                    tile[t] = 0
            elif ok:
                g = gm(slot, cc) if row else gm(slot)
                memory[g] = combine(int(memory[g]), int(tile[t]), call["atomic"], call["dtype"])
    return memory, tile


@given(nz_calls())
def test_nz_calls_match_the_oracle_or_refuse_cleanly(call):
    from oracles import index_tile
    d = pto.dtypes.resolve(call["dtype"])
    memory = call["memory"]
    buffer = np.empty(memory.size + 2 * GUARD, d.numpy)
    bits(buffer)[:] = 0xA5
    bits(buffer)[GUARD:GUARD + memory.size] = bits(memory)
    table = pto.GlobalTensor(buffer[GUARD:GUARD + memory.size], call["shape"], call["stride"], layout="nz", dtype=d)
    tile = pto.Tile(d, *call["tile"], blayout="col_major", slayout="row_major", valid=call["valid"])
    bits(tile.data)[:] = bits(call["tile_bits"])
    vr, vc = call["valid"]
    values = np.array(call["indices"], np.int64)
    idx = index_tile(values, "row") if call["coalesce"] == "row" else index_tile(values.reshape(vr, vc), "elem")
    before, tile_before = bits(buffer).copy(), bits(tile.data).copy()
    kw = dict(coalesce=call["coalesce"], oob=call["oob"], target=call["target"], strict=call["strict"])
    try:
        if call["op"] == "mgather":
            pto.mgather(tile, table, idx, **kw)
        else:
            pto.mscatter(table, tile, idx, atomic=call["atomic"], **kw)
    except ALLOWED as refusal:
        event(f"NZ refused on {call['target']}: {type(refusal).__name__}: {getattr(refusal, 'rule', '')}")
        assert np.array_equal(bits(buffer), before), "a refused call wrote the table"
        assert np.array_equal(bits(tile.data), tile_before), "a refused call wrote the tile"
        return
    event(f"NZ ran: {call['op']} {call['coalesce']}")
    assert call["target"] == "a2a3", "an NZ call was accepted by a target without NZ paths"
    guard = np.r_[bits(buffer)[:GUARD], bits(buffer)[-GUARD:]]
    assert (guard == np.r_[before[:GUARD], before[-GUARD:]]).all(), "wrote outside the table's memory"
    expected = nz_expected(call)
    assert not isinstance(expected, str), "an out-of-range index under strict UNDEFINED was not refused"
    memory_want, tile_want = expected
    assert np.array_equal(bits(buffer)[GUARD:GUARD + memory.size], memory_want), "table memory"
    assert np.array_equal(bits(tile.data), tile_want), "tile"
