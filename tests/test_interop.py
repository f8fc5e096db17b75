"""Arrays from the user's library in the whole-array ops (issue 23, part 2; host/arrays.py, host/in_memory.py).

DLPack and array-interface producers used in place (bfloat16 included), PyTorch tensors and JAX arrays in and
out, int64 and other integer index dtypes under the uint32 cast, N-D indices for Row, ``out=``, non-contiguous
operands, the overlap check on every new kind of operand, and the Dask refusal. Oracles are plain numpy and
Python loops over the spec's rules (indices cast to uint32, then the OOB remap; Conflict::Last: the largest flat
C-order source position wins). PyTorch and JAX cases skip where those libraries are not installed.
"""
from __future__ import annotations

import ctypes
import gc
import sys
import tracemalloc
import weakref

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import simt_pto as pto
from conftest import TARGETS, ArrayInterfaceOnly, DLPackOnly, for_targets, requires_cuda

BF16 = np.dtype(ml_dtypes.bfloat16)


# -- a producer of bfloat16 over DLPack (DLPackOnly, ArrayInterfaceOnly: tests/conftest.py) ------------------------

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype, _get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype, _is_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]


class BFloat16Producer(DLPackOnly):
    """bfloat16 over DLPack, which numpy cannot import: the capsule of a uint16 array whose DLTensor dtype code is
    patched to kDLBfloat (4). DLTensor's dtype sits 20 bytes into it (data, device, ndim); the DLTensor starts at
    byte 0 of a DLManagedTensor and at byte 32 of a DLManagedTensorVersioned (version, ctx, deleter, flags)."""

    def __init__(self, words):
        assert words.dtype == np.uint16
        super().__init__(words)

    def __dlpack__(self, **kwargs):
        capsule = self._base.__dlpack__(**kwargs)
        for name, tensor_at in ((b"dltensor_versioned", 32), (b"dltensor", 0)):
            if _is_valid(capsule, name):
                ctypes.c_uint8.from_address(_get_pointer(capsule, name) + tensor_at + 20).value = 4
                return capsule
        raise AssertionError("no DLPack capsule")


def bf16_bits(values) -> np.ndarray:
    return np.asarray(values, np.float32).astype(BF16).view(np.uint16)


class FakeDaskArray:
    """What a Dask array looks like to a duck-typing library; touching its data would compute it."""

    shape, dtype, ndim = (8, 4), np.dtype(np.float32), 2

    def __array__(self, *args, **kwargs):
        raise AssertionError("the Dask array was computed")

    def __dlpack__(self, **kwargs):
        raise AssertionError("the Dask array was computed")

    @property
    def __array_interface__(self):
        raise AssertionError("the Dask array was computed")


FakeDaskArray.__module__ = "dask.array.core"


# -- oracles ----------------------------------------------------------------------------------------------------

def remap(values, capacity, oob):
    """``(slots, in range)`` after the uint32 cast (``v & 0xFFFFFFFF``) and the OOB rule, value by value."""
    slots, ok = [], []
    for v in np.asarray(values).reshape(-1).tolist():
        u = int(v) & 0xFFFFFFFF
        slot = {"clamp": min(u, capacity - 1), "wrap": u % capacity}.get(oob, u)
        slots.append(slot if slot < capacity else 0)
        ok.append(slot < capacity)
    shape = np.shape(values)
    return np.array(slots, np.int64).reshape(shape), np.array(ok, bool).reshape(shape)


def gather_oracle(table, idx, coalesce, oob="undefined"):
    rows = table if coalesce == "row" else table.reshape(-1)
    slots, ok = remap(idx, rows.shape[0], oob)
    out = rows[slots].copy()
    out[~ok] = 0
    return out


def serial_scatter(table, src, idx, coalesce):
    """``for p in C order: table[idx[p]] = src[p]`` (Row: whole rows): the last writer in flat C order wins."""
    out = table.copy()
    rows = out if coalesce == "row" else out.reshape(-1)
    flat_src = np.asarray(src).reshape(-1, rows.shape[1]) if coalesce == "row" else np.asarray(src).reshape(-1)
    for p, v in enumerate(np.asarray(idx).reshape(-1).tolist()):
        rows[int(v) & 0xFFFFFFFF] = flat_src[p]
    return out


