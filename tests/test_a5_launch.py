"""The A5 launch: which SIMT kernel a call resolves to, and the geometry it is launched with.

Expected geometries are worked out by hand from MGATHER.md / MSCATTER.md, "Performance Considerations —
A5, Shape-adaptive launch" (``dim3{32, kLaunchWarps}``, integer division as in C++):

* Row (gather; scatter other than Conflict::Last): ``kRowWarps = min(validRows, 32)``,
  ``kWarpsPerRow = min(32 / kRowWarps, ceil(validCols / 32))``, ``kLaunchWarps = kRowWarps * kWarpsPerRow``;
* Elem (gather; scatter other than Conflict::Last): ``kLaunchWarps = min(ceil(validRows * validCols / 32), 32)``;
* Conflict::Last (atomic NONE only): sized by the destination, ``min(ceil(slots / 32), 32)`` with
  ``slots`` = tableRows (Row) or tableSize (Elem);
* the ``(1, 1)`` Elem case launches nothing (MGatherScalarImpl / MScatterScalarImpl): its call plan is one host
  step.

Plans are built with ``simt_pto.constraints.validated_mgather / validated_mscatter``; their call plans
(``simt_pto.host.a5_planner.mgather_launches / mscatter_launches``) are read without running.
"""
from __future__ import annotations

import numpy as np
import pytest

import simt_pto as pto
from simt_pto import constraints
from simt_pto.host import a5_planner, a5_runner
from simt_pto.kernels.a5 import KERNELS, simt
from simt_pto.kernels.a5 import mgather as a5_mgather
from simt_pto.kernels.a5 import mscatter as a5_mscatter
from simt_pto.launch_spec import HostStep, KernelPolicy
from simt_pto.call import mgather_policy, mscatter_policy
from oracles import make_tile, round_up

E = pto.enums
DYN_UB = 216 * 1024
"""Every plan declares the largest dynUBufSize: the widest shapes below exceed the 128 KB default, and the
UB budget does not change the geometry."""


