"""Operands that share memory with what a call writes: refused before anything is written.

On the hardware's GM -> UB path an MSCATTER's ``src`` and ``idx`` (and an MGATHER's ``dst``) are UB tiles: they
cannot alias the GM table. The emulator's operands are host or device arrays, so a call could read indices or
values that it has itself just overwritten (a scatter whose ``idx`` is a view of the table), and then write
anywhere. Every entry point therefore checks that no memory the call writes (the table of a scatter; the
destination, the L1 scratch and any output argument of a gather) overlaps any other operand of the call.
Operands that are only read may overlap each other (a gather whose ``idx`` lies inside the table).

The check is conservative and O(1): byte ranges ``[first, last]`` of each operand (``np.may_share_memory``
for host arrays; the ``__cuda_array_interface__`` pointer and extent for device arrays), never the exact
``np.shares_memory``, which can take exponential time on strided views. Host and device memory never overlap.
"""
from __future__ import annotations

import numpy as np

from .errors import ConstraintError

RULE = "operands the call writes share no memory with its other operands"


def _device_bounds(obj) -> tuple[int, int] | None:
    """The byte range ``[lo, hi)`` a device array spans (from its ``__cuda_array_interface__``)."""
    info = getattr(obj, "__cuda_array_interface__", None)
    if info is None or isinstance(obj, np.ndarray):
        return None
    ptr = int(info["data"][0])
    itemsize = np.dtype(info["typestr"]).itemsize
    shape = tuple(info["shape"])
    if not shape or 0 in shape:
        return (ptr, ptr) if shape else (ptr, ptr + itemsize)
    strides = info.get("strides")
    if strides is None:
        return ptr, ptr + itemsize * int(np.prod(shape))
    lo = ptr + sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    hi = ptr + sum((n - 1) * s for n, s in zip(shape, strides) if s > 0) + itemsize
    return lo, hi


def ranges_overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """True when the non-empty byte ranges ``[lo, hi)`` ``a`` and ``b`` share a byte."""
    return a[0] < b[1] and b[0] < a[1] and a[0] < a[1] and b[0] < b[1]


def may_overlap(a, b) -> bool:
    """True when ``a`` and ``b`` (numpy or device arrays) may share a byte (a conservative bounds check)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        # numpy's bounds check (its default effort), in C: ~0.25 µs; empty arrays share nothing
        return bool(np.may_share_memory(a, b))
    if a is None or b is None:
        return False
    ra, rb = _device_bounds(a), _device_bounds(b)
    if ra is None or rb is None:  # host against device memory: separate address spaces
        return False
    return ranges_overlap(ra, rb)


def check_disjoint(op: str, target: str | None, written: dict, read: dict) -> None:
    """Refuse a call in which an operand it writes (``written``: name -> array) may share memory with any other
    operand (``read``, or another written one), naming both; None entries are absent operands."""
    names = list(written)
    for i, name in enumerate(names):
        mine = written[name]
        others = read.items() if i + 1 == len(names) else [(n, written[n]) for n in names[i + 1:]] + list(read.items())
        for other, array in others:
            if may_overlap(mine, array):
                verb = "writes" if other in written else "reads"
                raise ConstraintError(op, target, RULE,
                                      f"{name} (which the call writes) shares memory with {other} (which it "
                                      f"{verb}); pass a copy of one of them")


__all__ = ["RULE", "check_disjoint", "may_overlap", "ranges_overlap"]
