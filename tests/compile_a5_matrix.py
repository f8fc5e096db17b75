"""Compile every kernel specialization the A5 target can launch, for sm_80 and sm_90, without a GPU.

Run by ``tests/test_compile_a5.py`` in ONE subprocess with ``numba.cuda`` in real (non-simulator) mode
(the test process keeps the simulator):

    SIMT_PTO_A5_BACKEND=gpu python tests/compile_a5_matrix.py --out report.json [--jobs 2] [--slow-per-group K]

The specializations are read from the call plans the dispatch builds (``simt_pto.launch_spec.CallPlan``: each
launch names its kernel, its policy and its arguments), not listed by hand:

* the tile ops: every element dtype of ``ELEMENT_DTYPES["a5"]`` (``atomic_dtypes("a5", op)`` for each
  ScatterAtomicOp), both index dtypes, Row / Elem, every OOB policy, strict on and off, both
  ScatterConflict values; each call is validated by ``constraints.plan_*`` (target ``a5``) and planned by
  ``simt_pto.host.a5_planner.mgather_launches`` / ``mscatter_launches``;
* the GM -> L1 gathers (a MAT NZ destination, GM index and scratch tensors), both GatherExec values, through
  the same ``validated_mgather`` / ``mgather_launches`` (``GatherExec::Scalar`` launches no SIMT kernel);
* the whole-array ops (``simt_pto.host.in_memory.gather_plan`` / ``scatter_plan``: what ``simt_pto.gather`` /
  ``simt_pto.scatter`` launch), over the same matrix with ``last_path`` ``"slot"`` and ``"owner"`` (the owner
  path with both owner layouts, dense and compact); planned for the multicore backend (host arrays, typed as
  the GPU's device arrays are), nothing runs;
* ``kernels/a5/index_check.count_out_of_range``, which ``host/in_memory.py`` launches on device index arrays
  only, and ``flag_out_of_range``, the fast path's device index scan, with the argument types passed there.

Launches are deduplicated by (kernel, compile-time policy, Numba argument types): exactly what the dispatcher
compiles separately (``KernelPolicy.cache_key``: the conflict policy selects kernels and compiles nothing).
Each is compiled once with ``numba.cuda.compile_ptx`` for the lowest cc asked, and that PTX is assembled with
the wheel's ``ptxas -v`` for every cc (NVVM's PTX for sm_80 and sm_90 differs only in its ``.target`` line and
symbol names, and ptxas takes PTX of a lower target); the JSON report holds, per specialization and cc, the
PTX global-memory instruction counts, registers, spill bytes, or the error.

Cost (2 cores, 2 workers): the float16 / bfloat16 atomic-add specializations take ~2.5 s each to compile
(Numba inlines the 16-bit float adder and its CAS loop at IR level), about 3x a plain one and 40% of the
CPU time of the full matrix. ``--slow-per-group K``
compiles K of them (fixed seed) per (kernel, format) group and all others; ``--slow-per-group 0`` compiles
everything.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from simt_pto.call import mgather_policy

CCS = (80, 90)
TOOLS = "simt_pto.host.tools.kernel_report"
"""``simt-pto inspect``'s module: the tile-op calls it builds, and the toolchain (ptxas, the report's parsers)."""


def _tools():
    import importlib
    return importlib.import_module(TOOLS)


def _expect_real_mode():
    os.environ.setdefault("SIMT_PTO_A5_BACKEND", "gpu")
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    import simt_pto  # noqa: F401  (resolves the backend)
    from numba import cuda  # noqa: F401
    if not _tools().compile_here():
        raise SystemExit("compile_a5_matrix: numba.cuda is in simulator mode; set SIMT_PTO_A5_BACKEND=gpu")


class Spec:
    """One specialization: a launch (kernel, policy, arguments) of some call plan, and the calls that reach it."""

    def __init__(self, launch, kind, source):
        from simt_pto.kernels.a5.simt import argument_types
        self.launch, self.kind = launch, kind
        self.name, self.policy = launch.kernel, launch.policy
        self.sig = argument_types(launch.values())
        self.calls = []
        self.sources = {source}
        self.dtypes = set()
        self.atomic = None

    @property
    def key(self):
        return (self.name, self.policy.cache_key, tuple(str(t) for t in self.sig))

    def policy_names(self) -> dict:
        """The compile-time policy by name (``rule``, ``atomic``, ``format``): what the kernel is compiled on."""
        return {k: v for k, v in self.policy.describe().items() if k != "conflict"}

    def ptx(self, cc: int) -> str:
        return _tools().compile_ptx(self.launch, cc)  # (``simt-pto inspect``'s compile: the same PTX it shows)

    def describe(self) -> dict:
        return {"name": self.name, "policy": self.policy_names(), "cache_key": self.policy.cache_key,
                "signature": [str(t) for t in self.sig], "kind": self.kind, "atomic": self.atomic,
                "dtypes": sorted(self.dtypes), "sources": sorted(self.sources), "calls": len(self.calls),
                "example": self.calls[0]}


class ValidateSpec(Spec):
    """An index check of ``kernels/a5/index_check.py`` (``count_out_of_range``, kind ``validate``; or
    ``flag_out_of_range``, kind ``index-flag``): a plain CUDA kernel (device index arrays only), no launch tuple, no
    policy."""

    def __init__(self, kernel, args, index_dtype):
        from simt_pto.kernels.a5.simt import argument_types
        from simt_pto.launch_spec import KernelPolicy
        self.launch, self.name, self.policy = None, kernel, KernelPolicy()
        self.kind = "validate" if kernel == "count_out_of_range" else "index-flag"
        self.sig = argument_types(args)[1:]
        self.calls = [{"op": "validate", "index_dtype": index_dtype, "source": "whole-array"}]
        self.sources, self.dtypes, self.atomic = {"whole-array"}, set(), None

    def ptx(self, cc: int) -> str:
        from numba import cuda
        from simt_pto.kernels.a5 import index_check
        from simt_pto.kernels.cache import compile_scope
        with compile_scope():
            return cuda.compile_ptx(getattr(index_check, self.name).py_func, self.sig, cc=(cc // 10, cc % 10))[0]


def _kind(launch):
    name = launch.kernel
    if name.endswith("_owner_claim_kernel"):
        return "owner-claim"
    if name.endswith("_owner_write_kernel"):
        return "owner-write"
    if name.endswith("_owner_reset_kernel"):
        return "owner-reset"
    if name.endswith("_last_kernel"):
        return "last"
    if name.startswith("simt_mgather"):
        return "gather"
    from simt_pto.enums import ScatterAtomicOp
    return "scatter-plain" if launch.policy.atomic in (None, ScatterAtomicOp.NONE) else "scatter-atomic"


def _calls():
    """Every (op, keyword arguments) the matrix covers, in a fixed order."""
    from simt_pto import dtypes as dt
    from simt_pto.enums import Coalesce, GatherOOB, ScatterAtomicOp, ScatterConflict, ScatterOOB
    for coalesce in Coalesce:
        for index_dtype in dt.INDEX_DTYPES:
            for dtype in dt.ELEMENT_DTYPES["a5"]:
                for oob in GatherOOB:
                    for strict in (True, False):
                        yield "mgather", dict(coalesce=coalesce.name.lower(), dtype=dtype.name,
                                              index_dtype=index_dtype.name, oob=oob.name.lower(), strict=strict)
            for atomic in ScatterAtomicOp:
                for dtype in dt.atomic_dtypes("a5", atomic):
                    for conflict in ScatterConflict:
                        for oob in ScatterOOB:
                            for strict in (True, False):
                                yield "mscatter", dict(coalesce=coalesce.name.lower(), dtype=dtype.name,
                                                       index_dtype=index_dtype.name, oob=oob.name.lower(),
                                                       strict=strict, atomic=atomic.name.lower(),
                                                       conflict=conflict.name.lower())


def _tile_launches(plan):
    """The launches of a tile op's call plan (none for a scalar fallback)."""
    from simt_pto.host import a5_planner
    return (a5_planner.mgather_launches if plan.op == "MGATHER" else a5_planner.mscatter_launches)(plan).launches


