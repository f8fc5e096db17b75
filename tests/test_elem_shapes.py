"""Whole-array Elem gather / scatter over indices of any shape (issue #37, item 7): the tiles are cut by element count,
so an index whose last axis is longer than a tile holds runs on every target (it was refused on ``a2a3`` / ``a5``:
one index row was one tile row, and rows were never split); an index with no elements is a no-op of the right shape;
``gather_plan`` / ``scatter_plan`` show those tiles; and a refusal for tiles over the UB names only what would make
them fit. Oracles: numpy (``table.reshape(-1)[remap(idx)]``, ``np.add.at`` / ``np.maximum.at`` / ``np.minimum.at``),
``simt_pto.reference`` (the remap, Conflict::Default's writers) and a serial loop for Conflict::Last."""
import re
import warnings

import numpy as np
import pytest

import simt_pto as pto
from simt_pto import reference
from simt_pto.host import in_memory
from simt_pto.launch_spec import HostStep

TARGETS = ("cpu", "a2a3", "a5")
DEFAULT_TILE_ELEMS = 4096  # MSCATTER.md's tiles as the whole-array call cuts them by default: at most 4096 elements
TABLE_SLOTS = 600


def _slots(idx, capacity, oob):
    """The slot of every index in C order (``reference.slots``: the uint32 cast, then the OOB rule; -1: none)."""
    return reference.slots(np.asarray(idx).reshape(-1), capacity, {"undefined": "undefined", "zero": "zero"}.get(
        oob, oob))


def gather_oracle(table, idx, oob):
    """``table.reshape(-1)[idx]`` after the uint32 cast and the OOB rule (ZERO: 0 where an index has no slot)."""
    flat = table.reshape(-1)
    slots = _slots(idx, flat.size, oob)
    out = np.where(slots >= 0, flat[np.maximum(slots, 0)], 0).astype(table.dtype)
    return out.reshape(idx.shape)


def serial_last(table, src, idx, oob):
    """Conflict::Last as the serial loop ``for p in C order: table.flat[slot(idx[p])] = src[p]``."""
    out = table.copy()
    flat = out.reshape(-1)
    for s, v in zip(_slots(idx, flat.size, oob).tolist(), src.reshape(-1).tolist()):
        if s >= 0:
            flat[s] = v
    return out


def _indices(rng, shape, oob, capacity=TABLE_SLOTS):
    """Indices of ``shape`` that collide a lot (``capacity`` slots); out of range ones (and -1) where ``oob`` places
    or drops them."""
    if oob == "undefined":
        return rng.integers(0, capacity, shape).astype(np.int32)
    return rng.integers(-2, capacity + 40, shape).astype(np.int32)


_STEP = re.compile(r"tile (?:of indices )?\[(\d+), (\d+)\)")


def tile_ranges(call):
    """The flat C-order index positions ``[start, stop)`` of each tile a plan runs, in order, read from the plan:
    the host steps of ``a2a3`` / ``cpu`` (each names its positions), the blocks of an ``a5`` tile launch (block
    ``b``: rows ``[b * tile_rows, ...)`` of ``valid_rows x valid_cols``), the launches of the slot-centric Last path
    (one per tile); None for a plan without tiles (the owner path claims the flat indices)."""
    ranges = []
    for step in call.steps:
        if isinstance(step, HostStep):
            found = _STEP.search(step.name)
            if found:
                ranges.append((int(found.group(1)), int(found.group(2))))
            continue
        args = step.arguments
        if "tile_rows" in args:
            rows, cols, per = args["valid_rows"], args["valid_cols"], args["tile_rows"]
            ranges += [(r0 * cols, min(r0 + per, rows) * cols) for r0 in range(0, rows, per)]
        elif step.kernel == "simt_mscatter_elem_last_kernel":
            start = ranges[-1][1] if ranges else 0
            ranges.append((start, start + args["valid_rows"] * args["valid_cols"]))
        else:
            return None
    return ranges


def assert_tiles(call, n, most):
    """The plan's tiles take the ``n`` indices in C order, one after the other, at most ``most`` each."""
    ranges = tile_ranges(call)
    if ranges is None:
        return
    assert ranges, "no tile in the plan"
    assert ranges[0][0] == 0 and ranges[-1][1] == n, ranges[:3] + ranges[-3:]
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), "tiles not in C order"
    assert max(b - a for a, b in ranges) <= most, max(b - a for a, b in ranges)


