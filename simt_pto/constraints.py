"""Constraint checks per target, and the resolved call ("plan") every target runs.

Implements MGATHER.md / MSCATTER.md "Tile Constraints (CPU / A2/A3 / A5)", "Mode Resolution",
"Atomic Type Support", "Layout Support" and "UB Memory Budget". Every check runs before anything is
written; a violation raises :class:`ConstraintError` naming the rule, the target and the values.
"""
from __future__ import annotations

from typing import NamedTuple

from . import dtypes as _dt
from . import aliasing, nz, ub
from .enums import (BLayout, Coalesce, GatherExec, Layout, ScatterConflict, ScatterOOB,
                    TileType)
from .errors import ConstraintError
from .tensor import GlobalTensor
from .tile import Tile
from .call import Policy
from .plan import SIGNATURES, Plan, check_oob, out_of_range  # noqa: F401  (re-exported: the validated call)
from .policy import index_rule


def _fail(op, target, rule, detail):
    raise ConstraintError(op, target, rule, detail)


def _check_types(op, tile, table, idx, tile_name):
    if not isinstance(tile, Tile):
        raise TypeError(f"{op}: {tile_name} must be a Tile, got {type(tile).__name__}")
    if not isinstance(table, GlobalTensor):
        raise TypeError(f"{op}: table must be a GlobalTensor, got {type(table).__name__}")
    if not isinstance(idx, (Tile, GlobalTensor)):
        raise TypeError(f"{op}: idx must be a Tile (or a GlobalTensor for GM -> L1), got {type(idx).__name__}")


def _check_element_dtype(op, target, dtype, tile_name):
    allowed = _dt.ELEMENT_DTYPES[target]
    if dtype not in allowed:
        _fail(op, target, "Tile Constraints: supported data types",
              f"{tile_name} dtype {dtype} is not supported on {target}; supported: {_dt.names(allowed)}")


def _check_atomic(op, target, atomic, conflict, dtype):
    """MSCATTER's "Atomic Type Support" for ``dtype``, and A2/A3's one conflict rule (strictly sequential)."""
    allowed = _dt.atomic_dtypes(target, atomic)
    if dtype not in allowed:
        _fail(op, target, "Atomic Type Support",
              f"atomic {atomic.name.capitalize()} on {target} supports "
              f"{_dt.names(allowed) if allowed else 'no dtype'}; got {dtype}")
    if target == "a2a3" and conflict != ScatterConflict.LAST:
        _fail(op, target, "A2/A3 has no ScatterConflict parameter (strictly sequential: last write wins)",
              f"conflict={conflict.name}")


def check_writable_table(op, target, writeable: bool) -> None:
    """An MSCATTER's table is written in place: a read-only one is refused (tile ops and whole arrays alike)."""
    if not writeable:
        _fail(op, target, "the table is written in place", "table is a read-only array (flags.writeable is False)")


def _check_dtypes(op, target, tile, table, idx_dtype, tile_name):
    _check_element_dtype(op, target, tile.dtype, tile_name)
    if idx_dtype not in _dt.INDEX_DTYPES:
        _fail(op, target, "Tile Constraints: index dtype", f"index dtype must be int32 or uint32, got {idx_dtype}")
    if target == "cpu":
        if table.dtype.itemsize != tile.dtype.itemsize:
            _fail(op, target, "sizeof(Tile::DType) == sizeof(GlobalData::DType)",
                  f"{tile_name} {tile.dtype} ({tile.dtype.itemsize} B) vs table {table.dtype} ({table.dtype.itemsize} B)")
    elif table.dtype != tile.dtype:
        _fail(op, target, "GlobalTable::DType == __gm__ T",
              f"table dtype {table.dtype} does not match the {tile_name} dtype {tile.dtype}")


def _layout_name(t: Tile) -> str:
    return "NZ" if t.is_nz else t.blayout.name


