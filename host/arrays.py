"""The arrays a whole-array call receives, seen as C-contiguous 2-D memory, in place wherever that is possible.

Accepted (:func:`wrap`):

* numpy arrays (the fast path: checked first);
* device arrays (``__cuda_array_interface__``: CuPy, PyTorch CUDA tensors, Numba), used in place as they are;
* any host object that exports DLPack (``__dlpack__``: PyTorch CPU tensors, JAX CPU arrays, ...) or the array
  interface (``__array_interface__``), seen as a numpy view of its own memory. numpy cannot import bfloat16 over
  DLPack, so the capsule is read here (:func:`_from_dlpack`: ``DLManagedTensor`` or ``DLManagedTensorVersioned``);
  the view keeps the producer's memory alive until it is itself released.

Where the memory cannot be used as it is, a copy is made and said so by :attr:`WholeArray.copied`: a
non-contiguous operand (a column slice, ``idx[::2]``, a transposed source) is read from a C-contiguous copy; a
non-contiguous table a scatter writes is updated through such a copy, written back into the caller's elements
only (:meth:`WholeArray.write_back`) after the last tile. Index arrays of another integer dtype than int32 /
uint32, or in the other byte order, become a checked native int32 / uint32 copy (:func:`checked_indices`); a data
array in the other byte order (``>f4`` on a little-endian host) is read from a native copy, and a table or ``out``
written through one is written back. A JAX array cannot be written: a scatter updates a copy and returns it as a
new JAX array.

PyTorch tensors follow :mod:`simt_pto.torch_rules`: read as torch reads them (a view with a lazy negation from a
resolved copy), written only where torch's own in-place write would be (checked by :func:`wrap`, before anything is
written), and the version counter of a written tensor is bumped after the write (:attr:`WholeArray.versioned`). A
tensor, or any array, whose memory cannot be read is refused with a TypeError naming the argument.

A Dask array is refused before anything could compute it: pulling a lazy, possibly larger-than-memory array
into memory is not this path's job.
"""
from __future__ import annotations

import ctypes
import math
import sys
from dataclasses import dataclass, replace
from typing import Any, Union

import numpy as np

from simt_pto import dtypes as _dt
from simt_pto import torch_rules
from simt_pto.backend import imported, require_numba_cuda
from simt_pto.errors import ConstraintError
from simt_pto.tensor import plain_array

ArrayLike = Any
"""What a whole-array op takes as ``table``, ``idx``, ``src`` or ``out``: a numpy array, a device array
(``__cuda_array_interface__``), or a host object exporting ``__dlpack__`` or ``__array_interface__`` (PyTorch
CPU tensors, JAX CPU arrays). ``Any``: these libraries share no common static type."""

DTypeArg = Union[_dt.DType, str, np.dtype[Any], type[Any], None]
"""A ``dtype=`` argument: a :class:`~simt_pto.dtypes.DType`, a name (``"bfloat16"``), a numpy dtype or type."""

INDEX_MIN, INDEX_END = -(2 ** 31), 2 ** 32
"""Index values of a wider integer dtype must lie in ``[INDEX_MIN, INDEX_END)``: there, the ISA's uint32 cast
(``v & 0xFFFFFFFF``) of the int64 value is that of the same value stored as int32 or uint32."""

NUMPY, DEVICE, TORCH, JAX, FOREIGN = "numpy", "device", "torch", "jax", "foreign"
"""The kind of an input: what a gather returns for a table of that kind (``FOREIGN``: any other DLPack or
array-interface producer, whose results are numpy arrays)."""


