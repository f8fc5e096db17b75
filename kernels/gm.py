"""GM memory shared by the loop targets (the cpu golden and the A2/A3 loops): publishing a modified host copy
of a device table."""
from __future__ import annotations

import numpy as np

from simt_pto.backend import imported


def write_back(plan, flat_bits: np.ndarray) -> None:
    """Publish a modified copy of device table memory (host tables were modified in place)."""
    if plan.table.on_device:
        dev = imported("numba.cuda").as_cuda_array(plan.table.array)
        dev.copy_to_device(flat_bits.view(dev.dtype).reshape(dev.shape))
