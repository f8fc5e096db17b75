"""``simt-pto selftest``: every A5 backend this process can use, checked against the reference.

For each backend (``gpu`` where a device is found, ``multicore``, and the CUDA simulator with a tenth of the
cases) a seeded differential matrix runs every kernel family the A5 dispatch launches (:data:`FAMILIES`)
x every element dtype x GatherOOB / ScatterOOB rule x atomic x conflict, on small and on tile-edge shapes
(valid < padded, ColMajor tiles, ``[R, 1]`` indices, out-of-range indices), and compares each call with
:mod:`simt_pto.reference`: bitwise; a float atomic Add within ``(k + 1) * eps * (|t0| + sum |c_i|)``;
Conflict::Default leaves each slot holding one of its writers. Every table sits between guard bands, and
the inputs of a call must come back unchanged. Then the whole-array stage gathers and scatters arrays of
16M elements (Conflict::Last against the sequential result, bitwise).

A case is a small dict of parameters plus the arrays it was built from; a failing case is shrunk (fewer
rows) while it still fails and written as an ``.npz`` that ``simt-pto selftest --replay FILE.npz`` runs
again. ``--out DIR`` is checked before the run (a folder this process can write into, or can create); a case
that cannot be written all the same stays in the report, with the reason. Exit status: 0 when nothing failed,
1 when something did (and when ``--backend`` asks for ``gpu`` / ``simulator`` without numba-cuda, the ``cuda``
extra: one line naming it), 2 for bad arguments (and when Numba's JIT is disabled: the A5 kernels need it).
Backends are named as :mod:`simt_pto.backend` names them; the old ``cpu`` still selects ``multicore``, with a
warning.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import tempfile
import time
import warnings
import zipfile
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from simt_pto import reference as ref
from simt_pto.backend import (CUDA_EXTRA, DEPRECATED, a5_backend, a5_backends, canonical_backend, gpu_present,
                              numba_cuda_installed, require_numba_cuda, set_a5_backend)
from simt_pto.dtypes import ELEMENT_DTYPES, atomic_dtypes
from simt_pto.enums import BLayout, ScatterAtomicOp
from simt_pto.errors import ConstraintError, OutOfBoundsError
from simt_pto.host import tiling
from simt_pto.host.in_memory import gather, scatter
from simt_pto.host.tile_ops import mgather, mscatter
from simt_pto.tensor import GlobalTensor
from simt_pto.tile import Tile

from .arguments import regular_file_problem

FAMILIES = {
    "row_gather": "simt_mgather_row_kernel",
    "elem_gather": "simt_mgather_elem_kernel",
    "scalar_gather": "MGatherScalarImpl (the (1, 1) Elem gather)",
    "l1_elem_gather": "simt_mgather_l1_elem_kernel (GM -> L1, GatherExec::Simt)",
    "row_scatter": "simt_mscatter_row_kernel (atomics, Conflict::Default)",
    "row_last_scatter": "simt_mscatter_row_last_kernel (Conflict::Last)",
    "elem_scatter": "simt_mscatter_elem_kernel (atomics, Conflict::Default)",
    "elem_last_scatter": "simt_mscatter_elem_last_kernel (Conflict::Last)",
    "scalar_scatter": "MScatterScalarImpl (the (1, 1) Elem scatter)",
    "whole_array": "pto.gather / pto.scatter over whole arrays (owner kernels for Conflict::Last, atomics)",
}
"""Kernel family -> what the A5 dispatch launches for it."""

GATHER_OOB = ("undefined", "clamp", "wrap", "zero")
SCATTER_OOB = ("undefined", "skip", "clamp", "wrap")
VARIANTS = ("small", "edge")
GUARD = 16
"""Sentinel elements on each side of every table (a stray write shows as a changed guard)."""
SENTINEL = 0xA5
SIMULATOR_SHARE = 10
"""The simulator runs every tenth case of the matrix (it interprets every thread in Python)."""
WHOLE_ARRAY_ELEMENTS = {"gpu": 1 << 24, "multicore": 1 << 24, "simulator": 1 << 12}
INT32_MAX = 2 ** 31 - 1
ORDER_SPECIALS = np.array([0x00000000, 0x80000000, 0x7FC00000, 0xFFC00000, 0x7FC00123, 0xFFC00123, 0x7F800000,
                           0xFF800000, 0x7F800001, 0x3F800000], np.uint32)
"""float32 bit patterns the Max / Min cases mix in: +-0, NaNs of both signs (quiet, with a payload, signaling),
+-inf, 1.0 (:func:`simt_pto.reference.total_order_key` orders them)."""


# -- the matrix --------------------------------------------------------------------------------------------------

def _dtypes() -> tuple[str, ...]:
    return tuple(d.name for d in ELEMENT_DTYPES["a5"])


def _atomic_combos() -> list[tuple[str, str]]:
    """(atomic, dtype) pairs the A5 scatter supports: every dtype for a plain store, the atomic dtypes else."""
    out = [("none", d) for d in _dtypes()]
    for atomic in ("add", "max", "min"):
        out += [(atomic, d.name) for d in atomic_dtypes("a5", ScatterAtomicOp[atomic.upper()])]
    return out


def matrix(families=tuple(FAMILIES), quick: bool = False) -> list[dict]:
    """The cases, as parameter dicts: every (family, dtype, policy, atomic, conflict, variant); with
    ``quick`` one case per family x dtype (the policies and variants taken in turn)."""
    cases = []
    for family in families:
        if family == "whole_array":
            continue
        if family.endswith("gather"):
            combos = [("none", d, oob, "last") for d in _dtypes() for oob in GATHER_OOB]
        elif family.endswith("last_scatter"):
            combos = [("none", d, oob, "last") for d in _dtypes() for oob in SCATTER_OOB]
        else:
            combos = [(a, d, oob, "default" if a == "none" else "last") for a, d in _atomic_combos() for oob in SCATTER_OOB]
            if family == "scalar_scatter":
                combos += [("none", d, oob, "last") for d in _dtypes() for oob in SCATTER_OOB]
        variants = ("small",) if family.startswith("scalar") else VARIANTS
        family_cases = [dict(family=family, atomic=a, dtype=d, oob=oob, conflict=c, variant=v)
                        for a, d, oob, c in combos for v in variants]
        if quick:  # one case per dtype, the policies, atomics and variants taken in turn
            by_dtype = {}
            for case in family_cases:
                by_dtype.setdefault(case["dtype"], []).append(case)
            family_cases = [group[i * 5 % len(group)] for i, group in enumerate(by_dtype.values())]
        cases += family_cases
    for k, case in enumerate(cases):
        case["seed"] = k
    return cases


# -- building a case ---------------------------------------------------------------------------------------------

def _values(rng, shape, dtype, atomic):
    """Raw bits fit for ``atomic``: anything for a store or an integer atomic; finite nonzero floats with
    mixed signs for a float Add; for float32 Max / Min the same with about a quarter of them replaced by
    :data:`ORDER_SPECIALS` (signed zeros, NaNs, infinities), whose order the reference states."""
    bt = ref.bits_type(dtype)
    if atomic == "none" or ref.kind(dtype) in ("int", "uint"):
        return rng.integers(0, np.iinfo(bt).max, size=shape, dtype=bt, endpoint=True)
    scale = 1000.0 if dtype == "float32" else 4.0
    values = rng.uniform(-scale, scale, size=shape)
    values[values == 0] = 1.0
    bits = ref.to_bits(values, dtype)
    if atomic in ("max", "min") and dtype == "float32":
        special = rng.random(size=bits.shape) < 0.25
        bits[special] = rng.choice(ORDER_SPECIALS, size=int(special.sum()))
    return bits


def _indices(rng, capacity, shape, oob):
    """Indices with collisions (drawn from a range smaller than the sources); out-of-range ones (capacity,
    capacity + 5, -1, -7, 2^31 - 1) unless UNDEFINED, which promises in-range indices."""
    idx = rng.integers(0, capacity, size=shape).astype(np.int64)
    if oob != "undefined" and (idx.size > 1 or rng.integers(2)):
        flat = idx.reshape(-1)
        bad = np.array([capacity, capacity + 5, -1, -7, INT32_MAX])[: max(1, flat.size // 3)]
        flat[rng.choice(flat.size, size=bad.size, replace=False)] = bad
    return idx


def build(case: dict) -> tuple[dict, dict]:
    """(parameters, arrays) of one case: the tile and table shapes, layouts and the logical arrays."""
    rng = np.random.default_rng([case["seed"], 2026])
    family, dtype, edge = case["family"], case["dtype"], case["variant"] == "edge"
    unit = 32 // ref.itemsize(dtype)  # the 32-byte minimum contiguous extent (MGATHER.md, "Minimum Tile Shape")
    p = dict(case)
    if family.startswith("scalar"):
        rows, cols = 1, 1
    elif family == "l1_elem_gather":
        rows, cols = (19, unit + 3) if edge else (5, unit)
    elif family.startswith("row"):
        rows, cols = (37, 40) if edge else (5, 7)
    else:
        rows, cols = (9, 37) if edge else (3, 5)
    row_mode = family.startswith("row")
    blayout = "col_major" if edge and family != "l1_elem_gather" and rng.integers(2) else "row_major"
    if family == "l1_elem_gather":  # NZ: 16-row fractals of 32-byte rows
        tile_shape = (tiling.round_up(rows, 16), tiling.round_up(cols, unit))
    else:  # the edge variant pads past the least padding the 32-byte rule needs: valid < padded both ways
        grow_rows, grow_cols = (3, 2) if edge else (0, 0)
        tile_shape = tiling.padded_shape(rows + grow_rows, cols + grow_cols, ref.itemsize(dtype),
                                         BLayout[blayout.upper()])
    capacity = max(2, rows // 2 + 1) if row_mode else max(2, rows * cols // 2 + 1)
    if family.startswith("scalar"):
        capacity = 7
    idx = _indices(rng, capacity, (rows,) if row_mode else (rows, cols), case["oob"])
    p.update(rows=rows, cols=cols, blayout=blayout, tile_shape=tile_shape, capacity=capacity,
             idx_layout=("col" if edge and row_mode and rows > 1 else "row") if row_mode else
             ("elem_col" if edge and family != "l1_elem_gather" else "elem"),
             index_dtype="uint32" if edge else "int32")
    table = _values(rng, capacity * (cols if row_mode else 1), dtype, case["atomic"])
    arrays = dict(table=table, idx=idx)
    if family.endswith("scatter"):
        arrays["src"] = _values(rng, (rows, cols), dtype, case["atomic"])
    return p, arrays


def _sentinel(dtype) -> int:
    """The sentinel byte over the element's width."""
    return int.from_bytes(bytes([SENTINEL]) * ref.itemsize(dtype), "little")