def gather_plan(R, C, coalesce="row", oob="undefined", dtype="int8", table_rows=8, table_size=64, strict=True):
    dst = pto.Tile(dtype, R, round_up(C, 32 // pto.dtypes.resolve(dtype).itemsize), valid=(R, C))
    if coalesce == "row":
        idx = pto.Tile("int32", 1, round_up(R, 8), valid=(1, R))
        table = pto.GlobalTensor(np.zeros((table_rows, C), pto.dtypes.resolve(dtype).numpy))
    else:
        idx = pto.Tile("int32", R, round_up(C, 8), valid=(R, C))
        table = pto.GlobalTensor(np.zeros(table_size, pto.dtypes.resolve(dtype).numpy))
    return constraints.validated_mgather(mgather_policy(coalesce, oob, "a5", pto.GatherExec.SCALAR, strict, DYN_UB),
                                         dst, table, idx, None)


def scatter_plan(R, C, coalesce="row", atomic="none", conflict="last", oob="undefined", dtype="int32",
                 table_rows=8, table_size=64, strict=True):
    src = pto.Tile(dtype, R, round_up(C, 32 // pto.dtypes.resolve(dtype).itemsize), valid=(R, C))
    if coalesce == "row":
        idx = pto.Tile("int32", 1, round_up(R, 8), valid=(1, R))
        table = pto.GlobalTensor(np.zeros((table_rows, C), pto.dtypes.resolve(dtype).numpy))
    else:
        idx = pto.Tile("int32", R, round_up(C, 8), valid=(R, C))
        table = pto.GlobalTensor(np.zeros(table_size, pto.dtypes.resolve(dtype).numpy))
    return constraints.validated_mscatter(mscatter_policy(coalesce, atomic, oob, conflict, "a5", strict, DYN_UB),
                                          table, src, idx)


def _only_launch(call):
    """The one launch of a tile op's call plan, or None when it launches nothing (a scalar fallback)."""
    assert len(call.launches) <= 1, call.describe()
    return call.launches[0] if call.launches else None


def resolve_mgather(plan):
    return _only_launch(a5_planner.mgather_launches(plan))


def resolve_mscatter(plan):
    return _only_launch(a5_planner.mscatter_launches(plan))


def compiled(launch):
    """The dispatcher a launch runs on the multicore backend (compiled per argument types at its first call)."""
    return simt.compile_kernel(launch.kernel, launch.policy, "cpu")


# -- hand-computed geometry tables -------------------------------------------------------------------------------

ROW_TABLE = [
    # (validRows, validCols): (kRowWarps, kWarpsPerRow, kLaunchWarps)
    ((1, 1), (1, 1, 1)),          # 32/1 = 32, ceil(1/32) = 1
    ((1, 32), (1, 1, 1)),
    ((1, 33), (1, 2, 2)),         # ceil(33/32) = 2
    ((1, 640), (1, 20, 20)),      # ceil(640/32) = 20 < 32
    ((1, 1000), (1, 32, 32)),     # ceil(1000/32) = 32
    ((2, 65), (2, 3, 6)),         # 32/2 = 16, ceil(65/32) = 3
    ((3, 100), (3, 4, 12)),       # 32/3 = 10, ceil(100/32) = 4
    ((5, 1000), (5, 6, 30)),      # 32/5 = 6, ceil(1000/32) = 32 -> 6
    ((7, 33), (7, 2, 14)),        # 32/7 = 4, 2
    ((10, 300), (10, 3, 30)),     # 32/10 = 3, ceil(300/32) = 10 -> 3
    ((12, 1), (12, 1, 12)),
    ((16, 64), (16, 2, 32)),      # 32/16 = 2, 2
    ((17, 256), (17, 1, 17)),     # 32/17 = 1
    ((32, 1024), (32, 1, 32)),
    ((40, 8), (32, 1, 32)),       # kRowWarps caps at 32: warps walk rows ty, ty + 32
    ((64, 100), (32, 1, 32)),
]

ELEM_TABLE = [
    # (validRows, validCols): kLaunchWarps
    ((1, 2), 1), ((2, 1), 1), ((2, 16), 1),   # 32 elements: one warp
    ((2, 17), 2),                               # 34
    ((5, 7), 2),                                # 35
    ((3, 100), 10),                             # 300 -> ceil(9.375)
    ((8, 124), 31),                             # 992
    ((1, 993), 32),                             # ceil(31.03)
    ((31, 33), 32),                             # 1023
    ((64, 128), 32),                            # 8192: capped, the strided loop walks the rest
]

LAST_ROW_TABLE = [(1, 1), (32, 1), (33, 2), (100, 4), (992, 31), (1000, 32), (4096, 32)]   # tableRows -> warps
LAST_ELEM_TABLE = [(2, 1), (48, 2), (992, 31), (993, 32), (5000, 32)]                      # tableSize -> warps


@pytest.mark.parametrize("shape, expected", ROW_TABLE, ids=[f"{r}x{c}" for (r, c), _ in ROW_TABLE])
@pytest.mark.parametrize("op", ["mgather", "mscatter_default", "mscatter_add"])
def test_row_launch_geometry(op, shape, expected):
    R, C = shape
    if op == "mgather":
        launch = resolve_mgather(gather_plan(R, C, "row"))
        name = "simt_mgather_row_kernel"
    else:
        atomic, conflict = ("none", "default") if op == "mscatter_default" else ("add", "last")
        launch = resolve_mscatter(scatter_plan(R, C, "row", atomic, conflict, dtype="int32"))
        name = "simt_mscatter_row_kernel"
    g = launch.geometry
    assert launch.kernel == name
    assert (g.scheme, g.row_warps, g.warps_per_row, g.launch_warps) == ("row",) + expected
    assert g.block == (32, expected[2])


@pytest.mark.parametrize("shape, launch_warps", ELEM_TABLE, ids=[f"{r}x{c}" for (r, c), _ in ELEM_TABLE])
@pytest.mark.parametrize("op", ["mgather", "mscatter_default", "mscatter_max"])
def test_elem_launch_geometry(op, shape, launch_warps):
    R, C = shape
    if op == "mgather":
        launch = resolve_mgather(gather_plan(R, C, "elem"))
        name = "simt_mgather_elem_kernel"
    else:
        atomic, conflict = ("none", "default") if op == "mscatter_default" else ("max", "last")
        launch = resolve_mscatter(scatter_plan(R, C, "elem", atomic, conflict, dtype="int32"))
        name = "simt_mscatter_elem_kernel"
    g = launch.geometry
    assert launch.kernel == name
    assert (g.scheme, g.launch_warps, g.block, g.work_items) == ("elem", launch_warps, (32, launch_warps), R * C)


@pytest.mark.parametrize("table_rows, launch_warps", LAST_ROW_TABLE)
def test_last_row_sized_by_table_rows(table_rows, launch_warps):
    """The same 2 x 8 source: the launch follows tableRows, not the source."""
    launch = resolve_mscatter(scatter_plan(2, 8, "row", table_rows=table_rows))
    g = launch.geometry
    assert launch.kernel == "simt_mscatter_row_last_kernel"
    assert (g.scheme, g.launch_warps, g.block, g.work_items) == ("last", launch_warps, (32, launch_warps),
                                                                 table_rows)


@pytest.mark.parametrize("table_size, launch_warps", LAST_ELEM_TABLE)
def test_last_elem_sized_by_table_size(table_size, launch_warps):
    launch = resolve_mscatter(scatter_plan(2, 8, "elem", table_size=table_size))
    g = launch.geometry
    assert launch.kernel == "simt_mscatter_elem_last_kernel"
    assert (g.scheme, g.launch_warps, g.block, g.work_items) == ("last", launch_warps, (32, launch_warps),
                                                                 table_size)


def test_last_elem_table_size_is_the_product_of_the_5d_shape():
    table = pto.GlobalTensor(np.zeros(2 * 3 * 4 * 5 * 6, np.float32), shape=(2, 3, 4, 5, 6))   # 720 slots
    policy = mscatter_policy(pto.Coalesce.ELEM, pto.ScatterAtomicOp.NONE, pto.ScatterOOB.SKIP, pto.ScatterConflict.LAST,
                             "a5", True, None)
    plan = constraints.validated_mscatter(policy, table, pto.Tile("float32", 2, 8), pto.Tile("int32", 2, 8))
    g = resolve_mscatter(plan).geometry
    assert (g.work_items, g.launch_warps) == (720, 23)       # ceil(720 / 32) = 22.5 -> 23


# -- kernel selection --------------------------------------------------------------------------------------------

SCATTER_SELECTION = [
    # (coalesce, atomic, conflict) -> kernel; atomics ignore the conflict
    ("row", "none", "last", "simt_mscatter_row_last_kernel"),
    ("row", "none", "default", "simt_mscatter_row_kernel"),
    ("elem", "none", "last", "simt_mscatter_elem_last_kernel"),
    ("elem", "none", "default", "simt_mscatter_elem_kernel"),
] + [(c, a, k, f"simt_mscatter_{c}_kernel") for c in ("row", "elem") for a in ("add", "max", "min")
     for k in ("last", "default")]


@pytest.mark.parametrize("coalesce, atomic, conflict, name", SCATTER_SELECTION)
def test_scatter_kernel_selection(coalesce, atomic, conflict, name):
    launch = resolve_mscatter(scatter_plan(3, 8, coalesce, atomic, conflict, dtype="float32", table_rows=40,
                                           table_size=200))
    assert launch.kernel == name
    if name.endswith("_last_kernel"):
        slots = 40 if coalesce == "row" else 200
        assert (launch.geometry.scheme, launch.geometry.work_items) == ("last", slots)
        assert launch.geometry.launch_warps == (2 if coalesce == "row" else 7)    # ceil(40/32), ceil(200/32)
    else:
        g = launch.geometry
        assert g.scheme == coalesce
        # Row 3 x 8: kRowWarps 3, kWarpsPerRow min(10, 1) = 1; Elem: ceil(24 / 32) = 1
        assert g.launch_warps == (3 if coalesce == "row" else 1)
    # The kernel named is the factory's own kernel.
    assert KERNELS[launch.kernel] is getattr(a5_mscatter, name)


@pytest.mark.parametrize("atomic, conflict", [(a, c) for a in ("none", "add", "max", "min")
                                              for c in ("last", "default")])
@pytest.mark.parametrize("oob", ["undefined", "skip", "clamp", "wrap"])
def test_scatter_elem_1x1_is_the_scalar_fallback(atomic, conflict, oob):
    plan = scatter_plan(1, 1, "elem", atomic, conflict, oob, dtype="float32")
    (step,) = a5_planner.mscatter_launches(plan).steps
    assert isinstance(step, HostStep) and step.name.startswith("MScatterScalarImpl")


@pytest.mark.parametrize("oob", ["undefined", "clamp", "wrap", "zero"])
def test_gather_selection(oob):
    (step,) = a5_planner.mgather_launches(gather_plan(1, 1, "elem", oob)).steps
    assert isinstance(step, HostStep) and step.name.startswith("MGatherScalarImpl")
    row_1x1 = resolve_mgather(gather_plan(1, 1, "row", oob))                       # Row (1, 1) still launches
    assert row_1x1.kernel == "simt_mgather_row_kernel" and row_1x1.geometry.launch_warps == 1
    assert resolve_mgather(gather_plan(2, 8, "elem", oob)).kernel == "simt_mgather_elem_kernel"
    assert KERNELS[resolve_mgather(gather_plan(2, 8, "row", oob)).kernel] is a5_mgather.simt_mgather_row_kernel


def test_scatter_row_1x1_launches():
    launch = resolve_mscatter(scatter_plan(1, 1, "row", "none", "default"))
    assert launch.kernel == "simt_mscatter_row_kernel" and launch.geometry.launch_warps == 1
    launch = resolve_mscatter(scatter_plan(1, 1, "row", "none", "last", table_rows=3))
    assert launch.kernel == "simt_mscatter_row_last_kernel" and launch.geometry.work_items == 3


# -- one compiled kernel per policy combination ------------------------------------------------------------------

def test_gather_kernels_are_cached_per_policy():
    for coalesce in ("row", "elem"):
        kernels = {}
        for oob in ("undefined", "clamp", "wrap", "zero"):
            a = resolve_mgather(gather_plan(2, 8, coalesce, oob, dtype="int8"))
            b = resolve_mgather(gather_plan(3, 40, coalesce, oob, dtype="float32"))    # other shape, other width
            assert compiled(a) is compiled(b) and a.policy == b.policy
            assert compiled(resolve_mgather(gather_plan(2, 8, coalesce, oob))) is compiled(a)   # resolve twice
            kernels[oob] = compiled(a)
        # one kernel per GatherOOB rule, but on the CPU Undefined's checked indices are read under Clamp's rule
        # (simt.read_once: an index changed after the check reads nothing outside the table)
        assert len({id(k) for k in kernels.values()}) == 3, "one kernel per GatherOOB rule"
        assert kernels["undefined"] is kernels["clamp"]
        # Undefined with strict=False is Zero's memory-safe masking: the same compiled rule.
        assert compiled(resolve_mgather(gather_plan(2, 8, coalesce, "undefined", strict=False))) is kernels["zero"]


def test_scatter_kernels_are_cached_per_policy():
    seen = {}
    for coalesce in ("row", "elem"):
        for oob in ("undefined", "skip", "clamp", "wrap"):
            for atomic, dtype in [("none", "int8"), ("none", "float32"), ("add", "int32"), ("add", "float32"),
                                  ("add", "float16"), ("add", "bfloat16"), ("max", "uint32"), ("max", "float32"),
                                  ("min", "int32"), ("min", "float32")]:
                for conflict in ("last", "default"):
                    a = resolve_mscatter(scatter_plan(2, 8, coalesce, atomic, conflict, oob, dtype))
                    b = resolve_mscatter(scatter_plan(3, 24, coalesce, atomic, conflict, oob, dtype, table_rows=5,
                                                      table_size=50))
                    assert compiled(a) is compiled(b) and a.policy == b.policy
                    # conflict only selects the kernel: it is not compiled in
                    # (on the CPU Undefined's unchecked rule compiles as Skip's mask: simt.read_once)
                    seen.setdefault((a.kernel, simt.read_once(a.kernel, a.policy).compiled()), set()).add(
                        id(compiled(a)))
    assert all(len(ids) == 1 for ids in seen.values())
    # Distinct compiled policies compile to distinct kernels.
    kernels = {next(iter(ids)) for ids in seen.values()}
    assert len(kernels) == len(seen)


def test_scatter_element_format_splits_kernels():
    """The store differs by element format: int32 / uint32 / float32 Add share the native atomicAdd kernel;
    float16 and bfloat16 Add (CAS on the 32-bit word) and float32 Max / Min (integer atomics on the bits)
    each get their own."""
    def k(atomic, dtype):
        return compiled(resolve_mscatter(scatter_plan(2, 8, "elem", atomic, "last", "wrap", dtype)))

    assert k("add", "int32") is k("add", "uint32") is k("add", "float32")
    assert len({id(k("add", "int32")), id(k("add", "float16")), id(k("add", "bfloat16"))}) == 3
    assert k("max", "int32") is k("max", "uint32")
    assert k("max", "float32") is not k("max", "int32")
    assert k("min", "float32") is not k("min", "int32") and k("min", "float32") is not k("max", "float32")


# -- the capability tables the A5 test matrices are built from -----------------------------------------------------

def test_a5_dtype_tables_match_the_spec():
    """MGATHER.md / MSCATTER.md "Tile Constraints (A5)" and MSCATTER.md "Atomic Type Support"."""
    names = {d.name for d in pto.dtypes.ELEMENT_DTYPES["a5"]}
    assert names == {"int8", "uint8", "int16", "uint16", "int32", "uint32", "float16", "bfloat16", "float32",
                     "hifloat8", "float8_e4m3", "float8_e5m2"}
    atomic = {op: {d.name for d in pto.dtypes.ATOMIC_DTYPES[("a5", op)]} for op in
              (pto.ScatterAtomicOp.ADD, pto.ScatterAtomicOp.MAX, pto.ScatterAtomicOp.MIN)}
    assert atomic == {pto.ScatterAtomicOp.ADD: {"int32", "uint32", "float32", "float16", "bfloat16"},
                      pto.ScatterAtomicOp.MAX: {"int32", "uint32", "float32"},
                      pto.ScatterAtomicOp.MIN: {"int32", "uint32", "float32"}}


# -- the resolved launch is the one that runs ----------------------------------------------------------------------

def test_resolved_launch_runs_the_op():
    """Running the call plan by hand gives the gather: dst[r, :] = table[idx[r], :] (3 x 40: kWarpsPerRow 2)."""
    table_vals = np.arange(5 * 40, dtype=np.float32).reshape(5, 40)
    dst = pto.Tile("float32", 4, 40, valid=(3, 40))
    idx = make_tile("int32", 1, 8, valid=(1, 3), logical_bits=np.array([[4, 0, 2]], np.uint32))
    plan = constraints.validated_mgather(mgather_policy(pto.Coalesce.ROW, pto.GatherOOB.UNDEFINED, "a5", pto.GatherExec.SCALAR, True, None),
                                         dst, pto.GlobalTensor(table_vals), idx, None)
    launch = resolve_mgather(plan)
    assert (launch.geometry.row_warps, launch.geometry.warps_per_row) == (3, 2)
    a5_runner.run_plan(a5_planner.mgather_launches(plan), "multicore")
    np.testing.assert_array_equal(dst.valid_numpy(), table_vals[[4, 0, 2]])


POLICY_FIELDS = {
    # each kernel's compile-time constants, by hand from kernels/a5: the OOB rule of those that remap an index, the
    # store rule (atomic op, element format) of the source-centric scatters; the owner resets and writes, and the
    # compact claim (the host remapped its indices), take none
    "simt_mgather_row_kernel": {"rule"}, "simt_mgather_elem_kernel": {"rule"}, "simt_mgather_l1_elem_kernel": {"rule"},
    "simt_mscatter_row_kernel": {"rule", "atomic", "fmt"}, "simt_mscatter_elem_kernel": {"rule", "atomic", "fmt"},
    "simt_mscatter_elem_serial_kernel": {"rule", "atomic", "fmt"}, "simt_mscatter_row_serial_kernel": {"rule", "atomic", "fmt"},
    "simt_mscatter_row_last_kernel": {"rule"}, "simt_mscatter_elem_last_kernel": {"rule"},
    "simt_mscatter_owner_reset_kernel": set(), "simt_mscatter_row_owner_claim_kernel": {"rule"},
    "simt_mscatter_elem_owner_claim_kernel": {"rule"}, "simt_mscatter_row_owner_write_kernel": set(),
    "simt_mscatter_elem_owner_write_kernel": set(), "simt_mscatter_elem_private_owner_claim_kernel": {"rule"},
    "simt_mscatter_elem_private_owner_write_kernel": set(), "simt_mscatter_compact_owner_claim_kernel": set(),
    "simt_mscatter_row_compact_owner_write_kernel": set(), "simt_mscatter_elem_compact_owner_write_kernel": set(),
}


def _whole_array_launches():
    """Every launch the whole-array ops plan for a small call of each kind (nothing runs)."""
    from unittest import mock
    from simt_pto.host import in_memory, a5_planner
    table, idx = np.zeros((40, 8), np.float32), np.arange(20, dtype=np.int32)
    src = np.ones((20, 8), np.float32)
    calls = [in_memory.gather_plan(table, idx), in_memory.gather_plan(table.reshape(-1), idx, coalesce="elem")]
    for coalesce in ("row", "elem"):
        t = table if coalesce == "row" else table.reshape(-1)
        s = src if coalesce == "row" else src[:, 0].copy()
        calls += [in_memory.scatter_plan(t, s, idx, coalesce=coalesce, atomic="add"),
                  in_memory.scatter_plan(t, s, idx, coalesce=coalesce, last_path="slot")]
        calls += [in_memory.scatter_plan(t, s, idx, coalesce=coalesce, last_path="owner", owner=layout)
                  for layout in ("dense", "compact")]
    with mock.patch.object(a5_planner, "_claim_copies", lambda updates, slots, owner_dtype, backend: 2):
        calls.append(in_memory.scatter_plan(table.reshape(-1), src[:, 0].copy(), idx, coalesce="elem", last_path="owner",
                                        owner="dense"))  # the multicore claim into a copy of the owners per worker
    return [launch for call in calls for launch in call.launches]


def test_kernel_factories_take_exactly_their_policy_by_name():
    """Each kernel factory takes the compile-time constants its kernel uses, by name, and nothing else; every
    launch the tile ops and the whole-array ops plan carries exactly those (``KernelPolicy.factory_args``)."""
    import inspect
    assert set(KERNELS) == set(POLICY_FIELDS)
    for name, factory in KERNELS.items():
        params = inspect.signature(factory).parameters
        assert set(params) == POLICY_FIELDS[name], name
        assert all(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params.values()), name
        with pytest.raises(TypeError):
            factory(**dict.fromkeys(POLICY_FIELDS[name], 0), conflict=pto.ScatterConflict.LAST)
    tile_ops = [resolve_mgather(gather_plan(2, 8, c)) for c in ("row", "elem")]
    tile_ops += [resolve_mscatter(scatter_plan(2, 8, c, a, k, dtype="float32")) for c in ("row", "elem")
                 for a in ("none", "add", "max") for k in ("last", "default")]
    launches = tile_ops + _whole_array_launches()
    kernels = [(launch.kernel, launch.policy) for launch in launches]
    kernels += [(launch.multicore_plain_kernel, launch.policy) for launch in launches if launch.multicore_plain_kernel]
    assert {kernel for kernel, _ in kernels} == set(KERNELS) - {"simt_mgather_l1_elem_kernel"}
    for kernel, policy in kernels:
        assert set(policy.factory_args()) == POLICY_FIELDS[kernel], (kernel, policy)
        assert simt.kernel_source(kernel, policy).__name__ == kernel


def _index_file(kernel, policy):
    """The name of the on-disk cache index of one specialization, compiled for the multicore backend."""
    return simt.compile_kernel(kernel, policy, "cpu")._cache._cache_file._index_name


def test_two_specializations_of_one_kernel_have_distinct_cache_index_files():
    """The policy is part of Numba's disk-cache key, explicitly: two specializations of one kernel source never
    share an index file (wrong machine code would load from disk), and the same policy always finds its own."""
    E = pto.enums
    # (IDENTITY compiles as CLAMP / MASK on the CPU, simt.read_once: one specialization, test_index_snapshot.py)
    rules = [E.IndexRule.CLAMP, E.IndexRule.WRAP, E.IndexRule.MASK]
    for kernel in ("simt_mgather_row_kernel", "simt_mgather_elem_kernel", "simt_mscatter_elem_last_kernel",
                   "simt_mscatter_row_owner_claim_kernel"):
        files = {_index_file(kernel, KernelPolicy(rule=r)) for r in rules}
        assert len(files) == len(rules), (kernel, files)
    store = [(E.ScatterAtomicOp.ADD, E.ElementFormat.NATIVE), (E.ScatterAtomicOp.ADD, E.ElementFormat.F16),
             (E.ScatterAtomicOp.ADD, E.ElementFormat.BF16_EDGE), (E.ScatterAtomicOp.MAX, E.ElementFormat.NATIVE),
             (E.ScatterAtomicOp.MAX, E.ElementFormat.F32_ORDER), (E.ScatterAtomicOp.NONE, E.ElementFormat.NATIVE)]
    for kernel in ("simt_mscatter_row_kernel", "simt_mscatter_elem_kernel"):
        files = {_index_file(kernel, KernelPolicy(rule=r, atomic=a, fmt=f)) for r in rules[:2] for a, f in store}
        assert len(files) == 2 * len(store), (kernel, files)
    # the conflict policy selects kernels, it compiles nothing: it does not split a cache entry
    a = KernelPolicy(rule=E.IndexRule.WRAP, atomic=E.ScatterAtomicOp.ADD, fmt=E.ElementFormat.NATIVE,
                     conflict=E.ScatterConflict.LAST)
    b = KernelPolicy(rule=E.IndexRule.WRAP, atomic=E.ScatterAtomicOp.ADD, fmt=E.ElementFormat.NATIVE,
                     conflict=E.ScatterConflict.DEFAULT)
    assert _index_file("simt_mscatter_elem_kernel", a) == _index_file("simt_mscatter_elem_kernel", b)
