"""Every rule of the constraint layer, per target: one call that fires it and one just inside it.

MGATHER.md / MSCATTER.md "Tile Constraints (CPU / A2/A3 / A5)", "Mode Resolution", "Atomic Type Support"
and "Layout Support", as implemented by simt_pto.constraints, simt_pto.tile and simt_pto.tensor
(the UB budget is in test_ub.py). On ``cpu`` a passing call runs the golden; on ``a2a3`` and ``a5`` it
is validated with ``constraints.validated_mgather`` / ``validated_mscatter`` only (their kernels are not needed).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import simt_pto as pto
from simt_pto import constraints
from simt_pto.call import mgather_policy, mscatter_policy
from conftest import ALL_DTYPE_NAMES, SPEC_ELEMENT_DTYPES, min_cols

TARGETS = ("cpu", "a2a3", "a5")


# -- calling the op: run on cpu, plan only elsewhere ---------------------------------------------------------

def gather(target, dst, table, idx, coalesce="row", oob="undefined", exec="scalar", scratch=None, strict=True,
           dyn_ubuf_size=None):
    if target == "cpu":
        return pto.mgather(dst, table, idx, coalesce=coalesce, oob=oob, target="cpu", exec=exec, scratch=scratch,
                           strict=strict, dyn_ubuf_size=dyn_ubuf_size)
    return constraints.validated_mgather(mgather_policy(coalesce, oob, target, exec, strict, dyn_ubuf_size), dst,
                                         table, idx, scratch)


def scatter(target, table, src, idx, coalesce="row", atomic="none", oob="undefined", conflict="last", strict=True,
            dyn_ubuf_size=None):
    if target == "cpu":
        return pto.mscatter(table, src, idx, coalesce=coalesce, atomic=atomic, oob=oob, conflict=conflict,
                            target="cpu", strict=strict, dyn_ubuf_size=dyn_ubuf_size)
    return constraints.validated_mscatter(mscatter_policy(coalesce, atomic, oob, conflict, target, strict, dyn_ubuf_size),
                                          table, src, idx)


def call(op, target, kw):
    kw = dict(kw)
    if op == "MGATHER":
        return gather(target, **kw)
    kw["src"] = kw.pop("dst")
    return scatter(target, **kw)


# -- building blocks -------------------------------------------------------------------------------------------

def tile(dtype="float32", rows=4, cols=8, **kw):
    return pto.Tile(dtype, rows, cols, **kw)


def nz_tile(dtype="float32", rows=16, cols=16, **kw):
    return pto.Tile(dtype, rows, cols, blayout="col_major", slayout="row_major", **kw)


def idx_1r(values=(3, 0, 5, 3), blayout="row_major", dtype=np.int32):
    """A [1, R] index tile (RowMajor padded to 1 x 8, or ColMajor padded to 8 x 8)."""
    a = np.array([values], dtype=dtype)
    return pto.Tile.from_array(a, 1, 8) if blayout == "row_major" else pto.Tile.from_array(a, 8, 8,
                                                                                           blayout="col_major")


def idx_r1(values=(3, 0, 5, 3), blayout="col_major"):
    """An [R, 1] index tile (ColMajor padded to 8 x 1, or RowMajor padded to R x 8)."""
    a = np.array(values, dtype=np.int32)[:, None]
    return pto.Tile.from_array(a, 8, 1, blayout="col_major") if blayout == "col_major" else pto.Tile.from_array(
        a, len(values), 8)


def idx_elem(rows=4, cols=8, high=48, valid=None, blayout="row_major", slayout="none_box", pad_rows=None):
    """An Elem index tile holding ``(7 * k) % high`` (duplicates included), padded as the layout needs."""
    a = ((np.arange(rows * cols) * 7) % high).astype(np.int32).reshape(rows, cols)
    prows = pad_rows or (max(rows, 8) if blayout == "col_major" else rows)
    if slayout == "row_major":
        prows = 16
    return pto.Tile.from_array(a, prows, cols, blayout=blayout, slayout=slayout, valid=valid)


def table(rows=6, cols=8, dtype="float32", **kw):
    return pto.GlobalTensor(np.zeros((rows, cols), dtype=pto.dtypes.resolve(dtype).numpy), **kw)


def nz_table(lrows=16, lcols=16, dtype="float32"):
    return pto.GlobalTensor.nz_from_matrix(np.zeros((lrows, lcols), dtype=pto.dtypes.resolve(dtype).numpy))


def row_call(**over):
    kw = dict(dst=tile(), table=table(), idx=idx_1r(), coalesce="row")
    kw.update(over)
    return kw


def elem_call(**over):
    kw = dict(dst=tile(), table=table(), idx=idx_elem(), coalesce="elem")
    kw.update(over)
    return kw


def any_row_call(op, target, **over):
    """A valid Row call; on cpu MSCATTER walks element-wise, so its index has the source's valid shape."""
    if op == "MSCATTER" and target == "cpu" and "idx" not in over:
        over["idx"] = idx_elem()
    return row_call(**over)


def row_index_of(op, target, dtype):
    """The index tile of a valid Row call, in ``dtype`` (element-wise shaped for MSCATTER on cpu)."""
    values = idx_elem().valid_numpy() if (op == "MSCATTER" and target == "cpu") else np.array([[3, 0, 5, 3]])
    return pto.Tile.from_array(values.astype(dtype), values.shape[0], min_cols(dtype))


# -- the rule table --------------------------------------------------------------------------------------------

@dataclass
class Rule:
    id: str
    ops: tuple
    targets: tuple
    rule: Callable           # (op, target) -> the rule text
    fire: Callable           # (op, target) -> call kwargs breaking the rule
    inside: Callable         # (op, target) -> call kwargs just inside it


