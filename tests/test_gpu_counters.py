"""The GPU's own counters (host/tools/gpu_counters.py: CUPTI's Range Profiler through ctypes) and the coalescing
model beside them (host/tools/counter_check.py, ``simt-pto coalesce --measure``).

Without a GPU: CUPTI's host side (which metrics a chip has, the configuration image, the replay passes) runs on the
CPU, so the metric names the comparison reads are checked against the chips of the lent machines (GA100, GH100);
the comparison's arithmetic, and the replay of a call's launches on Numba's CUDA simulator with a stand-in for the
counters. On a GPU (``bench/gpu_session.sh counters``): the counters themselves, against the model.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import requires_cuda

import simt_pto as pto
from simt_pto.host.tools import counter_check, gpu_counters
from simt_pto.host.tools.gpu_counters import COALESCING_METRICS, LaunchCounters


def _cupti_loads() -> str | None:
    try:
        gpu_counters.library()
    except gpu_counters.CountersUnavailable as exc:
        return str(exc)
    return None


_NO_CUPTI = _cupti_loads()
requires_cupti = pytest.mark.skipif(_NO_CUPTI is not None, reason=f"needs CUPTI (the counters extra): {_NO_CUPTI}")
on_gpu = pto.backend.numba_cuda_installed() and pto.a5_backend() == "gpu"
requires_gpu = pytest.mark.skipif(not on_gpu, reason="needs a CUDA GPU: the counters are read on the GPU")


def counters(kernel: str, **values: float) -> LaunchCounters:
    """A launch's counters, ``ld_sectors=...``-style keywords for the metrics (the rest zero)."""
    out = dict.fromkeys(COALESCING_METRICS, 0.0)
    for key, value in values.items():
        op, what = key.split("_")
        out[f"l1tex__t_{what}_pipe_lsu_mem_global_op_{op}.sum"] = float(value)
    return LaunchCounters(kernel, out)


# -- CUPTI's host side, no GPU ----------------------------------------------------------------------------------

@requires_cupti
@pytest.mark.parametrize("chip", ["GA100", "GH100"])
def test_the_metrics_the_comparison_reads_exist_on_the_lent_chips(chip):
    with gpu_counters.MetricConfig(chip) as config:
        assert config.metrics == COALESCING_METRICS
        assert 1 <= config.passes <= len(COALESCING_METRICS)  # packed into passes, at most one a metric
        assert len(config.image) > 0


@requires_cupti
def test_a_metric_the_chip_lacks_is_refused_by_name():
    bogus = "l1tex__t_sectors_pipe_lsu_mem_global_op_bogus.sum"
    with pytest.raises(gpu_counters.UnknownMetric, match="GH100 has no metric 'l1tex__t_sectors_pipe_lsu_mem_global_op_bogus"):
        gpu_counters.MetricConfig("GH100", [COALESCING_METRICS[0], bogus])


@requires_cupti
def test_an_unknown_chip_is_refused_naming_the_known_ones():
    assert "GH100" in gpu_counters.supported_chips()
    with pytest.raises(gpu_counters.CuptiError, match=r"chip 'XX999'.*GH100"):
        gpu_counters.MetricConfig("XX999")


@pytest.mark.skipif(on_gpu, reason="a machine with a GPU can read its counters")
def test_without_a_gpu_measuring_says_why_before_running_anything():
    ran = []
    with pytest.raises(gpu_counters.CountersUnavailable, match="CUPTI|GPU|CUDA"):
        gpu_counters.measure(lambda: ran.append(1))
    assert ran == []


def test_the_library_named_in_the_environment_is_tried_first(monkeypatch, tmp_path):
    fake = tmp_path / "libcupti.so.13"
    monkeypatch.setenv(gpu_counters.LIBRARY_ENV, str(fake))
    assert gpu_counters.library_candidates()[0] == str(fake)


# -- the comparison ---------------------------------------------------------------------------------------------

def test_a_kind_agrees_within_the_tolerance_and_not_beyond():
    def check(measured_sectors):
        return counter_check.KindCheck("ld", 300.0, 100.0, measured_sectors, 100.0)
    assert check(300.0).agrees() and check(314.0).agrees() and check(286.0).agrees()
    assert not check(316.0).agrees() and not check(284.0).agrees()
    assert check(316.0).error == pytest.approx(316 / 300 - 1)
    assert counter_check.KindCheck("atom", 0, 0, 0, 0).agrees()
    assert not counter_check.KindCheck("atom", 0, 0, 32, 8).agrees()  # the GPU has what the model lacks
    assert not counter_check.KindCheck("atom", 32, 8, 0, 0).agrees()


