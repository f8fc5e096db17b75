"""The host's tuned thresholds: one frozen table, read when a call is planned.

Each threshold picks between forms that give the same bits (one thread or all of them, a plain store or an
atomic, the serial loop or the owner path, one owner array or a copy per worker); none changes a result. Each
field says what it trades and where it was measured; the measurements themselves are in docs/performance.md
("The thresholds"). The values are those measured on the 2-core development machine (AMD EPYC, 32 MB L3). The
constants the kernels compile in are a table of their own, :mod:`simt_pto.kernels.tuning` (the kernels may not
import the host).

:func:`configure` replaces thresholds (a benchmark forcing one form, a test reaching a path at a small size) and
:func:`tuned` does so for a ``with`` block. A kept plan was built under the table of its time, so both empty the
call caches (``simt_pto.plan.CallCache``): the next call of each signature is planned again. The table is one
object, swapped whole: a call planned while another thread configures sees the old table or the new one, never a
mix.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import operator
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from simt_pto.plan import CallCache


@dataclass(frozen=True)
class HostTuning:
    """The thresholds of the ``multicore`` backend's forms and of the whole-array planner (module docstring)."""

    row_copy_one_thread_bytes: int = 1 << 21
    """A launch that copies at most this many bytes of rows runs on the calling thread: a helper's wake-up
    against a second core's bandwidth (two threads break even near 2 MB, ``bench/bench_peers.py``)."""
    row_copy_one_thread_rows: int = 1 << 14
    """... if it copies at most this many rows: each row costs its index and its miss whatever its width (16384 rows
    of 32-128 B: one thread ahead, 0.055-0.071 ms against 0.064-0.082; 32768 rows of 32-64 B: two, 0.093-0.113 ms
    against 0.108-0.135)."""
    early_wake_helpers: int = 1
    """1: a repeated call on several threads wakes its helper threads as it starts, so that their wake-up (15-30 µs
    on a VM) overlaps its checks and its result's making; 0: as its launch starts (``bench/helper_start.py``: the
    helper's first range 6-14 µs after its caller's against 17-26, the call up to 10% faster at 1M-2M; dev machine,
    2026-11-30)."""
    elem_gather_one_thread_elems: int = 1 << 18
    """An Elem gather of at most this many elements runs on the calling thread: a helper's wake-up, sometimes a
    large part of a quarter-millisecond call on a shared host, against a second core's overlapped misses."""
    atomic_scatter_one_thread_updates: int = 1 << 16
    """A scatter with an atomic per element of at most this many updates runs its atomic kernel on the calling
    thread: the hand-off against a second core."""
    plain_add_max_updates: int = 1 << 23
    """An Elem scatter Add on the element type itself (float32, the integers) of at most this many updates runs as
    plain load-add-stores on the calling thread while nothing else writes its table: x86's locked instructions wait
    for their own misses, and the serial walk prefetches its targets further ahead in a table the caches do not hold
    (``kernels/tuning.py``, ``SERIAL_PREFETCH_*``). ``bench/bench_scatter_atomics.py --coalesce elem``, n updates into
    4n elements, plain / atomic on two threads: float32 3.7-5.4 / 6.0-7.2 ms at 2M, 9.4-9.7 / 12.9-13.3 at 4M, 21.8 /
    27.6 at 8M, 48.6-49.8 / 56-61 at 16M; int32 21.7 / 23.9 at 8M, 49.3 / 48.9 at 16M (dev machine, 2026-11-30)."""
    plain_rmw_max_updates: int = 1 << 24
    """... and an Elem scatter Max / Min of at most this many: a compare and a store with no branch on the data
    (``kernels/store.py``, ``rmw_max`` and ``SEQUENTIAL_HELPERS``) against the atomic kernel's compare-and-swap loops
    on two threads. The same bench, Max: float32 0.40 / 1.19 ms at 256K, 5.0 / 9.4-9.7 at 2M, 10.8 / 19.5-19.8 at
    4M, 23.3 / 39.5 at 8M, 50 / 84-97 at 16M, the largest measured; int32 22.1 / 35.5 at 8M, 49.6 / 73.3 at 16M."""
    plain_half_add_max_updates: int = 1 << 23
    """... and an Elem scatter Add on float16 / bfloat16 (a table that starts and ends on a word) of at most this many:
    a compare-and-swap on the element's word and the adder per atomic update, against the plain adder, which
    vectorises (``intrinsics.cpu_plain_add_half``). The same bench: float16 1.44 / 4.19 ms at 1M, 9.4 / 18.7 at 4M,
    20.8 / 41.0 at 8M; bfloat16 1.56 / 3.40, 9.4 / 15.6, 21.2 / 34.2."""
    plain_row_add_max_updates: int = 1 << 26
    """A Row scatter Add on the element type itself (float32, the integers) or on float16 / bfloat16 (a table that
    starts and ends on a word) of at most this many elements runs as plain read-modify-writes on the calling thread,
    row by row in source order, while nothing else writes its table: x86 has no float atomic add, and the atomic
    kernel's compare-and-swap per element costs more than a second core gives (``bench/bench_scatter_atomics.py``, plain
    / atomic on two threads, the plain row add vectorised: float32 0.31 / 2.70 ms at 1M, 1.4 / 10.7 at 4M, 6.1 / 42.6
    at 16M, 32 / 167 at 64M, the largest measured; int32 0.38 / 2.69 at 1M; float16 0.34 / 5.8 at 1M, 6.5 / 81 at
    16M; bfloat16 0.44 / 4.7 at 1M; dev machine, 2026-11-30). Measured with two threads for the atomic kernel:
    more cores share it further."""
    plain_row_rmw_max_updates: int = 1 << 26
    """... and so does a Row scatter Max / Min of at most this many (its compare and store, with no branch on the
    data, vectorise along a row): plain / atomic on two threads, into a fresh copy of the table each call, float32
    Max 0.12 / 0.94 ms at 256K, 1.9 / 13.4 at 4M, 6.7 / 55 at 16M, 31 / 223 at 64M, the largest measured; int32 0.06
    / 0.58 at 256K, 6.4 / 37.7 at 16M (dev machine, 2026-11-30)."""
    serial_last_max_updates: int = 1 << 22
    """An Elem Conflict::Last (``last_path="auto"``) of at most this many updates is the serial loop on the
    calling thread, not the owner path: one thread's stores stay in its caches (ahead up to 4M updates)."""
    serial_last_max_table_bytes: int = 8 << 20
    """... and so is one of any number of updates into a table of at most this many bytes: the table stays in
    the 32 MB last-level cache, and the serial loop's speed does not move with the host's core placement."""
    serial_row_last_max_bytes: int = 1 << 18
    """A Row Conflict::Last (``last_path="auto"``) of at most this many bytes of source rows is the serial loop on the
    calling thread, not the owner path: it copies every source row, the owner path each table row once, but below
    this the owner path's three launches cost more (level or behind at 256 KB for rows of 32 B to 1 KB, 1 and 16
    updates a table row; ``bench/bench_row_last.py``, dev machine, 2026-11-29)."""
    serial_row_last_sparse_rows: int = 4
    """... and so is one into a table of at least this many times the source's rows: the owner path's reset and
    write pass over every table row, more than the updates (the serial loop 1.2x-3.3x faster there, 256 KB to 4 MB
    of rows of 32 and 256 bytes)."""
    slot_path_max_work: int = 1 << 22
    """``last_path="auto"`` takes the slot-centric Last kernels while slots x sources stays below this (on
    ``multicore`` an Elem call past the serial loop's limits; never a Row call there: the serial loop or the owner
    path)."""
    dense_owner_slots_per_update: int = 32
    """The owner path keeps one owner per table slot while the table has at most this many slots per update
    (plus :attr:`dense_owner_min_slots`): O(table) memory and no sort, against a sort of the updates."""
    dense_owner_min_slots: int = 1 << 16
    """Tables of at most this many slots always take the dense owner array (256 KB of int32 at most)."""
    owner_reset_one_worker_slots: int = 1 << 17
    """The owner reset over at most this many slots runs on the calling thread: a fill at memory speed gains less
    from a second core than the hand-off costs."""
    owner_write_one_worker_slots: int = 1 << 16
    """The Elem owner write over at most this many slots runs on the calling thread (two threads break even near
    64K slots)."""
    owner_claim_one_worker_updates: int = 1 << 19
    """An owner claim of at most this many updates into one shared owner array runs on the calling thread: two
    cores trading the owners' cache lines gain less than the hand-off costs."""
    owner_copy_min_updates: int = 1 << 18
    """An Elem claim of more than this many updates into few owners gives each worker a private copy of them."""
    owner_copy_max_bytes: int = 1 << 20
    """... while a copy holds at most this many bytes (one core's L2, where a copy stays while its worker claims)."""
    owner_copy_updates_per_slot: int = 2
    """... and while the updates are at least this many times the owners of all copies: the copies' reset and
    merge cost a pass over every copy."""
    jax_zero_copy_result_bytes: int = 1 << 19
    """A repeated gather of a JAX table makes a result of at least this many bytes at JAX's 64-byte boundary, which
    JAX then takes as it is: its zero-copy constructor (about 13 µs) against its copy of a smaller result (8.7 µs at
    2 KB, 11 at 128 KB, 18 at 512 KB, 93 at 4 MB; a whole gather level at 256 KB; dev machine, JAX 0.12, 2026-11-29)."""
    max_tile_rows: int = 256
    """Default cap on rows per Row tile of a whole-array call: more, smaller tiles give a GPU more blocks at once."""
    max_tile_elems: int = 4096
    """Default cap on elements per Elem tile (four per thread of a full 1024-thread block)."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise TypeError(f"tuning: {field.name} must be a non-negative int, got {type(value).__name__} "
                                f"{value!r}")
        if self.max_tile_rows < 1 or self.max_tile_elems < 1:
            raise ValueError(f"tuning: max_tile_rows and max_tile_elems must be at least 1, got "
                             f"{self.max_tile_rows} and {self.max_tile_elems}")


_in_force = [HostTuning()]
"""The table in force, in a one-slot list that :func:`configure` swaps."""
_swap = threading.Lock()

current: Callable[[], HostTuning] = functools.partial(operator.getitem, _in_force, 0)
"""``current()``: the table in force, what a call planned now reads. (A call into C: a planned call reads the table
several times, and a Python function would add a frame to each.)"""


def configure(**changes: int) -> HostTuning:
    """Replace the named thresholds (unknown names: TypeError; each a non-negative int) and empty the call caches;
    returns the table before, which ``configure(**dataclasses.asdict(before))`` puts back."""
    with _swap:
        before = _in_force[0]
        _in_force[0] = dataclasses.replace(before, **changes)
    CallCache.clear_all()
    return before


@contextlib.contextmanager
def tuned(**changes: int) -> Iterator[HostTuning]:
    """The thresholds ``changes`` for the ``with`` block (:func:`configure`), the table before it afterwards."""
    before = configure(**changes)
    try:
        yield current()
    finally:
        configure(**dataclasses.asdict(before))


__all__ = ["HostTuning", "configure", "current", "tuned"]
