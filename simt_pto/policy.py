"""The index rules an OOB policy compiles to (MGATHER.md / MSCATTER.md, "Out-of-Bounds Behaviour").

Plain Python, part of the model: the constraint checks, the analyzer and the dispatch pick a rule here; the
kernels (``simt_pto.kernels.index_policy.remap_index``) take it as a compile-time constant.
"""
from __future__ import annotations

from .enums import GatherOOB, ScatterOOB

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