# -- producers used in place -------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("wrapper", [DLPackOnly, ArrayInterfaceOnly])
def test_a_producer_of_one_protocol_is_read_and_written_in_place(rng, target, wrapper):
    table = rng.integers(-9, 9, (12, 8)).astype(np.float32)
    idx = np.array([3, 0, 11, 3], np.int32)
    out = pto.gather(wrapper(table), wrapper(idx), target=target)
    assert type(out) is np.ndarray and out.tobytes() == table[idx].tobytes()

    base = np.zeros((12, 8), np.float32)
    src = rng.integers(-9, 9, (4, 8)).astype(np.float32)
    producer = wrapper(base)
    assert pto.scatter(producer, wrapper(src), wrapper(idx), target=target) is producer
    assert base.tobytes() == serial_scatter(np.zeros((12, 8), np.float32), src, idx, "row").tobytes()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_bfloat16_over_dlpack_is_read_as_its_16_bit_words(rng, target, coalesce):
    values = rng.integers(-100, 100, (10, 16)) / 8
    words = bf16_bits(values)
    idx = np.array([[9, 0], [4, 4]], np.int32)
    got = pto.gather(BFloat16Producer(words), idx, coalesce=coalesce, target=target)
    assert got.dtype == BF16
    assert got.view(np.uint16).tobytes() == gather_oracle(words, idx, coalesce).tobytes()

    table = np.zeros_like(words)
    src = bf16_bits(rng.integers(-100, 100, idx.shape + ((16,) if coalesce == "row" else ())) / 4)
    pto.scatter(BFloat16Producer(table), BFloat16Producer(src), idx, coalesce=coalesce, target=target)
    assert table.tobytes() == serial_scatter(np.zeros_like(words), src, idx, coalesce).tobytes()


def test_a_dlpack_view_keeps_the_producers_memory_until_it_is_released():
    from simt_pto.host.arrays import host_memory
    base = np.arange(32, dtype=np.uint16)
    alive = weakref.ref(base)
    producer = BFloat16Producer(base)
    del base
    view, kind = host_memory(producer, "table")
    del producer
    gc.collect()
    assert alive() is not None and kind == "foreign" and view.dtype == BF16
    assert view.view(np.uint16).tolist() == list(range(32))
    del view
    gc.collect()
    assert alive() is None, "the producer's deleter never ran"


def test_releasing_a_dlpack_view_runs_no_python_code():
    """The producer's memory is released by its capsule's destructor, C code: a ``__del__`` of ours that called the
    deleter was Python code, where a Ctrl-C that landed was only printed ("Exception ignored"), the call went on as
    if no key was pressed, and the deleter could be skipped (the memory leaked)."""
    from simt_pto.host.arrays import host_memory
    view, _ = host_memory(BFloat16Producer(np.arange(32, dtype=np.uint16)), "table")
    entered = []
    sys.setprofile(lambda frame, event, arg: entered.append(frame.f_code.co_name) if event == "call" else None)
    try:
        del view
    finally:
        sys.setprofile(None)
    assert entered == []


def _exports_read_only_over_dlpack(array: np.ndarray) -> bool:
    """Whether numpy exports the read-only ``array`` over DLPack: numpy >= 2.1 does, as DLPack 1.x with the read-only
    flag; older numpy speaks DLPack 0.x only, which has no such flag, and refuses the export."""
    try:
        array.__dlpack__(max_version=(1, 0))
    except (TypeError, BufferError):
        return False
    return True


def test_a_read_only_producer_is_read_but_not_written():
    table = np.arange(32, dtype=np.float32).reshape(8, 4)
    table.flags.writeable = False  # exported over DLPack 1.x with the read-only flag
    if not _exports_read_only_over_dlpack(table):
        # (numpy < 2.1) the producer cannot export it: both calls say so, naming the argument and numpy's reason
        src = np.zeros((1, 4), np.float32)
        with pytest.raises(TypeError, match="table: DLPackOnly could not export its memory over DLPack .*readonly"):
            pto.gather(DLPackOnly(table), np.array([2], np.int32))
        with pytest.raises(TypeError, match="table: DLPackOnly could not export its memory over DLPack .*readonly"):
            pto.scatter(DLPackOnly(table), src, np.array([2], np.int32))
        assert table.tolist() == np.arange(32, dtype=np.float32).reshape(8, 4).tolist() and not src.any()
        return
    assert pto.gather(DLPackOnly(table), np.array([2], np.int32)).tolist() == [[8, 9, 10, 11]]
    with pytest.raises(pto.ConstraintError, match="table is a read-only array"):
        pto.scatter(DLPackOnly(table), np.zeros((1, 4), np.float32), np.array([2], np.int32))


