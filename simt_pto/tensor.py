"""GlobalTensor: a view of GM memory with a 5-D shape, strides (in elements) and a layout.

Wraps a numpy array, or without copying a device array (anything with ``__cuda_array_interface__``:
CuPy, PyTorch CUDA tensors, Numba device arrays). The wrapped memory must be C-contiguous: shape and
stride then describe how the op sees it (stride-padded ND tables, NZ block layouts), and every
offset they can produce is checked to lie inside the wrapped memory. A PyTorch tensor is used in place as
torch reads it or refused (:func:`simt_pto.torch_rules.in_place`: a view with a lazy negation is refused, a tensor
that requires grad is wrapped detached), and an op that writes it keeps torch's in-place rules and bumps its
version counter (:attr:`GlobalTensor.torch_tensor`). Memory in the other byte order is refused. A numpy array is
read as the plain array over its memory (:func:`plain_array`: an ndarray subclass as a plain array, a masked array
refused).
"""
from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from . import dtypes as _dt
from . import nz, torch_rules
from .backend import imported
from .enums import Layout, LayoutLike, from_any
from .errors import ConstraintError


class CudaArray(Protocol):
    """Device memory a :class:`GlobalTensor` wraps without copying: anything that exports
    ``__cuda_array_interface__`` (CuPy arrays, PyTorch CUDA tensors, Numba device arrays)."""

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...


def plain_array(array: npt.NDArray[Any], what: str) -> npt.NDArray[Any]:
    """``array``, a numpy array, as the plain array over its memory: an ndarray subclass (``np.matrix``, whose
    ``reshape(-1)`` stays 2-D) is viewed as ``np.ndarray``, so every flat view of it is what it says. A masked array
    is refused (TypeError naming ``what``): its mask says which elements hold no value, and a gather or scatter
    would read and write those as any other, leaving the mask as it was (JAX refuses masked arrays too)."""
    if type(array) is np.ndarray:
        return array
    ma = sys.modules.get("numpy.ma")  # (no masked array exists in a process that has not imported numpy.ma)
    if ma is not None and isinstance(array, ma.MaskedArray):
        raise TypeError(f"{what}: a numpy masked array, whose mask would be ignored (its masked elements read and "
                        "written as any other, the mask left as it was): pass array.filled(value), the values with "
                        "one in the masked places, or array.data, its memory as it is")
    return array.view(np.ndarray)


def is_device_array(obj: object) -> bool:
    return hasattr(obj, "__cuda_array_interface__") and not isinstance(obj, np.ndarray)


