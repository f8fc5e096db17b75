"""Whole-array gather / scatter (host/in_memory.py): tiled results against independent oracles, every target,
tile boundaries, both Conflict::Last paths, and the validate-last command."""
import functools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import simt_pto as pto
from simt_pto.host.tools.cli import main as cli_main

TARGETS = ("cpu", "a2a3", "a5")
GATHER_OOB = ("undefined", "clamp", "wrap", "zero")


def _u32(idx):
    return idx.astype(np.int64) & 0xFFFFFFFF


def gather_oracle(table, idx, coalesce, oob):
    """numpy's table[idx] after the spec's uint32 cast and OOB remap (ZERO: 0 for out-of-range)."""
    flat = table if coalesce == "row" else table.reshape(-1)
    cap = flat.shape[0]
    u = _u32(idx)
    slots = {"undefined": u, "clamp": np.minimum(u, cap - 1), "wrap": u % cap, "zero": np.where(u < cap, u, 0)}[oob]
    out = flat[slots].copy()
    if oob == "zero":
        out[u >= cap] = 0
    return out


def serial_scatter(table, src, idx, coalesce, oob="undefined", op=None):
    """The sequential loop ``for i: table[remap(idx[i])] op= src[i]`` (Row: whole rows)."""
    out = table.copy()
    flat = out if coalesce == "row" else out.reshape(-1)
    cap = flat.shape[0]
    src = src if coalesce == "row" else src.reshape(-1)
    for i, raw in enumerate(_u32(idx).reshape(-1)):
        if oob == "skip" and raw >= cap:
            continue
        slot = {"undefined": raw, "skip": raw, "clamp": min(raw, cap - 1), "wrap": raw % cap}[oob]
        flat[slot] = src[i] if op is None else op(flat[slot], src[i])
    return out


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("oob", GATHER_OOB)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "bfloat16"])
def test_row_gather_tiles_with_tail(rng, target, oob, dtype):
    np_dtype = pto.dtypes.resolve(dtype).numpy
    table = rng.integers(-50, 50, (37, 40)).astype(np_dtype)
    lo, hi = (-3, 45) if oob != "undefined" else (0, 37)
    idx = rng.integers(lo, hi, 2 * 16 + 1).astype(np.int32)  # 2 tiles + a 1-row tail
    out = pto.gather(table, idx, oob=oob, target=target, tile_rows=16)
    assert out.shape == (33, 40)
    assert out.tobytes() == gather_oracle(table, idx, "row", oob).tobytes()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("oob", GATHER_OOB)
@pytest.mark.parametrize("shape", [(21, 7), (50,), (1,)])
def test_elem_gather_2d_and_1d(rng, target, oob, shape):
    table = rng.random((30, 10)).astype(np.float32)
    hi = 320 if oob != "undefined" else 300
    idx = rng.integers(-2 if oob != "undefined" else 0, hi, shape).astype(np.int32)
    out = pto.gather(table, idx, coalesce="elem", oob=oob, target=target, tile_rows=8)
    assert out.shape == idx.shape
    assert out.tobytes() == gather_oracle(table, idx, "elem", oob).tobytes()


def test_tiled_gather_is_the_row_gather_whatever_the_tile_rows(rng):
    table = rng.random((64, 16)).astype(np.float32)
    idx = rng.integers(0, 64, 24).astype(np.int32)
    for tile_rows in (1, 5, 24):
        assert np.array_equal(pto.gather(table, idx, tile_rows=tile_rows), table[idx])  # numpy: the rows, in order


