"""MGATHER GM -> L1: the checks and the plan of a gather into a ``TileType::Mat`` (L1 / cube) NZ tile.

Implements MGATHER.md, "GM → L1 Gather (TileType::Mat destination)", "Constraints
(MGatherCheckGm2L1, A2/A3 and A5)" and "A5 only — SIMT executor for Elem GM → L1
(GatherExec::Simt)". :func:`validated_mgather_l1` is reached from :func:`simt_pto.constraints.validated_mgather`
when ``dst.loc == MAT`` (the CPU simulator has no L1: ``validated_mgather`` refuses it there). Every rule
is checked before anything is written; a violation raises :class:`ConstraintError` naming the rule,
the target and the values. L1 tiles live in L1, not UB, so there is no UB budget check.

How the operands are read (the hardware's pointer arithmetic, written as a reading of the tensors):

* **Row index**: ``idx[r]`` is element ``r`` of the index tensor's memory (``idxPtr[r]``), for
  ``r < validRows``. The tensor must be packed (its strides the row-major packed strides of its
  shape) and hold at least ``validRows`` elements: ``Shape<1, 1, 1, 1, R>`` as in the spec's example,
  or an ``[R, 1]`` column.
* **Elem index**: ``idx[r, c]`` is at ``r * Stride[3] + c`` (``idxRowStride = GetStride(DIM_3)``),
  for ``r < validRows``, ``c < validCols``: the spec's ``IdxShape<1, 1, 1, R, C>``,
  ``IdxStride<..., C, 1>``. So ``Shape[3] >= validRows``, ``Shape[4] >= validCols`` and
  ``Stride[4] == 1``; dims 0..2 are not walked. A flat ``R * C`` index vector is refused for
  ``validRows > 1``: pass the index as a 2-D ``[R, C]`` array.
* **Row table**: ``tableRows = prod(Shape[0..3])``, row ``i`` starts at ``i * Stride[3]``
  (``tableRowStride = GetStride(DIM_3)``); the nd2nz copy moves ``validCols`` contiguous elements
  (``Stride[4] == 1``, ``validCols <= Shape[4]``) into NZ row ``r``. Columns ``>= validCols`` and rows
  ``>= validRows`` of the L1 tile keep their contents, except that ``GatherOOB::Zero`` pre-zeros the
  whole tile once (``pto_create_cbuf_matrix``) and skips the OOB rows.
* **Elem table**: flat, ``tableSize = prod(Shape[0..4])``, element ``i`` at offset ``i``.
* **Scratch** (Elem only): the first ``Rows * Cols`` elements of its memory are the NZ staging buffer
  (pre-zeroed, then ``scratch[(c // kC0) * (Rows * kC0) + r * kC0 + c % kC0] = table[slot(idx[r, c])]``),
  then copied in one piece onto the whole L1 tile. The buffer keeps those bytes afterwards (it is
  user-visible GM); elements beyond ``Rows * Cols`` are not touched.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import dtypes as _dt
from . import aliasing, nz
from .plan import Plan, check_oob
from .enums import Coalesce, GatherExec, Layout, TileType
from .errors import ConstraintError
from .tensor import GlobalTensor
from .tile import Tile
from .policy import index_rule

OP = "MGATHER"
L1_TARGETS = ("a2a3", "a5")
"""The targets with a GM -> L1 path (the CPU simulator has no L1)."""
ROW_MAX_ITEMSIZE = 4
"""Row mode: the nd2nz engine handles b8 / b16 / b32 elements only (``sizeof(T) <= 4``)."""


@dataclass
class L1Plan(Plan):
    """A validated GM -> L1 MGATHER. ``tile`` is the MAT destination, ``idx`` the GM index tensor,
    ``scratch`` the GM staging tensor (Elem only), ``capacity`` tableRows (Row) / tableSize (Elem),
    ``row_stride`` tableRowStride (Row) and ``idx_step`` the index row stride (Elem: ``Stride[3]``;
    Row: 1, the indices are contiguous)."""

    @property
    def kc0(self) -> int:
        return nz.c0(self.dtype.itemsize)

    @property
    def tile_elems(self) -> int:
        """``Rows * Cols``: the padded NZ tile, the scratch elements the Elem path writes."""
        return self.tile.rows * self.tile.cols

    def index_offsets(self) -> np.ndarray:
        """Memory offset of every index the op reads: ``(rows,)`` for Row, ``(rows, cols)`` for Elem."""
        if self.coalesce == Coalesce.ROW:
            return np.arange(self.rows, dtype=np.int64)
        r = np.arange(self.rows, dtype=np.int64)[:, None]
        return r * self.idx_step + np.arange(self.cols, dtype=np.int64)[None, :]

    def index_bits(self, idx: GlobalTensor | None = None, tile: Tile | None = None) -> np.ndarray:
        """The indices the op reads after the uint32 cast (see the module docstring); ``idx``: another index tensor
        of this plan's kind and shape (``tile``, the destination, sets nothing here: the offsets are the plan's)."""
        idx = self.idx if idx is None else idx
        return idx.host_flat().view(np.uint32)[self.index_offsets()]


def _fail(target, rule, detail):
    raise ConstraintError(OP, target, rule, detail)


# -- the rules, one function each (the tests call some of them directly) --------------------------------

def check_row_itemsize(target: str, dtype: _dt.DType) -> None:
    """Row: ``sizeof(T) <= 4``. Every element dtype the targets accept is at most 4 bytes, so no call
    through the API can break it; the check stands for the spec's rule."""
    if dtype.itemsize > ROW_MAX_ITEMSIZE:
        _fail(target, "Row: sizeof(T) <= 4 (the nd2nz engine handles b8 / b16 / b32)",
              f"dst dtype {dtype} is {dtype.itemsize} bytes")