def test_an_object_of_no_array_protocol_is_refused_naming_the_argument():
    with pytest.raises(TypeError, match="idx: expected a numpy array, a device array, or an array that exports DLPack"):
        pto.gather(np.zeros((4, 8), np.float32), [0, 1])
    with pytest.raises(TypeError, match="src: expected .* got tuple"):
        pto.scatter(np.zeros((4, 8), np.float32), (1.0,) * 8, np.array([0], np.int32))


@pytest.mark.parametrize("role", ["table", "idx", "src", "out"])
def test_the_in_memory_plans_refuse_a_dask_array_without_computing_it(role):
    """pto.gather / pto.scatter route a Dask operand to their Dask route (tests/test_dask_tables.py); the plans
    describe in-memory calls only, and refuse one before anything touches its data."""
    args = dict(table=np.zeros((8, 4), np.float32), idx=np.array([1], np.int32), src=np.ones((1, 4), np.float32),
                out=np.zeros((1, 4), np.float32))
    args[role] = FakeDaskArray()
    with pytest.raises(TypeError, match=f"{role}: a Dask array has no in-memory plan"):
        if role == "src":
            pto.scatter_plan(args["table"], args["src"], args["idx"])
        else:
            pto.gather_plan(args["table"], args["idx"], out=args["out"] if role == "out" else None)


# -- integer index dtypes ---------------------------------------------------------------------------------------

EDGES = [-(2 ** 31), -1, 0, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1]  # as uint32: 2**31, 4294967295, 0, ...


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("coalesce, oob", [("row", "wrap"), ("row", "clamp"), ("elem", "wrap"), ("elem", "zero")])
def test_int64_indices_at_the_edges_behave_as_their_uint32_cast(rng, target, coalesce, oob):
    table = rng.integers(-99, 99, (7, 8)).astype(np.float32)
    idx64 = np.array(EDGES, np.int64)
    as_int32 = idx64.astype(np.int32)  # the same low 32 bits
    as_uint32 = idx64.astype(np.uint32)
    want = gather_oracle(table, idx64, coalesce, oob)
    for idx in (idx64, as_int32, as_uint32, as_uint32.astype(np.uint64)):
        got = pto.gather(table, idx, coalesce=coalesce, oob=oob, target=target)
        assert got.tobytes() == want.tobytes(), idx.dtype


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("value, shape, position", [
    (-(2 ** 31) - 1, (6,), "[4]"), (2 ** 32, (6,), "[4]"), (2 ** 32, (2, 3), "[1, 1]"), (2 ** 63 - 1, (3, 2), "[2, 0]")])
def test_an_int64_index_outside_the_uint32_cast_is_refused_by_value_and_position(target, value, shape, position):
    idx = np.zeros(6, np.int64)
    idx[4] = value
    idx[5] = value - 1 if value > 0 else value + 1  # later offenders are not named
    idx = idx.reshape(shape)
    table = np.zeros((8, 4), np.float32)
    message = rf"MSCATTER on {target}: idx{re_escape(position)} = {value} is outside \[-2147483648, 4294967296\)"
    with pytest.raises(pto.ConstraintError, match=message):
        pto.scatter(table, np.ones(shape + (4,), np.float32), idx, oob="wrap", target=target)
    assert not table.any()
    with pytest.raises(pto.ConstraintError, match=message.replace("MSCATTER", "MGATHER")):
        pto.gather(table, idx, oob="wrap", target=target)


def re_escape(text):
    return text.replace("[", r"\[").replace("]", r"\]")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bool", "complex64"])
def test_non_integer_indices_are_refused(dtype):
    with pytest.raises(pto.ConstraintError, match=f"index dtype must be an integer dtype .* got {dtype}"):
        pto.gather(np.zeros((4, 8), np.float32), np.zeros(2, dtype))


