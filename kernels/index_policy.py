"""The one index-policy helper: (index, capacity, rule) -> (slot, in range). The rules are the model's
(:mod:`simt_pto.policy`).

Every A5 kernel and every A2/A3 loop calls :func:`remap_index` with ``rule`` a compile-time constant,
so the policy branch folds away (the ISA's ``if constexpr``). Clamp and Wrap transform the index;
Zero (gather) and Skip (scatter) mask around the same unchecked core.
"""
from __future__ import annotations

import numba
import numpy as np

from simt_pto.enums import IndexRule
from simt_pto.kernels.cache import njit


@njit(inline="always", cache=True)
def remap_index(raw, capacity, rule):
    """Remap one raw index (int32 or uint32) against ``capacity`` under ``rule``.

    Returns ``(slot, in_range)``; ``slot`` is an int64 that is safe to dereference only when
    ``in_range`` is True. The index is cast to uint32 first: -1 is 4294967295.
    """
    u = numba.int64(numba.uint32(raw))
    if rule == IndexRule.CLAMP:
        return min(u, capacity - 1), True
    if rule == IndexRule.WRAP:
        return u % capacity, True
    if rule == IndexRule.MASK:
        return u, u < capacity
    return u, True


def read_once(rule: IndexRule, op: str) -> IndexRule:
    """The rule a CPU kernel of ``op`` (``"MGATHER"`` / ``"MSCATTER"``: an A5 kernel on ``multicore``, an A2/A3 loop,
    the GM -> L1 walk) is compiled with for ``rule``. The unchecked one (IDENTITY: UNDEFINED's, whose indices the
    host checks before the launch, reading the caller's array where it is) becomes CLAMP for a gather and MASK
    (Skip) for a scatter, so that an index another thread writes past the table after the check reads the table's
    last row or element, or writes nothing, instead of memory outside the table. Every index the check passed gives
    the same result under each, at the cost of a compare per index (for the Row gather, Clamp's branch-free remap
    runs as fast as the unchecked one; Zero's mask would not: docs/performance.md)."""
    if rule != IndexRule.IDENTITY:
        return rule
    return IndexRule.CLAMP if op == "MGATHER" else IndexRule.MASK


@njit(cache=True)
def remap_array(raw, capacity, rule):
    """:func:`remap_index` over an array of raw indices (host code: the coalescing analyzer): ``(slots,
    in_range)`` as int64 and bool arrays of ``raw``'s shape."""
    flat = raw.reshape(-1)
    slots = np.empty(flat.size, np.int64)
    in_range = np.empty(flat.size, np.bool_)
    for i in range(flat.size):
        slots[i], in_range[i] = remap_index(flat[i], capacity, rule)
    return slots.reshape(raw.shape), in_range.reshape(raw.shape)
