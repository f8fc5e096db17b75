"""The A2/A3 walks, written once for MGATHER and MSCATTER (MGATHER.md / MSCATTER.md, "A2/A3 Form", "NZ Layout
(A2/A3)").

The A2/A3 kernel is a single-threaded walk driven from the scalar pipe. A gather and a scatter of the same shape
visit the same (tile position ``t``, GM position ``g``) pairs in the same order; they differ only in the move at each
pair, bound per op as ``move(tile, t, table, g)``: ``tile[t] = table[g]`` (:mod:`.mgather`), or ``table[g] op=
tile[t]`` by the store rule (:mod:`.mscatter`; the walk order is then the order of "last write wins" and of the
accumulation). ``safeIdx`` is the index after the OOB rule (``remap_index``):

* Row ND: per tile row ``r`` in increasing order, one row transfer (``lenBurst = validCol``) between tile row ``r``
  and table row ``safeIdx * GetStride(DIM_3)``, ``tableRows = prod(Shape[0..3])``.
* Elem ND: per element in increasing ``(r, c)``, one scalar transfer between ``tile[r, c]`` and ``table[safeIdx]``,
  ``tableSize = prod(Shape[0..4])``.
* Row NZ: per tile row ``r``, per outer batch ``b``, ``gShape1`` bursts of ``kC0`` elements (the whole logical
  row, ``gShape0 * gShape1 * kC0`` columns) between the NZ tile slot of row ``r`` and the NZ block-stride GM
  offset of logical row ``safeIdx``.
* Elem NZ: ``safeIdx -> (safeIdx // nLogicalCols, safeIdx % nLogicalCols)`` -> NZ GM offset; the walk order is
  block-col -> row -> col-in-block.

Where the rule masks an index, a scatter skips it and a gather writes ``T(0)`` inline (``zero_oob``); a Row NZ gather
under GatherOOB ZERO instead zeroes the whole NZ tile once, before the transfers, and skips the row (``prefill``).

:func:`compile_walk` makes one loop per (op, policy): a copy of the walk whose globals bind ``move`` and the
compile-time constants (``rule``, ``zero_oob``, ``prefill``), so that the rule's branch and the OOB handling fold at
compile time (the ISA's ``if constexpr``). Those constants reach Numba's on-disk cache key explicitly, as the
``key`` of :func:`simt_pto.kernels.cache.njit`: each specialization has a cache index of its own. Elements move as
raw bits (uint8 / uint16 / uint32 arrays) or, for an Add, in the element type.

Every computed array index goes through ``U`` (uint64): Numba adds a negative-index wraparound select to signed
indices it cannot prove non-negative, which blocks vectorisation and costs ~3.5x on a random gather. All offsets
here are non-negative by construction (the plan checked them).
"""
from __future__ import annotations

import numba
import numpy as np

from simt_pto.enums import Coalesce
from simt_pto.launch_spec import KernelPolicy
from simt_pto.kernels.cache import njit
from simt_pto.kernels.index_policy import remap_index
from simt_pto.kernels.store import bind
from simt_pto.nz import FRACTAL_NZ_ROW

U = numba.uint64


@njit(inline="always", cache=True)
def nz_gm_row_base(lr, s2, s3):
    """GM offset of logical row ``lr`` of an NZ tensor (its column 0): ``br * s2 + ri * s3`` with
    ``br, ri = divmod(lr, FRACTAL_NZ_ROW)``."""
    br = lr // FRACTAL_NZ_ROW
    return br * s2 + (lr - br * FRACTAL_NZ_ROW) * s3


@njit(inline="always", cache=True)
def nz_gm_offset(lr, lc, bcols, kc0, s0, s1, s2, s3, s4):
    """GM element offset of logical ``(lr, lc)`` of an NZ tensor ``Shape<B, BCols, BRows, 16, kC0>``
    with strides ``s0..s4`` (MGatherNZGmOffset / MScatterNZGmOffset)."""
    per_batch = bcols * kc0
    b = lc // per_batch
    rest = lc - b * per_batch
    bc = rest // kc0
    ci = rest - bc * kc0
    return b * s0 + bc * s1 + nz_gm_row_base(lr, s2, s3) + ci * s4


# -- the walks: plain Python over ``move`` and the constants ``rule``, ``zero_oob``, ``prefill`` -------------------
# compile_walk binds these names per op and policy; unbound, as here, the walks only raise.

def move(tile, t, table, g):
    """``move(tile, t, table, g)``: the op's transfer at one (tile, GM) pair (:mod:`.mgather`, :mod:`.mscatter`)."""
    raise RuntimeError("move() is bound per op by simt_pto.kernels.a2a3.walk.compile_walk")


