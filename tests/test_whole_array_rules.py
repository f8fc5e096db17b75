"""The whole-array planners of ``a5`` and ``a2a3`` against the tile op's rules.

An ``a5`` / ``a2a3`` whole-array call is planned without building its tiles: the rules that read no shape once per (policy,
dtype) (``constraints.validated_whole_array``), then the tile view by arithmetic (``tiling.tile_view``). The oracle
is the tile op's own validation of the call's full tile (``tiling.full_tiles`` and ``constraints.validated_mgather``
/ ``validated_mscatter`` on a GlobalTensor of the table), which the ``cpu`` target still runs: for any policy, dtype
and shape both refuse, or both accept with the same tile view and the same resolved plan.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simt_pto import constraints
from simt_pto import dtypes as _dt
from simt_pto.call import gather_policy, scatter_policy
from simt_pto.errors import ConstraintError
from simt_pto.host import tiling
from simt_pto.tensor import GlobalTensor

PLAN_FIELDS = ("op", "target", "coalesce", "oob", "rule", "dtype", "capacity", "row_stride", "idx_step", "atomic",
               "conflict", "strict")
"""What a whole-array call's launches read of its plan."""


def _planned(policy, dtype, table_shape, rows, cols):
    """The planner's ``(tile_rows, tile cols, plan fields)``, or the refusal's exception type."""
    try:
        rules = constraints.validated_whole_array(policy, dtype)
        view = tiling.tile_view(policy.op, policy.target, policy.coalesce, dtype, _dt.resolve("int32"), rows, cols,
                                policy.tile_rows, rules.ub_budget, policy.dyn_ubuf_size)
    except (ConstraintError, TypeError) as refusal:
        return type(refusal)
    row = policy.row
    plan = rules.plan.repointed(capacity=table_shape[0] if row else table_shape[0] * table_shape[1],
                                row_stride=table_shape[1] if row else 0)
    return view.tile_rows, view.cols, tuple(getattr(plan, f) for f in PLAN_FIELDS)


def _validated_as_a_tile(policy, dtype, table_shape, rows, cols):
    """The oracle: the full tile through the tile op's rules (the sequential targets' route)."""
    try:
        tiles = tiling.full_tiles(policy.op, policy.target, policy.coalesce, dtype, _dt.resolve("int32"), rows, cols,
                                  policy.tile_rows, policy.dyn_ubuf_size)
        table = np.zeros(table_shape, dtype=dtype.numpy)
        gt = GlobalTensor(table, shape=table_shape if policy.row else (table.size,), dtype=dtype)
        if policy.op == "MGATHER":
            plan = constraints.validated_mgather(policy, tiles.data, gt, tiles.idx)
        else:
            plan = constraints.validated_mscatter(policy, gt, tiles.data, tiles.idx)
    except (ConstraintError, TypeError) as refusal:
        return type(refusal)
    return tiles.tile_rows, tiles.cols, tuple(getattr(plan, f) for f in PLAN_FIELDS)


DTYPES = st.sampled_from([d.name for d in _dt.ALL_DTYPES])
UB = st.sampled_from([None, 0, 4096, 64 * 1024, 216 * 1024, 300 * 1024])
TILE_ROWS = st.sampled_from([None, 1, 3, 8, 64, 256, 5000])


TARGETS = st.sampled_from(["a5", "a2a3"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(target=TARGETS, dtype=DTYPES, coalesce=st.sampled_from(["row", "elem"]),
       oob=st.sampled_from(["undefined", "clamp", "wrap", "zero"]), strict=st.booleans(), tile_rows=TILE_ROWS,
       ub=UB, table_rows=st.integers(1, 40), table_cols=st.integers(1, 3000), rows=st.integers(0, 700),
       cols=st.integers(1, 5000))
def test_gather_planner_agrees_with_the_tile_op_rules(target, dtype, coalesce, oob, strict, tile_rows, ub, table_rows,
                                                      table_cols, rows, cols):
    policy = gather_policy(coalesce, oob, target, tile_rows, ub, strict, None)
    d = _dt.resolve(dtype)
    cols = table_cols if coalesce == "row" else cols  # Row: a tile row is a table row
    got = _planned(policy, d, (table_rows, table_cols), rows, cols)
    assert got == _validated_as_a_tile(policy, d, (table_rows, table_cols), rows, cols)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(target=TARGETS, dtype=DTYPES, coalesce=st.sampled_from(["row", "elem"]),
       atomic=st.sampled_from(["none", "add", "max", "min"]), conflict=st.sampled_from(["last", "default"]),
       oob=st.sampled_from(["undefined", "skip", "clamp", "wrap"]), strict=st.booleans(), tile_rows=TILE_ROWS, ub=UB,
       table_rows=st.integers(1, 40), table_cols=st.integers(1, 3000), rows=st.integers(0, 700),
       cols=st.integers(1, 5000))
def test_scatter_planner_agrees_with_the_tile_op_rules(target, dtype, coalesce, atomic, conflict, oob, strict,
                                                       tile_rows, ub, table_rows, table_cols, rows, cols):
    policy = scatter_policy(coalesce, atomic, oob, conflict, target, tile_rows, ub, strict, "auto", None)
    d = _dt.resolve(dtype)
    cols = table_cols if coalesce == "row" else cols
    got = _planned(policy, d, (table_rows, table_cols), rows, cols)
    assert got == _validated_as_a_tile(policy, d, (table_rows, table_cols), rows, cols)


@pytest.mark.parametrize("op", ["MGATHER", "MSCATTER"])
def test_the_shape_free_rules_are_kept_once_per_policy_and_dtype(op):
    """A second shape of a known (policy, dtype) reads its rules from the signature cache: the same object."""
    policy = (gather_policy("row", "clamp", "a5", None, None, True, None) if op == "MGATHER" else
              scatter_policy("elem", "add", "undefined", "last", "a5", None, None, True, "auto", None))
    first = constraints.validated_whole_array(policy, _dt.resolve("float32"))
    assert constraints.validated_whole_array(policy, _dt.resolve("float32")) is first
    assert constraints.validated_whole_array(policy, _dt.resolve("int32")) is not first


def test_the_cpu_target_validates_its_full_tiles_instead():
    policy = gather_policy("row", "clamp", "cpu", None, None, True, None)
    with pytest.raises(ValueError, match="a5 / a2a3 whole-array rules"):
        constraints.validated_whole_array(policy, _dt.resolve("float32"))
