"""MGATHER GM -> L1 on A5 (MGATHER.md, "GM → L1 Gather", "A5 only — SIMT executor for Elem GM → L1").

Two executors, chosen by ``GatherExec``:

* ``Scalar`` (default; Row and Elem): the cube core (AIC) walks the GM indices with scalar loads and
  issues the nd2nz row copies (Row) or fills the GM scratch and bulk-copies it (Elem). It is the same
  algorithm as A2/A3's scalar pipe: :func:`simt_pto.kernels.l1_scalar.run_mgather_l1_scalar`.
* ``Simt`` (Elem only): the AIV vector core runs ``simt_mgather_l1_elem_kernel`` (GM -> GM scratch, NZ),
  then the AIC copies the scratch onto the L1 tile: the launch ``simt_pto.host.a5.resolve_mgather_l1`` returns.

This module holds the SIMT kernel; the host (``simt_pto.host.a5``) chooses between the two executors.
"""
from __future__ import annotations

import functools

from simt_pto.geometry import WARP
from simt_pto.kernels.index_policy import remap_index
from .device import span_end
from .intrinsics import block_range, lane_span, warp_range


@functools.cache
def simt_mgather_l1_elem_kernel(rule: int):
    """GM -> L1 Elem, ``GatherExec::Simt`` (MGATHER.md, "A5 only — SIMT executor for Elem GM → L1"):
    the AIV's GM -> GM stage, ``scratch[off] = table[remap(idx[r, c])]`` over the whole padded NZ tile.

    Thread ``tid = ty * 32 + tx`` walks linear NZ offsets ``off = tid, tid + launchThreads, ...`` of the
    ``Rows * Cols`` scratch and maps each back to ``(r, c)``::

        blockCol = off // (Rows * kC0);  r = (off % (Rows * kC0)) // kC0;  c = blockCol * kC0 + off % kC0

    Lanes with ``r < validRows``, ``c < validCols`` and an in-range index store the table element;
    padding and Zero-policy lanes store ``T(0)``: one pass, no separate pre-zero. Consecutive lanes
    store consecutive offsets (coalesced GM bursts); the index is read at ``r * idxRowStride + c``.
    """

    def simt_mgather_l1_elem_kernel(launch, scratch, table, idx, idx_rs, valid_rows, valid_cols, table_size,
                                    tile_rows, tile_elems, kc0):
        lane0, lanes = lane_span()
        threads = launch[3] * WARP
        block_span = tile_rows * kc0
        for _b in block_range(launch):
            for ty in warp_range(launch):
                first = ty * WARP + lane0
                while first < tile_elems:
                    for off in range(first, span_end(first, lanes, tile_elems)):
                        block_col = off // block_span
                        rem = off - block_col * block_span
                        r = rem // kc0
                        c = block_col * kc0 + (rem - r * kc0)
                        if r < valid_rows and c < valid_cols:
                            slot, in_range = remap_index(idx[r * idx_rs + c], table_size, rule)
                            if in_range:
                                scratch[off] = table[slot]
                            else:
                                scratch[off] = 0
                        else:
                            scratch[off] = 0
                    first += threads

    return simt_mgather_l1_elem_kernel