def sentinel_tile(dtype, shape, valid=None, blayout="row_major", logical=None, loc="vec"):
    """(tile, storage bits): a padded ``shape`` tile whose storage is all sentinel, with the 2-D ``logical`` bits
    (top-left aligned) written at :func:`ref.tile_offset`, not through the library's offset code. A ``"mat"``
    tile is NZ (ColMajor + 512-byte RowMajor fractals) and takes no ``logical``."""
    kw = dict(blayout="col_major", slayout="row_major") if loc == "mat" else dict(blayout=blayout)
    tile = Tile(dtype, shape[0], shape[1], valid=valid, loc=loc, **kw)
    storage = tile.data.view(ref.bits_type(dtype))
    storage[:] = _sentinel(dtype)
    if logical is not None:
        for r in range(logical.shape[0]):
            for c in range(logical.shape[1]):
                storage[ref.tile_offset(blayout, shape[0], shape[1], r, c)] = logical[r, c]
    return tile, storage


def read_storage(storage, shape, blayout):
    """A padded RowMajor / ColMajor tile's logical contents from its storage bits: ``shape`` of raw bits."""
    out = np.empty(shape, storage.dtype)
    for r in range(shape[0]):
        for c in range(shape[1]):
            out[r, c] = storage[ref.tile_offset(blayout, shape[0], shape[1], r, c)]
    return out