def other_byte_order(dtype) -> np.dtype:
    """``dtype`` in the byte order this host does not use (``>i4`` on a little-endian host)."""
    swapped = np.dtype(dtype).newbyteorder("S")
    assert not swapped.isnative
    return swapped


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["int16", "uint16", "int32", "uint32", "int64", "uint64"])
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_indices_in_the_other_byte_order_behave_as_native_ones(target, dtype, coalesce):
    """Every width alike (``>i4`` / ``>u4`` were refused as "not a PTO element dtype" where ``>i2`` / ``>i8`` ran)."""
    table = np.arange(48, dtype=np.float32).reshape(6, 8)
    native = (np.array([[5, 0], [3, 5]]) * (1 if coalesce == "row" else 9)).astype(dtype)
    swapped = native.astype(other_byte_order(dtype))
    for _ in range(2):  # a repeated call of the signature may take the fast path
        got = pto.gather(table, swapped, coalesce=coalesce, target=target)
        assert got.tobytes() == gather_oracle(table, native, coalesce).tobytes()
    src = np.arange(1, 1 + native.size * (8 if coalesce == "row" else 1), dtype=np.float32).reshape(
        native.shape + ((8,) if coalesce == "row" else ()))
    for _ in range(2):
        written = np.zeros_like(table)
        pto.scatter(written, src, swapped, coalesce=coalesce, target=target)
        assert written.tobytes() == serial_scatter(np.zeros_like(table), src, native, coalesce).tobytes()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int16", "uint32"])
def test_data_arrays_in_the_other_byte_order_are_read_and_written_in_their_own(target, dtype):
    """A table, ``src`` or ``out`` in the other byte order is read from a native copy and written back in its own
    byte order (never its raw bytes read as native), also by a repeated call."""
    native = np.arange(48).astype(dtype).reshape(6, 8)
    swapped = native.astype(other_byte_order(dtype))
    idx = np.array([5, 0, 3, 5])
    for _ in range(2):
        assert np.array_equal(pto.gather(swapped, idx, target=target), native[idx])
    out = np.zeros((4, 8), other_byte_order(dtype))
    assert pto.gather(swapped, idx, out=out, target=target) is out and np.array_equal(out, native[idx])
    table = np.zeros((6, 8), other_byte_order(dtype))
    src = (np.arange(32).reshape(4, 8) + 1).astype(other_byte_order(dtype))
    want = serial_scatter(np.zeros((6, 8), dtype), src.astype(dtype), idx, "row")
    for _ in range(2):
        assert pto.scatter(table, src, idx, target=target) is table
        assert table.dtype == other_byte_order(dtype) and np.array_equal(table, want)
    table.flags.writeable = False
    with pytest.raises(pto.ConstraintError, match="table is a read-only array"):
        pto.scatter(table, src, idx, target=target)
    with pytest.raises(pto.ConstraintError, match=r"GlobalTensor: the array has dtype [<>]\w+ \(the other byte order\)"):
        pto.GlobalTensor(swapped)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_integer_index_dtype_matches_the_uint32_oracle(data):
    """Indices of int8 ... uint64 with values anywhere in [-2**31, 2**32) (or the dtype's range): the result is
    numpy's ``table[remap(v & 0xFFFFFFFF)]``, whatever the dtype and shape."""
    dtype = np.dtype(data.draw(st.sampled_from(["int8", "uint8", "int16", "uint16", "int64", "uint64"])))
    lo = max(-(2 ** 31), int(np.iinfo(dtype).min))
    hi = min(2 ** 32 - 1, int(np.iinfo(dtype).max))
    rows, cols = data.draw(st.integers(1, 9)), data.draw(st.sampled_from([8, 16]))
    shape = data.draw(st.sampled_from([(5,), (2, 3), (1, 2, 2)]))
    near = st.integers(max(lo, -3), min(hi, rows + 3))
    values = data.draw(st.lists(st.one_of(near, st.integers(lo, hi)), min_size=int(np.prod(shape)),
                                max_size=int(np.prod(shape))))
    idx = np.array(values, np.int64).astype(dtype).reshape(shape)
    coalesce, oob = data.draw(st.sampled_from(["row", "elem"])), data.draw(st.sampled_from(["clamp", "wrap", "zero"]))
    target = data.draw(st.sampled_from(TARGETS))
    table = np.arange(rows * cols, dtype=np.int32).reshape(rows, cols)
    got = pto.gather(table, idx, coalesce=coalesce, oob=oob, target=target)
    assert got.shape == idx.shape + ((cols,) if coalesce == "row" else ())
    assert got.tobytes() == gather_oracle(table, idx, coalesce, oob).tobytes()


# -- N-D indices ------------------------------------------------------------------------------------------------