@dataclass
class WholeArray:
    """An input array seen as 2-D C-contiguous memory (1-D index / element arrays become ``(N, 1)``)."""

    obj: Any             # what the kernels use: a C-contiguous numpy array, or the caller's device array
    dtype: _dt.DType
    shape: tuple         # the caller's shape
    rows: int
    cols: int
    device: bool
    memory: Any = None   # the caller's memory (a numpy view of any strides, or the device array): overlap checks
    kind: str = NUMPY
    user: Any = None     # what the caller passed
    copied: bool = False  # ``obj`` is a private copy of ``memory``
    versioned: Any = None  # the PyTorch tensor the call writes: its version counter is bumped after the write

    @property
    def size(self) -> int:
        return self.rows * self.cols

    def as_rows(self, rows: int, cols: int) -> WholeArray:
        """The same memory seen as ``rows x cols`` (a source checked against its index array)."""
        return replace(self, rows=rows, cols=cols)

    def read_in(self) -> None:
        """Copy the caller's elements into the private contiguous copy (a table a scatter updates through one: read
        when the call has its turn as their only writer, ``simt_pto.host.in_memory._written_alone``)."""
        np.copyto(self.obj.reshape(self.memory.shape), self.memory, casting="equiv")

    def write_back(self) -> None:
        """Copy the private contiguous copy a scatter updated into the caller's own elements (nothing else), in
        their byte order."""
        np.copyto(self.memory, self.obj.reshape(self.memory.shape), casting="equiv")


# -- what an object is -----------------------------------------------------------------------------------------

def _module_root(obj) -> str:
    return type(obj).__module__.partition(".")[0]


def _refuse_dask(obj, what) -> None:
    """A Dask array (told by its class's module, without importing dask, before anything touches its data)."""
    if _module_root(obj) == "dask":
        raise TypeError(f"{what}: a Dask array has no in-memory plan (it would compute the whole array into "
                        "memory): pto.gather / pto.scatter take it on their Dask route (simt_pto.dask), "
                        "which builds a task graph instead; gather_plan / scatter_plan describe in-memory calls only")


def _is_device(obj) -> bool:
    return hasattr(obj, "__cuda_array_interface__")


def _device_info(obj, what, op, target) -> tuple[np.dtype, tuple]:
    info = obj.__cuda_array_interface__
    np_dtype, shape = _dt.from_typestr(info["typestr"]), tuple(info["shape"])
    strides = info.get("strides")
    if strides is not None and shape and math.prod(shape) > 1:
        packed = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) * np_dtype.itemsize for i in range(len(shape)))
        if any(s != p for s, p, n in zip(strides, packed, shape) if n > 1):
            raise ConstraintError(op, target, "C-contiguous device arrays",
                                  f"{what} is a non-contiguous device array; make it contiguous on the device "
                                  "first (cupy.ascontiguousarray(x), x.contiguous())")
    return np_dtype, shape


def host_memory(obj, what: str) -> tuple[np.ndarray, str]:
    """``(numpy view, kind)`` of a host array of any kind, without copying: the view shares the caller's memory
    and is read-only where the producer says so (a JAX array). A PyTorch tensor is seen as torch reads it
    (:func:`simt_pto.torch_rules.for_read`: a view with a lazy negation through a resolved copy). Raises TypeError
    naming ``what`` for anything else (a Dask array, a list, an object exporting neither DLPack nor the array
    interface, a tensor or array with no memory to read: a ``meta`` tensor, a deleted JAX array, and a numpy masked
    array, :func:`simt_pto.tensor.plain_array`)."""
    if isinstance(obj, np.ndarray):
        return (obj if type(obj) is np.ndarray else plain_array(obj, what)), NUMPY
    _refuse_dask(obj, what)
    if torch_rules.torch_of(obj) is not None:
        return _from_dlpack(torch_rules.for_read(obj, what), what), TORCH
    root = _module_root(obj)
    if hasattr(obj, "__dlpack__"):
        jax = root in ("jax", "jaxlib")
        if jax and callable(getattr(obj, "is_deleted", None)) and obj.is_deleted():
            raise TypeError(f"{what}: the JAX array has been deleted (x.delete(), or donated to a jitted call): "
                            "it has no memory to read")
        return _from_dlpack(obj, what), JAX if jax else FOREIGN
    if hasattr(obj, "__array_interface__"):
        return np.asarray(obj), FOREIGN
    raise TypeError(f"{what}: expected a numpy array, a device array, or an array that exports DLPack "
                    f"(__dlpack__) or the array interface (__array_interface__), got {type(obj).__name__}")


