"""Coalescing analyzer: the memory requests an A5 MGATHER / MSCATTER launch issues, without a GPU.

:func:`analyze` validates the call with :func:`simt_pto.constraints.validated_mgather` /
:func:`~simt_pto.constraints.validated_mscatter`, takes its launch from the one A5 dispatch
(:func:`simt_pto.host.a5.mgather_launches` / :func:`~simt_pto.host.a5.mscatter_launches`: a
:class:`~simt_pto.launch_spec.LaunchSpec`; nothing is launched), and replays that kernel's lane -> address
mapping (kernels/a5/mgather.py, mscatter.py) with numpy, reading the launch's arguments by name (strides,
``idx_step``, the capacity, ``row_warps`` / ``warps_per_row``) and its policy (the element format).

It models the hardware's launch: where the emulator launches something else (the whole-array Row gather and the
owner write move each row in units of up to 8 bytes), a launch records the hardware's one in
``LaunchSpec.hardware`` and the analyzer replays that; the report says which one it replayed
(:attr:`CoalescingReport.launch`).

* Row: warp ``ty`` owns rows ``ty % kRowWarps, + kRowWarps, ...`` and column segment ``ty // kRowWarps``;
  lane ``tx`` walks columns ``seg * 32 + tx`` in steps of ``kWarpsPerRow * 32``. Every lane of the warp
  reads ``idx[r * idxStep]`` (one broadcast UB read per row); a masked row (Zero / Skip) issues no GM access.
* Elem: thread ``tid = ty * 32 + tx`` walks flat positions ``tid, tid + launchThreads, ...``.
* Conflict::Last: thread ``tid`` owns slots ``tid, tid + launchThreads, ...``; its reverse scan reads only
  UB (one broadcast read per step, stopping at the first hit); a found slot then writes its row
  (Row: ``validCols`` stores, one per column) or its element (Elem).

A **request** is one memory instruction of one warp, counting its active lanes only (lanes whose loop
or ``if`` condition failed are inactive). For each request the analyzer counts the distinct 32-byte
sectors and 128-byte segments of GM it touches (CUDA's L1/L2 granularity, the "128 B GM burst" of the
spec's Performance Considerations) and, for UB tiles, the distinct 32-byte UB blocks and the lane
stride. ``bytes_requested`` counts each distinct address of a request once (a broadcast is served
once), ``bytes_moved = sectors * 32`` and ``efficiency = bytes_requested / bytes_moved`` (<= 1).

An index longer than one tile is split into tiles of ``tile_shape`` rows: tile ``b`` runs as block ``b``
of one launch with the tile's geometry, the kernels' multi-block form (rows ``[b * tile_rows, ...)``), so a
partial last tile keeps the full tile's geometry. Conflict::Last is sized by the table, not the tile:
there each tile is one call (one launch, one block as ``mscatter_launches`` gives it; ``simt_pto.host.in_memory``
may spread a call's slots over several blocks: the same requests, issued by other warps). The ``(1, 1)`` Elem case is the scalar fallback
(``MGatherScalarImpl`` / ``MScatterScalarImpl``): one one-lane access per tile, no SIMT launch.

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
        self._trace: list[np.ndarray] = []

    # -- accumulation --------------------------------------------------------------------------------------
    def add(self, addr: np.ndarray, active: np.ndarray, block: np.ndarray, warp: np.ndarray) -> None:
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

    def add_broadcast(self, requests: int, lanes: int, multi_lane_requests: int, per_warp: np.ndarray,
                      trace: np.ndarray | None = None) -> None:
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

    def lane_trace(self) -> np.ndarray:
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
    hist: np.ndarray = field(default_factory=lambda: np.zeros(2 * WARP + 1, dtype=np.int64))

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
    "src", "table word"); :meth:`emulated` totals GM and UB together, as the emulator's arrays all live in
    GPU global memory when it runs on a CUDA GPU."""

    op: str
    coalesce: Coalesce
    kernel: str
    geometry: LaunchGeometry | None  # None for the scalar fallback
    blocks: int                 # blocks (Last, scalar: calls), one per tile
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
    ``"hardware (element moves)"`` (the emulator's own launch differs, :attr:`LaunchSpec.hardware`); for the
    scalar fallback, ``"scalar pipe (no SIMT launch)"``."""

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
            "op": self.op, "coalesce": self.coalesce.name.lower(), "kernel": self.kernel, "launch": self.launch,
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


def analyze(op: str, coalesce: CoalesceLike, idx: npt.ArrayLike, table_shape: ShapeLike,
            tile_shape: ShapeLike | None = None, dtype: _dt.DTypeLike = "float32", *,
            atomic: ScatterAtomicOpLike = "none", conflict: ScatterConflictLike = "last",
            oob: GatherOOBLike | ScatterOOBLike = "undefined", strict: bool = True, base_offset_bytes: int = 0,
            tile_layout: BLayoutLike | None = None, idx_layout: BLayoutLike | None = None,
            tile_padded: ShapeLike | None = None, dyn_ubuf_size: int | None = None,
            keep_lanes: bool = False) -> CoalescingReport:
    """Replay the A5 kernel of one MGATHER / MSCATTER call and count its memory requests (see the module doc).

    * ``op``: "mgather" or "mscatter"; ``coalesce``: "row" or "elem" (any :func:`~simt_pto.enums.from_any` form).
    * ``idx``: the indices. Row: 1-D (or ``[1, N]`` / ``[N, 1]``) row indices. Elem: ``[R, C]`` element indices;
      a 1-D one is ``[N, 1]`` (``[R, 1]`` ColMajor tiles), or rows of the tile's cols when ``tile_shape`` is given.
    * ``table_shape``: ``(TableRows, Cols)`` (Elem also a flat size); ``dtype`` the element type.
    * ``tile_shape``: the valid ``(R, C)`` of one dst / src tile (default, as ``simt_pto.host.in_memory``: 256 rows
      (Row) or 4096 positions (Elem), halved until the tiles fit the UB budget); ``tile_padded`` its padded
      ``(Rows, Cols)`` (default: the least padding the 32-byte rule allows); ``tile_layout`` "row_major" (default)
      or "col_major".
    * ``idx_layout``: Row: "row" (a ``[1, R]`` RowMajor index tile, default) or "col" (``[R, 1]`` ColMajor;
      the default for an ``[N, 1]`` array); Elem: the index tile's BLayout (default: the tile's).
    * ``atomic`` / ``conflict`` / ``oob`` / ``strict`` / ``dyn_ubuf_size``: as for :func:`simt_pto.mscatter` /
      :func:`simt_pto.mgather`; the call is validated as the API validates it (ConstraintError, OutOfBoundsError).
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
    base_offset_bytes = int(base_offset_bytes)
    if base_offset_bytes < 0 or base_offset_bytes % dtype.itemsize:
        raise ValueError(f"coalescing.analyze: base_offset_bytes must be a non-negative multiple of the element size "
                         f"({dtype.itemsize} B for {dtype}), got {base_offset_bytes}")
    table_shape = _shape2(table_shape, "table_shape")
    tile_shape = None if tile_shape is None else _shape2(tile_shape, "tile_shape")
    raw, C = _index_matrix(coalesce, idx_arr, tile_shape, table_shape[1])
    if raw.size == 0:
        raise ValueError("coalescing.analyze: no indices")
    if tile_layout is None:
        tile_layout = BLayout.COL_MAJOR if coalesce == Coalesce.ELEM and C == 1 and raw.shape[0] > 1 else \
            BLayout.ROW_MAJOR
    tile_layout = _layout(tile_layout, "tile_layout")
    if idx_layout is None:
        if coalesce == Coalesce.ROW:
            idx_layout = (BLayout.COL_MAJOR if idx_arr.ndim == 2 and idx_arr.shape[1] == 1 and idx_arr.shape[0] > 1
                          else BLayout.ROW_MAJOR)
        else:
            idx_layout = tile_layout
    idx_layout = _layout(idx_layout, "idx_layout")
    n_rows = raw.shape[0]
    budget = ub.budget(op, "a5", dyn_ubuf_size)
    R = (tiling.default_tile_rows(coalesce, n_rows, C, tiling.tile_bytes(coalesce, C, dtype, tile_layout, idx_layout),
                                  budget)
         if tile_shape is None else min(tile_shape[0], n_rows))

    # The call, validated and dispatched as the API does it (one tile; every tile shares its geometry).
    if tile_padded is None:
        data = tiling.data_tile(dtype, R, C, tile_layout)
    else:
        data = Tile(dtype, *_shape2(tile_padded, "tile_padded"), blayout=tile_layout, valid=(R, C))
    idx_tile = tiling.index_tile(coalesce, R, C, idx_layout, _dt.int32)
    table = GlobalTensor(np.zeros(table_shape, dtype=dtype.numpy), dtype=dtype)
    with first_use:  # the A5 dispatch loads the kernels package: at the first analysis, not at import
        from simt_pto.host import a5
    if op == "MGATHER":
        plan = constraints.validated_mgather("a5", data, table, idx_tile, coalesce, oob, GatherExec.SCALAR, None,
                                        bool(strict), dyn_ubuf_size)
        launches = a5.mgather_launches(plan).launches
    else:
        plan = constraints.validated_mscatter("a5", table, data, idx_tile, coalesce, atomic, oob, conflict,
                                         bool(strict), dyn_ubuf_size)
        launches = a5.mscatter_launches(plan).launches
    # the whole index, as the whole-array call refuses it (the API checks one tile at a time)
    check_indices(op, "a5", plan.capacity, plan.rule,
                  raw[:, 0].astype(np.uint32) if coalesce == Coalesce.ROW else raw.astype(np.uint32))
    slot, in_range = _remap(raw, plan.capacity, plan.rule)

    blocks = _ceil_div(n_rows, R)
    if not launches:  # the (1, 1) Elem case: the scalar pipe
        spec, replayed = None, "scalar pipe (no SIMT launch)"
    elif launches[0].hardware is not None:
        spec, replayed = launches[0].hardware, "hardware (element moves)"
    else:
        spec, replayed = launches[0], "as launched"
    geo = spec.geometry if spec is not None else None
    warps = geo.launch_warps if geo is not None else 1
    ctx = _Ctx(op=op, plan=plan, spec=spec, R=R, C=C, n_rows=n_rows, blocks=blocks, warps=warps,
               isz=dtype.itemsize, base=base_offset_bytes, slot=slot, in_range=in_range, keep=keep_lanes)
    if spec is None:
        kernel, launch_count = ("MGatherScalarImpl" if op == "MGATHER" else "MScatterScalarImpl"), blocks
        _walk_elem(ctx)
    elif geo.scheme == "row":
        kernel, launch_count = spec.kernel, 1
        _walk_row(ctx)
    elif geo.scheme == "elem":
        kernel, launch_count = spec.kernel, 1
        _walk_elem(ctx)
    else:
        kernel, launch_count = spec.kernel, blocks
        _walk_last(ctx)
    return CoalescingReport(op, coalesce, kernel, geo, blocks, launch_count, dtype, table_shape, (R, C), tile_layout,
                            idx_layout, base_offset_bytes, atomic, conflict, oob, n_rows, C, ctx.ordered(),
                            ctx.notes(), replayed)


