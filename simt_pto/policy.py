"""The index rule an OOB policy compiles to (MGATHER.md / MSCATTER.md, "Out-of-Bounds Behaviour").

Plain Python, part of the model: the constraint checks, the analyzer and the dispatch pick a rule here
(:class:`simt_pto.enums.IndexRule`); the kernels (``simt_pto.kernels.index_policy.remap_index``) take it as a
compile-time constant.
"""
from __future__ import annotations

from .enums import GatherOOB, IndexRule, ScatterOOB


def index_rule(oob, strict: bool = True) -> IndexRule:
    """The rule a GatherOOB / ScatterOOB policy compiles to. UNDEFINED with ``strict=False`` masks,
    which is the emulator's documented memory-safe result (OOB reads give 0, OOB writes are dropped)."""
    if oob is GatherOOB.CLAMP or oob is ScatterOOB.CLAMP:
        return IndexRule.CLAMP
    if oob is GatherOOB.WRAP or oob is ScatterOOB.WRAP:
        return IndexRule.WRAP
    if oob is GatherOOB.ZERO or oob is ScatterOOB.SKIP:
        return IndexRule.MASK
    return IndexRule.IDENTITY if strict else IndexRule.MASK