@pytest.mark.parametrize("coalesce", ["row", "elem"])
@pytest.mark.parametrize("oob", ["undefined", "skip", "clamp", "wrap"])
@pytest.mark.parametrize("dtype, cols", [("float32", 12), ("float16", 3), ("int8", 6), ("uint32", 1)])
def test_last_paths_agree_with_the_serial_loop(rng, coalesce, oob, dtype, cols):
    """Both a5 Last paths and a2a3 against the serial loop; the table has slots nobody writes, and Row
    widths whose bytes divide by 8, 4, 2 or nothing (the owner write moves rows in those units)."""
    np_dtype = pto.dtypes.resolve(dtype).numpy
    if coalesce == "row":
        table = np.full((9, cols), 7, np_dtype)
        src = rng.integers(0, 100, (70, cols)).astype(np_dtype)
        idx = rng.integers(0, 12 if oob != "undefined" else 7, 70).astype(np.int32)  # rows 7, 8 stay unwritten
    else:
        table = np.full(23, 7, np_dtype)
        src = rng.integers(0, 100, 90).astype(np_dtype)
        idx = rng.integers(-1 if oob != "undefined" else 0, 27 if oob != "undefined" else 20, 90).astype(np.int32)
    want = serial_scatter(table, src, idx, coalesce, oob)
    results = {}
    for target, path in (("a5", "slot"), ("a5", "owner"), ("a2a3", "auto")):
        out = table.copy()
        pto.scatter(out, src, idx, coalesce=coalesce, oob=oob, target=target, tile_rows=16, last_path=path)
        results[(target, path)] = out
        assert out.tobytes() == want.tobytes(), (target, path)
    again = table.copy()
    pto.scatter(again, src, idx, coalesce=coalesce, oob=oob, tile_rows=16, last_path="owner")
    assert again.tobytes() == results[("a5", "owner")].tobytes()


@pytest.mark.parametrize("target", ["a2a3", "a5"])
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_atomic_add_composes_across_tiles(rng, target, coalesce):
    if coalesce == "row":
        table = rng.integers(-5, 5, (6, 8)).astype(np.int32)
        src = rng.integers(-1000, 1000, (41, 8)).astype(np.int32)
        idx = rng.integers(0, 6, 41).astype(np.int32)
    else:
        table = rng.integers(-5, 5, 13).astype(np.int32)
        src = rng.integers(-1000, 1000, 41).astype(np.int32)
        idx = rng.integers(0, 13, 41).astype(np.int32)
    want = serial_scatter(table, src, idx, coalesce, op=lambda a, b: a + b)
    pto.scatter(table, src, idx, coalesce=coalesce, atomic="add", target=target, tile_rows=8)
    assert np.array_equal(table, want)


@pytest.mark.parametrize("atomic, op", [("max", max), ("min", min)])
def test_float_max_min_across_tiles(rng, atomic, op):
    table = np.zeros(11, np.float32)
    src = (rng.random(60) * 200 - 100).astype(np.float32)
    idx = rng.integers(0, 11, 60).astype(np.int32)
    want = serial_scatter(table, src, idx, "elem", op=op)
    pto.scatter(table, src, idx, coalesce="elem", atomic=atomic, tile_rows=4)
    assert np.array_equal(table, want)


def test_default_conflict_keeps_one_of_the_colliders(rng):
    table = np.full(5, -1.0, np.float32)
    src = np.arange(40, dtype=np.float32)
    idx = rng.integers(0, 4, 40).astype(np.int32)  # slot 4 is never written
    pto.scatter(table, src, idx, coalesce="elem", conflict="default", tile_rows=8)
    for slot in range(4):
        assert table[slot] in src[idx == slot]
    assert table[4] == -1.0


def test_out_of_range_under_undefined_is_refused_before_any_write():
    table = np.zeros((8, 8), np.float32)
    src = np.ones((20, 8), np.float32)
    idx = np.zeros(20, np.int32)
    idx[17] = 8
    with pytest.raises(pto.OutOfBoundsError, match=r"1 index\(es\) out of range \[0, 8\).*17: 8"):
        pto.scatter(table, src, idx, tile_rows=4)
    assert not table.any()


def test_tile_budget_is_the_a5_unified_buffer():
    table = np.zeros((4, 1024), np.float32)  # 4 KB rows
    idx = np.zeros(64, np.int32)
    with pytest.raises(pto.ConstraintError, match="UB working set within budget"):
        pto.gather(table, idx, tile_rows=64)  # 256 KB of rows: over 128 KB
    with pytest.raises(pto.ConstraintError, match="UB working set within budget"):
        pto.gather(table, idx, tile_rows=40, dyn_ubuf_size=160 * 1024)
    out = pto.gather(table, idx, tile_rows=40, dyn_ubuf_size=216 * 1024)  # the spec's single-shot pattern
    assert out.shape == (64, 1024)


