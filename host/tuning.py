"""The host's tuned thresholds: one frozen table, read when a call is planned.

Each threshold picks between forms that give the same bits (one thread or all of them, a plain store or an
atomic, the serial loop or the owner path, one owner array or a copy per worker); none changes a result. Each
field has one line saying what it trades and where it was measured ("dev": the 2-core AMD EPYC development
machine, 32 MB L3; a bench name is a script under ``bench/``); the measurements themselves are in
docs/performance.md ("The thresholds"). The constants the kernels compile in are a table of their own,
:mod:`simt_pto.kernels.tuning` (the kernels may not import the host).

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
    """Rows copied on the calling thread up to this many bytes: a helper's wake-up vs a second core (bench_peers, dev, 2026-11-25)."""
    row_copy_one_thread_rows: int = 1 << 14
    """... and up to this many rows: each row costs its index and its miss, whatever its width (dev machine, 2026-11-30)."""
    early_wake_helpers: int = 1
    """1: helpers woken as a repeated call starts, their wake-up overlapping its checks; 0: at its launch (helper_start, 2026-11-30)."""
    elem_gather_one_thread_elems: int = 1 << 18
    """Elem gathers on the calling thread up to this many elements: a helper's wake-up vs overlapped misses (bench_peers, 2026-11-26)."""
    atomic_scatter_one_thread_updates: int = 1 << 16
    """Atomic scatters on the calling thread up to this many updates: the hand-off vs a second core (dev machine, 2026-11-25)."""
    plain_add_max_updates: int = 1 << 23
    """Elem Add (own type) as plain stores on one thread up to this many: locked ops vs two cores (bench_scatter_atomics, 2026-11-30)."""
    plain_rmw_max_updates: int = 1 << 24
    """... Elem Max / Min: a compare and store, no branch on the data, vs CAS loops on two cores (bench_scatter_atomics, 2026-11-30)."""
    plain_half_add_max_updates: int = 1 << 23
    """... Elem Add on float16 / bfloat16, word-bounded: the plain adder, vectorised, vs a CAS each (bench_scatter_atomics, 2026-11-30)."""
    plain_row_add_max_updates: int = 1 << 26
    """Row Add as plain read-modify-writes on one thread up to this many: no float atomic add (bench_scatter_atomics, 2026-11-30)."""
    plain_row_rmw_max_updates: int = 1 << 26
    """... Row Max / Min likewise, vectorised along a row, vs a CAS per element on two cores (bench_scatter_atomics, 2026-11-30)."""
    serial_last_max_updates: int = 1 << 22
    """Elem Conflict::Last (auto) as the serial loop up to this many updates: cached stores vs the owner path (dev, 2026-11-26)."""
    serial_last_max_table_bytes: int = 8 << 20
    """... or into a table of at most this many bytes, which the 32 MB L3 holds (bench_last_owners, dev machine, 2026-11-26)."""
    serial_row_last_max_bytes: int = 1 << 18
    """Row Conflict::Last (auto) as the serial loop up to this many source bytes: vs the owner path (bench_row_last, 2026-11-29)."""
    serial_row_last_sparse_rows: int = 4
    """... or into a table of at least this many times the source's rows: vs the owner path's passes (bench_row_last, 2026-11-29)."""
    slot_path_max_work: int = 1 << 22
    """Slot-centric Last kernels (auto) while slots x sources stays below this: their quadratic work vs the owner path (dev, 2026-11-23)."""
    dense_owner_slots_per_update: int = 32
    """One owner per table slot while the table has at most this many slots an update: O(table) memory vs a sort (dev, 2026-11-24)."""
    dense_owner_min_slots: int = 1 << 16
    """Tables of at most this many slots always take the dense owner array: 256 KB of int32 at most (dev machine, 2026-11-24)."""
    owner_reset_one_worker_slots: int = 1 << 17
    """Owner resets on the calling thread up to this many slots: a fill at memory speed vs the hand-off (dev machine, 2026-11-25)."""
    owner_write_one_worker_slots: int = 1 << 16
    """Elem owner writes on the calling thread up to this many slots: two threads break even near 64K (dev machine, 2026-11-26)."""
    owner_claim_one_worker_updates: int = 1 << 19
    """Claims into one shared owner array on the calling thread up to this many updates: two cores trading lines (dev, 2026-11-26)."""
    owner_copy_min_updates: int = 1 << 18
    """Elem claims of more updates than this into few owners: a private copy per worker, contention vs a merge (dev, 2026-11-26)."""
    owner_copy_max_bytes: int = 1 << 20
    """... while a copy holds at most this many bytes, one core's L2, where it stays while its worker claims (dev machine, 2026-11-26)."""
    owner_copy_updates_per_slot: int = 2
    """... and the updates are at least this many times all copies' owners: their reset and merge (bench_last_owners, 2026-11-26)."""
    jax_zero_copy_result_bytes: int = 1 << 19
    """JAX results of at least this many bytes made zero-copy: its constructor vs JAX's copy (dev machine, JAX 0.12, 2026-11-29)."""
    max_tile_rows: int = 256
    """Cap on rows per Row tile of a whole-array call: more, smaller tiles give a GPU more blocks at once (set 2026-11-23, not measured)."""
    max_tile_elems: int = 4096
    """Cap on elements per Elem tile: four per thread of a full 1024-thread block (set 2026-11-23, not measured)."""

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
