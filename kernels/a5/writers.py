"""The host tables that ``multicore`` launches are writing now: a launch may update a table with plain
read-modify-writes (``LaunchSpec.cpu_alone_kernel``) only while no other launch writes memory that table shares.

Every writer of a table on the ``multicore`` backend is a kernel launch (or the ``(1, 1)`` scalar fallback, a CPU
atomic). Their atomics compose: calls from several Python threads into one table lose no update, as on the
hardware. A plain ``table[e] += v`` does not compose with anything that writes ``table[e]`` between its load and
its store: that update would be lost, or lose this one. So each such writer registers its table here for as long
as it runs:

* :meth:`TableWriters.enter_shared`: any number at once (atomics, and stores, which compose with atomics); it waits
  while a plain writer runs on memory its table shares (a plain launch is one thread's pass over at most 512K
  updates: about 1 ms in float32 and 4.5 ms in float16 on the 2-core development machine);
* :meth:`TableWriters.run_alone`: runs a plain writer only if no other writer, shared or plain, is registered on
  memory its table shares, and otherwise returns False at once (its caller then runs the atomic form, shared): it
  never waits, so plain writers cannot starve or deadlock one another.

Each writer registers first and checks the others second, each step one dict operation (atomic under the GIL): of
two writers that overlap, the later to register sees the
earlier, so a plain writer and another writer never both run; at worst both back off (the plain one runs its
atomic form, the shared one polls again). No lock is taken: a tile op's launch pays about half a microsecond for
its registration. Overlap is ``np.may_share_memory`` (the bounds of the two arrays), so calls on separate tables
never wait for each other. Only this package's launches register: a numpy write into a table while one of our
calls updates it is a race in the caller's program, with atomics or without.

A registration is made inside the ``try`` whose ``finally`` drops it, and dropped by a single dict operation
(nothing before it at which Python would raise a pending ``KeyboardInterrupt``): an interrupt cannot leave one
behind. (A launch is one compiled call: an interrupt that arrives during it is raised once it returns.)
"""
from __future__ import annotations

import itertools
import os
import time

import numpy as np

WAIT_SLICE_S = 20e-6
"""A shared writer blocked by a plain one polls this often (seconds): a plain launch lasts a few milliseconds at most,
and the poll is the only wait there is (no condition variable to leave signalled)."""


def _key(table):
    """The array a writer registers: the table, or the first of its views (the float32 Max / Min pair, a 16-bit
    float Add's boundary-word triple)."""
    return table[0] if isinstance(table, tuple) else table


def _overlaps(table: np.ndarray, writers: dict, token: int) -> bool:
    """Whether a writer in ``writers`` other than ``token`` has a table that may share memory with ``table``."""
    if not writers:  # the common case, one writer at a time: nothing to build
        return False
    # a snapshot: a writer leaving drops its entry while we look
    return any(other_token != token and np.may_share_memory(table, other)
               for other_token, other in tuple(writers.items()))


class TableWriters:
    """The registry of writers in flight (module docstring)."""

    def __init__(self) -> None:
        self._tokens = itertools.count()
        self._shared: dict[int, np.ndarray] = {}
        self._alone: dict[int, np.ndarray] = {}

    def token(self) -> int:
        """A new registration token (``next`` of a counter: one C call, safe under threads)."""
        return next(self._tokens)

    def enter_shared(self, token: int, table) -> None:
        """Register ``token`` as a composing writer of ``table``; wait while a plain writer runs on memory it
        shares. Call it inside the ``try`` whose ``finally`` calls :meth:`leave_shared` with the same token."""
        table = _key(table)
        shared, alone = self._shared, self._alone
        while True:
            shared[token] = table  # registered first, checked second (module docstring)
            if not _overlaps(table, alone, token):
                return
            del shared[token]
            time.sleep(WAIT_SLICE_S)

    def leave_shared(self, token: int) -> None:
        """Drop ``token``'s composing registration, if any (one dict operation: no point an interrupt can split)."""
        self._shared.pop(token, None)

    def run_alone(self, table, run, *args) -> bool:
        """``run(*args)``, a plain writer of ``table``, with ``table`` registered as written alone, and True; or,
        when another writer of memory ``table`` shares is registered, nothing and False."""
        table = _key(table)
        token = next(self._tokens)
        alone = self._alone
        try:  # registered inside the try: an exception (Ctrl-C) anywhere after it drops the registration
            alone[token] = table
            if _overlaps(table, self._shared, token) or _overlaps(table, alone, token):
                return False
            run(*args)
            return True
        finally:
            alone.pop(token, None)

    def busy(self) -> int:
        """How many writers are registered now (tests: none once every call has returned)."""
        return len(self._shared) + len(self._alone)


table_writers = TableWriters()
"""The one registry of the process."""


def _forget_writers() -> None:  # a forked child has none of the parent's threads, so none of their writers
    global table_writers
    table_writers = TableWriters()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_writers)

__all__ = ["TableWriters", "WAIT_SLICE_S", "table_writers"]