BOTH = ("MGATHER", "MSCATTER")
G, S = ("MGATHER",), ("MSCATTER",)


def _n(op):
    return "dst" if op == "MGATHER" else "src"


def read_only_table():
    array = np.zeros((6, 8), np.float32)
    array.flags.writeable = False
    return pto.GlobalTensor(array)


def table_shrunk_to(rows):
    """A 6 x 8 table's GlobalTensor whose array was then shrunk in place to ``rows`` rows (``refcheck=False``)."""
    array = np.zeros((6, 8), np.float32)
    tensor = pto.GlobalTensor(array)
    array.resize((rows, 8), refcheck=False)
    return tensor


RULES = [
    Rule("memory-shrunk-in-place", BOTH, TARGETS,
         lambda op, t: "shape / stride stay inside the memory",
         lambda op, t: any_row_call(op, t, table=table_shrunk_to(5)),
         lambda op, t: any_row_call(op, t, table=table_shrunk_to(6))),
    Rule("read-only-table", S, TARGETS,
         lambda op, t: "the table is written in place",
         lambda op, t: any_row_call(op, t, table=read_only_table()),
         lambda op, t: any_row_call(op, t)),
    Rule("idx-gm-tensor", G, TARGETS,
         lambda op, t: "indexes must be a UB vector tile (a GM index tensor is for MAT destinations only)",
         lambda op, t: row_call(idx=pto.GlobalTensor(np.zeros(8, np.int32))),
         lambda op, t: row_call()),
    Rule("idx-gm-tensor", S, TARGETS,
         lambda op, t: "indexes must be a UB vector tile",
         lambda op, t: any_row_call(op, t, idx=pto.GlobalTensor(np.zeros(8, np.int32))),
         lambda op, t: any_row_call(op, t)),
    Rule("exec-simt-on-vec", G, TARGETS,
         lambda op, t: "exec / scratch apply to the GM -> L1 (MAT destination) path only",
         lambda op, t: row_call(exec="simt"),
         lambda op, t: row_call(exec="scalar")),
    Rule("scratch-on-vec", G, TARGETS,
         lambda op, t: "exec / scratch apply to the GM -> L1 (MAT destination) path only",
         lambda op, t: row_call(scratch=table()),
         lambda op, t: row_call(scratch=None)),
    Rule("index-dtype", BOTH, TARGETS,
         lambda op, t: "Tile Constraints: index dtype",
         lambda op, t: any_row_call(op, t, idx=row_index_of(op, t, np.int16)),
         lambda op, t: any_row_call(op, t, idx=row_index_of(op, t, np.uint32))),
    Rule("table-dtype-size", BOTH, ("cpu",),
         lambda op, t: "sizeof(Tile::DType) == sizeof(GlobalData::DType)",
         lambda op, t: any_row_call(op, t, table=table(dtype="float16", cols=16)),
         lambda op, t: any_row_call(op, t, table=table(dtype="int32"))),
    Rule("table-dtype-equal", BOTH, ("a2a3", "a5"),
         lambda op, t: "GlobalTable::DType == __gm__ T",
         lambda op, t: any_row_call(op, t, table=table(dtype="int32")),
         lambda op, t: any_row_call(op, t, table=table(dtype="float32"))),
    Rule("src-vec", S, TARGETS,
         lambda op, t: "src must be a vector tile (TileType::Vec)",
         lambda op, t: any_row_call(op, t, dst=tile(loc="mat")),
         lambda op, t: any_row_call(op, t, dst=tile(loc="vec"))),
    Rule("cpu-dst-vec", G, ("cpu",),   # the GM -> L1 (MAT destination) path exists on A2/A3 and A5 only
         lambda op, t: "dst must be a vector tile (TileType::Vec)",
         lambda op, t: row_call(dst=nz_tile(valid=(4, 16), loc="mat"), idx=idx_1r()),
         lambda op, t: row_call(dst=tile(rows=4, cols=16, loc="vec"), table=table(6, 16))),
    Rule("idx-vec", BOTH, TARGETS,
         lambda op, t: "indexes must be a vector tile (TileType::Vec)",
         lambda op, t: elem_call(idx=pto.Tile.from_array(idx_elem().valid_numpy(), loc="mat")),
         lambda op, t: elem_call(idx=pto.Tile.from_array(idx_elem().valid_numpy(), loc="vec"))),
    Rule("table-dn", BOTH, TARGETS,
         lambda op, t: "GlobalTable layout ND (or NZ on a2a3)",
         lambda op, t: elem_call(table=table(layout="dn")),
         lambda op, t: elem_call(table=table(layout="nd"))),
    # CPU layout rules
    Rule("cpu-tile-rowmajor", BOTH, ("cpu",),
         lambda op, t: f"{_n(op)} RowMajor + NoneBox",
         lambda op, t: elem_call(dst=tile(rows=8, blayout="col_major", valid=(4, 8))),
         lambda op, t: elem_call(dst=tile(rows=8, blayout="row_major", valid=(4, 8)))),
    Rule("cpu-tile-not-nz", BOTH, ("cpu",),
         lambda op, t: f"{_n(op)} RowMajor + NoneBox",
         lambda op, t: elem_call(dst=nz_tile(valid=(4, 8))),
         lambda op, t: elem_call(dst=tile(rows=16, cols=16, valid=(4, 8)))),
    Rule("cpu-idx-rowmajor", BOTH, ("cpu",),
         lambda op, t: "indexes RowMajor + NoneBox",
         lambda op, t: elem_call(idx=idx_elem(blayout="col_major")),
         lambda op, t: elem_call(idx=idx_elem(pad_rows=8))),
    Rule("cpu-table-nd", BOTH, ("cpu",),
         lambda op, t: "src/dst must use Layout::ND",
         lambda op, t: elem_call(table=nz_table(16, 8)),
         lambda op, t: elem_call(table=table(16, 8))),
    Rule("cpu-table-shape", BOTH, ("cpu",),
         lambda op, t: "static shape Shape<1, 1, 1, TableRows, RowWidth>",
         lambda op, t: elem_call(table=pto.GlobalTensor(np.zeros((2, 6, 8), np.float32))),
         lambda op, t: elem_call(table=pto.GlobalTensor(np.zeros((1, 12, 8), np.float32)))),
    # A2/A3 layout rules
    Rule("a2a3-idx-rowmajor", BOTH, ("a2a3",),
         lambda op, t: "index tile BLayout::RowMajor + SLayout::NoneBox",
         lambda op, t: elem_call(idx=idx_elem(blayout="col_major")),
         lambda op, t: elem_call(idx=idx_elem(pad_rows=8))),
    Rule("a2a3-nd-pairs-rowmajor", BOTH, ("a2a3",),
         lambda op, t: f"ND table pairs with a RowMajor + NoneBox {_n(op)}",
         lambda op, t: elem_call(dst=tile(rows=8, blayout="col_major", valid=(4, 8))),
         lambda op, t: elem_call(dst=tile(rows=8, valid=(4, 8)))),
    Rule("a2a3-nd-pairs-not-nz", BOTH, ("a2a3",),
         lambda op, t: f"ND table pairs with a RowMajor + NoneBox {_n(op)}",
         lambda op, t: elem_call(dst=nz_tile(valid=(4, 8))),
         lambda op, t: elem_call(dst=nz_tile(valid=(4, 8)), table=nz_table(16, 16))),
    Rule("a2a3-nz-pairs-nz", BOTH, ("a2a3",),
         lambda op, t: f"NZ table pairs with an NZ {_n(op)} (ColMajor + SLayout RowMajor + 512 B)",
         lambda op, t: row_call(dst=tile(rows=4, cols=16), table=nz_table(16, 16)),
         lambda op, t: row_call(dst=nz_tile(valid=(4, 16)), table=nz_table(16, 16))),
    Rule("a2a3-nz-table-c0", BOTH, ("a2a3",),
         lambda op, t: "NZ table: staticShape[3] == 16 and staticShape[4] == 32 / sizeof(T)",
         lambda op, t: row_call(dst=nz_tile(valid=(4, 16)),
                                table=pto.GlobalTensor(np.zeros(256, np.float32), shape=(1, 4, 1, 16, 4),
                                                       layout="nz")),
         lambda op, t: row_call(dst=nz_tile(valid=(4, 16)),
                                table=pto.GlobalTensor(np.zeros(256, np.float32), shape=(1, 2, 1, 16, 8),
                                                       layout="nz"))),
    Rule("a2a3-nz-table-16-rows", BOTH, ("a2a3",),
         lambda op, t: "NZ table: staticShape[3] == 16 and staticShape[4] == 32 / sizeof(T)",
         lambda op, t: row_call(dst=nz_tile(valid=(4, 16)),
                                table=pto.GlobalTensor(np.zeros(256, np.float32), shape=(1, 2, 2, 8, 8),
                                                       layout="nz")),
         lambda op, t: row_call(dst=nz_tile(valid=(4, 16)),
                                table=pto.GlobalTensor(np.zeros(256, np.float32), shape=(1, 2, 1, 16, 8),
                                                       layout="nz"))),
    # A5 layout rules
    Rule("a5-tile-not-nz", BOTH, ("a5",),
         lambda op, t: f"{_n(op)} RowMajor or ColMajor with SLayout::NoneBox (no NZ on A5)",
         lambda op, t: elem_call(dst=nz_tile(valid=(4, 8))),
         lambda op, t: elem_call(dst=tile(rows=8, cols=8, blayout="col_major", valid=(4, 8)))),
    Rule("a5-idx-not-nz", BOTH, ("a5",),
         lambda op, t: "index tile with SLayout::NoneBox",
         lambda op, t: elem_call(idx=idx_elem(slayout="row_major", blayout="col_major")),
         lambda op, t: elem_call(idx=idx_elem(blayout="col_major"))),
    Rule("a5-table-nd", BOTH, ("a5",),
         lambda op, t: "GM table Layout::ND only (no NZ block-stride translation on A5)",
         lambda op, t: elem_call(table=nz_table(16, 8)),
         lambda op, t: elem_call(table=table(16, 8))),
    # Mode Resolution
    Rule("elem-valid-shape", BOTH, TARGETS,
         lambda op, t: f"Elem: Idx.ValidRow == {_n(op)}.ValidRow && Idx.ValidCol == {_n(op)}.ValidCol",
         lambda op, t: elem_call(idx=idx_elem(valid=(4, 7))),
         lambda op, t: elem_call(idx=idx_elem(valid=(4, 8)))),
    Rule("elem-valid-rows", BOTH, TARGETS,
         lambda op, t: f"Elem: Idx.ValidRow == {_n(op)}.ValidRow && Idx.ValidCol == {_n(op)}.ValidCol",
         lambda op, t: elem_call(dst=tile(valid=(3, 8))),
         lambda op, t: elem_call(dst=tile(valid=(3, 8)), idx=idx_elem(valid=(3, 8)))),
    Rule("cpu-scatter-row-is-elementwise", S, ("cpu",),
         lambda op, t: ("the CPU simulator's MSCATTER always walks element-wise, so "
                        "Elem: Idx.ValidRow == src.ValidRow && Idx.ValidCol == src.ValidCol"),
         lambda op, t: row_call(idx=idx_1r()),
         lambda op, t: row_call(idx=idx_elem())),
    Rule("a2a3-row-1xR", BOTH, ("a2a3",),
         lambda op, t: f"Row: Idx.ValidRow == 1 && Idx.ValidCol == {_n(op)}.ValidRow",
         lambda op, t: row_call(idx=idx_r1(blayout="row_major")),
         lambda op, t: row_call(idx=idx_1r())),
    Rule("a2a3-row-length", BOTH, ("a2a3",),
         lambda op, t: f"Row: Idx.ValidRow == 1 && Idx.ValidCol == {_n(op)}.ValidRow",
         lambda op, t: row_call(idx=idx_1r((3, 0, 5))),
         lambda op, t: row_call(idx=idx_1r((3, 0, 5)), dst=tile(valid=(3, 8)))),
    Rule("a5-row-1xR-rowmajor", BOTH, ("a5",),
         lambda op, t: "Row: a [1, R] index tile is BLayout::RowMajor",
         lambda op, t: row_call(idx=idx_1r(blayout="col_major")),
         lambda op, t: row_call(idx=idx_1r(blayout="row_major"))),
    Rule("a5-row-1x1-any-layout", BOTH, ("a5",),
         lambda op, t: "Row: a [1, R] index tile is BLayout::RowMajor",
         lambda op, t: row_call(idx=idx_1r((3, 0), blayout="col_major"), dst=tile(valid=(2, 8))),
         lambda op, t: row_call(idx=idx_1r((3,), blayout="col_major"), dst=tile(valid=(1, 8)))),
    Rule("a5-row-Rx1-colmajor", BOTH, ("a5",),
         lambda op, t: "Row: an [R, 1] index tile is BLayout::ColMajor",
         lambda op, t: row_call(idx=idx_r1(blayout="row_major")),
         lambda op, t: row_call(idx=idx_r1(blayout="col_major"))),
    Rule("row-index-shape", G, ("cpu", "a5"),
         lambda op, t: (f"Row: (Idx.ValidRow == 1 && Idx.ValidCol == {_n(op)}.ValidRow) || "
                        f"(Idx.ValidRow == {_n(op)}.ValidRow && Idx.ValidCol == 1)"),
         lambda op, t: row_call(idx=idx_1r((3, 0, 5))),
         lambda op, t: row_call(idx=idx_1r((3, 0, 5, 3)))),
    Rule("row-index-shape", S, ("a5",),
         lambda op, t: (f"Row: (Idx.ValidRow == 1 && Idx.ValidCol == {_n(op)}.ValidRow) || "
                        f"(Idx.ValidRow == {_n(op)}.ValidRow && Idx.ValidCol == 1)"),
         lambda op, t: row_call(idx=idx_r1((3, 0, 5, 3, 1))),
         lambda op, t: row_call(idx=idx_r1((3, 0, 5, 3)))),
    Rule("cpu-row-Rx1-rowmajor", G, ("cpu",),
         lambda op, t: ("Row: (Idx.ValidRow == 1 && Idx.ValidCol == dst.ValidRow) || "
                        "(Idx.ValidRow == dst.ValidRow && Idx.ValidCol == 1)"),
         lambda op, t: row_call(idx=idx_r1((3, 0, 5), blayout="row_major")),
         lambda op, t: row_call(idx=idx_r1((3, 0, 5, 3), blayout="row_major"))),
    # Table geometry
    Rule("a2a3-nz-row-width", BOTH, ("a2a3",),
         lambda op, t: "Row: the tile's valid columns fit the NZ table's logical row",
         lambda op, t: row_call(dst=nz_tile(valid=(4, 16)), table=nz_table(16, 8)),
         lambda op, t: row_call(dst=nz_tile(valid=(4, 8)), table=nz_table(16, 8))),
    Rule("a2a3-nz-row-padded-cols", BOTH, ("a2a3",),
         lambda op, t: "Row NZ: the tile's padded Cols hold a whole logical row",
         lambda op, t: row_call(dst=nz_tile(cols=8, valid=(4, 8)), table=nz_table(16, 16)),
         lambda op, t: row_call(dst=nz_tile(cols=16, valid=(4, 8)), table=nz_table(16, 16))),
    Rule("a2a3-nz-contiguous-c0", BOTH, ("a2a3",),
         lambda op, t: "NZ table: contiguous kC0 elements per 32 B burst (Stride[4] == 1)",
         lambda op, t: elem_call(dst=nz_tile(valid=(4, 8)), idx=idx_elem(),
                                 table=pto.GlobalTensor(np.zeros(2048, np.float32), shape=(1, 2, 1, 16, 8),
                                                        stride=(1, 256, 256, 16, 2), layout="nz")),
         lambda op, t: elem_call(dst=nz_tile(valid=(4, 8)), idx=idx_elem(),
                                 table=pto.GlobalTensor(np.zeros(2048, np.float32), shape=(1, 2, 1, 16, 8),
                                                        stride=(1, 256, 256, 16, 1), layout="nz"))),
    Rule("elem-table-in-memory", BOTH, TARGETS,
         lambda op, t: "Elem: the flat table of prod(Shape[0..4]) elements lies inside the memory",
         lambda op, t: elem_call(table=pto.GlobalTensor(np.zeros(48, np.float32), shape=(49,), stride=(0,))),
         lambda op, t: elem_call(table=pto.GlobalTensor(np.zeros(48, np.float32), shape=(48,), stride=(0,)))),
    Rule("cpu-scatter-row-table-in-memory", S, ("cpu",),
         lambda op, t: "Elem: the flat table of prod(Shape[0..4]) elements lies inside the memory",
         lambda op, t: row_call(idx=idx_elem(), table=pto.GlobalTensor(np.zeros(48, np.float32), shape=(49,),
                                                                        stride=(0,))),
         lambda op, t: row_call(idx=idx_elem(), table=pto.GlobalTensor(np.zeros(48, np.float32), shape=(48,),
                                                                        stride=(0,)))),
    Rule("a5-row-shape4-validcols", BOTH, ("a5",),
         lambda op, t: "A5 Row: GlobalTable::staticShape[4] == ValidCol (packed ND, row stride = validCols)",
         lambda op, t: row_call(dst=tile(valid=(4, 7)), table=table(6, 8)),
         lambda op, t: row_call(dst=tile(valid=(4, 7)), table=table(6, 7))),
    Rule("a5-row-no-padding", BOTH, ("a5",),
         lambda op, t: "A5 Row: no inter-row padding (Stride[3] == validCols, Stride[4] == 1)",
         lambda op, t: row_call(table=pto.GlobalTensor(np.zeros(60, np.float32), shape=(6, 8), stride=(9, 1))),
         lambda op, t: row_call(table=pto.GlobalTensor(np.zeros(60, np.float32), shape=(6, 8), stride=(8, 1)))),
    Rule("a5-row-unit-col-stride", BOTH, ("a5",),
         lambda op, t: "A5 Row: no inter-row padding (Stride[3] == validCols, Stride[4] == 1)",
         lambda op, t: row_call(table=pto.GlobalTensor(np.zeros(120, np.float32), shape=(6, 8), stride=(8, 2))),
         lambda op, t: row_call(table=pto.GlobalTensor(np.zeros(120, np.float32), shape=(6, 8), stride=(8, 1)))),
    Rule("a2a3-row-unit-col-stride", BOTH, ("a2a3",),
         lambda op, t: "ND table: contiguous rows (Stride[4] == 1)",
         lambda op, t: row_call(table=pto.GlobalTensor(np.zeros(200, np.float32), shape=(6, 8), stride=(16, 2))),
         lambda op, t: row_call(table=pto.GlobalTensor(np.zeros(60, np.float32), shape=(6, 8), stride=(10, 1)))),
    Rule("row-width-fits", G, ("cpu", "a2a3"),
         lambda op, t: "Row: the tile's valid columns fit the table row (ValidCol <= Shape[4])",
         lambda op, t: row_call(table=table(6, 7)),
         lambda op, t: row_call(table=table(6, 8))),
    Rule("row-width-fits", S, ("a2a3",),
         lambda op, t: "Row: the tile's valid columns fit the table row (ValidCol <= Shape[4])",
         lambda op, t: row_call(table=table(6, 7)),
         lambda op, t: row_call(table=table(6, 8))),
    Rule("cpu-row-in-memory", G, ("cpu",),
         lambda op, t: "Row: every table row lies inside the memory",
         lambda op, t: row_call(idx=idx_1r((2, 0, 1, 2)),
                                table=pto.GlobalTensor(np.zeros(12, np.float32), shape=(3, 8), stride=(2, 1))),
         lambda op, t: row_call(idx=idx_1r((2, 0, 1, 2)),
                                table=pto.GlobalTensor(np.zeros(24, np.float32), shape=(3, 8), stride=(8, 1)))),
    Rule("a2a3-row-in-memory", BOTH, ("a2a3",),
         lambda op, t: "Row: every table row lies inside the memory",
         lambda op, t: row_call(table=pto.GlobalTensor(np.zeros(24, np.float32), shape=(1, 1, 2, 3, 8),
                                                       stride=(48, 48, 0, 8, 1))),
         lambda op, t: row_call(table=pto.GlobalTensor(np.zeros(48, np.float32), shape=(1, 1, 2, 3, 8),
                                                       stride=(48, 48, 24, 8, 1)))),
    # MSCATTER: no ScatterConflict on A2/A3
    Rule("a2a3-no-conflict", S, ("a2a3",),
         lambda op, t: "A2/A3 has no ScatterConflict parameter (strictly sequential: last write wins)",
         lambda op, t: row_call(conflict="default"),
         lambda op, t: row_call(conflict="last")),
]