# -- the walks ------------------------------------------------------------------------------------------

class _Ctx:
    """What the walks share: the plan, the tile, the remapped indices, and the streams being filled."""

    def __init__(self, *, op, plan, spec, R, C, n_rows, blocks, warps, isz, base, slot, in_range, keep):
        self.op, self.plan, self.R, self.C, self.n_rows, self.blocks, self.warps = op, plan, R, C, n_rows, blocks, warps
        self.isz, self.base, self.slot, self.in_range, self.keep = isz, base, slot, in_range, keep
        self.geo = spec.geometry if spec is not None else None
        self.data_base = plan.tile.addr or 0
        self.idx_base = plan.idx.addr or 0
        if spec is None:  # the scalar fallback reads the plan's tiles itself
            self.rs, self.cs = plan.tile.strides
            self.idx_step, (self.irs, self.ics) = plan.idx_step, plan.idx.strides
            self.capacity, fmt = plan.capacity, ElementFormat.NATIVE
        else:  # what the kernel is passed, by its parameter names (kernels/a5/mgather.py, mscatter.py)
            a = spec.arguments
            data = "dst" if op == "MGATHER" else "src"
            self.rs, self.cs = a[f"{data}_rs"], a[f"{data}_cs"]
            self.idx_step, self.irs, self.ics = a.get("idx_step"), a.get("idx_rs"), a.get("idx_cs")
            self.capacity = a["table_rows"] if "table_rows" in a else a["table_size"]
            self.row_warps, self.warps_per_row = a.get("row_warps"), a.get("warps_per_row")
            fmt = spec.policy.fmt if spec.policy.fmt is not None else ElementFormat.NATIVE
        self.cas = fmt in (ElementFormat.F16, ElementFormat.BF16, ElementFormat.F16_EDGE, ElementFormat.BF16_EDGE)
        self.signed_split = fmt == ElementFormat.F32_ORDER
        self.atomic = plan.atomic != ScatterAtomicOp.NONE
        self._streams: dict[str, Stream] = {}

    def stream(self, name, space, kind, itemsize) -> Stream:
        if name not in self._streams:
            self._streams[name] = Stream(name, space, kind, itemsize, (self.blocks, self.warps), self.keep)
        return self._streams[name]

    def notes(self) -> list[str]:
        out = []
        if self.cas:
            out.append(f"{self.plan.dtype} atomic Add: a CAS loop on the table's aligned 32-bit words; one word load "
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
        """The dst UB store (gather) / src UB load (scatter) of tile position ``(r, c)``."""
        name, kind = ("dst", "store") if self.op == "MGATHER" else ("src", "load")
        addr = (self.data_base + (r * self.rs + c * self.cs) * self.isz).reshape(-1, WARP)
        self.stream(name, "ub", kind, self.isz).add(addr, active, block, warp)


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


def _walk_row(ctx: _Ctx) -> None:
    """``simt_mgather_row_kernel`` / ``simt_mscatter_row_kernel``: per (row, warp) one broadcast index read by all
    32 lanes, then per column step one request over lanes ``c < validCols`` (GM: only if the row is in range)."""
    R, C, N = ctx.R, ctx.C, ctx.n_rows
    rw, wpr = ctx.row_warps, ctx.warps_per_row
    seg, cols = _row_steps(wpr, C)
    steps = len(seg)
    col_active = cols < C
    slots, ok = ctx.slot[:, 0], ctx.in_range[:, 0]
    idx_stream = ctx.stream("idx", "ub", "load", 4)
    per_chunk = max(1, _CHUNK_LANES // ((steps + wpr) * WARP))
    for g0 in range(0, N, per_chunk):
        gr = np.arange(g0, min(N, g0 + per_chunk))
        b, r = gr // R, gr % R
        # The index read: every warp of the row (one per column segment), all 32 lanes on one UB address.
        rr, bb = np.repeat(r, wpr), np.repeat(b, wpr)
        warp = rr % rw + np.tile(np.arange(wpr), len(gr)) * rw
        addr = np.broadcast_to((ctx.idx_base + rr * ctx.idx_step * 4)[:, None], (len(rr), WARP))
        idx_stream.add(addr, np.ones(addr.shape, dtype=bool), bb, warp)
        # The column loop: request (row, step) covers lanes with c < validCols.
        block = np.broadcast_to(b[:, None], (len(gr), steps)).reshape(-1)
        warp = ((r % rw)[:, None] + seg[None, :] * rw).reshape(-1)
        act = np.broadcast_to(col_active[None], (len(gr), steps, WARP))
        gm_act = (act & ok[gr][:, None, None]).reshape(-1, WARP)
        elem = (slots[gr][:, None, None] * C + cols[None]).reshape(-1, WARP)
        ctx.gm_table(elem, gm_act, block, warp)
        ub_act = act.reshape(-1, WARP) if ctx.op == "MGATHER" else gm_act  # Zero rows still write T(0)
        ctx.ub_data(r[:, None, None], cols[None], ub_act, block, warp)


def _walk_elem(ctx: _Ctx) -> None:
    """``simt_mgather_elem_kernel`` / ``simt_mscatter_elem_kernel`` (and the one-lane scalar fallback): thread
    ``tid`` takes flat positions ``tid + j * launchThreads`` of its block's ``rows x validCols`` region."""
    R, C, N, W = ctx.R, ctx.C, ctx.n_rows, ctx.warps
    threads = W * WARP
    iters = _ceil_div(R * C, threads)
    p = (np.arange(iters)[:, None, None] * threads + np.arange(W)[None, :, None] * WARP
         + np.arange(WARP)[None, None, :]).reshape(-1, WARP)
    warp_of = np.tile(np.arange(W), iters)
    r_in, c = p // C, p % C
    per_chunk = max(1, _CHUNK_LANES // p.size)
    idx_stream = ctx.stream("idx", "ub", "load", 4)
    for b0 in range(0, ctx.blocks, per_chunk):
        b = np.arange(b0, min(ctx.blocks, b0 + per_chunk))
        total = np.minimum(R, N - b * R) * C
        active = (p[None] < total[:, None, None]).reshape(-1, WARP)
        gr = np.minimum(b[:, None, None] * R + r_in[None], N - 1).reshape(-1, WARP)
        cc = np.broadcast_to(c[None], (len(b),) + c.shape).reshape(-1, WARP)
        block = np.repeat(b, len(warp_of))
        warp = np.tile(warp_of, len(b))
        rr = np.broadcast_to(r_in[None], (len(b),) + r_in.shape).reshape(-1, WARP)
        idx_stream.add(ctx.idx_base + (rr * ctx.irs + cc * ctx.ics) * 4, active, block, warp)
        ok = active & ctx.in_range[gr, cc]
        ctx.gm_table(ctx.slot[gr, cc], ok, block, warp)
        ctx.ub_data(rr, cc, active if ctx.op == "MGATHER" else ok, block, warp)


def _walk_last(ctx: _Ctx) -> None:
    """``simt_mscatter_row_last_kernel`` / ``simt_mscatter_elem_last_kernel``, one call per tile: thread ``tid``
    owns slots ``tid + j * launchThreads``; its reverse scan reads the index tile from the last position down to
    the slot's last writer (all of it when there is none): one broadcast UB read per step, lanes dropping out as
    they hit. A found slot then stores its row (Row: one request per column) or element (Elem)."""
    plan, R, C, N, W = ctx.plan, ctx.R, ctx.C, ctx.n_rows, ctx.warps
    cap, row_mode = ctx.capacity, plan.coalesce == Coalesce.ROW
    threads = W * WARP
    slots = np.arange(_ceil_div(cap, threads) * threads).reshape(-1, WARP)  # row j * W + w: slots of warp w, step j
    warp_of = np.tile(np.arange(W), len(slots) // W)
    lane_active = slots < cap
    safe = np.minimum(slots, cap - 1)
    idx_stream = ctx.stream("idx", "ub", "load", 4)
    for b in range(ctx.blocks):
        rows = min(R, N - b * R)
        part = ctx.slot[b * R: b * R + rows]
        ok = ctx.in_range[b * R: b * R + rows]
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
        per_warp = np.zeros((ctx.blocks, W), dtype=np.int64)
        per_warp[b] = np.bincount(warp_of, weights=steps, minlength=W).astype(np.int64)
        trace = _scan_trace(ctx, b, scan, warp_of, npos) if ctx.keep else None
        idx_stream.add_broadcast(int(steps.sum()), int(scan.sum()), int(second.sum()), per_warp, trace)
        found = own >= 0
        groups = np.nonzero(found.any(axis=1))[0]
        if row_mode:
            cols = np.arange(C)
            per_chunk = max(1, _CHUNK_LANES // (C * WARP))
            for g0 in range(0, len(groups), per_chunk):
                g = groups[g0: g0 + per_chunk]
                act = np.broadcast_to(found[g][:, None, :], (len(g), C, WARP)).reshape(-1, WARP)
                block = np.full(len(g) * C, b)
                warp = np.repeat(warp_of[g], C)
                elem = (slots[g][:, None, :] * C + cols[None, :, None]).reshape(-1, WARP)
                ctx.gm_table(elem, act, block, warp)
                ctx.ub_data(own[g][:, None, :], cols[None, :, None], act, block, warp)
        else:
            block = np.full(len(groups), b)
            o = own[groups]
            ctx.gm_table(slots[groups], found[groups], block, warp_of[groups])
            ctx.ub_data(o // C, o % C, found[groups], block, warp_of[groups])


def _scan_trace(ctx, b, scan, warp_of, npos):
    """Every index read of the reverse scans, as lane-trace rows (``keep_lanes`` only)."""
    req, lane = np.nonzero(scan)
    counts = scan[req, lane]
    rep = np.repeat(np.arange(len(req)), counts)
    step = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    pos = npos - 1 - step
    if ctx.plan.coalesce == Coalesce.ROW:
        addr = ctx.idx_base + pos * ctx.idx_step * 4
    else:
        addr = ctx.idx_base + ((pos // ctx.C) * ctx.irs + (pos % ctx.C) * ctx.ics) * 4
    return np.stack([np.full(len(rep), b), warp_of[req][rep], lane[rep], addr], axis=1)