def index_tile(idx, layout, index_dtype, rows=None, cols=None):
    """(tile, storage bits) of an index tile holding ``idx`` (cast to uint32 bits: -1 is 4294967295).

    ``layout``: ``"row"`` = ``[1, R]`` RowMajor (Row mode); ``"col"`` = ``[R, 1]`` ColMajor (Row mode, A5);
    ``"elem"`` = ``[R, C]`` RowMajor; ``"elem_col"`` = ``[R, C]`` ColMajor. The padded contiguous extent is
    rounded up to the 32-byte rule (8 indices) unless ``rows`` / ``cols`` give it."""
    if layout not in ("row", "col", "elem", "elem_col"):
        raise ValueError(f"layout: expected row, col, elem or elem_col, got {layout!r}")
    bits = (np.asarray(idx).astype(np.int64) & 0xFFFFFFFF).astype(np.uint32)
    if layout in ("row", "col"):
        bits = bits.reshape((1, -1) if layout == "row" else (-1, 1))
    r, c = bits.shape
    blayout = "col_major" if layout in ("col", "elem_col") else "row_major"
    least = tiling.padded_shape(r, c, tiling.INDEX_ITEMSIZE, BLayout[blayout.upper()])
    shape = (rows or least[0], cols or least[1])
    return sentinel_tile(index_dtype, shape, (r, c), blayout, bits)


def _guarded(dtype, bits, shape):
    """(buffer bits, GlobalTensor): the table between two guard bands of sentinel elements."""
    buffer = np.full(bits.size + 2 * GUARD, _sentinel(dtype), ref.bits_type(dtype))
    buffer[GUARD:GUARD + bits.size] = bits.reshape(-1)
    memory = buffer[GUARD:GUARD + bits.size]
    memory = memory if dtype == "hifloat8" else memory.view(ref.ELEMENT_TYPES[dtype])
    return buffer, GlobalTensor(memory, shape=shape, dtype=dtype)


# -- running and checking one case -------------------------------------------------------------------------------