RULE_PARAMS = [pytest.param(r, op, t, id=f"{op}-{t}-{r.id}") for r in RULES for op in r.ops for t in r.targets]


@pytest.mark.parametrize("rule, op, target", RULE_PARAMS)
def test_rule_fires(rule, op, target):
    text = rule.rule(op, target)
    with pytest.raises(pto.ConstraintError, match=re.escape(f"(rule: {text})")) as info:
        call(op, target, rule.fire(op, target))
    err = info.value
    assert str(err).startswith(f"{op} on {target}: ")
    assert (err.op, err.target, err.rule) == (op, target, text)


@pytest.mark.parametrize("rule, op, target", RULE_PARAMS)
def test_rule_just_inside_passes(rule, op, target):
    result = call(op, target, rule.inside(op, target))
    if target == "cpu":  # the op ran: it returns its output (the destination tile or the table)
        assert isinstance(result, (pto.Tile, pto.GlobalTensor))
    else:
        assert isinstance(result, constraints.Plan) and result.target == target and result.op == op


def test_every_rule_text_of_the_constraint_layer_is_exercised():
    """Each rule text passed to ``_fail`` in constraints.py matches a rule of RULES (the two table-driven ones
    are covered by the dtype sweeps below); ``{...}`` placeholders match anything."""
    import inspect
    source = inspect.getsource(constraints)
    literals = re.findall(r'_fail\(op, target, f?"([^"]+)"', source)
    assert len(literals) >= 30
    covered = {r.rule(op, t) for r in RULES for op in r.ops for t in r.targets}
    covered |= {"Atomic Type Support", "Tile Constraints: supported data types"}
    for literal in literals:
        pattern = ".*".join(re.escape(part) for part in re.split(r"\{[^}]*\}", literal))
        assert any(re.match(pattern, text) for text in covered), literal


