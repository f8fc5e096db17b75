"""The boundary words of a 16-bit float Add on a table that starts or ends mid-word (``ElementFormat.F16_EDGE`` /
``BF16_EDGE``): the A5 ``atomicAdd`` on a half works on the aligned 32-bit word that holds it, and a word the table
covers only in part must never have its other half written, nor a byte outside the table's allocation touched
(MSCATTER.md, "Atomic Accumulation" and "Atomic Type Support": half and bfloat16_t ``atomicAdd`` on A5;
the emulator's rule that no byte outside a tensor is touched).

:class:`BoundaryWords` is the table argument such a launch takes and the guard it runs in (:func:`holding`); the
A5 planner (:mod:`.a5_planner`) builds one for the scatters that need it.
"""
from __future__ import annotations

import contextlib
import os
import threading

import numpy as np

from simt_pto.backend import imported
from simt_pto.kernels import writers

from .arrays import base_address


def _cuda():
    return imported("numba.cuda")


def holding(boundary):
    """The context a scatter's launches run in: :meth:`BoundaryWords.held` for a mid-word 16-bit float Add,
    else nothing."""
    return contextlib.nullcontext() if boundary is None else boundary.held()


class BoundaryWords:
    """The table argument of a float16 / bfloat16 atomicAdd on a table that starts or ends mid-word (F16_EDGE /
    BF16_EDGE): ``(words, edge, head)`` for ``kernels/a5/device.atomic_add_half_edge``, whose CAS loop works on the
    aligned 32-bit word that holds the element.

    A word the tensor covers only in part (the first one when the table starts at an odd 2-byte offset, the last
    one when it ends mid-word) is CASed in place when the word lies inside the memory allocation that holds the
    tensor (the other half is never changed: the CAS writes back what it read there). Otherwise (the word crosses
    the allocation's edge, or the allocation is unknown) it is staged: the element is loaded into ``edge`` (two
    words, the element in the same half) before the launch and written back after it, so that no access ever
    reaches a byte outside the allocation. Whether a word is staged depends on the word and its allocation only,
    so every call that touches it agrees; calls that stage the same word are serialised by a lock keyed by the
    word's address (:meth:`held`), so concurrent calls lose no update.

    ``head`` encodes the layout: bit 0 is set when element 0 is the high half of its word (the table starts at an
    odd 2-byte offset), bit 1 when that first word is staged (``words`` then starts at the next word). Element
    ``e`` is half ``(e + (head & 1)) & 1`` of word ``((e + (head & 1)) >> 1) - (head >> 1)`` of ``words``; an index
    past either end of ``words`` is ``edge[0]`` / ``edge[1]``. O(1) extra memory and traffic."""

    GUARD_NAME = "stage the mid-word boundary words before the launches, publish them after (under their locks)"

    def __init__(self, table, bits):
        """``table``: the table (a GlobalTensor, or a whole-array call's
        :class:`~.a5_planner.TableMemory`); ``bits``: its flat memory as uint16 (host or device view)."""
        self.device = table.on_device
        self._bits = bits
        n = table.size
        address = base_address(bits)
        odd_start = (address % 4) // 2
        tail = (n - odd_start) % 2  # 1: the last element is the low half of a word the tensor ends inside
        lo, hi, owner = _allocation(table.array, address, 2 * n)
        first = -odd_start if odd_start and address - 2 >= lo else odd_start  # element where ``words`` starts
        last = n + tail if tail and address + 2 * n + 2 <= hi else n - tail   # element where ``words`` ends
        words = None
        if first < 0 or last > n:  # a word reaching past the tensor, inside its allocation: a view of it
            words = _words_at(owner, address + 2 * first - lo, (last - first) // 2, self.device)
            if words is None:  # the allocation cannot be viewed as writable words: stage both ends
                first, last = odd_start, n - tail
        if words is None:
            words = bits[first:last].view(np.uint32)
        self.pieces = []  # (edge word, element, shift) of the staged elements
        if odd_start and first > 0:
            self.pieces.append((0, 0, 16))
        if tail and last < n:
            self.pieces.append((1, n - 1, 0))
        self.addresses = sorted({(address + 2 * e) & ~3 for _, e, _ in self.pieces})
        self._host_edge = np.zeros(2, dtype=np.uint32)
        self.edge = _cuda().to_device(self._host_edge) if self.device else self._host_edge
        self.arg = (words, self.edge, odd_start | (2 if first > 0 else 0))

    def stage(self) -> None:
        """Load each staged element into its edge word."""
        if not self.pieces:
            return
        if self.device:
            for w, e, shift in self.pieces:
                self._host_edge[w] = int(self._bits[e:e + 1].copy_to_host()[0]) << shift
            self.edge.copy_to_device(self._host_edge)
            return
        for w, e, shift in self.pieces:
            self._host_edge[w] = int(self._bits[e]) << shift

    def publish(self) -> None:
        """Write each staged element back into the table (a 16-bit store: only the tensor's own bytes)."""
        if not self.pieces:
            return
        back = self.edge.copy_to_host() if self.device else self._host_edge
        for w, e, shift in self.pieces:
            value = (int(back[w]) >> shift) & 0xFFFF
            if self.device:
                self._bits[e:e + 1].copy_to_device(np.array([value], dtype=np.uint16))
            else:
                self._bits[e] = value

    @contextlib.contextmanager
    def held(self):
        """Stage, run the body (the launch), publish: under the locks of the staged words, so that calls staging
        the same word run one at a time. The publish runs however the body ends (an interrupted launch keeps the
        adds it made). Staging and publishing are a read-modify-write of the staged elements that an update by
        another writer in between would be lost to, so a host table with staged elements is registered as written by
        this call alone (:mod:`simt_pto.kernels.writers`), before the locks are taken; its launches, whose table
        argument the registration ``covers``, are admitted under it."""
        registry = writers.table_writers
        token = registry.token()
        try:
            if self.pieces and not self.device:
                registry.enter_exclusive(token, self._bits, covers=self.arg[0])
            locks = boundary_locks(self.addresses, self.device)
            for lock in locks:
                lock.acquire()
            try:
                self.stage()
                try:
                    yield self.arg
                finally:
                    self.publish()
            finally:
                for lock in reversed(locks):
                    lock.release()
        finally:
            registry.leave_exclusive(token)


_LOCK_STRIPES = 64
_boundary_locks = tuple(threading.Lock() for _ in range(_LOCK_STRIPES))


def boundary_locks(addresses, device: bool) -> list:
    """The locks of staged boundary words (striped by address, in one global order so that two calls never wait
    on each other crosswise)."""
    stripes = sorted({(hash((device, a)) >> 2) % _LOCK_STRIPES for a in addresses})
    return [_boundary_locks[i] for i in stripes]


def _reset_boundary_locks():  # a forked child has none of the parent's threads: no lock is really held
    global _boundary_locks
    _boundary_locks = tuple(threading.Lock() for _ in range(_LOCK_STRIPES))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_boundary_locks)