def test_the_measured_side_keeps_the_calls_kernels_and_counts_reductions_as_atomics():
    launches = [counters("_Z20count_out_of_rangePj", ld_sectors=999, ld_requests=9),
                counters("_ZN6cudapy4simt24simt_mscatter_elem_kernelE", ld_sectors=40, ld_requests=10,
                         atom_sectors=7, atom_requests=2, red_sectors=13, red_requests=4)]
    got = counter_check.measured(launches, ("simt_mscatter_elem_kernel",))
    assert got == {"ld": (40.0, 10.0), "st": (0.0, 0.0), "atom": (20.0, 6.0)}
    with pytest.raises(ValueError, match="no launch of simt_mgather_row_kernel .*count_out_of_range"):
        counter_check.measured(launches, ("simt_mgather_row_kernel",))


def test_points_the_model_and_the_gpu_order_differently_are_named():
    points = [("a", 1.0, 1.0), ("b", 2.0, 2.1), ("c", 4.0, 1.5), ("d", 4.1, 4.0)]
    # c: the model puts it above a and b, the GPU between them (above a by more than 5%, below b): one pair;
    # c and d are a tie for the model (within 5%), so their order on the GPU does not count
    assert counter_check.rank_disagreements(points) == [("b", "c")]
    assert counter_check.rank_disagreements([(n, p, p) for n, p, _ in points]) == []


@requires_cuda
@pytest.mark.parametrize("ld_sectors, agrees", [(9, True), (10, False)])
def test_a_call_measured_on_the_simulator_against_a_hand_count(simulator_backend, ld_sectors, agrees):
    """A Row gather of 64 float32 columns, rows 256-byte aligned: one warp a row reads its index (one sector,
    all lanes one address) and the row in two 128-byte requests (4 sectors each), then stores it in two (4 each).
    The stand-in for the GPU runs the launches (on the simulator) and reports that count per row, or one
    sector a row more."""
    rng = np.random.default_rng(3)
    idx = rng.integers(0, 100, 64).astype(np.int32)
    ran = []

    def profile(run):
        run()
        ran.append(run.kernels)
        n = idx.size
        return [counters(f"_ZN6cudapy{run.kernels[0]}E", ld_sectors=ld_sectors * n, ld_requests=3 * n,
                         st_sectors=8 * n, st_requests=2 * n)]

    checked = counter_check.measure_call("mgather", "row", idx, (100, 64), "float32", profile=profile,
                                         backend="simulator")
    assert ran == [("simt_mgather_row_kernel",)]
    assert {k.kind: (k.predicted, k.measured) for k in checked.kinds} == {
        "ld": (pytest.approx(3.0), pytest.approx(ld_sectors / 3)), "st": (pytest.approx(4.0), pytest.approx(4.0))}
    assert checked.agrees() is agrees


# -- on a GPU ---------------------------------------------------------------------------------------------------

@requires_gpu
@requires_cupti
@pytest.mark.parametrize("op, coalesce, atomic, cols", [("mgather", "row", "none", 64), ("mgather", "elem", "none", 64),
                                                        ("mscatter", "row", "add", 64),
                                                        ("mscatter", "elem", "add", 64)])
def test_the_model_agrees_with_the_gpus_counters(op, coalesce, atomic, cols):
    rng = np.random.default_rng(7)
    rows = 4096
    idx = rng.integers(0, rows if coalesce == "row" else rows * cols, 8192).astype(np.int32)
    checked = counter_check.measure_call(op, coalesce, idx, (rows, cols), "float32", atomic=atomic)
    text = counter_check.format_checks([(f"{op} {coalesce} {atomic}", checked.kinds)], "this GPU")
    assert checked.kinds, text
    assert checked.agrees(), text


# -- the ctypes structures against CUPTI's headers --------------------------------------------------------------

