"""A5 SIMT launch geometry: the one place it is computed.

The kernels receive these numbers as launch parameters, the analyzer replays them, the tests check
them (MGATHER.md / MSCATTER.md, "Performance Considerations — A5, Shape-adaptive launch").
Every launch is one block of ``dim3(32, launch_warps)`` threads; lane = threadIdx.x, warp = threadIdx.y.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar, cast

WARP = 32
MAX_WARPS = 32


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _memo(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """The geometries are pure functions of a few ints, asked on every launch: each is computed once per argument list
    (at most 1024 of them; typed, so ``8`` and ``np.int64(8)`` keep their own). The signature stays the
    function's own for type checkers."""
    return cast(Callable[_P, _R], functools.lru_cache(maxsize=1024, typed=True)(function))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class LaunchGeometry:
    """One SIMT launch. ``scheme`` is "row", "elem" or "last" (slot-centric Conflict::Last)."""

    scheme: str
    launch_warps: int
    """kLaunchWarps: the block is dim3(32, launch_warps)."""
    row_warps: int = 0
    """Row: kRowWarps = min(validRows, 32); warp ty owns rows ty % kRowWarps, + kRowWarps, ..."""
    warps_per_row: int = 0
    """Row: kWarpsPerRow; warp ty takes column segment ty // kRowWarps, lanes step kWarpsPerRow * 32."""
    work_items: int = 0
    """Row: validRows; Elem: validRows * validCols positions; Last: destination slots (tableRows or tableSize)."""

    @property
    def block(self) -> tuple[int, int]:
        return (WARP, self.launch_warps)

    @property
    def threads(self) -> int:
        return WARP * self.launch_warps

    @property
    def rows_per_warp(self) -> int:
        """Row scheme: how many rows the busiest warp walks for the tile it was sized for."""
        return 0 if not self.row_warps else _ceil_div(self.work_items, self.row_warps)


    def as_dict(self) -> dict[str, Any]:
        return {"scheme": self.scheme, "block": list(self.block), "launch_warps": self.launch_warps,
                "threads": self.threads, "row_warps": self.row_warps, "warps_per_row": self.warps_per_row,
                "rows_per_warp": self.rows_per_warp, "work_items": self.work_items}


@_memo
def row_geometry(valid_rows: int, valid_cols: int) -> LaunchGeometry:
    """Row coalesce (gather, and scatter other than Conflict::Last)::

        kRowWarps    = min(validRows, 32)
        kWarpsPerRow = max(1, min(32 // kRowWarps, ceil(validCols / 32)))
        kLaunchWarps = kRowWarps * kWarpsPerRow
    """
    row_warps = min(valid_rows, MAX_WARPS)
    warps_per_row = max(1, min(MAX_WARPS // row_warps, _ceil_div(valid_cols, WARP)))
    return LaunchGeometry("row", row_warps * warps_per_row, row_warps, warps_per_row, valid_rows)


@_memo
def elem_geometry(valid_rows: int, valid_cols: int) -> LaunchGeometry:
    """Elem coalesce: ``kLaunchWarps = min(ceil(validRows * validCols / 32), 32)``; thread
    ``tid = ty * 32 + tx`` walks flat positions in steps of the launched thread count."""
    total = valid_rows * valid_cols
    return LaunchGeometry("elem", min(_ceil_div(total, WARP), MAX_WARPS), work_items=total)


@_memo
def last_geometry(slots: int) -> LaunchGeometry:
    """Conflict::Last: sized by the destination (Row: tableRows; Elem: tableSize). Each lane owns one
    slot at a time and reverse-scans the index tile for its largest flat writer."""
    return LaunchGeometry("last", min(_ceil_div(slots, WARP), MAX_WARPS), work_items=slots)


MAX_GRID = 2 ** 31 - 1
"""The CUDA limit on gridDim.x (the x dimension; y and z stop at 65535)."""


def flat_geometry(work_items: int) -> LaunchGeometry:
    """The whole-array owner path's flat grid-stride launches (reset, claim, the Elem writes): full
    ``dim3(32, 32)`` blocks, each thread walking ``work_items`` in steps of the grid's threads."""
    return LaunchGeometry("flat", MAX_WARPS, work_items=work_items)


def flat_grid(work_items: int) -> int:
    """Blocks of a flat grid-stride launch over ``work_items``: one per 1024 items, at most :data:`MAX_GRID`."""
    return min(MAX_GRID, max(1, _ceil_div(work_items, WARP * MAX_WARPS)))


@_memo
def l1_elem_geometry(rows: int, cols: int) -> LaunchGeometry:
    """GM -> L1 Elem, ``GatherExec::Simt`` (``simt_mgather_l1_elem_kernel``; MGATHER.md, "A5 only — SIMT
    executor for Elem GM → L1"): sized by the whole padded NZ tile, not its valid region::

        kLaunchWarps = min(ceil(Rows * Cols / 32), 32)

    Thread ``tid = ty * 32 + tx`` walks linear NZ offsets ``tid, tid + launchThreads, ...`` of the
    ``Rows * Cols`` scratch; ``rows`` / ``cols`` are the tile's padded (compile-time) extents."""
    total = rows * cols
    return LaunchGeometry("l1_elem", min(_ceil_div(total, WARP), MAX_WARPS), work_items=total)