def test_chunked_and_single_shot_patterns():
    """MSCATTER.md: the 2048 x 8 float case as 16 chunks of 128 x 8 (8 KB src + 8 KB idx each), and the
    2304 x 8 case single-shot, which needs dynUBufSize (72 KB src + 72 KB idx > the 128 KB default)."""
    rng = np.random.default_rng(7)
    src = rng.random((2048, 8)).astype(np.float32)
    idx = rng.integers(0, 4096, (2048, 8)).astype(np.int32)
    chunked = np.zeros(4096, np.float32)
    pto.scatter(chunked, src, idx, coalesce="elem", target="a2a3", tile_rows=128)
    assert chunked.tobytes() == serial_scatter(np.zeros(4096, np.float32), src, idx, "elem").tobytes()

    src = rng.integers(-9, 9, (2304, 8)).astype(np.int32)
    idx = rng.integers(0, 4096, (2304, 8)).astype(np.int32)
    table = np.zeros(4096, np.int32)
    with pytest.raises(pto.ConstraintError, match="UB working set within budget"):
        pto.scatter(table, src, idx, coalesce="elem", atomic="add", tile_rows=2304)
    assert not table.any()
    pto.scatter(table, src, idx, coalesce="elem", atomic="add", tile_rows=2304, dyn_ubuf_size=2304 * 8 * 8)
    assert np.array_equal(table, serial_scatter(np.zeros(4096, np.int32), src, idx, "elem", op=lambda a, b: a + b))


def test_bad_arrays_are_rejected():
    with pytest.raises(pto.ConstraintError, match="index dtype must be an integer dtype .* got float32"):
        pto.gather(np.zeros((4, 8), np.float32), np.zeros(3, np.float32))
    with pytest.raises(pto.ConstraintError, match=r"idx\[2\] = 4294967296 is outside \[-2147483648, 4294967296\)"):
        pto.gather(np.zeros((4, 8), np.float32), np.array([0, 1, 2 ** 32], np.int64))
    with pytest.raises(pto.ConstraintError, match="table is 2-D"):
        pto.gather(np.zeros(32, np.float32), np.zeros(3, np.int32))
    with pytest.raises(pto.ConstraintError, match="src matches idx"):
        pto.scatter(np.zeros((4, 8), np.float32), np.zeros((3, 4), np.float32), np.zeros(3, np.int32))
    with pytest.raises(ValueError, match="last_path"):
        pto.scatter(np.zeros(4, np.float32), np.zeros(2, np.float32), np.zeros(2, np.int32), coalesce="elem",
                    last_path="fast")


def test_device_arrays_stay_on_the_device():
    if pto.a5_backend() != "gpu":
        pytest.skip("needs a CUDA GPU (no GPU in this process)")
    cupy = pytest.importorskip("cupy", reason="CuPy (the gpu extra) is not installed")
    table = cupy.arange(64 * 16, dtype=cupy.float32).reshape(64, 16)
    idx = cupy.asarray(np.random.default_rng(0).integers(0, 64, 100).astype(np.int32))
    out = pto.gather(table, idx)
    assert isinstance(out, cupy.ndarray)
    assert cupy.array_equal(out, table[idx])


