"""The resolved call ("plan") every target runs, the refusal of out-of-range indices, and the memo of validated calls.

:mod:`simt_pto.constraints` (VEC destinations) and :mod:`simt_pto.l1_gather` (GM -> L1) validate a call into a
:class:`Plan`; both refuse out-of-range indices with :func:`check_oob`, the whole-array ops with
:func:`check_indices` (the one refusal, and :func:`out_of_range` its one wording).

Validating a call's kinds, shapes, dtypes and policies costs far more than a small call's work, and gives the same
answer for every call of the same signature. :class:`CallCache` keeps those answers (a plan whose operands are
left out, :meth:`Plan.repointed` puts a call's own back in); what depends on the operands' memory and values (their
overlap, alignment, the index values) is checked on every call.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from collections.abc import Hashable
from typing import Any

import numpy as np

from . import dtypes as _dt
from .backend import ON_CHANGE
from .enums import Coalesce, GatherExec, Layout, ScatterAtomicOp, ScatterConflict, TileType
from .errors import OutOfBoundsError
from .enums import IndexRule
from .tensor import GlobalTensor
from .tile import Tile


@dataclass
class Plan:
    """A validated MGATHER / MSCATTER call, resolved to what the target's kernels need."""

    op: str                     # "MGATHER" or "MSCATTER"
    target: str
    coalesce: Coalesce
    oob: object                 # GatherOOB or ScatterOOB
    rule: int                   # kernels.index_policy rule the OOB policy compiles to
    dtype: _dt.DType
    tile: Tile                  # dst (gather) or src (scatter)
    idx: Tile | GlobalTensor    # UB index tile (GM tensor on the GM -> L1 path)
    table: GlobalTensor
    capacity: int               # TableRows (Row) or TableSize (Elem)
    row_stride: int = 0         # Row: elements between consecutive table rows
    idx_step: int = 1           # Row: storage distance between consecutive indices in the index tile
    atomic: ScatterAtomicOp = ScatterAtomicOp.NONE
    conflict: ScatterConflict = ScatterConflict.LAST
    exec: GatherExec = GatherExec.SCALAR
    scratch: GlobalTensor | None = None
    strict: bool = True
    signature: Plan | None = field(default=None, compare=False, repr=False)
    """The cached plan of this call's signature (:data:`SIGNATURES`) this plan was re-pointed from, or None."""
    kept: Any = field(default=None, compare=False, repr=False)
    """On a signature's cached plan: what the runtime keeps for the signature once a call of it has run (the tile
    op's kept launch, ``simt_pto.host.kept_launch.KeptLaunch``), or None."""

    @property
    def rows(self) -> int:
        return self.tile.valid_rows

    @property
    def cols(self) -> int:
        return self.tile.valid_cols

    @property
    def nz(self) -> bool:
        return self.table.layout == Layout.NZ

    @property
    def checks_range(self) -> bool:
        """Whether the call refuses out-of-range indices (:func:`check_indices`: rule IDENTITY)."""
        return self.rule == IndexRule.IDENTITY

    @property
    def l1(self) -> bool:
        return self.tile.loc == TileType.MAT

    def index_bits(self, idx: Tile | None = None, tile: Tile | None = None) -> np.ndarray:
        """The indices the op reads after the uint32 cast, as a uint32 view where the layout allows:
        ``(rows,)`` for Row, ``(rows, cols)`` for Elem (the GM index tensor of the L1 path: see
        :class:`simt_pto.l1_gather.L1Plan`). ``idx`` and ``tile``: another call's index and data tiles of this plan's
        signature (a repeated tile op's, read without re-pointing the plan)."""
        idx = self.idx if idx is None else idx
        rows, cols = (self.tile if tile is None else tile).valid
        if self.coalesce == Coalesce.ROW and not (self.op == "MSCATTER" and self.target == "cpu"):
            return idx.data.view(np.uint32)[: rows * self.idx_step: self.idx_step]
        return idx.grid()[:rows, :cols].view(np.uint32)

    def raw_indices(self) -> np.ndarray:
        """:meth:`index_bits` as int64 (a copy)."""
        return self.index_bits().astype(np.int64)

    def repointed(self, **operands: Any) -> Plan:
        """A copy of this validated plan with some fields replaced (``tile``, ``idx``, ``table``: another call's
        operands of the same kinds, shapes and dtypes), validated again in nothing: what a cached plan
        (:class:`CallCache`) and a whole-array call's tiles (``tiling.tile_plan``) use. Cheaper than
        ``dataclasses.replace``, which runs ``__init__`` over every field."""
        plan = object.__new__(type(self))
        plan.__dict__.update(self.__dict__, **operands)
        return plan


