"""The host's thresholds are one public table (``simt_pto.host.tuning``): a change takes effect at the next call of
a signature already planned, a ``with tuned(...)`` block puts the table back, and a value that is no threshold is
refused. None changes a result: every form a threshold picks gives the same bits. The kernels' tuned constants are
one table too (``simt_pto.kernels.tuning``), the only place under kernels/ that assigns one."""
from __future__ import annotations

import ast
import dataclasses
import pathlib
import re

import numpy as np
import pytest

import simt_pto as pto
from simt_pto.host import a5_planner, tuning
from simt_pto.kernels import tuning as kernels_tuning

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
        assert not hasattr(a5_planner, field.name.upper())
    shouting = re.compile(r"^(CPU_[A-Z_]+|DENSE_OWNER_[A-Z_]+|SLOT_PATH_MAX_WORK|DEFAULT_MAX_TILE_[A-Z]+) = ", re.M)
    for path in sorted((ROOT / "host").glob("*.py")):
        assert not shouting.search(path.read_text()), path.name
    for path in sorted((ROOT / "bench").glob("*.py")):
        assert not re.search(r"\b(a5|a5_planner|in_memory|tiling)\.[A-Z_]{6,} = ", path.read_text()), path.name



def test_each_host_threshold_has_one_line_saying_what_it_trades_and_where_it_was_measured():
    """Each field of the host's table is followed by a one-line docstring that ends in where it was measured (a
    date, or that it was set without a measurement); the measurements themselves live in docs/performance.md, under
    a heading per field."""
    tree = ast.parse((ROOT / "host" / "tuning.py").read_text())
    table = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "HostTuning")
    documented = {}
    for at, node in enumerate(table.body):
        if isinstance(node, ast.AnnAssign):
            doc = table.body[at + 1]
            assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant), node.target.id
            documented[node.target.id] = doc.value.value
    assert list(documented) == [field.name for field in dataclasses.fields(tuning.HostTuning)]
    performance = (ROOT / "docs" / "performance.md").read_text()
    for name, doc in documented.items():
        assert "\n" not in doc, name
        assert re.search(r"\b20\d\d-\d\d-\d\d(, not measured)?\)\.$", doc), name
        assert f"### `{name} = " in performance, name

# Module-level numbers under kernels/ that are facts of the hardware or of a number format, not tuned choices: they
# stay beside the code that uses them.
KERNEL_FACTS = {
    "a5/intrinsics.py": {"CACHE_LINE_BYTES",  # the x86-64 cache line (64 bytes), the step of the line prefetch
                         "_STREAM_STORE_BYTES",  # SSE's store width (16 bytes), that of the non-temporal stores
                         "SPAN_LANES"},  # the stub of a family's span width (each family binds its own)
    "a5/cuda_intrinsics.py": {"SPAN_LANES"},  # a CUDA thread is one lane
    "softfloat.py": {"F16_EXP_BITS", "F16_MAN_BITS",  # IEEE binary16's exponent and significand widths (5, 10)
                     "BF16_EXP_BITS", "BF16_MAN_BITS",  # bfloat16's (8, 7)
                     "F16_SUBNORMAL_UNIT"},  # 2^-24, binary16's smallest subnormal
}


def _number(node: ast.expr | None) -> bool:
    """Whether an expression is built of number literals alone (``4``, ``20e-6``, ``1 << 16``, ``2.0 ** -24``)."""
    if isinstance(node, ast.BinOp):
        return _number(node.left) and _number(node.right)
    if isinstance(node, ast.UnaryOp):
        return _number(node.operand)
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _module_numbers(path: pathlib.Path) -> dict[str, ast.expr]:
    """The module-level UPPER_CASE names (``_`` prefix allowed) a file assigns a number to."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign):
            pairs = [(target, node.value) for target in node.targets]
        elif isinstance(node, ast.AnnAssign):
            pairs = [(node.target, node.value)]
        else:
            continue
        for target, value in pairs:
            if isinstance(target, ast.Name) and re.fullmatch(r"_?[A-Z][A-Z0-9_]*", target.id) and _number(value):
                found[target.id] = value
    return found


def test_the_kernels_tuned_constants_live_in_one_table():
    """kernels/tuning.py is the only place under kernels/ that assigns a tuned number: a kernel module takes the
    constant by name from it (and Numba freezes it in at compile time as before); the facts above stay put."""
    folder = ROOT / "kernels"
    found = {path.relative_to(folder).as_posix(): set(_module_numbers(path))
             for path in sorted(folder.rglob("*.py")) if _module_numbers(path)}
    table = found.pop("tuning.py")
    assert found == KERNEL_FACTS
    assert {"CHUNKS_PER_WORKER", "HELPER_WAIT_POLLS", "ROW_PREFETCH_BYTES",
            "SERIAL_PREFETCH_AHEAD", "CLAIM_PREFETCH_AHEAD", "CLAIM_PREFETCH_MIN_SLOTS",
            "SCAN_BLOCK", "SCAN_MAX_BLOCKS", "WAIT_SLICE_S"} <= table


def test_the_kernels_table_is_plain_numbers_one_line_each_and_imports_nothing():
    """Plain ints and floats (what Numba freezes as a global), each with a one-line docstring (what it trades, where
    it was measured); the table imports nothing, so every target may read it and none reaches another through it."""
    path = ROOT / "kernels" / "tuning.py"
    tree = ast.parse(path.read_text())
    assert not [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    for name in _module_numbers(path):
        value = getattr(kernels_tuning, name)
        assert type(value) in (int, float) and value > 0, name
    body = tree.body
    for at, node in enumerate(body):
        if isinstance(node, ast.Assign):
            doc = body[at + 1] if at + 1 < len(body) else None
            assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant), node.targets[0].id
            assert isinstance(doc.value.value, str) and "\n" not in doc.value.value, node.targets[0].id
