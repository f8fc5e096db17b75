"""The host tables this package's writers are updating now, on every target and A5 backend: a writer that updates
a table with plain read-modify-writes runs only while no other writer updates memory that table shares.

Atomics compose with atomics and with stores: calls from several Python threads into one table lose no update, as
on the hardware. A plain ``table[e] = table[e] op v`` composes with nothing that writes ``table[e]`` between its load
and its store: that update would be lost, or lose this one. So every writer of host table memory registers the
memory it writes for as long as it writes it, in one of three ways:

* :meth:`TableWriters.enter_shared` (``write_shared``): a composing writer, any number at once. The A5 kernels on
  ``multicore`` (atomics, and the stores of Conflict::Last / Default), the ``(1, 1)`` scalar fallback's CPU atomic,
  the A2/A3 loops of atomic NONE (stores), a whole-array gather's stores into the caller's ``out=``, TSTORE's into a
  host tensor. It waits while a plain writer runs, or waits to run, on memory its table shares (a plain launch is one
  thread's pass over at most ``HostTuning.plain_add_max_updates`` or ``plain_rmw_max_updates`` /
  ``plain_half_add_max_updates`` updates: a few milliseconds).
* :meth:`TableWriters.run_alone`: a plain writer that has an atomic form to fall back on (the A5 plain-store Elem
  kernel, ``LaunchSpec.multicore_plain_kernel``). It runs only if no other writer of memory its table shares is registered
  or waiting, and otherwise returns False at once (its caller then runs the atomic form, shared): it never waits.
* :meth:`TableWriters.enter_exclusive` / :meth:`TableWriters.run_exclusive`: a plain writer with no atomic form. It
  waits until it can run alone. The A2/A3 loops of atomic Add (a sequential read-modify-write per element); a launch
  on Numba's CUDA simulator (which copies the table in and, after the launch, the whole copy back); a mid-word 16-bit
  float Add whose boundary element is staged (read before its launches, written back after them); a non-contiguous
  table a whole-array scatter updates through a contiguous copy (read into it, updated there, written back).

Each writer registers first and checks the others second, each step one dict operation (atomic under the GIL): of
two writers that overlap, the later to register sees the earlier, so a plain writer never runs beside another
writer of memory its table shares. No lock is taken, and a composing writer that finds no plain writer registered
anywhere (the common case) checks nothing else: a tile op's launch pays about half a microsecond for its
registration. Overlap is ``np.may_share_memory`` (the bounds of the two arrays), so calls on separate tables never
wait for each other. Only this package's writers register: a numpy write into a table while one of our calls
updates it is a race in the caller's program, with atomics or without.

Waiting, without deadlock, livelock or starvation. Every writer holds a token (a counter: older writers hold smaller
ones) for all its tries.

* An exclusive writer announces itself (an entry in the registry) and, announced, waits for the overlapping writers
  that are running to finish: composing writers that register after its announcement see it and step back, so
  they drain and a stream of new ones cannot starve it.
* Of the writers that wait on overlapping memory, the one with the smallest token goes first: an exclusive writer
  steps back (withdraws its announcement) while an older exclusive writer or an older composing writer waits on
  memory its table shares, and does not announce itself again while one does; a composing writer that stepped back
  is registered as waiting, with its token. So two waiting writers never wait for each other, the oldest waiter is
  never held back by a younger one, and the running writers it waits for each finish a bounded piece of work.
* A writer that holds a registration waits for no other: registrations do not nest, with two exceptions that
  cannot wait. A non-contiguous table's calls write its private contiguous copy, memory no other writer registers.
  The launches of a mid-word 16-bit float Add with a staged element run inside their guard's exclusive
  registration, which names their table argument as ``covers``: a registration of a table that an announced
  exclusive writer covers is admitted at once (it is that writer's own launch). The locks taken under a registration
  (the simulator's, a staged boundary word's) are held only by writers that have theirs and run.

A registration is made inside the ``try`` whose ``finally`` drops it, and dropped by a single dict operation (a
composing writer's running and waiting states are one entry; an exclusive writer that steps back has none), with
nothing before it at which Python would raise a pending ``KeyboardInterrupt``: an interrupt cannot leave one behind.
(A launch or an A2/A3 loop is one compiled call: an interrupt that arrives during it is raised once it returns.)
"""
from __future__ import annotations

import itertools
import os
import time
from typing import NamedTuple

import numpy as np

from simt_pto.kernels.tuning import WAIT_SLICE_S


def _wait() -> None:
    """One poll's pause of a waiting writer (``WAIT_SLICE_S``, :mod:`simt_pto.kernels.tuning`): a plain writer lasts a
    few milliseconds at most, and the poll is the only wait there is (no condition variable to leave signalled)."""
    time.sleep(WAIT_SLICE_S)