@for_targets(dtypes=("float32", "bfloat16", "int8"))
def test_row_gather_takes_nd_indices_like_embedding(rng, target, dtype):
    d = pto.dtypes.resolve(dtype)
    table = rng.integers(-50, 50, (9, 16)).astype(d.numpy)
    idx = rng.integers(0, 9, (3, 5)).astype(np.int64)
    got = pto.gather(table, idx, target=target)
    assert got.shape == (3, 5, 16) and got.dtype == d.numpy
    assert got.tobytes() == np.take(table, idx, axis=0).tobytes()
    assert pto.gather(table, idx[:1, :1].reshape(()), target=target).tobytes() == table[idx[0, 0]].tobytes()


@pytest.mark.parametrize("target", TARGETS)
def test_elem_gather_of_3d_indices_has_their_shape(rng, target):
    table = rng.random((6, 7)).astype(np.float32)
    idx = rng.integers(0, 42, (2, 3, 4)).astype(np.int32)
    got = pto.gather(table, idx, coalesce="elem", target=target)
    assert got.shape == (2, 3, 4) and got.tobytes() == table.reshape(-1)[idx].tobytes()


@for_targets(dtypes=("float32", "int16"))
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_scatter_of_nd_indices_lets_the_last_c_order_position_win(rng, target, dtype, coalesce):
    d = pto.dtypes.resolve(dtype)
    table = np.zeros((6, 8), d.numpy)
    capacity = 6 if coalesce == "row" else 48
    idx = rng.integers(0, capacity, (3, 4)).astype(np.int64)
    idx[2, 3] = idx[0, 0]  # a collision: position (2, 3) is later in C order
    src = np.arange(np.prod(idx.shape) * (8 if coalesce == "row" else 1)).astype(d.numpy)
    src = src.reshape(idx.shape + ((8,) if coalesce == "row" else ()))
    pto.scatter(table, src, idx, coalesce=coalesce, target=target)
    assert table.tobytes() == serial_scatter(np.zeros((6, 8), d.numpy), src, idx, coalesce).tobytes()


@pytest.mark.parametrize("target", TARGETS)
def test_a_scatter_source_of_another_shape_is_refused(target):
    with pytest.raises(pto.ConstraintError, match=r"src \(6, 8\) float32, expected \(2, 3, 8\) float32"):
        pto.scatter(np.zeros((6, 8), np.float32), np.zeros((6, 8), np.float32), np.zeros((2, 3), np.int32),
                    target=target)


# -- out= -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_gather_into_out_returns_out(rng, target, coalesce):
    table = rng.random((10, 8)).astype(np.float32)
    idx = rng.integers(0, 10, (2, 3)).astype(np.int32)
    shape = idx.shape + ((8,) if coalesce == "row" else ())
    out = np.full(shape, -1, np.float32)
    assert pto.gather(table, idx, coalesce=coalesce, target=target, out=out) is out
    assert out.tobytes() == gather_oracle(table, idx, coalesce).tobytes()
    # a non-contiguous out: every other column of a wider array; the columns between stay as they were
    wide = np.full(shape[:-1] + (2 * shape[-1],), 7, np.float32)
    pto.gather(table, idx, coalesce=coalesce, target=target, out=wide[..., ::2])
    assert wide[..., ::2].tobytes() == gather_oracle(table, idx, coalesce).tobytes()
    assert (wide[..., 1::2] == 7).all()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("coalesce", ["row", "elem"])
@pytest.mark.parametrize("offset", [0, 1])
def test_gather_writes_a_contiguous_out_in_place(rng, target, coalesce, offset):
    """A C-contiguous host ``out`` is written where it lies, at any element-aligned address (``offset`` shifts it
    by one float32 off the 8-byte boundary a wider row move would need), with no gathered copy made first: the
    peak of the memory the call allocates stays below the result's size."""
    table = rng.random((4096, 64)).astype(np.float32)
    idx = rng.integers(0, 4096, 2048).astype(np.int32)
    shape = idx.shape + ((64,) if coalesce == "row" else ())
    size = int(np.prod(shape))
    buffer = np.full(size + 2, -1, np.float32)
    out = buffer[offset:offset + size].reshape(shape)
    pto.gather(table, idx, coalesce=coalesce, target=target, out=out)  # compiled and planned: what follows is a call
    out[...] = -1
    tracemalloc.start()
    try:
        assert pto.gather(table, idx, coalesce=coalesce, target=target, out=out) is out
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.tobytes() == gather_oracle(table, idx, coalesce).tobytes()
    assert (np.delete(buffer, np.arange(offset, offset + size)) == -1).all()  # no byte outside out
    if target != "cpu":  # (the reference gathers tile by tile into tiles of its own)
        assert peak < out.nbytes // 2, f"{peak} bytes allocated while gathering {out.nbytes} bytes into out"


