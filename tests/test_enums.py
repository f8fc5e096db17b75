"""The policy enums carry the ISA's values; strings become members case-insensitively (simt_pto.enums), and
name a target or an A5 backend (simt_pto.backend)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from conftest import run_python

import simt_pto as pto
from simt_pto.backend import canonical_backend
from simt_pto.enums import from_any, target_from_any

# MGATHER.md / MSCATTER.md, "Enums" and "Out-of-Bounds Behaviour"; MGATHER.md "A5 only — SIMT executor".
ISA_VALUES = [
    (pto.Coalesce, {"ROW": 0, "ELEM": 1}),
    (pto.GatherOOB, {"UNDEFINED": 0, "CLAMP": 1, "WRAP": 2, "ZERO": 3}),
    (pto.ScatterOOB, {"UNDEFINED": 0, "SKIP": 1, "CLAMP": 2, "WRAP": 3}),
    (pto.ScatterAtomicOp, {"NONE": 0, "ADD": 1, "MAX": 2, "MIN": 3}),
    (pto.ScatterConflict, {"LAST": 0, "DEFAULT": 1}),
    (pto.GatherExec, {"SCALAR": 0, "SIMT": 1}),
]


@pytest.mark.parametrize("enum_cls, values", ISA_VALUES, ids=[c.__name__ for c, _ in ISA_VALUES])
def test_isa_values(enum_cls, values):
    assert {m.name: int(m) for m in enum_cls} == values


def test_scatter_oob_has_no_zero():
    # MSCATTER.md: "There is no Zero option" -- an OOB index has no slot to zero.
    assert "ZERO" not in pto.ScatterOOB.__members__
    with pytest.raises(ValueError, match="oob: unknown value 'zero'"):
        from_any(pto.ScatterOOB, "zero", "oob")


@pytest.mark.parametrize("text, member", [
    ("row", pto.Coalesce.ROW), ("ROW", pto.Coalesce.ROW), ("Elem", pto.Coalesce.ELEM), (" elem ", pto.Coalesce.ELEM),
    ("clamp", pto.GatherOOB.CLAMP), ("Wrap", pto.GatherOOB.WRAP), ("ZERO", pto.GatherOOB.ZERO),
    ("undefined", pto.GatherOOB.UNDEFINED),
    ("Skip", pto.ScatterOOB.SKIP), ("wrap", pto.ScatterOOB.WRAP), ("CLAMP", pto.ScatterOOB.CLAMP),
    ("add", pto.ScatterAtomicOp.ADD), ("Max", pto.ScatterAtomicOp.MAX), ("MIN", pto.ScatterAtomicOp.MIN),
    ("none", pto.ScatterAtomicOp.NONE), ("last", pto.ScatterConflict.LAST), ("Default", pto.ScatterConflict.DEFAULT),
    ("simt", pto.GatherExec.SIMT), ("Scalar", pto.GatherExec.SCALAR),
    ("none_box", pto.SLayout.NONE_BOX), ("NoneBox", pto.SLayout.NONE_BOX), ("none-box", pto.SLayout.NONE_BOX),
    ("row_major", pto.BLayout.ROW_MAJOR), ("ColMajor", pto.BLayout.COL_MAJOR), ("vec", pto.TileType.VEC),
    ("Mat", pto.TileType.MAT), ("nd", pto.Layout.ND), ("NZ", pto.Layout.NZ), ("dn", pto.Layout.DN),
])
def test_strings_are_case_insensitive(text, member):
    assert from_any(type(member), text) is member


@pytest.mark.parametrize("enum_cls, values", ISA_VALUES, ids=[c.__name__ for c, _ in ISA_VALUES])
def test_ints_and_members_resolve(enum_cls, values):
    for name, value in values.items():
        assert from_any(enum_cls, value) is enum_cls[name]
        assert from_any(enum_cls, enum_cls[name]) is enum_cls[name]


def test_unknown_string_names_the_argument_and_the_choices():
    with pytest.raises(ValueError,
                       match=r"oob: unknown value 'saturate'; expected one of undefined, clamp, wrap, zero"):
        from_any(pto.GatherOOB, "saturate", "oob")


def test_unknown_int_lists_the_values():
    with pytest.raises(ValueError, match=r"atomic: unknown value 4; expected one of 0 \(none\), 1 \(add\)"):
        from_any(pto.ScatterAtomicOp, 4, "atomic")


@pytest.mark.parametrize("value", [pto.ScatterOOB.SKIP, 1.0, None, True, [0]])
def test_wrong_types_are_type_errors(value):
    with pytest.raises(TypeError, match="oob: expected a GatherOOB"):
        from_any(pto.GatherOOB, value, "oob")


@pytest.mark.parametrize("text, target", [("cpu", "cpu"), ("CPU", "cpu"), ("A5", "a5"), ("a2a3", "a2a3"),
                                          ("A2", "a2a3"), ("a3", "a2a3"), ("A2_A3", "a2a3")])
def test_target_names(text, target):
    assert target_from_any(text) == target


def test_target_errors():
    with pytest.raises(ValueError, match="target: unknown target 'a7'"):
        target_from_any("a7")
    with pytest.raises(TypeError, match="target: expected a string, got int"):
        target_from_any(5)
    assert pto.TARGETS == ("cpu", "a2a3", "a5")


# -- the A5 backend names ("multicore", once "cpu": the cpu *target* is another thing) ---------------------------

@pytest.mark.parametrize("text, backend", [("multicore", "multicore"), ("MultiCore", "multicore"), (" gpu ", "gpu"),
                                           ("SIM", "simulator"), ("simulator", "simulator"), ("auto", "auto")])
def test_backend_names(text, backend):
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # the current names never warn
        assert canonical_backend(text) == backend


@pytest.mark.parametrize("text", ["cpu", "CPU"])
def test_the_old_cpu_backend_name_is_a_deprecated_alias_of_multicore(text):
    with pytest.warns(DeprecationWarning, match=f"A5 backend '{text}' is deprecated: it is now called 'multicore'"):
        assert canonical_backend(text) == "multicore"


def test_unknown_backend_names_list_the_valid_ones():
    with pytest.raises(ValueError, match="unknown choice 'tpu'; expected one of auto, gpu, multicore, simulator"):
        canonical_backend("tpu")


def test_set_a5_backend_cpu_still_selects_multicore_and_warns_at_the_caller():
    previous = pto.a5_backend()
    try:
        with pytest.warns(DeprecationWarning, match="now called 'multicore'") as record:
            assert pto.set_a5_backend("cpu") == "multicore"
        assert record[0].filename == __file__   # the warning points at the call, not into the library
        assert pto.a5_backend() == "multicore"
        assert "multicore" in pto.a5_backends() and "cpu" not in pto.a5_backends()
    finally:
        pto.set_a5_backend(previous)


def test_the_environment_variable_still_takes_cpu_and_warns():
    out = run_python("import warnings; warnings.simplefilter('always'); import simt_pto as pto; "
                     "print(pto.a5_backend())", SIMT_PTO_A5_BACKEND="cpu")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "multicore"
    assert "DeprecationWarning: A5 backend 'cpu' is deprecated: it is now called 'multicore'" in out.stderr


# -- the public functions take strings ------------------------------------------------------------------------

def test_public_functions_accept_strings():
    table = np.arange(40, dtype=np.int32).reshape(10, 4)
    g = pto.GlobalTensor(table, layout="Nd")
    dst = pto.Tile("int32", 2, 8, loc="VEC", blayout="row_major", slayout="NONE_BOX", valid=(2, 4))
    idx = pto.Tile.from_array(np.array([[-1, 12]], dtype=np.int32), 1, 8)
    pto.mgather(dst, g, idx, coalesce="Row", oob="WRAP", target="CPU")
    # uint32(-1) % 10 == 5 and 12 % 10 == 2
    assert dst.valid_numpy().tolist() == [[20, 21, 22, 23], [8, 9, 10, 11]]

    elem_dst = pto.Tile("int32", 1, 8, valid=(1, 2))
    elem_idx = pto.Tile.from_array(np.array([[-1, 3]], dtype=np.int32), 1, 8)
    pto.mgather(elem_dst, g, elem_idx, coalesce="elem", oob="clamp", target="cpu")
    assert elem_dst.valid_numpy().tolist() == [[39, 3]]

    out = np.zeros(8, dtype=np.int32)
    src = pto.Tile.from_array(np.array([[7, 8]], dtype=np.int32), 1, 8)
    sidx = pto.Tile.from_array(np.array([[6, 1]], dtype=np.int32), 1, 8)
    pto.mscatter(pto.GlobalTensor(out), src, sidx, coalesce="ELEM", atomic="Add", oob="skip", conflict="Default",
                 target="cpu")
    assert out.tolist() == [0, 8, 0, 0, 0, 0, 7, 0]


def test_public_functions_reject_a_member_of_the_wrong_enum():
    g = pto.GlobalTensor(np.zeros((4, 8), np.float32))
    dst, idx = pto.Tile("float32", 1, 8), pto.Tile("int32", 1, 8, valid=(1, 1))
    with pytest.raises(TypeError, match="oob: expected a GatherOOB"):
        pto.mgather(dst, g, idx, oob=pto.ScatterOOB.SKIP, target="cpu")
    with pytest.raises(ValueError, match="coalesce: unknown value 'column'"):
        pto.mgather(dst, g, idx, coalesce="column", target="cpu")


def test_every_member_carries_its_own_docstring():
    """Each member's rule is its own ``__doc__`` (not the class's), e.g. WRAP's worked example."""
    assert "-1 with capacity 10 gives 5" in pto.GatherOOB.WRAP.__doc__
    for cls in (pto.Coalesce, pto.GatherOOB, pto.ScatterOOB, pto.ScatterAtomicOp, pto.ScatterConflict):
        for member in cls:
            assert member.__doc__ and member.__doc__ != cls.__doc__, f"{cls.__name__}.{member.name}"