def execute(p: dict, arrays: dict) -> list[str]:
    """Run one case on the current A5 backend; what differs from the reference (empty: it passed)."""
    family, dtype, rows, cols = p["family"], p["dtype"], int(p["rows"]), int(p["cols"])
    row_mode = family.startswith("row")
    cap, tile_shape, blayout = int(p["capacity"]), tuple(int(n) for n in p["tile_shape"]), p["blayout"]
    table_bits, idx = arrays["table"], arrays["idx"]
    buffer, table = _guarded(dtype, table_bits, (cap, cols) if row_mode else (cap,))
    before = buffer.copy()
    problems = []
    try:
        if family == "l1_elem_gather":
            return _execute_l1(p, arrays, buffer, table, before)
        it, it_storage = index_tile(idx, p["idx_layout"], p["index_dtype"])
        it_before = it_storage.copy()
        coalesce = "row" if row_mode else "elem"
        if family.endswith("gather"):
            dst, storage = sentinel_tile(dtype, tile_shape, (rows, cols), blayout)
            mgather(dst, table, it, coalesce=coalesce, oob=p["oob"], target="a5")
            got = read_storage(storage, tile_shape, blayout)
            want = (ref.gather_row(table_bits, cap, cols, idx, p["oob"]) if row_mode
                    else ref.gather_elem(table_bits, cap, idx, p["oob"]))
            bad = np.argwhere(got[:rows, :cols] != want)
            problems += [f"dst[{r}, {c}] = {hex(int(got[r, c]))}, expected {hex(int(want[r, c]))}" for r, c in bad[:8]]
            pad = np.ones(tile_shape, bool)
            pad[:rows, :cols] = False
            if (got[pad] != _sentinel(dtype)).any():
                problems.append("wrote the destination tile's padding")
            if not np.array_equal(buffer, before):
                problems.append("a gather wrote its table or the memory around it")
        else:
            src, src_storage = sentinel_tile(dtype, tile_shape, (rows, cols), blayout, arrays["src"])
            src_before = src_storage.copy()
            mscatter(table, src, it, coalesce=coalesce, atomic=p["atomic"], oob=p["oob"], conflict=p["conflict"],
                     target="a5")
            problems += ref.scatter_mismatches(buffer[GUARD:-GUARD], table_bits, dtype, coalesce, idx, arrays["src"],
                                               cap, p["oob"], p["atomic"], p["conflict"], cols if row_mode else 0)[:8]
            if not (np.array_equal(buffer[:GUARD], before[:GUARD]) and np.array_equal(buffer[-GUARD:], before[-GUARD:])):
                problems.append("wrote outside the table")
            if not np.array_equal(src_storage, src_before):
                problems.append("changed the source tile")
        if not np.array_equal(it_storage, it_before):
            problems.append("changed the index tile")
    except (ConstraintError, OutOfBoundsError, TypeError) as refusal:
        problems.append(f"refused a legal call: {type(refusal).__name__}: {refusal}")
    return problems


def _execute_l1(p, arrays, buffer, table, before) -> list[str]:
    """GM -> L1 Elem with the SIMT executor: the scratch's first Rows * Cols elements and the L1 tile hold the
    gathered values in NZ order, zeros at the padding and at masked lanes; nothing beyond is written."""
    dtype, rows, cols, cap = p["dtype"], int(p["rows"]), int(p["cols"]), int(p["capacity"])
    tr, tc = (int(n) for n in p["tile_shape"])
    k = 32 // ref.itemsize(dtype)
    idx = arrays["idx"]
    index = GlobalTensor(np.ascontiguousarray((idx.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32)))
    dst, storage = sentinel_tile(dtype, (tr, tc), (rows, cols), loc="mat")
    scratch_buffer, scratch = _guarded(dtype, np.full(tr * tc, _sentinel(dtype), ref.bits_type(dtype)), (tr * tc,))
    mgather(dst, table, index, coalesce="elem", oob=p["oob"], target="a5", exec="simt", scratch=scratch)
    logical = np.zeros((tr, tc), ref.bits_type(dtype))
    logical[:rows, :cols] = ref.gather_elem(arrays["table"], cap, idx, p["oob"])
    want = np.empty(tr * tc, logical.dtype)
    for r in range(tr):
        for c in range(tc):
            want[ref.nz_tile_offset(tr, k, r, c)] = logical[r, c]
    problems = []
    for name, got in (("L1 tile", storage), ("scratch", scratch_buffer[GUARD:GUARD + tr * tc])):
        bad = np.flatnonzero(got != want)
        problems += [f"{name}[{e}] = {hex(int(got[e]))}, expected {hex(int(want[e]))}" for e in bad[:8]]
    if (np.r_[scratch_buffer[:GUARD], scratch_buffer[GUARD + tr * tc:]] != _sentinel(dtype)).any():
        problems.append("wrote outside the scratch's Rows * Cols elements")
    if not np.array_equal(buffer, before):
        problems.append("a gather wrote its table or the memory around it")
    return problems