# -- DLPack, read here (numpy's from_dlpack cannot import bfloat16) --------------------------------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", _DELETER), ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY
_HOST_DEVICES = (1, 3)  # kDLCPU, kDLCUDAHost (pinned host memory)
_DL_CODES = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}
"""kDLInt, kDLUInt, kDLFloat, kDLComplex, kDLBool: numpy's own kinds (no element dtype is complex or bool, but
numpy's dtype gets the same refusal as a numpy array of it: "index dtype must be an integer dtype")."""
_DL_ML_DTYPES = {(4, 16): _dt.bfloat16.numpy, (10, 8): _dt.float8_e4m3.numpy, (12, 8): _dt.float8_e5m2.numpy}
"""(code, bits) -> numpy dtype for what numpy has no type of: kDLBfloat, kDLFloat8_e4m3fn, kDLFloat8_e5m2."""

_CAPSULE_NAMES = (b"dltensor", b"dltensor_versioned")
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype, _capsule_is_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]


class _DLPackView:
    """The owner of an imported DLPack tensor: its ``__array_interface__`` describes the memory, and it holds the
    producer's capsule. The capsule is left unconsumed (its name stays ``dltensor``): DLPack has every producer give
    its capsules a destructor that calls the tensor's deleter unless a consumer renamed the capsule, so when the last
    numpy view is released the producer's own C code releases the memory. A ``__del__`` of ours calling the deleter
    would be Python code, which Ctrl-C can cut (the interrupt is then only printed, and the deleter skipped)."""

    def __init__(self, producer, capsule, interface):
        self.producer, self._capsule = producer, capsule
        self.__array_interface__ = interface


def _from_dlpack(obj, what) -> np.ndarray:
    """A numpy view of a host DLPack producer's memory, its dtype included where numpy cannot import it
    (bfloat16, float8): no copy. Read-only where the producer flags it so (DLPack 1.x)."""
    if hasattr(obj, "__dlpack_device__"):
        try:
            device = obj.__dlpack_device__()
        except Exception as exc:  # noqa: BLE001 - a producer with no memory to export raises what it likes
            raise TypeError(f"{what}: {type(obj).__name__} could not say where its memory is "
                            f"(__dlpack_device__: {type(exc).__name__}: {exc})") from None
        if int(device[0]) not in _HOST_DEVICES:
            raise TypeError(f"{what}: {type(obj).__name__} lives on device {device} and exports no "
                            "__cuda_array_interface__; pass a host array or a CUDA array")
    # the capsule, versioned where the producer speaks DLPack 1.x (inline: a frame less per operand of a call)
    try:
        try:
            capsule = obj.__dlpack__(max_version=(1, 0))
        except TypeError:  # a producer older than DLPack 1.0 takes no max_version
            capsule = obj.__dlpack__()
    except (BufferError, RuntimeError, TypeError, ValueError) as exc:
        raise TypeError(f"{what}: {type(obj).__name__} could not export its memory over DLPack ({exc})") from None
    for name in _CAPSULE_NAMES:
        if _capsule_is_valid(capsule, name):
            break
    else:
        raise TypeError(f"{what}: {type(obj).__name__}.__dlpack__() returned no DLPack capsule")
    address = _capsule_pointer(capsule, name)
    versioned = name == b"dltensor_versioned"
    managed = (_DLManagedTensorVersioned if versioned else _DLManagedTensor).from_address(address)
    if versioned and managed.major != 1:
        raise TypeError(f"{what}: DLPack {managed.major}.{managed.minor} is not supported (1.x is)")
    # the capsule's destructor calls the deleter: once the view is released, or now if the tensor is refused
    owner = _DLPackView(obj, capsule, None)
    t = managed.dl_tensor
    if t.device.device_type not in _HOST_DEVICES:
        raise TypeError(f"{what}: {type(obj).__name__} exported memory of DLPack device type "
                        f"{t.device.device_type}, not host memory")
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    if lanes != 1:
        raise TypeError(f"{what}: DLPack vector dtypes ({lanes} lanes) are not supported")
    np_dtype = _DL_ML_DTYPES.get((code, bits))
    if np_dtype is None:
        try:
            np_dtype = np.dtype(f"{_DL_CODES[code]}{bits // 8}") if bits % 8 == 0 else None
        except (KeyError, TypeError):  # a code numpy has no kind of, or a width it has no type of
            np_dtype = None
        if np_dtype is None:
            raise TypeError(f"{what}: DLPack dtype code {code} of {bits} bits has no element dtype here")
    # (ctypes slices and list displays: a generator would cost a Python frame per dimension on every call)
    ndim, itemsize = t.ndim, np_dtype.itemsize
    shape = tuple(t.shape[:ndim]) if ndim else ()
    strides = None if not t.strides else tuple([stride * itemsize for stride in t.strides[:ndim]])
    read_only = versioned and bool(managed.flags & _READ_ONLY)
    data = (t.data or 0) + t.byte_offset
    if math.prod(shape) == 0:  # an empty tensor may carry a NULL pointer: no memory to share
        return np.empty(shape, np_dtype)
    # numpy reads its dtype from the typestr: the extension dtypes are laid over unsigned words of their width
    word = np.dtype(f"u{np_dtype.itemsize}")
    owner.__array_interface__ = dict(version=3, shape=shape, strides=strides, typestr=word.str,
                                     data=(data, read_only))
    view = np.asarray(owner)
    return view if np_dtype == word else view.view(np_dtype)


