"""Device arrays on the GPU backend: tile ops on device GlobalTensors and whole-array ops on Numba, CuPy and
PyTorch device arrays, which must stay on the device and give the results of independent numpy oracles.

The CUDA simulator has no device memory of its own (its arrays carry no ``__cuda_array_interface__``), so
these paths exist only on a real GPU: without one this module is skipped as a whole, and the GPU session
(``bench/gpu_session.sh``) runs it.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import requires_cuda

import simt_pto as pto

pytestmark = [requires_cuda,
              pytest.mark.skipif(pto.a5_backend() != "gpu",
                                 reason="needs a CUDA GPU: the multicore backend and the simulator have no device arrays")]

KINDS = ("numba", "cupy", "torch")


def to_device(kind, host):
    if kind == "numba":
        from numba import cuda
        return cuda.to_device(np.ascontiguousarray(host))
    if kind == "cupy":
        cupy = pytest.importorskip("cupy", reason="CuPy (the gpu extra) is not installed")
        return cupy.asarray(host)
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    return torch.as_tensor(np.ascontiguousarray(host), device="cuda")


def to_host(array):
    from numba import cuda
    return cuda.as_cuda_array(array).copy_to_host()


def assert_kind(kind, array):
    module = {"numba": "numba", "cupy": "cupy", "torch": "torch"}[kind]
    assert type(array).__module__.split(".")[0] == module, type(array)


def serial_last(table, src, idx, coalesce):
    """``for i: table[idx[i]] = src[i]`` (Row: whole rows): the last writer wins."""
    out = table.copy()
    flat, src = (out, src) if coalesce == "row" else (out.reshape(-1), src.reshape(-1))
    for i, slot in enumerate(idx.reshape(-1)):
        flat[slot] = src[i]
    return out


# -- whole-array ops ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_gather_returns_a_device_array_of_the_callers_kind(kind, coalesce):
    rng = np.random.default_rng(1)
    table = rng.random((300, 24)).astype(np.float32)
    idx = rng.integers(0, 300 if coalesce == "row" else table.size, 1000).astype(np.int32)
    out = pto.gather(to_device(kind, table), to_device(kind, idx), coalesce=coalesce)
    assert_kind(kind, out)
    want = table[idx] if coalesce == "row" else table.reshape(-1)[idx]
    assert to_host(out).tobytes() == want.tobytes()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("coalesce", ["row", "elem"])
@pytest.mark.parametrize("last_path", ["slot", "owner"])
def test_last_scatter_in_place_on_the_device(kind, coalesce, last_path):
    rng = np.random.default_rng(2)
    if coalesce == "row":
        table, src = np.full((50, 12), -1.0, np.float32), rng.random((400, 12)).astype(np.float32)
        idx = rng.integers(0, 45, 400).astype(np.int32)                # rows 45.. keep their values
    else:
        table, src = np.full(700, -1.0, np.float32), rng.random(3000).astype(np.float32)
        idx = rng.integers(0, 650, 3000).astype(np.int32)
    dev = to_device(kind, table)
    pto.scatter(dev, to_device(kind, src), to_device(kind, idx), coalesce=coalesce, last_path=last_path)
    assert to_host(dev).tobytes() == serial_last(table, src, idx, coalesce).tobytes()


@pytest.mark.parametrize("dtype, atomic", [("int32", "add"), ("float32", "max"), ("float32", "min"),
                                           ("float16", "add"), ("bfloat16", "add")])
@pytest.mark.parametrize("size", [64, 63])
def test_atomic_scatter_on_the_device(dtype, atomic, size):
    """Exact small integers, so every order of the atomics gives the same bits. An odd float16 / bfloat16
    table ends mid-word: its CAS loop runs on a device staging copy."""
    rng = np.random.default_rng(3)
    d = pto.dtypes.resolve(dtype)
    table = rng.integers(-4, 5, size).astype(np.float64)
    src = rng.integers(-4, 5, 5000).astype(np.float64)
    idx = rng.integers(0, size, 5000).astype(np.int32)
    want = table.copy()
    {"add": np.add, "max": np.maximum, "min": np.minimum}[atomic].at(want, idx, src)
    dev = to_device("numba", table.astype(d.numpy).view(d.bits))
    pto.scatter(dev, to_device("numba", src.astype(d.numpy).view(d.bits)), to_device("numba", idx),
                coalesce="elem", atomic=atomic, dtype=dtype)
    np.testing.assert_array_equal(to_host(dev).view(d.numpy).astype(np.float64), want)


def test_out_of_range_device_indices_are_refused_before_any_write():
    table = np.arange(40, dtype=np.float32)
    dev = to_device("numba", table)
    idx = np.array([1, 2, 40, 3], np.int32)
    with pytest.raises(pto.OutOfBoundsError, match="40"):
        pto.scatter(dev, to_device("numba", np.zeros(4, np.float32)), to_device("numba", idx), coalesce="elem")
    assert to_host(dev).tobytes() == table.tobytes()


# -- tile ops on device GlobalTensors ----------------------------------------------------------------------------

@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_tile_gather_from_a_device_table(coalesce):
    rng = np.random.default_rng(4)
    table = rng.random((40, 16)).astype(np.float32)
    gt = pto.GlobalTensor(to_device("numba", table) if coalesce == "row" else to_device("numba", table.reshape(-1)))
    if coalesce == "row":
        rows = rng.integers(0, 40, 8)
        dst, idx = pto.Tile("float32", 8, 16), pto.Tile.from_array(rows.reshape(1, 8).astype(np.int32), 1, 8)
        want = table[rows]
    else:
        flat = rng.integers(0, table.size, (8, 16))
        dst, idx = pto.Tile("float32", 8, 16), pto.Tile.from_array(flat.astype(np.int32), 8, 16)
        want = table.reshape(-1)[flat]
    pto.mgather(dst, gt, idx, coalesce=coalesce)
    assert dst.valid_numpy().tobytes() == want.tobytes()


@pytest.mark.parametrize("offset, size", [(0, 40), (0, 39), (1, 40)], ids=["whole-words", "odd", "mid-word-start"])
def test_tile_half_add_into_a_device_table(offset, size):
    """float16 atomicAdd into a device table used in place, or staged on the device when it does not cover
    whole 32-bit words; the elements around the table keep their bits."""
    from numba import cuda
    buf = np.full(size + 2, 0x7E00, np.uint16)                      # float16 NaN sentinels around the table
    buf[offset:offset + size] = np.arange(size, dtype=np.float16).view(np.uint16)
    dev_buf = cuda.to_device(buf)
    gt = pto.GlobalTensor(dev_buf[offset:offset + size], dtype="float16")
    cols = np.arange(32) % size
    src = pto.Tile.from_array(np.ones((1, 32), np.float16), 1, 32)
    pto.mscatter(gt, src, pto.Tile.from_array(cols.reshape(1, 32).astype(np.int32), 1, 32), coalesce="elem",
                 atomic="add")
    want = np.arange(size, dtype=np.float64)
    np.add.at(want, cols, 1.0)
    got = dev_buf.copy_to_host()
    np.testing.assert_array_equal(got[offset:offset + size].view(np.float16).astype(np.float64), want)
    outside = np.concatenate([got[:offset], got[offset + size:]])
    assert (outside == 0x7E00).all()


def test_l1_simt_gather_with_device_scratch():
    """GM -> L1 Elem with GatherExec::Simt, every GM operand on the device: the L1 tile and the scratch
    hold what the same call gives on host memory."""
    from numba import cuda
    rng = np.random.default_rng(5)
    table = rng.random(500).astype(np.float32)
    idx = rng.integers(0, 500, (16, 16)).astype(np.int32)
    tiles, scratches = [], []
    for device in (False, True):
        tile = pto.Tile("float32", 16, 16, loc="mat", blayout="col_major", slayout="row_major")
        scratch = np.zeros(256, np.float32)
        wrap = (lambda a: pto.GlobalTensor(cuda.to_device(a))) if device else pto.GlobalTensor
        st = wrap(scratch)
        pto.mgather(tile, wrap(table), wrap(idx), coalesce="elem", exec="simt", scratch=st)
        tiles.append(tile.numpy())
        scratches.append(st.numpy())
    np.testing.assert_array_equal(tiles[1], table[idx])
    assert tiles[0].tobytes() == tiles[1].tobytes() and scratches[0].tobytes() == scratches[1].tobytes()


def test_torch_bfloat16_tensors_are_read_as_bfloat16():
    """PyTorch exports bfloat16 as ``<V2``: a gather keeps the dtype, a scatter-add rounds in bfloat16."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    table = torch.arange(64 * 8, device="cuda").reshape(64, 8).to(torch.bfloat16)
    idx = torch.randint(0, 64, (100,), device="cuda", dtype=torch.int32)
    out = pto.gather(table, idx)
    assert out.dtype == torch.bfloat16 and torch.equal(out, table[idx.long()])
    acc = torch.zeros(16, device="cuda", dtype=torch.bfloat16)
    slots = torch.arange(64, device="cuda", dtype=torch.int32) % 16
    pto.scatter(acc, torch.ones(64, device="cuda", dtype=torch.bfloat16), slots, coalesce="elem", atomic="add")
    assert torch.equal(acc, torch.full_like(acc, 4))