def _check_vec_layouts(op, target, tile, idx, table, coalesce, tile_name):
    """Layout Support tables, per target (UB tiles and GM table)."""
    if tile.loc != TileType.VEC:
        _fail(op, target, f"{tile_name} must be a vector tile (TileType::Vec)", f"{tile_name} is {tile.loc.name}")
    if idx.loc != TileType.VEC:
        _fail(op, target, "indexes must be a vector tile (TileType::Vec)", f"idx is {idx.loc.name}")
    if table.layout == Layout.DN:
        _fail(op, target, "GlobalTable layout ND (or NZ on a2a3)", "table layout DN is not supported")
    if target == "cpu":
        if tile.is_nz or tile.blayout != BLayout.ROW_MAJOR:
            _fail(op, target, f"{tile_name} RowMajor + NoneBox", f"{tile_name} is {_layout_name(tile)}")
        if idx.is_nz or idx.blayout != BLayout.ROW_MAJOR:
            _fail(op, target, "indexes RowMajor + NoneBox", f"idx is {_layout_name(idx)}")
        if table.layout != Layout.ND:
            _fail(op, target, "src/dst must use Layout::ND", f"table layout is {table.layout.name}")
        if table.shape[:3] != (1, 1, 1):
            _fail(op, target, "static shape Shape<1, 1, 1, TableRows, RowWidth>", f"table shape is {table.shape}")
    elif target == "a2a3":
        if idx.is_nz or idx.blayout != BLayout.ROW_MAJOR:
            _fail(op, target, "index tile BLayout::RowMajor + SLayout::NoneBox", f"idx is {_layout_name(idx)}")
        if table.layout == Layout.ND and (tile.is_nz or tile.blayout != BLayout.ROW_MAJOR):
            _fail(op, target, f"ND table pairs with a RowMajor + NoneBox {tile_name}",
                  f"{tile_name} is {_layout_name(tile)}")
        if table.layout == Layout.NZ:
            if not tile.is_nz:
                _fail(op, target, f"NZ table pairs with an NZ {tile_name} (ColMajor + SLayout RowMajor + 512 B)",
                      f"{tile_name} is {_layout_name(tile)}")
            kc0 = nz.c0(tile.dtype.itemsize)
            if table.shape[3] != nz.FRACTAL_NZ_ROW or table.shape[4] != kc0:
                _fail(op, target, "NZ table: staticShape[3] == 16 and staticShape[4] == 32 / sizeof(T)",
                      f"table shape {table.shape}, expected Shape[3] = 16 and Shape[4] = {kc0} for {tile.dtype}")
    else:  # a5
        if tile.is_nz:
            _fail(op, target, f"{tile_name} RowMajor or ColMajor with SLayout::NoneBox (no NZ on A5)",
                  f"{tile_name} is NZ")
        if idx.is_nz:
            _fail(op, target, "index tile with SLayout::NoneBox", "idx is NZ")
        if table.layout != Layout.ND:
            _fail(op, target, "GM table Layout::ND only (no NZ block-stride translation on A5)",
                  f"table layout is {table.layout.name}; repack NZ data into ND first")