# -- indices ---------------------------------------------------------------------------------------------------

def checked_indices(host: np.ndarray, op: str, target: str | None, what: str = "idx") -> np.ndarray:
    """The index array as native int32 / uint32: itself when it is one, else a checked copy (signed dtypes become
    int32, unsigned uint32: the same bits under the ISA's uint32 cast; either byte order, every width). Every value
    must lie in ``[-2**31, 2**32)``; the first one outside is refused by value and position (ConstraintError,
    before anything is written). Non-integer dtypes are refused."""
    dt = host.dtype
    if dt.itemsize == 4 and dt.kind in "iu" and dt.isnative:  # int32 / uint32: attribute checks, the cheapest test
        return host
    if dt.kind not in "iu":
        raise ConstraintError(op, target, "Tile Constraints: index dtype",
                              f"{what}: index dtype must be an integer dtype (int32 / uint32, or another integer "
                              f"dtype whose values lie in [-2**31, 2**32)), got {dt}")
    if dt.itemsize == 8 and host.size:
        lo, hi = int(host.min()), int(host.max())
        if lo < INDEX_MIN or hi >= INDEX_END:
            bad = (host < INDEX_MIN) | (host >= INDEX_END) if dt.kind == "i" else host >= INDEX_END
            position = np.unravel_index(int(np.flatnonzero(bad)[0]), host.shape)  # C order of the caller's shape
            where = ", ".join(str(int(p)) for p in position)
            raise ConstraintError(op, target, "index values lie in [-2**31, 2**32) (the ISA's uint32 cast)",
                                  f"{what}[{where}] = {int(host[position])} is outside [{INDEX_MIN}, {INDEX_END})")
    narrow = np.int32 if dt.kind == "i" else np.uint32
    # astype wraps int64 values in [2**31, 2**32) to the int32 of the same low 32 bits: the uint32 cast's value
    return host.astype(narrow, order="C", casting="unsafe")


# -- the whole-array view --------------------------------------------------------------------------------------

def _two_d(shape, rows_only: bool) -> tuple[int, int]:
    """The 2-D view of a C-order shape: ``(N, 1)`` for one index per row (``rows_only``), 0-D and 1-D arrays;
    else the last axis as columns."""
    size = math.prod(shape)
    if rows_only or len(shape) <= 1:
        return size, 1
    return size // shape[-1] if shape[-1] else math.prod(shape[:-1]), shape[-1]


