"""Element and index dtypes, and the per-target capability tables.

The capability tables are data: validation, error messages, test parameters and README's
matrix all read them (MGATHER.md / MSCATTER.md "Tile Constraints", MSCATTER.md "Atomic Type Support").
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import ml_dtypes
import numpy as np

from .enums import ScatterAtomicOp


@dataclass(frozen=True, eq=False)
class DType:
    """An element type as the ISA names it.

    ``numpy`` is what users see (``Tile.numpy()``): ml_dtypes types for bfloat16 / float8, and
    uint8 for hifloat8, which numpy cannot interpret and the emulator moves bit-exactly.
    ``bits`` is the unsigned integer of the same width: kernels move elements as raw bits.
    """

    name: str
    numpy: np.dtype[Any]
    kind: str  # "int", "uint", "float" or "opaque"
    itemsize: int = field(init=False)
    """Bytes per element."""
    bits: np.dtype[np.unsignedinteger[Any]] = field(init=False)
    """The unsigned integer dtype of the same width (:func:`unsigned`)."""

    def __post_init__(self) -> None:
        # plain attributes, not properties: every planned call reads them, and a property is a Python call each time
        object.__setattr__(self, "itemsize", self.numpy.itemsize)
        object.__setattr__(self, "bits", unsigned(self.numpy.itemsize))

    # One object per name (the module's table, ``resolve``): equality is identity, compared in C with no Python
    # call, and a copy or an unpickled DType (a Dask worker's) is the table's own object.
    def __reduce__(self) -> tuple:
        return (resolve, (self.name,)) if BY_NAME.get(self.name) is self else super().__reduce__()

    def __copy__(self) -> DType:
        return self

    def __deepcopy__(self, memo: dict) -> DType:
        return self

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"DType({self.name})"


UNSIGNED_OF_SIZE: dict[int, np.dtype[np.unsignedinteger[Any]]] = {
    size: np.dtype(f"uint{8 * size}") for size in (1, 2, 4, 8)}
"""Bytes -> the unsigned integer dtype of that width (:func:`unsigned`, as a table a planner indexes without a
call)."""


def unsigned(itemsize: int) -> np.dtype[np.unsignedinteger[Any]]:
    """The unsigned integer dtype of ``itemsize`` bytes (1, 2, 4 or 8): how kernels move raw bits."""
    return UNSIGNED_OF_SIZE[itemsize]


# name, numpy type, kind. The last three are A5 only: the 8-bit floats (ml_dtypes), and hifloat8, moved
# bit-exactly as uint8.
ALL_DTYPES: tuple[DType, ...] = tuple(DType(name, np.dtype(np_type), kind) for name, np_type, kind in (
    ("int8", np.int8, "int"), ("uint8", np.uint8, "uint"), ("int16", np.int16, "int"), ("uint16", np.uint16, "uint"),
    ("int32", np.int32, "int"), ("uint32", np.uint32, "uint"), ("float16", np.float16, "float"),
    ("bfloat16", ml_dtypes.bfloat16, "float"), ("float32", np.float32, "float"),
    ("float8_e4m3", ml_dtypes.float8_e4m3fn, "float"), ("float8_e5m2", ml_dtypes.float8_e5m2, "float"),
    ("hifloat8", np.uint8, "opaque"),
))
(int8, uint8, int16, uint16, int32, uint32, float16, bfloat16, float32,
 float8_e4m3, float8_e5m2, hifloat8) = ALL_DTYPES
BY_NAME = {d.name: d for d in ALL_DTYPES}
_ALIASES = {
    "half": float16, "fp16": float16, "f16": float16, "float": float32, "fp32": float32, "f32": float32,
    "bf16": bfloat16, "bfloat16_t": bfloat16, "float8_e4m3fn": float8_e4m3, "e4m3": float8_e4m3,
    "float8_e4m3_t": float8_e4m3, "e5m2": float8_e5m2, "float8_e5m2_t": float8_e5m2, "hif8": hifloat8,
    "hifloat8_t": hifloat8, "int8_t": int8, "uint8_t": uint8, "int16_t": int16, "uint16_t": uint16,
    "int32_t": int32, "uint32_t": uint32,
}

_BASE = (int8, uint8, int16, uint16, int32, uint32, float16, bfloat16, float32)

ELEMENT_DTYPES: dict[str, tuple[DType, ...]] = {
    # CPU simulator: the base nine; float8 too on __CCE_AICORE__ builds, which this golden models.
    "cpu": _BASE + (float8_e4m3, float8_e5m2),
    # A2/A3 vec-core: no float8 / hifloat8.
    "a2a3": _BASE,
    "a5": _BASE + (hifloat8, float8_e4m3, float8_e5m2),
}
"""Element dtypes each target accepts for MGATHER / MSCATTER tiles and tables."""

INDEX_DTYPES = (int32, uint32)
"""Index tiles are int32 or uint32 on every target; indices are cast to uint32 before any bounds logic."""

ATOMIC_DTYPES: dict[tuple[str, ScatterAtomicOp], tuple[DType, ...]] = {
    # CPU: the ABI contract (the simulator itself runs plain replace, last writer wins).
    ("cpu", ScatterAtomicOp.ADD): (int32, uint32, float32, float16),
    ("cpu", ScatterAtomicOp.MAX): (int32, float32),
    ("cpu", ScatterAtomicOp.MIN): (int32, float32),
    # A2/A3: signed integers only for Add (MTE3 atomic unit); no Max / Min on the SoC.
    ("a2a3", ScatterAtomicOp.ADD): (int8, int16, int32, float16, bfloat16, float32),
    ("a2a3", ScatterAtomicOp.MAX): (),
    ("a2a3", ScatterAtomicOp.MIN): (),
    # A5: SIMT atomicAdd / atomicMax / atomicMin.
    ("a5", ScatterAtomicOp.ADD): (int32, uint32, float32, float16, bfloat16),
    ("a5", ScatterAtomicOp.MAX): (int32, uint32, float32),
    ("a5", ScatterAtomicOp.MIN): (int32, uint32, float32),
}
"""(target, atomic op) -> the element dtypes that atomic op supports. NONE supports every element dtype."""


def atomic_dtypes(target: str, atomic: ScatterAtomicOp) -> tuple[DType, ...]:
    if atomic == ScatterAtomicOp.NONE:
        return ELEMENT_DTYPES[target]
    return ATOMIC_DTYPES[(target, atomic)]


DTypeLike: TypeAlias = DType | str | np.dtype[Any] | type[np.generic]
"""What the public functions accept for an element dtype: a :class:`DType`, a name or alias (``"float16"``,
``"half"``, ``"bf16"``, ``"hifloat8"``), or a numpy dtype or scalar type (``np.float32``, ``ml_dtypes.bfloat16``)."""


def resolve(dtype: DTypeLike) -> DType:
    """A :class:`DType` from a DType, a name ("float16", "half", "bf16", "hifloat8"), or a numpy dtype."""
    if isinstance(dtype, DType):
        return dtype
    if dtype is None:  # np.dtype(None) would be float64
        raise TypeError("dtype: None is not an element dtype; name one (e.g. 'float16') or pass a numpy dtype")
    if isinstance(dtype, str):
        key = dtype.strip().lower()
        if key in BY_NAME:
            return BY_NAME[key]
        if key in _ALIASES:
            return _ALIASES[key]
    try:
        npd = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype: cannot interpret {dtype!r} as an element dtype") from None
    for d in ALL_DTYPES:
        if d.kind != "opaque" and d.numpy == npd:
            return d
    names = ", ".join(d.name for d in ALL_DTYPES)
    raise TypeError(f"dtype: {npd} is not a PTO element dtype; expected one of {names}")


def from_typestr(typestr: str) -> np.dtype[Any]:
    """The numpy dtype of a ``__cuda_array_interface__`` typestr. ``"<V2"`` is bfloat16: PyTorch exports its
    bfloat16 tensors so, after ``ml_dtypes.bfloat16.dtype.str``."""
    if typestr == "<V2":
        return BY_NAME["bfloat16"].numpy
    return np.dtype(typestr)


def names(dtypes: Iterable[DType]) -> str:
    return ", ".join(d.name for d in dtypes)