# -- capability tables: element dtypes and atomics, every (target, dtype) ---------------------------------------

def test_element_dtype_table_matches_the_spec():
    for target in TARGETS:
        assert sorted(d.name for d in pto.dtypes.ELEMENT_DTYPES[target]) == sorted(SPEC_ELEMENT_DTYPES[target])
    assert sorted(d.name for d in pto.dtypes.INDEX_DTYPES) == ["int32", "uint32"]


def elem_call_of(dtype, idx_dtype=np.int32):
    """A minimal valid Elem call for ``dtype``: a (1, min_cols) tile with valid (1, 2) and duplicate indices."""
    cols = min_cols(dtype)
    npd = pto.dtypes.resolve(dtype).numpy
    return dict(dst=pto.Tile(dtype, 1, cols, valid=(1, 2)),
                table=pto.GlobalTensor(np.zeros((4, cols), npd), dtype=dtype),
                idx=pto.Tile.from_array(np.array([[1, 1]], idx_dtype), 1, min_cols(idx_dtype)),
                coalesce="elem")


@pytest.mark.parametrize("op", BOTH)
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ALL_DTYPE_NAMES)
def test_element_dtypes(op, target, dtype):
    kw = elem_call_of(dtype)
    if dtype in SPEC_ELEMENT_DTYPES[target]:
        call(op, target, kw)
    else:
        with pytest.raises(pto.ConstraintError, match=re.escape(
                f"{op} on {target}: {_n(op)} dtype {dtype} is not supported on {target}; supported: ")
                + r".*\(rule: Tile Constraints: supported data types\)"):
            call(op, target, kw)