def wrap(obj: ArrayLike, what: str, dtype: DTypeArg = None, two_d_only: bool = False, *, op: str = "whole-array op",
         target: str | None = None, written: bool = False, rows_only: bool = False) -> WholeArray:
    """``obj`` (the call's ``what``: "table", "idx", "src", "out") as a :class:`WholeArray`, or the ConstraintError
    / TypeError that refuses it. ``dtype`` reinterprets a data array's elements; ``two_d_only``: a Row table;
    ``rows_only``: a Row index array (any shape, one index per row); ``written``: the call writes it (a copy
    stays writable, and is written back; a PyTorch tensor must be one that torch would write in place,
    :func:`simt_pto.torch_rules.check_write`, and becomes :attr:`WholeArray.versioned`)."""
    user, versioned = obj, None
    if type(obj) is np.ndarray and obj.flags.c_contiguous and obj.dtype.isnative:  # the common case: nothing to adapt
        host = checked_indices(obj, op, target) if what == "idx" else obj
        memory, kind = obj, NUMPY
    else:
        torch = torch_rules.torch_of(obj)
        if torch is not None:  # (before any look at the memory: a read may need a copy)
            if written:
                obj, versioned = torch_rules.for_write(obj, what, op, target), user  # detached: the same memory
            else:
                obj = torch_rules.for_read(obj, what, op, target)
            # (a CPU or CUDA tensor, for_read says: one attribute for a plain tensor, not torch's Python property
            # that raises for a CPU one; a subclass may export __cuda_array_interface__ of its own)
            if obj.is_cuda or (type(obj) is not torch.Tensor and _is_device(obj)):
                return _wrap_device(obj, what, dtype, two_d_only, op, target, rows_only, user, versioned)
            memory, kind = _from_dlpack(obj, what), TORCH  # (the rules applied once, above)
        elif not isinstance(obj, np.ndarray) and _module_root(obj) != "dask" and _is_device(obj):
            return _wrap_device(obj, what, dtype, two_d_only, op, target, rows_only, user, versioned)
        else:
            memory, kind = host_memory(obj, what)
        host = checked_indices(memory, op, target) if what == "idx" else memory
        if written and kind == JAX:
            host = np.array(memory, order="C")  # JAX arrays are immutable: the call updates a copy, a new JAX array
        elif not host.flags.c_contiguous or not host.dtype.isnative:  # (checked indices are native already)
            native = host.dtype.newbyteorder("=")
            if written:
                _check_writable_copy(memory, what, op, target)
            if written and what == "table":  # read in when the call has its turn (WholeArray.read_in), not twice
                host = np.empty(host.shape, dtype=native)
            else:
                host = np.ascontiguousarray(host, dtype=native)
    dt = _resolve(dtype, what, host.dtype, op, target)
    rows, cols = _shape_2d(what, memory.shape, two_d_only, rows_only, op, target)
    return WholeArray(host, dt, memory.shape, rows, cols, False, memory, kind, user, host is not memory, versioned)


def _check_writable_copy(memory: np.ndarray, what, op, target) -> None:
    """A non-contiguous array the call writes is updated through a contiguous copy, then written back: it must be
    writable, and its elements must not share memory with each other (a broadcast or ``as_strided`` view, where
    the write-back would be ambiguous)."""
    if not memory.flags.writeable:
        raise ConstraintError(op, target, f"the {what} is written in place",
                              f"{what} is a read-only array (flags.writeable is False)")
    dims = sorted((abs(s), n) for s, n in zip(memory.strides, memory.shape) if n > 1)
    reach = memory.itemsize
    for stride, n in dims:  # each axis steps past everything the smaller axes span: no element is shared
        if stride < reach:
            raise ConstraintError(op, target, f"the {what}'s elements are distinct memory",
                                  f"{what} has strides {memory.strides} for shape {memory.shape}: some of its "
                                  "elements share memory (a broadcast or as_strided view); pass a copy")
        reach += stride * (n - 1)


