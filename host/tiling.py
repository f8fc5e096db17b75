"""The tiles of a whole-array call: the one place that cuts a large gather / scatter into UB-sized tiles.

A kernel author splits a large gather or scatter into tiles that fit the unified buffer and issues MGATHER /
MSCATTER per tile (MSCATTER.md, "Tiled-Iteration Pattern"; "UB Memory Budget"). Everything that reasons
about those tiles uses the functions here: the whole-array ops (:mod:`.large`, :mod:`.large_a5`), the coalescing
analyzer, ``simt-pto inspect``, selftest and the benchmarks.

* :func:`data_tile` / :func:`index_tile`: the smallest tiles of ``rows x cols`` valid elements under the 32-byte
  rule (a RowMajor tile pads Cols, a ColMajor one Rows, to 32 bytes; index elements are 4 bytes).
* :func:`default_tile_rows` / :func:`fit_tile_rows`: rows per tile when the caller names none: at most
  :data:`DEFAULT_MAX_TILE_ROWS` (Row) or :data:`DEFAULT_MAX_TILE_ELEMS` positions (Elem), halved until the
  tiles fit the UB budget.
* :func:`full_tiles`: the data and index tiles of one full tile of a whole-array call, which
  ``constraints.plan_*`` validate once for the call.
* :func:`tile_plan`: that validated plan re-pointed at the rows of one tile, for the sequential targets.

Plain model code: it imports no kernel and runs nothing.
"""
from __future__ import annotations

import copy
import math

import numpy as np

from simt_pto import dtypes as _dt
from simt_pto import ub
from simt_pto.enums import BLayout, Coalesce
from simt_pto.tile import Tile

DEFAULT_MAX_TILE_ROWS = 256
"""Default cap on rows per Row tile: more, smaller tiles give a GPU more blocks to run at once."""
DEFAULT_MAX_TILE_ELEMS = 4096
"""Default cap on elements per Elem tile (four per thread of a full 1024-thread block)."""
INDEX_ITEMSIZE = 4
"""Index elements are int32 / uint32: 8 of them fill the 32-byte unit."""