def shrink(p: dict, arrays: dict) -> tuple[dict, dict]:
    """The smallest prefix of the case's rows that still fails (halving, then one row at a time)."""
    rows = int(p["rows"])
    while rows > 1:
        for fewer in sorted({rows // 2, rows - 1}):
            q, a = dict(p, rows=fewer), dict(arrays, idx=arrays["idx"][:fewer])
            if "src" in arrays:
                a["src"] = arrays["src"][:fewer]
            if execute(q, a):
                p, arrays, rows = q, a, fewer
                break
        else:
            break
    return p, arrays


def save(path: Path, p: dict, arrays: dict, problems: list[str]) -> None:
    np.savez(path, params=json.dumps(p), problems=json.dumps(problems), **arrays)


CASE_KEYS = ("family", "dtype", "rows", "cols", "capacity", "tile_shape", "blayout", "idx_layout", "index_dtype",
             "oob", "atomic", "conflict")
"""The parameters :func:`execute` reads from a case."""


def load(path) -> tuple[dict, dict]:
    """(parameters, arrays) of a case :func:`save` wrote. Anything else is a ValueError naming the file: a path
    that is not a regular file (a FIFO, a device, a folder) is refused before it is opened."""
    problem = regular_file_problem(path)
    if problem == "no such file":
        raise ValueError(f"no such file: {path}")
    if problem == "not a regular file":
        raise ValueError(f"{path} is not a regular file (a selftest case is an .npz file)")
    if problem is not None:
        raise ValueError(f"{path}: {problem}")
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ValueError(f"it holds one {type(data).__name__}, not an .npz archive")
        with data:
            p = json.loads(str(data["params"]))
            arrays = {k: data[k] for k in data.files if k not in ("params", "problems")}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise ValueError(f"{path} is not a selftest case ({type(e).__name__}: {' '.join(str(e).split())})") from None
    if not isinstance(p, dict):
        raise ValueError(f"{path} is not a selftest case (its params are not a JSON object)")
    missing = [k for k in CASE_KEYS if k not in p]
    missing += [f"array {k}" for k in ("table", "idx", "src")
                if k not in arrays and (k != "src" or str(p.get("family")).endswith("scatter"))]
    if missing:
        raise ValueError(f"{path} is not a selftest case (missing: {', '.join(missing)})")
    if not isinstance(p["family"], str) or p["family"] not in FAMILIES:
        raise ValueError(f"{path} is not a selftest case (family {p['family']!r}: expected one of {', '.join(FAMILIES)})")
    return p, arrays


def check_out_dir(path) -> None:
    """Raise ValueError unless failing cases can be written into the folder ``path``: it is a folder this process
    can create a file in, or it does not exist yet and its nearest existing parent is one (it is made at the first
    failure). Checked before a run, so that a failure late in it does not find nowhere to go."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{path}: {probe} exists and is not a folder")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as e:
        raise ValueError(f"{path}: cannot write into {probe} ({e.strerror or e})") from None


# -- the whole-array stage ---------------------------------------------------------------------------------------

def whole_array_checks(backend: str, seed: int = 7):
    """(name, problems) of each whole-array check at the backend's size: an Elem gather with clamp, a Row
    and an Elem Conflict::Last scatter through the owner kernels (claim each slot for its largest source
    position, then write it; bitwise against the sequential result), an int32 atomic Add (wrapping)."""
    n = WHOLE_ARRAY_ELEMENTS[backend]
    rng = np.random.default_rng(seed)
    cols = 64
    table = rng.integers(-2 ** 31, 2 ** 31, n // 4, dtype=np.int64).astype(np.int32)
    idx = rng.integers(-8, n // 4 + 8, n).astype(np.int32)
    want = table[ref.slots(idx, table.size, "clamp")]
    got = gather(table, idx, coalesce="elem", oob="clamp", target="a5")
    yield "Elem gather, GatherOOB::Clamp", _differences(got, want)
    for coalesce in ("row", "elem"):
        if coalesce == "row":
            t = np.full((n // cols // 4, cols), -1.0, np.float32)
            i = rng.integers(0, t.shape[0], n // cols).astype(np.int32)
            s = np.arange(i.size * cols, dtype=np.float32).reshape(-1, cols)
        else:
            t = np.full(n // 4, -1.0, np.float32)
            i = rng.integers(0, t.size, n).astype(np.int32)
            s = (np.arange(n, dtype=np.int64) % (1 << 24)).astype(np.float32)
        want = ref.last_writer_scatter(t, i.astype(np.int64), s)
        scatter(t, s, i, coalesce=coalesce, conflict="last", target="a5", last_path="owner")
        yield f"{coalesce.capitalize()} scatter, Conflict::Last (owner kernels)", _differences(t, want)
    t = rng.integers(-2 ** 31, 2 ** 31, n // 4, dtype=np.int64).astype(np.int32)
    i = rng.integers(0, t.size, n).astype(np.int32)
    s = rng.integers(-2 ** 31, 2 ** 31, n, dtype=np.int64).astype(np.int32)
    sums = np.zeros(t.size, np.int64)
    np.add.at(sums, i, s.astype(np.int64))
    want = ((t.astype(np.int64) + sums) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    scatter(t, s, i, coalesce="elem", atomic="add", target="a5")
    yield "Elem scatter, atomic Add int32", _differences(t, want)


def _differences(got, want) -> list[str]:
    got, want = np.asarray(got), np.asarray(want)
    gb = got.reshape(-1).view(f"u{got.itemsize}")
    wb = want.reshape(-1).view(f"u{want.itemsize}")
    bad = np.flatnonzero(gb != wb)
    return [f"{bad.size} of {gb.size} elements differ; first at {bad[0]}: {got.reshape(-1)[bad[0]]!r}, "
            f"expected {want.reshape(-1)[bad[0]]!r}"] if bad.size else []


# -- the run -----------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class FamilyResult:
    passed: int = 0
    failed: int = 0
    failures: list = dataclasses.field(default_factory=list)
    """(case parameters, problems, .npz path or None) of each failure."""


@dataclasses.dataclass
class SelftestResult:
    """What :func:`selftest` found: per backend, per kernel family, the counts and the failures."""

    backends: dict
    """backend name -> {family name -> FamilyResult}."""
    devices: dict
    versions: dict
    out_dir: str | None = None
    seconds: dict = dataclasses.field(default_factory=dict)
    """backend name -> wall time of its run."""

    @property
    def ok(self) -> bool:
        return not any(f.failed for fams in self.backends.values() for f in fams.values())

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "versions": self.versions, "out": self.out_dir,
                "backends": {b: {"device": self.devices[b], "seconds": round(self.seconds.get(b, 0.0), 1),
                                 "passed": sum(f.passed for f in fams.values()),
                                 "failed": sum(f.failed for f in fams.values()),
                                 "families": {name: {"passed": f.passed, "failed": f.failed,
                                                     "failures": [dict(params=pp, problems=pr, npz=path)
                                                                  for pp, pr, path in f.failures]}
                                              for name, f in fams.items()}}
                             for b, fams in self.backends.items()}}


def versions() -> dict:
    import numba
    out = {"python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__}
    try:
        out["numba-cuda"] = version("numba-cuda")
    except Exception:  # noqa: BLE001  (not installed: the key is left out)
        pass
    if "gpu" in a5_backends() and gpu_present():
        from numba import cuda
        out["cuda driver"] = ".".join(map(str, cuda.cudadrv.driver.driver.get_version()))
        out["cuda runtime"] = ".".join(map(str, cuda.runtime.get_version()))
    return out


def device_name(backend: str) -> str:
    if backend == "gpu":
        from numba import cuda
        name = cuda.get_current_device().name
        return name.decode() if isinstance(name, bytes) else str(name)
    if backend == "simulator":
        return "Numba CUDA simulator"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores"


GPU_JOBS = 16
"""The most worker processes :func:`default_jobs` gives the ``gpu`` backend: each compiles its share of the
kernels (a cold kernel cache is most of a first run: about 370 specializations, up to 2.5 s each here) into the disk
cache and runs its cases; the GPU is shared."""


def default_jobs(backend: str) -> int:
    """Worker processes for ``backend`` when none is asked for: on the GPU one per core up to :data:`GPU_JOBS`;
    one (this process) on ``multicore``, whose kernels use every core already, and on the simulator, whose mode
    is this process's."""
    return max(1, min(os.cpu_count() or 1, GPU_JOBS)) if backend == "gpu" else 1


def shards(cases: Sequence[dict], jobs: int) -> list[list[dict]]:
    """``cases`` dealt into at most ``jobs`` shards, a policy's cases whole: a (family, atomic, OOB, conflict)
    group is one kernel specialization per dtype, which the shard compiles once, into the cache entries of that
    specialization alone. The largest groups go first, each to the least loaded shard."""
    groups: dict[tuple, list[dict]] = {}
    for case in cases:
        groups.setdefault((case["family"], case["atomic"], case["oob"], case["conflict"]), []).append(case)
    out: list[list[dict]] = [[] for _ in range(max(1, min(jobs, len(groups))))]
    for group in sorted(groups.values(), key=len, reverse=True):
        min(out, key=len).extend(group)
    return [sorted(shard, key=lambda c: c["seed"]) for shard in out if shard]


def _run_shard(backend: str, families: tuple, cases: list[dict], out_dir: str) -> dict[str, FamilyResult]:
    """A worker process's share of the matrix (:func:`shards`) on ``backend``; failing cases written to
    ``out_dir``."""
    set_a5_backend(backend)
    result = SelftestResult({backend: {f: FamilyResult() for f in families}}, {}, {}, out_dir=out_dir)
    for case in cases:
        _run_case(result, backend, case)
    return result.backends[backend]


def _run_whole_array(backend: str) -> list[tuple[str, list[str]]]:
    """The whole-array stage in a worker process (beside the shards)."""
    set_a5_backend(backend)
    return list(whole_array_checks(backend))


def _run_in_workers(result: SelftestResult, backend: str, families: tuple, cases: list[dict], whole_array: bool,
                    jobs: int, bar) -> None:
    """The matrix (and the whole-array stage) on ``backend`` in ``jobs`` spawned worker processes: a fresh
    interpreter each (a forked child would inherit a CUDA context it cannot use), merged into ``result``."""
    import concurrent.futures
    import multiprocessing

    out_dir = result.out_dir or f"selftest-{time.strftime('%Y%m%d-%H%M%S')}"  # made by the first failure
    context = multiprocessing.get_context("spawn")
    parts = shards(cases, jobs)
    with concurrent.futures.ProcessPoolExecutor(max_workers=len(parts) + whole_array, mp_context=context) as pool:
        running = {pool.submit(_run_shard, backend, families, part, out_dir): len(part) for part in parts}
        whole = pool.submit(_run_whole_array, backend) if whole_array else None
        if whole is not None:
            running[whole] = 4
        for done in concurrent.futures.as_completed(running):
            if done is whole:
                for name, problems in done.result():
                    _record(result.backends[backend]["whole_array"], {"check": name}, problems, None)
            else:
                for name, part in done.result().items():
                    mine = result.backends[backend][name]
                    mine.passed += part.passed
                    mine.failed += part.failed
                    mine.failures += part.failures
            bar.update(running[done])
    if any(f.failures for f in result.backends[backend].values()):
        result.out_dir = out_dir


def selftest(backends: Sequence[str] | None = None, quick: bool = False, families: Sequence[str] | None = None,
             out_dir: str | os.PathLike[str] | None = None, progress: bool = False,
             whole_array: bool | None = None, jobs: int | None = None) -> SelftestResult:
    """Run the differential matrix (and, unless ``quick``, the whole-array stage) on each backend.

    ``backends``: names from :func:`simt_pto.a5_backends` (default: all this process can use; the deprecated
    ``"cpu"`` is ``"multicore"``, with a DeprecationWarning); ``families``:
    a subset of :data:`FAMILIES`; ``out_dir``: where failing cases are written (default: a new
    ``selftest-<time>`` folder in the current directory, made at the first failure). ``jobs``: worker processes
    per backend (default :func:`default_jobs`; the simulator always runs here): the cases are dealt by policy
    (:func:`shards`) and the whole-array stage runs beside them, so a cold kernel cache is filled in parallel."""
    available = a5_backends()
    names, backends = list(backends or available), []
    for name in names:  # a loop, not a comprehension: the warning's stacklevel counts frames
        backends.append(_backend_name(name))
    for b in backends:
        check_available(b, available)
    families = tuple(families or FAMILIES)
    for f in families:
        if f not in FAMILIES:
            raise ValueError(f"family {f!r}: expected one of {', '.join(FAMILIES)}")
    whole_array = (not quick if whole_array is None else whole_array) and "whole_array" in families
    if out_dir is not None:
        check_out_dir(out_dir)
    cases = matrix(families, quick)
    result = SelftestResult({}, {}, versions(), out_dir=str(out_dir) if out_dir else None)
    previous = a5_backend()
    try:
        for backend in backends:
            start = time.perf_counter()
            set_a5_backend(backend)
            result.devices[backend] = device_name(backend)
            result.backends[backend] = {f: FamilyResult() for f in families}
            mine = cases[::SIMULATOR_SHARE] if backend == "simulator" else cases
            workers = 1 if backend == "simulator" else default_jobs(backend) if jobs is None else jobs
            with tqdm(total=len(mine) + (4 if whole_array else 0), desc=f"selftest {backend}",
                      disable=not progress, file=sys.stderr, leave=False) as bar:
                if workers > 1:
                    _run_in_workers(result, backend, families, mine, whole_array, workers, bar)
                    result.seconds[backend] = time.perf_counter() - start
                    continue
                for case in mine:
                    _run_case(result, backend, case)
                    bar.update()
                if whole_array:
                    for name, problems in whole_array_checks(backend):
                        _record(result.backends[backend]["whole_array"], {"check": name}, problems, None)
                        bar.update()
            result.seconds[backend] = time.perf_counter() - start
    finally:
        set_a5_backend(previous)
    return result


def check_available(backend: str, available) -> None:
    """Raise unless ``backend`` is one of ``available``: :class:`~simt_pto.backend.MissingExtraError` naming the
    ``cuda`` extra for ``gpu`` / ``simulator`` without numba-cuda, else ValueError listing what this process can
    use."""
    if backend in available:
        return
    if backend in ("gpu", "simulator"):
        try:
            require_numba_cuda(f"A5 backend {backend!r}")  # MissingExtraError (an ImportError) goes up as it is
        except RuntimeError:  # numba-cuda is installed but cannot load here: "not available" says the rest
            pass
    raise ValueError(f"backend {backend!r} is not available in this process (available: {', '.join(available)})")


def _backend_name(name) -> str:
    """A backend as :mod:`simt_pto.backend` names it (``"cpu"``: ``"multicore"``, warning the caller of
    :func:`selftest`); a name it does not know is left as it is, for the caller's "not available" error."""
    try:
        return canonical_backend(name, stacklevel=3)
    except ValueError:
        return name


def _record(family: FamilyResult, params, problems, path) -> None:
    if problems:
        family.failed += 1
        family.failures.append((params, problems, path))
    else:
        family.passed += 1


def _run_case(result: SelftestResult, backend: str, case: dict) -> None:
    """Run one case; a failure is shrunk and written as an ``.npz`` into the result's folder."""
    p, arrays = build(case)
    problems = execute(p, arrays)
    path = None
    if problems:
        if result.out_dir is None:
            result.out_dir = f"selftest-{time.strftime('%Y%m%d-%H%M%S')}"
        p, arrays = shrink(p, arrays)
        problems = execute(p, arrays) or problems
        path = str(Path(result.out_dir) / f"{backend}-{p['family']}-{p['dtype']}-{p['oob']}-{p['atomic']}-"
                                          f"{p['conflict']}-{p['seed']}.npz")
        try:
            Path(result.out_dir).mkdir(parents=True, exist_ok=True)
            save(path, dict(p, backend=backend), arrays, problems)
        except OSError as e:  # the failure itself stays in the report: only its replay file is lost
            problems = problems + [f"(the case could not be written to {path}: {e.strerror or e})"]
            path = None
    _record(result.backends[backend][case["family"]], p, problems, path)


def replay(path) -> tuple[dict, list[str]]:
    """Run a case written by :func:`selftest` again on the current backend: (parameters, problems)."""
    p, arrays = load(path)
    return p, execute(p, arrays)


# -- the command line --------------------------------------------------------------------------------------------

DESCRIPTION = """Check every A5 backend this process can use (gpu where a device is found, multicore, and the CUDA
simulator with a tenth of the cases) against the reference: a seeded matrix of every kernel family, element dtype,
out-of-bounds rule, atomic and conflict policy, on small and on tile-edge shapes, compared bit for bit (a float atomic
Add within its rounding bound), then whole-array gathers and scatters of 16M elements."""
"""``simt-pto selftest --help`` (argparse refills the lines; so for the epilog)."""
EPILOG = f"""A failing case is shrunk and written as an .npz file that --replay runs again. Exit status: 0 when nothing
failed, 1 when something did (or when the backend asked for needs the cuda extra, numba-cuda, that this install leaves
out), 2 for a bad argument (or when Numba's JIT is disabled: the A5 kernels need it). The gpu and simulator backends
need numba-cuda: pip install "simt_pto[{CUDA_EXTRA}]"."""


def register(sub) -> None:
    parser = sub.add_parser("selftest", help="check every A5 backend of this machine against the reference",
                            description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--backend", default="all",
                        help="gpu, multicore, simulator or all (default: all this process can use; the old name "
                             "cpu still means multicore)")
    parser.add_argument("--quick", action="store_true",
                        help="one case per kernel family x dtype, no whole-array stage (under a minute)")
    parser.add_argument("--family", action="append", choices=tuple(FAMILIES), help="only this kernel family (repeatable)")
    parser.add_argument("--out", metavar="DIR", help="where failing cases are written (default: a new folder here)")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line of stdout")
    parser.add_argument("--replay", metavar="FILE.npz", help="run one failing case written by an earlier selftest")
    parser.add_argument("--jobs", type=_jobs, default=None, metavar="N",
                        help="worker processes per backend, each compiling and running its share of the cases "
                             f"(default: one per core up to {GPU_JOBS} on the gpu backend, 1 elsewhere; the "
                             "simulator always runs in this process)")
    parser.set_defaults(func=run, parser=parser)


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of worker processes, got {text!r}")
    return value


def _cli_backend(parser, name: str) -> str:
    """``--backend`` as a backend name: ``all``, or what :func:`simt_pto.backend.canonical_backend` makes of it. The
    old ``cpu`` still means ``multicore`` and says so on stderr (a DeprecationWarning is not shown by default)."""
    if name == "all":
        return name
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        backend = _backend_name(name)
    for warning in caught:
        print(f"simt-pto selftest: warning: {warning.message}", file=sys.stderr)
    return backend


def _cli_available(parser, backend: str, available) -> None:
    """``--backend`` names a backend this process can use; a missing extra is one error line naming it (raised to
    the command line's :func:`~simt_pto.host.tools.cli.main`, exit 1), anything else argparse's error (exit 2)."""
    try:
        check_available(backend, available)
    except ValueError:
        parser.error(f"--backend: {backend!r} is not available here (available: {', '.join(available)})")


def run(args) -> int:
    parser = args.parser
    args.backend = _cli_backend(parser, args.backend)
    if args.replay:
        try:
            p, arrays = load(args.replay)
        except ValueError as e:
            parser.error(f"argument --replay: {e}")
        recorded = str(p.get("backend", "multicore"))  # a case written before a rename: the backend's new name
        backend = DEPRECATED.get(recorded, recorded) if args.backend == "all" else args.backend
        _cli_available(parser, backend, a5_backends())
        previous = a5_backend()
        set_a5_backend(backend)
        try:
            problems = execute(p, arrays)
        finally:
            set_a5_backend(previous)
        what = ", ".join(f"{k}={p[k]}" for k in ("family", "dtype", "oob", "atomic", "conflict", "rows", "cols"))
        print(f"replay on {backend}: {what}")
        print("\n".join(f"  {line}" for line in problems) if problems else "  passed")
        if args.json:
            print(json.dumps({"ok": not problems, "backend": backend, "params": p, "problems": problems}))
        return 1 if problems else 0
    available = a5_backends()
    backends = available if args.backend == "all" else (args.backend,)
    if args.backend != "all":
        _cli_available(parser, args.backend, available)
    elif not numba_cuda_installed():
        print(f'simt-pto selftest: note: the gpu and simulator backends need numba-cuda: '
              f'pip install "simt_pto[{CUDA_EXTRA}]"', file=sys.stderr)
    if args.out is not None:
        try:
            check_out_dir(args.out)
        except ValueError as e:
            parser.error(f"argument --out: {e}")
    start = time.perf_counter()
    result = selftest(backends, quick=args.quick, families=args.family, out_dir=args.out,
                      progress=sys.stderr.isatty(), jobs=args.jobs)
    print(f"simt-pto selftest{' --quick' if args.quick else ''}: "
          + ", ".join(f"{k} {v}" for k, v in result.versions.items()))
    for backend, fams in result.backends.items():
        print(f"{backend} ({result.devices[backend]}), {result.seconds[backend]:.0f} s:")
        for name, f in fams.items():
            if f.passed or f.failed:
                print(f"  {name:18s} passed {f.passed:4d}  failed {f.failed:3d}   {FAMILIES[name]}")
            for p, problems, path in f.failures:
                print(f"    FAILED {json.dumps(p)}")
                for line in problems[:4]:
                    print(f"      {line}")
                if path:
                    print(f"      replay: simt-pto selftest --replay {path}")
    print(f"{'PASSED' if result.ok else 'FAILED'} in {time.perf_counter() - start:.0f} s"
          + (f"; failing cases in {result.out_dir}" if not result.ok and result.out_dir else ""))
    if args.json:
        print(json.dumps(result.to_json()))
    return 0 if result.ok else 1
