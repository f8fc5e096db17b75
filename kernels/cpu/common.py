"""Shared pieces of the numpy golden: the OOB remap over whole index arrays (the golden's own numpy statement
of the spec's rules, independent of the kernels' ``remap_index``), and GM write-back."""
from __future__ import annotations

import numpy as np

from simt_pto.enums import IndexRule
from simt_pto.kernels.gm import write_back  # noqa: F401  (the golden's GM write-back)



def remap(raw: np.ndarray, capacity: int, rule: int) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised remap of uint32-cast indices (int64 ``raw``): ``(slots, in_range)``."""
    if rule == IndexRule.CLAMP:
        return np.minimum(raw, capacity - 1), np.ones(raw.shape, bool)
    if rule == IndexRule.WRAP:
        return raw % capacity, np.ones(raw.shape, bool)
    ok = raw < capacity
    if rule == IndexRule.MASK:
        return np.where(ok, raw, 0), ok
    return raw, np.ones(raw.shape, bool)


def table_bits(plan) -> np.ndarray:
    """The table memory as a flat array of raw bits (a view for host memory, a copy for device memory)."""
    return plan.table.host_flat().view(plan.dtype.bits)