_OF_NUMPY: dict[np.dtype, _dt.DType] = {}
"""numpy dtype -> element dtype, filled as arrays arrive: a dict lookup instead of a walk over the dtypes."""


def _resolve(dtype, what, np_dtype, op, target) -> _dt.DType:
    """The element dtype of a data array: its own, or ``dtype`` reinterpreting elements of the same width."""
    if dtype is None or what == "idx":
        dt = _OF_NUMPY.get(np_dtype)
        if dt is None:
            try:
                dt = _OF_NUMPY[np_dtype] = _dt.resolve(np_dtype)
            except TypeError as exc:  # a dtype that is no element dtype (bool, float64, complex64): name the array
                raise TypeError(f"{what}: {exc}") from None
        return dt
    dt = _dt.resolve(dtype)
    if dt.itemsize != np_dtype.itemsize:
        raise ConstraintError(op, target, "dtype matches the memory",
                              f"{what}: dtype {dt} ({dt.itemsize} B) over {np_dtype} memory")
    return dt


def _shape_2d(what, shape, two_d_only, rows_only, op, target) -> tuple[int, int]:
    if what == "table":
        if len(shape) == 2:
            rows, cols = shape
        elif len(shape) == 1 and not two_d_only:
            rows, cols = shape[0], 1
        else:
            want = "2-D" if two_d_only else "1-D or 2-D"
            raise ConstraintError(op, target, f"{what} is {want}", f"{what} has shape {shape}")
        if rows * cols == 0:  # no indices (and so no source) is a no-op, as in numpy; no table is not
            raise ConstraintError(op, target, "a non-empty table", f"table has shape {shape}")
        return rows, cols
    return _two_d(shape, rows_only)


def _wrap_device(obj, what, dtype, two_d_only, op, target, rows_only, user, versioned) -> WholeArray:
    """A device array (``obj``; for a PyTorch tensor, what :mod:`simt_pto.torch_rules` gives in its place; ``user``:
    what the caller passed), used in place; an index array of another dtype than int32 / uint32 through a checked
    host copy."""
    require_numba_cuda(f"{what}: a device array")  # the device paths run numba-cuda's kernels and copies
    np_dtype, shape = _device_info(obj, what, op, target)
    if what == "idx" and np_dtype not in (np.dtype(np.int32), np.dtype(np.uint32)):
        # a wider index array, or one in the other byte order, is checked and narrowed on the host: a copy there
        # and back
        cuda = imported("numba.cuda")  # a device array: numba.cuda is in real mode already
        host = checked_indices(cuda.as_cuda_array(obj).copy_to_host(), op, target)
        rows, cols = _two_d(shape, rows_only)
        return WholeArray(host, _dt.resolve(host.dtype), shape, rows, cols, False, obj, DEVICE, user, True)
    if not np_dtype.isnative:
        raise ConstraintError(op, target, "device arrays are used in place, in the host's byte order",
                              f"{what} is a device array of dtype {np_dtype.str} (the other byte order); convert "
                              "it on the device first")
    dt = _resolve(dtype, what, np_dtype, op, target)
    rows, cols = _shape_2d(what, shape, two_d_only, rows_only, op, target)
    return WholeArray(obj, dt, shape, rows, cols, True, obj, DEVICE, user, versioned=versioned)


def to_host(a: WholeArray) -> np.ndarray:
    """The array as a host numpy array of its element dtype (a copy for device arrays)."""
    if a.device:
        return imported("numba.cuda").as_cuda_array(a.obj).copy_to_host().view(a.dtype.numpy)
    return a.obj.view(a.dtype.numpy) if a.obj.dtype != a.dtype.numpy else a.obj


