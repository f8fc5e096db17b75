"""Independent sequential oracles for the A5 MGATHER / MSCATTER tests, and the helpers they share.

Everything here is written from MGATHER.md / MSCATTER.md, not from the library: plain Python loops over
the valid region, working on raw bits (unsigned integers of the element's width), so float payloads,
NaNs and the opaque hifloat8 move exactly as the hardware moves them.

* Indices are cast to uint32 first (``-1`` is ``4294967295``), then remapped against ``capacity``
  (TableRows in Row mode, TableSize = prod(Shape[0..4]) in Elem mode):
  CLAMP ``min(u, capacity - 1)``; WRAP ``u % capacity``; ZERO (gather) / SKIP (scatter) "no slot".
* Gather: Row ``dst[r, :] = table[slot(idx[r]) * validCols + (0 .. C-1)]``; Elem
  ``dst[i, j] = table[slot(idx[i, j])]``; "no slot" gives ``T(0)``.
* Scatter, ``Conflict::Last`` / atomics: the serial loop ``for i in range(N): table[idx[i]] op= src[i]``
  in increasing flat source order, never NumPy's ``table[idx] = src`` (which promises no order for
  repeated indices). Atomic Add / Max / Min are computed sequentially in the element type: integers wrap,
  float32 rounds each add, float16 / bfloat16 compute each add as
  ``(np.float32(a) + np.float32(b)).astype(T)`` (exact: float32 holds >= 2p + 2 bits of either type).

The matrix helper :func:`budgeted` samples large parameter products with a fixed seed and a cap;
``SIMT_PTO_FULL_MATRIX=1`` runs the full product.
"""
from __future__ import annotations

import itertools
import os
import random
import zlib

import ml_dtypes
import numpy as np
import pytest

import simt_pto as pto

# -- element types, as the spec names them ----------------------------------------------------------------------

NUMPY_TYPES = {
    "int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16, "int32": np.int32,
    "uint32": np.uint32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32,
    "float8_e4m3": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2,
    "hifloat8": np.uint8,  # opaque: numpy cannot interpret it; moved as raw bits
}
"""Element dtype name -> the numpy type the tests build values in."""

SENTINEL_BYTE = 0xA5
GATHER_POLICIES = ("undefined", "clamp", "wrap", "zero")
SCATTER_POLICIES = ("undefined", "skip", "clamp", "wrap")
ATOMICS = ("none", "add", "max", "min")
CONFLICTS = ("last", "default")


def itemsize(dtype: str) -> int:
    return np.dtype(NUMPY_TYPES[dtype]).itemsize


def bits_type(dtype: str) -> np.dtype:
    return np.dtype(f"uint{8 * itemsize(dtype)}")


def kind(dtype: str) -> str:
    if dtype == "hifloat8":
        return "opaque"
    return {"i": "int", "u": "uint"}.get(np.dtype(NUMPY_TYPES[dtype]).kind, "float")


def sentinel(dtype: str) -> int:
    """0xA5 repeated over the element's width."""
    return int.from_bytes(bytes([SENTINEL_BYTE]) * itemsize(dtype), "little")


def min_contiguous(dtype: str) -> int:
    """The smallest padded contiguous extent (Cols RowMajor / Rows ColMajor): 32 bytes (MGATHER.md,
    "Minimum Tile Shape")."""
    return 32 // itemsize(dtype)


def round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def to_bits(values, dtype: str) -> np.ndarray:
    """Values (Python numbers or an array) converted to ``dtype`` and viewed as raw bits."""
    return np.asarray(values).astype(NUMPY_TYPES[dtype]).view(bits_type(dtype))


def from_bits(bits, dtype: str) -> np.ndarray:
    return np.asarray(bits, dtype=bits_type(dtype)).view(NUMPY_TYPES[dtype])


def case_rng(*key) -> np.random.Generator:
    """A generator seeded from the test case itself: the same draws on every run and in any order."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def random_bits(rng, shape, dtype: str) -> np.ndarray:
    """Random raw bits of ``dtype`` (NaN patterns included: the ops move bits, not values)."""
    bt = bits_type(dtype)
    return rng.integers(0, np.iinfo(bt).max, size=shape, dtype=bt, endpoint=True)


# -- index remap (MGATHER.md / MSCATTER.md, "Out-of-Bounds Behaviour") -------------------------------------------

def u32(index) -> int:
    """The ISA's cast of an index to uint32."""
    return int(index) & 0xFFFFFFFF


def slot(index, capacity: int, policy: str):
    """The slot an index reaches under ``policy``, or None for "no slot" (Zero / Skip, and the emulator's
    non-strict Undefined)."""
    u = u32(index)
    if policy == "clamp":
        return min(u, capacity - 1)
    if policy == "wrap":
        return u % capacity
    return u if u < capacity else None


# -- UB tiles, addressed without the library's offset code -------------------------------------------------------

def storage_offset(tile, r: int, c: int) -> int:
    """``tile_offset_2d``: RowMajor ``r * Cols + c``; ColMajor ``c * Rows + r``."""
    if tile.blayout == pto.BLayout.ROW_MAJOR:
        return r * tile.cols + c
    return c * tile.rows + r