def check_nz_destination(target: str, tile) -> None:
    """``TileDst::Loc == Mat``, NZ form, ``Cols % kC0 == 0``, ``Rows % 16 == 0``."""
    if tile.loc != TileType.MAT:
        _fail(target, "TileDst::Loc == TileType::Mat", f"dst is {tile.loc.name}")
    if not tile.is_nz or tile.fractal != nz.FRACTAL_BYTES:
        _fail(target, "dst NZ form: BLayout::ColMajor + SLayout::RowMajor + SFractalSize == 512",
              f"dst is BLayout {tile.blayout.name} + SLayout {tile.slayout.name}, fractal {tile.fractal}")
    kc0 = nz.c0(tile.dtype.itemsize)
    if tile.cols % kc0:
        _fail(target, "TileDst::Cols % (C0_SIZE_BYTE / sizeof(T)) == 0",
              f"dst Cols = {tile.cols}, kC0 = {kc0} for {tile.dtype}")
    if tile.rows % nz.FRACTAL_NZ_ROW:
        _fail(target, "TileDst::Rows % FRACTAL_NZ_ROW (16) == 0", f"dst Rows = {tile.rows}")


def _check_operand_types(target, dst, table, idx, scratch, coalesce, exec_):
    if not isinstance(table, GlobalTensor):
        raise TypeError(f"{OP}: table must be a GlobalTensor, got {type(table).__name__}")
    if isinstance(idx, Tile):
        _fail(target, "GM -> L1: idx must be a GM GlobalTensor of int32_t / uint32_t",
              "idx is a UB Tile; the index is read by the cube core (AIC) that issues the L1 transfer, and on "
              "A5 the AIC cannot read the AIV's UB, so a UB index tile is not portable: pass the indices as "
              "a GlobalTensor")
    if not isinstance(idx, GlobalTensor):
        raise TypeError(f"{OP}: idx must be a GlobalTensor for a MAT destination, got {type(idx).__name__}")
    if scratch is not None and not isinstance(scratch, GlobalTensor):
        raise TypeError(f"{OP}: scratch must be a GlobalTensor, got {type(scratch).__name__}")
    if exec_ == GatherExec.SIMT and target != "a5":
        _fail(target, "GatherExec::Simt is A5 only (A2/A3 has no SIMT engine)", f"exec=SIMT on {target}")
    if exec_ == GatherExec.SIMT and coalesce != Coalesce.ELEM:
        _fail(target, "the GM -> L1 SIMT executor is only supported for Coalesce::Elem",
              f"exec=SIMT with coalesce={coalesce.name}")
    if coalesce == Coalesce.ROW and scratch is not None:
        _fail(target, "Row GM -> L1 is the 3-operand form (no GM scratch)",
              "scratch given with coalesce=ROW; only Elem stages through a scratch tensor")
    if coalesce == Coalesce.ELEM and scratch is None:
        _fail(target, "Elem GM -> L1 is the 4-operand form: a GM scratch of at least Rows * Cols elements",
              f"no scratch given; pass a GlobalTensor of >= {dst.rows * dst.cols} {dst.dtype} elements")


def _check_dtypes(target, dst, table, idx, scratch, coalesce):
    allowed = _dt.ELEMENT_DTYPES[target]
    if dst.dtype not in allowed:
        _fail(target, "GM -> L1 dtypes", f"dst dtype {dst.dtype} is not supported on {target}; "
                                          f"supported: {_dt.names(allowed)}")
    if coalesce == Coalesce.ROW:
        check_row_itemsize(target, dst.dtype)
    if idx.dtype not in _dt.INDEX_DTYPES:
        _fail(target, "idx is a GM GlobalTensor of int32_t / uint32_t", f"idx dtype is {idx.dtype}")
    if table.dtype != dst.dtype:
        _fail(target, "GlobalTable::DType == __gm__ T", f"table dtype {table.dtype} does not match dst dtype {dst.dtype}")
    if table.layout != Layout.ND:
        _fail(target, "GlobalTable::layout == Layout::ND", f"table layout is {table.layout.name}")
    if scratch is not None and scratch.dtype != dst.dtype:
        _fail(target, "GlobalScratch::DType == __gm__ T",
              f"scratch dtype {scratch.dtype} does not match dst dtype {dst.dtype}")