rule = None
"""The index rule (``IndexRule``) of the OOB policy."""
zero_oob = False
"""Write ``T(0)`` at the tile position of a masked index (a gather); False: skip it (a scatter)."""
prefill = False
"""Row NZ gather under GatherOOB ZERO: zero the whole NZ tile before the transfers (then ``zero_oob`` is False)."""


def row_nd(tile, tile_rs, table, idx, idx_step, rows, cols, capacity, row_stride):
    """Row ND: tile row ``r`` <-> table row ``safeIdx`` (``cols`` elements), ``r`` increasing."""
    for r in range(rows):
        slot, ok = remap_index(idx[U(r * idx_step)], capacity, rule)
        t = U(r * tile_rs)
        if ok:
            g = U(slot * row_stride)
            for c in range(U(cols)):
                move(tile, t + c, table, g + c)
        elif zero_oob:
            for c in range(U(cols)):
                tile[t + c] = 0


def elem_nd(tile, tile_rs, table, idx, idx_rs, rows, cols, capacity):
    """Elem ND: ``tile[r, c]`` <-> ``table[safeIdx(idx[r, c])]`` in increasing ``(r, c)``."""
    for r in range(rows):
        t = U(r * tile_rs)
        i = U(r * idx_rs)
        for c in range(U(cols)):
            slot, ok = remap_index(idx[i + c], capacity, rule)
            if ok:
                move(tile, t + c, table, U(slot))
            elif zero_oob:
                tile[t + c] = 0


def row_nz(tile, tile_rows, table, idx, idx_step, rows, capacity, nbatch, bcols, kc0, s0, s1, s2, s3, s4):
    """Row NZ: NZ tile row ``r`` <-> the whole logical row ``safeIdx``, batch by batch (``gShape1`` bursts of
    ``kC0`` per batch)."""
    blk = tile_rows * kc0            # UB distance between NZ block columns
    if prefill:                      # GatherOOB::Zero: zero the whole tile once, before the transfers
        tile[:] = 0
    for r in range(rows):
        slot, ok = remap_index(idx[U(r * idx_step)], capacity, rule)
        if ok:
            gbase = nz_gm_row_base(slot, s2, s3)
            for b in range(nbatch):
                for bc in range(bcols):
                    g = gbase + b * s0 + bc * s1
                    t = U((b * bcols + bc) * blk + r * kc0)
                    for ci in range(kc0):
                        move(tile, t + U(ci), table, U(g + ci * s4))
        elif zero_oob:               # memory-safe UNDEFINED (strict=False): a zero row
            for j in range(nbatch * bcols):
                t = U(j * blk + r * kc0)
                for ci in range(U(kc0)):
                    tile[t + ci] = 0


def elem_nz(tile, tile_rows, table, idx, idx_rs, rows, cols, capacity, lcols, bcols, kc0, s0, s1, s2, s3, s4):
    """Elem NZ, block-col -> row -> col-in-block: NZ tile ``(r, c)`` <-> the NZ GM offset of logical
    ``divmod(safeIdx, lcols)``."""
    blk = tile_rows * kc0
    nblk = (cols + kc0 - 1) // kc0
    for bcol in range(nblk):
        c0 = bcol * kc0
        cend = min(kc0, cols - c0)
        for r in range(rows):
            i = U(r * idx_rs + c0)
            t = U(bcol * blk + r * kc0)
            for ci in range(U(cend)):
                slot, ok = remap_index(idx[i + ci], capacity, rule)
                if ok:
                    lr = slot // lcols
                    move(tile, t + ci, table, U(nz_gm_offset(lr, slot - lr * lcols, bcols, kc0, s0, s1, s2, s3, s4)))
                elif zero_oob:
                    tile[t + ci] = 0


def compile_walk(walk, op: str, move, policy: KernelPolicy, *, zero_oob: bool = False, prefill: bool = False):
    """The loop of ``walk`` for ``op`` (``"mgather"`` / ``"mscatter"``, its name's prefix) with ``move`` and the
    compile-time constants bound: ``policy.rule``, ``zero_oob`` (write ``T(0)`` where the rule masks an index) and
    ``prefill`` (zero the whole tile first: Row NZ). ``policy`` holds everything ``move`` was made from (the
    scatter's atomic op and element format); it and the flags name the loop's on-disk cache entry."""
    loop = bind(walk, {"move": move, "rule": policy.rule, "zero_oob": zero_oob, "prefill": prefill})
    loop.__name__ = loop.__qualname__ = f"{op}_{walk.__name__}"
    flags = "".join(f".{name}" for name, on in (("zero-oob", zero_oob), ("prefill", prefill)) if on)
    return njit(cache=True, key=policy.cache_key + flags)(loop)


