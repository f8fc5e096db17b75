"""Every A5 kernel specialization compiles to sm_80 and sm_90 machine code, without a GPU.

One subprocess (``tests/compile_a5_matrix.py``, ``numba.cuda`` in real mode; this process keeps the
simulator) enumerates the specializations from the call plans the dispatch builds (``constraints.plan_*`` +
``host.a5_planner.mgather_launches`` / ``mscatter_launches`` over every dtype, atomic op, conflict, OOB policy, coalesce and
index dtype; the GM -> L1 gathers; the whole-array ops' plans, ``host.in_memory.gather_plan`` / ``scatter_plan``; the
device index check), dedupes them by (kernel, policy, argument types), compiles each once with
``numba.cuda.compile_ptx`` and assembles that PTX with ``ptxas -v`` for sm_80 and sm_90.
The tests read its JSON report: nothing fails, nothing spills, every atomic specialization holds the
hardware atomic of its (op, dtype) and no other, and plain-store kernels hold no atomic at all.

Cost: all ~210 specializations, each compiled to PTX once and assembled for 2 cc (the float16 / bfloat16
atomic adds take most, ~2.5 s each). Needs the toolchain extra (``pip install ".[toolchain]"``, which ``.[test]``
includes); skipped, with the reason, without ``ptxas``.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import requires_toolchain
from simt_pto.host.tools import kernel_report as insp

HERE = Path(__file__).resolve().parent
CCS = ("80", "90")

pytestmark = requires_toolchain


def _real_mode_env():
    env = dict(os.environ)
    env["SIMT_PTO_A5_BACKEND"] = "gpu"
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    return env


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("compile_a5") / "report.json"
    cmd = [sys.executable, str(HERE / "compile_a5_matrix.py"), "--out", str(out), "--jobs", "2",
           "--slow-per-group", "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_real_mode_env(), timeout=1800)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    data = json.loads(out.read_text())
    print(f"\ncompile_a5_matrix: {data['enumerated']} specializations from {data['calls']} calls, "
          f"{data['compiled']} compiled x {len(data['ccs'])} cc in {data['compile_wall_s']} s "
          f"({data['jobs']} workers)")
    return data


def _specs(report, *kinds):
    return [s for s in report["specs"] if not kinds or s["kind"] in kinds]


def _label(spec):
    return f"{spec['name']}[{spec['cache_key']}] {spec['signature'][1:3]} ({', '.join(spec['dtypes'])})"


# -- coverage ---------------------------------------------------------------------------------------------

def test_matrix_reaches_every_kernel(report):
    from simt_pto.kernels.a5 import KERNELS
    from simt_pto.kernels.a5.mscatter import PLAIN_STORE_KERNELS
    factories = set(KERNELS) - PLAIN_STORE_KERNELS  # the multicore backend's own: no CUDA form
    seen = {s["name"] for s in report["specs"] + report["not_compiled"]}
    assert factories <= seen, f"kernels no enumerated call launches: {sorted(factories - seen)}"
    assert {"count_out_of_range", "flag_out_of_range"} <= seen
    assert report["scalar_fallbacks"] > 0  # (1, 1) Elem calls resolve to the scalar pipe, no kernel
    kinds = {s["kind"] for s in report["specs"]}
    assert {"gather", "scatter-plain", "scatter-atomic", "last", "owner-claim", "owner-write", "owner-reset",
            "validate", "index-flag"} <= kinds


def test_every_enumerated_specialization_is_compiled(report):
    assert not report["not_compiled"] and report["compiled"] == report["enumerated"]


# -- compile, assemble, resources -----------------------------------------------------------------------------

def test_every_specialization_compiles_and_assembles(report):
    failed = [f"{_label(s)} sm_{cc}: {s['results'][cc]['error'].strip().splitlines()[-1]}"
              for s in report["specs"] for cc in CCS if s["results"].get(cc, {"error": "not run"})["error"]]
    assert not failed, "\n".join(failed)
    assert all(s["results"][cc]["registers"] for s in report["specs"] for cc in CCS)


def test_no_specialization_spills(report):
    spilling = [f"{_label(s)} sm_{cc}: {r['spill_stores']} B spill stores, {r['spill_loads']} B spill loads"
                for s in report["specs"] for cc, r in s["results"].items() if r["spill_stores"] or r["spill_loads"]]
    assert not spilling, "\n".join(spilling)


# -- atomics ------------------------------------------------------------------------------------------------

_ATOMIC = re.compile(r"(?:atom|red)(?:\.global)?\.(\w+)\.(\w+)")


def _atomics(result):
    """{(op, type)} of the PTX atomics / reductions; anything unparsable is kept whole."""
    out = set()
    for m in result["global_atomics"]:
        hit = _ATOMIC.fullmatch(m)
        out.add((hit.group(1), hit.group(2)) if hit else (m, ""))
    return out


def _expected_atomics(atomic, dtype):
    """The hardware atomics an (op, dtype) specialization must contain, and nothing else."""
    if atomic == "add":
        return {"int32": [{("add", "u32")}, {("add", "s32")}], "uint32": [{("add", "u32")}, {("add", "s32")}],
                "float32": [{("add", "f32")}], "float16": [{("cas", "b32")}], "bfloat16": [{("cas", "b32")}]}[dtype]
    other = {"max": "min", "min": "max"}[atomic]
    return {"int32": [{(atomic, "s32")}], "uint32": [{(atomic, "u32")}],
            # float32 max / min: the sign-magnitude order on the bits (see kernels/a5/device.py)
            "float32": [{(atomic, "s32"), (other, "u32")}]}[dtype]


def test_atomic_specializations_use_the_matching_hardware_atomic(report):
    wrong = []
    for s in _specs(report, "scatter-atomic"):
        (dtype,) = s["dtypes"]
        allowed = _expected_atomics(s["atomic"], dtype)
        for cc in CCS:
            r = s["results"][cc]
            if _atomics(r) not in allowed:
                wrong.append(f"{_label(s)} {s['atomic']} sm_{cc}: {r['global_atomics']}, expected one of {allowed}")
            if r["global_stores"]:
                wrong.append(f"{_label(s)} sm_{cc}: plain stores {r['global_stores']} in an atomic specialization")
    assert not wrong, "\n".join(wrong)
    covered = {(s["atomic"], s["dtypes"][0]) for s in _specs(report, "scatter-atomic")}
    from simt_pto import dtypes as dt
    from simt_pto.enums import ScatterAtomicOp
    spec_pairs = {(op.name.lower(), d.name) for op in ScatterAtomicOp if op != ScatterAtomicOp.NONE
                  for d in dt.atomic_dtypes("a5", op)}
    assert covered == spec_pairs


def test_owner_claim_and_index_check_atomics(report):
    for s in _specs(report, "owner-claim"):
        width = _WIDTH.fullmatch(s["signature"][1]).group(1)  # the owner array: int32, or int64 past 2**31 sources
        for cc in CCS:
            assert _atomics(s["results"][cc]) == {("max", f"s{width}")}, _label(s)
    for s in _specs(report, "validate"):
        for cc in CCS:
            assert _atomics(s["results"][cc]) == {("add", "u64"), ("min", "s64")}, _label(s)
    for s in _specs(report, "index-flag"):  # a plain store: its flag may live in mapped host memory
        for cc in CCS:
            assert _atomics(s["results"][cc]) == set(), _label(s)


_WIDTH = re.compile(r"array\(u?int(\d+), 1d, [CA]\)")


def test_plain_and_last_kernels_hold_no_atomics_and_store_the_element_width(report):
    wrong = []
    for s in _specs(report, "gather", "scatter-plain", "last", "owner-write", "owner-reset"):
        bits = _WIDTH.fullmatch(s["signature"][1]).group(1)  # dst (gather) or table (scatter), after the launch tuple: raw bits
        for cc in CCS:
            r = s["results"][cc]
            atomics = [m for m in r["ptx_counts"] if m.startswith(("atom.", "red."))]
            if atomics or r["global_atomics"]:
                wrong.append(f"{_label(s)} sm_{cc}: atomics {atomics or r['global_atomics']}")
            if r["global_stores"] != [f"st.global.u{bits}"]:
                wrong.append(f"{_label(s)} sm_{cc}: stores {r['global_stores']}, expected st.global.u{bits}")
    assert not wrong, "\n".join(wrong)


# -- simt-pto inspect -----------------------------------------------------------------------------------------

def _cli(*args):
    return subprocess.run([sys.executable, "-m", "simt_pto.host.tools.cli", "inspect", *args], capture_output=True,
                          text=True, env=_real_mode_env(), timeout=600)


def test_inspect_json_row_gather():
    import simt_pto as pto
    proc = _cli("--op", "mgather", "--coalesce", "row", "--dtype", "float32", "--rows", "8", "--cols", "64",
                "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["kernel"] == "simt_mgather_row_kernel" and r["cc"] == 90
    assert r["geometry"] == pto.row_geometry(8, 64).as_dict()
    assert isinstance(r["registers"], int) and r["registers"] > 0 and r["spill_bytes"] == 0
    assert r["global_loads"] == ["ld.global.u32"] and r["global_stores"] == ["st.global.u32"]
    assert r["global_atomics"] == []


def _has_nvdisasm():
    try:
        insp.find_tool("nvdisasm")
        return True
    except insp.ToolchainError:
        return False


@pytest.mark.skipif(not _has_nvdisasm(), reason="nvdisasm missing: pip install 'simt_pto[toolchain]'")
def test_inspect_text_with_sass_and_cc80():
    proc = _cli("--op", "mscatter", "--coalesce", "elem", "--atomic", "add", "--dtype", "int32", "--cc", "80",
                "--sass")
    assert proc.returncode == 0, proc.stderr
    assert "simt_mscatter_elem_kernel" in proc.stdout and "sm_80" in proc.stdout
    assert "atom.global.add.u32" in proc.stdout
    assert re.search(r"\b(ATOMG|RED|REDG)\.E\.ADD", proc.stdout), proc.stdout


def test_inspect_forbidden_call_exits_2_with_the_constraint_error():
    proc = _cli("--op", "mscatter", "--coalesce", "row", "--atomic", "max", "--dtype", "float16")
    assert proc.returncode == 2
    with pytest.raises(insp.ConstraintError) as err:  # the API's own check, in this process
        insp.build_plan("mscatter", "row", atomic="max", dtype="float16")
    assert f"ConstraintError: {err.value}" in proc.stderr
    assert "Atomic Type Support" in proc.stderr and proc.stdout == ""


def test_inspect_kernel_from_a_simulator_process():
    import simt_pto as pto
    with pytest.raises(pto.ConstraintError, match="Atomic Type Support"):
        pto.inspect_kernel("mscatter", "elem", atomic="max", dtype="float16")
    r = pto.inspect_kernel("mscatter", "elem", atomic="add", dtype="float32", rows=4, cols=32, cc="sm_90")
    assert r["kernel"] == "simt_mscatter_elem_kernel" and r["global_atomics"] == ["atom.global.add.f32"]
    assert r["geometry"] == pto.elem_geometry(4, 32).as_dict()
    scalar = pto.inspect_kernel("mgather", "elem", rows=1, cols=1)
    assert scalar["kernel"] is None and scalar["scalar_fallback"] == "MGatherScalarImpl"