C_STRUCTS = {
    "_HostInitialize": "CUpti_Profiler_Host_Initialize_Params",
    "_HostDeinitialize": "CUpti_Profiler_Host_Deinitialize_Params",
    "_HostSupportedChips": "CUpti_Profiler_Host_GetSupportedChips_Params",
    "_HostAddMetrics": "CUpti_Profiler_Host_ConfigAddMetrics_Params",
    "_HostConfigSize": "CUpti_Profiler_Host_GetConfigImageSize_Params",
    "_HostConfig": "CUpti_Profiler_Host_GetConfigImage_Params",
    "_HostPasses": "CUpti_Profiler_Host_GetNumOfPasses_Params",
    "_HostEvaluate": "CUpti_Profiler_Host_EvaluateToGpuValues_Params",
    "_Initialize": "CUpti_Profiler_Initialize_Params",
    "_DeInitialize": "CUpti_Profiler_DeInitialize_Params",
    "_ChipName": "CUpti_Device_GetChipName_Params",
    "_Availability": "CUpti_Profiler_GetCounterAvailability_Params",
    "_Enable": "CUpti_RangeProfiler_Enable_Params",
    "_Object": "CUpti_RangeProfiler_Start_Params",
    "_SetConfig": "CUpti_RangeProfiler_SetConfig_Params",
    "_Stop": "CUpti_RangeProfiler_Stop_Params",
    "_Decode": "CUpti_RangeProfiler_DecodeData_Params",
    "_DataSize": "CUpti_RangeProfiler_GetCounterDataSize_Params",
    "_DataInit": "CUpti_RangeProfiler_CounterDataImage_Initialize_Params",
    "_DataInfo": "CUpti_RangeProfiler_GetCounterDataInfo_Params",
    "_RangeInfo": "CUpti_RangeProfiler_CounterData_GetRangeInfo_Params",
}
"""Each ctypes structure of gpu_counters.py and the C structure of CUPTI's headers it stands for (field names as
CUPTI spells them). ``_Object`` serves every call whose parameters are the object alone (Start, Disable)."""

C_CONSTANTS = {"_RANGE_PROFILER": "CUPTI_PROFILER_TYPE_RANGE_PROFILER", "_AUTO_RANGE": "CUPTI_AutoRange",
               "_KERNEL_REPLAY": "CUPTI_KernelReplay", "_INSUFFICIENT_PRIVILEGES": "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"}


def _cupti_include() -> str | None:
    import glob
    import os
    try:
        import nvidia
    except ImportError:
        return None
    for root in nvidia.__path__:
        for folder in sorted(glob.glob(os.path.join(root, "cu1*", "include"))):
            if os.path.isfile(os.path.join(folder, "cupti_range_profiler.h")) and os.path.isfile(
                    os.path.join(folder, "cuda.h")):
                return folder
    return None


def test_every_ctypes_structure_matches_cuptis_header(tmp_path):
    """Compiled (as C++, as the headers need) against the headers of the installed CUPTI wheel (13.0.x, the counters
    extra's): each structure's field offsets and sizes, its size and CUPTI's ``*_STRUCT_SIZE`` (what ``structSize``
    is set to), and the enum values passed."""
    import ctypes
    import shutil
    import subprocess
    include = _cupti_include()
    compiler = shutil.which("c++") or shutil.which("g++")  # (cupti_profiler_host.h includes <string>)
    if include is None or compiler is None:
        pytest.skip("needs CUPTI's headers (the counters and toolchain extras) and a C++ compiler")
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <cupti_target.h>", "#include <cupti_profiler_target.h>",
             "#include <cupti_profiler_host.h>", "#include <cupti_range_profiler.h>", "int main(void) {"]
    for py_name, c_name in C_STRUCTS.items():
        cls = getattr(gpu_counters, py_name)
        lines.append(f'printf("{py_name} size %zu %zu\\n", sizeof({c_name}), (size_t)({c_name}_STRUCT_SIZE));')
        for field, _ in cls._fields_:
            lines.append(f'printf("{py_name} {field} %zu %zu\\n", offsetof({c_name}, {field}), '
                         f'sizeof((({c_name} *)0)->{field}));')
    for py_name, c_name in C_CONSTANTS.items():
        lines.append(f'printf("{py_name} value %d\\n", (int){c_name});')
    lines.append("return 0; }")
    source = tmp_path / "layout.cpp"
    source.write_text("\n".join(lines))
    build = subprocess.run([compiler, "-I", include, str(source), "-o", str(tmp_path / "layout")], capture_output=True,
                           text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    printed = subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True, check=True).stdout
    seen = {}
    for line in printed.splitlines():
        name, what, *numbers = line.split()
        seen[(name, what)] = tuple(int(n) for n in numbers)
    for py_name in C_STRUCTS:
        cls = getattr(gpu_counters, py_name)
        for field, kind in cls._fields_:
            assert (getattr(cls, field).offset, ctypes.sizeof(kind)) == seen[(py_name, field)], (py_name, field)
        c_size, struct_size = seen[(py_name, "size")]
        assert ctypes.sizeof(cls) == c_size, py_name
        assert cls.new().structSize == struct_size, py_name
    for py_name in C_CONSTANTS:
        assert getattr(gpu_counters, py_name) == seen[(py_name, "value")][0], py_name