@pytest.mark.parametrize("target", TARGETS)
def test_a_bad_out_is_refused_before_anything_is_written(target):
    table = np.arange(32, dtype=np.float32).reshape(8, 4)
    idx = np.array([1, 2], np.int32)
    read_only = np.zeros((2, 4), np.float32)
    read_only.flags.writeable = False
    cases = [(np.zeros((2, 5), np.float32), r"out \(2, 5\) float32, expected \(2, 4\) float32"),
             (np.zeros((2, 4), np.int32), r"out \(2, 4\) int32, expected \(2, 4\) float32"),
             (read_only, "out is a read-only array"),
             (table[4:6], "out .*shares memory with table"),
             (DLPackOnly(table[4:6]), "out .*shares memory with table")]
    for out, message in cases:
        before = table.copy()
        with pytest.raises(pto.ConstraintError, match=message):
            pto.gather(table, idx, target=target, out=out)
        assert np.array_equal(table, before)
    buffer = np.zeros(16, np.int32)
    with pytest.raises(pto.ConstraintError, match="out .*shares memory with idx"):
        pto.gather(np.arange(8, dtype=np.int32), buffer[:4], coalesce="elem", target=target, out=buffer[2:6])


# -- non-contiguous operands ------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_non_contiguous_operands_are_read(rng, target):
    big = rng.random((10, 24)).astype(np.float32)
    table = big[:, 4:12]  # a column slice
    idx = rng.integers(0, 10, 12).astype(np.int32)[::2]
    assert pto.gather(table, idx, target=target).tobytes() == table[idx].tobytes()
    assert pto.gather(table, np.asfortranarray(idx.reshape(2, 3)), coalesce="elem", target=target).tobytes() == \
        np.ascontiguousarray(table).reshape(-1)[idx.reshape(2, 3)].tobytes()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_scatter_into_a_column_slice_leaves_the_other_columns(rng, target, coalesce):
    big = np.full((6, 20), -3, np.float32)
    table = big[:, 5:13]  # 8 columns of 20
    capacity = 6 if coalesce == "row" else 48
    idx = rng.integers(0, capacity, 8).astype(np.int32)
    src = rng.integers(0, 50, (8, 8) if coalesce == "row" else (8,)).astype(np.float32)
    src_t = np.ascontiguousarray(src.T).T if coalesce == "row" else src  # a transposed (F-order) source
    want = serial_scatter(np.ascontiguousarray(table), src, idx, coalesce)
    assert pto.scatter(table, src_t, idx, coalesce=coalesce, target=target) is table
    assert np.array_equal(big[:, 5:13], want)
    assert (big[:, :5] == -3).all() and (big[:, 13:] == -3).all()


def test_a_non_contiguous_table_that_cannot_be_written_back_is_refused():
    base = np.zeros(8, np.float32)
    overlapping = np.lib.stride_tricks.as_strided(base, shape=(4, 4), strides=(4, 4))  # rows share elements
    with pytest.raises(pto.ConstraintError, match="some of its elements share memory"):
        pto.scatter(overlapping, np.ones((1, 4), np.float32), np.array([0], np.int32), target="a2a3")
    read_only = np.zeros((4, 8), np.float32)[:, ::2]
    read_only.flags.writeable = False
    with pytest.raises(pto.ConstraintError, match="table is a read-only array"):
        pto.scatter(read_only, np.ones((1, 4), np.float32), np.array([0], np.int32), target="a2a3")
    assert not base.any()


