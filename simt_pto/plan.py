"""The resolved call ("plan") every target runs, and the refusal of out-of-range indices.

:mod:`simt_pto.constraints` (VEC destinations) and :mod:`simt_pto.l1_gather` (GM -> L1) validate a call into a
:class:`Plan`; both refuse out-of-range indices with :func:`check_oob`, the whole-array ops with
:func:`check_indices` (the one refusal, and :func:`out_of_range` its one wording).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import dtypes as _dt
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
    def l1(self) -> bool:
        return self.tile.loc == TileType.MAT

    def index_bits(self) -> np.ndarray:
        """The indices the op reads after the uint32 cast, as a uint32 view where the layout allows:
        ``(rows,)`` for Row, ``(rows, cols)`` for Elem (the GM index tensor of the L1 path: see
        :class:`simt_pto.l1_gather.L1Plan`)."""
        if self.coalesce == Coalesce.ROW and not (self.op == "MSCATTER" and self.target == "cpu"):
            return self.idx.data.view(np.uint32)[: self.rows * self.idx_step: self.idx_step]
        return self.idx.grid()[: self.rows, : self.cols].view(np.uint32)

    def raw_indices(self) -> np.ndarray:
        """:meth:`index_bits` as int64 (a copy)."""
        return self.index_bits().astype(np.int64)


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
    if bits.size == 0 or int(bits.max()) < capacity:  # one pass, no temporaries: positions only on failure
        return
    bad = bits >= capacity
    pos = np.argwhere(bad)[:5]
    positions = [tuple(int(x) for x in p) if len(p) > 1 else int(p[0]) for p in pos]
    values = [int(bits[tuple(p)]) for p in pos]
    raise out_of_range(op, target, capacity, positions, values, int(np.count_nonzero(bad)))


def out_of_range(op, target, capacity, positions, values, count) -> OutOfBoundsError:
    """The refusal of out-of-range indices (the one wording, for tile ops and whole-array calls): under
    UNDEFINED, or on the CPU simulator's MSCATTER, which ignores ScatterOOB and uses every index unchecked."""
    if op == "MSCATTER" and target == "cpu":
        return OutOfBoundsError(op, target, capacity, positions, values, count,
                                "(the CPU simulator's MSCATTER ignores ScatterOOB and uses every index unchecked)",
                                "keep the indices in range, or pass strict=False")
    return OutOfBoundsError(op, target, capacity, positions, values, count)
