"""The emulator's errors. Both are raised before anything is written."""
from __future__ import annotations

from collections.abc import Iterable


class ConstraintError(ValueError):
    """A call breaks a rule of the spec's constraint tables.

    The message names the op, the target, the rule and the offending values, e.g.
    ``MSCATTER on a2a3: atomic Max supports no dtype on a2a3 (rule: Atomic Type Support); got float32``.
    """

    def __init__(self, op: str, target: str | None, rule: str, detail: str) -> None:
        self.op, self.target, self.rule, self.detail = op, target, rule, detail
        where = f"{op} on {target}" if target else op
        super().__init__(f"{where}: {detail} (rule: {rule})")


class OutOfBoundsError(IndexError):
    """An index is out of range under an OOB policy that leaves it undefined (``UNDEFINED``).

    The hardware would read or write outside the table; the emulator refuses instead and names
    the first offending positions. Pass ``strict=False`` for the documented memory-safe result.
    """

    def __init__(self, op: str, target: str, capacity: int, positions: Iterable[int | tuple[int, ...]],
                 values: Iterable[int], count: int, why: str = "under OOB policy UNDEFINED",
                 hint: str = "pick CLAMP / WRAP / ZERO / SKIP, or pass strict=False") -> None:
        self.op, self.target, self.capacity = op, target, capacity
        self.positions, self.values, self.count = list(positions), list(values), count
        shown = ", ".join(f"{p}: {v}" for p, v in zip(self.positions, self.values))
        super().__init__(
            f"{op} on {target}: {count} index(es) out of range [0, {capacity}) {why} "
            f"(first, position: uint32 index: {shown}); {hint} "
            f"for the memory-safe result (OOB reads give 0, OOB writes are dropped)")