def round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def padded_shape(rows: int, cols: int, itemsize: int, layout=BLayout.ROW_MAJOR) -> tuple[int, int]:
    """The smallest padded ``(Rows, Cols)`` holding ``rows x cols`` elements of ``itemsize`` bytes: the contiguous
    dimension (Cols for RowMajor, Rows for ColMajor) is a whole number of 32-byte units."""
    unit = max(1, 32 // itemsize)
    return (rows, round_up(cols, unit)) if layout == BLayout.ROW_MAJOR else (round_up(rows, unit), cols)


def data_tile(dtype, rows: int, cols: int, layout=BLayout.ROW_MAJOR) -> Tile:
    """The dst (gather) / src (scatter) tile of ``rows x cols`` valid elements, padded by :func:`padded_shape`."""
    d = _dt.resolve(dtype)
    return Tile(d, *padded_shape(rows, cols, d.itemsize, layout), blayout=layout, valid=(rows, cols))


def index_tile(coalesce, rows: int, cols: int, layout=BLayout.ROW_MAJOR, idx_dtype="int32") -> Tile:
    """The index tile of a ``rows x cols`` data tile. Row: one index per row, ``[1, R]`` RowMajor (``layout``
    ROW_MAJOR) or ``[R, 1]`` ColMajor (COL_MAJOR); Elem: one per element, ``rows x cols`` in ``layout``."""
    if coalesce == Coalesce.ROW:
        if layout == BLayout.COL_MAJOR:
            return Tile(idx_dtype, round_up(rows, 8), 1, blayout=BLayout.COL_MAJOR, valid=(rows, 1))
        return Tile(idx_dtype, 1, round_up(rows, 8), valid=(1, rows))
    return Tile(idx_dtype, *padded_shape(rows, cols, INDEX_ITEMSIZE, layout), blayout=layout, valid=(rows, cols))


def tile_bytes(coalesce, cols: int, dtype, layout=BLayout.ROW_MAJOR, idx_layout=None):
    """``rows -> UB bytes`` of the data and index tiles of ``rows`` rows (what :func:`default_tile_rows` fits to
    the budget); ``idx_layout`` defaults to ``layout`` (Elem) or RowMajor (Row)."""
    itemsize = _dt.resolve(dtype).itemsize
    if idx_layout is None:
        idx_layout = layout if coalesce == Coalesce.ELEM else BLayout.ROW_MAJOR

    def nbytes(rows: int) -> int:
        r, c = padded_shape(rows, cols, itemsize, layout)
        if coalesce == Coalesce.ROW:
            index = round_up(rows, 8)
        else:
            ir, ic = padded_shape(rows, cols, INDEX_ITEMSIZE, idx_layout)
            index = ir * ic
        return r * c * itemsize + index * INDEX_ITEMSIZE
    return nbytes


def fit_tile_rows(tile_rows: int, tile_bytes, budget) -> int:
    """``tile_rows`` halved until the tiles of that many rows fit the UB: ``tile_bytes(rows) <= budget`` (no limit
    when ``budget`` is None), or one row."""
    limit = math.inf if budget is None else budget
    while tile_rows > 1 and tile_bytes(tile_rows) > limit:
        tile_rows = max(1, tile_rows // 2)
    return tile_rows


def default_tile_rows(coalesce, rows: int, cols: int, tile_bytes, budget) -> int:
    """Rows per tile when the caller names none: at most :data:`DEFAULT_MAX_TILE_ROWS` (Row) or
    ``DEFAULT_MAX_TILE_ELEMS // cols`` (Elem) and ``rows``, then :func:`fit_tile_rows`."""
    cap = DEFAULT_MAX_TILE_ROWS if coalesce == Coalesce.ROW else max(1, DEFAULT_MAX_TILE_ELEMS // cols)
    return fit_tile_rows(min(rows, cap), tile_bytes, budget)


def whole_array_layout(target: str, coalesce, cols: int) -> BLayout:
    """The data tiles' layout in a whole-array call: a 1-D element array on A5 is cut into ``[R, 1]`` ColMajor
    tiles (R elements contiguous, as the A5 Elem kernels read them); everything else RowMajor."""
    if coalesce == Coalesce.ELEM and cols == 1 and target == "a5":
        return BLayout.COL_MAJOR
    return BLayout.ROW_MAJOR


def full_tiles(op: str, target: str, coalesce, dtype, idx_dtype, rows: int, cols: int, tile_rows=None,
               dyn_ubuf_size=None) -> tuple[Tile, Tile, int]:
    """``(data tile, index tile, tile_rows)``: the tiles of one full tile of a whole-array call over ``rows``
    index rows of ``cols`` (what the call is validated with), and the rows per tile (``tile_rows``, or
    :func:`default_tile_rows` under the target's UB budget; at most ``rows``). TypeError for a ``tile_rows`` that
    is not a positive int."""
    layout = whole_array_layout(target, coalesce, cols)

    def build(tr):
        return data_tile(dtype, tr, cols, layout), index_tile(coalesce, tr, cols, layout, idx_dtype)

    if tile_rows is None:
        tile_rows = default_tile_rows(coalesce, rows, cols, tile_bytes(coalesce, cols, dtype, layout),
                                      ub.budget(op, target, dyn_ubuf_size))
    elif isinstance(tile_rows, bool) or not isinstance(tile_rows, (int, np.integer)) or tile_rows < 1:
        raise TypeError(f"tile_rows must be a positive int, got {tile_rows!r}")
    tile_rows = min(int(tile_rows), rows)
    return (*build(tile_rows), tile_rows)


def weightless(tile: Tile) -> Tile:
    """``tile`` over storage that takes no memory (read-only zeros: one element, broadcast): what a cached plan
    keeps of its full tile (:func:`tile_plan` gives every tile storage of its own)."""
    light = copy.copy(tile)
    light.data = np.broadcast_to(np.zeros((), dtype=tile.data.dtype), tile.data.shape)
    return light


def tile_starts(rows: int, tile_rows: int) -> range:
    """The first index row of each tile, in order: tile ``b`` holds rows ``[b * tile_rows, ...)``."""
    return range(0, rows, tile_rows)


def tile_plan(plan, idx_rows: np.ndarray, data_rows: np.ndarray | None = None, table=None):
    """The call's validated plan (of one full tile, :func:`full_tiles`) re-pointed at one tile: fresh data and
    index tiles of the plan's padded shape holding ``idx_rows`` (the tile's index rows, ``(n, C)``) and
    ``data_rows`` (a scatter's source rows; None for a gather, whose dst tile starts zeroed), and ``table`` (a
    GlobalTensor) in place of the plan's where given.

    Nothing is validated again: a tile differs from the validated one only in its valid rows (fewer, in the last
    tile) and its index values, which the whole-array call has checked as a whole (:meth:`Tile.zeroed`,
    :meth:`~simt_pto.plan.Plan.repointed`)."""
    proto_data, proto_idx = plan.tile, plan.idx
    n = idx_rows.shape[0]
    if plan.coalesce == Coalesce.ROW:
        idx_rows, valid = idx_rows.reshape(1, n), (n, proto_data.valid_cols)
        if proto_idx.blayout == BLayout.COL_MAJOR:
            idx_rows = idx_rows.reshape(n, 1)
    else:
        valid = idx_rows.shape
    idx = proto_idx.zeroed(idx_rows.shape).set(idx_rows)
    data = proto_data.zeroed(valid)
    if data_rows is not None:
        data.set(data_rows)
    if table is None:
        return plan.repointed(tile=data, idx=idx)
    return plan.repointed(tile=data, idx=idx, table=table)


__all__ = ["DEFAULT_MAX_TILE_ELEMS", "DEFAULT_MAX_TILE_ROWS", "data_tile", "default_tile_rows", "fit_tile_rows",
           "full_tiles", "index_tile", "padded_shape", "round_up", "tile_bytes", "tile_plan", "tile_starts",
           "weightless", "whole_array_layout"]