class CallCache:
    """A bounded, thread-safe memo: signature -> what validating a call of that signature gave (a plan with its
    operands left out, or any value made of no caller's array). A key holds everything the validation reads but the
    operands' memory and values; callers build it (None: a call that is not memoised, e.g. of an unhashable
    argument) and re-check what depends on memory and values on every call.

    At most ``maxsize`` entries: when full, the oldest goes (first in, first out). Lookups take no lock (a dict read
    is atomic); insertions and evictions take one. :meth:`clear_all` empties every cache (tests compare a first,
    validating call with a cached one)."""

    _all: weakref.WeakSet[CallCache] = weakref.WeakSet()

    def __init__(self, maxsize: int = 256) -> None:
        self.maxsize = maxsize
        self._entries: dict[Hashable, Any] = {}
        self._lock = threading.Lock()
        self.lookup = self._entries.get
        """``lookup(key)``: the entry of a key known to be hashable, or None (the dict's own ``get``: no Python frame,
        for the calls a kept launch serves)."""
        CallCache._all.add(self)

    @classmethod
    def clear_all(cls) -> None:
        """Empty every call cache of the process: the next call of each signature validates again."""
        for cache in list(cls._all):
            cache.clear()

    def get(self, key: Hashable | None) -> Any:
        """The entry of ``key``, or None (also for an unhashable key, and for None: a call not memoised)."""
        if key is None:
            return None
        try:
            return self._entries.get(key)
        except TypeError:  # an unhashable argument in the key: validated every time
            return None

    def put(self, key: Hashable | None, value: Any) -> None:
        """Remember ``value`` for ``key`` (nothing for None or an unhashable key), dropping the oldest entry when
        full."""
        if key is None:
            return
        try:
            hash(key)
        except TypeError:
            return
        with self._lock:
            self._entries[key] = value
            while len(self._entries) > self.maxsize:
                del self._entries[next(iter(self._entries))]

    def take(self, key: Hashable) -> Any:
        """Remove and return the entry of ``key`` (None when there is none): a value only one caller may hold at a
        time (a reusable buffer)."""
        with self._lock:
            return self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


ON_CHANGE.append(CallCache.clear_all)  # a new A5 backend: every kept launch was bound to the old one's kernels

SIGNATURES = CallCache(maxsize=1024)
"""The one signature cache of the process: each call signature -> what validating it gave and what the runtime
keeps for it. Tile ops: their key (``simt_pto.constraints``) -> the validated plan without operands, whose
:attr:`Plan.kept` holds the kept launch. Whole arrays: their :class:`~simt_pto.call.Call` -> the entry of
``simt_pto.host.in_memory`` (the rows per tile, the plan, the kept launch); and the A5 planner's rules per policy and
table dtype (``simt_pto.constraints.validated_whole_array``)."""


def typed(value: object) -> tuple[type, object]:
    """``value`` as a key part that tells apart arguments that compare equal but are validated differently
    (``True`` and ``1``, ``0`` and ``False``, ``8`` and ``np.int64(8)``)."""
    return type(value), value


def check_oob(plan: Plan) -> None:
    """Under a policy that leaves out-of-range indices undefined, refuse them (``strict``) before any write:
    :func:`check_indices` over the plan's indices."""
    check_indices(plan.op, plan.target, plan.capacity, plan.rule, plan.index_bits())


def check_indices(op, target, capacity: int, rule, bits=None, *, scan=None) -> None:
    """The one refusal of out-of-range indices, for tile ops and whole-array calls alike (MGATHER.md /
    MSCATTER.md, "Out-of-Bounds Behaviour"): under UNDEFINED the caller guarantees ``idx < capacity`` and the
    emulator checks it (rule IDENTITY: UNDEFINED with ``strict``, and the CPU simulator's MSCATTER, which uses
    every index unchecked); every other rule places or drops each index, so nothing is refused.

    ``bits`` are the indices after the ISA's uint32 cast (a uint32 array of any shape: -1 is 4294967295); the
    error names the first five positions (an int in a 1-D array, a tuple otherwise) and their values. Indices in
    device memory are counted where they are: ``scan()`` returns ``(count, first position, its value)`` (the
    device kernel, which the caller runs: the model imports no kernel); it is called only under IDENTITY.
    Raises :class:`~simt_pto.errors.OutOfBoundsError` (:func:`out_of_range`)."""
    if rule != IndexRule.IDENTITY:
        return
    if scan is not None:
        count, first, value = scan()
        if count:
            raise out_of_range(op, target, capacity, [first], [value], count)
        return
    if indices_below(bits, capacity):  # one pass, no temporaries: positions only on failure
        return
    bad = bits >= capacity
    pos = np.argwhere(bad)[:5]
    positions = [tuple(int(x) for x in p) if len(p) > 1 else int(p[0]) for p in pos]
    values = [int(bits[tuple(p)]) for p in pos]
    raise out_of_range(op, target, capacity, positions, values, int(np.count_nonzero(bad)))


SMALL_INDEX_COUNT = 64
"""Up to this many indices, :func:`_largest` reads them as Python ints: a numpy reduction's fixed cost (about
1.5 µs) is larger than the pass itself there."""


def indices_below(bits: np.ndarray, capacity: int) -> bool:
    """Whether every one of the uint32 ``bits`` is below ``capacity`` (what :func:`check_indices` refuses when it
    is not): one pass, no temporaries."""
    return bits.size == 0 or _largest(bits) < capacity


def _largest(bits: np.ndarray) -> int:
    """The largest of the uint32 ``bits``: one pass (numpy's reduction; a plain ``max`` over a few)."""
    if bits.size <= SMALL_INDEX_COUNT:
        return max(bits.tolist() if bits.ndim == 1 else bits.ravel().tolist())
    return int(bits.max())


def out_of_range(op, target, capacity, positions, values, count) -> OutOfBoundsError:
    """The refusal of out-of-range indices (the one wording, for tile ops and whole-array calls): under
    UNDEFINED, or on the CPU simulator's MSCATTER, which ignores ScatterOOB and uses every index unchecked."""
    if op == "MSCATTER" and target == "cpu":
        return OutOfBoundsError(op, target, capacity, positions, values, count,
                                "(the CPU simulator's MSCATTER ignores ScatterOOB and uses every index unchecked)",
                                "keep the indices in range, or pass strict=False")
    return OutOfBoundsError(op, target, capacity, positions, values, count)