def make_tile(dtype: str, rows: int, cols: int, valid=None, blayout="row_major", logical_bits=None):
    """A VEC tile whose storage is all sentinel, with ``logical_bits`` (a 2-D array, top-left aligned)
    written element by element through :func:`storage_offset`."""
    tile = pto.Tile(dtype, rows, cols, valid=valid, blayout=blayout)
    raw = tile.data.view(bits_type(dtype))
    raw[:] = sentinel(dtype)
    if logical_bits is not None:
        logical_bits = np.atleast_2d(np.asarray(logical_bits))
        for r in range(logical_bits.shape[0]):
            for c in range(logical_bits.shape[1]):
                raw[storage_offset(tile, r, c)] = logical_bits[r, c]
    return tile


def read_tile(tile) -> np.ndarray:
    """The tile's whole padded logical contents as raw bits, ``(rows, cols)``."""
    raw = tile.data.view(np.dtype(f"uint{8 * tile.data.itemsize}"))
    out = np.empty((tile.rows, tile.cols), dtype=raw.dtype)
    for r in range(tile.rows):
        for c in range(tile.cols):
            out[r, c] = raw[storage_offset(tile, r, c)]
    return out


def index_tile(values, layout: str = "row", index_dtype: str = "int32", rows=None, cols=None):
    """An index tile holding ``values``.

    ``layout``: ``"row"`` = ``[1, R]`` RowMajor (Row mode); ``"col"`` = ``[R, 1]`` ColMajor (Row mode, A5);
    ``"elem"`` = ``[R, C]`` RowMajor; ``"elem_col"`` = ``[R, C]`` ColMajor. Padded extents are rounded up
    to the 32-byte rule unless given.
    """
    v = np.asarray(values, dtype=np.int64)
    vals = (v & 0xFFFFFFFF).astype(np.uint32) if index_dtype == "uint32" else v.astype(np.int32)
    bits = vals.view(np.uint32)

    def up8(n):
        return round_up(n, 8)

    if layout == "row":
        bits = bits.reshape(1, -1)
        return make_tile(index_dtype, rows or 1, cols or up8(bits.shape[1]), valid=bits.shape, logical_bits=bits)
    if layout == "col":
        bits = bits.reshape(-1, 1)
        return make_tile(index_dtype, rows or up8(bits.shape[0]), cols or 1, valid=bits.shape,
                         blayout="col_major", logical_bits=bits)
    if layout == "elem":
        return make_tile(index_dtype, rows or bits.shape[0], cols or up8(bits.shape[1]), valid=bits.shape,
                         logical_bits=bits)
    if layout == "elem_col":
        return make_tile(index_dtype, rows or up8(bits.shape[0]), cols or bits.shape[1], valid=bits.shape,
                         blayout="col_major", logical_bits=bits)
    raise ValueError(layout)


# -- GM tables with guard bands ----------------------------------------------------------------------------------

class GuardedTable:
    """A table inside a larger flat buffer: ``lead`` sentinel elements before it (outside the wrapped
    memory) and ``tail`` sentinel elements after it (inside the wrapped memory, beyond ``Shape``), so a
    stray read shows as a sentinel value and a stray write as a changed sentinel."""

    def __init__(self, dtype: str, core_bits, shape, lead: int = 13, tail: int = 29):
        core_bits = np.asarray(core_bits, dtype=bits_type(dtype)).reshape(-1)
        self.dtype, self.lead, self.n = dtype, lead, core_bits.size
        self.bits = np.full(lead + self.n + tail, sentinel(dtype), dtype=bits_type(dtype))
        self.bits[lead:lead + self.n] = core_bits
        memory = self.bits[lead:]
        if dtype != "hifloat8":
            memory = memory.view(NUMPY_TYPES[dtype])
        self.tensor = pto.GlobalTensor(memory, shape=shape, dtype=dtype)

    def core(self) -> np.ndarray:
        """The table's own elements (raw bits, a copy)."""
        return self.bits[self.lead:self.lead + self.n].copy()

    def snapshot(self) -> np.ndarray:
        """The whole buffer, guards included (raw bits, a copy)."""
        return self.bits.copy()

    def guards_intact(self) -> bool:
        guards = np.concatenate([self.bits[:self.lead], self.bits[self.lead + self.n:]])
        return bool((guards == sentinel(self.dtype)).all())

    def reset(self, snapshot) -> None:
        self.bits[:] = snapshot


# -- gather oracle -----------------------------------------------------------------------------------------------

def gather_row(table_bits, capacity: int, row_len: int, indices, policy: str) -> np.ndarray:
    """``dst[r, :] = table[slot(idx[r]), :]`` with row stride ``row_len`` (A5: validCols); a missing slot
    gives a row of ``T(0)``."""
    out = np.zeros((len(indices), row_len), dtype=table_bits.dtype)
    for r, index in enumerate(indices):
        s = slot(index, capacity, policy)
        if s is not None:
            for c in range(row_len):
                out[r, c] = table_bits[s * row_len + c]
    return out


