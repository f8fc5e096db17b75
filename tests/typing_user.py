"""A user's script: every public function and method of ``simt_pto`` called with realistic arguments, and the
results used. Not a test module (pytest does not collect it): tests/test_typing.py type-checks it with
``mypy --strict`` against a regular install, and runs it.

Two checks keep the type check honest:

* every result is pinned with ``assert_type``: a public name a type checker sees as ``Any`` fails there;
* :func:`refused_calls` holds one wrong call per public function, each under a ``# type: ignore[code]``: if the
  function loses its annotations, or a type checker sees it as ``Any``, the call is accepted, the ignore is
  unused, and ``--strict`` (``warn_unused_ignores``) reports it.

Run as a script (``python tests/typing_user.py``), it calls the model, the tile ops and the whole-array ops on
the ``cpu`` target and builds an A5 plan on the ``multicore`` backend; the tools (the coalescing analyzer, the
compile report, selftest) are type-checked only: they compile kernels, which takes longer than a check should.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from typing_extensions import assert_type

import simt_pto as pto
from simt_pto import dtypes, nz, reference
from simt_pto.launch_spec import CallPlan, HostStep, KernelPolicy, LaunchSpec

Array = npt.NDArray[Any]
UIntDType = np.dtype[np.unsignedinteger[Any]]


def element_types() -> None:
    f16 = dtypes.resolve("float16")
    assert_type(f16, pto.DType)
    assert_type(dtypes.resolve(np.float32), pto.DType)
    assert_type(dtypes.resolve(np.dtype(np.int32)), pto.DType)
    assert_type(dtypes.resolve(pto.dtypes.bfloat16), pto.DType)
    assert_type(f16.name, str)
    assert_type(f16.kind, str)
    assert_type(f16.numpy, np.dtype[Any])
    assert_type(f16.itemsize, int)
    assert_type(f16.bits, UIntDType)
    assert_type(dtypes.unsigned(f16.itemsize), UIntDType)
    assert_type(dtypes.from_typestr("<V2"), np.dtype[Any])
    assert_type(dtypes.atomic_dtypes("a5", pto.ScatterAtomicOp.ADD), tuple[pto.DType, ...])
    assert_type(dtypes.names(dtypes.INDEX_DTYPES), str)
    assert_type(dtypes.ELEMENT_DTYPES["a2a3"], tuple[pto.DType, ...])
    assert_type(dtypes.ATOMIC_DTYPES[("a5", pto.ScatterAtomicOp.MAX)], tuple[pto.DType, ...])
    assert f16 in dtypes.ELEMENT_DTYPES["a5"] and f16 in dtypes.atomic_dtypes("a5", pto.ScatterAtomicOp.NONE)


def enums_and_geometry() -> None:
    assert_type(pto.GatherOOB(2), pto.GatherOOB)
    assert_type(pto.GatherOOB["CLAMP"].value, int)
    assert pto.Coalesce.ROW.name == "ROW" and "a5" in pto.TARGETS
    for oob in (pto.ScatterOOB.SKIP, pto.ScatterConflict.LAST, pto.ScatterAtomicOp.MIN, pto.GatherExec.SIMT,
                pto.TileType.MAT, pto.BLayout.COL_MAJOR, pto.SLayout.ROW_MAJOR, pto.Layout.NZ):
        assert_type(int(oob), int)

    row = pto.row_geometry(8, 64)
    assert_type(row, pto.LaunchGeometry)
    assert_type(row.block, tuple[int, int])
    assert_type(row.threads + row.launch_warps + row.row_warps + row.warps_per_row + row.work_items, int)
    assert_type(row.rows_per_warp, int)
    assert_type(row.scheme, str)
    assert_type(row.as_dict(), dict[str, Any])
    assert_type(pto.elem_geometry(4, 32), pto.LaunchGeometry)
    assert_type(pto.last_geometry(1024).launch_warps, int)


def nz_layout() -> None:
    matrix = np.arange(32 * 32, dtype=np.float16).reshape(32, 32)
    kc0 = nz.c0(matrix.dtype.itemsize)
    assert_type(kc0, int)
    assert_type(nz.tile_offsets(32, 32, kc0), Array)
    shape = nz.gm_shape(32, 32, matrix.dtype.itemsize)
    assert_type(shape, tuple[int, ...])
    strides = nz.packed_strides(shape)
    assert_type(strides, tuple[int, ...])
    assert_type(nz.gm_offsets(shape, strides, rows=16, cols=16), Array)
    flat, nz_shape, nz_stride = nz.to_nz(matrix)
    assert_type(flat, Array)
    assert_type(nz_shape, tuple[int, ...])
    assert_type(nz.from_nz(flat, nz_shape, nz_stride), Array)
    assert (nz.from_nz(flat, nz_shape) == matrix).all()


def the_reference() -> None:
    table = reference.to_bits(np.arange(16 * 4), "float32")
    assert_type(table, Array)
    assert_type(reference.from_bits(table, "float32"), Array)
    assert_type(reference.itemsize("bfloat16"), int)
    assert_type(reference.bits_type("float16"), np.dtype[Any])
    assert_type(reference.kind("hifloat8"), str)
    assert_type(reference.ELEMENT_TYPES, dict[str, Any])
    assert_type(reference.UNIT_ROUNDOFF["float32"], float)
    assert_type(reference.u32(-1), int)
    assert_type(reference.slot(-1, 10, "wrap"), int | None)
    idx = np.array([3, -1, 70, 3], np.int32)
    assert_type(reference.slots(idx, 16, "clamp"), Array)
    assert_type(reference.tile_offset("row_major", 8, 16, 2, 3), int)
    assert_type(reference.nz_tile_offset(32, 16, 2, 3), int)
    assert_type(reference.gather_row(table, 16, 4, idx, "clamp"), Array)
    assert_type(reference.gather_elem(table, 64, idx.reshape(2, 2), "zero"), Array)
    assert_type(reference.total_order_key(0x80000000, "float32"), int)
    assert_type(reference.combine("float32", "max", 0x3F800000, 0x7FC00000), int)
    src = reference.to_bits(np.ones((4, 4)), "float32")
    writes = reference.writers("row", idx, src, 16, "clamp", row_len=4)
    assert_type(writes, list[tuple[int, int]])
    after = reference.scatter(table, "float32", "row", idx, src, 16, "clamp", atomic="add", row_len=4)
    assert_type(after, Array)
    assert_type(reference.candidates("row", idx, src, 16, "clamp", row_len=4), dict[int, set[int]])
    exact, bound = reference.float_add_bound("float32", table, writes)
    assert_type(exact, Array)
    assert_type(bound, Array)
    problems = reference.scatter_mismatches(after, table, "float32", "row", idx, src, 16, "clamp", "add", "last",
                                            row_len=4)
    assert_type(problems, list[str])
    slots = reference.slots(idx, 16, "skip")
    assert_type(reference.last_writer_scatter(np.zeros((16, 4)), slots, np.ones((4, 4))), Array)
    assert not problems


def tiles_and_tensors() -> tuple[pto.Tile, pto.GlobalTensor]:
    tile = pto.Tile("float16", 8, 64, valid=(4, 64), name="dst")
    assert_type(tile, pto.Tile)
    assert_type(tile.dtype, pto.DType)
    assert_type(tile.rows + tile.cols + tile.valid_rows + tile.valid_cols + tile.fractal + tile.nbytes + tile.c0, int)
    assert_type(tile.loc, pto.TileType)
    assert_type(tile.blayout, pto.BLayout)
    assert_type(tile.slayout, pto.SLayout)
    assert_type(tile.addr, int | None)
    assert_type(tile.name, str | None)
    assert_type(tile.data, Array)
    assert_type(tile.valid, tuple[int, int])
    assert_type(tile.strides, tuple[int, int])
    assert_type(tile.is_nz, bool)
    assert_type(tile.grid(), Array)
    assert_type(tile.offsets(), Array)
    assert_type(tile.describe(), str)
    assert_type(tile.fill(0.5), pto.Tile)
    assert_type(tile.set(np.ones((2, 64), np.float16)), pto.Tile)
    assert_type(tile.numpy(), Array)
    assert_type(tile.valid_numpy(), Array)
    nz_tile = pto.Tile(pto.dtypes.float16, 16, 16, loc="mat", blayout=pto.BLayout.COL_MAJOR, slayout="row_major",
                       addr=0x40)
    assert nz_tile.is_nz
    idx = pto.Tile.from_array(np.array([[3, 70, -1, 5, 0, 0, 0, 0]], np.int32), valid=(1, 4))
    assert_type(idx, pto.Tile)
    assert_type(pto.Tile.from_array([1, 2, 3, 4, 5, 6, 7, 8], 1, 8, dtype="int32"), pto.Tile)

    table = pto.GlobalTensor(np.arange(64 * 64, dtype=np.float16).reshape(64, 64))
    assert_type(table, pto.GlobalTensor)
    assert_type(table.layout, pto.Layout)
    assert_type(table.dtype, pto.DType)
    assert_type(table.on_device, bool)
    assert_type(table.shape, tuple[int, ...])
    assert_type(table.stride, tuple[int, ...])
    assert_type(table.size + table.reach + table.table_size, int)
    assert_type(table.writeable, bool)
    assert_type(table.flat, Array)
    assert_type(table.host_flat(), Array)
    assert_type(table.numpy(), Array)
    assert_type(table.logical_shape, tuple[int, int])
    assert_type(table.logical_offsets(4, 8), Array)
    assert_type(table.logical(), Array)
    assert_type(repr(table), str)
    padded = pto.GlobalTensor(np.zeros(8 * 80, np.float32), shape=(8, 64), stride=(80, 1), layout="nd")
    assert_type(padded, pto.GlobalTensor)
    assert_type(pto.GlobalTensor.nz_from_matrix(np.ones((16, 32), np.float16)), pto.GlobalTensor)
    hif8 = pto.GlobalTensor(np.zeros(64, np.uint8), dtype="hifloat8")
    assert hif8.dtype.kind == "opaque"
    return idx, table


def tile_ops(idx: pto.Tile, table: pto.GlobalTensor) -> None:
    dst = pto.Tile("float16", 8, 64, valid=(4, 64))
    assert_type(pto.mgather(dst, table, idx, coalesce="row", oob="clamp", target="cpu"), pto.Tile)
    elem_idx = pto.Tile.from_array(np.array([[0, 5, 4095, -1]], np.int32), 1, 8, valid=(1, 4))
    elem_dst = pto.Tile("float16", 1, 16, valid=(1, 4))
    assert_type(pto.mgather(elem_dst, table, elem_idx, coalesce=pto.Coalesce.ELEM, oob=pto.GatherOOB.WRAP,
                            target="cpu", strict=True, dyn_ubuf_size=None), pto.Tile)
    src = pto.Tile.from_array(np.ones((1, 16), np.float16))
    slots = pto.Tile.from_array(np.arange(0, 4096, 256, dtype=np.int32)[None, :])
    assert_type(pto.mscatter(table, src, slots, coalesce="elem", atomic="none", oob="skip", conflict="last",
                             target="cpu"), pto.GlobalTensor)
    loaded = pto.Tile("float16", 4, 64)
    assert_type(pto.tload(loaded, table), pto.Tile)
    assert_type(pto.tstore(table, loaded), pto.GlobalTensor)

    try:
        pto.mgather(dst, table, idx, target="cpu")  # index 70 of 64 rows under UNDEFINED
    except pto.OutOfBoundsError as e:
        assert_type(e.positions, list[int | tuple[int, ...]])
        assert_type(e.values, list[int])
        assert_type(e.count + e.capacity, int)
        assert_type(e.op + e.target, str)
    try:
        pto.mscatter(table, src, slots, coalesce="elem", atomic="max", target="a2a3")
    except pto.ConstraintError as e:
        assert_type(e.rule + e.detail + e.op, str)
        assert_type(e.target, str | None)


def whole_arrays() -> None:
    table: Array = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    idx = np.array([3, 70, -1, 5], np.int32)
    rows = pto.gather(table, idx, coalesce="row", oob="clamp", target="cpu")
    assert_type(rows, Array)
    assert rows.shape == (4, 16)
    elems = pto.gather(table, idx, coalesce=pto.Coalesce.ELEM, oob=pto.GatherOOB.ZERO, target="cpu", tile_rows=2,
                       dyn_ubuf_size=None, strict=True, dtype="float32")
    assert elems.shape == (4,)
    src = np.ones((4, 16), np.float32)
    in_range = np.array([3, 1, 4, 1], np.int64)  # the cpu target's MSCATTER checks every index
    assert_type(pto.scatter(table, src, in_range, coalesce="row", oob="wrap", conflict="last", target="cpu"), Array)
    flat: Array = table.reshape(-1)
    assert_type(pto.scatter(flat, src[:, 0], idx, coalesce="elem", oob="skip", target="a2a3", atomic="add",
                            last_path="auto"), Array)

    plan = pto.gather_plan(table, idx, coalesce="row", oob="clamp", target="cpu")
    assert_type(plan, CallPlan)
    assert_type(plan.describe(), list[str])
    assert_type(plan.launches, tuple[LaunchSpec, ...])
    assert_type(plan.guard_name, str | None)
    for step in plan.steps:
        if isinstance(step, HostStep):
            assert_type(step.name, str)
            assert_type(step.run(), None)
    scatter_plan = pto.scatter_plan(table, src, idx, coalesce="row", atomic="add", oob="clamp", target="a2a3")
    assert_type(scatter_plan, CallPlan)
    with scatter_plan.guard():
        pass


def a5_plans() -> None:
    assert_type(pto.a5_backends(), tuple[str, ...])
    previous = pto.a5_backend()
    assert_type(previous, str)
    assert_type(pto.set_a5_backend("multicore"), str)
    try:
        table = np.zeros((64, 16), np.float32)
        plan = pto.gather_plan(table, np.arange(8, dtype=np.int32), oob="wrap", target="a5", backend="multicore")
        launch = plan.launches[0]
        assert_type(launch.kernel, str)
        assert_type(launch.geometry, pto.LaunchGeometry)
        assert_type(launch.grid, int)
        assert_type(launch.writes, tuple[str, ...])
        assert_type(launch.args, tuple[tuple[str, Any], ...])
        assert_type(launch.arguments, dict[str, Any])
        assert_type(launch.values(), tuple[Any, ...])
        assert_type(launch.hardware, LaunchSpec | None)
        assert_type(launch.with_args(**launch.arguments), LaunchSpec)
        policy = launch.policy
        assert_type(policy, KernelPolicy)
        assert_type(policy.describe(), dict[str, str])
        assert_type(policy.cache_key, str)
        assert_type(policy.compiled(), KernelPolicy)
        assert policy.factory_args()
        scatter_plan = pto.scatter_plan(table, np.ones((8, 16), np.float32), np.arange(8, dtype=np.int32),
                                        conflict="last", last_path="owner", target="a5", backend="multicore",
                                        owner="dense")
        assert all(isinstance(launch, LaunchSpec) for launch in scatter_plan.launches)
    finally:
        pto.set_a5_backend(previous)


def tools() -> None:
    report = pto.coalescing.analyze("mgather", "row", np.arange(256, dtype=np.int32), (4096, 64), dtype="float16",
                                    oob="clamp", tile_shape=(64, 64), base_offset_bytes=16)
    assert_type(report, pto.coalescing.CoalescingReport)
    assert_type(report.format(), str)
    assert_type(report.as_dict(), dict[str, Any])
    assert_type(report.geometry, pto.LaunchGeometry | None)
    assert_type(report.payload_bytes, int)
    assert_type(report.emulated(), dict[str, pto.coalescing.Summary])
    for summary in (report.gm_loads, report.gm_stores, report.gm_atomics, report.ub_loads, report.ub_stores):
        assert_type(summary.efficiency, float | None)
        assert_type(summary.sectors_per_request, float | None)
        assert_type(summary.segments_per_request, float | None)
        assert_type(summary.bytes_moved, int)
        assert_type(summary.histogram(), dict[int, int])
        assert_type(summary.as_dict(), dict[str, Any])
    stream = report.stream("table")
    assert_type(stream, pto.coalescing.Stream)
    assert_type(stream.lane_trace(), Array)
    assert_type(stream.histogram(), dict[int, int])
    assert_type(stream.as_dict(), dict[str, Any])
    assert_type(pto.coalescing.Summary.of(report.streams), pto.coalescing.Summary)
    scatter = pto.coalescing.analyze("mscatter", pto.Coalesce.ELEM, np.arange(64, dtype=np.int32).reshape(8, 8),
                                     "64x64", atomic="add", conflict="default", oob="skip", keep_lanes=True,
                                     tile_layout="row_major", idx_layout=pto.BLayout.ROW_MAJOR, tile_padded=(8, 8),
                                     dyn_ubuf_size=192 * 1024, strict=False)
    assert scatter.gm_atomics.requests > 0
    custom = pto.coalescing.Stream("table", "gm", "load", 4, (1, 1))
    custom.add(np.arange(32)[None, :] * 4, np.ones((1, 32), bool), np.zeros(1, np.int64), np.zeros(1, np.int64))
    custom.add_broadcast(1, 32, 1, np.ones((1, 1), np.int64))
    assert custom.requests == 2

    compiled = pto.inspect_kernel("mscatter", "elem", atomic="add", oob="clamp", conflict="default", dtype="float16",
                                  index_dtype="uint32", rows=8, cols=64, cc="sm_80", sass=False, strict=True)
    assert_type(compiled, dict[str, Any])
    result = pto.selftest(backends=["multicore"], quick=True, families=["row_gather"], out_dir="selftest-failures",
                          progress=False, whole_array=False)
    assert_type(result.ok, bool)
    assert_type(result.to_json(), dict[str, Any])


def refused_calls() -> None:
    """Wrong calls a type checker must refuse (never run). Each ignore names the error it expects."""
    table = np.zeros((64, 16), np.float32)
    idx = np.arange(4, dtype=np.int32)
    tile = pto.Tile("float32", 8, 16)
    gm = pto.GlobalTensor(table)
    pto.mgather(tile, table, tile)  # type: ignore[arg-type]
    pto.mscatter(gm, tile, tile, coalesce=1.5)  # type: ignore[arg-type]
    pto.tload(gm, tile)  # type: ignore[arg-type]
    pto.tstore(tile, gm)  # type: ignore[arg-type]
    pto.gather(table, idx, tile_rows="8")  # type: ignore[call-overload]
    pto.gather_plan(table, idx, strict="yes")  # type: ignore[arg-type]
    pto.scatter(table, table, idx, last_path=1)  # type: ignore[arg-type]
    pto.scatter_plan(table, table, idx, dyn_ubuf_size="192k")  # type: ignore[arg-type]
    pto.coalescing.analyze("mgather", "row", idx, (64, 16), base_offset_bytes="16")  # type: ignore[arg-type]
    pto.inspect_kernel("mgather", "row", rows="8")  # type: ignore[arg-type]
    pto.selftest(quick="yes")  # type: ignore[arg-type]
    pto.set_a5_backend(1)  # type: ignore[arg-type]
    pto.a5_backend("gpu")  # type: ignore[call-arg]
    pto.a5_backends("gpu")  # type: ignore[call-arg]
    pto.row_geometry("8", 64)  # type: ignore[arg-type]
    pto.elem_geometry(8, "64")  # type: ignore[arg-type]
    pto.last_geometry(None)  # type: ignore[arg-type]
    pto.Tile("float16", "8", 64)  # type: ignore[arg-type]
    pto.Tile("float16", 8, 64, valid=4)  # type: ignore[arg-type]
    pto.Tile.from_array(table, dtype=1.5)  # type: ignore[arg-type]
    pto.GlobalTensor(table, shape=64)  # type: ignore[arg-type]
    pto.GlobalTensor.nz_from_matrix(table, batches="1")  # type: ignore[arg-type]
    gm.logical_offsets("4")  # type: ignore[arg-type]
    pto.dtypes.resolve(1.5)  # type: ignore[arg-type]
    pto.dtypes.atomic_dtypes("a5", 1.5)  # type: ignore[arg-type]
    pto.nz.to_nz(table, batches="1")  # type: ignore[arg-type]
    pto.nz.from_nz(table, 5)  # type: ignore[arg-type]
    pto.reference.slot(-1, "10", "wrap")  # type: ignore[arg-type]
    pto.reference.gather_row(table, 64, 16, idx, pto.GatherOOB.CLAMP)  # type: ignore[arg-type]
    pto.ConstraintError("MGATHER", None, "rule")  # type: ignore[call-arg]
    pto.OutOfBoundsError("MGATHER", "a5", 10, [1], [11], "1")  # type: ignore[arg-type]
    pto.no_such_name  # type: ignore[attr-defined]


def main() -> None:
    element_types()
    enums_and_geometry()
    nz_layout()
    the_reference()
    tile_ops(*tiles_and_tensors())
    whole_arrays()
    a5_plans()


if __name__ == "__main__":
    main()
