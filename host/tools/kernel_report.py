"""``simt-pto inspect``: compile one A5 kernel specialization without a GPU and report what it became.

The call is built and validated exactly as the API does it (:func:`simt_pto.constraints.validated_mgather` /
:func:`~simt_pto.constraints.validated_mscatter` with target ``"a5"``, so a call the spec forbids raises the
same :class:`~simt_pto.ConstraintError`), the launch is the A5 dispatch's own
(:func:`simt_pto.host.a5_planner.mgather_launches` / :func:`~simt_pto.host.a5_planner.mscatter_launches`: its
:class:`~simt_pto.launch_spec.LaunchSpec`), then that spec's kernel, bound to its policy
(:func:`simt_pto.kernels.a5.simt.bound_source`), is compiled to PTX with ``numba.cuda.compile_ptx`` for the
argument types of the spec's arguments and the requested compute capability, and assembled with the CUDA wheels'
``ptxas -v``. The report names the kernel, its policy, launch geometry, registers, spill and shared-memory
bytes, the global-memory instructions of the PTX (and, with ``sass``, of the machine code), and the call's
whole plan (:meth:`CallPlan.describe`, the renderer every plan shares: its launches and host steps).

Tiles and table for ``rows x cols`` (R x C), built by :mod:`simt_pto.host.tiling`:

* Row: data tile ``[R, C]``, index tile ``[1, R]`` RowMajor, table ``(64, C)`` packed ND (Shape[4] == C);
* Elem: data tile ``[R, C]``, index tile ``[R, C]``, a flat table of ``64 * C`` elements.

Padded tile extents are rounded up to the 32-byte rule; the indices are zeros (valid under every policy).

Compiling needs ``numba.cuda`` in real (non-simulator) mode. A process that has not imported it and
was started as ``simt-pto`` / ``python -m simt_pto.host.tools.kernel_report`` switches itself to that mode; any
other process (a test run on the simulator, an interactive session) keeps its mode and the compile
runs in a subprocess, ``python -m simt_pto.host.tools.kernel_report ... --json``.

Toolchain: ``pip install "simt_pto[toolchain]"`` (the ``cuda`` extra's numba-cuda, ``numba-cuda[cu13]``,
``nvidia-cuda-nvcc``, ``nvidia-cuda-cuobjdump``, ``nvidia-cuda-nvdisasm``); ``ptxas``, ``cuobjdump`` and
``nvdisasm`` are found inside the installed ``nvidia`` wheels, then on ``PATH``. On a core install (no
numba-cuda) the command says so in one line naming that extra, exit status 1.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from typing import Any

import numpy as np

from simt_pto import constraints
from simt_pto import dtypes as _dt
from simt_pto.enums import (Coalesce, CoalesceLike, GatherExec, GatherOOB, GatherOOBLike, ScatterAtomicOp,
                            ScatterAtomicOpLike, ScatterConflict, ScatterConflictLike, ScatterOOB, ScatterOOBLike,
                            from_any)
from simt_pto.backend import MissingExtraError, cuda_mode, require_numba_cuda, set_a5_backend
from simt_pto.errors import ConstraintError
from simt_pto.host import tiling
from simt_pto.tensor import GlobalTensor
from simt_pto.call import mgather_policy, mscatter_policy

from .arguments import positive_int

TABLE_ROWS = 64
"""Rows of the Row-mode table (and ``TABLE_ROWS * cols`` elements of the flat Elem table)."""

DEFAULT_CC = 90
SCALAR_FALLBACK = {"MGATHER": "MGatherScalarImpl", "MSCATTER": "MScatterScalarImpl"}

_MODULE = "simt_pto.host.tools.kernel_report"


class ToolchainError(RuntimeError):
    """The CUDA toolchain (numba-cuda NVVM, ptxas, cuobjdump) is missing or failed."""


TOOLCHAIN_EXTRA = 'pip install "simt_pto[toolchain]"'
"""What installs the CUDA compiler toolchain: every error about a missing part of it names this."""

# The exceptions that mean "a CUDA compiler library is not installed", by class name so that naming them imports
# nothing: cuda.pathfinder's DynamicLibNotFoundError (numba-cuda finds libnvrtc / libnvvm through cuda.pathfinder)
# and numba-cuda's NvvmSupportError ("libNVVM is not available").
_MISSING_LIBRARY = ("DynamicLibNotFoundError", "NvvmSupportError")


def _missing_library(exc: BaseException) -> BaseException | None:
    """The exception in ``exc``'s cause / context chain that says a CUDA compiler library is missing, or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if any(cls.__name__ in _MISSING_LIBRARY for cls in type(exc).__mro__):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def toolchain_missing_error(exc: BaseException) -> ToolchainError | None:
    """A :class:`ToolchainError` naming the extra to install when ``exc`` says a CUDA compiler library (NVVM,
    NVRTC) is missing, else None."""
    missing = _missing_library(exc)
    if missing is None:
        return None
    detail = " ".join(f"{type(missing).__name__}: {missing}".split())
    return ToolchainError(f"the CUDA compiler libraries (NVVM / NVRTC) are not installed; {TOOLCHAIN_EXTRA} "
                          f"installs them ({detail})")