def _l1_plan(kw, exec_):
    """A GM -> L1 MGATHER (MAT NZ destination) for the call ``kw``, validated by ``validated_mgather``."""
    import numpy as np
    from simt_pto import constraints, dtypes as dt, nz
    from simt_pto.enums import Coalesce, GatherOOB
    from simt_pto.tensor import GlobalTensor
    from simt_pto.tile import Tile
    d, rows, cols = dt.resolve(kw["dtype"]), 8, 64
    kc0 = nz.c0(d.itemsize)
    dst = Tile(d, -(-rows // 16) * 16, -(-cols // kc0) * kc0, loc="mat", blayout="col_major", slayout="row_major",
               valid=(rows, cols))
    row = kw["coalesce"] == "row"
    idx_np = dt.resolve(kw["index_dtype"]).numpy
    idx = GlobalTensor(np.zeros(rows if row else (rows, cols), dtype=idx_np))
    table = GlobalTensor(np.zeros((64, cols) if row else (64 * cols,), dtype=d.numpy), dtype=d)
    scratch = None if row else GlobalTensor(np.zeros(dst.rows * dst.cols, dtype=d.numpy), dtype=d)
    policy = mgather_policy(Coalesce[kw["coalesce"].upper()], GatherOOB[kw["oob"].upper()], "a5", exec_, kw["strict"],
                            None)
    return constraints.validated_mgather(policy, dst, table, idx, scratch)


def _whole_array_launches(op, kw):
    """The kernel launches of ``simt_pto.gather`` / ``scatter`` for one call: the launches of its plans
    (``in_memory.gather_plan`` / ``scatter_plan``; Conflict::Last: the slot path and both owner layouts)."""
    import numpy as np
    from simt_pto import dtypes as dt
    from simt_pto.host import in_memory
    d = dt.resolve(kw["dtype"])
    rows, cols = 8, 64
    idx_np = dt.resolve(kw["index_dtype"]).numpy
    row = kw["coalesce"] == "row"
    table = np.zeros((64, cols) if row else (64 * cols,), dtype=d.numpy)
    idx = np.zeros(rows if row else (rows, cols), dtype=idx_np)
    # planned for the multicore backend: host arrays, so nothing touches a device
    common = dict(coalesce=kw["coalesce"], oob=kw["oob"], target="a5", strict=kw["strict"], dtype=d.name,
                  backend="multicore")
    if op == "mgather":
        return list(in_memory.gather_plan(table, idx, **common).launches)
    src = np.zeros((rows, cols), dtype=d.numpy)
    last = kw["atomic"] == "none" and kw["conflict"] == "last"
    paths = (("slot", None), ("owner", "dense"), ("owner", "compact")) if last else (("auto", None),)
    launches = [launch for path, owner in paths
                for launch in in_memory.scatter_plan(table, src, idx, atomic=kw["atomic"], conflict=kw["conflict"],
                                                 last_path=path, owner=owner, **common).launches]
    if last and not row:  # the multicore claim into a copy of the owners per worker (a5_planner._claim_copies)
        from unittest import mock
        from simt_pto.host import a5_planner
        with mock.patch.object(a5_planner, "_claim_copies", lambda updates, slots, owner_dtype, backend: 2):
            launches += in_memory.scatter_plan(table, src, idx, conflict="last", last_path="owner", owner="dense",
                                           **common).launches
    return launches


def enumerate_specs(include_whole_array=True):
    """{key: Spec} for every launchable specialization, plus the count of calls that launch no SIMT kernel
    (the (1, 1) Elem scalar fallbacks, the scalar GM -> L1 walk)."""
    from simt_pto.enums import GatherExec
    build_plan = _tools().build_plan
    specs, fallbacks = {}, 0

    def add(launch, source, op, kw):
        spec = Spec(launch, _kind(launch), source)
        spec = specs.setdefault(spec.key, spec)
        spec.sources.add(source)
        spec.calls.append(dict(kw, op=op, source=source))
        spec.dtypes.add(kw["dtype"])
        spec.atomic = kw.get("atomic", "none") if spec.kind == "scatter-atomic" else None

    for op, kw in _calls():
        for launch in _tile_launches(build_plan(op, **kw)):
            add(launch, "tile", op, kw)
        if op == "mgather":  # the same call into an L1 (MAT) tile
            for exec_ in GatherExec:
                if exec_ == GatherExec.SIMT and kw["coalesce"] == "row":
                    continue  # the SIMT executor is Elem only (a ConstraintError)
                launches = _tile_launches(_l1_plan(kw, exec_))
                fallbacks += not launches  # GatherExec::Scalar: the cube core's scalar walk
                for launch in launches:
                    add(launch, "l1", op, dict(kw, exec="simt"))
        if (op == "mscatter" and kw["atomic"] == "add" and kw["dtype"] in ("float16", "bfloat16")
                and kw["oob"] == "undefined" and kw["index_dtype"] == "int32"):
            # a table starting mid-word: the boundary-word formats (F16_EDGE / BF16_EDGE), one rule each (their
            # remap is the same code as the whole-word kernels'; each costs ~3x a plain compile)
            for launch in _tile_launches(build_plan(op, **dict(kw, mid_word=True))):
                add(launch, "tile", op, dict(kw, mid_word=True))
        if kw["coalesce"] == "elem":  # the (1, 1) Elem call takes the scalar pipe: no launch
            fallbacks += not _tile_launches(build_plan(op, **dict(kw, rows=1, cols=1)))
        if include_whole_array:
            for launch in _whole_array_launches(op, kw):
                add(launch, "whole-array", op, kw)
    _add_validate(specs)
    return specs, fallbacks


def _add_validate(specs):
    """``count_out_of_range(idx, capacity, out)`` as ``host/in_memory.py`` launches it, and ``flag_out_of_range(idx,
    capacity, flag)`` as the fast path's index scan does (``kernels/a5/direct_launch.IndexScan``: an int32 flag word)
    (1-D device views)."""
    import numpy as np
    from simt_pto import dtypes as dt
    for index_dtype in dt.INDEX_DTYPES:
        idx = np.zeros(8, dtype=index_dtype.numpy)
        for spec in (ValidateSpec("count_out_of_range", (idx, 64, np.zeros(2, dtype=np.int64)), index_dtype.name),
                     ValidateSpec("flag_out_of_range", (idx, 64, np.zeros(1, dtype=np.int32)), index_dtype.name)):
            specs.setdefault(spec.key, spec)


_SPECS: list = []


def _compile_one(i, ccs):
    """Compile spec ``i`` to PTX once (for the lowest cc) and assemble it for every cc: {cc: result}. Runs in a
    forked worker."""
    tools = _tools()
    spec = _SPECS[i]
    ptx_cc = min(ccs)
    t0 = time.perf_counter()
    try:
        ptx = spec.ptx(ptx_cc)
    except Exception:
        error = {"error": traceback.format_exc(limit=8), "compile_s": round(time.perf_counter() - t0, 3)}
        return i, {str(cc): dict(error) for cc in ccs}
    compile_s = round(time.perf_counter() - t0, 3)
    counts = tools.ptx_memory_instructions(ptx)
    out = {}
    for cc in ccs:
        t1 = time.perf_counter()
        try:
            res = tools.assemble(ptx, cc)
            res.update(tools.classify(counts), ptx_counts=dict(sorted(counts.items())), ptx_cc=ptx_cc,
                       compile_s=compile_s, ptxas_s=round(time.perf_counter() - t1, 3), error=None)
        except Exception:
            res = {"error": traceback.format_exc(limit=8), "compile_s": compile_s}
        out[str(cc)] = res
    return i, out


def _slow(spec) -> bool:
    """The 16-bit float CAS-loop adds (element formats F16 / BF16 and their mid-word twins): the adder inlined,
    ~3x the compile time."""
    from simt_pto.enums import ElementFormat
    return spec.kind == "scatter-atomic" and spec.policy.fmt in (ElementFormat.F16, ElementFormat.BF16,
                                                                  ElementFormat.F16_EDGE, ElementFormat.BF16_EDGE)


def _cost(spec) -> int:
    return 10 if _slow(spec) else 1


def choose(specs, slow_per_group, seed):
    """All specs, except only ``slow_per_group`` (fixed seed) of each (kernel, format) group of slow ones."""
    if not slow_per_group:
        return list(specs)
    groups = {}
    for s in specs:
        if _slow(s):
            groups.setdefault((s.name, int(s.policy.fmt)), []).append(s)
    rng = random.Random(seed)
    keep = {id(s) for g in sorted(groups) for s in rng.sample(sorted(groups[g], key=lambda x: str(x.key)),
                                                               min(slow_per_group, len(groups[g])))}
    return [s for s in specs if not _slow(s) or id(s) in keep]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--slow-per-group", type=int, default=2,
                    help="float16/bfloat16 atomic adds: compile this many per (kernel, format), fixed seed; 0: all")
    ap.add_argument("--seed", type=int, default=20240531)
    ap.add_argument("--cc", type=int, nargs="+", default=list(CCS))
    args = ap.parse_args(argv)
    _expect_real_mode()
    t0 = time.perf_counter()
    specs, fallbacks = enumerate_specs()
    t_enum = time.perf_counter() - t0
    all_specs = list(specs.values())
    chosen = choose(all_specs, args.slow_per_group, args.seed)
    _SPECS[:] = sorted(chosen, key=_cost, reverse=True)
    results = [None] * len(_SPECS)
    t1 = time.perf_counter()
    if args.jobs > 1:
        import multiprocessing
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            for i, out in pool.map(_compile_one, range(len(_SPECS)), [args.cc] * len(_SPECS), chunksize=1):
                results[i] = out
    else:
        for i in range(len(_SPECS)):
            results[i] = _compile_one(i, args.cc)[1]
    report = {
        "ccs": args.cc, "ptx_cc": min(args.cc), "enumerated": len(all_specs), "compiled": len(_SPECS),
        "sampled": len(_SPECS) < len(all_specs), "calls": sum(len(s.calls) for s in all_specs),
        "scalar_fallbacks": fallbacks, "enumerate_s": round(t_enum, 2),
        "compile_wall_s": round(time.perf_counter() - t1, 2), "jobs": args.jobs,
        "slow_per_group": args.slow_per_group, "seed": args.seed,
        "specs": [dict(s.describe(), results=r) for s, r in zip(_SPECS, results)],
        "not_compiled": [s.describe() for s in all_specs if s not in _SPECS],
    }
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