@pytest.mark.parametrize("op", BOTH)
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("idx_dtype", [d for d in ALL_DTYPE_NAMES if d not in ("hifloat8",)])
def test_index_dtypes(op, target, idx_dtype):
    kw = elem_call_of("float32", idx_dtype=pto.dtypes.resolve(idx_dtype).numpy)
    if idx_dtype in ("int32", "uint32"):
        call(op, target, kw)
    else:
        with pytest.raises(pto.ConstraintError,
                           match=re.escape(f"index dtype must be int32 or uint32, got {idx_dtype} "
                                           "(rule: Tile Constraints: index dtype)")):
            call(op, target, kw)


# MSCATTER.md, "Atomic Type Support", copied from the spec (CPU: the ABI contract column).
SPEC_ATOMICS = {
    ("cpu", "add"): {"int32", "uint32", "float32", "float16"},
    ("cpu", "max"): {"int32", "float32"},
    ("cpu", "min"): {"int32", "float32"},
    ("a2a3", "add"): {"int8", "int16", "int32", "float16", "bfloat16", "float32"},
    ("a2a3", "max"): set(),
    ("a2a3", "min"): set(),
    ("a5", "add"): {"int32", "uint32", "float32", "float16", "bfloat16"},
    ("a5", "max"): {"int32", "uint32", "float32"},
    ("a5", "min"): {"int32", "uint32", "float32"},
}