# -- the call: tiles, table, plan, launch --------------------------------------------------------------

def normalise_cc(cc) -> int:
    """``90``, ``"90"``, ``"9.0"``, ``"sm_90"``, ``(9, 0)`` -> ``90``."""
    if isinstance(cc, (tuple, list)) and len(cc) == 2:
        return int(cc[0]) * 10 + int(cc[1])
    text = str(cc).strip().lower().removeprefix("sm_").removeprefix("compute_")
    if re.fullmatch(r"\d+\.\d", text):
        major, minor = text.split(".")
        return int(major) * 10 + int(minor)
    if re.fullmatch(r"\d{2,3}", text):
        return int(text)
    raise ValueError(f"cc: expected a compute capability such as 90, 9.0 or sm_90, got {cc!r}")


def build_plan(op, coalesce, *, atomic=None, oob=None, conflict=None, dtype="float32", index_dtype="int32",
               rows=8, cols=64, strict=True, mid_word=False):
    """Build the tiles and table for the call and validate it for target ``a5``: the :class:`Plan`.

    ``op`` is ``"mgather"`` or ``"mscatter"``; ``atomic`` and ``conflict`` apply to MSCATTER only
    (defaults: NONE, LAST); ``oob`` defaults to UNDEFINED. ``mid_word`` starts the table one element into
    an allocation, so a 16-bit float table starts mid-word (the float16 / bfloat16 Add's boundary-word
    format). Raises :class:`ConstraintError` for a call
    the spec forbids, ValueError / TypeError for a malformed one.
    """
    op = str(op).strip().lower()
    if op not in ("mgather", "mscatter"):
        raise ValueError(f"op: expected mgather or mscatter, got {op!r}")
    coalesce = from_any(Coalesce, coalesce, "coalesce")
    rows, cols = int(rows), int(cols)
    d = _dt.resolve(dtype)
    data = tiling.data_tile(d, rows, cols)
    idx = tiling.index_tile(coalesce, rows, cols, idx_dtype=_dt.resolve(index_dtype))
    shape = (TABLE_ROWS, cols) if coalesce == Coalesce.ROW else (TABLE_ROWS * cols,)
    memory = _zeros(d, (TABLE_ROWS * cols + 1,))[1:].reshape(shape) if mid_word else _zeros(d, shape)
    table = GlobalTensor(memory, dtype=d)
    if op == "mgather":
        for name, value in (("atomic", atomic), ("conflict", conflict)):
            if value is not None and not (name == "atomic" and _is_none_atomic(value)):
                raise ValueError(f"{name} applies to mscatter only")
        policy = mgather_policy(coalesce, "undefined" if oob is None else oob, "a5", GatherExec.SCALAR, strict, None)
        return constraints.validated_mgather(policy, data, table, idx)
    policy = mscatter_policy(coalesce, "none" if atomic is None else atomic, "undefined" if oob is None else oob,
                             "last" if conflict is None else conflict, "a5", strict, None)
    return constraints.validated_mscatter(policy, table, data, idx)