# Elem index shapes with a long last axis (longer than a default tile), and the options of the call; ``most``: the
# largest tile the call may cut. dyn_ubuf_size=2048 on a5: a row of 700 float32 (5.6 KB with its indices) cannot fit,
# so the split happens at a small size.
LONG = [  # (name, shape, options, most, the targets that take the options)
    ("3x5000", (3, 5000), {}, DEFAULT_TILE_ELEMS, TARGETS),
    ("2x3x5000", (2, 3, 5000), {}, DEFAULT_TILE_ELEMS, TARGETS),
    ("3x5000-tile_rows1000", (3, 5000), {"tile_rows": 1000}, 1000, TARGETS),
    ("3x700-dyn2048", (3, 700), {"dyn_ubuf_size": 2048}, 256, ("a5",)),  # (a UB budget to declare: A5 only)
    ("2x2x700-dyn2048", (2, 2, 700), {"dyn_ubuf_size": 2048}, 256, ("a5",)),
]


def long_cases(targets):
    """``LONG`` on each of ``targets`` that takes its options, as pytest params."""
    return [pytest.param(target, shape, options, most, id=f"{target}-{name}")
            for name, shape, options, most, takes in LONG for target in targets if target in takes]


@pytest.mark.parametrize("target, shape, options, most", long_cases(TARGETS))
def test_elem_gather_splits_a_long_last_axis(rng, target, shape, options, most):
    table = rng.random((30, TABLE_SLOTS // 30)).astype(np.float32)
    idx = _indices(rng, shape, "undefined")
    assert_tiles(in_memory.gather_plan(table, idx, coalesce="elem", target=target, **options), idx.size, most)
    for _ in range(2):  # the full path, then the kept runner of the signature
        out = pto.gather(table, idx, coalesce="elem", target=target, **options)
        assert out.shape == idx.shape and out.dtype == table.dtype
        assert out.tobytes() == gather_oracle(table, idx, "undefined").tobytes()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("oob", ["zero", "clamp", "wrap"])
def test_elem_gather_long_last_axis_under_every_oob(rng, target, oob):
    table = rng.integers(-100, 100, TABLE_SLOTS).astype(np.int16)
    idx = _indices(rng, (2, 4500), oob)
    assert_tiles(in_memory.gather_plan(table, idx, coalesce="elem", oob=oob, target=target), idx.size, DEFAULT_TILE_ELEMS)
    out = pto.gather(table, idx, coalesce="elem", oob=oob, target=target)
    assert out.tobytes() == gather_oracle(table, idx, oob).tobytes()


# (target, atomic, conflict, last_path, owner, oob, dtype): every atomic and conflict policy each target takes
POLICIES = [
    ("cpu", "none", "last", "auto", None, "undefined", "float32"),
    ("cpu", "none", "default", "auto", None, "undefined", "float32"),
    ("a2a3", "none", "last", "auto", None, "skip", "float32"),
    ("a2a3", "add", "last", "auto", None, "clamp", "int32"),
    ("a5", "none", "last", "auto", None, "wrap", "float32"),
    ("a5", "none", "last", "slot", None, "skip", "float32"),
    ("a5", "none", "last", "owner", "dense", "clamp", "float16"),
    ("a5", "none", "last", "owner", "compact", "undefined", "float32"),
    ("a5", "none", "default", "auto", None, "undefined", "int32"),
    ("a5", "add", "last", "auto", None, "undefined", "int32"),
    ("a5", "max", "last", "auto", None, "wrap", "int32"),
    ("a5", "min", "default", "auto", None, "skip", "uint32"),
]


def scatter_oracle(table, src, idx, atomic, conflict, oob):
    """What the scatter leaves: Conflict::Last the serial loop; Add / Max / Min numpy's ``ufunc.at`` (integers:
    any order gives the same); Conflict::Default None (checked against ``reference.candidates``)."""
    if atomic == "none":
        return serial_last(table, src, idx, oob) if conflict == "last" else None
    slots = _slots(idx, table.size, oob)
    keep = slots >= 0
    out = table.copy()
    {"add": np.add, "max": np.maximum, "min": np.minimum}[atomic].at(out.reshape(-1), slots[keep],
                                                                       src.reshape(-1)[keep])
    return out


def run_scatter(table, src, idx, target, atomic, conflict, last_path, owner, oob, most, **options):
    """``pto.scatter`` with these policies (an ``owner`` layout through ``scatter_plan``, which alone can force it),
    after checking the tiles its plan shows (at most ``most`` indices each)."""
    kwargs = dict(coalesce="elem", atomic=atomic, conflict=conflict, oob=oob, target=target, last_path=last_path,
                  **options)
    call = in_memory.scatter_plan(table, src, idx, owner=owner, **kwargs)
    assert_tiles(call, idx.size, most)
    if owner is not None:
        from simt_pto.host import a5_runner
        a5_runner.run_plan(call)
        return table
    return pto.scatter(table, src, idx, **kwargs)


SCATTER_CASES = [pytest.param(*policy, shape, options, most, id=f"{case.id}-{'-'.join(map(str, policy[1:6]))}")
                 for policy in POLICIES for case in long_cases((policy[0],)) for _, shape, options, most in [case.values]
                 if policy[3] != "owner" or "dyn_ubuf_size" in options]
"""Every policy on every case its target takes; the owner path (whose claim takes the flat indices, no tiles) where
the tiles must split the rows: a row does not fit the declared UB."""


@pytest.mark.parametrize("target, atomic, conflict, last_path, owner, oob, dtype, shape, options, most", SCATTER_CASES)
def test_elem_scatter_splits_a_long_last_axis(rng, target, atomic, conflict, last_path, owner, oob, dtype, shape,
                                              options, most):
    np_dtype = pto.dtypes.resolve(dtype).numpy
    table = rng.integers(0, 50, TABLE_SLOTS).astype(np_dtype)
    src = rng.integers(0, 1000, shape).astype(np_dtype)
    idx = _indices(rng, shape, oob)
    want = scatter_oracle(table, src, idx, atomic, conflict, oob)
    out = table.copy()
    returned = run_scatter(out, src, idx, target, atomic, conflict, last_path, owner, oob, most, **options)
    assert returned is out
    if want is None:  # Conflict::Default: each written slot holds one of its writers, the others are untouched
        bits = np.uint32  # (the Default cases are of 4-byte dtypes)
        assert not reference.scatter_mismatches(out.view(bits), table.view(bits), "uint32", "elem", idx.reshape(1, -1),
                                                src.view(bits).reshape(1, -1), table.size, oob, "none", "default")
    else:
        assert out.tobytes() == want.tobytes()


def test_last_writer_is_the_last_in_c_order_across_tile_boundaries():
    """Every update of a row of 5000 goes to one of two slots: each tile boundary falls inside an index row, and
    the slot's survivor is the last writer in C order of the whole index (never the last of some tile or row)."""
    idx = np.zeros((3, 5000), np.int32)
    idx[:, 1::2] = 1
    src = np.arange(idx.size, dtype=np.float32).reshape(idx.shape)
    for target, last_path, tile_rows in (("a2a3", "auto", 1500), ("a5", "slot", 1500), ("a5", "auto", None),
                                         ("a5", "owner", 999), ("cpu", "auto", 1024)):
        table = np.full(4, -1, np.float32)
        call = in_memory.scatter_plan(table, src, idx, coalesce="elem", target=target, last_path=last_path,
                                  tile_rows=tile_rows)
        assert_tiles(call, idx.size, tile_rows or DEFAULT_TILE_ELEMS)
        pto.scatter(table, src, idx, coalesce="elem", target=target, last_path=last_path, tile_rows=tile_rows)
        assert table.tolist() == [idx.size - 2, idx.size - 1, -1, -1], (target, last_path)


@pytest.mark.parametrize("target", TARGETS)
def test_the_issue_shape_4x50000(target):
    """The shape of the report: an index of shape (4, 50000) (refused on a2a3 and a5 before)."""
    rng = np.random.default_rng(37)
    table = rng.random(1000).astype(np.float32)
    idx = rng.integers(0, 1000, (4, 50000)).astype(np.int32)
    assert_tiles(in_memory.gather_plan(table, idx, coalesce="elem", target=target), idx.size, DEFAULT_TILE_ELEMS)
    out = pto.gather(table, idx, coalesce="elem", target=target)
    assert out.shape == (4, 50000) and np.array_equal(out, table[idx])
    src = rng.random((4, 50000)).astype(np.float32)
    written = table.copy()
    assert_tiles(in_memory.scatter_plan(written, src, idx, coalesce="elem", target=target), idx.size, DEFAULT_TILE_ELEMS)
    pto.scatter(written, src, idx, coalesce="elem", target=target)
    assert written.tobytes() == reference.last_writer_scatter(table, idx.reshape(-1).astype(np.int64),
                                                              src.reshape(-1)).tobytes()


EMPTY_SHAPES = [(0, 100000), (100000, 0), (0,), (2, 0, 5000), (0, 8)]


@pytest.mark.parametrize("target", TARGETS)
def test_no_indices_is_a_no_op_of_the_right_shape(target):
    for shape in EMPTY_SHAPES:
        no_indices(target, shape)


def no_indices(target, shape):
    """An Elem gather / scatter (every policy the target takes), and a Row one, through ``np.zeros(shape)``
    indices: no step, the gathered shape, the table untouched and returned."""
    table = np.arange(64, dtype=np.float32).reshape(8, 8)
    idx = np.zeros(shape, np.int32)
    assert in_memory.gather_plan(table, idx, coalesce="elem", target=target).steps == ()
    out = pto.gather(table, idx, coalesce="elem", target=target)
    assert out.shape == shape and out.dtype == np.float32
    given = np.zeros(shape, np.float32)
    assert pto.gather(table, idx, coalesce="elem", target=target, out=given) is given
    src = np.ones(shape, np.float32)
    atomics = ("none", "add") + (("max", "min") if target == "a5" else ())
    for atomic in atomics:
        kept = table.copy()
        assert in_memory.scatter_plan(kept, src, idx, coalesce="elem", atomic=atomic, target=target).steps == ()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # nothing runs: not even the cpu target's atomics warning
            assert pto.scatter(kept, src, idx, coalesce="elem", atomic=atomic, target=target) is kept
        assert np.array_equal(kept, table)
    if target != "a2a3":  # A2/A3 has no ScatterConflict parameter
        kept = table.copy()
        pto.scatter(kept, src, idx, coalesce="elem", conflict="default", target=target)
        assert np.array_equal(kept, table)
    # Row, alike: idx.shape + (C,) gathered, nothing written
    assert pto.gather(table, idx, target=target).shape == shape + (8,)
    kept = table.copy()
    assert pto.scatter(kept, np.ones(shape + (8,), np.float32), idx, target=target) is kept
    assert np.array_equal(kept, table)


# -- refusals name only what would make the call fit -------------------------------------------------------------

_TILE_ROWS = re.compile(r"tile_rows <= (\d+)(?!\d| and)")
_DYN = re.compile(r"(?<!and )dyn_ubuf_size >= (\d+) B")
_BOTH = re.compile(r"tile_rows <= (\d+) and dyn_ubuf_size >= (\d+) B")

REFUSED = [  # (table shape, coalesce, idx shape, options): whole-array calls whose tiles cannot fit as asked
    pytest.param((4, 1024), "row", (64,), {"tile_rows": 64}, id="row-tile_rows-over-128KB"),
    pytest.param((4, 1024), "row", (64,), {"tile_rows": 40, "dyn_ubuf_size": 160 * 1024}, id="row-over-dyn"),
    pytest.param((4, 1024), "row", (64,), {"tile_rows": 64, "dyn_ubuf_size": 1024}, id="row-small-dyn"),
    pytest.param((4, 40000), "row", (8,), {}, id="row-160KB-row"),
    pytest.param((4, 60000), "row", (8,), {}, id="row-240KB-row"),
    pytest.param((4, 60000), "row", (8,), {"target": "a2a3"}, id="row-240KB-row-a2a3"),
    pytest.param((4, 30000), "row", (8,), {"target": "a2a3", "tile_rows": 4}, id="row-a2a3-tile_rows"),
    pytest.param((4096,), "elem", (2304, 8), {"tile_rows": 2304}, id="elem-2304x8-single-shot"),
    pytest.param((4096,), "elem", (4096, 8), {"tile_rows": 4096, "target": "a2a3"}, id="elem-a2a3"),
    pytest.param((4096,), "elem", (3, 700), {"dyn_ubuf_size": 40}, id="elem-tiny-dyn"),
]


def _refusal(call):
    with pytest.raises(pto.ConstraintError, match=r"UB working set within budget") as info:
        call()
    return str(info.value)


@pytest.mark.parametrize("op", ["gather", "scatter"])
@pytest.mark.parametrize("table_shape, coalesce, idx_shape, options", REFUSED)
def test_a_refusal_for_the_ub_names_only_what_fits(op, table_shape, coalesce, idx_shape, options):
    """Every fix the refusal names makes the call run; it names dyn_ubuf_size only where it can help (A5, tiles
    within the most A5 declares), and says when nothing fits."""
    table = np.zeros(table_shape, np.int32)
    idx = np.zeros(idx_shape, np.int32)
    src = np.ones(idx_shape + ((table_shape[1],) if coalesce == "row" else ()), np.int32)

    def call(**changed):
        kwargs = dict(options, coalesce=coalesce, **changed)
        if op == "gather":
            return pto.gather(table, idx, **kwargs)
        return pto.scatter(table, src, idx, atomic="add", **kwargs)

    message = _refusal(call)
    target = options.get("target", "a5")
    tile_rows, dyn, both = _TILE_ROWS.findall(message), _DYN.findall(message), _BOTH.findall(message)
    if target != "a5" or "no tile_rows or dyn_ubuf_size fits" in message:
        assert not dyn and not both, message
    assert "declare up to" not in message  # the tile op's hint, which names dyn_ubuf_size whether or not it helps
    for rows in tile_rows:
        call(tile_rows=int(rows))
        if int(rows) + 1 <= idx.size:
            _refusal(lambda: call(tile_rows=int(rows) + 1))  # the most that fits
    for size in dyn:
        call(dyn_ubuf_size=int(size))
        _refusal(lambda: call(dyn_ubuf_size=int(size) - 32))
    for rows, size in both:
        call(tile_rows=int(rows), dyn_ubuf_size=int(size))
    if "no tile_rows or dyn_ubuf_size fits" in message:
        assert not tile_rows and not dyn and not both
        _refusal(lambda: call(tile_rows=1, **({"dyn_ubuf_size": 216 * 1024} if target == "a5" else {})))
    else:
        assert tile_rows or dyn or both, message


def test_dask_elem_tiles_are_the_in_memory_calls(rng):
    """A Dask Elem scatter whose index has a long last axis, with tile_rows: the chunks' calls cut the tiles the
    in-memory call validated (tile_rows elements), not tile_rows x the row width."""
    da = pytest.importorskip("dask.array")
    idx = _indices(rng, (4, 5000), "undefined")
    src = rng.integers(-9, 9, idx.shape).astype(np.int32)
    table = np.zeros(TABLE_SLOTS, np.int32)
    want = scatter_oracle(table, src, idx, "add", "last", "undefined")
    result = pto.scatter(da.from_array(table, chunks=300), da.from_array(src, chunks=(2, 5000)),
                         da.from_array(idx, chunks=(2, 5000)), coalesce="elem", atomic="add", target="a2a3",
                         tile_rows=1000)
    assert np.array_equal(result.compute(scheduler="synchronous"), want)


def test_the_gpu_path_splits_rows_too_on_the_simulator(simulator_backend, monkeypatch, rng):
    """The GPU backend's code path (host arrays staged on the device), run by Numba's CUDA simulator: a row of 40
    float32 (320 B with its indices) does not fit dyn_ubuf_size=256, so tiles of 32 elements split the rows."""
    from simt_pto.host import a5_planner, a5_runner
    monkeypatch.setattr(a5_runner, "a5_backend", lambda: "gpu")
    monkeypatch.setattr(a5_planner, "a5_backend", lambda: "gpu")
    table = rng.integers(0, 100, 50).astype(np.float32)
    idx = rng.integers(0, 50, (2, 40)).astype(np.int32)
    assert_tiles(in_memory.gather_plan(table, idx, coalesce="elem", dyn_ubuf_size=256), idx.size, 32)
    assert np.array_equal(pto.gather(table, idx, coalesce="elem", dyn_ubuf_size=256), table[idx])
    src = rng.integers(0, 100, (2, 40)).astype(np.float32)
    for path in ("slot", "owner"):
        out = table.copy()
        pto.scatter(out, src, idx, coalesce="elem", last_path=path, dyn_ubuf_size=256)
        assert out.tobytes() == serial_last(table, src, idx, "undefined").tobytes(), path