def _check_mode(op, target, tile, idx, coalesce, tile_name):
    """Mode Resolution."""
    R, C = tile.valid
    ir, ic = idx.valid
    if coalesce == Coalesce.ELEM or (op == "MSCATTER" and target == "cpu"):
        if (ir, ic) != (R, C):
            how = ("the CPU simulator's MSCATTER always walks element-wise, so " if coalesce == Coalesce.ROW else "")
            _fail(op, target, f"{how}Elem: Idx.ValidRow == {tile_name}.ValidRow && Idx.ValidCol == {tile_name}.ValidCol",
                  f"idx valid {ir}x{ic}, {tile_name} valid {R}x{C}")
        return 1
    if target == "a2a3":
        if (ir, ic) != (1, R):
            _fail(op, target, f"Row: Idx.ValidRow == 1 && Idx.ValidCol == {tile_name}.ValidRow",
                  f"idx valid {ir}x{ic}, {tile_name} valid rows {R}")
        return idx.strides[1]
    if (ir, ic) == (1, R):
        if target == "a5" and R > 1 and idx.blayout != BLayout.ROW_MAJOR:
            _fail(op, target, "Row: a [1, R] index tile is BLayout::RowMajor", f"idx [1, {R}] is {idx.blayout.name}")
        return idx.strides[1]
    if (ir, ic) == (R, 1):
        if target == "a5" and R > 1 and idx.blayout != BLayout.COL_MAJOR:
            _fail(op, target, "Row: an [R, 1] index tile is BLayout::ColMajor", f"idx [{R}, 1] is {idx.blayout.name}")
        return idx.strides[0]
    _fail(op, target, f"Row: (Idx.ValidRow == 1 && Idx.ValidCol == {tile_name}.ValidRow) || "
                      f"(Idx.ValidRow == {tile_name}.ValidRow && Idx.ValidCol == 1)",
          f"idx valid {ir}x{ic}, {tile_name} valid rows {R}")


def _table_geometry(op, target, tile, table, coalesce, tile_name):
    """(capacity, row_stride) for the table, with the per-target row rules and the memory-reach check."""
    if table.reach > table.size:  # (checked as the tensor was made: its numpy memory has shrunk in place since)
        _fail(op, target, "shape / stride stay inside the memory",
              f"table shape {table.shape} with stride {table.stride} reaches element {table.reach - 1}, but its "
              f"memory holds {table.size} elements now")
    C = tile.valid_cols
    if table.layout == Layout.NZ:  # a2a3 only (checked above)
        lrows = table.shape[2] * nz.FRACTAL_NZ_ROW
        lcols = table.shape[0] * table.shape[1] * table.shape[4]
        if table.stride[4] != 1:
            _fail(op, target, "NZ table: contiguous kC0 elements per 32 B burst (Stride[4] == 1)",
                  f"table stride {table.stride}")
        if coalesce == Coalesce.ROW and C > lcols:
            _fail(op, target, "Row: the tile's valid columns fit the NZ table's logical row",
                  f"{tile_name} valid cols {C} > logical cols {lcols}")
        if coalesce == Coalesce.ROW and tile.cols < lcols:
            # The NZ Row DMA moves whole logical rows: nBurst = gShape1 bursts of kC0 for every batch.
            _fail(op, target, "Row NZ: the tile's padded Cols hold a whole logical row",
                  f"{tile_name} Cols = {tile.cols} < logical cols gShape0 * gShape1 * kC0 = {lcols}")
        return (lrows if coalesce == Coalesce.ROW else lrows * lcols), 0
    if coalesce == Coalesce.ELEM or (op == "MSCATTER" and target == "cpu"):
        size = table.table_size
        if size > table.size:
            _fail(op, target, "Elem: the flat table of prod(Shape[0..4]) elements lies inside the memory",
                  f"tableSize {size} > {table.size} elements of memory")
        return size, 0
    if target == "a5":
        if table.shape[4] != C:
            _fail(op, target, "A5 Row: GlobalTable::staticShape[4] == ValidCol (packed ND, row stride = validCols)",
                  f"table Shape[4] = {table.shape[4]}, {tile_name} valid cols = {C}")
        if table.stride[4] != 1 or (table.shape[3] > 1 and table.stride[3] != C):
            _fail(op, target, "A5 Row: no inter-row padding (Stride[3] == validCols, Stride[4] == 1)",
                  f"table stride {table.stride}")
        rows, stride = table.shape[3], C
    elif target == "a2a3":
        rows = table.shape[0] * table.shape[1] * table.shape[2] * table.shape[3]
        stride = table.stride[3]
        if table.stride[4] != 1:
            _fail(op, target, "ND table: contiguous rows (Stride[4] == 1)", f"table stride {table.stride}")
    else:
        rows, stride = table.shape[3], table.shape[4]
    if coalesce == Coalesce.ROW and C > table.shape[4]:
        _fail(op, target, "Row: the tile's valid columns fit the table row (ValidCol <= Shape[4])",
              f"{tile_name} valid cols {C} > table Shape[4] = {table.shape[4]}")
    reach = (rows - 1) * stride + C
    if reach > table.size:
        _fail(op, target, "Row: every table row lies inside the memory",
              f"row {rows - 1} ends at element {reach - 1}, memory holds {table.size}")
    return rows, stride