def table_key(table):
    """The array a writer registers: the table, or the first of its views (the float32 Max / Min pair, a 16-bit
    float Add's boundary-word triple)."""
    return table[0] if isinstance(table, tuple) else table


class _Waiting(NamedTuple):
    """A composing writer's entry while it has stepped back for a plain writer (:meth:`TableWriters.enter_shared`):
    registered as waiting, not as writing."""
    table: np.ndarray


class _Exclusive(NamedTuple):
    """An announced exclusive writer: the memory it writes and the table argument its own launches register, if
    any (``covers``, :meth:`TableWriters.enter_exclusive`)."""
    table: np.ndarray
    covers: object


def _overlaps(table: np.ndarray, writers: dict, token: int) -> bool:
    """Whether a writer in ``writers`` other than ``token`` has a table that may share memory with ``table``."""
    if not writers:  # the common case, one writer at a time: nothing to build
        return False
    return any(other_token != token and np.may_share_memory(table, _table_of(other))
               for other_token, other in _snapshot(writers))


def _table_of(entry) -> np.ndarray:
    """The memory of a registry entry: an array (a writer writing), :class:`_Waiting` or :class:`_Exclusive`."""
    return entry if isinstance(entry, np.ndarray) else entry.table


def _overlapping(table: np.ndarray, writers: dict, token: int) -> list[tuple[int, object]]:
    """``(token, entry)`` of the writers in ``writers`` other than ``token`` whose table may share memory with
    ``table``."""
    return [(other_token, entry) for other_token, entry in _snapshot(writers)
            if other_token != token and np.may_share_memory(table, _table_of(entry))]


def _snapshot(writers: dict):
    """The items of a copy of ``writers``, which other threads' writers enter and leave while we look. ``dict.copy``
    is one C call that makes no object the garbage collector tracks once it has begun: ``tuple(writers.items())``
    makes a pair per entry, and a collection that one of them set off could run a finalizer, switch threads and let
    another writer change the dict mid-copy ("dictionary changed size during iteration", seen in
    tests/test_writers_across_targets.py on 2026-12-01)."""
    return writers.copy().items()