# -- host side ------------------------------------------------------------------------------------------------

def nz_params(plan):
    """``(nbatch, bcols, kc0, lcols, strides)`` of the plan's NZ table."""
    shape, stride = plan.table.shape, plan.table.stride
    kc0 = shape[4]
    return shape[0], shape[1], kc0, shape[0] * shape[1] * kc0, tuple(int(s) for s in stride)


def index_bits(plan):
    """The index tile's storage as uint32 (indices are cast to uint32 before any bounds logic)."""
    return plan.idx.data.view(np.uint32)


def run_walk(plan, tile, tile_rs, table, loop) -> None:
    """Run the walk of ``plan`` (Row / Elem, ND / NZ) over ``tile`` (the tile's storage, ``tile_rs`` elements per
    row for the ND walks) and ``table`` (the GM table's flat storage). ``loop(walk)`` is the op's compiled loop of
    a walk source for this plan's policy."""
    idx = index_bits(plan)
    if plan.nz:
        nz_walk(plan, loop)(tile, table, idx)
    else:
        row = plan.coalesce == Coalesce.ROW
        run_nd(plan, tile, tile_rs, table, idx, plan.idx_step if row else plan.idx.cols, plan.rows, loop)


def nz_walk(plan, loop):
    """The NZ walk of ``plan`` (its tile's shape, its NZ table's geometry) and ``loop`` with its compiled loop looked
    up once: ``run(tile, table, idx)`` over the tile's storage, the table's flat storage and the index tile's uint32
    storage (what :func:`run_walk` runs for an NZ plan; a repeated A2/A3 NZ tile op keeps it)."""
    nbatch, bcols, kc0, lcols, (s0, s1, s2, s3, s4) = nz_params(plan)
    tile_rows, rows, capacity = plan.tile.rows, plan.rows, plan.capacity
    if plan.coalesce == Coalesce.ROW:
        row_loop, idx_step = loop(row_nz), plan.idx_step
        return lambda tile, table, idx: row_loop(tile, tile_rows, table, idx, idx_step, rows, capacity, nbatch, bcols,
                                                 kc0, s0, s1, s2, s3, s4)
    elem_loop, idx_cols, cols = loop(elem_nz), plan.idx.cols, plan.cols
    return lambda tile, table, idx: elem_loop(tile, tile_rows, table, idx, idx_cols, rows, cols, capacity, lcols,
                                              bcols, kc0, s0, s1, s2, s3, s4)


def run_nd(plan, tile, tile_rs, table, idx, idx_stride, rows, loop) -> None:
    """The ND walk of ``plan`` over ``rows`` rows of ``plan.cols`` columns: ``tile`` (``tile_rs`` elements per row),
    ``idx`` (uint32; Row: ``idx_stride`` elements between consecutive indices; Elem: ``idx_stride`` elements per
    index row) and ``table`` (the GM table's flat storage). What :func:`run_walk` runs for an ND plan over its tiles,
    and a whole-array A2/A3 gather over the caller's own arrays (row-major ``rows x C`` memory is such a tile)."""
    nd_walk(plan, loop, plan.cols)(tile, tile_rs, table, idx, idx_stride, rows)


def nd_loop(plan, loop, cols: int) -> tuple:
    """``(run, trailing)``: the compiled ND loop of ``plan`` and ``loop`` over rows of ``cols`` columns (a tile op's
    ``plan.cols``; a whole-array call's tile view, whose plan has no tile), looked up once, and the arguments it
    takes after the call's own: ``run(tile, tile_rs, table, idx, idx_stride, rows, *trailing)`` is :func:`run_nd`.
    A runner bound to one signature (:func:`.mgather.bound_gatherer`, :func:`.mscatter.bound_scatterer`) calls
    ``run`` itself, so a repeated call runs one Python frame of its own."""
    if plan.coalesce == Coalesce.ROW:
        return loop(row_nd), (cols, plan.capacity, plan.row_stride)
    return loop(elem_nd), (cols, plan.capacity)


def nd_walk(plan, loop, cols: int):
    """:func:`nd_loop` as one function: ``run(tile, tile_rs, table, idx, idx_stride, rows)`` (a whole-array A2/A3
    gather runs it on each tile of the caller's arrays)."""
    run, trailing = nd_loop(plan, loop, cols)
    return lambda tile, tile_rs, table, idx, idx_stride, rows: run(tile, tile_rs, table, idx, idx_stride, rows,
                                                                   *trailing)
