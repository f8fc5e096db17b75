"""MGATHER on the CPU simulator (MGATHER.md, "CPU Reference Form").

Row reads ``table[idx[r], :]`` into ``dst[r, :]`` (``tableRows = Shape[3]``, row stride ``Shape[4]``);
Elem reads ``table.data()[idx[i, j]]``. GatherOOB is modeled as on A5: Clamp / Wrap remap the
uint32-cast index, Zero writes ``T(0)``.
"""
from __future__ import annotations

import numpy as np

from simt_pto.enums import Coalesce
from .common import remap, table_bits


def gather_values(plan) -> np.ndarray:
    """The ``(rows, cols)`` raw-bit values the op writes into the destination's valid region."""
    flat = table_bits(plan)
    slots, ok = remap(plan.raw_indices(), plan.capacity, plan.rule)
    if plan.coalesce == Coalesce.ROW:
        cols = np.arange(plan.cols, dtype=np.int64)
        values = flat[(slots * plan.row_stride)[:, None] + cols[None, :]]
        values[~ok] = 0
    else:
        values = flat[slots]
        values[~ok] = 0
    return values


def run_mgather(plan) -> None:
    if plan.l1:
        raise NotImplementedError("the CPU simulator has no L1 / MAT gather path")
    dst = plan.tile
    dst.grid().view(plan.dtype.bits)[: plan.rows, : plan.cols] = gather_values(plan)