class TableWriters:
    """The registry of writers in flight (module docstring)."""

    def __init__(self) -> None:
        self._tokens = itertools.count()
        self._shared: dict[int, np.ndarray | _Waiting] = {}  # composing writers, writing (an array) or waiting
        self._alone: dict[int, np.ndarray] = {}               # run_alone's plain writers, running
        self._exclusive: dict[int, _Exclusive] = {}           # announced exclusive writers, waiting or running

    def token(self) -> int:
        """A new registration token (``next`` of a counter: one C call, safe under threads; older is smaller)."""
        return next(self._tokens)

    # -- composing writers --------------------------------------------------------------------------------------

    def enter_shared(self, token: int, table) -> None:
        """Register ``token`` as a composing writer of ``table``; wait while a plain writer runs, or an exclusive
        one is announced, on memory it shares. Call it inside the ``try`` whose ``finally`` calls
        :meth:`leave_shared` with the same token."""
        table = table[0] if isinstance(table, tuple) else table  # (table_key, inline)
        shared = self._shared
        shared[token] = table  # registered first, checked second (module docstring)
        if not self._alone and not self._exclusive:  # no plain writer anywhere: nothing to check
            return
        alone, exclusive = self._alone, self._exclusive
        while True:
            if not _overlaps(table, alone, token):
                announced = _overlapping(table, exclusive, token)
                if not announced or any(entry.covers is table for _, entry in announced):  # (covered: its own)
                    shared[token] = table  # writing (one operation: it may have been waiting)
                    return
            shared[token] = _Waiting(table)  # stepped back: waiting, with its token (older waiters go first)
            _wait()
            shared[token] = table

    def leave_shared(self, token: int) -> None:
        """Drop ``token``'s composing registration, writing or waiting, if any (one dict operation: no point an
        interrupt can split)."""
        self._shared.pop(token, None)

    # -- plain writers with an atomic form ----------------------------------------------------------------------

    def run_alone(self, table, run, *args) -> bool:
        """``run(*args)``, a plain writer of ``table``, with ``table`` registered as written alone, and True; or,
        when another writer of memory ``table`` shares is registered (writing, waiting or announced), nothing and
        False."""
        table = table[0] if isinstance(table, tuple) else table  # (table_key, inline)
        token = next(self._tokens)
        alone = self._alone
        try:  # registered inside the try: an exception (Ctrl-C) anywhere after it drops the registration
            alone[token] = table
            # (each registry looked at only when it holds another writer: a repeated small call is alone)
            if ((self._shared and _overlaps(table, self._shared, token))
                    or (len(alone) > 1 and _overlaps(table, alone, token))
                    or (self._exclusive and _overlapping(table, self._exclusive, token))):
                return False
            run(*args)
            return True
        finally:
            alone.pop(token, None)

    # -- plain writers without one ------------------------------------------------------------------------------

    def enter_exclusive(self, token: int, table, covers=None) -> None:
        """Register ``token`` as the only writer of ``table``'s memory: announce it, then wait until no other writer
        of memory it shares runs (module docstring: the oldest waiter goes first). ``covers``: the table argument
        of launches this writer runs itself, which are then admitted at once. Call it inside the ``try`` whose
        ``finally`` calls :meth:`leave_exclusive` with the same token."""
        table = table_key(table)
        exclusive = self._exclusive
        entry = _Exclusive(table, covers)
        exclusive[token] = entry  # announced first, the others checked second
        if not self._shared and not self._alone and len(exclusive) == 1:  # no other writer anywhere (common case)
            return
        while True:
            older = self._older_waiter(table, token)
            if older is None:  # a launch of the exclusive writer that covers it: admitted at once, unannounced
                exclusive.pop(token, None)
                return
            if older:
                exclusive.pop(token, None)  # step back, or stay back, for an older waiter
            else:
                exclusive[token] = entry  # announced (again: the same entry) first, the others checked second
                if self._none_running(table, token):
                    return
            _wait()

    def _older_waiter(self, table: np.ndarray, token: int) -> bool | None:
        """Whether a writer older than ``token`` waits (or runs, announced) on memory ``table`` shares: an announced
        exclusive writer, or a composing writer registered as waiting. None when an announced exclusive writer
        ``covers`` ``table`` (``table`` is then that writer's own launch)."""
        announced = _overlapping(table, self._exclusive, token)
        if any(entry.covers is table for _, entry in announced):
            return None
        if any(other_token < token for other_token, _ in announced):
            return True
        return any(other_token < token and isinstance(entry, _Waiting)
                   for other_token, entry in _overlapping(table, self._shared, token))

    def _none_running(self, table: np.ndarray, token: int) -> bool:
        """Whether no writer of memory ``table`` shares but ``token`` is registered as writing: no plain writer, no
        other announced exclusive one (it runs, or is about to step back), no composing one that is not waiting."""
        return (not _overlaps(table, self._alone, token) and not _overlapping(table, self._exclusive, token)
                and not any(isinstance(entry, np.ndarray) for _, entry in _overlapping(table, self._shared, token)))

    def leave_exclusive(self, token: int) -> None:
        """Drop ``token``'s exclusive registration, if any (one dict operation)."""
        self._exclusive.pop(token, None)

    def run_exclusive(self, table, run, *args):
        """``run(*args)``, a plain writer of ``table`` with no atomic form, registered as its only writer for as long
        as it runs (:meth:`enter_exclusive`: it waits its turn); returns what ``run`` returns."""
        token = next(self._tokens)
        try:  # registered inside the try: an exception (Ctrl-C) anywhere after it drops the registration
            self.enter_exclusive(token, table)
            return run(*args)
        finally:
            self._exclusive.pop(token, None)

    def busy(self) -> int:
        """How many writers are registered now, writing or waiting (tests: none once every call has returned)."""
        return len(self._shared) + len(self._alone) + len(self._exclusive)


table_writers = TableWriters()
"""The one registry of the process."""


def write_shared(table, write, *args):
    """``write(*args)`` (and what it returns), a writer of the host array ``table`` whose updates compose (atomics,
    stores), registered as such for its duration (:meth:`TableWriters.enter_shared`: it waits while a plain writer
    writes, or waits to write, memory ``table`` shares)."""
    registry = table_writers
    token = next(registry._tokens)  # (token() and leave_shared(), inline: a small launch's registration is most of it)
    try:
        # (enter_shared's common case, inline: registered first, checked second; it waits only beside a plain writer)
        registry._shared[token] = table[0] if isinstance(table, tuple) else table
        if registry._alone or registry._exclusive:
            registry.enter_shared(token, table)
        return write(*args)
    finally:
        registry._shared.pop(token, None)


def run_exclusive(table, run, *args):
    """``run(*args)``, a plain writer of the host array ``table`` with no atomic form, registered as its only writer
    for as long as it runs (:meth:`TableWriters.run_exclusive`), in the registry of the process as it is at the
    call: what a loop bound once and kept calls (a bound method of the registry would keep a forked child on its
    parent's registry, with the writers of threads the child does not have)."""
    return table_writers.run_exclusive(table, run, *args)


def _forget_writers() -> None:  # a forked child has none of the parent's threads, so none of their writers
    global table_writers
    table_writers = TableWriters()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_writers)

__all__ = ["TableWriters", "run_exclusive", "table_key", "table_writers", "write_shared"]
