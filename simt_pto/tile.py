"""Tiles: padded ``Rows x Cols`` buffers in UB (VEC) or L1 (MAT) with a valid region.

A ``Tile<Loc, T, Rows, Cols, BLayout, ValidRow, ValidCol, SLayout, Fractal>`` of the ISA. Rows and
Cols are the padded (compile-time) extents; ``valid`` the runtime extents the ops walk. Storage is
one flat buffer of ``Rows * Cols`` elements; where element ``(r, c)`` lives depends on the layout:

* RowMajor + NoneBox: ``r * Cols + c``
* ColMajor + NoneBox: ``c * Rows + r``
* NZ (ColMajor + SLayout RowMajor + 512-byte fractal): see :mod:`simt_pto.nz`
"""
from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from . import dtypes as _dt
from . import nz
from .enums import BLayout, BLayoutLike, SLayout, SLayoutLike, TileType, TileTypeLike, from_any
from .errors import ConstraintError
from .tensor import plain_array


MAX_TILE_BYTES = 16 << 20
"""No tile is larger: UB is 192 KB (A2/A3) or 256 KB (A5), L1 a few MB."""


def _positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"Tile: {what} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ConstraintError("Tile", None, "extents >= 1", f"{what} must be >= 1, got {value}")
    return int(value)


