"""The host's thresholds are one public table (``simt_pto.host.tuning``): a change takes effect at the next call of
a signature already planned, a ``with tuned(...)`` block puts the table back, and a value that is no threshold is
refused. None changes a result: every form a threshold picks gives the same bits."""
from __future__ import annotations

import dataclasses
import pathlib
import re

import numpy as np
import pytest

import simt_pto as pto
from simt_pto.host import a5_whole_array, tuning

ROOT = pathlib.Path(__file__).parent.parent


def _elem_last_kernels(table, src, idx):
    return [launch.kernel for launch in pto.scatter_plan(table, src, idx, coalesce="elem", conflict="last",
                                                         target="a5", backend="multicore").launches]


def test_a_change_takes_effect_at_the_next_call_and_changes_no_result(tune):
    rng = np.random.default_rng(7)
    table = rng.standard_normal(40).astype(np.float32)
    idx = rng.integers(0, 40, 300).astype(np.int32)
    src = rng.standard_normal(300).astype(np.float32)
    serial = table.copy()
    pto.scatter(serial, src, idx, coalesce="elem", conflict="last", target="a5")  # planned (and kept) as serial
    assert _elem_last_kernels(table, src, idx) == ["simt_mscatter_elem_serial_kernel"]
    tune(serial_last_max_updates=0, serial_last_max_table_bytes=0)
    assert "simt_mscatter_elem_serial_kernel" not in _elem_last_kernels(table, src, idx)
    owners = table.copy()
    pto.scatter(owners, src, idx, coalesce="elem", conflict="last", target="a5")  # the kept plan was dropped
    want = table.copy()
    for i, v in zip(idx, src):  # Conflict::Last: the last writer in source order
        want[i] = v
    assert serial.tobytes() == owners.tobytes() == want.tobytes()


def test_tuned_puts_the_table_back():
    before = tuning.current()
    with tuning.tuned(max_tile_rows=3) as inside:
        assert inside.max_tile_rows == 3 and tuning.current() is inside
        plan = pto.gather_plan(np.zeros((64, 8), np.float32), np.arange(10), target="a2a3")
        assert len(plan.steps) == 4  # 10 rows in tiles of 3
    assert tuning.current() == before
    with pytest.raises(RuntimeError):
        with tuning.tuned(max_tile_rows=5):
            raise RuntimeError("inside the block")
    assert tuning.current() == before


@pytest.mark.parametrize("changes, error", [
    (dict(max_tile_rows=0), ValueError),
    (dict(plain_add_max_updates=-1), TypeError),
    (dict(plain_add_max_updates=True), TypeError),
    (dict(owner_copy_max_bytes="1MB"), TypeError),
    (dict(owner_copy_max_bytes=1.5), TypeError),
    (dict(no_such_threshold=1), TypeError),
])
def test_a_value_that_is_no_threshold_is_refused_and_changes_nothing(changes, error):
    before = tuning.current()
    with pytest.raises(error, match=next(iter(changes))):
        tuning.configure(**changes)
    assert tuning.current() == before


def test_the_table_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        tuning.current().max_tile_rows = 1  # type: ignore[misc]


def test_the_planner_reads_the_table_not_module_constants():
    """The thresholds live in the table alone: no host module keeps a copy a benchmark could patch."""
    for field in dataclasses.fields(tuning.HostTuning):
        assert not hasattr(a5_whole_array, field.name.upper())
    shouting = re.compile(r"^(CPU_[A-Z_]+|DENSE_OWNER_[A-Z_]+|SLOT_PATH_MAX_WORK|DEFAULT_MAX_TILE_[A-Z]+) = ", re.M)
    for path in sorted((ROOT / "host").glob("*.py")):
        assert not shouting.search(path.read_text()), path.name
    for path in sorted((ROOT / "bench").glob("*.py")):
        assert not re.search(r"\b(a5|a5_whole_array|in_memory|tiling)\.[A-Z_]{6,} = ", path.read_text()), path.name