_PLANS = SIGNATURES
"""The shape half of validated VEC tile ops lives in the one signature cache, by signature (:func:`_plan_key`): a plan
without operands. A call of a signature seen before skips the type, dtype, layout, mode, geometry and budget rules,
which read nothing else, and is checked only in what depends on its operands' memory and index values, as every call
is."""


def _tile_key(t: Tile) -> tuple:
    return t.dtype.name, t.rows, t.cols, t.loc, t.blayout, t.slayout, t.fractal, t.valid_rows, t.valid_cols, t.addr


def _plan_key(policy: Policy, tile, table, idx, scratch_given: bool = False) -> tuple | None:
    """What the shape rules of a VEC tile op read: the tiles' types, shapes, layouts, valid extents and UB
    addresses, the table's dtype and its memory's (a kept launch takes the memory as it is: ``"float32"`` over int32
    memory and over float32 memory are two signatures), shape, strides, layout, memory size (and for MSCATTER its
    writability), and the normalised policy (:class:`~simt_pto.call.Policy`: ``"elem"`` and ``Coalesce.ELEM`` are
    one key). None (validated every time) for anything but exact Tile / GlobalTensor operands and a VEC tile. Built
    on every call of a tile op, so written for speed: flat tuples."""
    if type(tile) is not Tile or type(idx) is not Tile or type(table) is not GlobalTensor or tile.loc != TileType.VEC:
        return None
    on_device = table.on_device  # the memory's size as it is now (GlobalTensor.size, inlined for host memory)
    return ("tile op", policy, scratch_given, _tile_key(tile), _tile_key(idx), table.dtype.name, table.memory_dtype,
            table.shape, table.stride, table.layout, table.size if on_device else table.array.size, on_device,
            policy.op == "MSCATTER" and table.writeable)


def cached_mgather(policy: Policy, dst, table, idx, scratch=None) -> Plan | None:
    """The validated plan without operands of this MGATHER's signature (what :func:`validated_mgather` re-points at
    each call), if a call of that signature has been validated; None otherwise. A runtime that keeps a launch per
    signature runs a repeated call from it (``simt_pto.host.dispatch.run_kept``), checking only what depends on
    this call's memory and index values."""
    return _PLANS.get(_plan_key(policy, dst, table, idx, scratch is not None))


def cached_mscatter(policy: Policy, table, src, idx) -> Plan | None:
    """:func:`cached_mgather` for MSCATTER (the signature :func:`validated_mscatter` keeps)."""
    return _PLANS.get(_plan_key(policy, src, table, idx))


