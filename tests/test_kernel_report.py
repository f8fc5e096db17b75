"""``simt-pto inspect`` (simt_pto.host.tools.kernel_report) reads what a call launches from the A5 dispatch's own
plan: the launch spec's kernel, its policy by name and its arguments' types, and every step of the call. No
compile here (tests/test_compile_a5.py compiles, where the CUDA toolchain is installed)."""
from __future__ import annotations

import numba
import pytest

from simt_pto.enums import ElementFormat
from simt_pto.host.tools import kernel_report as report
from simt_pto.launch_spec import FORMAT_NAMES


def test_every_element_format_has_its_report_name():
    assert set(FORMAT_NAMES) == set(ElementFormat)
    assert len(set(FORMAT_NAMES.values())) == len(ElementFormat)


def test_a_mid_word_half_add_reports_its_edge_format_and_its_guard():
    plan = report.build_plan("mscatter", "elem", atomic="add", dtype="float16", mid_word=True, rows=2, cols=3)
    spec = report.launch_of(plan)
    assert spec.kernel == "simt_mscatter_elem_kernel"
    assert report.policy_dict(spec) == {"rule": "identity", "atomic": "add", "format": "float16-cas-edge",
                                        "conflict": "last"}
    lines = report.call_plan(plan).describe()  # the renderer every plan shares
    assert lines[0].startswith("around all: stage the mid-word boundary words")
    assert lines[1] == ("launch simt_mscatter_elem_kernel [rule=identity, atomic=add, format=float16-cas-edge, "
                        "conflict=last] grid=1 block=(32, 1)")


@pytest.mark.parametrize("dtype, fmt", [("float16", "float16-cas"), ("bfloat16", "bfloat16-cas"),
                                        ("float32", "native"), ("int32", "native")])
def test_a_whole_word_add_reports_its_format(dtype, fmt):
    spec = report.launch_of(report.build_plan("mscatter", "row", atomic="add", dtype=dtype))
    assert spec.kernel == "simt_mscatter_row_kernel" and report.policy_dict(spec)["format"] == fmt


def test_the_signature_is_the_launch_tuple_then_the_specs_arguments_in_order():
    spec = report.launch_of(report.build_plan("mgather", "row", dtype="float16", rows=4, cols=16, oob="clamp"))
    sig = report.signature(spec)
    assert sig[0] == numba.types.UniTuple(numba.types.int64, 4)
    assert len(sig) == 1 + len(spec.args)
    by_name = dict(zip((name for name, _ in spec.args), sig[1:]))
    assert by_name["dst"].dtype == numba.types.uint16 and by_name["table_rows"] == numba.types.int64
    assert report.policy_dict(spec) == {"rule": "clamp"}


def test_the_scalar_fallback_launches_nothing_and_says_so():
    plan = report.build_plan("mgather", "elem", rows=1, cols=1)
    assert report.launch_of(plan) is None
    lines = report.call_plan(plan).describe()  # the renderer every plan shares
    assert len(lines) == 1 and lines[0].startswith("host   MGatherScalarImpl"), lines