@pytest.mark.parametrize("target, atomic, dtype", [
    (t, a, d) for t in TARGETS for a in ("none", "add", "max", "min") for d in SPEC_ELEMENT_DTYPES[t]])
def test_atomic_type_support(target, atomic, dtype):
    kw = elem_call_of(dtype)
    kw["atomic"] = atomic
    allowed = SPEC_ELEMENT_DTYPES[target] if atomic == "none" else SPEC_ATOMICS[(target, atomic)]
    if dtype in allowed:
        call("MSCATTER", target, kw)
    else:
        listed = "no dtype" if not allowed else ".*"
        with pytest.raises(pto.ConstraintError, match=(
                re.escape(f"MSCATTER on {target}: atomic {atomic.capitalize()} on {target} supports ") + listed
                + re.escape(f"; got {dtype} (rule: Atomic Type Support)"))):
            call("MSCATTER", target, kw)


def test_atomic_table_matches_the_spec():
    for (target, atomic), names in SPEC_ATOMICS.items():
        op = pto.ScatterAtomicOp[atomic.upper()]
        assert {d.name for d in pto.dtypes.atomic_dtypes(target, op)} == names


@pytest.mark.parametrize("target", ["cpu", "a5"])
def test_default_conflict_is_accepted_off_a2a3(target):
    call("MSCATTER", target, elem_call(conflict="default"))


# -- Tile rules (simt_pto.tile) ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPE_NAMES)
@pytest.mark.parametrize("blayout", ["row_major", "col_major"])
def test_tile_32_byte_contiguous_dimension(dtype, blayout):
    n = min_cols(dtype)
    what = "Cols" if blayout == "row_major" else "Rows"
    shape = (lambda k: (3, k)) if blayout == "row_major" else (lambda k: (k, 3))
    pto.Tile(dtype, *shape(n), blayout=blayout)             # just inside: 32 bytes
    pto.Tile(dtype, *shape(3 * n), blayout=blayout)         # any multiple
    bad = n + n // 2 if n > 1 else None
    for k in filter(None, (n - 1, bad)):
        with pytest.raises(pto.ConstraintError, match=re.escape(
                f"padded {what} * sizeof(T) = {k} * {32 // n} = {k * 32 // n} bytes is not a multiple of 32 "
                f"(minimum {what} for {dtype}: {n}) (rule: 32-byte aligned contiguous dimension)")):
            pto.Tile(dtype, *shape(k), blayout=blayout)


