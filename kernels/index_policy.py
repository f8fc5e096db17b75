"""The one index-policy helper: (index, capacity, rule) -> (slot, in range).

Every A5 kernel and every A2/A3 loop calls :func:`remap_index` with ``rule`` a compile-time constant,
so the policy branch folds away (the ISA's ``if constexpr``). Clamp and Wrap transform the index;
Zero (gather) and Skip (scatter) mask around the same unchecked core.
"""
from __future__ import annotations

import numba
from numba import njit

from simt_pto.enums import GatherOOB, ScatterOOB

IDENTITY = 0
"""GatherOOB / ScatterOOB UNDEFINED: no remap (the host has checked the indices)."""
CLAMP = 1
"""``min(uint32(i), capacity - 1)``."""
WRAP = 2
"""``uint32(i) % capacity``."""
MASK = 3
"""GatherOOB ZERO / ScatterOOB SKIP (and UNDEFINED with strict=False): out-of-range lanes are
reported as not in range; the caller writes zero (gather) or skips the store (scatter)."""

RULE_NAMES = {IDENTITY: "identity", CLAMP: "clamp", WRAP: "wrap", MASK: "mask"}


def index_rule(oob, strict: bool = True) -> int:
    """The rule a GatherOOB / ScatterOOB policy compiles to. UNDEFINED with ``strict=False`` masks,
    which is the emulator's documented memory-safe result (OOB reads give 0, OOB writes are dropped)."""
    if oob is GatherOOB.CLAMP or oob is ScatterOOB.CLAMP:
        return CLAMP
    if oob is GatherOOB.WRAP or oob is ScatterOOB.WRAP:
        return WRAP
    if oob is GatherOOB.ZERO or oob is ScatterOOB.SKIP:
        return MASK
    return IDENTITY if strict else MASK


@njit(inline="always", cache=True)
def remap_index(raw, capacity, rule):
    """Remap one raw index (int32 or uint32) against ``capacity`` under ``rule``.

    Returns ``(slot, in_range)``; ``slot`` is an int64 that is safe to dereference only when
    ``in_range`` is True. The index is cast to uint32 first: -1 is 4294967295.
    """
    u = numba.int64(numba.uint32(raw))
    if rule == CLAMP:
        return min(u, capacity - 1), True
    if rule == WRAP:
        return u % capacity, True
    if rule == MASK:
        return u, u < capacity
    return u, True