def _allocation(array, address: int, nbytes: int) -> tuple[int, int, object]:
    """``(lo, hi, owner)``: the byte range of the allocation that holds ``array``'s memory, as far as it can be
    known, and what holds all of it: for a host array, a writable uint8 view of the owning numpy array or buffer
    object; for device memory (the memory block of a CuPy array, the storage of a PyTorch tensor) the array
    itself, which keeps the allocation alive. Unknown: the array's own bytes and no owner."""
    if isinstance(array, np.ndarray):
        base = array
        while isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        owner = None
        if isinstance(base, np.ndarray):
            if base.flags.writeable and base.size and (base.flags.c_contiguous or base.flags.f_contiguous):
                owner = (base.reshape(-1) if base.flags.c_contiguous else base.T.reshape(-1)).view(np.uint8)
        else:
            try:
                owner = np.frombuffer(memoryview(base).cast("B"), dtype=np.uint8)
            except (TypeError, ValueError, BufferError):
                pass
        if owner is not None and owner.size and owner.flags.writeable:
            return owner.ctypes.data, owner.ctypes.data + owner.size, owner
        return address, address + nbytes, None
    module = type(array).__module__.split(".")[0]
    try:
        if module == "cupy":
            mem = array.data.mem
            return int(mem.ptr), int(mem.ptr) + int(mem.size), array
        if module == "torch":
            storage = array.untyped_storage()
            return int(storage.data_ptr()), int(storage.data_ptr()) + int(storage.nbytes()), array
    except (AttributeError, TypeError, RuntimeError):
        pass
    return address, address + nbytes, None


class _DeviceWords:
    """``count`` uint32 words of device memory at ``address`` (for ``cuda.as_cuda_array``); holds the owner."""

    def __init__(self, owner, address: int, count: int):
        self.owner = owner
        self.__cuda_array_interface__ = {"shape": (count,), "strides": None, "typestr": "<u4",
                                         "data": (address, False), "version": 3}


def _words_at(owner, offset: int, count: int, device: bool):
    """``count`` uint32 words at byte ``offset`` of the allocation ``owner`` holds (a view that reaches the half
    word the tensor does not cover), or None when the allocation is unknown."""
    if owner is None:
        return None
    if device:
        lo = _allocation(owner, 0, 0)[0]
        return _cuda().as_cuda_array(_DeviceWords(owner, lo + offset, count))
    return owner[offset:offset + 4 * count].view(np.uint32)


__all__ = ["BoundaryWords", "boundary_locks", "holding"]