@pytest.mark.parametrize("dtype", ["int8", "float16", "float32", "float8_e5m2"])
def test_nz_tile_rules(dtype):
    kc0 = min_cols(dtype)
    pto.Tile(dtype, 16, kc0, blayout="col_major", slayout="row_major")          # just inside
    rule = re.escape("(rule: NZ tile: Cols % kC0 == 0 and Rows % 16 == 0)")
    with pytest.raises(pto.ConstraintError, match=re.escape(f"kC0 = {kc0}; Cols % kC0 = 0, Rows % 16 = 8") + ".*"
                       + rule):
        pto.Tile(dtype, 8, kc0, blayout="col_major", slayout="row_major")
    with pytest.raises(pto.ConstraintError, match=re.escape(f"Cols % kC0 = {kc0 // 2}, Rows % 16 = 0") + ".*" + rule):
        pto.Tile(dtype, 16, kc0 + kc0 // 2, blayout="col_major", slayout="row_major")
    with pytest.raises(pto.ConstraintError, match=re.escape("NZ tile needs fractal=512, got 256 "
                                                            "(rule: NZ fractal size == 512)")):
        pto.Tile(dtype, 16, kc0, blayout="col_major", slayout="row_major", fractal=256)


def test_tile_unsupported_layout():
    with pytest.raises(pto.ConstraintError, match=re.escape("ROW_MAJOR + SLayout ROW_MAJOR is not a layout") + ".*"
                       + re.escape("(rule: supported tile layouts)")):
        pto.Tile("float32", 16, 8, blayout="row_major", slayout="row_major")


def test_tile_extents_and_valid_region():
    pto.Tile("float32", 1, 8, valid=(1, 1))                   # the smallest tile and valid region
    with pytest.raises(pto.ConstraintError, match=re.escape("Tile: rows must be >= 1, got 0 (rule: extents >= 1)")):
        pto.Tile("float32", 0, 8)
    with pytest.raises(pto.ConstraintError, match=re.escape("valid extent must be >= 1, got 0 (rule: extents >= 1)")):
        pto.Tile("float32", 4, 8, valid=(0, 8))
    pto.Tile("float32", 4, 8, valid=(4, 8))                   # valid == padded: just inside
    with pytest.raises(pto.ConstraintError, match=re.escape(
            "Tile: valid (4, 9) exceeds the padded shape (4, 8) (rule: 1 <= Valid <= Padded)")):
        pto.Tile("float32", 4, 8, valid=(4, 9))
    with pytest.raises(pto.ConstraintError, match=re.escape("(rule: 1 <= Valid <= Padded)")):
        pto.Tile("float32", 4, 8, valid=(5, 8))


def test_tile_address_alignment():
    assert pto.Tile("float32", 1, 8, addr=32).addr == 32
    with pytest.raises(pto.ConstraintError, match=re.escape(
            "addr 0x30 is not a multiple of 32 (rule: UB addresses are 32-byte aligned)")):
        pto.Tile("float32", 1, 8, addr=48)


def test_tile_set_must_fit():
    t = pto.Tile("float32", 2, 8)
    t.set(np.ones((2, 8)))
    with pytest.raises(pto.ConstraintError, match=re.escape(
            "array of shape (3, 8) does not fit tile (2, 8) (rule: array fits the padded tile)")):
        t.set(np.ones((3, 8)))


@pytest.mark.parametrize("kwargs, message", [
    (dict(rows="4"), "Tile: rows must be an int, got str"),
    (dict(cols=8.0), "Tile: cols must be an int, got float"),
    (dict(rows=True), "Tile: rows must be an int, got bool"),
    (dict(addr=-32), "Tile: addr must be a non-negative int"),
    (dict(addr=32.0), "Tile: addr must be a non-negative int"),
    (dict(valid=(1, 2, 3)), "Tile: valid must be"),
    (dict(dtype=np.float64), "dtype: float64 is not a PTO element dtype"),
])
def test_tile_type_errors(kwargs, message):
    args = dict(dtype="float32", rows=4, cols=8)
    args.update(kwargs)
    with pytest.raises(TypeError, match=re.escape(message)):
        pto.Tile(args.pop("dtype"), args.pop("rows"), args.pop("cols"), **args)


# -- GlobalTensor rules (simt_pto.tensor) ------------------------------------------------------------------------

def test_global_tensor_memory_reach():
    buf = np.zeros(50, np.float32)
    pto.GlobalTensor(buf, shape=(4, 10), stride=(13, 1))      # reaches element 48: inside
    pto.GlobalTensor(buf, shape=(5, 10), stride=(10, 1))      # reaches element 49: the last one
    with pytest.raises(pto.ConstraintError, match=re.escape(
            "shape (1, 1, 1, 4, 10) with stride (0, 0, 0, 14, 1) reaches element 51, but the array holds 50 elements "
            "(rule: shape / stride stay inside the memory)")):
        pto.GlobalTensor(buf, shape=(4, 10), stride=(0, 0, 0, 14, 1))
    with pytest.raises(pto.ConstraintError, match=re.escape("(rule: shape / stride stay inside the memory)")):
        pto.GlobalTensor(buf, shape=(51,))


def test_global_tensor_contiguity():
    pto.GlobalTensor(np.zeros((4, 16), np.float32)[1:3])      # a contiguous slice is fine
    with pytest.raises(pto.ConstraintError, match=re.escape(
            "the array must be C-contiguous (describe padding with shape/stride instead) "
            "(rule: C-contiguous memory)")):
        pto.GlobalTensor(np.zeros((4, 16), np.float32)[:, :8])


def test_global_tensor_dtype_width():
    pto.GlobalTensor(np.zeros(8, np.float32), dtype="uint32")  # same width: reinterpret
    with pytest.raises(pto.ConstraintError, match=re.escape(
            "dtype float16 (2 B) over float32 memory (rule: dtype matches the memory)")):
        pto.GlobalTensor(np.zeros(8, np.float32), dtype="float16")


def test_global_tensor_rank_extents_and_strides():
    pto.GlobalTensor(np.zeros(32, np.int8), shape=(1, 2, 2, 2, 4))               # five entries: inside
    with pytest.raises(pto.ConstraintError, match=re.escape(
            "shape must have 1 to 5 entries, got 6 (rule: 5-D shape / stride)")):
        pto.GlobalTensor(np.zeros(32, np.int8), shape=(1, 1, 2, 2, 2, 4))
    with pytest.raises(pto.ConstraintError, match=re.escape("array is 6-D (rule: 5-D shape / stride)")):
        pto.GlobalTensor(np.zeros((1, 1, 1, 1, 2, 4), np.int8))
    with pytest.raises(pto.ConstraintError, match=re.escape("stride must have 1 to 5 entries, got 0")):
        pto.GlobalTensor(np.zeros(8, np.int8), stride=())
    pto.GlobalTensor(np.zeros(8, np.int8), shape=(1, 8))
    with pytest.raises(pto.ConstraintError, match=re.escape(
            "shape (1, 1, 1, 0, 8) has an empty dimension (rule: extents >= 1)")):
        pto.GlobalTensor(np.zeros(8, np.int8), shape=(0, 8))
    pto.GlobalTensor(np.zeros(8, np.int8), shape=(2, 4), stride=(0, 1))          # stride 0 is allowed
    with pytest.raises(pto.ConstraintError, match=re.escape("(rule: non-negative strides)")):
        pto.GlobalTensor(np.zeros(8, np.int8), shape=(2, 4), stride=(-4, 1))


# -- errors are the right kind, and nothing is written before they are raised -------------------------------------

def test_error_classes():
    assert issubclass(pto.ConstraintError, ValueError)
    assert issubclass(pto.OutOfBoundsError, IndexError)
    with pytest.raises(ValueError):          # callers may catch ConstraintError as a ValueError
        call("MGATHER", "cpu", elem_call(idx=idx_elem(valid=(4, 7))))


@pytest.mark.parametrize("target", TARGETS)
def test_wrong_python_types(target):
    ok = row_call()
    with pytest.raises(TypeError, match="MGATHER: dst must be a Tile, got ndarray"):
        gather(target, np.zeros((4, 8), np.float32), ok["table"], ok["idx"])
    with pytest.raises(TypeError, match="MGATHER: table must be a GlobalTensor, got ndarray"):
        gather(target, ok["dst"], np.zeros((6, 8), np.float32), ok["idx"])
    with pytest.raises(TypeError, match=re.escape("MGATHER: idx must be a Tile (or a GlobalTensor for GM -> L1), "
                                                  "got list")):
        gather(target, ok["dst"], ok["table"], [3, 0, 5, 3])
    with pytest.raises(TypeError, match="MSCATTER: src must be a Tile, got GlobalTensor"):
        scatter(target, ok["table"], ok["table"], ok["idx"])
    with pytest.raises(TypeError, match="MSCATTER: table must be a GlobalTensor, got Tile"):
        scatter(target, ok["dst"], ok["dst"], ok["idx"])


def test_public_api_type_checks():
    ok = row_call()
    with pytest.raises(TypeError, match="strict must be a bool, got int"):
        pto.mgather(ok["dst"], ok["table"], ok["idx"], target="cpu", strict=1)
    with pytest.raises(TypeError, match="strict must be a bool, got str"):
        pto.mscatter(ok["table"], ok["dst"], idx_elem(), target="cpu", strict="no")
    with pytest.raises(TypeError, match="target: expected a string, got NoneType"):
        pto.mgather(ok["dst"], ok["table"], ok["idx"], target=None)


@pytest.mark.parametrize("target", ["a2a3", "a5"])
def test_public_api_validates_before_dispatch(target):
    # the plan raises before the target's kernels are imported or run
    with pytest.raises(pto.ConstraintError, match=re.escape("(rule: GlobalTable layout ND (or NZ on a2a3))")):
        pto.mgather(tile(), table(layout="dn"), idx_elem(), coalesce="elem", target=target)
    with pytest.raises(pto.ConstraintError, match=re.escape("(rule: Atomic Type Support)")):
        pto.mscatter(table(dtype="int8", cols=32), tile("int8", 1, 32, valid=(1, 2)),
                     idx_1r((1, 1)), coalesce="elem", atomic="max", target=target)


def test_rejected_scatter_leaves_the_table_unchanged(guarded_table):
    g = guarded_table(4, 32, "int8")
    before = g.bits.copy()
    src = pto.Tile.from_array(np.arange(8, dtype=np.int8).reshape(1, 8), 1, 32)
    idx = pto.Tile.from_array(np.arange(8, dtype=np.int32).reshape(1, 8), 1, 8)
    with pytest.raises(pto.ConstraintError, match=re.escape("(rule: Atomic Type Support)")):
        pto.mscatter(g.tensor, src, idx, coalesce="elem", atomic="add", target="cpu")   # cpu Add: no int8
    assert g.bits.tobytes() == before.tobytes()
    with pytest.raises(pto.ConstraintError, match=re.escape("(rule: Elem: Idx.ValidRow == src.ValidRow")):
        pto.mscatter(g.tensor, src, pto.Tile.from_array(np.arange(7, dtype=np.int32).reshape(1, 7), 1, 8),
                     coalesce="elem", target="cpu")
    assert g.bits.tobytes() == before.tobytes()


def test_rejected_gather_leaves_the_destination_unchanged():
    dst = tile().fill(-7.5)
    before = dst.data.tobytes()
    with pytest.raises(pto.ConstraintError):
        pto.mgather(dst, table(6, 7), idx_1r(), target="cpu")
    assert dst.data.tobytes() == before