def base_address(array) -> int:
    """The address of a host (numpy) or device (Numba) array's first element."""
    if isinstance(array, np.ndarray):
        try:  # a writable C-contiguous array: read through ctypes' buffer view, a quarter of the cost of .ctypes
            return ctypes.addressof(ctypes.c_char.from_buffer(array))
        except (TypeError, ValueError, BufferError):  # read-only, not C-contiguous, or empty
            return array.ctypes.data
    return array.device_ctypes_pointer.value


def new_device_array(template, n: int, dtype=None) -> Any:
    """``n`` uninitialised elements on the device, of ``dtype`` (a numpy dtype) or else of the template's own dtype,
    from the allocator of the template's library (CuPy's memory pool, PyTorch's caching allocator: no
    ``cudaMalloc`` per call), else Numba's (for a Numba device array or no template)."""
    module = _module_root(template) if template is not None else None
    if module == "cupy":
        import cupy  # the template is a CuPy array: cupy is imported already
        return cupy.empty(n, dtype=template.dtype if dtype is None else dtype)
    if module == "torch":
        import torch  # the template is a tensor: torch is imported already
        torch_dtype = template.dtype if dtype is None else torch.from_numpy(np.empty(0, dtype=dtype)).dtype
        return torch.empty(n, dtype=torch_dtype, device=template.device)
    cuda = imported("numba.cuda")  # a device array: numba.cuda is in real mode already
    return cuda.device_array(n, dtype=cuda.as_cuda_array(template).dtype if dtype is None else dtype)


def like(table: WholeArray, result: np.ndarray) -> Any:
    """A gather's host result as an array of the table's kind: numpy for numpy and other producers, a PyTorch
    tensor (of the table's own torch dtype, bfloat16 included) for a PyTorch table, a JAX array for a JAX one.
    No copy for PyTorch; JAX makes its own array of the values."""
    if table.kind == TORCH:
        return torch_result(result, table.user.dtype)
    if table.kind == JAX:
        import jax.numpy as jnp  # the caller's table is a JAX array: jax is imported already
        return jnp.asarray(result)
    return result


def torch_result(result: np.ndarray, torch_dtype: Any) -> Any:
    """A gather's host result as a tensor of ``torch_dtype`` (the table's own), sharing its memory: a call with
    ``dtype=`` gathers in the reinterpreted dtype, which the tensor must not keep."""
    torch = sys.modules["torch"]  # (the caller's table is a tensor: torch is imported; no import statement per call)
    try:
        made = torch.from_numpy(result)
        if made.dtype == torch_dtype:
            return made
    except TypeError:  # (an ml_dtypes result: torch.from_numpy knows none of them)
        pass
    return torch.from_numpy(result.view(np.dtype(f"i{result.dtype.itemsize}"))).view(torch_dtype)


JAX_ZERO_COPY_ALIGNMENT = 64
"""The byte boundary at which a numpy array must start for JAX's CPU constructor to take its memory as it is
(:func:`jax_result`): one that starts anywhere else is copied (measured on JAX 0.12: a 2 KB result at each multiple
of 8 bytes was taken as it is at multiples of 64 only; numpy's own 4 MB allocations start 16 bytes past one and were
always copied)."""


def aligned_empty(size: int, dtype: np.dtype, alignment: int = JAX_ZERO_COPY_ALIGNMENT) -> np.ndarray:
    """A new uninitialised 1-D array of ``size`` elements of ``dtype`` whose first byte is at a multiple of
    ``alignment`` bytes (a view of a slightly larger byte buffer, which it keeps alive)."""
    nbytes = size * dtype.itemsize
    raw = np.empty(nbytes + alignment - 1, np.uint8)
    start = -ctypes.addressof(ctypes.c_char.from_buffer(raw)) % alignment
    return raw[start:start + nbytes].view(dtype)


