"""The tiles of a whole-array call: the one place that cuts a large gather / scatter into UB-sized tiles.

A kernel author splits a large gather or scatter into tiles that fit the unified buffer and issues MGATHER /
MSCATTER per tile (MSCATTER.md, "Tiled-Iteration Pattern"; "UB Memory Budget"). Everything that reasons
about those tiles uses the functions here: the whole-array ops (:mod:`.in_memory`, :mod:`.a5_planner`), the coalescing
analyzer, ``simt-pto inspect``, selftest and the benchmarks.

* :func:`data_tile` / :func:`index_tile`: the smallest tiles of ``rows x cols`` valid elements under the 32-byte
  rule (a RowMajor tile pads Cols, a ColMajor one Rows, to 32 bytes; index elements are 4 bytes).
* :func:`default_tile_rows` / :func:`fit_tile_rows`: rows per tile when the caller names none: at most
  :attr:`~.tuning.HostTuning.max_tile_rows` (Row) or :attr:`~.tuning.HostTuning.max_tile_elems` positions (Elem), halved until the
  tiles fit the UB budget.
* :func:`elem_tile_cols`: the columns of an Elem call's tiles: whole rows of the index (its last axis) while a row
  fits one default tile, else the index taken as one flat run of elements in C order, cut by element count.
* :func:`tile_view`: the tile view of a whole-array call (rows per tile, columns, layout), by arithmetic: what the
  A5 planner reads. A tile that cannot fit the UB is refused here, with what would make it fit.
* :func:`full_tiles`: the data and index tiles of one full tile of a whole-array call, which the sequential targets
  run as tile ops and validate once through ``constraints.validated_*``.
* :func:`tile_plan`: that validated plan re-pointed at the rows of one tile, for the sequential targets.

Plain model code: it imports no kernel and runs nothing.
"""
from __future__ import annotations

import copy
import math
from typing import NamedTuple

import numpy as np

from simt_pto import dtypes as _dt
from simt_pto import ub
from simt_pto.call import check_tile_rows
from simt_pto.enums import BLayout, Coalesce
from simt_pto.errors import ConstraintError
from simt_pto.tile import Tile

from . import tuning

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


def index_shape(coalesce, rows: int, cols: int, layout=BLayout.ROW_MAJOR) -> tuple[int, int]:
    """The padded ``(Rows, Cols)`` of :func:`index_tile`."""
    if coalesce == Coalesce.ROW:
        return (round_up(rows, 8), 1) if layout == BLayout.COL_MAJOR else (1, round_up(rows, 8))
    return padded_shape(rows, cols, INDEX_ITEMSIZE, layout)


def index_tile(coalesce, rows: int, cols: int, layout=BLayout.ROW_MAJOR, idx_dtype="int32") -> Tile:
    """The index tile of a ``rows x cols`` data tile. Row: one index per row, ``[1, R]`` RowMajor (``layout``
    ROW_MAJOR) or ``[R, 1]`` ColMajor (COL_MAJOR); Elem: one per element, ``rows x cols`` in ``layout``."""
    shape = index_shape(coalesce, rows, cols, layout)
    if coalesce == Coalesce.ROW:
        if layout == BLayout.COL_MAJOR:
            return Tile(idx_dtype, *shape, blayout=BLayout.COL_MAJOR, valid=(rows, 1))
        return Tile(idx_dtype, *shape, valid=(1, rows))
    return Tile(idx_dtype, *shape, blayout=layout, valid=(rows, cols))


def tile_bytes(coalesce, cols: int, dtype, layout=BLayout.ROW_MAJOR, idx_layout=None):
    """``rows -> UB bytes`` of the data and index tiles of ``rows`` rows (what :func:`default_tile_rows` fits to
    the budget); ``idx_layout`` defaults to ``layout`` (Elem) or RowMajor (Row)."""
    itemsize = (dtype if type(dtype) is _dt.DType else _dt.resolve(dtype)).itemsize  # (resolved: no call)
    if idx_layout is None:
        idx_layout = layout if coalesce == Coalesce.ELEM else BLayout.ROW_MAJOR

    def nbytes(rows: int) -> int:
        r, c = padded_shape(rows, cols, itemsize, layout)
        ir, ic = index_shape(coalesce, rows, cols, idx_layout)
        return r * c * itemsize + ir * ic * INDEX_ITEMSIZE
    return nbytes


