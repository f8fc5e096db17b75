"""The A5 semantics of MGATHER / MSCATTER in plain numpy: the reference every backend is checked against.

Written from MGATHER.md / MSCATTER.md, not from the kernels: plain Python loops (and, for the whole-array
checks, numpy one-liners) over raw bits (unsigned integers of the element's width), so float payloads, NaNs,
the float8 formats and the opaque hifloat8 move exactly as the hardware moves them. It imports nothing of
the library: ``simt-pto selftest`` and the test suite use it as an independent statement of the spec.

What it states, and where in the spec:

* **Index remap** ("Out-of-Bounds Behaviour"): every index is cast to uint32 first (``-1`` is
  ``4294967295``), then GatherOOB / ScatterOOB apply against ``capacity`` (TableRows in Row mode,
  TableSize = prod(Shape[0..4]) in Elem mode): CLAMP ``min(u, capacity - 1)``; WRAP ``u % capacity``;
  ZERO (gather) and SKIP (scatter) "no slot"; UNDEFINED promises nothing for an out-of-range index (the
  emulator refuses it, or with ``strict=False`` treats it as "no slot").
* **Gather**: Row ``dst[r, :] = table[slot(idx[r]) * validCols + (0 .. C-1)]`` (A5 Row addresses the table
  as packed ND with row stride validCols); Elem ``dst[i, j] = table[slot(idx[i, j])]``; "no slot" gives
  ``T(0)``.
* **Scatter** ("Conflict Resolution", "Atomic Type Support"): Conflict::Last and the atomics are the serial
  loop ``for i in range(N): table[slot(idx[i])] op= src[i]`` in increasing flat source order (never
  numpy's ``table[idx] = src``, which promises no order for repeated indices). Atomic Add / Max / Min run
  in the element type: integers wrap; float32 rounds each add; float16 / bfloat16 round each add from the
  float32 sum (exact: float32 holds >= 2p + 2 bits of either type). Float Max / Min keep the larger / smaller
  operand in IEEE 754 totalOrder (:func:`total_order_key`; the spec leaves NaN and signed zero open, this is
  what the A5 kernels' integer atomics on the bit patterns do). Conflict::Default (racing stores) leaves
  each written slot holding one of its writers' values. A float atomic Add in any order lies within
  ``(k + 1) * eps * (|t0| + sum |c_i|)`` of the exact sum at a slot with ``k`` contributions, plus the
  smallest subnormal (:func:`float_add_bound`).
* **UB tiles** ("Tile Constraints"): element ``(r, c)`` of a RowMajor tile is at ``r * Cols + c``, of a
  ColMajor tile at ``c * Rows + r`` (``tile_offset_2d``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, SupportsInt

import ml_dtypes
import numpy as np
import numpy.typing as npt

ELEMENT_TYPES = {
    "int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16, "int32": np.int32,
    "uint32": np.uint32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32,
    "float8_e4m3": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2,
    "hifloat8": np.uint8,  # opaque: numpy cannot interpret it; moved as raw bits
}
"""Element dtype name (as the spec names it) -> the numpy type values are built in."""

UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
"""``eps`` of :func:`float_add_bound`: half the distance from 1 to the next float (round to nearest)."""

SMALLEST_SUBNORMAL = {"float32": 2.0 ** -149, "float16": 2.0 ** -24, "bfloat16": 2.0 ** -133}


# -- element types -----------------------------------------------------------------------------------------------

def itemsize(dtype: str) -> int:
    return np.dtype(ELEMENT_TYPES[dtype]).itemsize


def bits_type(dtype: str) -> np.dtype[Any]:
    """The unsigned integer type of the element's width: what the reference computes on."""
    return np.dtype(f"uint{8 * itemsize(dtype)}")


def kind(dtype: str) -> str:
    """``"int"``, ``"uint"``, ``"float"`` or ``"opaque"`` (hifloat8: moved, never computed on)."""
    if dtype == "hifloat8":
        return "opaque"
    return {"i": "int", "u": "uint"}.get(np.dtype(ELEMENT_TYPES[dtype]).kind, "float")