# -- overlap through other protocols ----------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_dlpack_views_of_the_table_are_refused_as_scatter_operands(target):
    table = np.zeros((8, 4), np.int32)
    table.reshape(-1)[:2] = [1, 0]
    before = table.copy()
    with pytest.raises(pto.ConstraintError, match="table .*shares memory with idx"):
        pto.scatter(DLPackOnly(table), np.ones((2, 4), np.int32), DLPackOnly(table.reshape(-1)[:2]), target=target)
    with pytest.raises(pto.ConstraintError, match="table .*shares memory with src"):
        pto.scatter(table, ArrayInterfaceOnly(table[4:6]), np.array([0, 1], np.int32), target=target)
    # an int64 index array is converted to a copy; the caller's memory is what is checked
    wide = np.zeros(16, np.int32)
    with pytest.raises(pto.ConstraintError, match="table .*shares memory with idx"):
        pto.scatter(wide[:12], np.ones(2, np.int32), wide[10:14].view(np.int64), coalesce="elem", target=target)
    assert np.array_equal(table, before)


# -- PyTorch (skipped where torch is not installed) --------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_torch_tensors_in_torch_tensors_out(target, dtype):
    torch = pytest.importorskip("torch")
    generator = torch.Generator().manual_seed(0)
    table = (torch.randint(-50, 50, (9, 16), generator=generator)).to(getattr(torch, dtype))
    idx = torch.randint(0, 9, (3, 4), generator=generator)  # int64, torch's default
    got = pto.gather(table, idx, target=target)
    assert isinstance(got, torch.Tensor) and got.dtype == table.dtype and got.shape == (3, 4, 16)
    assert torch.equal(got, torch.nn.functional.embedding(idx, table) if dtype != "int8" else table[idx])

    target_table = torch.zeros(9, 16, dtype=table.dtype)
    src = torch.arange(12 * 16).reshape(3, 4, 16).to(table.dtype)
    assert pto.scatter(target_table, src, idx, target=target) is target_table
    want = torch.zeros(9, 16, dtype=table.dtype)
    for p, row in enumerate(idx.reshape(-1).tolist()):
        want[row] = src.reshape(-1, 16)[p]
    assert torch.equal(target_table, want)


@pytest.mark.parametrize("target", TARGETS)
def test_torch_out_noncontiguous_and_parameters(target):
    torch = pytest.importorskip("torch")
    table = torch.arange(40, dtype=torch.float32).reshape(10, 4)
    idx = torch.tensor([7, 1, 7])
    out = torch.full((3, 4), -1.0)
    assert pto.gather(table, idx, target=target, out=out) is out
    assert torch.equal(out, table[idx])
    big = torch.full((3, 10), -1.0)
    pto.gather(table.t().contiguous().t(), idx, target=target, out=big[:, 2:6])  # an F-order table, a sliced out
    assert torch.equal(big[:, 2:6], table[idx]) and (big[:, :2] == -1).all() and (big[:, 6:] == -1).all()

    weights = torch.nn.Parameter(torch.zeros(5, 4))  # requires_grad: written as torch writes it, under no_grad
    with pytest.raises(pto.ConstraintError, match="table is a leaf that requires grad"):
        pto.scatter(weights, torch.ones(2, 4), torch.tensor([3, 0]), target=target)
    assert weights.detach().eq(0).all() and weights._version == 0
    with torch.no_grad():
        pto.scatter(weights, torch.ones(2, 4), torch.tensor([3, 0]), target=target)
    assert weights.detach()[[0, 3]].eq(1).all() and weights.detach()[[1, 2, 4]].eq(0).all() and weights._version == 1
    wide = torch.zeros(5, 12)
    pto.scatter(wide[:, 4:8], torch.arange(8.0).reshape(4, 2).t(), torch.tensor([4, 1]), target=target)
    assert torch.equal(wide[[4, 1], 4:8], torch.arange(8.0).reshape(4, 2).t()) and wide[:, :4].eq(0).all()
    with pytest.raises(pto.ConstraintError, match="table .*shares memory with src"):
        pto.scatter(table, table[2:4], torch.tensor([0, 1]), target=target)


@pytest.mark.parametrize("target", ["cpu", "a5"])  # A2/A3 has no float8
def test_torch_float8_tensors_are_read_over_dlpack(target):
    torch = pytest.importorskip("torch")
    table = torch.arange(-32, 32, dtype=torch.float32).reshape(8, 8).to(torch.float8_e4m3fn)
    got = pto.gather(table, torch.tensor([5, 2]), target=target)
    assert got.dtype == torch.float8_e4m3fn
    assert torch.equal(got.view(torch.uint8), table.view(torch.uint8)[[5, 2]])


