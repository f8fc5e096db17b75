"""MSCATTER on the CPU simulator (MSCATTER.md, "CPU Reference Form").

Always element-wise, whatever the coalesce mode: for every ``(i, j)`` of the source valid region in
row-major order, ``dst.data()[idx[i, j]] = src[i, j]``. Plain replace (the atomic, OOB and conflict
parameters are not modeled), and the last writer in row-major order wins.
"""
from __future__ import annotations

import numpy as np

from .common import remap, table_bits, write_back


def run_mscatter(plan) -> None:
    src = plan.tile
    values = src.grid().view(plan.dtype.bits)[: plan.rows, : plan.cols].reshape(-1)
    slots, ok = remap(plan.raw_indices().reshape(-1), plan.capacity, plan.rule)
    order = np.flatnonzero(ok)
    # Last writer in row-major order: the last occurrence of each slot.
    rev = slots[order][::-1]
    unique_slots, first_in_rev = np.unique(rev, return_index=True)
    winners = order[::-1][first_in_rev]
    flat = table_bits(plan)
    flat[unique_slots] = values[winners]
    write_back(plan, flat)