def test_validate_last_command(capsys):
    assert cli_main(["validate-last", "--rows", "64", "--cols", "8", "--n", "2048", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "DETERMINISTIC" in out and "NOT DETERMINISTIC" not in out
    assert "0 mismatches against the golden" in out


def test_row_gather_moves_rows_in_the_widest_unit_that_divides_them(rng):
    from simt_pto.host.a5_planner import row_move_unit
    aligned = np.zeros(64, np.uint64).view(np.uint8)
    assert row_move_unit(4, 64, aligned) == 8        # 256-byte rows: 8-byte moves
    assert row_move_unit(4, 3, aligned) == 4         # 12-byte rows: 4-byte moves
    assert row_move_unit(1, 6, aligned) == 2         # 6-byte int8 rows: 2-byte moves
    assert row_move_unit(2, 4, aligned[4:]) == 4     # base only 4-byte aligned
    # results do not depend on the unit: odd widths and an offset table base agree with numpy
    for dtype, cols in (("int8", 3), ("float16", 6), ("float32", 5), ("float32", 64)):
        buf = rng.integers(0, 100, 40 * cols + 1).astype(pto.dtypes.resolve(dtype).numpy)
        table = buf[1:].reshape(40, cols)  # a view one element past the buffer's start
        idx = rng.integers(0, 40, 50).astype(np.int32)
        assert np.array_equal(pto.gather(np.ascontiguousarray(table), idx), table[idx])


# -- the plan of a whole-array call (host/in_memory.py, host/a5_planner.py) -------------------------------------------

def _plan_names(call):
    return [launch.kernel for launch in call.launches]


def test_whole_array_plans_launch_as_documented(rng):
    """What each whole-array call launches, read from its plan (built and validated, not run: nothing is
    written): one launch over the tiles for gathers, atomics and Conflict::Default; one slot-centric launch per tile,
    or reset / claim / write on the owner path, for Conflict::Last."""
    from simt_pto.host import in_memory
    table = np.zeros((40, 16), np.float32)  # 64-byte rows: the Row copies move 8-byte units
    src = rng.random((50, 16)).astype(np.float32)
    idx = rng.integers(0, 40, 50).astype(np.int32)
    flat, flat_src = table.reshape(-1), src[:, 0].copy()

    (gather,) = in_memory.gather_plan(table, idx, tile_rows=16).launches
    assert (gather.kernel, gather.grid, gather.arguments["valid_rows"]) == ("simt_mgather_row_kernel", 4, 50)
    # the emulator moves each row as 8 uint64 units; the plan records the hardware's element moves beside it
    assert gather.arguments["valid_cols"] == 8 and gather.arguments["dst"].dtype == np.uint64
    hw = gather.hardware
    assert (hw.kernel, hw.grid, hw.arguments["valid_cols"], hw.arguments["dst"].dtype) == (
        "simt_mgather_row_kernel", 4, 16, np.uint32)
    assert hw.geometry == pto.row_geometry(16, 16) and gather.geometry == pto.row_geometry(16, 8)
    odd = in_memory.gather_plan(np.zeros((40, 3), np.int8), idx, tile_rows=16).launches[0]
    assert odd.hardware is None  # 3-byte rows: element moves, as the hardware
    (elem,) = in_memory.gather_plan(flat, idx, coalesce="elem", tile_rows=16).launches
    assert (elem.kernel, elem.grid, elem.hardware) == ("simt_mgather_elem_kernel", 4, None)

    for conflict, atomic in (("default", "none"), ("last", "add")):
        (launch,) = in_memory.scatter_plan(table, src, idx, atomic=atomic, conflict=conflict, tile_rows=16).launches
        assert (launch.kernel, launch.grid) == ("simt_mscatter_row_kernel", 4)
        assert launch.policy.atomic == pto.ScatterAtomicOp[atomic.upper()]
    slot = in_memory.scatter_plan(flat, flat_src, idx, coalesce="elem", last_path="slot", tile_rows=16)
    assert _plan_names(slot) == ["simt_mscatter_elem_last_kernel"] * 4
    assert [launch.arguments["valid_rows"] for launch in slot.launches] == [16, 16, 16, 2]
    dense = in_memory.scatter_plan(table, src, idx, last_path="owner", owner="dense", tile_rows=16)
    assert _plan_names(dense) == ["simt_mscatter_owner_reset_kernel", "simt_mscatter_row_owner_claim_kernel",
                                  "simt_mscatter_row_owner_write_kernel"]
    assert dense.launches[2].hardware.arguments["valid_cols"] == 16
    compact = in_memory.scatter_plan(flat, flat_src, idx, coalesce="elem", last_path="owner", owner="compact")
    assert _plan_names(compact) == ["simt_mscatter_owner_reset_kernel", "simt_mscatter_compact_owner_claim_kernel",
                                    "simt_mscatter_elem_compact_owner_write_kernel"]
    assert compact.launches[2].arguments["distinct"] == np.unique(idx).size
    assert not table.any()  # planning wrote nothing
    with pytest.raises(ValueError, match="owner: expected 'dense', 'compact' or None"):
        in_memory.scatter_plan(table, src, idx, last_path="owner", owner="sparse")


@pytest.mark.parametrize("target", ["a2a3", "cpu"])
def test_sequential_targets_run_tile_plans_without_the_public_ops(monkeypatch, rng, target):
    """On a2a3 / cpu a whole-array call runs one host step per tile, each the call's validated plan re-pointed at
    the tile, on the target's own code: never through ``simt_pto.host.tile_ops`` (which would validate every tile again)."""
    from simt_pto.host import tile_ops as ops
    from simt_pto.host import in_memory

    def refuse(*args, **kwargs):
        raise AssertionError("a whole-array call went through the public tile op")
    monkeypatch.setattr(ops, "mgather", refuse)
    monkeypatch.setattr(ops, "mscatter", refuse)
    table = rng.integers(0, 100, (30, 8)).astype(np.int32)
    idx = rng.integers(0, 30, 21).astype(np.int32)
    assert np.array_equal(pto.gather(table, idx, target=target, tile_rows=8), table[idx])
    src = rng.integers(0, 100, (21, 8)).astype(np.int32)
    out = table.copy()
    pto.scatter(out, src, idx, target=target, tile_rows=8)
    assert np.array_equal(out, serial_scatter(table, src, idx, "row"))
    plan = in_memory.gather_plan(table, idx, target=target, tile_rows=8)
    assert plan.launches == () and len(plan.steps) == 3  # one host step per tile


def test_one_refusal_for_tile_ops_and_whole_array_calls():
    """``simt_pto.plan.check_indices`` is the one refusal: positions in the indices' own shape, the uint32 value,
    the count; a device scan runs only where the rule leaves the indices undefined."""
    from simt_pto.enums import IndexRule
    from simt_pto.plan import check_indices
    bits = np.array([[1, 9], [10, 4294967295]], np.uint32)
    with pytest.raises(pto.OutOfBoundsError, match=r"2 index\(es\) out of range \[0, 10\).*\(1, 0\): 10.*"
                                                   r"\(1, 1\): 4294967295"):
        check_indices("MGATHER", "a5", 10, IndexRule.IDENTITY, bits)
    check_indices("MGATHER", "a5", 10, IndexRule.WRAP, bits)  # placed, not refused

    def scan():
        raise AssertionError("scanned under a rule that places every index")
    check_indices("MSCATTER", "a5", 10, IndexRule.MASK, scan=scan)
    with pytest.raises(pto.OutOfBoundsError, match=r"3 index\(es\) out of range \[0, 10\).*7: 12"):
        check_indices("MSCATTER", "a5", 10, IndexRule.IDENTITY, scan=lambda: (3, 7, 12))
    # the whole-array call and the tile op word it the same way
    idx = np.array([0, 3, 12, 1], np.int32)
    with pytest.raises(pto.OutOfBoundsError) as whole:
        pto.gather(np.zeros((10, 8), np.float32), idx, coalesce="row")
    with pytest.raises(pto.OutOfBoundsError) as tile:
        pto.mgather(pto.Tile("float32", 4, 8), pto.GlobalTensor(np.zeros((10, 8), np.float32)),
                    pto.Tile.from_array(idx[None, :], 1, 8, valid=(1, 4)))
    assert str(whole.value) == str(tile.value)


def _on_the_gpu_runner(monkeypatch):
    """The GPU backend's code path (device arrays, staging, copies back) run by Numba's CUDA simulator."""
    from simt_pto.host import a5_planner, a5_runner
    monkeypatch.setattr(a5_runner, "a5_backend", lambda: "gpu")
    monkeypatch.setattr(a5_planner, "a5_backend", lambda: "gpu")


def test_the_gpu_path_on_the_simulator(simulator_backend, monkeypatch, rng):
    """Host arrays on the GPU backend: staged on the device, the gathered rows and the written table copied back
    (the results checked against numpy and the serial loop)."""
    _on_the_gpu_runner(monkeypatch)
    table = rng.integers(0, 100, (12, 4)).astype(np.float32)
    idx = rng.integers(0, 12, 10).astype(np.int32)
    assert np.array_equal(pto.gather(table, idx, tile_rows=4), table[idx])
    assert np.array_equal(pto.gather(table.reshape(-1), idx, coalesce="elem", tile_rows=4), table.reshape(-1)[idx])
    src = rng.integers(0, 100, (10, 4)).astype(np.float32)
    want = serial_scatter(table, src, idx, "row")
    for path in ("slot", "owner"):
        out = table.copy()
        pto.scatter(out, src, idx, tile_rows=4, last_path=path)
        assert np.array_equal(out, want), path
    out = table.copy()
    pto.scatter(out, src, idx, atomic="add", tile_rows=4)
    assert np.array_equal(out, serial_scatter(table, src, idx, "row", op=lambda a, b: a + b))


def test_the_gpu_runner_stages_a_host_table_once_per_call(simulator_backend, monkeypatch, rng):
    """The slot-centric Last path is one launch per tile: the host table goes to the device once and comes back
    once, not once per tile."""
    from simt_pto.host import a5_runner, in_memory
    _on_the_gpu_runner(monkeypatch)
    table = np.zeros(16, np.float32)
    src = rng.random(24).astype(np.float32)
    idx = (np.arange(24) % 16).astype(np.int32)
    call = in_memory.scatter_plan(table, src, idx, coalesce="elem", last_path="slot", tile_rows=8)
    assert len(call.launches) == 3
    staged, copied = [], []
    to_device, copy_to_host = a5_runner.to_device, a5_runner.copy_to_host
    monkeypatch.setattr(a5_runner, "to_device", lambda a: staged.append(a) or to_device(a))
    monkeypatch.setattr(a5_runner, "copy_to_host", lambda d, h: copied.append(h) or copy_to_host(d, h))
    a5_runner.run_plan(call)
    the_table = call.launches[0].arguments["table"]
    assert sum(a is the_table for a in staged) == 1 and sum(h is the_table for h in copied) == 1
    assert np.array_equal(table, serial_scatter(np.zeros(16, np.float32), src, idx, "elem"))


# -- a large Row gather's streaming stores (kernels/a5/device.streams_rows, intrinsics.stream_run) -------------------

def _streamed_rows_case(rng, dtype, cols, offset, oob):
    """A table, indices (out-of-range ones where ``oob`` remaps them) and a destination of at least
    ``STREAMED_RESULT_BYTES``: a new result (``offset`` None) or ``out=`` starting ``offset`` bytes into a buffer
    of sentinel bytes (``(buffer, start, out)``)."""
    from simt_pto.kernels.tuning import STREAMED_RESULT_BYTES
    item = np.dtype(pto.dtypes.resolve(dtype).numpy)
    rows = STREAMED_RESULT_BYTES // (cols * item.itemsize) + 3
    table = rng.integers(0, 120, (rows // 2 + 5, cols)).astype(item)
    idx = rng.integers(0, table.shape[0], rows).astype(np.int32)
    if oob != "undefined":
        idx[::97] = table.shape[0] + 7   # past the table: clamped, wrapped or zeroed
        idx[5::131] = -1                 # 2**32 - 1 after the uint32 cast
    if offset is None:
        return table, idx, None
    nbytes = rows * cols * item.itemsize
    buffer = np.full(nbytes + 128, 0xAB, np.uint8)
    start = (-buffer.ctypes.data) % 64 + offset   # ``offset`` bytes past a 64-byte boundary
    return table, idx, (buffer, start, buffer[start:start + nbytes].view(item).reshape(rows, cols))


@pytest.mark.parametrize("oob", GATHER_OOB)
@pytest.mark.parametrize("dtype, cols, offset", [
    ("float32", 64, None),   # a new result: 256-byte rows in 8-byte units
    ("float32", 64, 4),      # out= 4 bytes past a boundary: 4-byte units, each row's store runs start mid-way
    ("float16", 63, 2),      # 126-byte rows: a plain tail on every row
    ("int8", 37, 1),         # odd rows, odd start: byte units, plain head and tail
])
def test_a_large_row_gather_streams_its_rows_and_gives_numpys(rng, oob, dtype, cols, offset):
    from simt_pto.kernels.a5 import simt
    table, idx, placed = _streamed_rows_case(rng, dtype, cols, offset, oob)
    out = None if placed is None else placed[2]
    launch, = pto.gather_plan(table, idx, coalesce="row", oob=oob, target="a5", out=out).launches
    args = launch.arguments
    assert simt.namespace("cpu")["streams_rows"](args["dst"], args["dst_cs"], args["warps_per_row"])
    want = gather_oracle(table, idx, "row", oob)
    for _ in range(2):   # the first call and the kept launch
        got = pto.gather(table, idx, coalesce="row", oob=oob, target="a5", out=out)
        assert np.array_equal(got, want)
    if placed is not None:
        buffer, start, out = placed
        assert got is out
        assert (buffer[:start] == 0xAB).all() and (buffer[start + out.nbytes:] == 0xAB).all()


def test_only_a_large_cpu_row_gather_streams():
    from simt_pto.kernels.a5 import simt
    from simt_pto.kernels.tuning import STREAMED_RESULT_BYTES
    streams_rows = simt.namespace("cpu")["streams_rows"]
    large, small = np.empty(STREAMED_RESULT_BYTES // 8, np.uint64), np.empty(STREAMED_RESULT_BYTES // 8 - 1, np.uint64)
    assert streams_rows(large, 1, 1)
    assert not streams_rows(small, 1, 1)         # a result that the caches keep for its reader
    assert not streams_rows(large, 2, 1)         # a strided (UB) destination
    assert not streams_rows(large, 1, 2)         # a row split between warps: no one contiguous run


def test_a_cpu_warp_prefetches_as_many_bytes_of_rows_ahead_whatever_their_width():
    """Random row reads wait on memory, and what keeps it busy is the lines in flight: a CPU warp prefetches about
    ``ROW_PREFETCH_BYTES`` of rows ahead (a row counted as at least one cache line), so narrow rows are prefetched
    further ahead than wide ones (a distance fixed in rows left 64-byte rows waiting: docs/performance.md)."""
    from simt_pto.kernels.a5 import simt
    from simt_pto.kernels.a5.intrinsics import CACHE_LINE_BYTES
    from simt_pto.kernels.tuning import ROW_PREFETCH_BYTES
    rows_ahead = simt.namespace("cpu")["rows_ahead"]
    previous = None
    for row_bytes in range(1, 4 * ROW_PREFETCH_BYTES + 1):
        cols, itemsize = (row_bytes // 4, 4) if row_bytes % 4 == 0 else (row_bytes, 1)
        ahead = rows_ahead(cols, itemsize)
        cost = max(row_bytes, CACHE_LINE_BYTES)
        assert ahead >= 1, row_bytes
        assert ahead == 1 or ahead * cost <= ROW_PREFETCH_BYTES, row_bytes     # no more than the distance...
        assert (ahead + 1) * cost > ROW_PREFETCH_BYTES, row_bytes               # ...and no less
        assert previous is None or ahead <= previous, row_bytes                 # wider rows: never further ahead
        previous = ahead


@functools.cache
def _stream_copy():
    """An ``njit`` function ``(dst, dst_start, src, src_start, n)`` around the CPU's ``stream_run``, compiled once."""
    import numba

    from simt_pto.kernels.a5.intrinsics import CPU
    stream_run = CPU["stream_run"]

    @numba.njit
    def copy(dst, dst_start, src, src_start, n):
        stream_run(dst, dst_start, src, src_start, n)
    return copy


def test_the_cpu_stream_run_stores_around_the_caches():
    copy = _stream_copy()
    copy(np.zeros(64, np.uint8), 0, np.ones(64, np.uint8), 0, 64)
    llvm = copy.inspect_llvm(copy.signatures[0])
    assert "!nontemporal" in llvm


@settings(max_examples=60, deadline=None, derandomize=True)
@given(dst_start=st.integers(0, 40), src_start=st.integers(0, 40), n=st.integers(0, 300),
       dtype=st.sampled_from([np.uint8, np.uint16, np.uint32, np.uint64]))
def test_the_cpu_stream_run_copies_exactly_its_run_at_any_alignment(dst_start, src_start, n, dtype):
    src = np.arange(400, dtype=np.uint64).astype(dtype) + 1
    dst = np.zeros(400, dtype)
    want = dst.copy()
    want[dst_start:dst_start + n] = src[src_start:src_start + n]
    _stream_copy()(dst, dst_start, src, src_start, n)
    assert np.array_equal(dst, want)
