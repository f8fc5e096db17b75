"""The GPU's direct launch (``kernels/a5/direct_launch.py``) without a GPU: which places of Numba's packed argument
block it fills with the operands' pointers, and when it declines. Numba's packing is modelled here as numba-cuda
0.30.4 does it (``_Kernel._prepare_args``: an array as meminfo, parent, size, itemsize, data pointer, shape and
strides; a tuple member by member; an integer as one ctypes value); the launches themselves, with Numba's real
packing, run in ``tests/test_device_arrays.py`` on a GPU."""
from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numba
import pytest

from conftest import requires_cuda

pytestmark = requires_cuda

ARRAY = numba.types.Array(numba.types.uint32, 1, "C")
LAUNCH = numba.types.UniTuple(numba.types.int64, 4)
INT = numba.types.int64


class DeviceArray:
    """What the packing reads of a 1-D device array."""

    def __init__(self, pointer, size, itemsize=4):
        self.device_ctypes_pointer = SimpleNamespace(value=pointer)
        self.size, self.itemsize = size, itemsize


class Kernel:
    """A compiled overload: its argument types and numba-cuda 0.30.4's packing of them."""

    def __init__(self, types, offset=4):
        self.argument_types, self.offset = types, offset
        self._codelibrary = SimpleNamespace(get_cufunc=lambda: SimpleNamespace(kernel="the kernel"))

    def _prepare_args(self, ty, value, stream, retr, kernelargs):
        if isinstance(ty, numba.types.BaseTuple):
            for t, v in zip(ty, value):
                self._prepare_args(t, v, stream, retr, kernelargs)
        elif isinstance(ty, numba.types.Array):
            block = [0, 0, value.size, value.itemsize, value.size, value.itemsize]
            block.insert(self.offset, value.device_ctypes_pointer.value)
            kernelargs.extend(block)
        else:
            kernelargs.append(ctypes.c_int64(value))


class Dispatcher:
    def __init__(self, kernel):
        self.overloads = {tuple(kernel.argument_types): kernel}

    @staticmethod
    def typeof_pyval(value):
        if isinstance(value, tuple):
            return LAUNCH if all(isinstance(v, int) for v in value) else numba.types.Tuple([ARRAY] * len(value))
        return ARRAY if isinstance(value, DeviceArray) else INT


@pytest.fixture
def direct(monkeypatch):
    """:func:`direct_launch` with the default stream as a stand-in (no CUDA driver here; where ``numba.cuda`` runs as
    the simulator, its driver module has no stream conversion at all)."""
    from numba.cuda.cudadrv import driver
    from simt_pto.kernels.a5 import direct_launch
    monkeypatch.setattr(driver, "_to_core_stream", lambda stream: f"stream {stream}", raising=False)
    return direct_launch.direct_launch


def _launched(runner, *pointers):
    calls = []
    runner._launch = lambda stream, config, kernel, *args: calls.append((stream, config, kernel, args))
    runner(*pointers)
    return calls


def test_each_operand_pointer_goes_to_its_arrays_data_place_and_nothing_else_changes(direct):
    table, idx = DeviceArray(0x1000, 64), DeviceArray(0x2000, 8)
    kernel = Kernel((LAUNCH, ARRAY, INT, ARRAY, INT))
    values = ((0, 3, 3, 4), table, 64, idx, 7)
    runner = direct(Dispatcher(kernel), 3, (32, 4), values, (3, 1))  # idx first, then the table
    assert runner is not None
    [(stream, config, cukernel, args)] = _launched(runner, 0x9000, 0x8000)
    first = []
    for ty, value in zip(kernel.argument_types, values):
        kernel._prepare_args(ty, value, 0, [], first)
    want = list(first)
    want[4 + 4], want[4 + 7 + 1 + 4] = 0x8000, 0x9000  # after the launch tuple (4); after the table and its int
    assert [getattr(a, "value", a) for a in args] == [getattr(a, "value", a) for a in want]
    assert (stream, cukernel, config.grid, config.block) == ("stream 0", "the kernel", (3, 1, 1), (32, 4, 1))
    [(_, _, _, again)] = _launched(runner, 0x9000, 0x8000)
    assert again[4 + 4] == 0x8000  # the kept block is copied per launch, not edited


def test_a_tuple_operand_gets_the_pointer_in_every_member(direct):
    pair = (DeviceArray(0x1000, 16), DeviceArray(0x1000, 16))  # the float32 Max / Min (int32, uint32) views
    kernel = Kernel((LAUNCH, numba.types.Tuple([ARRAY, ARRAY]), INT))
    runner = direct(Dispatcher(kernel), 1, (32, 1), ((0, 1, 1, 1), pair, 5), (1,))
    [(_, _, _, args)] = _launched(runner, 0x7000)
    assert args[4 + 4] == 0x7000 and args[4 + 7 + 4] == 0x7000 and args[-1].value == 5


def test_it_declines_what_it_cannot_repeat(direct):
    table = DeviceArray(0x1000, 64)
    values = ((0, 1, 1, 1), table)
    assert direct(Dispatcher(Kernel((LAUNCH, ARRAY))), 1, (32, 1), values, (1,)) is not None
    missing = Dispatcher(Kernel((LAUNCH, ARRAY)))
    missing.overloads = {}
    assert direct(missing, 1, (32, 1), values, (1,)) is None  # not compiled for these types
    assert direct(Dispatcher(Kernel((LAUNCH, ARRAY), offset=3)), 1, (32, 1), values, (1,)) is None  # other layout
    two_d = numba.types.Array(numba.types.uint32, 2, "C")
    assert direct(Dispatcher(Kernel((LAUNCH, two_d))), 1, (32, 1), values, (1,)) is None
    copying = Kernel((LAUNCH, ARRAY))
    copying._prepare_args = lambda ty, value, stream, retr, args: (retr.append(None), args.extend([0] * 7))
    assert direct(Dispatcher(copying), 1, (32, 1), values, (1,)) is None  # Numba would copy it: no device array