def _is_none_atomic(value) -> bool:
    try:
        return from_any(ScatterAtomicOp, value, "atomic") == ScatterAtomicOp.NONE
    except (TypeError, ValueError):
        return False


def _zeros(d, shape):
    return np.zeros(shape, dtype=d.numpy)


def call_plan(plan):
    """The A5 dispatch's :class:`~simt_pto.launch_spec.CallPlan` for a validated plan (what the call launches).

    Imports ``simt_pto.host.a5_planner`` (and the kernels): call it in a process whose ``numba.cuda`` is in real mode
    (see :func:`compile_here`)."""
    from simt_pto.host import a5_planner
    return (a5_planner.mgather_launches if plan.op == "MGATHER" else a5_planner.mscatter_launches)(plan)


def launch_of(plan):
    """The :class:`~simt_pto.launch_spec.LaunchSpec` a tile op's plan launches (a tile op launches one kernel at
    most); None for the scalar pipe (the ``(1, 1)`` Elem fallbacks, the cube core's GM -> L1 walk)."""
    launches = call_plan(plan).launches
    return launches[0] if launches else None


def signature(spec) -> tuple:
    """The Numba argument types the dispatcher specialises ``spec.kernel`` on: the ``launch`` tuple
    ``(block_lo, block_hi, grid, kLaunchWarps)``, then the spec's arguments, in the kernel's order."""
    from simt_pto.kernels.a5.simt import argument_types
    return argument_types(spec.values())


def policy_dict(spec) -> dict:
    """The compile-time policy of a launch, by name (:meth:`KernelPolicy.describe`)."""
    return spec.policy.describe()


# -- the toolchain --------------------------------------------------------------------------------------

def find_tool(name: str) -> str:
    """``ptxas`` / ``cuobjdump`` / ``nvdisasm`` from the installed ``nvidia`` wheels, else from PATH."""
    candidates = []
    try:
        import nvidia
        for root in list(nvidia.__path__):
            candidates += sorted(glob.glob(os.path.join(root, "cu*", "bin", name)), reverse=True)
            candidates += sorted(glob.glob(os.path.join(root, "*", "bin", name)))
    except ImportError:
        pass
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    found = shutil.which(name)
    if found:
        return found
    raise ToolchainError(f"{name} not found: {TOOLCHAIN_EXTRA} (the nvidia-cuda-nvcc, nvidia-cuda-cuobjdump and "
                         f"nvidia-cuda-nvdisasm wheels)")


def compile_here() -> bool:
    """True when this process's ``numba.cuda`` is numba-cuda's, imported in real (non-simulator) mode."""
    return cuda_mode() == "gpu"


def require_toolchain() -> None:
    """Raise :class:`~simt_pto.backend.MissingExtraError` naming the ``toolchain`` extra when numba-cuda is not
    installed (a core install): compiling a kernel needs it, and the CUDA compiler libraries that extra brings."""
    require_numba_cuda("compiling an A5 kernel", extra="toolchain")


