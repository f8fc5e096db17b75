"""The whole-array ops check their options by type, before anything is written, on every target and route.

``strict`` takes a bool, as the tile ops' does: ``True`` / ``False``, or numpy's ``np.True_`` / ``np.False_`` (in
both the whole-array ops and the tile ops). Anything else is a TypeError naming the argument and the value:
``strict="False"`` used to mean strict (a non-empty string) and ``strict=2`` was taken as True. ``last_path`` must
be a string (a TypeError otherwise, a ValueError for an unknown one), and ``tile_rows`` None or a positive int on
every route, the ``cpu`` target's Row scatter (run as an Elem one, without its tiles) included.
"""
from __future__ import annotations

import numpy as np
import pytest

import simt_pto as pto
from simt_pto.errors import OutOfBoundsError

TARGETS = ("cpu", "a2a3", "a5")
NOT_BOOLS = ["False", "True", "", 2, 1, 0, 1.0, None, [True], np.int64(1)]


def _operands():
    table = np.arange(48, dtype=np.float32).reshape(12, 4)
    idx = np.array([3, 0, 11], dtype=np.int32)
    src = np.full((3, 4), -1.0, dtype=np.float32)  # every written row changes
    return table, idx, src


def _refused(error: pytest.ExceptionInfo, name: str, value) -> None:
    message = str(error.value)
    assert name in message and repr(value) in message and type(value).__name__ in message, message


def _scatter_refuses(target, **option):
    """A scatter with the one bad ``option`` (name=value): a TypeError naming it, the table unchanged. Returns the
    operands."""
    (name, value), = option.items()
    table, idx, src = _operands()
    before = table.copy()
    with pytest.raises(TypeError) as error:
        pto.scatter(table, src, idx, target=target, **option)
    _refused(error, name, value)
    assert np.array_equal(table, before)
    return table, idx, src


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("value", NOT_BOOLS, ids=repr)
def test_strict_that_is_not_a_bool_is_refused_before_anything_is_written(target, value):
    table, idx, _ = _scatter_refuses(target, strict=value)
    with pytest.raises(TypeError) as error:
        pto.gather(table, idx, strict=value, target=target)
    _refused(error, "strict", value)
    out = np.zeros((3, 4), np.float32)
    with pytest.raises(TypeError):
        pto.gather(table, idx, strict=value, target=target, out=out)
    assert not out.any()


@pytest.mark.parametrize("target", TARGETS)
def test_strict_is_refused_by_the_plans_too(target):
    table, idx, src = _operands()
    with pytest.raises(TypeError, match="strict"):
        pto.gather_plan(table, idx, strict="False", target=target)
    with pytest.raises(TypeError, match="strict"):
        pto.scatter_plan(table, src, idx, strict=2, target=target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("strict", [np.True_, np.False_], ids=repr)
def test_a_numpy_bool_strict_means_what_the_bool_means(target, strict):
    """Under the UNDEFINED policy, ``strict`` refuses an out-of-range index; without it the in-range rows are still
    gathered (numpy's ``table[idx]`` is the oracle for those). (A pin of the choice to take numpy bools: main took
    them too, as it took anything, so this one passes there.)"""
    table, _, _ = _operands()
    idx = np.array([2, 40, 5], dtype=np.int32)  # 40 is past the 12 rows
    if strict:
        with pytest.raises(OutOfBoundsError):
            pto.gather(table, idx, strict=strict, target=target)
    else:
        out = pto.gather(table, idx, strict=strict, target=target)
        assert np.array_equal(out[[0, 2]], table[[2, 5]])


@pytest.mark.parametrize("target", TARGETS)
def test_the_tile_ops_take_a_numpy_bool_strict_and_refuse_a_string(target):
    table = np.arange(64, dtype=np.float32)
    idx = np.array([[5, 0, 63, 7, 1, 2, 3, 4]], dtype=np.int32)
    dst = pto.Tile("float32", 1, 8)
    pto.mgather(dst, pto.GlobalTensor(table), pto.Tile.from_array(idx, 1, 8), coalesce="elem", target=target,
                strict=np.True_)
    assert np.array_equal(dst.data.reshape(-1), table[idx[0]])
    with pytest.raises(TypeError) as error:
        pto.mgather(dst, pto.GlobalTensor(table), pto.Tile.from_array(idx, 1, 8), coalesce="elem", target=target,
                    strict="False")
    _refused(error, "strict", "False")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("value", [1, None, b"slot", ["slot"]], ids=repr)
def test_last_path_that_is_not_a_string_is_a_type_error(target, value):
    table, idx, src = _scatter_refuses(target, last_path=value)
    with pytest.raises(TypeError, match="last_path"):
        pto.scatter_plan(table, src, idx, last_path=value, target=target)
    with pytest.raises(ValueError, match="last_path"):  # a string, but not one of them
        pto.scatter(table, src, idx, last_path="fastest", target=target)


@pytest.mark.parametrize("value", ["8", 8.0, True, 0, -1], ids=repr)
def test_tile_rows_is_checked_on_the_cpu_targets_row_scatter_too(value):
    """The other routes check it where they cut their tiles; this one cuts none (it runs as an Elem scatter)."""
    table, idx, src = _operands()
    before = table.copy()
    with pytest.raises(TypeError, match="tile_rows"):
        pto.scatter(table, src, idx, tile_rows=value, target="cpu")
    assert np.array_equal(table, before)
    with pytest.raises(TypeError, match="tile_rows"):
        pto.scatter_plan(table, src, idx, tile_rows=value, target="cpu")


def test_the_dask_route_checks_the_same_options_before_anything_runs():
    da = pytest.importorskip("dask.array")
    table, idx, src = _operands()
    dtable = da.from_array(table, chunks=(6, 4))
    didx = da.from_array(idx, chunks=2)
    dsrc = da.from_array(src, chunks=(2, 4))
    for value in ("False", 2, None):
        with pytest.raises(TypeError) as error:
            pto.gather(dtable, didx, strict=value)
        _refused(error, "strict", value)
        with pytest.raises(TypeError) as error:
            pto.scatter(dtable, dsrc, didx, strict=value)
        _refused(error, "strict", value)
    with pytest.raises(TypeError, match="last_path"):
        pto.scatter(dtable, dsrc, didx, last_path=None)
    with pytest.raises(TypeError, match="tile_rows"):
        pto.scatter(dtable, dsrc, didx, target="cpu", tile_rows="8")
    # a numpy bool is taken, as in memory: the same result as the in-memory call
    got = pto.gather(dtable, didx, strict=np.True_).compute()
    assert np.array_equal(got, table[idx])