def fit_tile_rows(tile_rows: int, tile_bytes, budget) -> int:
    """``tile_rows`` halved until the tiles of that many rows fit the UB: ``tile_bytes(rows) <= budget`` (no limit
    when ``budget`` is None), or one row."""
    limit = math.inf if budget is None else budget
    while tile_rows > 1 and tile_bytes(tile_rows) > limit:
        tile_rows = max(1, tile_rows // 2)
    return tile_rows


def default_tile_rows(coalesce, rows: int, cols: int, tile_bytes, budget) -> int:
    """Rows per tile when the caller names none: at most :attr:`~.tuning.HostTuning.max_tile_rows` (Row) or
    ``max_tile_elems // cols`` (Elem) and ``rows``, then :func:`fit_tile_rows`."""
    limits = tuning.current()
    cap = limits.max_tile_rows if coalesce == Coalesce.ROW else max(1, limits.max_tile_elems // cols)
    return fit_tile_rows(min(rows, cap), tile_bytes, budget)


def whole_array_layout(target: str, coalesce, cols: int) -> BLayout:
    """The data tiles' layout in a whole-array call: a 1-D element array on A5 is cut into ``[R, 1]`` ColMajor
    tiles (R elements contiguous, as the A5 Elem kernels read them); everything else RowMajor."""
    if coalesce == Coalesce.ELEM and cols == 1 and target == "a5":
        return BLayout.COL_MAJOR
    return BLayout.ROW_MAJOR


def elem_tile_cols(op: str, target: str, dtype, cols: int, dyn_ubuf_size=None) -> int:
    """The columns of an Elem whole-array call's tiles, for an index whose 2-D view has rows of ``cols`` elements
    (its last axis; :func:`simt_pto.host.arrays._two_d`): ``cols`` while one row fits one default tile (at most
    :attr:`~.tuning.HostTuning.max_tile_elems` elements, its data and index tiles within the target's UB budget), so a tile
    holds ``tile_rows`` whole index rows (MSCATTER.md, "Tiled-Iteration Pattern": a 2048 x 8 index as chunks of
    128 x 8); else 1: the index is one flat run of elements in C order, as a 1-D index is, and a tile holds
    ``tile_rows`` of its elements. Elem semantics are per element in C order, so either view gives the same
    result; the flat one lets a long last axis be split across tiles."""
    if cols <= 1 or cols > tuning.current().max_tile_elems:
        return 1
    budget = ub.budget(op, target, dyn_ubuf_size)
    one_row = tile_bytes(Coalesce.ELEM, cols, dtype, whole_array_layout(target, Coalesce.ELEM, cols))(1)
    return cols if budget is None or one_row <= budget else 1


def flat_tile_rows(op: str, target: str, dtype, tile_rows: int, cols: int, dyn_ubuf_size=None) -> int:
    """Elements per tile of an Elem call that takes, as one flat run, the indices another call cuts into tiles of
    ``tile_rows`` rows of ``cols`` (a Dask chunk's routed share of an index whose rows are ``cols`` wide): the same
    number of elements, halved until the flat run's tiles fit the UB. A flat tile is ``[R, 1]``, padded to the
    32-byte row minimum on a RowMajor target (eight int32 indices a row: eight times a 2-D tile's bytes), so the
    same elements can overflow the budget the 2-D tile kept. Elem results are per element in C order: the tile size
    changes none."""
    layout = whole_array_layout(target, Coalesce.ELEM, 1)
    return fit_tile_rows(tile_rows * cols, tile_bytes(Coalesce.ELEM, 1, dtype, layout), ub.budget(op, target, dyn_ubuf_size))


class TileView(NamedTuple):
    """The tile view of a whole-array call (:func:`tile_view`): how its rows are cut into tiles."""

    tile_rows: int
    """Rows of the call's 2-D view per tile: index rows (Row, and Elem with ``cols`` > 1), or index elements
    (Elem with ``cols`` == 1: a 1-D index, or an index cut as one flat run, :func:`elem_tile_cols`)."""
    cols: int
    """Columns of that view: the table's row width (Row); the index's last axis, or 1 (Elem)."""
    layout: BLayout
    """The data tiles' layout (:func:`whole_array_layout`)."""


class FullTiles(NamedTuple):
    """One full tile of a whole-array call (:func:`full_tiles`)."""

    data: Tile
    """The dst (gather) / src (scatter) tile."""
    idx: Tile
    tile_rows: int
    """:attr:`TileView.tile_rows`."""
    cols: int
    """:attr:`TileView.cols`."""


def tile_view(op: str, target: str, coalesce, dtype, idx_dtype, rows: int, cols: int, tile_rows: int | None,
              budget: int | None, dyn_ubuf_size=None) -> TileView:
    """The tile view of a whole-array call whose index's 2-D view is ``rows x cols`` (Row: ``rows`` indices,
    ``cols`` the table's row width; Elem: the index's rows and last axis, which :func:`elem_tile_cols` may turn into
    ``rows * cols`` rows of 1 element), under the UB ``budget`` (:func:`simt_pto.ub.budget` of ``op``, ``target``,
    ``dyn_ubuf_size``). Rows per tile: ``tile_rows`` (a positive int or None: :func:`~simt_pto.call.check_tile_rows`
    has checked it), or :func:`default_tile_rows`; at most the view's rows. An empty index is one row (Elem: one
    element): the call's rules are checked, then nothing runs. Plain arithmetic: no tile is built.

    ConstraintError ("UB working set within budget") for tiles over the budget, naming what would make them fit
    (:func:`over_budget`)."""
    if coalesce == Coalesce.ELEM:
        if rows * cols == 0:
            rows, cols = 0, 1
        elif cols > 1 and elem_tile_cols(op, target, dtype, cols, dyn_ubuf_size) == 1:
            rows, cols = rows * cols, 1
    rows = max(rows, 1)
    layout = whole_array_layout(target, coalesce, cols)
    nbytes = tile_bytes(coalesce, cols, dtype, layout)
    given = tile_rows is not None
    tile_rows = min(tile_rows, rows) if given else default_tile_rows(coalesce, rows, cols, nbytes, budget)
    if budget is not None and nbytes(tile_rows) > budget:
        raise over_budget(op, target, coalesce, dtype, idx_dtype, cols, layout, tile_rows, given, budget,
                          dyn_ubuf_size)
    return TileView(tile_rows, cols, layout)


def full_tiles(op: str, target: str, coalesce, dtype, idx_dtype, rows: int, cols: int, tile_rows=None,
               dyn_ubuf_size=None) -> FullTiles:
    """The tiles of one full tile of a whole-array call (what the sequential targets run each tile as, and what
    ``constraints.validated_*`` validate) and its tile view (:func:`tile_view`, for the same arguments).

    TypeError for a ``tile_rows`` that is not a positive int; ConstraintError as :func:`tile_view` raises it."""
    view = tile_view(op, target, coalesce, dtype, idx_dtype, rows, cols, check_tile_rows(tile_rows),
                     ub.budget(op, target, dyn_ubuf_size), dyn_ubuf_size)
    return FullTiles(data_tile(dtype, view.tile_rows, view.cols, view.layout),
                     index_tile(coalesce, view.tile_rows, view.cols, view.layout, idx_dtype), view.tile_rows,
                     view.cols)


def over_budget(op, target, coalesce, dtype, idx_dtype, cols, layout, tile_rows, given, budget,
                dyn_ubuf_size) -> ConstraintError:
    """The ConstraintError of whole-array tiles of ``tile_rows`` rows over the UB ``budget``: the working set as the
    tile op states it (:func:`simt_pto.ub.check_working_set`), then only what would make the call fit: a smaller
    ``tile_rows`` (when the caller named one and a tile of one row fits), an A5 ``dyn_ubuf_size`` (when the tiles
    fit the most A5 can declare), or that neither can (a Row tile holds whole table rows)."""
    d = _dt.resolve(dtype)
    nbytes = tile_bytes(coalesce, cols, d, layout)  # grows with the rows
    r, c = padded_shape(tile_rows, cols, d.itemsize, layout)
    ir, ic = index_shape(coalesce, tile_rows, cols, layout)
    name = "dst" if op == "MGATHER" else "src"
    parts = (f"{name} {r}x{c} {d} = {r * c * d.itemsize} B + idx {ir}x{ic} {_dt.resolve(idx_dtype)} = "
             f"{ir * ic * INDEX_ITEMSIZE} B = {nbytes(tile_rows)} B")
    how = ("the 192 KB A2/A3 UB" if target == "a2a3" else
           "the 128 KB safe A5 working set without dyn_ubuf_size" if not dyn_ubuf_size else
           f"dyn_ubuf_size = {dyn_ubuf_size} B")
    most_ub = ub.A5_MAX_DYN_UBUF_BYTES if target == "a5" else budget

    def most_rows(limit):  # the most rows (up to tile_rows) whose tiles fit ``limit``: nbytes grows with the rows
        fit, over = 1, tile_rows + 1
        while over - fit > 1:
            mid = (fit + over) // 2
            fit, over = (mid, over) if nbytes(mid) <= limit else (fit, mid)
        return fit

    fits = []
    if given and nbytes(1) <= budget:
        fits.append(f"tile_rows <= {most_rows(budget)} (or tile_rows unset)")
    if target == "a5" and nbytes(tile_rows) <= most_ub:
        fits.append(f"dyn_ubuf_size >= {nbytes(tile_rows)} B (A5 declares up to {most_ub} B)")
    elif target == "a5" and nbytes(1) <= most_ub < nbytes(tile_rows) and nbytes(1) > budget:
        fewer = most_rows(most_ub)
        fits.append(f"tile_rows <= {fewer} and dyn_ubuf_size >= {nbytes(fewer)} B (A5 declares up to {most_ub} B)")
    if fits:
        hint = "it fits with " + ", or with ".join(fits)
    else:  # one row's tiles are over the most UB the target gives: a Row tile holds whole table rows
        hint = (f"no tile_rows or dyn_ubuf_size fits it: a tile holds whole rows, and one row of {cols} {d} with its "
                f"index takes {nbytes(1)} B, over the {most_ub} B a tile may use on {target}")
    return ConstraintError(op, target, "UB working set within budget", f"working set {parts} exceeds {how}; {hint}")


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


__all__ = ["FullTiles", "TileView", "data_tile",
           "default_tile_rows", "elem_tile_cols", "fit_tile_rows", "full_tiles", "index_shape", "index_tile", "over_budget", "padded_shape",
           "round_up", "tile_bytes", "tile_plan", "tile_starts", "tile_view", "weightless", "whole_array_layout"]