class Tile:
    """A UB (``loc=VEC``) or L1 (``loc=MAT``) tile.

    ``valid=(valid_rows, valid_cols)`` is the region ops read and write (default: the whole tile),
    the ISA's dynamic ``-1`` valid extents. ``addr`` places the tile at a UB byte offset (TASSIGN);
    ops then check that their tiles do not overlap and fit the target's UB.
    """

    def __init__(self, dtype: _dt.DTypeLike, rows: int, cols: int, loc: TileTypeLike = TileType.VEC,
                 blayout: BLayoutLike = BLayout.ROW_MAJOR, slayout: SLayoutLike = SLayout.NONE_BOX,
                 fractal: int = 512, valid: tuple[int, int] | list[int] | None = None, addr: int | None = None,
                 name: str | None = None) -> None:
        self.dtype = _dt.resolve(dtype)
        self.rows = _positive_int(rows, "rows")
        self.cols = _positive_int(cols, "cols")
        self.loc = from_any(TileType, loc, "loc")
        self.blayout = from_any(BLayout, blayout, "blayout")
        self.slayout = from_any(SLayout, slayout, "slayout")
        if isinstance(fractal, bool) or not isinstance(fractal, (int, np.integer)):
            raise TypeError(f"Tile: fractal must be an int (bytes), got {fractal!r}")
        self.fractal = int(fractal)
        self.name = name
        self.valid_rows, self.valid_cols = self._valid_extents((self.rows, self.cols) if valid is None else valid)
        if addr is not None:
            if isinstance(addr, bool) or not isinstance(addr, (int, np.integer)) or addr < 0:
                raise TypeError(f"Tile: addr must be a non-negative int (a UB byte offset), got {addr!r}")
            if addr % 32:
                raise ConstraintError("Tile", None, "UB addresses are 32-byte aligned",
                                      f"addr {addr:#x} is not a multiple of 32")
            addr = int(addr)
        self.addr = addr
        self._check_layout()
        nbytes = self.rows * self.cols * self.dtype.itemsize
        if nbytes > MAX_TILE_BYTES:
            raise ConstraintError("Tile", None, f"a tile is on-chip memory (UB, L1): at most {MAX_TILE_BYTES} B",
                                  f"{self.rows} x {self.cols} {self.dtype} is {nbytes} B")
        self.data: npt.NDArray[Any] = np.zeros(self.rows * self.cols, dtype=self.dtype.numpy)
        """The flat storage, in storage order."""

    def _valid_extents(self, valid: tuple[int, int] | list[int]) -> tuple[int, int]:
        if not isinstance(valid, (tuple, list)) or len(valid) != 2:
            raise TypeError(f"Tile: valid must be (valid_rows, valid_cols), got {valid!r}")
        vr, vc = (_positive_int(v, "valid extent") for v in valid)
        if vr > self.rows or vc > self.cols:
            raise ConstraintError("Tile", None, "1 <= Valid <= Padded",
                                  f"valid ({vr}, {vc}) exceeds the padded shape ({self.rows}, {self.cols})")
        return vr, vc

    def zeroed(self, valid: tuple[int, int] | list[int]) -> Tile:
        """A new zeroed tile of this one's type, padded shape and layout, with the valid extents ``valid`` (checked,
        as the constructor does); the rest was validated when this tile was made. How a whole-array call makes the
        tiles of its validated plan (``tiling.tile_plan``) without validating each again."""
        tile = object.__new__(type(self))
        tile.__dict__.update(self.__dict__)
        tile.valid_rows, tile.valid_cols = self._valid_extents(valid)
        tile.data = np.zeros(self.rows * self.cols, dtype=self.dtype.numpy)
        return tile

    # -- layout -------------------------------------------------------------------------------
    @property
    def is_nz(self) -> bool:
        """ColMajor bulk + RowMajor 512-byte fractals: the NZ tile of A2/A3 NZ paths and of L1 MAT tiles."""
        return self.blayout == BLayout.COL_MAJOR and self.slayout == SLayout.ROW_MAJOR

    @property
    def c0(self) -> int:
        return nz.c0(self.dtype.itemsize)

    def _check_layout(self) -> None:
        item = self.dtype.itemsize
        if self.slayout == SLayout.NONE_BOX:
            # The Tile system's 32-byte burst rule on the contiguous dimension (TLOAD / TSTORE).
            contiguous, what = ((self.cols, "Cols") if self.blayout == BLayout.ROW_MAJOR else (self.rows, "Rows"))
            if contiguous * item % 32:
                raise ConstraintError(
                    "Tile", None, "32-byte aligned contiguous dimension",
                    f"{self.blayout.name} {self.dtype} tile: padded {what} * sizeof(T) = {contiguous} * {item} = "
                    f"{contiguous * item} bytes is not a multiple of 32 (minimum {what} for {self.dtype}: {32 // item})")
        elif self.is_nz:
            if self.fractal != nz.FRACTAL_BYTES:
                raise ConstraintError("Tile", None, "NZ fractal size == 512",
                                      f"NZ tile needs fractal=512, got {self.fractal}")
            if self.cols % self.c0 or self.rows % nz.FRACTAL_NZ_ROW:
                raise ConstraintError(
                    "Tile", None, "NZ tile: Cols % kC0 == 0 and Rows % 16 == 0",
                    f"NZ {self.dtype} tile ({self.rows}, {self.cols}): kC0 = {self.c0}; "
                    f"Cols % kC0 = {self.cols % self.c0}, Rows % 16 = {self.rows % nz.FRACTAL_NZ_ROW}")
        else:
            raise ConstraintError("Tile", None, "supported tile layouts",
                                  f"{self.blayout.name} + SLayout {self.slayout.name} is not a layout MGATHER / "
                                  "MSCATTER use (RowMajor or ColMajor + NoneBox, or NZ: ColMajor + SLayout RowMajor)")

    @property
    def strides(self) -> tuple[int, int]:
        """``(row_stride, col_stride)`` in elements of a NoneBox tile (``tile_offset_2d``)."""
        if self.slayout != SLayout.NONE_BOX:
            raise ValueError("strides: NZ tiles have no 2-D strides; use offsets()")
        return (self.cols, 1) if self.blayout == BLayout.ROW_MAJOR else (1, self.rows)

    def grid(self) -> npt.NDArray[Any]:
        """The padded tile as a ``(rows, cols)`` view of its storage (no copy): writes go to the tile.
        NoneBox layouts only; an NZ tile's elements do not form a strided grid (use :meth:`offsets`)."""
        if self.slayout != SLayout.NONE_BOX:
            raise ValueError("grid: NZ tiles have no strided 2-D view; use offsets()")
        if self.blayout == BLayout.ROW_MAJOR:
            return self.data.reshape(self.rows, self.cols)
        return self.data.reshape(self.cols, self.rows).T

    def offsets(self) -> npt.NDArray[Any]:
        """Storage offset of every ``(r, c)`` of the padded tile, shape ``(rows, cols)``."""
        if self.is_nz:
            return nz.tile_offsets(self.rows, self.cols, self.c0)
        rs, cs = self.strides
        return np.arange(self.rows, dtype=np.int64)[:, None] * rs + np.arange(self.cols, dtype=np.int64)[None, :] * cs

    @property
    def nbytes(self) -> int:
        return self.rows * self.cols * self.dtype.itemsize

    @property
    def valid(self) -> tuple[int, int]:
        return self.valid_rows, self.valid_cols

    def describe(self) -> str:
        where = f" @ {self.addr:#x}" if self.addr is not None else ""
        name = f"{self.name} " if self.name else ""
        return (f"{name}Tile<{self.loc.name}, {self.dtype}, {self.rows}x{self.cols}, {self.blayout.name}"
                f"{', NZ' if self.is_nz else ''}, valid {self.valid_rows}x{self.valid_cols}>{where}")

    __repr__ = describe

    # -- contents -----------------------------------------------------------------------------
    def numpy(self) -> npt.NDArray[Any]:
        """The logical ``(rows, cols)`` contents of the whole padded tile (a copy)."""
        return self.data[self.offsets()] if self.is_nz else self.grid().copy()

    def valid_numpy(self) -> npt.NDArray[Any]:
        """The logical ``(valid_rows, valid_cols)`` contents (a copy)."""
        whole = self.data[self.offsets()] if self.is_nz else self.grid()
        return whole[: self.valid_rows, : self.valid_cols].copy()

    def fill(self, value: npt.ArrayLike) -> Tile:
        """Set every element of the padded tile to ``value`` (converted to the element dtype; a value the
        dtype cannot hold is refused, see :func:`_cast`)."""
        self.data[...] = _cast(_values(value, "Tile.fill"), self.dtype, "Tile.fill")
        return self

    def set(self, array: npt.ArrayLike) -> Tile:
        """Write a logical array into the tile's top-left corner (at most ``rows x cols``)."""
        array = _values(array, "Tile.set")
        if array.ndim == 1:
            array = array[None, :]
        if array.ndim != 2 or array.shape[0] > self.rows or array.shape[1] > self.cols:
            raise ConstraintError("Tile.set", None, "array fits the padded tile",
                                  f"array of shape {array.shape} does not fit tile ({self.rows}, {self.cols})")
        rows, cols = array.shape
        if self.is_nz:
            self.data[self.offsets()[:rows, :cols]] = _cast(array, self.dtype, "Tile.set")
        else:
            self.grid()[:rows, :cols] = _cast(array, self.dtype, "Tile.set")
        return self

    @classmethod
    def from_array(cls, array: npt.ArrayLike, rows: int | None = None, cols: int | None = None, *,
                   dtype: _dt.DTypeLike | None = None, loc: TileTypeLike = TileType.VEC,
                   blayout: BLayoutLike = BLayout.ROW_MAJOR, slayout: SLayoutLike = SLayout.NONE_BOX,
                   fractal: int = 512, valid: tuple[int, int] | list[int] | None = None, addr: int | None = None,
                   name: str | None = None) -> Tile:
        """A tile holding ``array`` (2-D, or 1-D as one row), padded with zeros up to ``(rows, cols)``.

        ``valid`` defaults to the array's shape. ``dtype`` defaults to the array's dtype
        (pass ``dtype="hifloat8"`` for a uint8 array of hifloat8 bits).
        """
        array = _values(array, "Tile.from_array")
        if array.ndim == 1:
            array = array[None, :]
        if array.ndim != 2:
            raise TypeError(f"Tile.from_array: expected a 1-D or 2-D array, got {array.ndim}-D")
        dt = _dt.resolve(dtype if dtype is not None else array.dtype)
        rows = array.shape[0] if rows is None else rows
        cols = array.shape[1] if cols is None else cols
        tile = cls(dt, rows, cols, loc=loc, blayout=blayout, slayout=slayout, fractal=fractal,
                   valid=valid if valid is not None else array.shape, addr=addr, name=name)
        return tile.set(array)