def to_bits(values: npt.ArrayLike, dtype: str) -> npt.NDArray[Any]:
    """Values (Python numbers or an array) converted to ``dtype`` and viewed as raw bits."""
    return np.asarray(values).astype(ELEMENT_TYPES[dtype]).view(bits_type(dtype))


def from_bits(bits: npt.ArrayLike, dtype: str) -> npt.NDArray[Any]:
    return np.asarray(bits, dtype=bits_type(dtype)).view(ELEMENT_TYPES[dtype])


# -- index remap ("Out-of-Bounds Behaviour") ---------------------------------------------------------------------

def u32(index: SupportsInt) -> int:
    """The ISA's cast of an index to uint32."""
    return int(index) & 0xFFFFFFFF


def slot(index: SupportsInt, capacity: int, policy: str) -> int | None:
    """The slot an index reaches under ``policy`` (``"clamp"``, ``"wrap"``, ``"zero"``, ``"skip"``,
    ``"undefined"``), or None for "no slot"."""
    u = u32(index)
    if policy == "clamp":
        return min(u, capacity - 1)
    if policy == "wrap":
        return u % capacity
    return u if u < capacity else None


def slots(indices: npt.ArrayLike, capacity: int, policy: str) -> npt.NDArray[Any]:
    """:func:`slot` over an array at once (int64; -1 for "no slot"): the whole-array form."""
    u = np.asarray(indices).astype(np.int64) & 0xFFFFFFFF
    if policy == "clamp":
        return np.minimum(u, capacity - 1)
    if policy == "wrap":
        return u % capacity
    return np.where(u < capacity, u, -1)


def tile_offset(blayout: str, rows: int, cols: int, r: int, c: int) -> int:
    """``tile_offset_2d``: RowMajor ``r * Cols + c``; ColMajor ``c * Rows + r`` (padded ``rows x cols``)."""
    return r * cols + c if blayout == "row_major" else c * rows + r


