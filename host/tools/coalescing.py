"""Coalescing analyzer: the memory requests of the A5 launches of one MGATHER / MSCATTER call, without a GPU.

:func:`analyze` replays one of two calls (its ``call`` argument):

* ``"whole"``: the whole-array call, :func:`simt_pto.gather_plan` / :func:`simt_pto.scatter_plan` on ``a5`` (built
  for the ``multicore`` backend: validated as :func:`simt_pto.gather` / :func:`simt_pto.scatter` validate it, not
  run) over a zero table whose data starts ``base_offset_bytes`` past a 128-byte boundary, so that the plan is the
  one a table at that address gets (the Row copy's move unit and a 16-bit float Add's word form depend on it).
  Every launch of the plan (``CallPlan.launches``) is replayed, in order: the one multi-block launch of the
  tiles (block ``b`` runs tile ``b``), the slot-centric Conflict::Last launch of each tile, or the owner path's
  reset, claim and write;
* ``"tile"``: the tile op, :func:`simt_pto.mgather` / :func:`simt_pto.mscatter` on one tile
  (:func:`simt_pto.constraints.validated_mgather` / :func:`~simt_pto.constraints.validated_mscatter`, then
  :func:`simt_pto.host.a5_planner.mgather_launches` / :func:`~simt_pto.host.a5_planner.mscatter_launches`), replayed for every
  tile of the index, each tile in the same UB tile: what only a tile op has (an explicit ``tile_padded``,
  ``tile_layout``, ``idx_layout``; the ``(1, 1)`` Elem scalar fallback).

A launch is a :class:`~simt_pto.launch_spec.LaunchSpec` (nothing is launched); the analyzer replays its kernel's
lane -> address mapping (kernels/a5/mgather.py, mscatter.py, device.py) with numpy, reading the launch's
arguments by name (strides, ``idx_step``, the capacity, ``tile_rows``, ``row_warps`` / ``warps_per_row``, the
owner array) and its policy (the element format).

It models the hardware's launch: where the emulator launches something else (the whole-array Row gather and the
owner write move each row in units of up to 8 bytes), a launch records the hardware's one in
``LaunchSpec.hardware`` and the analyzer replays that; the report says which one it replayed
(:attr:`CoalescingReport.launch`). A launch kind it does not model (the ``multicore`` backend's serial
Conflict::Last loop and its per-worker owner copies, the compact owner path) is refused with a ValueError that
names it: no other launch's numbers stand in for it.

* Row: warp ``ty`` owns rows ``ty % kRowWarps, + kRowWarps, ...`` and column segment ``ty // kRowWarps``;
  lane ``tx`` walks columns ``seg * 32 + tx`` in steps of ``kWarpsPerRow * 32``. Every lane of the warp
  reads ``idx[r * idxStep]`` (one broadcast UB read per row); a masked row (Zero / Skip) issues no GM access.
* Elem: thread ``tid = ty * 32 + tx`` walks flat positions ``tid, tid + launchThreads, ...``.
* Conflict::Last, slot-centric: a flat grid-stride walk over the table's slots, thread ``g = b * threads + tid``
  owning slots ``g, g + grid threads, ...``; its reverse scan reads only UB (one broadcast read per step, stopping
  at the first hit); a found slot then writes its row (Row: ``validCols`` stores, one per column) or its element.
* Conflict::Last, owner path (dense: one owner per table slot): the reset stores every owner (a flat grid-stride
  walk); the claim walks the source positions from the last down, one index read and, in range, one atomic max
  on ``owner[slot]`` per lane; the write walks the table (Row: the Row walk over its rows, one broadcast owner
  read per row and warp, then the owned row's columns; Elem: a flat walk over its slots, one owner read per lane,
  then the owned slot's source load and table store). The owner array is GM scratch (streams "owner reset",
  "owner claim", "owner"). The plan is the ``multicore`` backend's: an owner pass over few items is one block of
  one warp there (:class:`simt_pto.host.tuning.HostTuning`), and that is the launch replayed (the same requests
  a full grid would issue, from other warps).

A **request** is one memory instruction of one warp, counting its active lanes only (lanes whose loop
or ``if`` condition failed are inactive). For each request the analyzer counts the distinct 32-byte
sectors and 128-byte segments of GM it touches (CUDA's L1/L2 granularity, the "128 B GM burst" of the
spec's Performance Considerations) and, for UB tiles, the distinct 32-byte UB blocks and the lane
stride. ``bytes_requested`` counts each distinct address of a request once (a broadcast is served
once), ``bytes_moved = sectors * 32`` and ``efficiency = bytes_requested / bytes_moved`` (<= 1).

Addresses: the table's start at ``base_offset_bytes``, every other array at 0. A whole call's index, source and
destination are the call's flat arrays, addressed as its kernels address them (block ``b``'s rows at ``b *
tile_rows``; a tile's slot-centric launch at its tile's rows); they are counted as UB streams, as the tile op's
tiles are (the hardware stages a tile in UB; on a CUDA GPU the emulator keeps them in global memory,
:meth:`CoalescingReport.emulated`). A tile call's index longer than one tile is split into tiles of ``tile_shape``
rows: tile ``b`` runs as block ``b`` of one launch with the tile's geometry, each at the tile's own UB address, so a
partial last tile keeps the full tile's geometry; under Conflict::Last (sized by the table, not the tile) each
tile is one launch of one block, as ``mscatter_launches`` gives it. The ``(1, 1)`` Elem tile is the scalar
fallback (``MGatherScalarImpl`` / ``MScatterScalarImpl``): one one-lane access per tile, no SIMT launch.

Not modelled: caches (every request counts its sectors as moved), timing, and data-dependent retries.
float32 atomic Max / Min issue two predicated atomics (non-negative values on the int32 view, negative
ones on the uint32 view); without the source values both are counted as one request. float16 /
bfloat16 atomic Add is a compare-and-swap loop on the aligned 32-bit word of the table holding the element
(``base_offset_bytes`` shifts which word; a word the table covers only in part is a two-word staging copy on
the device, counted at its place in the table): one word load plus the first CAS per lane are counted; lanes
of one request on the same word retry, and ``max_lanes_per_address`` bounds those rounds from below.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from simt_pto import constraints, ub
from simt_pto import dtypes as _dt
from simt_pto.backend import first_use
from simt_pto.call import mgather_policy, mscatter_policy
from simt_pto.enums import (BLayout, BLayoutLike, Coalesce, CoalesceLike, ElementFormat, GatherExec, GatherOOB,
                            GatherOOBLike, ScatterAtomicOp, ScatterAtomicOpLike, ScatterConflict, ScatterConflictLike,
                            ScatterOOB, ScatterOOBLike, from_any)
from simt_pto.geometry import WARP, LaunchGeometry
from simt_pto.host import tiling
from simt_pto.plan import check_indices
from simt_pto.tensor import GlobalTensor
from simt_pto.tile import Tile

SECTOR = 32
"""Bytes in a GM sector (the unit a request moves)."""
SEGMENT = 128
"""Bytes in a GM segment (one fully coalesced 32-lane x 4-byte burst)."""
UB_BLOCK = 32
"""Bytes in a UB block (the 32-byte burst unit of the Tile system)."""
STRIDE_CLASSES = ("unit", "broadcast", "strided", "irregular", "single")
"""Lane-stride classes of a request, over pairs of neighbouring active lanes: every pair one element apart
("unit"), on the same address ("broadcast"), one other constant distance apart ("strided"), anything else
("irregular"); "single": no two neighbouring lanes active."""

_BIG = np.iinfo(np.int64).max
_CHUNK_LANES = 1 << 22  # lane slots per vectorised step (bounds memory: a few int64 arrays of this size)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# -- per-stream accounting ---------------------------------------------------------------------------------

class _Traffic:
    """Derived figures of anything counting ``requests``, ``segments``, ``sectors`` and ``bytes_requested``."""

    requests: int
    segments: int
    sectors: int
    bytes_requested: int

    @property
    def bytes_moved(self) -> int:
        return self.sectors * SECTOR

    @property
    def efficiency(self) -> float | None:
        return _ratio(self.bytes_requested, self.bytes_moved)

    @property
    def sectors_per_request(self) -> float | None:
        return _ratio(self.sectors, self.requests)

    @property
    def segments_per_request(self) -> float | None:
        return _ratio(self.segments, self.requests)


class Stream(_Traffic):
    """The warp-level requests of one memory instruction stream, e.g. MGATHER's GM loads of the table.

    ``space`` is "gm" or "ub"; ``kind`` "load", "store" or "atomic". For UB streams ``sectors`` counts
    32-byte UB blocks. ``per_warp[b, w]``: requests of warp ``w`` in block (Last: call) ``b``.
    """

    def __init__(self, name: str, space: str, kind: str, itemsize: int, warp_shape: tuple[int, int],
                 keep_lanes: bool = False) -> None:
        self.name, self.space, self.kind, self.itemsize = name, space, kind, itemsize
        self.requests = 0
        self.lanes = 0
        self.bytes_requested = 0
        self.sectors = 0
        self.segments = 0
        self.hist = np.zeros(2 * WARP + 1, dtype=np.int64)
        self.strides = dict.fromkeys(STRIDE_CLASSES, 0)
        self.max_lanes_per_address = 0
        """Largest number of active lanes of one request on one address (atomics serialise on it)."""
        self.serialized_lanes = 0
        """Sum over requests of (max lanes on one address - 1): same-address rounds beyond the first."""
        self.per_warp = np.zeros(warp_shape, dtype=np.int64)
        self._keep = keep_lanes
        self._trace: list[npt.NDArray[Any]] = []

    # -- accumulation --------------------------------------------------------------------------------------
    def add(self, addr: npt.NDArray[Any], active: npt.NDArray[Any], block: npt.NDArray[Any],
            warp: npt.NDArray[Any]) -> None:
        """Add requests: ``addr``/``active`` are ``(n, 32)`` byte addresses and lane masks, one row per request;
        ``block``/``warp`` ``(n,)``. Rows with no active lane are dropped (the instruction is not issued)."""
        live = active.any(axis=1)
        if not live.all():
            addr, active, block, warp = addr[live], active[live], block[live], warp[live]
        n = len(addr)
        if n == 0:
            return
        self.requests += n
        self.lanes += int(active.sum())
        a = np.where(active, addr, _BIG)
        if not (a[:, 1:] >= a[:, :-1]).all():
            a = np.sort(a, axis=1)
        valid = a != _BIG
        distinct = self._distinct(a, valid)
        self.bytes_requested += int(distinct.sum()) * self.itemsize
        sectors = self._distinct(a // (SECTOR if self.space == "gm" else UB_BLOCK), valid)
        self.sectors += int(sectors.sum())
        self.segments += int(self._distinct(a // SEGMENT, valid).sum())
        self.hist += np.bincount(sectors, minlength=self.hist.size)[: self.hist.size]
        self._classify(addr, active)
        if self.kind == "atomic":
            runs = self._max_run(a, valid)
            self.max_lanes_per_address = max(self.max_lanes_per_address, int(runs.max()))
            self.serialized_lanes += int((runs - 1).sum())
        np.add.at(self.per_warp, (block, warp), 1)
        if self._keep:
            lane = np.broadcast_to(np.arange(WARP), addr.shape)
            rows = np.nonzero(active)
            self._trace.append(np.stack([block[rows[0]], warp[rows[0]], lane[rows], addr[rows]], axis=1))

    def add_broadcast(self, requests: int, lanes: int, multi_lane_requests: int, per_warp: npt.NDArray[Any],
                      trace: npt.NDArray[Any] | None = None) -> None:
        """Add ``requests`` requests whose active lanes all read one address (the Last kernels' reverse scan),
        ``multi_lane_requests`` of them with two or more lanes active."""
        self.requests += requests
        self.lanes += lanes
        self.bytes_requested += requests * self.itemsize
        self.sectors += requests
        self.segments += requests
        self.hist[1] += requests
        self.strides["broadcast"] += multi_lane_requests
        self.strides["single"] += requests - multi_lane_requests
        self.per_warp += per_warp
        if self._keep and trace is not None:
            self._trace.append(trace)

    @staticmethod
    def _distinct(a, valid):
        new = np.ones(a.shape, dtype=bool)
        new[:, 1:] = a[:, 1:] != a[:, :-1]
        return (new & valid).sum(axis=1)

    @staticmethod
    def _max_run(a, valid):
        n, w = a.shape
        pos = np.broadcast_to(np.arange(w), a.shape)
        start = np.ones(a.shape, dtype=bool)
        start[:, 1:] = a[:, 1:] != a[:, :-1]
        first = np.maximum.accumulate(np.where(start, pos, 0), axis=1)
        return np.where(valid, pos - first + 1, 0).max(axis=1)

    def _classify(self, addr, active):
        d = addr[:, 1:] - addr[:, :-1]
        pair = active[:, 1:] & active[:, :-1]
        has = pair.any(axis=1)
        lo = np.where(pair, d, _BIG).min(axis=1)
        hi = np.where(pair, d, -_BIG).max(axis=1)
        same = has & (lo == hi)
        self.strides["single"] += int((~has).sum())
        self.strides["broadcast"] += int((same & (lo == 0)).sum())
        self.strides["unit"] += int((same & (lo == self.itemsize)).sum())
        self.strides["strided"] += int((same & (lo != 0) & (lo != self.itemsize)).sum())
        self.strides["irregular"] += int((has & (lo != hi)).sum())

    # -- results ---------------------------------------------------------------------------------------------

    def lane_trace(self) -> npt.NDArray[Any]:
        """``(n, 4)`` int64 rows ``(block, warp, lane, byte address)`` of every active lane access
        (``analyze(..., keep_lanes=True)`` only)."""
        if not self._trace:
            return np.zeros((0, 4), dtype=np.int64)
        return np.concatenate(self._trace).astype(np.int64)

    def histogram(self) -> dict[int, int]:
        """Sectors (UB: blocks) per request -> number of requests."""
        return {int(k): int(v) for k, v in enumerate(self.hist) if v}

    def as_dict(self) -> dict[str, Any]:
        unit = "sectors" if self.space == "gm" else "blocks"
        d: dict[str, Any] = {
            "name": self.name, "space": self.space, "kind": self.kind, "itemsize": self.itemsize,
            "requests": self.requests, "lanes": self.lanes, unit: self.sectors,
            f"{unit}_per_request": self.sectors_per_request,
            "bytes_requested": self.bytes_requested, "bytes_moved": self.bytes_moved,
            "efficiency": self.efficiency, "histogram": self.histogram(),
            "strides": {k: v for k, v in self.strides.items() if v}}
        if self.space == "gm":
            d["segments"] = self.segments
            d["segments_per_request"] = self.segments_per_request
        if self.kind == "atomic":
            d["max_lanes_per_address"] = self.max_lanes_per_address
            d["serialized_lanes"] = self.serialized_lanes
        return d


def _ratio(a, b):
    return a / b if b else None


@dataclass
class Summary(_Traffic):
    """Totals over several streams (e.g. every GM load of a call)."""

    requests: int = 0
    lanes: int = 0
    segments: int = 0
    sectors: int = 0
    bytes_requested: int = 0
    hist: npt.NDArray[Any] = field(default_factory=lambda: np.zeros(2 * WARP + 1, dtype=np.int64))

    @classmethod
    def of(cls, streams: Iterable[Stream]) -> Summary:
        s = cls()
        for st in streams:
            s.requests += st.requests
            s.lanes += st.lanes
            s.segments += st.segments
            s.sectors += st.sectors
            s.bytes_requested += st.bytes_requested
            s.hist = s.hist + st.hist
        return s


    def histogram(self) -> dict[int, int]:
        return {int(k): int(v) for k, v in enumerate(self.hist) if v}

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "lanes": self.lanes, "segments": self.segments, "sectors": self.sectors,
                "segments_per_request": self.segments_per_request, "sectors_per_request": self.sectors_per_request,
                "bytes_requested": self.bytes_requested, "bytes_moved": self.bytes_moved,
                "efficiency": self.efficiency, "histogram": self.histogram()}


@dataclass
class CoalescingReport:
    """What :func:`analyze` found for one call. ``gm_loads`` / ``gm_stores`` (atomics included) /
    ``gm_atomics`` total the GM streams; :meth:`stream` gives one stream by name ("table", "idx", "dst",
    "src", "table word", and on the owner path "owner reset", "owner claim", "owner"); :meth:`emulated` totals
    GM and UB together, as the emulator's arrays all live in GPU global memory when it runs on a CUDA GPU.

    ``kernel`` names the kernels replayed, in launch order (``" -> "`` between kernels; a kernel launched once per
    tile is named once); ``geometry`` is the last one's (the launch that writes the result); ``blocks`` counts the
    blocks of every launch (a tile call: one per tile); ``plan`` is what the call launches, one line a step
    (:meth:`simt_pto.launch_spec.CallPlan.describe`; a tile call: one tile's)."""

    op: str
    coalesce: Coalesce
    kernel: str
    geometry: LaunchGeometry | None  # None for the scalar fallback
    blocks: int
    launches: int
    dtype: _dt.DType
    table_shape: tuple[int, int]
    tile_shape: tuple[int, int]
    tile_layout: BLayout
    idx_layout: BLayout
    base_offset_bytes: int
    atomic: ScatterAtomicOp
    conflict: ScatterConflict
    oob: GatherOOB | ScatterOOB
    rows: int                   # index rows walked in all (Row: indices; Elem: index rows)
    cols: int
    streams: list[Stream]
    notes: list[str] = field(default_factory=list)
    launch: str = "as launched"
    """Which launch the report replays: ``"as launched"`` (the emulator launches what the hardware would), or
    ``"hardware (element moves)"`` (the emulator's own launch differs, :attr:`LaunchSpec.hardware`, for at least
    one launch of the call); for the scalar fallback, ``"scalar pipe (no SIMT launch)"``."""
    call: str = "whole"
    """What was replayed (:data:`CALLS`): ``"whole"``, the whole-array call's launches; ``"tile"``, the tile op's."""
    plan: list[str] = field(default_factory=list)

    def stream(self, name: str) -> Stream:
        for s in self.streams:
            if s.name == name:
                return s
        raise KeyError(f"no stream {name!r}; streams: {', '.join(s.name for s in self.streams)}")

    def _summary(self, space, kinds):
        return Summary.of(s for s in self.streams if s.space == space and s.kind in kinds)

    @property
    def gm_loads(self) -> Summary:
        return self._summary("gm", ("load",))

    @property
    def gm_stores(self) -> Summary:
        return self._summary("gm", ("store", "atomic"))

    @property
    def gm_atomics(self) -> Summary:
        return self._summary("gm", ("atomic",))

    @property
    def ub_loads(self) -> Summary:
        return self._summary("ub", ("load",))

    @property
    def ub_stores(self) -> Summary:
        return self._summary("ub", ("store",))

    def emulated(self) -> dict[str, Summary]:
        """Loads, stores and atomics over GM and UB streams together: the emulator's global-memory traffic on
        a CUDA GPU (UB tiles are device arrays there), what ``ncu`` counts for the kernel."""
        return {"ld": Summary.of(s for s in self.streams if s.kind == "load"),
                "st": Summary.of(s for s in self.streams if s.kind == "store"),
                "atom": Summary.of(s for s in self.streams if s.kind == "atomic")}

    @property
    def payload_bytes(self) -> int:
        """Bytes of table data the call moves logically (elements moved x itemsize, once)."""
        return self.rows * self.cols * self.dtype.itemsize

    def as_dict(self) -> dict[str, Any]:
        return {
            "op": self.op, "call": self.call, "coalesce": self.coalesce.name.lower(), "kernel": self.kernel,
            "launch": self.launch, "plan": list(self.plan),
            "geometry": self.geometry.as_dict() if self.geometry is not None else None,
            "blocks": self.blocks, "launches": self.launches, "dtype": self.dtype.name,
            "table_shape": list(self.table_shape), "tile_shape": list(self.tile_shape),
            "tile_layout": self.tile_layout.name.lower(), "idx_layout": self.idx_layout.name.lower(),
            "base_offset_bytes": self.base_offset_bytes, "atomic": self.atomic.name.lower(),
            "conflict": self.conflict.name.lower(), "oob": self.oob.name.lower(),
            "index_shape": [self.rows, self.cols],
            "notes": list(self.notes),
            "gm_loads": self.gm_loads.as_dict(), "gm_stores": self.gm_stores.as_dict(),
            "gm_atomics": self.gm_atomics.as_dict(),
            "ub": {s.name: s.as_dict() for s in self.streams if s.space == "ub"},
            "streams": [s.as_dict() for s in self.streams],
        }

    def format(self) -> str:
        """A human-readable report."""
        g = self.geometry
        launch = (f"block dim3(32, {g.launch_warps}) x {self.blocks} block(s), {self.launches} launch(es)"
                  if g is not None else f"scalar pipe, {self.launches} call(s)")
        idx_desc = (("[R, 1] ColMajor" if self.idx_layout == BLayout.COL_MAJOR else "[1, R] RowMajor")
                    if self.coalesce == Coalesce.ROW else self.idx_layout.name)
        lines = [
            f"{self.op} Coalesce::{self.coalesce.name.capitalize()}: {self.kernel}, {launch} ({self.launch})",
            f"  table {'x'.join(map(str, self.table_shape))} {self.dtype} (GM base offset {self.base_offset_bytes} B); "
            f"tile {self.tile_shape[0]}x{self.tile_shape[1]} {self.tile_layout.name}; idx {idx_desc}; "
            f"{self.rows}x{self.cols} index positions",
            f"  {'whole-array call' if self.call == 'whole' else 'tile op, one tile'}:",
            *[f"    {line}" for line in self.plan],
        ]
        if g is not None:
            extra = (f", kRowWarps {g.row_warps}, kWarpsPerRow {g.warps_per_row}" if g.scheme == "row" else
                     f", {g.work_items} slots" if g.scheme == "last" else "")
            lines.append(f"  geometry: {g.scheme}, kLaunchWarps {g.launch_warps}{extra}")
        if self.op == "MSCATTER":
            lines.append(f"  atomic {self.atomic.name}, conflict {self.conflict.name}, oob {self.oob.name}")
        else:
            lines.append(f"  oob {self.oob.name}")
        lines += [f"  note: {n}" for n in self.notes]
        head = (f"  {'':22} {'requests':>10} {'lanes':>11} {'segs/req':>8} {'sect/req':>8} "
                f"{'B requested':>12} {'B moved':>12} {'effic.':>6}")
        lines += ["", head]

        def row(label, s):
            if not s.requests:
                return f"  {label:22} {'-':>10}"
            return (f"  {label:22} {s.requests:>10} {s.lanes:>11} {s.segments_per_request:>8.2f} "
                    f"{s.sectors_per_request:>8.2f} {s.bytes_requested:>12} {s.bytes_moved:>12} "
                    f"{s.efficiency:>6.3f}")

        lines.append(row("GM loads", self.gm_loads))
        lines.append(row("GM stores (+atomics)", self.gm_stores))
        if self.atomic != ScatterAtomicOp.NONE:
            lines.append(row("GM atomics", self.gm_atomics))
        for s in self.streams:
            if s.space == "gm":
                lines.append(row(f"  {s.kind} {s.name}", s))
        for label, summ in (("GM loads", self.gm_loads), ("GM stores", self.gm_stores)):
            if summ.requests:
                lines.append(f"  sectors/request histogram, {label}: " + _hist_text(summ.histogram()))
        for s in self.streams:
            if s.space == "gm" and s.kind == "atomic":
                lines.append(f"  atomics on '{s.name}': up to {s.max_lanes_per_address} lanes of one request on "
                             f"one address; {s.serialized_lanes} same-address lane rounds beyond the first")
        lines += ["", f"  {'UB':22} {'requests':>10} {'lanes':>11} {'blk/req':>8}  strides"]
        for s in self.streams:
            if s.space != "ub":
                continue
            if not s.requests:
                lines.append(f"  {s.kind + ' ' + s.name:22} {'-':>10}")
                continue
            strides = ", ".join(f"{k} {100 * v / s.requests:.0f}%" for k, v in s.strides.items() if v)
            lines.append(f"  {s.kind + ' ' + s.name:22} {s.requests:>10} {s.lanes:>11} "
                         f"{s.sectors / s.requests:>8.2f}  {strides}")
        return "\n".join(lines)


def _hist_text(hist: dict) -> str:
    total = sum(hist.values())
    return ", ".join(f"{k}: {v} ({100 * v / total:.0f}%)" for k, v in sorted(hist.items()))


# -- the call --------------------------------------------------------------------------------------------

_LAYOUT_ALIASES = {"row": BLayout.ROW_MAJOR, "col": BLayout.COL_MAJOR, "column": BLayout.COL_MAJOR}


def _layout(value, what) -> BLayout:
    if isinstance(value, str) and value.strip().lower() in _LAYOUT_ALIASES:
        return _LAYOUT_ALIASES[value.strip().lower()]
    return from_any(BLayout, value, what)


def _op_name(op) -> str:
    key = str(op).strip().upper()
    if key not in ("MGATHER", "MSCATTER"):
        raise ValueError(f"coalescing.analyze: op must be 'mgather' or 'mscatter', got {op!r}")
    return key


def _shape2(value, what) -> tuple[int, int]:
    if isinstance(value, str):
        parts = value.lower().replace("*", "x").split("x")
        value = tuple(int(p) for p in parts)
    if isinstance(value, (int, np.integer)):
        value = (int(value),)
    value = tuple(int(v) for v in value)
    if len(value) == 1:
        value = (1, value[0])
    if len(value) != 2 or min(value) < 1:
        raise ValueError(f"coalescing.analyze: {what} must be (rows, cols) with positive extents, got {value!r}")
    return value


def _index_matrix(coalesce, raw, tile_shape, table_cols):
    """The indices as an int64 ``(rows, cols)`` matrix (Row: ``(N, 1)``) and the tile's valid cols. A 1-D Elem
    index is ``(N, 1)`` (``[R, 1]`` tiles, as ``simt_pto.host.in_memory`` cuts it) unless the tile's cols split it."""
    raw = np.asarray(raw)
    if raw.dtype.kind not in "iu":
        raise TypeError(f"coalescing.analyze: indices must be integers, got {raw.dtype}")
    raw = raw.astype(np.int64) & 0xFFFFFFFF
    if coalesce == Coalesce.ROW:
        return raw.reshape(-1, 1), table_cols if tile_shape is None else tile_shape[1]
    if raw.ndim > 2:
        raise ValueError(f"coalescing.analyze: Elem indices must be 1-D or 2-D, got shape {raw.shape}")
    if raw.ndim == 1:
        c = 1 if tile_shape is None else tile_shape[1]
        if raw.size % c:
            raise ValueError(f"coalescing.analyze: a 1-D Elem index of {raw.size} positions does not split into rows "
                             f"of {c} (the tile's valid cols); pass a 2-D index or a tile whose cols divide it")
        raw = raw.reshape(-1, c)
    if tile_shape is not None and tile_shape[1] != raw.shape[1]:
        raise ValueError(f"coalescing.analyze: Elem tiles split the index by rows only; tile cols {tile_shape[1]} "
                         f"!= index cols {raw.shape[1]}")
    return raw, raw.shape[1]


def _remap(raw, capacity, rule):
    """The kernels' ``remap_index`` over an array: (slot, in range)."""
    with first_use:  # Numba: at the first analysis, not at import (maybe while another thread loads it too)
        from simt_pto.kernels.index_policy import remap_array
    return remap_array(np.ascontiguousarray(raw, dtype=np.int64), capacity, rule)


ShapeLike: TypeAlias = int | str | Sequence[int]
"""A ``(rows, cols)`` shape for :func:`analyze`: a tuple, ``"64x32"``, or one int (a single row)."""

CALLS = ("whole", "tile")
"""What :func:`analyze` replays: ``"whole"``, the launches of the whole-array call (:func:`simt_pto.gather_plan` /
:func:`simt_pto.scatter_plan` on ``a5``); ``"tile"``, the tile op's launch (:func:`simt_pto.mgather` /
:func:`simt_pto.mscatter`), once per tile."""


def analyze(op: str, coalesce: CoalesceLike, idx: npt.ArrayLike, table_shape: ShapeLike,
            tile_shape: ShapeLike | None = None, dtype: _dt.DTypeLike = "float32", *,
            atomic: ScatterAtomicOpLike = "none", conflict: ScatterConflictLike = "last",
            oob: GatherOOBLike | ScatterOOBLike = "undefined", strict: bool = True, base_offset_bytes: int = 0,
            tile_layout: BLayoutLike | None = None, idx_layout: BLayoutLike | None = None,
            tile_padded: ShapeLike | None = None, dyn_ubuf_size: int | None = None, call: str | None = None,
            last_path: str = "slot", owner: str | None = None, keep_lanes: bool = False) -> CoalescingReport:
    """Replay the A5 launches of one MGATHER / MSCATTER call and count their memory requests (see the module doc).

    * ``op``: "mgather" or "mscatter"; ``coalesce``: "row" or "elem" (any :func:`~simt_pto.enums.from_any` form).
    * ``idx``: the indices. Row: 1-D (or ``[1, N]`` / ``[N, 1]``) row indices. Elem: ``[R, C]`` element indices;
      a 1-D one is ``[N, 1]`` (``[R, 1]`` ColMajor tiles), or rows of the tile's cols when ``tile_shape`` is given.
    * ``table_shape``: ``(TableRows, Cols)`` (Elem also a flat size); ``dtype`` the element type.
    * ``call``: ``"whole"`` replays the launches of the whole-array call (:func:`simt_pto.gather_plan` /
      :func:`simt_pto.scatter_plan`, ``target="a5"``, built for the ``multicore`` backend), ``"tile"`` the tile
      op's launch (:func:`simt_pto.mgather` / :func:`simt_pto.mscatter`) for each tile. None (default):
      ``"tile"`` when an option only a tile op has is given (``tile_padded``, ``tile_layout``, ``idx_layout``, or a
      Row ``tile_shape`` whose cols are not the table's: a whole-array call's tiles hold whole table rows), else
      ``"whole"``. ``call="whole"`` with one of those options is a ValueError.
    * ``tile_shape``: the valid ``(R, C)`` of one dst / src tile (default, as :func:`simt_pto.gather` cuts them:
      256 rows (Row) or 4096 positions (Elem), halved until the tiles fit the UB budget). A whole call takes
      ``R`` as its ``tile_rows`` and cuts its own cols (Row: the table's; Elem: the index's last axis, or 1 where it
      cuts the index as one flat run: a ``tile_shape`` of other cols is then a ValueError). Tile call only:
      ``tile_padded``, the tile's padded ``(Rows, Cols)`` (default: the least padding the 32-byte rule allows);
      ``tile_layout`` "row_major" (default) or "col_major"; ``idx_layout``: Row: "row" (a ``[1, R]`` RowMajor index
      tile, default) or "col" (``[R, 1]`` ColMajor; the default for an ``[N, 1]`` array); Elem: the index tile's
      BLayout (default: the tile's). A whole call reports the same default layouts: its flat arrays hold the
      indices and elements in the same places.
    * ``atomic`` / ``conflict`` / ``oob`` / ``strict`` / ``dyn_ubuf_size``: as for :func:`simt_pto.scatter` /
      :func:`simt_pto.mscatter` (and the gathers); the call is validated as the API validates it
      (ConstraintError, OutOfBoundsError).
    * ``last_path`` / ``owner`` (whole call, MSCATTER Conflict::Last with atomic none): the path the call takes, as
      :func:`simt_pto.scatter_plan` takes them. ``last_path`` defaults to ``"slot"`` here: the slot-centric
      kernels, one launch per tile, as the tile op launches them. ``"owner"`` replays the owner path with one
      owner per table slot (``owner="dense"``, or None where the call chooses it); ``"auto"`` replays what the
      ``multicore`` backend chooses, which for an Elem call is mostly its serial loop, a launch kind the analyzer
      does not model (ValueError, as for the compact owner path).
    * ``base_offset_bytes``: the GM table's start address modulo any larger alignment (a multiple of the
      element size, as CUDA requires natural alignment), e.g. 16 for a table 16 bytes past a 128-byte line.
    * ``keep_lanes``: keep every lane access (``Stream.lane_trace``), for small cases.

    Returns a :class:`CoalescingReport`.
    """
    op = _op_name(op)
    coalesce = from_any(Coalesce, coalesce, "coalesce")
    dtype = _dt.resolve(dtype)
    atomic = from_any(ScatterAtomicOp, atomic, "atomic")
    conflict = from_any(ScatterConflict, conflict, "conflict")
    oob = from_any(GatherOOB if op == "MGATHER" else ScatterOOB, oob, "oob")
    idx_arr = np.asarray(idx)
    if op == "MGATHER" and atomic != ScatterAtomicOp.NONE:
        raise ValueError("coalescing.analyze: atomic applies to mscatter only")
    if op == "MGATHER" and (last_path != "slot" or owner is not None):
        raise ValueError(f"coalescing.analyze: last_path / owner apply to mscatter only, got last_path={last_path!r}, "
                         f"owner={owner!r}")
    base_offset_bytes = int(base_offset_bytes)
    if base_offset_bytes < 0 or base_offset_bytes % dtype.itemsize:
        raise ValueError(f"coalescing.analyze: base_offset_bytes must be a non-negative multiple of the element size "
                         f"({dtype.itemsize} B for {dtype}), got {base_offset_bytes}")
    table_shape = _shape2(table_shape, "table_shape")
    tile_shape = None if tile_shape is None else _shape2(tile_shape, "tile_shape")
    call = _call_kind(call, coalesce, tile_shape, table_shape[1], tile_padded=tile_padded, tile_layout=tile_layout,
                      idx_layout=idx_layout)
    if call == "tile" and (last_path != "slot" or owner is not None):
        raise ValueError(f"coalescing.analyze: a tile op's Conflict::Last is slot-centric; last_path / owner apply to "
                         f"call='whole', got last_path={last_path!r}, owner={owner!r}")
    raw, C = _index_matrix(coalesce, idx_arr, tile_shape, table_shape[1])
    if raw.size == 0:
        raise ValueError("coalescing.analyze: no indices")
    if call == "whole":
        replay = _whole_call(op, coalesce, raw, table_shape, tile_shape, dtype, atomic=atomic, conflict=conflict,
                             oob=oob, strict=strict, base=base_offset_bytes, dyn_ubuf_size=dyn_ubuf_size,
                             last_path=last_path, owner=owner, keep=keep_lanes)
        # the layouts of the tiles as the call cuts them (an Elem index may be one flat run)
        tile_layout, idx_layout = _default_layouts(coalesce, idx_arr, replay.ctx.slot.shape[0], replay.tile_shape[1])
    else:
        tile_layout, idx_layout = _default_layouts(coalesce, idx_arr, raw.shape[0], C, tile_layout, idx_layout)
        replay = _tile_call(op, coalesce, raw, C, table_shape, tile_shape, dtype, atomic=atomic, conflict=conflict,
                            oob=oob, strict=strict, base=base_offset_bytes, dyn_ubuf_size=dyn_ubuf_size,
                            tile_layout=tile_layout, idx_layout=idx_layout, tile_padded=tile_padded, keep=keep_lanes)
    ctx = replay.ctx
    return CoalescingReport(op, coalesce, replay.kernel, replay.geometry, replay.blocks, replay.launches, dtype,
                            table_shape, replay.tile_shape, tile_layout, idx_layout, base_offset_bytes, atomic, conflict,
                            oob, ctx.slot.shape[0], replay.tile_shape[1], ctx.ordered(), ctx.notes(), replay.replayed,
                            call, replay.plan)


def _call_kind(call, coalesce, tile_shape, table_cols, **tile_options) -> str:
    """``call`` as :data:`CALLS` names it (None: as :func:`analyze` documents)."""
    tile_only = [name for name, value in tile_options.items() if value is not None]
    if coalesce == Coalesce.ROW and tile_shape is not None and tile_shape[1] != table_cols:
        tile_only.append(f"tile_shape {tile_shape} (a whole-array Row call's tiles hold whole rows of "
                         f"{table_cols} cols)")
    if call is None:
        return "tile" if tile_only else "whole"
    if call not in CALLS:
        raise ValueError(f"coalescing.analyze: call must be 'whole', 'tile' or None, got {call!r}")
    if call == "whole" and tile_only:
        raise ValueError(f"coalescing.analyze: {', '.join(tile_only)} describe a tile op's tiles; a whole-array call "
                         "(call='whole') cuts its own: pass call='tile'")
    return call


def _default_layouts(coalesce, idx_arr, rows, cols, tile_layout=None, idx_layout=None) -> tuple[BLayout, BLayout]:
    """``(tile_layout, idx_layout)``: as given, else the defaults :func:`analyze` documents for a ``rows x cols``
    index view."""
    if tile_layout is None:
        tile_layout = BLayout.COL_MAJOR if coalesce == Coalesce.ELEM and cols == 1 and rows > 1 else \
            BLayout.ROW_MAJOR
    tile_layout = _layout(tile_layout, "tile_layout")
    if idx_layout is None:
        if coalesce == Coalesce.ROW:
            idx_layout = (BLayout.COL_MAJOR if idx_arr.ndim == 2 and idx_arr.shape[1] == 1 and idx_arr.shape[0] > 1
                          else BLayout.ROW_MAJOR)
        else:
            idx_layout = tile_layout
    return tile_layout, _layout(idx_layout, "idx_layout")


@dataclass
class _Replay:
    """What :func:`_tile_call` / :func:`_whole_call` replayed: the walks' context (streams, indices) and the
    report's description of the launches."""

    ctx: _Ctx
    kernel: str
    geometry: LaunchGeometry | None
    blocks: int
    launches: int
    tile_shape: tuple[int, int]
    replayed: str
    plan: list[str]


# -- the tile op ------------------------------------------------------------------------------------------

def _tile_call(op, coalesce, raw, C, table_shape, tile_shape, dtype, *, atomic, conflict, oob, strict, base,
               dyn_ubuf_size, tile_layout, idx_layout, tile_padded, keep) -> _Replay:
    """The tile op's launch (one tile, validated and dispatched as :func:`simt_pto.mgather` /
    :func:`simt_pto.mscatter` do it; every tile shares its geometry), replayed for each tile of ``raw``."""
    n_rows = raw.shape[0]
    budget = ub.budget(op, "a5", dyn_ubuf_size)
    R = (tiling.default_tile_rows(coalesce, n_rows, C, tiling.tile_bytes(coalesce, C, dtype, tile_layout, idx_layout),
                                  budget)
         if tile_shape is None else min(tile_shape[0], n_rows))
    if tile_padded is None:
        data = tiling.data_tile(dtype, R, C, tile_layout)
    else:
        data = Tile(dtype, *_shape2(tile_padded, "tile_padded"), blayout=tile_layout, valid=(R, C))
    idx_tile = tiling.index_tile(coalesce, R, C, idx_layout, _dt.int32)
    table = GlobalTensor(np.zeros(table_shape, dtype=dtype.numpy), dtype=dtype)
    with first_use:  # the A5 dispatch loads the kernels package: at the first analysis, not at import
        from simt_pto.host import a5_planner
    if op == "MGATHER":
        policy = mgather_policy(coalesce, oob, "a5", GatherExec.SCALAR, strict, dyn_ubuf_size)
        plan = constraints.validated_mgather(policy, data, table, idx_tile)
        call = a5_planner.mgather_launches(plan)
    else:
        policy = mscatter_policy(coalesce, atomic, oob, conflict, "a5", strict, dyn_ubuf_size)
        plan = constraints.validated_mscatter(policy, table, data, idx_tile)
        call = a5_planner.mscatter_launches(plan)
    launches = call.launches
    # the whole index, as the whole-array call refuses it (the API checks one tile at a time)
    check_indices(op, "a5", plan.capacity, plan.rule,
                  raw[:, 0].astype(np.uint32) if coalesce == Coalesce.ROW else raw.astype(np.uint32))
    slot, in_range = _remap(raw, plan.capacity, plan.rule)
    blocks = _ceil_div(n_rows, R)
    spec = launches[0] if launches else None  # none: the (1, 1) Elem case, the scalar pipe
    if spec is not None and spec.hardware is not None:  # (a tile op launches what the hardware would)
        spec, replayed = spec.hardware, "hardware (element moves)"
    else:
        replayed = "as launched" if spec is not None else "scalar pipe (no SIMT launch)"
    fmt = spec.policy.fmt if spec is not None else None
    ctx = _Ctx(op, coalesce, dtype, atomic, fmt, base, slot, in_range, keep, whole=False,
               data_base=plan.tile.addr or 0, idx_base=plan.idx.addr or 0)
    geo = spec.geometry if spec is not None else None
    if spec is None:
        ctx.begin_scalar(plan, (blocks, 1))
        kernel, launch_count = ("MGatherScalarImpl" if op == "MGATHER" else "MScatterScalarImpl"), blocks
        _walk_elem(ctx, R, n_rows, C, 1)
    elif geo.scheme == "row":
        ctx.begin(spec, (blocks, geo.launch_warps))
        kernel, launch_count = spec.kernel, 1
        r = np.arange(n_rows) % R  # every tile in the one UB tile
        _walk_row(ctx, R, n_rows, C, head=(_idx_stream(ctx), ctx.idx_base + r * ctx.idx_step * 4),
                  table_row=slot[:, 0], ok=in_range[:, 0], data_row=r, data_always=op == "MGATHER")
    elif geo.scheme == "elem":
        ctx.begin(spec, (blocks, geo.launch_warps))
        kernel, launch_count = spec.kernel, 1
        _walk_elem(ctx, R, n_rows, C, geo.launch_warps)
    else:
        ctx.begin(spec, (blocks, geo.launch_warps))
        kernel, launch_count = spec.kernel, blocks
        for b in range(blocks):  # one launch per tile, each of the one block mscatter_launches gives it
            _walk_last(ctx, first_row=b * R, rows=min(R, n_rows - b * R), cols=C, block0=b)
    return _Replay(ctx, kernel, geo, blocks, launch_count, (R, C), replayed, call.describe())


# -- the whole-array call ---------------------------------------------------------------------------------

_WHOLE_WALKS = {
    "simt_mgather_row_kernel": "row", "simt_mscatter_row_kernel": "row",
    "simt_mgather_elem_kernel": "elem", "simt_mscatter_elem_kernel": "elem",
    "simt_mscatter_row_last_kernel": "last", "simt_mscatter_elem_last_kernel": "last",
    "simt_mscatter_owner_reset_kernel": "owner reset",
    "simt_mscatter_row_owner_claim_kernel": "owner claim", "simt_mscatter_elem_owner_claim_kernel": "owner claim",
    "simt_mscatter_row_owner_write_kernel": "owner write", "simt_mscatter_elem_owner_write_kernel": "owner write",
}
"""The kernels a whole-array call launches that the analyzer replays, and which walk replays each."""

_NOT_MODELLED = {
    "simt_mscatter_elem_serial_kernel":
        "the multicore backend's serial Conflict::Last loop (one CPU thread in source order, no SIMT walk)",
    "simt_mscatter_elem_private_owner_claim_kernel": "the multicore backend's per-worker owner copies",
    "simt_mscatter_elem_private_owner_write_kernel": "the multicore backend's per-worker owner copies",
    "simt_mscatter_compact_owner_claim_kernel": "the compact owner path (one owner per distinct slot)",
    "simt_mscatter_row_compact_owner_write_kernel": "the compact owner path (one owner per distinct slot)",
    "simt_mscatter_elem_compact_owner_write_kernel": "the compact owner path (one owner per distinct slot)",
}
"""Kernels a whole-array call may launch that the analyzer does not model, and what they are."""


def table_at(shape: tuple[int, int], dtype: _dt.DType, base_offset_bytes: int) -> npt.NDArray[Any]:
    """A zero table of ``shape`` and ``dtype`` whose first element lies ``base_offset_bytes`` past a 128-byte
    boundary (modulo 128): a slice of a larger byte buffer, viewed as the dtype."""
    nbytes = shape[0] * shape[1] * dtype.itemsize
    memory = np.zeros(nbytes + SEGMENT, dtype=np.uint8)
    start = (base_offset_bytes - memory.ctypes.data) % SEGMENT
    return memory[start:start + nbytes].view(dtype.numpy).reshape(shape)


def _whole_call(op, coalesce, raw, table_shape, tile_shape, dtype, *, atomic, conflict, oob, strict, base,
                dyn_ubuf_size, last_path, owner, keep) -> _Replay:
    """Every launch of the whole-array call (:func:`simt_pto.gather_plan` / :func:`simt_pto.scatter_plan`, ``a5``,
    ``multicore``) on a zero table at ``base`` (:func:`table_at`), replayed in order."""
    with first_use:  # the whole-array ops load the kernels package: at the first analysis, not at import
        from simt_pto.host.in_memory import gather_plan, scatter_plan
    row = coalesce == Coalesce.ROW
    table = table_at(table_shape, dtype, base)
    idx = (raw[:, 0] if row else raw).astype(np.uint32)
    options = dict(coalesce=coalesce, oob=oob, target="a5", tile_rows=None if tile_shape is None else tile_shape[0],
                   dyn_ubuf_size=dyn_ubuf_size, strict=strict, dtype=dtype.name, backend="multicore")
    if op == "MGATHER":
        call = gather_plan(table, idx, **options)
    else:
        src = np.zeros((idx.size, table_shape[1]) if row else idx.shape, dtype=dtype.numpy)
        call = scatter_plan(table, src, idx, atomic=atomic, conflict=conflict, last_path=last_path, owner=owner,
                            **options)
    # the tiles the call is cut into (what it was validated with): the report's tile shape, the index's 2-D view
    tiles = tiling.full_tiles(op, "a5", coalesce, dtype, _dt.resolve("uint32"), raw.shape[0],
                              table_shape[1] if row else raw.shape[1], options["tile_rows"], dyn_ubuf_size)
    if tile_shape is not None and tiles.cols != tile_shape[1]:
        raise ValueError(f"coalescing.analyze: the whole-array call cuts this {raw.shape[0]}x{raw.shape[1]} Elem index "
                         f"as one flat run (tiles of {tiles.cols} col), not in rows of the tile_shape's "
                         f"{tile_shape[1]}: pass call='tile' for that tile")
    if not row:
        raw = raw.reshape(-1, tiles.cols)
    launches = call.launches
    unknown = [spec.kernel for spec in launches if spec.kernel not in _WHOLE_WALKS]
    if unknown:
        what = "; ".join(f"{name}: {_NOT_MODELLED.get(name, 'no walk of it')}" for name in dict.fromkeys(unknown))
        raise ValueError(f"coalescing.analyze: the whole-array call launches a kernel the analyzer does not model "
                         f"({what}); for Conflict::Last pass last_path='slot', or last_path='owner' with "
                         "owner='dense'")
    rule = next(spec.policy.rule for spec in launches if spec.policy.rule is not None)
    capacity = next(spec.arguments.get("table_rows", spec.arguments.get("table_size")) for spec in launches
                    if "table_rows" in spec.arguments or "table_size" in spec.arguments)
    slot, in_range = _remap(raw, capacity, rule)
    fmt = next((spec.policy.fmt for spec in launches if spec.policy.fmt is not None), None)
    ctx = _Ctx(op, coalesce, dtype, atomic, fmt, base, slot, in_range, keep, whole=True)
    replayed = [spec.hardware or spec for spec in launches]
    last_blocks = sum(spec.grid for spec in replayed if _WHOLE_WALKS[spec.kernel] == "last")
    first_row = block0 = 0  # the slot-centric launches: the next tile's first index row and first block
    owners = None
    for spec in replayed:
        walk = _WHOLE_WALKS[spec.kernel]
        a, warps = spec.arguments, spec.geometry.launch_warps
        ctx.begin(spec, (last_blocks if walk == "last" else spec.grid, warps))
        if walk == "row":
            rows = np.arange(a["valid_rows"])
            _walk_row(ctx, a["tile_rows"], a["valid_rows"], a["valid_cols"],
                      head=(_idx_stream(ctx), ctx.idx_base + rows * ctx.idx_step * 4), table_row=slot[:, 0],
                      ok=in_range[:, 0], data_row=rows, data_always=op == "MGATHER")
        elif walk == "elem":
            _walk_elem(ctx, a["tile_rows"], a["valid_rows"], a["valid_cols"], warps)
        elif walk == "last":
            _walk_last(ctx, first_row=first_row, rows=a["valid_rows"], cols=a["valid_cols"], block0=block0)
            first_row, block0 = first_row + a["valid_rows"], block0 + spec.grid
        elif walk == "owner reset":
            _walk_owner_reset(ctx)
        elif walk == "owner claim":
            _walk_owner_claim(ctx)
        else:
            owners = _owners(ctx) if owners is None else owners
            if row:
                table_rows = np.arange(a["table_rows"])
                _walk_row(ctx, a["tile_rows"], a["table_rows"], a["valid_cols"],
                          head=(ctx.stream("owner", "gm", "load", a["owner"].itemsize),
                                table_rows * a["owner"].itemsize),
                          table_row=table_rows, ok=owners >= 0, data_row=owners, data_always=False)
            else:
                _walk_elem_owner_write(ctx, owners)
    hardware = any(spec.hardware is not None for spec in launches)
    return _Replay(ctx, " -> ".join(dict.fromkeys(spec.kernel for spec in launches)), replayed[-1].geometry,
                   sum(spec.grid for spec in replayed), len(launches), (tiles.tile_rows, tiles.cols),
                   "hardware (element moves)" if hardware else "as launched", call.describe())


# -- the walks ------------------------------------------------------------------------------------------

class _Ctx:
    """What the walks share: the call's remapped indices, the launch being walked (its arguments by name, its
    blocks x warps) and the streams being filled. ``whole``: the launches are a whole-array call's, whose flat
    arrays are addressed by the call's rows (a tile call's by the tile's)."""

    def __init__(self, op, coalesce, dtype, atomic, fmt, base, slot, in_range, keep, *, whole, data_base=0,
                 idx_base=0):
        self.op, self.coalesce, self.dtype, self.isz = op, coalesce, dtype, dtype.itemsize
        self.base, self.slot, self.in_range, self.keep, self.whole = base, slot, in_range, keep, whole
        self.data_base, self.idx_base = data_base, idx_base
        fmt = ElementFormat.NATIVE if fmt is None else fmt
        self.cas = fmt in (ElementFormat.F16, ElementFormat.BF16, ElementFormat.F16_EDGE, ElementFormat.BF16_EDGE)
        self.signed_split = fmt == ElementFormat.F32_ORDER
        self.atomic = atomic != ScatterAtomicOp.NONE
        self._streams: dict[str, Stream] = {}

    def begin(self, spec, shape) -> None:
        """Walk ``spec`` next, as ``shape`` = (blocks, warps) of the streams it opens; what the kernel is passed,
        by its parameter names (kernels/a5/mgather.py, mscatter.py)."""
        self.spec, self.shape, a = spec, shape, spec.arguments
        self.args = a
        data = "dst" if self.op == "MGATHER" else "src"
        self.rs, self.cs = a.get(f"{data}_rs"), a.get(f"{data}_cs")
        self.idx_step, self.irs, self.ics = a.get("idx_step"), a.get("idx_rs"), a.get("idx_cs")
        self.capacity = a.get("table_rows", a.get("table_size"))

    def begin_scalar(self, plan, shape) -> None:
        """Walk the scalar fallback next: it reads the plan's tiles itself."""
        self.spec, self.shape, self.args = None, shape, {}
        self.rs, self.cs = plan.tile.strides
        self.idx_step, (self.irs, self.ics) = plan.idx_step, plan.idx.strides
        self.capacity = plan.capacity

    def stream(self, name, space, kind, itemsize) -> Stream:
        if name not in self._streams:
            self._streams[name] = Stream(name, space, kind, itemsize, self.shape, self.keep)
        return self._streams[name]

    def notes(self) -> list[str]:
        out = []
        if self.cas:
            out.append(f"{self.dtype} atomic Add: a CAS loop on the table's aligned 32-bit words; one word load "
                       "and the first CAS per lane counted")
        if self.signed_split:
            out.append("float32 atomic Max / Min: two predicated atomics (int32 view for values >= 0, uint32 view "
                       "for negative ones) counted as one request")
        return out

    def ordered(self) -> list[Stream]:
        # Every call reports its GM table stream even when nothing was issued (all rows masked).
        if self.op == "MGATHER":
            self.stream("table", "gm", "load", self.isz)
        else:
            self.stream("table", "gm", "atomic" if self.atomic else "store", 4 if self.cas else self.isz)
        return sorted(self._streams.values(), key=lambda s: (s.space != "gm", s.kind, s.name))

    # -- the per-lane accesses shared by the walks ----------------------------------------------------------
    def gm_table(self, elem, active, block, warp):
        """The GM access of table element ``elem`` (gather load; scatter store / atomic / CAS word)."""
        if self.op == "MGATHER":
            self.stream("table", "gm", "load", self.isz).add(self.base + elem * self.isz, active, block, warp)
        elif self.cas:  # 16-bit float atomic Add: load the aligned word holding the element, then compare-and-swap it
            word = ((self.base + elem * 2) >> 2) * 4
            self.stream("table word", "gm", "load", 4).add(word, active, block, warp)
            self.stream("table", "gm", "atomic", 4).add(word, active, block, warp)
        else:
            kind = "atomic" if self.atomic else "store"
            self.stream("table", "gm", kind, self.isz).add(self.base + elem * self.isz, active, block, warp)

    def ub_data(self, r, c, active, block, warp):
        """The dst UB store (gather) / src UB load (scatter) of data position ``(r, c)``."""
        name, kind = ("dst", "store") if self.op == "MGATHER" else ("src", "load")
        addr = (self.data_base + (r * self.rs + c * self.cs) * self.isz).reshape(-1, WARP)
        self.stream(name, "ub", kind, self.isz).add(addr, active, block, warp)


def _idx_stream(ctx: _Ctx) -> Stream:
    return ctx.stream("idx", "ub", "load", 4)


def _row_steps(warps_per_row, C):
    """The column steps of the Row walk: ``(segment, first column)`` of every inner-loop iteration that has
    lane 0 active, and the ``(steps, 32)`` column of each lane."""
    col_step = warps_per_row * WARP
    seg, c0 = [], []
    for s in range(warps_per_row):
        for start in range(s * WARP, C, col_step):
            seg.append(s)
            c0.append(start)
    seg, c0 = np.array(seg), np.array(c0)
    return seg, c0[:, None] + np.arange(WARP)[None, :]


def _walk_row(ctx: _Ctx, R, N, C, *, head, table_row, ok, data_row, data_always) -> None:
    """The Row walk (kernels/a5/device.walk_rows) of ``simt_mgather_row_kernel``, ``simt_mscatter_row_kernel`` and
    ``simt_mscatter_row_owner_write_kernel``: block ``b`` takes rows ``[b * R, ...)`` of ``N``. Per (row, warp) one
    read all 32 lanes make of one address (``head``: its stream and each row's byte address: the row's index, or
    its owner), then per column step one request over the lanes with ``c < C``: the GM access of table row
    ``table_row[gr]`` (only if ``ok[gr]``) and the data access of row ``data_row[gr]`` (if ``ok[gr]``, or always
    with ``data_always``: a gather writes T(0) into a masked row)."""
    rw, wpr = ctx.args["row_warps"], ctx.args["warps_per_row"]
    seg, cols = _row_steps(wpr, C)
    steps = len(seg)
    col_active = cols < C
    head_stream, head_addr = head
    per_chunk = max(1, _CHUNK_LANES // ((steps + wpr) * WARP))
    for g0 in range(0, N, per_chunk):
        gr = np.arange(g0, min(N, g0 + per_chunk))
        b, r = gr // R, gr % R
        # The head read: every warp of the row (one per column segment), all 32 lanes on one address.
        rr, bb = np.repeat(r, wpr), np.repeat(b, wpr)
        warp = rr % rw + np.tile(np.arange(wpr), len(gr)) * rw
        addr = np.broadcast_to(np.repeat(head_addr[gr], wpr)[:, None], (len(rr), WARP))
        head_stream.add(addr, np.ones(addr.shape, dtype=bool), bb, warp)
        # The column loop: request (row, step) covers lanes with c < validCols.
        block = np.broadcast_to(b[:, None], (len(gr), steps)).reshape(-1)
        warp = ((r % rw)[:, None] + seg[None, :] * rw).reshape(-1)
        act = np.broadcast_to(col_active[None], (len(gr), steps, WARP))
        gm_act = (act & ok[gr][:, None, None]).reshape(-1, WARP)
        elem = (table_row[gr][:, None, None] * C + cols[None]).reshape(-1, WARP)
        ctx.gm_table(elem, gm_act, block, warp)
        ctx.ub_data(data_row[gr][:, None, None], cols[None], act.reshape(-1, WARP) if data_always else gm_act,
                    block, warp)


def _walk_elem(ctx: _Ctx, R, N, C, W) -> None:
    """``simt_mgather_elem_kernel`` / ``simt_mscatter_elem_kernel`` (and the one-lane scalar fallback, ``W`` 1): block
    ``b`` takes rows ``[b * R, ...)`` of ``N``; thread ``tid`` takes flat positions ``tid + j * launchThreads`` of its
    block's ``rows x C`` region (kernels/a5/device.walk_elems)."""
    threads = W * WARP
    blocks = _ceil_div(N, R)
    iters = _ceil_div(R * C, threads)
    p = (np.arange(iters)[:, None, None] * threads + np.arange(W)[None, :, None] * WARP
         + np.arange(WARP)[None, None, :]).reshape(-1, WARP)
    warp_of = np.tile(np.arange(W), iters)
    r_in, c = p // C, p % C
    per_chunk = max(1, _CHUNK_LANES // p.size)
    idx_stream = _idx_stream(ctx)
    for b0 in range(0, blocks, per_chunk):
        b = np.arange(b0, min(blocks, b0 + per_chunk))
        total = np.minimum(R, N - b * R) * C
        active = (p[None] < total[:, None, None]).reshape(-1, WARP)
        gr = np.minimum(b[:, None, None] * R + r_in[None], N - 1).reshape(-1, WARP)
        cc = np.broadcast_to(c[None], (len(b),) + c.shape).reshape(-1, WARP)
        block = np.repeat(b, len(warp_of))
        warp = np.tile(warp_of, len(b))
        # a whole call's arrays hold every tile (the kernel's rows); a tile call's tile holds one
        rr = gr if ctx.whole else np.broadcast_to(r_in[None], (len(b),) + r_in.shape).reshape(-1, WARP)
        idx_stream.add(ctx.idx_base + (rr * ctx.irs + cc * ctx.ics) * 4, active, block, warp)
        ok = active & ctx.in_range[gr, cc]
        ctx.gm_table(ctx.slot[gr, cc], ok, block, warp)
        ctx.ub_data(rr, cc, active if ctx.op == "MGATHER" else ok, block, warp)


def _walk_last(ctx: _Ctx, *, first_row, rows, cols, block0) -> None:
    """One tile's ``simt_mscatter_row_last_kernel`` / ``simt_mscatter_elem_last_kernel`` launch: index rows
    ``[first_row, first_row + rows)``, a flat grid-stride walk over the table's slots (kernels/a5/device.walk_grid):
    thread ``g = b * threads + tid`` owns slots ``g, g + grid threads, ...``; its reverse scan reads the tile's
    indices from the last position down to the slot's last writer (all of them when there is none): one broadcast
    UB read per step, lanes dropping out as they hit. A found slot then stores its row (Row: one request per
    column) or element (Elem). The launch's blocks are blocks ``block0, ...`` of the streams."""
    C, W, G = cols, ctx.spec.geometry.launch_warps, ctx.spec.grid
    cap, row_mode = ctx.capacity, ctx.coalesce == Coalesce.ROW
    warps = G * W
    # request i: step i // warps of the grid's warp i % warps, its lanes on slots 32 i, ..., 32 i + 31
    slots = np.arange(_ceil_div(cap, warps * WARP) * warps * WARP).reshape(-1, WARP)
    grid_warp = np.arange(len(slots)) % warps
    block_of, warp_of = block0 + grid_warp // W, grid_warp % W
    lane_active = slots < cap
    safe = np.minimum(slots, cap - 1)
    part = ctx.slot[first_row: first_row + rows]
    ok = ctx.in_range[first_row: first_row + rows]
    if row_mode:
        npos, writer_slot, writer_ok = rows, part[:, 0], ok[:, 0]
    else:
        npos, writer_slot, writer_ok = rows * C, part.reshape(-1), ok.reshape(-1)
    owner = np.full(cap, -1, dtype=np.int64)
    np.maximum.at(owner, writer_slot[writer_ok], np.arange(npos, dtype=np.int64)[writer_ok])
    own = np.where(lane_active, owner[safe], -1)
    scan = np.where(lane_active, np.where(own >= 0, npos - own, npos), 0)  # index reads of each lane
    steps = scan.max(axis=1)
    second = np.partition(scan, WARP - 2, axis=1)[:, WARP - 2]  # steps with >= 2 lanes still scanning
    per_warp = np.zeros(ctx.shape, dtype=np.int64)
    np.add.at(per_warp, (block_of, warp_of), steps)
    shift = first_row if ctx.whole else 0  # a whole call's launch takes its tile's slice of the call's arrays
    trace = _scan_trace(ctx, scan, block_of, warp_of, npos, shift) if ctx.keep else None
    _idx_stream(ctx).add_broadcast(int(steps.sum()), int(scan.sum()), int(second.sum()), per_warp, trace)
    found = own >= 0
    groups = np.nonzero(found.any(axis=1))[0]
    if row_mode:
        col = np.arange(C)
        per_chunk = max(1, _CHUNK_LANES // (C * WARP))
        for g0 in range(0, len(groups), per_chunk):
            g = groups[g0: g0 + per_chunk]
            act = np.broadcast_to(found[g][:, None, :], (len(g), C, WARP)).reshape(-1, WARP)
            block, warp = np.repeat(block_of[g], C), np.repeat(warp_of[g], C)
            elem = (slots[g][:, None, :] * C + col[None, :, None]).reshape(-1, WARP)
            ctx.gm_table(elem, act, block, warp)
            ctx.ub_data(shift + own[g][:, None, :], col[None, :, None], act, block, warp)
    else:
        o = own[groups]
        ctx.gm_table(slots[groups], found[groups], block_of[groups], warp_of[groups])
        ctx.ub_data(shift + o // C, o % C, found[groups], block_of[groups], warp_of[groups])


def _scan_trace(ctx, scan, block_of, warp_of, npos, shift):
    """Every index read of the reverse scans, as lane-trace rows (``keep_lanes`` only)."""
    req, lane = np.nonzero(scan)
    counts = scan[req, lane]
    rep = np.repeat(np.arange(len(req)), counts)
    step = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    pos = npos - 1 - step
    if ctx.coalesce == Coalesce.ROW:
        addr = ctx.idx_base + (shift + pos) * ctx.idx_step * 4
    else:
        addr = ctx.idx_base + ((shift + pos // ctx.args["valid_cols"]) * ctx.irs
                               + (pos % ctx.args["valid_cols"]) * ctx.ics) * 4
    return np.stack([block_of[req][rep], warp_of[req][rep], lane[rep], addr], axis=1)


# -- the owner path (whole-array Conflict::Last) -------------------------------------------------------------

def _flat_requests(spec, count):
    """The requests of a flat grid-stride launch over ``count`` items (kernels/a5/device.walk_grid: thread
    ``g = b * threads + ty * 32 + tx`` takes items ``g, g + grid threads, ...``): request ``i`` is step
    ``i // (grid x warps)`` of the grid's warp ``i % (grid x warps)``, its lanes on items ``32 i, ..., 32 i + 31``.
    Yields ``(items, active, block, warp)`` in chunks."""
    W = spec.geometry.launch_warps
    warps = spec.grid * W
    requests = _ceil_div(count, warps * WARP) * warps
    per_chunk = max(1, _CHUNK_LANES // WARP)
    for i0 in range(0, requests, per_chunk):
        i = np.arange(i0, min(requests, i0 + per_chunk))
        items = i[:, None] * WARP + np.arange(WARP)[None, :]
        grid_warp = i % warps
        yield items, items < count, grid_warp // W, grid_warp % W


def _walk_owner_reset(ctx: _Ctx) -> None:
    """``simt_mscatter_owner_reset_kernel``: ``owner[s] = -1`` for every owner, a flat walk."""
    owner = ctx.args["owner"]
    stream = ctx.stream("owner reset", "gm", "store", owner.itemsize)
    for items, active, block, warp in _flat_requests(ctx.spec, owner.size):
        stream.add(items * owner.itemsize, active, block, warp)


def _walk_owner_claim(ctx: _Ctx) -> None:
    """``simt_mscatter_row_owner_claim_kernel`` / ``simt_mscatter_elem_owner_claim_kernel``: a flat walk over the
    source positions from the last down (item ``i`` is position ``n - 1 - i``; Row: source rows): each lane reads
    its index, then, in range, claims ``owner[slot]`` with an atomic max."""
    a = ctx.args
    if ctx.coalesce == Coalesce.ROW:
        total, cols, slot, ok = a["valid_rows"], 1, ctx.slot[:, 0], ctx.in_range[:, 0]
    else:
        cols = a["valid_cols"]
        total, slot, ok = a["valid_rows"] * cols, ctx.slot.reshape(-1), ctx.in_range.reshape(-1)
    oisz = a["owner"].itemsize
    claim = ctx.stream("owner claim", "gm", "atomic", oisz)
    for items, active, block, warp in _flat_requests(ctx.spec, total):
        p = np.where(active, total - 1 - items, 0)
        at = p * ctx.idx_step if ctx.coalesce == Coalesce.ROW else (p // cols) * ctx.irs + (p % cols) * ctx.ics
        _idx_stream(ctx).add(ctx.idx_base + at * 4, active, block, warp)
        claim.add(slot[p] * oisz, active & ok[p], block, warp)


def _owners(ctx: _Ctx) -> npt.NDArray[Any]:
    """Each table slot's owner after the claim: its largest in-range source position (Elem: flat; Row: the source
    row), -1 for none."""
    if ctx.coalesce == Coalesce.ROW:
        slot, ok = ctx.slot[:, 0], ctx.in_range[:, 0]
    else:
        slot, ok = ctx.slot.reshape(-1), ctx.in_range.reshape(-1)
    owners = np.full(ctx.capacity, -1, dtype=np.int64)
    np.maximum.at(owners, slot[ok], np.arange(slot.size, dtype=np.int64)[ok])
    return owners


def _walk_elem_owner_write(ctx: _Ctx, owners) -> None:
    """``simt_mscatter_elem_owner_write_kernel``: a flat walk over the table's slots; each lane reads its slot's
    owner, and an owned slot loads the source element at the owner's position and stores it."""
    a = ctx.args
    cap, cols, oisz = a["table_size"], a["valid_cols"], a["owner"].itemsize
    owner_stream = ctx.stream("owner", "gm", "load", oisz)
    for items, active, block, warp in _flat_requests(ctx.spec, cap):
        owner_stream.add(items * oisz, active, block, warp)
        s = np.minimum(items, cap - 1)
        p = owners[s]
        found = active & (p >= 0)
        ctx.gm_table(s, found, block, warp)
        q = np.maximum(p, 0)
        ctx.ub_data(q // cols, q % cols, found, block, warp)
