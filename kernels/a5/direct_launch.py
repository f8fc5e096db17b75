"""GPU launches with their arguments packed once: what a repeated whole-array call on device arrays runs.

Numba's launch (``kernel[grid, block](*args)``) types every argument, looks up the overload and packs the arguments
on every call, and each device array of another library first becomes a Numba device array
(``cuda.as_cuda_array``). With the typing and plan building of a whole-array call around it, that host work is many
times a small kernel (docs/gpu.md, "Measured on a GPU"). A :class:`DirectLaunch` does that work once, for a launch
that has just run through Numba: it keeps the compiled kernel and Numba's own packing of the arguments
(``_Kernel._prepare_args``), and a later launch puts only its operands' data pointers in place of the first call's
(their sizes are part of the call signature that selects the kept launch, :mod:`simt_pto.host.kept_launch`).

This reads numba-cuda's launch internals (those of numba-cuda 0.30.4, with ``cuda.core``'s ``launch``): where they
differ, :func:`direct_launch` returns None and the caller keeps Numba's launch. Launches go to the default stream,
as Numba's do.
"""
from __future__ import annotations

import threading

import numpy as np

from simt_pto.backend import first_use, imported


class DirectLaunch:
    """One compiled kernel's launch with its argument block packed once; ``launch(*pointers)`` runs it with the
    data pointers of its operands (in the order :func:`direct_launch` was given them) in the first call's places."""

    __slots__ = ("_kernel", "_config", "_stream", "_template", "_slots", "_launch")

    def __init__(self, kernel, config, stream, template: list, slots: tuple[tuple[int, ...], ...], launch):
        self._kernel, self._config, self._stream, self._launch = kernel, config, stream, launch
        self._template, self._slots = template, slots

    def __call__(self, *pointers: int) -> None:
        args = self._template.copy()
        for places, pointer in zip(self._slots, pointers):
            for at in places:
                args[at] = pointer
        self._launch(self._stream, self._config, self._kernel, *args)


def direct_launch(dispatcher, grid: int, block: tuple[int, int], values: tuple,
                  operands: tuple[int, ...]) -> DirectLaunch | None:
    """The :class:`DirectLaunch` of ``dispatcher`` over ``grid`` blocks of ``block`` threads for arguments of the
    types of ``values`` (a launch's arguments as Numba took them: device arrays for arrays), whose ``values[i]``
    for each ``i`` in ``operands`` (1-D device arrays, or tuples of views of one) change from launch to launch; None
    when the overload is not compiled, an argument needs more than its pointer replaced, or numba-cuda's internals
    are not the ones this module reads."""
    try:
        core = imported("cuda.core")  # cuda-python, which numba-cuda loads too
        LaunchConfig, launch = core.LaunchConfig, core.launch
        driver = imported("numba.cuda.cudadrv.driver")
        kernel = dispatcher.overloads.get(tuple(dispatcher.typeof_pyval(v) for v in values))
        if kernel is None:
            return None
        template: list = []
        slots = {}
        retr: list = []
        for at, (ty, value) in enumerate(zip(kernel.argument_types, values)):
            if at not in operands:
                kernel._prepare_args(ty, value, 0, retr, template)
                continue
            places = []
            # an operand is a 1-D array, or a tuple of views of one (the float32 Max / Min (int32, uint32) pair)
            for member_ty, member in (zip(ty, value) if isinstance(value, tuple) else ((ty, value),)):
                start = len(template)
                kernel._prepare_args(member_ty, member, 0, retr, template)
                # an array's block: meminfo, parent, size, itemsize, data pointer, shape, strides
                if getattr(member_ty, "ndim", None) != 1 or template[start + 4] != member.device_ctypes_pointer.value:
                    return None
                places.append(start + 4)
            slots[at] = tuple(places)
        if retr or len(slots) != len(operands):  # an argument that Numba copies to the device: not a device array
            return None
        config = LaunchConfig(grid=(grid, 1, 1), block=(*block, 1), shmem_size=0)
        return DirectLaunch(kernel._codelibrary.get_cufunc().kernel, config, driver._to_core_stream(0), template,
                            tuple(slots[at] for at in operands), launch)
    except Exception:  # noqa: BLE001 - internals other than these: no direct launch, the caller keeps Numba's
        return None


class IndexScan:
    """Whether a device index array holds a value past a capacity (the kernel ``flag_out_of_range``), flagged in
    a word of mapped host memory, one per thread: the host reads it after one synchronisation, with no copy in
    either direction (the full path's scan, which also finds the first such position for its error message, copies
    its counters to the device and back)."""

    def __init__(self, size: int, launch: DirectLaunch):
        self.size, self._launch = size, launch

    @classmethod
    def of(cls, idx, capacity: int) -> IndexScan | None:
        """The scan of index arrays of ``idx``'s size and dtype (a 1-D Numba device array) against ``capacity``,
        or None (:func:`direct_launch`). Runs once, through Numba, so that the overload exists."""
        cuda = imported("numba.cuda")
        with first_use:
            from simt_pto.kernels.tuning import SCAN_BLOCK
            from .index_check import flag_out_of_range, scan_grid
        flag = _flag()
        flag[0] = 0
        grid = scan_grid(idx.size)
        flag_out_of_range[grid, SCAN_BLOCK](idx, capacity, flag)
        cuda.synchronize()
        launch = direct_launch(flag_out_of_range, grid, (SCAN_BLOCK, 1), (idx, capacity, flag), (0, 2))
        return None if launch is None else cls(idx.size, launch)

    def out_of_range(self, idx_pointer: int) -> bool:
        """Whether any index at ``idx_pointer`` is past the capacity. Waits for the device: every launch before it on
        the default stream has finished when it returns."""
        cuda = imported("numba.cuda")
        flag = _flag()
        flag[0] = 0
        self._launch(idx_pointer, flag.device_ctypes_pointer.value)
        cuda.synchronize()
        return bool(flag[0])


_per_thread = threading.local()


def _flag() -> np.ndarray:
    """This thread's flag word in mapped host memory (a thread's scans run one after another)."""
    flag = getattr(_per_thread, "flag", None)
    if flag is None:
        flag = _per_thread.flag = imported("numba.cuda").mapped_array(1, np.int32)
    return flag


__all__ = ["DirectLaunch", "IndexScan", "direct_launch"]