def _values(values: npt.ArrayLike, what: str) -> npt.NDArray[Any]:
    """``values`` as a numpy array (a masked array refused: :func:`simt_pto.tensor.plain_array`)."""
    return plain_array(values, what) if isinstance(values, np.ndarray) else np.asarray(values)


def _cast(array: npt.NDArray[Any], dtype: _dt.DType, what: str = "Tile") -> npt.NDArray[Any]:
    """``array`` in the element dtype. A cast that would change a value beyond rounding is refused: an
    integer outside the integer dtype's range, a NaN or infinity into an integer dtype, a finite value beyond
    a float dtype's range (``0.1`` into float16 rounds and ``1.7`` into int32 truncates, as casts do)."""
    if dtype.kind == "opaque":
        if array.dtype.itemsize != dtype.itemsize or array.dtype.kind not in "ui":
            raise TypeError(f"{dtype}: pass the raw bits as a {dtype.bits} array, got {array.dtype}")
        return array.view(dtype.numpy) if array.dtype.kind == "u" else array.astype(dtype.numpy)
    if array.dtype.kind not in "biuf" and not (array.dtype.kind == "V" and array.dtype.itemsize in (1, 2)):
        raise TypeError(f"{what}: cannot store {array.dtype} values in a {dtype} tile")
    if array.size and array.dtype != dtype.numpy:
        _check_representable(array, dtype, what)
    return array.astype(dtype.numpy, copy=False)


def _check_representable(array: npt.NDArray[Any], dtype: _dt.DType, what: str) -> None:
    target = np.dtype(dtype.numpy)
    if target.kind in "iu":
        if array.dtype.kind == "f" or array.dtype.kind == "V":
            values = array.astype(np.float64)
            if not np.isfinite(values).all():
                raise ConstraintError(what, None, f"values fit {dtype}", f"NaN or infinity cannot be stored as {dtype}")
            low, high = np.trunc(values.min()), np.trunc(values.max())  # a fraction truncates, as a cast does
        elif array.dtype.kind in "iu":
            low, high = int(array.min()), int(array.max())
        else:
            return
        info = np.iinfo(target)
        if low < info.min or high > info.max:
            bad = low if low < info.min else high
            raise ConstraintError(what, None, f"values fit {dtype}", f"{bad} is outside [{info.min}, {info.max}]")
    elif target.kind == "f" or dtype.kind == "float":
        if array.dtype.kind not in "iuf":
            return
        values = array.astype(np.float64)
        finite = values[np.isfinite(values)]
        limit = float(_dt_max(dtype))
        if finite.size and np.abs(finite).max() > limit:
            raise ConstraintError(what, None, f"values fit {dtype}",
                                  f"{float(finite[np.abs(finite) > limit][0])!r} is beyond the largest {dtype} ({limit!r})")


def _dt_max(dtype: _dt.DType) -> Any:
    import ml_dtypes
    try:
        return np.finfo(dtype.numpy).max
    except ValueError:
        return ml_dtypes.finfo(dtype.numpy).max