# -- JAX (skipped where jax is not installed) ---------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_jax_arrays_in_jax_arrays_out(target, dtype):
    pytest.importorskip("jax")
    import jax.numpy as jnp
    table = jnp.arange(64, dtype=jnp.float32).reshape(8, 8).astype(dtype)
    idx = jnp.array([[3, 1], [7, 3]])
    got = pto.gather(table, idx, target=target)
    assert isinstance(got, type(table)) and got.dtype == table.dtype
    assert (got == jnp.take(table, idx, axis=0)).all()
    src = jnp.ones((2, 2, 8), dtype)
    updated = pto.scatter(table, src, idx, target=target)
    assert isinstance(updated, type(table)) and updated is not table
    assert (updated == table.at[idx.reshape(-1)].set(src.reshape(-1, 8))).all()
    assert (table == jnp.arange(64, dtype=jnp.float32).reshape(8, 8).astype(dtype)).all(), "the input changed"
    with pytest.raises(TypeError, match="out: a JAX array cannot be written"):
        pto.gather(table, idx, target=target, out=jnp.zeros((2, 2, 8), dtype))


# -- dtype= and device arrays, as the adapter sees them -----------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_dtype_reinterprets_table_and_out_alike(rng, target):
    words = bf16_bits(rng.integers(-9, 9, (6, 16)))
    idx = np.array([5, 0], np.int64)
    out = np.zeros((2, 16), BF16)
    assert pto.gather(words, idx, target=target, dtype="bfloat16", out=out) is out
    assert out.view(np.uint16).tobytes() == words[[5, 0]].tobytes()
    with pytest.raises(pto.ConstraintError, match=r"out: dtype bfloat16 \(2 B\) over float32 memory"):
        pto.gather(words, idx, target=target, dtype="bfloat16", out=np.zeros((2, 16), np.float32))


class FakeDeviceArray:
    """A ``__cuda_array_interface__`` exporter (no memory behind it: only its description is read)."""

    def __init__(self, shape, strides, typestr="<f4"):
        self.__cuda_array_interface__ = dict(shape=shape, strides=strides, typestr=typestr, data=(1 << 20, False),
                                             version=3)


@requires_cuda
def test_device_arrays_are_taken_as_they_are_or_refused_when_not_contiguous():
    from simt_pto.host.arrays import wrap
    packed = wrap(FakeDeviceArray((4, 8), (32, 4)), "table", two_d_only=True)
    assert packed.device and (packed.rows, packed.cols) == (4, 8) and packed.obj is packed.user
    assert wrap(FakeDeviceArray((4, 8), None), "table").device
    with pytest.raises(pto.ConstraintError, match="table is a non-contiguous device array"):
        wrap(FakeDeviceArray((4, 8), (64, 4)), "table")


def test_a_device_array_without_the_cuda_extra_names_the_extra(monkeypatch):
    """The device paths run numba-cuda's kernels and copies: a core install refuses a device array up front."""
    from simt_pto import backend
    from simt_pto.host.arrays import wrap
    monkeypatch.setattr(backend, "numba_cuda_installed", lambda: False)
    with pytest.raises(pto.MissingExtraError, match=r'table: a device array needs numba-cuda.*pip install "simt_pto\[cuda\]"'):
        wrap(FakeDeviceArray((4, 8), (32, 4)), "table", two_d_only=True)


@pytest.mark.parametrize("target", TARGETS)
def test_a_float16_add_into_a_strided_table_of_odd_length(target):
    """A 16-bit float Add into a table that ends mid-word runs inside the boundary words' guard (a5); the write-back
    of the strided table's contiguous copy comes after that guard has published the boundary word."""
    base = np.full(13, 100, np.float16)
    table = base[::2]  # 7 elements (14 bytes: the copy ends mid-word), every other one; the odd ones are a guard band
    idx = np.array([6, 0, 6, 3], np.int64)
    src = np.array([1, 2, 3, 4], np.float16)
    atomic = "none" if target == "cpu" else "add"
    pto.scatter(table, src, idx, coalesce="elem", atomic=atomic, conflict="default" if target == "a5" else "last",
                target=target)
    want = np.full(7, 100, np.float16)
    if atomic == "add":
        np.add.at(want, idx, src)
    else:
        for slot, value in zip(idx.tolist(), src.tolist()):  # the sequential order: the last writer wins
            want[slot] = value
    assert base[::2].tolist() == want.tolist() and (base[1::2] == 100).all()