# -- repeated calls: the fast path's device runners ----------------------------------------------------------------

@pytest.fixture
def device_runs(monkeypatch):
    """How many calls the fast path's device runners served (returned a result rather than sending the call to
    the full path)."""
    from simt_pto.host.kept_launch import KeptLaunch
    counts = {"gather": 0, "scatter": 0}

    def counted(self, pointers, template, _run=KeptLaunch.run_device):
        result = _run(self, pointers, template)
        counts["gather" if "dst" in self.made else "scatter"] += result is not None
        return result
    monkeypatch.setattr(KeptLaunch, "run_device", counted)
    return counts


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("coalesce", ["row", "elem"])
@pytest.mark.parametrize("oob", ["undefined", "clamp", "zero"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_a_repeated_gather_runs_from_its_runner(kind, coalesce, oob, dtype, device_runs):
    """Three calls of one signature with new tables and indices each time: the first takes the full path, the
    next two its runner; each gives the reference's bits."""
    rng = np.random.default_rng(6)
    rows, cols = 97, 6
    capacity = rows if coalesce == "row" else rows * cols
    bits = np.dtype(f"u{np.dtype(dtype).itemsize}")
    for _ in range(3):
        table = rng.integers(0, 1 << (8 * bits.itemsize), (rows, cols), dtype=np.uint64).astype(bits)
        if dtype == "float16":
            table &= 0x7BFF  # finite values only: a NaN's bits need not survive torch's own copies
        idx = rng.integers(0, capacity if oob == "undefined" else capacity + 40, 300).astype(np.int32)
        out = pto.gather(to_device(kind, table.view(dtype)), to_device(kind, idx), coalesce=coalesce, oob=oob)
        assert_kind(kind, out)
        flat_bits = table.reshape(-1)
        want = (pto.reference.gather_row(flat_bits, capacity, cols, idx, oob) if coalesce == "row"
                else pto.reference.gather_elem(flat_bits, capacity, idx, oob))
        assert to_host(out).view(bits).tobytes() == want.tobytes()
    assert device_runs["gather"] == 2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("coalesce", ["row", "elem"])
@pytest.mark.parametrize("oob", ["undefined", "skip", "wrap"])
@pytest.mark.parametrize("dtype, atomic", [("int32", "add"), ("float32", "add"), ("int32", "max"),
                                           ("uint32", "min"), ("float32", "max"), ("float32", "none")])
def test_a_repeated_scatter_runs_from_its_runner(kind, coalesce, oob, dtype, atomic, device_runs):
    """Three scatters of one signature into one table with new sources and indices: the first takes the full
    path, the next two its runner. Small integers (exact in float32) make every order of the atomics give the
    same bits; atomic NONE (Conflict::Default) writes each slot once, so no store races."""
    rng = np.random.default_rng(7)
    rows, cols, n = 90, 5, 60
    capacity = rows if coalesce == "row" else rows * cols
    table = rng.integers(0, 50, (rows, cols)).astype(dtype)
    dev = to_device(kind, table)
    want = table.view(f"u{table.itemsize}").reshape(-1)
    for _ in range(3):
        if atomic == "none":
            idx = rng.permutation(capacity)[:n].astype(np.int32)
        else:
            idx = rng.integers(0, capacity if oob == "undefined" else capacity + 30, n).astype(np.int32)
        src = rng.integers(0, 50, (n, cols) if coalesce == "row" else n).astype(dtype)
        pto.scatter(dev, to_device(kind, src), to_device(kind, idx), coalesce=coalesce, atomic=atomic, oob=oob,
                    conflict="default")
        want = pto.reference.scatter(want, dtype, coalesce, idx, src.view(want.dtype), capacity, oob, atomic,
                                     row_len=cols)
        assert to_host(dev).view(want.dtype).reshape(-1).tobytes() == want.tobytes()
    assert device_runs["scatter"] == 2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("coalesce", ["row", "elem"])
@pytest.mark.parametrize("oob", ["undefined", "skip"])
def test_a_repeated_last_scatter_runs_its_owner_launches_from_its_runner(kind, coalesce, oob, device_runs):
    """Conflict::Last on the owner path (reset, claim, write; one owner per table slot): three calls of one
    signature with new sources and indices, many updates to each slot; the first plans, the next two run the
    three kept launches on an owner array of their own; each leaves the sequential loop's bits."""
    rng = np.random.default_rng(8)
    rows, cols, n = 90, 5, 300
    capacity = rows if coalesce == "row" else rows * cols
    table = rng.integers(0, 50, (rows, cols)).astype(np.float32)
    dev = to_device(kind, table)
    want = table.copy()
    for _ in range(3):
        idx = rng.integers(0, capacity if oob == "undefined" else capacity + 30, n).astype(np.int32)
        src = rng.integers(0, 50, (n, cols) if coalesce == "row" else n).astype(np.float32)
        pto.scatter(dev, to_device(kind, src), to_device(kind, idx), coalesce=coalesce, oob=oob, last_path="owner")
        keep = idx < capacity
        want = serial_last(want, src[keep], idx[keep], coalesce)
        assert to_host(dev).tobytes() == want.tobytes()
    assert device_runs["scatter"] == 2


@pytest.mark.parametrize("kind", KINDS)
def test_a_repeated_call_is_refused_as_the_first_one_would_be(kind, device_runs):
    """Once a signature has a runner, an index past the table (under undefined OOB) and a source that shares the
    table's memory are still refused, naming the rule, with the table unchanged."""
    table = np.arange(40, dtype=np.float32)
    dev, src = to_device(kind, table), to_device(kind, np.ones(4, np.float32))
    for _ in range(2):
        pto.scatter(dev, src, to_device(kind, np.array([1, 2, 3, 4], np.int32)), coalesce="elem", atomic="add")
        out = pto.gather(dev, to_device(kind, np.array([1, 2, 3, 4], np.int32)), coalesce="elem")
    assert device_runs == {"gather": 1, "scatter": 1}
    before = to_host(dev).copy()
    bad = to_device(kind, np.array([1, 2, 40, 3], np.int32))
    with pytest.raises(pto.OutOfBoundsError, match="40"):
        pto.scatter(dev, src, bad, coalesce="elem", atomic="add")
    with pytest.raises(pto.OutOfBoundsError, match="40"):
        pto.gather(dev, bad, coalesce="elem")
    with pytest.raises(pto.ConstraintError, match="shares memory"):
        pto.scatter(dev, dev[:4], to_device(kind, np.array([1, 2, 3, 4], np.int32)), coalesce="elem", atomic="add")
    assert to_host(dev).tobytes() == before.tobytes()
    assert to_host(out).tobytes() == (table[1:5] + 2).tobytes()
    assert device_runs == {"gather": 1, "scatter": 1}
