"""The unified buffer (UB) budget per target (MGATHER.md / MSCATTER.md, "UB Memory Budget").

The real simulator is silent when tiles overlap or the working set exceeds the budget, and the
hardware silently corrupts; the emulator raises a ConstraintError naming the tiles and byte counts.
"""
from __future__ import annotations

import numpy as np

from .errors import ConstraintError
from .enums import TileType

KB = 1024
A2A3_UB_BYTES = 192 * KB
A5_UB_BYTES = 256 * KB
A5_RESERVED_BYTES = 8 * KB
A5_MIN_DCACHE_BYTES = 32 * KB
A5_MAX_DYN_UBUF_BYTES = A5_UB_BYTES - A5_RESERVED_BYTES - A5_MIN_DCACHE_BYTES  # 216 KB
A5_DEFAULT_SAFE_BYTES = 128 * KB


def check_dyn_ubuf_size(op: str, dyn_ubuf_size: object) -> int | None:
    """``dyn_ubuf_size`` as an int or None: TypeError unless it is None or a non-negative int (not a bool). Its
    range per target is :func:`budget`'s rule."""
    if dyn_ubuf_size is None:
        return None
    if isinstance(dyn_ubuf_size, bool) or not isinstance(dyn_ubuf_size, (int, np.integer)) or dyn_ubuf_size < 0:
        raise TypeError(f"{op}: dyn_ubuf_size must be a non-negative int (bytes) or None, got {dyn_ubuf_size!r}")
    return int(dyn_ubuf_size)


def budget(op: str, target: str, dyn_ubuf_size=None) -> int | None:
    """Bytes of UB the op's tiles may use on ``target`` (None: no UB, the CPU simulator)."""
    check_dyn_ubuf_size(op, dyn_ubuf_size)
    if target == "cpu":
        return None
    if target == "a2a3":
        if dyn_ubuf_size is not None:
            raise ConstraintError(op, target, "A2/A3 has no dynUBufSize",
                                  f"dyn_ubuf_size={dyn_ubuf_size} given; the working set must fit the static "
                                  f"{A2A3_UB_BYTES} B UB")
        return A2A3_UB_BYTES
    if not dyn_ubuf_size:  # None or 0: launched without a dynamic UB request (<<<n, nullptr, stream>>>)
        return A5_DEFAULT_SAFE_BYTES
    if dyn_ubuf_size > A5_MAX_DYN_UBUF_BYTES:
        raise ConstraintError(op, target, "max dynUBufSize = 256 KB - 8 KB reserved - 32 KB min DCache = 216 KB",
                              f"dyn_ubuf_size = {dyn_ubuf_size} B exceeds {A5_MAX_DYN_UBUF_BYTES} B")
    return dyn_ubuf_size


def check_distinct_storage(op: str, target: str, tiles: dict) -> None:
    """The part of :func:`check_working_set` that depends on the tiles' storage, not on their shapes: no two tiles
    share memory (the same tile passed twice, or views of one buffer). A cached plan re-checks this on every call."""
    names = list(tiles)
    for i, n1 in enumerate(names):
        for n2 in names[i + 1:]:
            a, b = tiles[n1].data, tiles[n2].data
            if np.may_share_memory(a, b) and np.shares_memory(a, b):  # bounds first (cheap), then exactly
                raise ConstraintError(op, target, "UB tiles do not overlap",
                                      f"{n1} and {n2} share memory (the same tile passed twice?)")


def _what_fits(target: str, total: int) -> str:
    """The one change that makes a tile op's working set of ``total`` bytes fit, for its refusal: on A5 a
    ``dyn_ubuf_size`` while one can hold it, else smaller tiles (the tiles' shapes are the caller's)."""
    if target == "a5" and total <= A5_MAX_DYN_UBUF_BYTES:
        return f"declare dyn_ubuf_size of at least {total} B (A5 takes up to {A5_MAX_DYN_UBUF_BYTES} B)"
    beyond = "the 192 KB A2/A3 UB" if target == "a2a3" else f"the {A5_MAX_DYN_UBUF_BYTES} B A5 can declare"
    return f"use smaller tiles: {total} B is more than {beyond}"


def check_working_set(op: str, target: str, tiles: dict, dyn_ubuf_size=None) -> None:
    """Check the UB tiles of one op: their storage is distinct (:func:`check_distinct_storage`), the working set
    fits the budget, placed tiles fit and do not overlap.

    ``tiles`` maps an operand name ("dst", "idx", ...) to its Tile; MAT tiles live in L1 and are skipped.
    """
    check_distinct_storage(op, target, tiles)
    limit = budget(op, target, dyn_ubuf_size)
    if limit is None:
        return
    ub = {name: t for name, t in tiles.items() if t.loc == TileType.VEC}
    total = sum(t.nbytes for t in ub.values())
    if total > limit:
        parts = " + ".join(f"{n} {t.rows}x{t.cols} {t.dtype} = {t.nbytes} B" for n, t in ub.items())
        how = ("the 192 KB A2/A3 UB" if target == "a2a3" else
               "the 128 KB safe A5 working set without dyn_ubuf_size"
               if not dyn_ubuf_size else f"dyn_ubuf_size = {dyn_ubuf_size} B")  # (0 requests nothing, as None)
        raise ConstraintError(op, target, "UB working set within budget",
                              f"working set {parts} = {total} B exceeds {how}; {_what_fits(target, total)}")
    placed = sorted(((t.addr, t.addr + t.nbytes, n) for n, t in ub.items() if t.addr is not None))
    for start, end, name in placed:
        if end > limit:
            raise ConstraintError(op, target, "placed tiles inside the UB budget",
                                  f"{name} at [{start:#x}, {end:#x}) ends past the {limit} B budget")
    for (s1, e1, n1), (s2, e2, n2) in zip(placed, placed[1:]):
        if s2 < e1:
            raise ConstraintError(op, target, "UB tiles do not overlap",
                                  f"{n1} at [{s1:#x}, {e1:#x}) overlaps {n2} at [{s2:#x}, {e2:#x})")