def _check_index(target, idx, coalesce, rows, cols) -> int:
    """The index tensor holds what the op reads; returns the Elem index row stride (Row: 1)."""
    if coalesce == Coalesce.ROW:
        if idx.stride != nz.packed_strides(idx.shape):
            _fail(target, "Row GM -> L1: the indices are contiguous (idxPtr[r]); a packed index tensor",
                  f"idx shape {idx.shape} has stride {idx.stride}, packed would be {nz.packed_strides(idx.shape)}")
        if idx.table_size < rows:
            _fail(target, "Row GM -> L1: the index tensor holds validRows indices",
                  f"idx shape {idx.shape} holds {idx.table_size} indices, dst valid rows = {rows}")
        return 1
    if idx.stride[4] != 1:
        _fail(target, "Elem GM -> L1: idx[r, c] at r * Stride[3] + c (Stride[4] == 1)", f"idx stride {idx.stride}")
    if idx.shape[3] < rows or idx.shape[4] < cols:
        _fail(target, "Elem GM -> L1: the index tensor is [validRows, validCols] (Shape[3] >= validRows, "
                      "Shape[4] >= validCols), as IdxShape<1, 1, 1, R, C>",
              f"idx shape {idx.shape}, dst valid {rows}x{cols}; pass the indices as a 2-D [R, C] array")
    return idx.stride[3]


def _check_table(target, table, coalesce, cols) -> tuple[int, int]:
    """``(capacity, row_stride)``: Row ``(prod(Shape[0..3]), Stride[3])``, Elem ``(prod(Shape[0..4]), 0)``."""
    if coalesce == Coalesce.ELEM:
        size = table.table_size
        if size > table.size:
            _fail(target, "Elem: the flat table of tableSize = prod(Shape[0..4]) elements lies inside the memory",
                  f"tableSize {size} > {table.size} elements of memory")
        return size, 0
    rows = table.shape[0] * table.shape[1] * table.shape[2] * table.shape[3]
    stride = table.stride[3]
    if table.stride[4] != 1:
        _fail(target, "Row: the nd2nz copy reads a contiguous table row (Stride[4] == 1)", f"table stride {table.stride}")
    if cols > table.shape[4]:
        _fail(target, "Row: the dst valid columns fit the table row (ValidCol <= Shape[4])",
              f"dst valid cols {cols} > table Shape[4] = {table.shape[4]}")
    reach = (rows - 1) * stride + cols
    if reach > table.size:
        _fail(target, "Row: every table row (tableRows = prod(Shape[0..3]), tableRowStride = Stride[3]) "
                      "lies inside the memory",
              f"row {rows - 1} ends at element {reach - 1}, memory holds {table.size}")
    return rows, stride


def _check_scratch(target, scratch, tile):
    if not scratch.writeable:
        _fail(target, "the Elem path stages the gather in the scratch", "scratch is a read-only array")
    need = tile.rows * tile.cols
    if scratch.table_size < need or scratch.size < need:
        _fail(target, "scratch holds at least TileDst::Rows * TileDst::Cols elements",
              f"scratch shape {scratch.shape} ({scratch.table_size} elements, {scratch.size} in memory) < "
              f"Rows * Cols = {tile.rows} * {tile.cols} = {need}")


def validated_mgather_l1(target, dst, table, idx, coalesce, oob, exec_, scratch, strict) -> L1Plan:
    """Validate a GM -> L1 MGATHER (every MGatherCheckGm2L1 rule for ``target``) and resolve it.

    Raises :class:`ConstraintError` for a broken rule and :class:`~simt_pto.OutOfBoundsError` for an
    out-of-range index under ``GatherOOB::Undefined`` (unless ``strict=False``), before any write.
    """
    if target not in L1_TARGETS:
        _fail(target, "the GM -> L1 path exists on A2/A3 and A5 only", f"dst is MAT on {target}")
    _check_operand_types(target, dst, table, idx, scratch, coalesce, exec_)
    check_nz_destination(target, dst)
    _check_dtypes(target, dst, table, idx, scratch, coalesce)
    rows, cols = dst.valid
    idx_step = _check_index(target, idx, coalesce, rows, cols)
    capacity, row_stride = _check_table(target, table, coalesce, cols)
    if scratch is not None:
        _check_scratch(target, scratch, dst)
    aliasing.check_disjoint(OP, target, {"dst": dst.data, "scratch": None if scratch is None else scratch.array},
                            {"table": table.array, "idx": idx.array})
    plan = L1Plan(OP, target, coalesce, oob, index_rule(oob, strict), dst.dtype, dst, idx, table, capacity,
                  row_stride, idx_step, exec=exec_, scratch=scratch, strict=strict)
    check_oob(plan)
    return plan