def nz_tile_offset(rows: int, kc0: int, r: int, c: int) -> int:
    """Offset of ``(r, c)`` in an NZ tile (L1 ``TileType::Mat``, ColMajor + 512-byte RowMajor fractals) of
    ``rows`` padded rows: ``(c / kC0) * (Rows * kC0) + r * kC0 + (c % kC0)``."""
    return (c // kc0) * (rows * kc0) + r * kc0 + (c % kc0)


# -- gather ------------------------------------------------------------------------------------------------------

def gather_row(table_bits: npt.NDArray[Any], capacity: int, row_len: int, indices: Sequence[int] | npt.NDArray[Any],
               policy: str) -> npt.NDArray[Any]:
    """``dst[r, :] = table[slot(idx[r]), :]`` with row stride ``row_len`` (A5: validCols); a missing slot
    gives a row of ``T(0)``."""
    out = np.zeros((len(indices), row_len), dtype=table_bits.dtype)
    for r, index in enumerate(indices):
        s = slot(index, capacity, policy)
        if s is not None:
            for c in range(row_len):
                out[r, c] = table_bits[s * row_len + c]
    return out


def gather_elem(table_bits: npt.NDArray[Any], capacity: int, indices: npt.ArrayLike, policy: str) -> npt.NDArray[Any]:
    """``dst[i, j] = table[slot(idx[i, j])]``; a missing slot gives ``T(0)``."""
    indices = np.atleast_2d(indices)
    out = np.zeros(indices.shape, dtype=table_bits.dtype)
    for i in range(indices.shape[0]):
        for j in range(indices.shape[1]):
            s = slot(indices[i, j], capacity, policy)
            if s is not None:
                out[i, j] = table_bits[s]
    return out


# -- scatter -----------------------------------------------------------------------------------------------------

def _value(bits: SupportsInt, dtype: str):
    v = from_bits(np.array([bits]), dtype)[0]
    return int(v) if kind(dtype) in ("int", "uint") else v


def total_order_key(bits: SupportsInt, dtype: str) -> int:
    """An integer that orders a float's raw bits as IEEE 754 totalOrder does: -NaN (the larger payload first)
    < -inf < negative numbers < -0.0 < +0.0 < positive numbers < +inf < +NaN (the larger payload last).

    The sign-magnitude bit pattern read as a number: ``magnitude`` with the sign clear, ``-1 - magnitude`` with
    it set. Distinct bit patterns get distinct keys, so a Max / Min on keys picks one operand's exact bits
    whichever order the two come in. This is the order of the A5 float32 Max / Min (MSCATTER.md leaves NaN and
    signed zero open; the kernels' ``atomicMax`` on int32 for a value with the sign clear and ``atomicMin`` on
    uint32 for one with it set compare exactly these keys)."""
    width = 8 * itemsize(dtype)
    bits = int(bits) & ((1 << width) - 1)
    magnitude = bits & ((1 << (width - 1)) - 1)
    return -1 - magnitude if bits >> (width - 1) else magnitude


def combine(dtype: str, atomic: str, old_bits: SupportsInt, new_bits: SupportsInt) -> int:
    """One ``table[e] = atom(table[e], v)`` in the element type, raw bits in and out. Float Max / Min keep the
    operand that is larger / smaller in :func:`total_order_key`'s order (Max(1, +NaN) = +NaN, Max(1, -NaN) = 1,
    Min(1, +NaN) = 1, Min(1, -NaN) = -NaN, Max(-0.0, +0.0) = +0.0, Min(-0.0, +0.0) = -0.0, in either order)."""
    if atomic == "none":
        return int(new_bits)
    if atomic in ("max", "min") and kind(dtype) == "float":
        old_key, new_key = total_order_key(old_bits, dtype), total_order_key(new_bits, dtype)
        keep_new = new_key > old_key if atomic == "max" else new_key < old_key
        return int(new_bits if keep_new else old_bits)
    a, b = _value(old_bits, dtype), _value(new_bits, dtype)
    if atomic == "add":
        if kind(dtype) in ("int", "uint"):
            return (a + b) & ((1 << 8 * itemsize(dtype)) - 1)
        with np.errstate(over="ignore"):
            if dtype == "float32":
                result = np.float32(a) + np.float32(b)
            else:
                result = (np.float32(a) + np.float32(b)).astype(ELEMENT_TYPES[dtype])
    elif atomic == "max":
        result = max(a, b)
    elif atomic == "min":
        result = min(a, b)
    else:
        raise ValueError(atomic)
    return int(to_bits(np.array([result]), dtype)[0])


def writers(coalesce: str, indices: Sequence[int] | npt.NDArray[Any], src_bits: npt.ArrayLike, capacity: int,
            policy: str, row_len: int = 0) -> list[tuple[int, int]]:
    """The writes of a scatter in flat source order: a list of (table element, raw bits)."""
    src_bits = np.atleast_2d(src_bits)
    out: list[tuple[int, int]] = []
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


def scatter(table_bits: npt.ArrayLike, dtype: str, coalesce: str, indices: Sequence[int] | npt.NDArray[Any],
            src_bits: npt.ArrayLike, capacity: int, policy: str, atomic: str = "none",
            row_len: int = 0) -> npt.NDArray[Any]:
    """The serial loop ``for i in range(N): table[slot(idx[i])] op= src[i]`` (a new raw-bit array)."""
    table = np.array(table_bits, copy=True)
    for e, v in writers(coalesce, indices, src_bits, capacity, policy, row_len):
        table[e] = combine(dtype, atomic, int(table[e]), v)
    return table


def candidates(coalesce: str, indices: Sequence[int] | npt.NDArray[Any], src_bits: npt.ArrayLike, capacity: int,
               policy: str, row_len: int = 0) -> dict[int, set[int]]:
    """Element -> the set of raw bits that may survive a racing (Conflict::Default) store."""
    out: dict[int, set[int]] = {}
    for e, v in writers(coalesce, indices, src_bits, capacity, policy, row_len):
        out.setdefault(e, set()).add(v)
    return out


def float_add_bound(dtype: str, initial_bits: npt.ArrayLike,
                    contributions: Sequence[tuple[int, int]]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """(exact sum, bound) per element of a float atomic Add in any order: ``contributions`` is the list of
    (element, raw bits) of :func:`writers`; the bound is ``(k + 1) * eps * (|t0| + sum |c_i|)`` plus the
    smallest subnormal, ``k`` the contributions into the element (each of the ``k`` adds rounds once, and the
    result is read back in the element type)."""
    exact = from_bits(initial_bits, dtype).astype(np.float64)
    magnitude, count = np.abs(exact), np.zeros(exact.size, np.int64)
    if contributions:
        elements = np.array([e for e, _ in contributions], np.int64)
        values = from_bits(np.array([v for _, v in contributions]), dtype).astype(np.float64)
        np.add.at(exact, elements, values)
        np.add.at(magnitude, elements, np.abs(values))
        np.add.at(count, elements, 1)
    return exact, (count + 1) * UNIT_ROUNDOFF[dtype] * magnitude + SMALLEST_SUBNORMAL[dtype]


def scatter_mismatches(got_bits: npt.ArrayLike, initial_bits: npt.ArrayLike, dtype: str, coalesce: str,
                       indices: Sequence[int] | npt.NDArray[Any], src_bits: npt.ArrayLike, capacity: int, policy: str,
                       atomic: str, conflict: str, row_len: int = 0) -> list[str]:
    """What is wrong with a scatter's result ``got_bits`` (raw bits of the whole table), as readable lines;
    empty when it is right. Conflict::Last and the integer / Max / Min atomics are bitwise; a float Add is
    within :func:`float_add_bound` (bitwise where an element has at most one contribution);
    Conflict::Default leaves each written element holding one of its writers."""
    got_bits, initial_bits = np.asarray(got_bits), np.asarray(initial_bits)
    writes = writers(coalesce, indices, src_bits, capacity, policy, row_len)
    if atomic == "none" and conflict == "default":
        allowed: dict[int, set[int]] = {}
        for e, v in writes:
            allowed.setdefault(e, set()).add(v)
        bad = []
        for e in range(got_bits.size):
            ok = int(got_bits[e]) in allowed[e] if e in allowed else got_bits[e] == initial_bits[e]
            if not ok:
                want = sorted(map(hex, allowed[e])) if e in allowed else hex(int(initial_bits[e]))
                bad.append(f"element {e}: {hex(int(got_bits[e]))}, expected {want}")
        return bad
    expected = scatter(initial_bits, dtype, coalesce, indices, src_bits, capacity, policy, atomic, row_len)
    if atomic == "add" and kind(dtype) == "float":
        exact, bound = float_add_bound(dtype, initial_bits, writes)
        count = np.bincount(np.array([e for e, _ in writes], np.int64), minlength=got_bits.size)
        got = from_bits(got_bits, dtype).astype(np.float64)
        with np.errstate(invalid="ignore"):
            off = np.where(count > 1, ~(np.abs(got - exact) <= bound), got_bits != expected)
        return [f"element {e}: {got[e]!r}, exact sum {exact[e]!r} +- {bound[e]:.3g} ({count[e]} adds)"
                for e in np.flatnonzero(off)]
    return [f"element {e}: {hex(int(got_bits[e]))}, expected {hex(int(expected[e]))}"
            for e in np.flatnonzero(got_bits != expected)]


# -- whole arrays (numpy one-liners, for sizes a Python loop cannot reach) --------------------------------------

def last_writer_scatter(table: npt.ArrayLike, slots_: npt.NDArray[Any], src: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Conflict::Last over whole arrays: ``for i in range(N): table[slots_[i]] = src[i]`` (slots ``< 0`` are
    skipped), computed as "the largest source position per slot" so that no order of numpy's is relied on.
    ``table`` is a new array; Row sources are ``(N, C)`` over a ``(rows, C)`` table."""
    out = np.array(table, copy=True)
    keep = np.flatnonzero(slots_ >= 0)
    reversed_slots = slots_[keep][::-1]
    unique, first_in_reversed = np.unique(reversed_slots, return_index=True)
    last_position = keep[::-1][first_in_reversed]
    out[unique] = src[last_position]
    return out


__all__ = ["ELEMENT_TYPES", "UNIT_ROUNDOFF", "bits_type", "candidates", "combine", "float_add_bound", "from_bits",
           "gather_elem", "gather_row", "itemsize", "kind", "last_writer_scatter", "nz_tile_offset", "scatter", "scatter_mismatches",
           "slot", "slots", "tile_offset", "to_bits", "total_order_key", "u32", "writers"]
