"""README tells the truth: its atomic-support matrix is the capability table, and its example runs."""
import pathlib
import re

import numpy as np

import simt_pto as pto

README = (pathlib.Path(__file__).parent.parent / "README.md").read_text()


def _row(target):
    line = next(text for text in README.splitlines() if re.match(rf"\| {target}\b", text))
    cells = [c.strip() for c in line.strip("|").split("|")]
    parse = lambda c: set() if c == "none" else {x.strip() for x in c.split(",")}  # noqa: E731
    return parse(cells[1]), parse(cells[2])


def test_atomic_matrix_matches_the_capability_table():
    for target in pto.TARGETS:
        add, maxmin = _row(target)
        assert add == {d.name for d in pto.dtypes.ATOMIC_DTYPES[(target, pto.ScatterAtomicOp.ADD)]}
        assert maxmin == {d.name for d in pto.dtypes.ATOMIC_DTYPES[(target, pto.ScatterAtomicOp.MAX)]}
        assert maxmin == {d.name for d in pto.dtypes.ATOMIC_DTYPES[(target, pto.ScatterAtomicOp.MIN)]}


def test_api_tour_example():
    table = np.arange(64 * 64, dtype=np.float16).reshape(64, 64)
    idx = pto.Tile.from_array(np.array([[3, 70, -1, 5, 0, 0, 0, 0]], np.int32), valid=(1, 4))
    dst = pto.Tile("float16", 8, 64, valid=(4, 64))
    pto.mgather(dst, pto.GlobalTensor(table), idx, coalesce="row", oob="clamp", target="a5")
    assert "rows 3, 63, 63, 5 of the table" in README
    assert np.array_equal(dst.valid_numpy(), table[[3, 63, 63, 5]])