def _pad5(values: object, what: str) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, (tuple, list)):
        raise TypeError(f"GlobalTensor: {what} must be a tuple of 1 to 5 ints, got {values!r}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"GlobalTensor: {what} must be a tuple of ints, got {values!r} ({v!r} is a "
                            f"{type(v).__name__})")
    values = tuple(int(v) for v in values)
    if not 1 <= len(values) <= 5:
        raise ConstraintError("GlobalTensor", None, "5-D shape / stride",
                              f"{what} must have 1 to 5 entries, got {len(values)}")
    return (1,) * (5 - len(values)) + values


def default_strides(shape: Sequence[int], layout: Layout) -> tuple[int, ...]:
    """Packed strides of a 5-D shape: row-major (ND, NZ), or column-major in the last two dims (DN)."""
    if layout == Layout.DN:
        s3, s4 = 1, shape[3]
        s2 = shape[3] * shape[4]
        s1 = s2 * shape[2]
        return (s1 * shape[1], s1, s2, s3, s4)
    return nz.packed_strides(shape)


class GlobalTensor:
    """``GlobalTensor<T, Shape<...>, Stride<...>, Layout>`` over ``array``.

    ``shape``/``stride`` default to the array's own: ``(1, 1, 1, R, C)`` for a 2-D array and
    ``(1, 1, 1, 1, N)`` for a 1-D one. ``dtype`` reinterprets the elements (``"hifloat8"`` over uint8).
    """

    def __init__(self, array: npt.NDArray[Any] | CudaArray, shape: tuple[int, ...] | list[int] | None = None,
                 stride: tuple[int, ...] | list[int] | None = None, layout: LayoutLike = Layout.ND,
                 dtype: _dt.DTypeLike | None = None) -> None:
        self.layout = from_any(Layout, layout, "layout")
        self.torch_tensor: Any = None
        """The PyTorch tensor wrapped, if one is: an op that writes it keeps torch's in-place rules
        (:func:`simt_pto.torch_rules.writing`)."""
        if torch_rules.torch_of(array) is not None:  # (before its __cuda_array_interface__, which grad refuses)
            self.torch_tensor, array = array, torch_rules.in_place(array, "GlobalTensor array", "GlobalTensor")
        self.on_device = is_device_array(array)
        if self.on_device:
            info = array.__cuda_array_interface__
            np_dtype = _dt.from_typestr(info["typestr"])
            arr_shape = tuple(info["shape"])
            if info.get("strides") is not None:
                expected = nz.packed_strides(arr_shape) if arr_shape else ()
                if tuple(s // np_dtype.itemsize for s in info["strides"]) != tuple(expected):
                    raise ConstraintError("GlobalTensor", None, "C-contiguous memory",
                                          "the device array must be C-contiguous")
        else:
            if not isinstance(array, np.ndarray):
                raise TypeError(f"GlobalTensor: expected a numpy or device array, got {type(array).__name__}")
            array = plain_array(array, "GlobalTensor array")
            if not array.flags.c_contiguous:
                raise ConstraintError("GlobalTensor", None, "C-contiguous memory",
                                      "the array must be C-contiguous (describe padding with shape/stride instead)")
            np_dtype, arr_shape = array.dtype, array.shape
        if not np_dtype.isnative:
            raise ConstraintError("GlobalTensor", None, "memory in the host's byte order",
                                  f"the array has dtype {np_dtype.str} (the other byte order); the tile ops use it in "
                                  "place: pass a converted copy (array.astype(array.dtype.newbyteorder('=')))")
        self.array: npt.NDArray[Any] | CudaArray = array
        self.memory_dtype: np.dtype = np_dtype
        """The dtype of the wrapped memory as its array has it; :attr:`dtype` may reinterpret it (``"float32"`` over
        int32 memory). A kept launch hands the memory over as it is, so a tile op's signature holds both."""
        self.dtype = _dt.resolve(dtype if dtype is not None else np_dtype)
        if self.dtype.itemsize != np_dtype.itemsize:
            raise ConstraintError("GlobalTensor", None, "dtype matches the memory",
                                  f"dtype {self.dtype} ({self.dtype.itemsize} B) over {np_dtype} memory")
        self._elements = math.prod(arr_shape)
        if shape is None:
            if len(arr_shape) > 5:
                raise ConstraintError("GlobalTensor", None, "5-D shape / stride", f"array is {len(arr_shape)}-D")
            shape = arr_shape if arr_shape else (1,)
        self.shape = _pad5(shape, "shape")
        if min(self.shape) < 1:
            raise ConstraintError("GlobalTensor", None, "extents >= 1", f"shape {self.shape} has an empty dimension")
        self.stride = _pad5(stride, "stride") if stride is not None else default_strides(self.shape, self.layout)
        if min(self.stride) < 0:
            raise ConstraintError("GlobalTensor", None, "non-negative strides", f"stride {self.stride}")
        reach = sum((n - 1) * s for n, s in zip(self.shape, self.stride)) + 1
        if reach > self.size:
            raise ConstraintError(
                "GlobalTensor", None, "shape / stride stay inside the memory",
                f"shape {self.shape} with stride {self.stride} reaches element {reach - 1}, "
                f"but the array holds {self.size} elements")
        self.reach: int = reach
        """One past the largest element offset shape and stride can address."""

    @property
    def size(self) -> int:
        """Elements of the wrapped memory, read at each use from a numpy array: one shrunk in place after the tensor
        was made (``ndarray.resize(..., refcheck=False)``, which numpy leaves to the caller to make safe) changes the
        tile ops' signature, and its call is refused by the rule that holds shape and stride inside the memory."""
        array = self.array
        return array.size if type(array) is np.ndarray else self._elements

    def repointed(self, array: npt.NDArray[Any] | CudaArray | None) -> GlobalTensor:
        """This validated tensor over ``array``, memory of the same kind (host or device), dtype, shape and
        C-contiguity as the memory it wraps: nothing is checked again (the whole-array call cache re-points the
        table it validated once at each call's memory). ``None`` gives the tensor without memory that a cache keeps,
        so that it holds no caller's array."""
        tensor = object.__new__(GlobalTensor)
        tensor.__dict__.update(self.__dict__, array=array,
                               torch_tensor=array if torch_rules.torch_of(array) is not None else None)
        return tensor

    @property
    def writeable(self) -> bool:
        """False for a read-only numpy array (a table MSCATTER writes, a scratch MGATHER stages through)."""
        return self.on_device or bool(self.array.flags.writeable)

    # -- memory --------------------------------------------------------------------------------
    @property
    def flat(self) -> npt.NDArray[Any]:
        """The wrapped host memory as a flat view (numpy arrays only)."""
        if self.on_device:
            raise TypeError("GlobalTensor.flat: the tensor wraps device memory; use numpy() for a host copy")
        return self.array.reshape(-1)

    def host_flat(self) -> npt.NDArray[Any]:
        """A flat host array of the memory: a view for numpy, a copy for device memory."""
        if self.on_device:
            cuda = imported("numba.cuda")
            return cuda.as_cuda_array(self.array).copy_to_host().reshape(-1).view(self.dtype.numpy)
        return self.flat.view(self.dtype.numpy) if self.flat.dtype != self.dtype.numpy else self.flat

    def numpy(self) -> npt.NDArray[Any]:
        """The wrapped memory as the caller gave it (a host copy for device memory)."""
        if self.on_device:
            return imported("numba.cuda").as_cuda_array(self.array).copy_to_host()
        return self.array

    @property
    def logical_shape(self) -> tuple[int, int]:
        """The logical matrix: ``(prod(Shape[0..3]), Shape[4])`` for ND / DN, ``(BRows*16, B*BCols*kC0)`` for NZ."""
        if self.layout == Layout.NZ:
            b_n, bc_n, br_n, f_rows, kc0 = self.shape
            return br_n * f_rows, b_n * bc_n * kc0
        return math.prod(self.shape[:4]), self.shape[4]

    def logical_offsets(self, rows: int | None = None, cols: int | None = None) -> npt.NDArray[Any]:
        """Element offset of every logical ``(r, c)`` (see :attr:`logical_shape`), or of the top-left
        ``rows x cols`` block only: O(rows * cols), whatever the tensor's size."""
        all_rows, all_cols = self.logical_shape
        rows = all_rows if rows is None else min(rows, all_rows)
        cols = all_cols if cols is None else min(cols, all_cols)
        if self.layout == Layout.NZ:
            return nz.gm_offsets(self.shape, self.stride, rows, cols)
        outer = np.unravel_index(np.arange(rows, dtype=np.int64), self.shape[:4])
        row_offsets = sum(i * s for i, s in zip(outer, self.stride[:4]))
        return row_offsets[:, None] + np.arange(cols, dtype=np.int64)[None, :] * self.stride[4]

    def logical(self) -> npt.NDArray[Any]:
        """The tensor as a logical matrix (a copy); see :meth:`logical_offsets`."""
        return self.host_flat()[self.logical_offsets()]

    @property
    def table_size(self) -> int:
        """``prod(Shape[0..4])``: the capacity of an Elem-mode table."""
        return math.prod(self.shape)

    def __repr__(self) -> str:
        where = "device" if self.on_device else "host"
        return (f"GlobalTensor<{self.dtype}, Shape{self.shape}, Stride{self.stride}, {self.layout.name}> "
                f"({where}, {self.size} elements)")

    @classmethod
    def nz_from_matrix(cls, matrix: npt.ArrayLike, batches: int = 1, stride: tuple[int, ...] | list[int] | None = None,
                       dtype: _dt.DTypeLike | None = None) -> GlobalTensor:
        """An NZ GM tensor holding the logical ``matrix`` (packed, or stride-padded with ``stride``)."""
        flat, shape, stride = nz.to_nz(np.asarray(matrix), batches, stride)
        return cls(flat, shape, stride, Layout.NZ, dtype=dtype)