def jax_result(result: np.ndarray) -> Any:
    """``jax.numpy.asarray(result)`` for a gather's result that the call has just made and never writes again: the
    same JAX array (type, device, sharding, uncommitted, dtype, shape, values), made without a copy by jaxlib's own
    constructor where that is known to give it, else by ``jnp.asarray``.

    JAX's public constructors (``jnp.asarray``, ``jax.device_put``, ``jax.make_array_from_callback``) cost 12 to 30
    µs for an 8 x 64 result on the development machine, several times the rest of a repeated gather; the constructor
    they end in, ``batched_device_put``, costs about 3.5 µs. It is private to JAX, so it is taken only once a probe
    has shown, in this process, that it gives what ``jnp.asarray`` gives (:func:`_jax_put`), and only where
    ``jnp.asarray`` would make nothing else: a default device left as JAX chose it (no ``jax.default_device``), a
    CPU one, and a C-contiguous result of at most 4-byte elements (``jnp.asarray`` turns 64-bit values into 32-bit
    ones unless 64-bit mode is on). Transfer guards apply to both alike. Where ``result`` starts at a multiple of
    :data:`JAX_ZERO_COPY_ALIGNMENT` bytes (:func:`aligned_empty`) JAX keeps its memory, which is why the caller must
    never write it again; elsewhere JAX copies it (for a small result the copy costs less than the zero-copy
    constructor: ``simt_pto.host.tuning.HostTuning.jax_zero_copy_result_bytes``)."""
    put = _JAX_PUT[0] if _JAX_PUT else _jax_put()
    if put is not None and result.dtype.itemsize <= 4 and result.flags.c_contiguous:
        made = put(result)
        if made is not None:
            return made
    import jax.numpy as jnp  # (jax is imported already: the caller's table is a JAX array)
    return jnp.asarray(result)


_JAX_PUT: list = []
"""``[put]``: :func:`jax_result`'s fast constructor once :func:`_jax_put` has looked for it (None: there is none)."""


def _jax_put():
    """``put(result)``: a JAX array of ``result``'s memory by jaxlib's ``batched_device_put`` on JAX's first device,
    uncommitted, or None while a default device is set; itself None where that constructor is missing, the first
    device is not a CPU, or a probe finds its array unlike ``jnp.asarray``'s."""
    import jax
    import jax.numpy as jnp
    put = None
    try:
        from jax._src import core  # (private: ShapedArray, the abstract value the constructor takes)
        from jax._src.lib import xla_client  # (private: jaxlib's C++ constructor)
        device = jax.devices()[0]
        if device.platform == "cpu":
            sharding, config = jax.sharding.SingleDeviceSharding(device), jax.config
            batched, shaped = xla_client.batched_device_put, core.ShapedArray
            avals: dict = {}

            def put(result: np.ndarray):
                if config.jax_default_device is not None:
                    return None
                aval = avals.get((result.shape, result.dtype))
                if aval is None:
                    if len(avals) >= 256:
                        avals.clear()
                    aval = avals[(result.shape, result.dtype)] = shaped(result.shape, result.dtype)
                return batched(aval, sharding, [result], [device], False)

            for probe in (np.arange(12, dtype=np.float32).reshape(3, 4), np.arange(5, dtype=np.uint16)):
                with jax.transfer_guard("allow"):  # (a guard set by the caller is for the caller's transfers)
                    fast, public = put(probe.copy()), jnp.asarray(probe)
                if not (type(fast) is type(public) and fast.sharding == public.sharding
                        and fast.committed == public.committed and fast.dtype == public.dtype
                        and fast.shape == public.shape and fast.weak_type == public.weak_type
                        and np.array_equal(np.asarray(fast), probe)):
                    put = None
                    break
    except Exception:  # noqa: BLE001 - any fault of a private constructor: the public one serves
        put = None
    _JAX_PUT[:] = [put]
    return put


__all__ = ["ArrayLike", "DTypeArg", "INDEX_END", "INDEX_MIN", "JAX_ZERO_COPY_ALIGNMENT", "WholeArray", "aligned_empty",
           "base_address", "checked_indices", "host_memory", "jax_result", "like", "new_device_array", "to_host",
           "torch_result", "wrap"]