def gather_elem(table_bits, capacity: int, indices, policy: str) -> np.ndarray:
    """``dst[i, j] = table[slot(idx[i, j])]``; a missing slot gives ``T(0)``."""
    indices = np.atleast_2d(indices)
    out = np.zeros(indices.shape, dtype=table_bits.dtype)
    for i in range(indices.shape[0]):
        for j in range(indices.shape[1]):
            s = slot(indices[i, j], capacity, policy)
            if s is not None:
                out[i, j] = table_bits[s]
    return out


# -- scatter oracle ----------------------------------------------------------------------------------------------

def _value(bits: int, dtype: str):
    v = from_bits(np.array([bits]), dtype)[0]
    return int(v) if kind(dtype) in ("int", "uint") else v


def combine(dtype: str, atomic: str, old_bits: int, new_bits: int) -> int:
    """One ``table[e] = atom(table[e], v)`` in the element type, raw bits in and out."""
    if atomic == "none":
        return int(new_bits)
    a, b = _value(old_bits, dtype), _value(new_bits, dtype)
    if atomic == "add":
        if kind(dtype) in ("int", "uint"):
            return (a + b) & ((1 << 8 * itemsize(dtype)) - 1)
        if dtype == "float32":
            result = np.float32(a) + np.float32(b)
        else:
            result = (np.float32(a) + np.float32(b)).astype(NUMPY_TYPES[dtype])
    elif atomic == "max":
        result = max(a, b)
    elif atomic == "min":
        result = min(a, b)
    else:
        raise ValueError(atomic)
    return int(to_bits(np.array([result]), dtype)[0])


def writers(coalesce: str, indices, src_bits, capacity: int, policy: str, row_len: int):
    """The writes of a scatter in flat source order: a list of (table element, raw bits)."""
    src_bits = np.atleast_2d(src_bits)
    out = []
    if coalesce == "row":
        for r, index in enumerate(indices):
            s = slot(index, capacity, policy)
            if s is not None:
                out.extend((s * row_len + c, int(src_bits[r, c])) for c in range(row_len))
    else:
        indices = np.atleast_2d(indices)
        for i in range(indices.shape[0]):
            for j in range(indices.shape[1]):
                s = slot(indices[i, j], capacity, policy)
                if s is not None:
                    out.append((s, int(src_bits[i, j])))
    return out


def scatter(table_bits, dtype: str, coalesce: str, indices, src_bits, capacity: int, policy: str,
            atomic: str = "none", row_len: int = 0) -> np.ndarray:
    """The serial loop ``for i in range(N): table[slot(idx[i])] op= src[i]`` (a new raw-bit array)."""
    table = np.array(table_bits, copy=True)
    for e, v in writers(coalesce, indices, src_bits, capacity, policy, row_len):
        table[e] = combine(dtype, atomic, int(table[e]), v)
    return table


def candidates(coalesce: str, indices, src_bits, capacity: int, policy: str, row_len: int = 0) -> dict:
    """Element -> the set of raw bits that may survive a racing (Conflict::Default) store."""
    out: dict[int, set] = {}
    for e, v in writers(coalesce, indices, src_bits, capacity, policy, row_len):
        out.setdefault(e, set()).add(v)
    return out


def assert_one_of_colliders(got_bits, initial_bits, cands: dict) -> None:
    """Conflict::Default: each written element holds one of its writers' values, every other element
    keeps its initial value; where a slot has exactly one writer the value is exact."""
    for e in range(len(got_bits)):
        if e in cands:
            assert int(got_bits[e]) in cands[e], (e, hex(int(got_bits[e])), sorted(map(hex, cands[e])))
        else:
            assert got_bits[e] == initial_bits[e], (e, hex(int(got_bits[e])), hex(int(initial_bits[e])))


# -- a budgeted parameter matrix ---------------------------------------------------------------------------------

FULL_MATRIX = os.environ.get("SIMT_PTO_FULL_MATRIX", "") not in ("", "0")
"""``SIMT_PTO_FULL_MATRIX=1``: run every case of a sampled product."""


def budgeted(cases, cap: int | None, seed: int = 20240531):
    """``cases`` (tuples) whole under ``SIMT_PTO_FULL_MATRIX=1`` or with ``cap=None``; otherwise a fixed-seed
    sample that first covers every pair of values of any two axes (greedy all-pairs), then fills up to
    ``cap`` (the pair cover wins if it needs more). Returned in the original order, as ``pytest.param``
    with readable ids."""
    cases = list(cases)
    if not FULL_MATRIX and cap is not None and len(cases) > cap:
        order = list(range(len(cases)))
        random.Random(seed).shuffle(order)
        width = len(cases[0])

        def pairs(case):
            return {(i, case[i], j, case[j]) for i, j in itertools.combinations(range(width), 2)}

        wanted = set().union(*(pairs(c) for c in cases))
        chosen = []
        for k in order:
            new = pairs(cases[k]) & wanted
            if new:
                chosen.append(k)
                wanted -= new
        for k in order:
            if len(chosen) >= cap:
                break
            if k not in chosen:
                chosen.append(k)
        cases = [cases[k] for k in sorted(chosen)]
    return [pytest.param(*c, id="-".join(str(x) for x in c)) for c in cases]