def _owns_process() -> bool:
    """True when this process was started as ``simt-pto`` or ``python -m simt_pto.host.tools.kernel_report``/``.cli``."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name in (_MODULE, "simt_pto.host.tools.cli"):
        return True
    return os.path.basename(sys.argv[0] if sys.argv else "") in ("simt-pto", "simt-pto.exe")


def _claim_real_mode(own_process: bool) -> bool:
    """Switch this process to real-CUDA mode if nothing has imported numba.cuda yet and we own it."""
    if compile_here():
        return True
    if "numba.cuda" in sys.modules or not own_process:
        return False
    os.environ["SIMT_PTO_A5_BACKEND"] = "gpu"
    return set_a5_backend("gpu") == "gpu"


_PTX_MEM = re.compile(r"^\s*(?:@!?%\w+\s+)?((?:ld|st|atom|red)(?:\.[a-z0-9_]+)+)\s", re.M)
_NOT_GLOBAL = ("param", "shared", "local", "const")
_SASS_MEM = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?((?:LDG|STG|ATOMG|ATOM|REDG|RED|LD|ST)(?:\.[A-Z0-9_]+)*)"
                       r"[\s;]")


def opcodes(assembly: str, comment: str) -> list[str]:
    """The opcodes of ``assembly`` (x86 from Numba's ``inspect_asm``, or PTX; ``comment`` its comment marker) in
    order, without labels, directives and operands: two compiles of one function compared as code (Numba numbers
    the names of each compile in a process)."""
    out = []
    for line in assembly.splitlines():
        line = line.split(comment)[0].strip()
        if line and not line.endswith(":") and not line.startswith((".", "{", "}", ")", "(")):
            out.append(line.split()[0])
    return out


def ptx_memory_instructions(ptx: str) -> Counter:
    """Global-memory instructions of a PTX text by mnemonic (``ld.global.u32``, ``atom.global.add.f32``);
    generic-address ones (``ld.u32``: no state space) are counted too, as they appear."""
    found = Counter()
    for m in _PTX_MEM.finditer(ptx):
        mnemonic = m.group(1)
        if mnemonic.split(".")[1] not in _NOT_GLOBAL:
            found[mnemonic] += 1
    return found


def classify(mnemonics) -> dict:
    """``{"global_loads": [...], "global_stores": [...], "global_atomics": [...]}`` (sorted, unique)."""
    out = {"global_loads": set(), "global_stores": set(), "global_atomics": set()}
    for m in mnemonics:
        head = m.split(".")[0].upper()
        key = {"LD": "global_loads", "LDG": "global_loads", "ST": "global_stores", "STG": "global_stores"}.get(
            head, "global_atomics")
        out[key].add(m)
    return {k: sorted(v) for k, v in out.items()}


def parse_ptxas(log: str) -> dict:
    def num(pattern, default=0):
        m = re.search(pattern, log)
        return int(m.group(1)) if m else default
    spill_stores = num(r"(\d+) bytes spill stores")
    spill_loads = num(r"(\d+) bytes spill loads")
    return {"registers": num(r"Used (\d+) registers", None), "spill_stores": spill_stores,
            "spill_loads": spill_loads, "spill_bytes": spill_stores + spill_loads,
            "stack_bytes": num(r"(\d+) bytes stack frame"), "shared_bytes": num(r"(\d+) bytes smem")}


def sass_memory_instructions(sass: str) -> Counter:
    return Counter(m.group(1) for m in _SASS_MEM.finditer(sass))


def _run_tool(argv, what, env=None):
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise ToolchainError(f"{what} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout + proc.stderr


def compile_ptx(spec, cc) -> str:
    """PTX of ``spec.kernel`` bound to ``spec.policy``, for the types of the spec's arguments, at compute
    capability ``cc`` (needs real mode). Raises :class:`ToolchainError` naming the ``toolchain`` extra when the
    CUDA compiler libraries are missing (a plain install: cuda.pathfinder cannot find libnvrtc / libnvvm)."""
    from numba import cuda
    from simt_pto.kernels.a5.simt import bound_source
    from simt_pto.kernels.cache import compile_scope
    cc = normalise_cc(cc)
    try:
        with compile_scope():  # as the kernel's own compiles (simt_pto.kernels.cache.guard)
            ptx, _ = cuda.compile_ptx(bound_source(spec.kernel, spec.policy, "cuda"), signature(spec),
                                      cc=(cc // 10, cc % 10))
    except Exception as exc:
        missing = toolchain_missing_error(exc)
        if missing is None:
            raise
        raise missing from exc
    return ptx


def assemble(ptx: str, cc, sass: bool = False) -> dict:
    """``ptxas -v`` (and with ``sass`` ``cuobjdump -sass``) of one PTX text: the resource report."""
    cc = normalise_cc(cc)
    ptxas = find_tool("ptxas")
    with tempfile.TemporaryDirectory(prefix="simt_pto_inspect_") as tmp:
        src, cubin = os.path.join(tmp, "kernel.ptx"), os.path.join(tmp, "kernel.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        out = parse_ptxas(_run_tool([ptxas, f"-arch=sm_{cc}", "-v", src, "-o", cubin], "ptxas"))
        if sass:
            cuobjdump = find_tool("cuobjdump")
            env = dict(os.environ)
            env["PATH"] = os.path.dirname(cuobjdump) + os.pathsep + env.get("PATH", "")
            try:  # cuobjdump -sass runs nvdisasm: look for it beside cuobjdump first
                env.setdefault("NVDISASM_PATH", os.path.dirname(find_tool("nvdisasm")))
            except ToolchainError:
                pass
            text = _run_tool([cuobjdump, "-sass", cubin], "cuobjdump -sass", env=env)
            out["sass_counts"] = dict(sorted(sass_memory_instructions(text).items()))
            out["sass_memory"] = sorted(out["sass_counts"])
    return out


# -- the report -----------------------------------------------------------------------------------------

def _call_dict(plan) -> dict:
    call = {"op": plan.op.lower(), "coalesce": plan.coalesce.name.lower(), "dtype": plan.dtype.name,
            "index_dtype": plan.idx.dtype.name, "rows": plan.rows, "cols": plan.cols,
            "oob": plan.oob.name.lower(), "capacity": plan.capacity}
    if plan.op == "MSCATTER":
        call.update(atomic=plan.atomic.name.lower(), conflict=plan.conflict.name.lower())
    return call


def inspect_plan(plan, cc=DEFAULT_CC, sass=False) -> dict:
    """The report for a validated plan, compiled in this process (needs real mode: :func:`compile_here`)."""
    cc = normalise_cc(cc)
    report = {"call": _call_dict(plan), "cc": cc, "arch": f"sm_{cc}"}
    call = call_plan(plan)
    report["plan"] = call.describe()
    if not call.launches:
        impl = SCALAR_FALLBACK[plan.op]
        report.update(kernel=None, scalar_fallback=impl, geometry=None, policy=None, signature=None,
                      registers=None, spill_bytes=None, spill_stores=None, spill_loads=None, stack_bytes=None,
                      shared_bytes=None, global_loads=[], global_stores=[], global_atomics=[], ptx_counts={},
                      note=f"(1, 1) Elem: {impl} on the AIV scalar pipe; no SIMT kernel is launched")
        return report
    spec = call.launches[0]
    ptx = compile_ptx(spec, cc)
    counts = ptx_memory_instructions(ptx)
    report.update(kernel=spec.kernel, scalar_fallback=None, geometry=spec.geometry.as_dict(),
                  policy=policy_dict(spec), signature=[str(t) for t in signature(spec)])
    report.update(assemble(ptx, cc, sass=sass))
    report.update(classify(counts))
    report["ptx_counts"] = dict(sorted(counts.items()))
    return report


def _cli_args(op, coalesce, atomic, oob, conflict, dtype, index_dtype, rows, cols, cc, sass, strict):
    argv = ["--op", str(op), "--coalesce", _name(coalesce, Coalesce), "--dtype", _dt.resolve(dtype).name,
            "--index-dtype", _dt.resolve(index_dtype).name, "--rows", str(int(rows)), "--cols", str(int(cols)),
            "--cc", str(normalise_cc(cc)), "--json"]
    if atomic is not None:
        argv += ["--atomic", _name(atomic, ScatterAtomicOp)]
    if oob is not None:
        argv += ["--oob", _name(oob, GatherOOB if str(op).lower() == "mgather" else ScatterOOB)]
    if conflict is not None:
        argv += ["--conflict", _name(conflict, ScatterConflict)]
    if sass:
        argv.append("--sass")
    if not strict:
        argv.append("--no-strict")
    return argv


def _name(value, enum_cls) -> str:
    return from_any(enum_cls, value).name.lower()


_SUBPROCESS_MAIN = f"import sys; from {_MODULE} import main; sys.exit(main(sys.argv[1:]))"


def _inspect_in_subprocess(argv) -> dict:
    env = dict(os.environ)
    env["SIMT_PTO_A5_BACKEND"] = "gpu"
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    proc = subprocess.run([sys.executable, "-c", _SUBPROCESS_MAIN, *argv], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise ToolchainError(f"python -m {_MODULE} {' '.join(argv)} failed (exit {proc.returncode}):\n"
                             f"{proc.stderr.strip() or proc.stdout.strip()}")
    return json.loads(proc.stdout)


def inspect_kernel(op: str, coalesce: CoalesceLike, *, atomic: ScatterAtomicOpLike | None = None,
                   oob: GatherOOBLike | ScatterOOBLike | None = None, conflict: ScatterConflictLike | None = None,
                   dtype: _dt.DTypeLike = "float32", index_dtype: _dt.DTypeLike = "int32", rows: int = 8,
                   cols: int = 64, cc: int | str | tuple[int, int] = DEFAULT_CC, sass: bool = False,
                   strict: bool = True) -> dict[str, Any]:
    """Compile the A5 kernel one MGATHER / MSCATTER call launches, without a GPU; return the report.

    ``simt_pto.inspect_kernel("mgather", "row", dtype="float32", rows=8, cols=64)`` ->
    ``{"kernel": "simt_mgather_row_kernel", "cc": 90, "registers": ..., "spill_bytes": 0,
    "global_loads": ["ld.global.u32"], "global_stores": ["st.global.u32"], "global_atomics": [],
    "geometry": {...}, ...}``. A call the spec forbids raises :class:`ConstraintError` (validated in this
    process). When this process runs ``numba.cuda`` on the simulator (or has not chosen), the compile
    runs in a ``python -m simt_pto.host.tools.kernel_report`` subprocess, so this process's backend is untouched.
    Without numba-cuda (a core install) it raises :class:`~simt_pto.backend.MissingExtraError` naming the
    ``toolchain`` extra, after the call is validated.
    """
    plan = build_plan(op, coalesce, atomic=atomic, oob=oob, conflict=conflict, dtype=dtype,
                      index_dtype=index_dtype, rows=rows, cols=cols, strict=strict)
    require_toolchain()
    if compile_here():
        return inspect_plan(plan, cc, sass)
    return _inspect_in_subprocess(_cli_args(op, coalesce, atomic, oob, conflict, dtype, index_dtype, rows, cols,
                                            cc, sass, strict))


# -- text form ------------------------------------------------------------------------------------------

def format_report(r: dict) -> str:
    c = r["call"]
    what = f"{c['op'].upper()} {c['coalesce']}, {c['dtype']}, index {c['index_dtype']}, {c['rows']}x{c['cols']}"
    what += f", oob {c['oob']}"
    if c["op"] == "mscatter":
        what += f", atomic {c['atomic']}, conflict {c['conflict']}"
    lines = [f"call       {what} (target a5, capacity {c['capacity']})"]
    plan = ["plan       " + r["plan"][0]] + [f"           {line}" for line in r["plan"][1:]] if r.get("plan") else []
    if r["kernel"] is None:
        lines += [f"kernel     none: {r['note']}"] + plan
        return "\n".join(lines)
    g = r["geometry"]
    policy = ", ".join(f"{k}={v}" for k, v in r["policy"].items())
    lines += [
        f"kernel     {r['kernel']} [{policy}]",
        f"arch       {r['arch']}",
        "geometry   " + ", ".join(f"{k}={tuple(v) if isinstance(v, list) else v}" for k, v in g.items()),
        f"registers  {r['registers']}",
        f"spill      {r['spill_bytes']} bytes (stores {r['spill_stores']}, loads {r['spill_loads']}); "
        f"stack frame {r['stack_bytes']} bytes",
        f"shared     {r['shared_bytes']} bytes",
        *plan,
        "PTX global memory instructions:",
    ]
    lines += [f"  {m:<28} x{n}" for m, n in r["ptx_counts"].items()] or ["  (none)"]
    if "sass_counts" in r:
        lines.append("SASS memory instructions:")
        lines += [f"  {m:<28} x{n}" for m, n in r["sass_counts"].items()] or ["  (none)"]
    return "\n".join(lines)


# -- command line ---------------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--op", required=True, choices=("mgather", "mscatter"), help="the instruction")
    p.add_argument("--coalesce", required=True, choices=("row", "elem"),
                   help="row: whole rows through a [1, R] index tile; elem: single elements through an [R, C] one")
    p.add_argument("--atomic", help="mscatter: none | add | max | min (default none)")
    p.add_argument("--oob", help="mgather: undefined | clamp | wrap | zero; mscatter: undefined | skip | clamp | wrap")
    p.add_argument("--conflict", help="mscatter: last | default (default last)")
    p.add_argument("--dtype", default="float32", help="element dtype (default float32)")
    p.add_argument("--index-dtype", default="int32", help="int32 | uint32 (default int32)")
    p.add_argument("--rows", type=positive_int, default=8, help="valid rows R (default 8)")
    p.add_argument("--cols", type=positive_int, default=64, help="valid cols C (default 64)")
    p.add_argument("--cc", default=str(DEFAULT_CC), help="compute capability (default 90: sm_90)")
    p.add_argument("--sass", action="store_true", help="also list the SASS memory instructions (cuobjdump -sass)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--no-strict", dest="strict", action="store_false",
                   help="oob undefined masks out-of-range indices (strict=False)")


DESCRIPTION = ("Compile the A5 SIMT kernel that one MGATHER / MSCATTER call launches, without a GPU, and report "
               "what it became: the kernel and its policy, the launch geometry, registers, spill and shared-memory "
               "bytes, and the global-memory instructions of the PTX (with --sass, of the machine code too). The "
               "call is checked against the spec's rules first, exactly as the API checks it.")
EPILOG = ("The tiles are R x C (--rows, --cols): Row mode uses a [1, R] index tile and a (64, C) table, Elem mode an "
          "[R, C] index tile and a flat table of 64 * C elements; the indices are zeros. Compiling needs the CUDA "
          f"compiler toolchain: {TOOLCHAIN_EXTRA}. Exit status: 0 on success, 1 when the toolchain is missing or "
          "fails, 2 for a call the spec forbids or a bad argument.")


def register(subparsers) -> None:
    p = subparsers.add_parser("inspect", help="compile one A5 kernel specialization (no GPU) and report it",
                              description=DESCRIPTION, epilog=EPILOG)
    add_arguments(p)
    p.set_defaults(func=run, parser=p)


def run(args, own_process: bool | None = None) -> int:
    """``simt-pto inspect``: 0 on success, 2 for a call the spec forbids or a bad argument, 1 for a toolchain failure.

    ``own_process``: this process runs only this command, so it may switch ``numba.cuda`` to real mode
    (default: guessed from how the process was started); otherwise the compile runs in a subprocess."""
    kwargs = dict(atomic=args.atomic, oob=args.oob, conflict=args.conflict, dtype=args.dtype,
                  index_dtype=args.index_dtype, rows=args.rows, cols=args.cols, strict=args.strict)
    try:
        cc = normalise_cc(args.cc)
        plan = build_plan(args.op, args.coalesce, **kwargs)
    except (ConstraintError, ValueError, TypeError) as e:
        message = f"{type(e).__name__}: {' '.join(str(e).split())}"
        parser = getattr(args, "parser", None)
        if parser is not None:
            parser.error(message)  # argparse's usage and one error line, exit 2
        print(f"simt-pto inspect: {message}", file=sys.stderr)
        return 2
    try:
        require_toolchain()
        if _claim_real_mode(_owns_process() if own_process is None else own_process):
            report = inspect_plan(plan, cc, args.sass)
        else:
            report = _inspect_in_subprocess(_cli_args(args.op, args.coalesce, cc=cc, sass=args.sass, **kwargs))
    except (ToolchainError, MissingExtraError) as e:
        print(f"simt-pto inspect: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a compile failure in Numba / NVVM: report it, do not hide it
        print(f"simt-pto inspect: compiling failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def main(argv=None) -> int:
    """``python -m simt_pto.host.tools.kernel_report ...``: the ``simt-pto inspect`` command in a process of its own."""
    parser = argparse.ArgumentParser(prog=f"python -m {_MODULE}", description=DESCRIPTION, epilog=EPILOG)
    add_arguments(parser)
    parser.set_defaults(parser=parser)
    return run(parser.parse_args(argv), own_process=True)


if __name__ == "__main__":
    sys.exit(main())