def validated_mgather(policy: Policy, dst, table, idx, scratch=None) -> Plan:
    """Validate a tile MGATHER of ``policy`` (every rule of MGATHER.md "Tile Constraints" for its target) and resolve
    it into its :class:`Plan`; a MAT destination takes the GM -> L1 path (:mod:`simt_pto.l1_gather`)."""
    op = "MGATHER"
    target, coalesce, oob, exec_ = policy.target, policy.coalesce, policy.oob, policy.exec
    strict, dyn_ubuf_size = policy.strict, policy.dyn_ubuf_size
    tiles = {"dst": dst, "idx": idx}
    key = _plan_key(policy, dst, table, idx, scratch is not None)
    shape = _PLANS.get(key)
    if shape is None:
        _check_types(op, dst, table, idx, "dst")
        if dst.loc == TileType.MAT and target == "cpu":  # the GM -> L1 path exists on A2/A3 and A5 only
            _fail(op, target, "dst must be a vector tile (TileType::Vec)", f"dst is {dst.loc.name}")
        if dst.loc == TileType.MAT:
            from .l1_gather import validated_mgather_l1  # GM -> L1 path (MGATHER.md, "GM → L1 Gather")
            return validated_mgather_l1(target, dst, table, idx, coalesce, oob, exec_, scratch, strict)
        if not isinstance(idx, Tile):
            _fail(op, target, "indexes must be a UB vector tile (a GM index tensor is for MAT destinations only)",
                  f"idx is a {type(idx).__name__}")
        if exec_ != GatherExec.SCALAR or scratch is not None:
            _fail(op, target, "exec / scratch apply to the GM -> L1 (MAT destination) path only",
                  f"exec={exec_.name}, scratch={'given' if scratch is not None else None} with a VEC destination")
        _check_dtypes(op, target, dst, table, idx.dtype, "dst")
        _check_vec_layouts(op, target, dst, idx, table, coalesce, "dst")
        idx_step = _check_mode(op, target, dst, idx, coalesce, "dst")
        capacity, row_stride = _table_geometry(op, target, dst, table, coalesce, "dst")
        ub.check_working_set(op, target, tiles, dyn_ubuf_size)
        shape = Plan(op, target, coalesce, oob, index_rule(oob, strict), dst.dtype, None, None, None, capacity,
                     row_stride, idx_step, strict=strict)
        _PLANS.put(key, shape)
        return _this_call(op, target, shape, None, {"dst": dst.data}, {"table": table.array, "idx": idx.data},
                          dst, idx, table)
    return _this_call(op, target, shape, tiles, {"dst": dst.data}, {"table": table.array, "idx": idx.data},
                      dst, idx, table)


def validated_mscatter(policy: Policy, table, src, idx) -> Plan:
    """Validate a tile MSCATTER of ``policy`` (every rule of MSCATTER.md "Tile Constraints", "Atomic Type Support"
    for its target) and resolve it into its :class:`Plan`."""
    op = "MSCATTER"
    target, coalesce, oob, atomic, conflict = policy.target, policy.coalesce, policy.oob, policy.atomic, policy.conflict
    strict, dyn_ubuf_size = policy.strict, policy.dyn_ubuf_size
    tiles = {"src": src, "idx": idx}
    key = _plan_key(policy, src, table, idx)
    shape = _PLANS.get(key)
    if shape is None:
        _check_types(op, src, table, idx, "src")
        check_writable_table(op, target, table.writeable)
        if not isinstance(idx, Tile):
            _fail(op, target, "indexes must be a UB vector tile", f"idx is a {type(idx).__name__}")
        _check_dtypes(op, target, src, table, idx.dtype, "src")
        _check_atomic(op, target, atomic, conflict, src.dtype)
        _check_vec_layouts(op, target, src, idx, table, coalesce, "src")
        idx_step = _check_mode(op, target, src, idx, coalesce, "src")
        capacity, row_stride = _table_geometry(op, target, src, table, coalesce, "src")
        ub.check_working_set(op, target, tiles, dyn_ubuf_size)
        # The CPU simulator does not model ScatterOOB: every index is used unchecked.
        rule = index_rule(ScatterOOB.UNDEFINED if target == "cpu" else oob, strict)
        shape = Plan(op, target, coalesce, oob, rule, src.dtype, None, None, None, capacity, row_stride, idx_step,
                     atomic=atomic, conflict=conflict, strict=strict)
        _PLANS.put(key, shape)
        return _this_call(op, target, shape, None, {"table": table.array}, {"src": src.data, "idx": idx.data},
                          src, idx, table)
    return _this_call(op, target, shape, tiles, {"table": table.array}, {"src": src.data, "idx": idx.data},
                      src, idx, table)


