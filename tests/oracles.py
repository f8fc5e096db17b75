"""Test helpers around the A5 reference (:mod:`simt_pto.reference`): tiles and guarded tables built and read
without the library's offset code, the A2/A3 NZ layout by brute force, and a budgeted parameter matrix.

The oracles themselves (index remap, gather, the serial scatter loop, atomics in the element type,
Conflict::Default candidates) live in :mod:`simt_pto.reference`, written from MGATHER.md / MSCATTER.md
independently of the kernels, so that ``simt-pto selftest`` ships the same statement of the spec as the
tests; they are re-exported here under the names the tests use.

The matrix helper :func:`budgeted` samples large parameter products with a fixed seed and a cap;
``SIMT_PTO_FULL_MATRIX=1`` runs the full product.
"""
from __future__ import annotations

import itertools
import os
import random
import zlib

import numpy as np
import pytest

import simt_pto as pto
from simt_pto.host.tools.selftest import index_tile as selftest_index_tile, read_storage, sentinel_tile
from simt_pto.reference import (ELEMENT_TYPES as NUMPY_TYPES, bits_type, candidates, combine, from_bits,  # noqa: F401
                                gather_elem, gather_row, itemsize, kind, scatter, slot, to_bits, u32, writers)

SENTINEL_BYTE = 0xA5
GATHER_POLICIES = ("undefined", "clamp", "wrap", "zero")
SCATTER_POLICIES = ("undefined", "skip", "clamp", "wrap")
ATOMICS = ("none", "add", "max", "min")
CONFLICTS = ("last", "default")


def sentinel(dtype: str) -> int:
    """0xA5 repeated over the element's width."""
    return int.from_bytes(bytes([SENTINEL_BYTE]) * itemsize(dtype), "little")


def min_contiguous(dtype: str) -> int:
    """The smallest padded contiguous extent (Cols RowMajor / Rows ColMajor): 32 bytes (MGATHER.md,
    "Minimum Tile Shape")."""
    return 32 // itemsize(dtype)


def round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def case_rng(*key) -> np.random.Generator:
    """A generator seeded from the test case itself: the same draws on every run and in any order."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def random_bits(rng, shape, dtype: str) -> np.ndarray:
    """Random raw bits of ``dtype`` (NaN patterns included: the ops move bits, not values)."""
    bt = bits_type(dtype)
    return rng.integers(0, np.iinfo(bt).max, size=shape, dtype=bt, endpoint=True)


# -- UB tiles, addressed without the library's offset code (selftest's builders) -------------------------------------------------------

def make_tile(dtype: str, rows: int, cols: int, valid=None, blayout="row_major", logical_bits=None):
    """A VEC tile whose storage is all sentinel, with ``logical_bits`` (a 2-D array, top-left aligned) written
    element by element at ``tile_offset_2d`` (``simt_pto.host.tools.selftest.sentinel_tile``)."""
    logical = None if logical_bits is None else np.atleast_2d(np.asarray(logical_bits))
    return sentinel_tile(dtype, (rows, cols), valid, blayout, logical)[0]


def read_tile(tile) -> np.ndarray:
    """The tile's whole padded logical contents as raw bits, ``(rows, cols)``."""
    blayout = "row_major" if tile.blayout == pto.BLayout.ROW_MAJOR else "col_major"
    return read_storage(tile.data.view(bits_type(tile.dtype.name)), (tile.rows, tile.cols), blayout)


def index_tile(values, layout: str = "row", index_dtype: str = "int32", rows=None, cols=None):
    """An index tile holding ``values`` (``simt_pto.host.tools.selftest.index_tile``): ``"row"`` = ``[1, R]``
    RowMajor, ``"col"`` = ``[R, 1]`` ColMajor, ``"elem"`` / ``"elem_col"`` = ``[R, C]`` RowMajor / ColMajor;
    the padded extents are rounded up to the 32-byte rule unless given."""
    return selftest_index_tile(values, layout, index_dtype, rows, cols)[0]


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


# -- the A2/A3 NZ layout, by brute force (MGATHER.md "NZ Layout (A2/A3)"; independent of simt_pto.nz) ----------

FRACTAL_ROWS = 16
"""Rows of one NZ fractal block (``staticShape[3]``)."""


def nz_shape(lrows: int, lcols: int, kc0: int, batches: int) -> tuple:
    """``Shape<B, BCols, BRows, 16, kC0>`` of an NZ tensor holding a ``lrows x lcols`` logical matrix."""
    return (batches, lcols // (kc0 * batches), lrows // FRACTAL_ROWS, FRACTAL_ROWS, kc0)


def packed_strides(shape) -> tuple:
    """Row-major strides of a dense tensor of ``shape``."""
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


def nz_gm_offset(lr: int, lc: int, shape, stride) -> int:
    """GM element offset of logical ``(lr, lc)``: batch, block column, block row, row in block, column in
    block, each times its stride."""
    _, bcols, _, _, kc0 = shape
    b = lc // (bcols * kc0)
    bc = (lc % (bcols * kc0)) // kc0
    ci = lc % kc0
    br, ri = lr // FRACTAL_ROWS, lr % FRACTAL_ROWS
    return b * stride[0] + bc * stride[1] + br * stride[2] + ri * stride[3] + ci * stride[4]


def nz_logical(flat, shape, stride) -> np.ndarray:
    """The logical matrix of an NZ tensor's flat memory."""
    lrows, lcols = shape[2] * FRACTAL_ROWS, shape[0] * shape[1] * shape[4]
    out = np.empty((lrows, lcols), flat.dtype)
    for lr in range(lrows):
        for lc in range(lcols):
            out[lr, lc] = flat[nz_gm_offset(lr, lc, shape, stride)]
    return out


def nz_tile_off(r: int, c: int, rows: int, kc0: int) -> int:
    """UB offset of ``(r, c)`` in an NZ tile of ``rows`` padded rows: ``(c / kC0) * (Rows * kC0) + r * kC0 +
    (c % kC0)``."""
    return (c // kc0) * (rows * kc0) + r * kc0 + (c % kc0)


def serial_last(table_bits, src_bits, idx, coalesce, oob):
    """``for i in order: table[remap(idx[i])] = src[i]`` on raw bits (Row: whole rows); an index the rule does
    not place (Skip, or UNDEFINED with ``strict=False``, out of range) writes nothing."""
    out = table_bits.copy()
    cap = out.shape[0]
    src_bits = src_bits.reshape(len(idx.reshape(-1)), -1) if coalesce == "row" else src_bits.reshape(-1)
    for i, raw in enumerate(idx.reshape(-1).tolist()):
        u = raw & 0xFFFFFFFF  # the ISA's cast: -1 is 4294967295
        if oob == "clamp":
            u = min(u, cap - 1)
        elif oob == "wrap":
            u %= cap
        elif u >= cap:
            continue
        out[u] = src_bits[i]
    return out
