"""The NZ fractal layout, for tiles and for GM tensors (MGATHER.md / MSCATTER.md, "NZ Layout (A2/A3)").

A fractal block is ``16 x kC0`` elements (32 bytes x 16 = 512 B), ``kC0 = 32 / sizeof(T)``.

* NZ tile (ColMajor bulk + RowMajor 512-byte fractals, ``Rows % 16 == 0``, ``Cols % kC0 == 0``)::

      offset(r, c) = (c // kC0) * (Rows * kC0) + r * kC0 + (c % kC0)

* NZ GM tensor, 5-D ``Shape<B, BCols, BRows, 16, kC0>`` with strides ``s0..s4``: logical rows
  ``BRows * 16``, logical cols ``B * BCols * kC0``, and logical ``(lr, lc)`` lives at::

      b, rest = divmod(lc, BCols * kC0);  bc, ci = divmod(rest, kC0);  br, ri = divmod(lr, 16)
      offset  = b*s0 + bc*s1 + br*s2 + ri*s3 + ci*s4
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

FRACTAL_NZ_ROW = 16
C0_SIZE_BYTE = 32
FRACTAL_BYTES = 512


def c0(itemsize: int) -> int:
    """Elements per 32-byte fractal row: ``kC0 = 32 / sizeof(T)``."""
    return C0_SIZE_BYTE // itemsize


def tile_offsets(rows: int, cols: int, kc0: int) -> npt.NDArray[Any]:
    """Storage offsets of every ``(r, c)`` of an NZ tile, shape ``(rows, cols)``."""
    r = np.arange(rows, dtype=np.int64)[:, None]
    c = np.arange(cols, dtype=np.int64)[None, :]
    return (c // kc0) * (rows * kc0) + r * kc0 + (c % kc0)


def gm_shape(logical_rows: int, logical_cols: int, itemsize: int, batches: int = 1) -> tuple[int, ...]:
    """The 5-D NZ shape ``(B, BCols, BRows, 16, kC0)`` of a ``logical_rows x logical_cols`` matrix."""
    kc0 = c0(itemsize)
    if logical_rows % FRACTAL_NZ_ROW or logical_cols % (kc0 * batches):
        raise ValueError(f"NZ: logical shape ({logical_rows}, {logical_cols}) must have rows % 16 == 0 and "
                         f"cols % (batches * kC0 = {batches * kc0}) == 0")
    return (batches, logical_cols // (kc0 * batches), logical_rows // FRACTAL_NZ_ROW, FRACTAL_NZ_ROW, kc0)


def packed_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major packed strides (in elements) of a 5-D shape: also the packed NZ strides."""
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


def gm_offsets(shape: Sequence[int], stride: Sequence[int], rows: int | None = None,
               cols: int | None = None) -> npt.NDArray[Any]:
    """Offsets of the logical ``(lr, lc)`` of an NZ GM tensor, shape ``(BRows*16, B*BCols*kC0)``, or of its
    top-left ``rows x cols`` block only."""
    b_n, bc_n, br_n, f_rows, kc0 = (int(s) for s in shape)
    s0, s1, s2, s3, s4 = (int(s) for s in stride)
    lr = np.arange(br_n * f_rows if rows is None else rows, dtype=np.int64)[:, None]
    lc = np.arange(b_n * bc_n * kc0 if cols is None else cols, dtype=np.int64)[None, :]
    b, rest = np.divmod(lc, bc_n * kc0)
    bc, ci = np.divmod(rest, kc0)
    br, ri = np.divmod(lr, f_rows)
    return b * s0 + bc * s1 + br * s2 + ri * s3 + ci * s4


def to_nz(matrix: npt.ArrayLike, batches: int = 1,
          stride: Sequence[int] | None = None) -> tuple[npt.NDArray[Any], tuple[int, ...], tuple[int, ...]]:
    """Lay a logical matrix out as an NZ GM buffer. Returns ``(flat, shape, stride)``.

    ``stride`` (5-D, elements) may pad the layout (stride-padded NZ); padding stays zero.
    """
    matrix = np.asarray(matrix)
    shape = gm_shape(matrix.shape[0], matrix.shape[1], matrix.dtype.itemsize, batches)
    stride = tuple(stride) if stride is not None else packed_strides(shape)
    offsets = gm_offsets(shape, stride)
    flat = np.zeros(int(offsets.max()) + 1, dtype=matrix.dtype)
    flat[offsets] = matrix
    return flat, shape, stride


def from_nz(flat: npt.ArrayLike, shape: Sequence[int], stride: Sequence[int] | None = None) -> npt.NDArray[Any]:
    """The logical matrix of an NZ GM buffer (the inverse of :func:`to_nz`)."""
    stride = tuple(stride) if stride is not None else packed_strides(shape)
    return np.asarray(flat).reshape(-1)[gm_offsets(shape, stride)]