WHOLE_ARRAY_RULES = "whole-array rules"
"""The first part of the signature-cache key of :func:`validated_whole_array`'s answer, ``(WHOLE_ARRAY_RULES, policy,
dtype name)``: the planner looks its rules up there itself (no call) before it calls that function."""


class WholeArrayRules(NamedTuple):
    """What :func:`validated_whole_array` resolves once per ``(policy, dtype)``."""

    plan: Plan
    """The call's plan without operands, of capacity 0: the planner sets ``capacity`` and ``row_stride`` per shape."""
    ub_budget: int | None
    """The bytes of UB each tile may use (:func:`simt_pto.ub.budget` of the policy's ``dyn_ubuf_size``)."""


def validated_whole_array(policy: Policy, dtype: _dt.DType) -> WholeArrayRules:
    """The rules of an ``a5`` / ``a2a3`` whole-array call of ``policy`` on a table of ``dtype`` that no shape changes
    (A2/A3: also its one conflict rule): the UB
    budget of its ``dyn_ubuf_size`` (MGATHER.md / MSCATTER.md, "UB Memory Budget"), the element dtype on the target
    ("Tile Constraints"), for MSCATTER its "Atomic Type Support", and the index rule of ``oob`` and ``strict``.

    The tile op's other rules hold by construction for the tiles a whole-array call is cut into
    (``simt_pto.host.tiling``): VEC tiles, RowMajor (ColMajor for a 1-D Elem view), an index tile shaped as the mode
    resolves (Row ``[1, R]``, Elem the data tile's shape), a packed ND table whose row width is the tiles' valid
    columns, and indices cast to uint32 (wider ones are narrowed, out-of-range ones refused, by the runtime). The UB
    budget depends on the shape: the tile view checks it (``tiling.tile_view``), and the index values are checked on
    every call. A test validates the full tile of random whole-array calls through :func:`validated_mgather` /
    :func:`validated_mscatter` and compares. Kept in :data:`~simt_pto.plan.SIGNATURES` per ``(policy, dtype)``."""
    key = (WHOLE_ARRAY_RULES, policy, dtype.name)
    rules = _PLANS.get(key)
    if rules is not None:
        return rules
    op, target = policy.op, policy.target
    if target == "cpu":  # the reference validates each call's full tile (its Row MSCATTER walks element-wise)
        raise ValueError("validated_whole_array: the a5 / a2a3 whole-array rules, got target 'cpu'")
    budget = ub.budget(op, target, policy.dyn_ubuf_size)
    _check_element_dtype(op, target, dtype, "dst" if op == "MGATHER" else "src")
    if op == "MSCATTER":
        _check_atomic(op, target, policy.atomic, policy.conflict, dtype)
    # (a gather's policy holds the Plan's own defaults: atomic NONE, conflict LAST)
    plan = Plan(op, target, policy.coalesce, policy.oob, index_rule(policy.oob, policy.strict), dtype, None, None, None,
                0, atomic=policy.atomic, conflict=policy.conflict, strict=policy.strict)
    rules = WholeArrayRules(plan, budget)
    _PLANS.put(key, rules)
    return rules


def _this_call(op, target, shape: Plan, cached_tiles, written, read, tile, idx, table) -> Plan:
    """The part of a plan that is this call's: the tiles' storage (``cached_tiles``: for a cached signature, whose
    UB budget was checked already, only their storage is this call's), the operands' overlap, then the signature's
    plan re-pointed at this call's operands and its indices checked."""
    if cached_tiles is not None:
        ub.check_distinct_storage(op, target, cached_tiles)
    aliasing.check_disjoint(op, target, written, read)
    plan = shape.repointed(tile=tile, idx=idx, table=table, signature=shape)
    check_oob(plan)
    return plan
