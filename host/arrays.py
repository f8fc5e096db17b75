"""The arrays a whole-array call receives (numpy, or CuPy / PyTorch / Numba device arrays), seen as 2-D."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simt_pto import dtypes as _dt
from simt_pto.errors import ConstraintError
from simt_pto.tensor import is_device_array


@dataclass
class WholeArray:
    """An input array seen as 2-D (1-D index / element arrays become ``(N, 1)``)."""

    obj: object          # what the caller passed
    dtype: _dt.DType
    shape: tuple         # the caller's shape
    rows: int
    cols: int
    device: bool

    @property
    def size(self) -> int:
        return self.rows * self.cols


def wrap(obj, what, dtype=None, two_d_only=False) -> WholeArray:
    """``obj`` (the call's ``what``: "table", "idx", "src") as a :class:`WholeArray`, or the ConstraintError /
    TypeError that refuses it; ``dtype`` reinterprets a data array's elements."""
    device = is_device_array(obj)
    if device:
        info = obj.__cuda_array_interface__
        np_dtype, shape = _dt.from_typestr(info["typestr"]), tuple(info["shape"])
    elif isinstance(obj, np.ndarray):
        if type(obj) is not np.ndarray:
            obj = obj.view(np.ndarray)  # an ndarray subclass (np.matrix, ...): its memory as a plain array
        if not obj.flags.c_contiguous:
            raise ConstraintError("whole-array op", None, "C-contiguous arrays", f"{what} is not C-contiguous")
        np_dtype, shape = obj.dtype, obj.shape
    else:
        raise TypeError(f"{what}: expected a numpy or device array, got {type(obj).__name__}")
    if what == "idx" and np_dtype not in (np.dtype(np.int32), np.dtype(np.uint32)):
        raise ConstraintError("whole-array op", None, "Tile Constraints: index dtype",
                              f"index dtype must be int32 or uint32, got {np_dtype}")
    dt = _dt.resolve(dtype if dtype is not None and what != "idx" else np_dtype)
    if len(shape) == 1 and not two_d_only:
        rows, cols = shape[0], 1
    elif len(shape) == 2:
        rows, cols = shape
    else:
        want = "2-D" if two_d_only else "1-D or 2-D"
        raise ConstraintError("whole-array op", None, f"{what} is {want}", f"{what} has shape {shape}")
    if rows * cols == 0 and what == "table":  # no indices (and so no source) is a no-op, as in numpy
        raise ConstraintError("whole-array op", None, "a non-empty table", f"table has shape {shape}")
    return WholeArray(obj, dt, shape, rows, cols, device)


def to_host(a: WholeArray) -> np.ndarray:
    """The array as a host numpy array of its element dtype (a copy for device arrays)."""
    if a.device:
        from numba import cuda
        return cuda.as_cuda_array(a.obj).copy_to_host().view(a.dtype.numpy)
    return a.obj.view(a.dtype.numpy) if a.obj.dtype != a.dtype.numpy else a.obj
