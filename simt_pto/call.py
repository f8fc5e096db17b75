"""The typed call: every option of an op normalised once, at the API boundary, into one frozen :class:`Policy`.

The public functions take their options in any form the docs allow (``coalesce="elem"``, ``Coalesce.ELEM`` or
``1``; ``strict=np.True_``; ``dtype="bfloat16"``). :func:`gather_policy`, :func:`scatter_policy`,
:func:`mgather_policy` and :func:`mscatter_policy` turn them into a :class:`Policy` of enums, bools and ints, or
raise the TypeError / ValueError that names the bad argument, before anything else runs. Everything below the
boundary takes the :class:`Policy` and never normalises again.

Normalising is a pure function of the option values *and their types* (``True`` is no ``1``: ``tile_rows=True``
is refused where ``tile_rows=1`` is not), so each distinct spelling is normalised once per process and remembered
by value and type (``functools.lru_cache(typed=True)``). Two spellings of one option (``"elem"``,
``Coalesce.ELEM``) give equal policies, hence one :class:`Call` and one entry of the signature cache
(:data:`simt_pto.plan.SIGNATURES`).

A whole-array call is then a :class:`Call`: its policy and, per operand, an :class:`Operand` (kind, shape, dtype,
and what else the plan reads of it). A call is hashable: it is the key of its signature's entry.
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple

import numpy as np

from . import dtypes as _dt
from .ub import check_dyn_ubuf_size
from .enums import (Coalesce, GatherExec, GatherOOB, LastPath, ScatterAtomicOp, ScatterConflict, ScatterOOB,
                    flag_from_any, from_any, target_from_any)


class Policy(NamedTuple):
    """One op's options, normalised (MGATHER.md / MSCATTER.md "Template Parameters"; the whole-array options). A
    tuple of enums, bools and ints: hashed and compared in C, as a key part of every call."""

    op: str                                   # "MGATHER" or "MSCATTER"
    target: str                               # "cpu", "a2a3" or "a5"
    coalesce: Coalesce
    oob: GatherOOB | ScatterOOB
    strict: bool = True
    atomic: ScatterAtomicOp = ScatterAtomicOp.NONE
    conflict: ScatterConflict = ScatterConflict.LAST
    exec: GatherExec = GatherExec.SCALAR      # tile MGATHER only
    last_path: LastPath = LastPath.AUTO       # whole-array MSCATTER only
    tile_rows: int | None = None              # whole arrays: rows per tile (None: as many as fit)
    dyn_ubuf_size: int | None = None          # bytes of dynamic UB (A5); None: the default budget
    dtype: _dt.DType | None = None            # whole arrays: reinterprets the table's elements

    @property
    def row(self) -> bool:
        return self.coalesce == Coalesce.ROW


class Operand(NamedTuple):
    """What a call's plan reads of one operand besides its memory and values: its kind (``"numpy"``, ``"torch"``,
    ``"jax"``, ``"foreign"``, ``"device"``), the caller's shape, the element dtype as its library names it, whether
    it may be written, and its first element's address modulo 8 (the Row copy's move unit and a 16-bit float Add's
    word form depend on it on ``a5``; 0 on ``a2a3``, whose loops read no address)."""

    kind: str
    shape: tuple
    dtype: Any
    writeable: bool
    align: int


class Call(NamedTuple):
    """A whole-array call's signature: its :class:`Policy` and its operands, in the op's order (gather: table, idx;
    scatter: table, src, idx). Equal calls validate, plan and launch alike."""

    policy: Policy
    operands: tuple[Operand, ...]


# -- normalising ------------------------------------------------------------------------------------------------

def check_last_path(last_path: object) -> LastPath:
    """``last_path`` as a :class:`LastPath`: a member, or exactly ``"auto"``, ``"slot"`` or ``"owner"`` (lower case,
    as documented); TypeError for anything but a string or a member, ValueError for another string."""
    if isinstance(last_path, LastPath):
        return last_path
    if not isinstance(last_path, str):
        raise TypeError(f"last_path must be a string ('auto', 'slot' or 'owner'), got {type(last_path).__name__} "
                        f"{last_path!r}")
    try:
        return LastPath(last_path)
    except ValueError:
        raise ValueError(f"last_path: expected 'auto', 'slot' or 'owner', got {last_path!r}") from None


def check_tile_rows(tile_rows: object) -> int | None:
    """``tile_rows`` as an int or None: TypeError unless it is None or a positive int (numpy's integers too; not a
    bool)."""
    if tile_rows is None:
        return None
    if isinstance(tile_rows, bool) or not isinstance(tile_rows, (int, np.integer)) or tile_rows < 1:
        raise TypeError(f"tile_rows must be a positive int, got {tile_rows!r}")
    return int(tile_rows)


def _dtype(dtype: object) -> _dt.DType | None:
    return None if dtype is None else _dt.resolve(dtype)


def _gather(coalesce, oob, target, tile_rows, dyn_ubuf_size, strict, dtype) -> Policy:
    # (the order in which bad options are reported: as before the typed call)
    strict = flag_from_any(strict, "strict")
    oob = from_any(GatherOOB, oob, "oob")
    target = target_from_any(target)
    coalesce = from_any(Coalesce, coalesce, "coalesce")
    return Policy("MGATHER", target, coalesce, oob, strict, tile_rows=check_tile_rows(tile_rows),
                  dyn_ubuf_size=check_dyn_ubuf_size("MGATHER", dyn_ubuf_size), dtype=_dtype(dtype))


def _scatter(coalesce, atomic, oob, conflict, target, tile_rows, dyn_ubuf_size, strict, last_path, dtype) -> Policy:
    strict = flag_from_any(strict, "strict")
    last_path = check_last_path(last_path)
    tile_rows = check_tile_rows(tile_rows)
    atomic = from_any(ScatterAtomicOp, atomic, "atomic")
    oob = from_any(ScatterOOB, oob, "oob")
    conflict = from_any(ScatterConflict, conflict, "conflict")
    target = target_from_any(target)
    coalesce = from_any(Coalesce, coalesce, "coalesce")
    return Policy("MSCATTER", target, coalesce, oob, strict, atomic, conflict, last_path=last_path,
                  tile_rows=tile_rows, dyn_ubuf_size=check_dyn_ubuf_size("MSCATTER", dyn_ubuf_size),
                  dtype=_dtype(dtype))


def _mgather(coalesce, oob, target, exec_, strict, dyn_ubuf_size) -> Policy:
    target = target_from_any(target)
    coalesce = from_any(Coalesce, coalesce, "coalesce")
    oob = from_any(GatherOOB, oob, "oob")
    exec_ = from_any(GatherExec, exec_, "exec")
    return Policy("MGATHER", target, coalesce, oob, flag_from_any(strict, "strict"), exec=exec_,
                  dyn_ubuf_size=check_dyn_ubuf_size("MGATHER", dyn_ubuf_size))


def _mscatter(coalesce, atomic, oob, conflict, target, strict, dyn_ubuf_size) -> Policy:
    target = target_from_any(target)
    coalesce = from_any(Coalesce, coalesce, "coalesce")
    atomic = from_any(ScatterAtomicOp, atomic, "atomic")
    oob = from_any(ScatterOOB, oob, "oob")
    conflict = from_any(ScatterConflict, conflict, "conflict")
    return Policy("MSCATTER", target, coalesce, oob, flag_from_any(strict, "strict"), atomic, conflict,
                  dyn_ubuf_size=check_dyn_ubuf_size("MSCATTER", dyn_ubuf_size))


def _remembered(normalise):
    """``normalise`` remembered per distinct argument values and types (at most 1024 spellings): ``.memo`` is the
    remembering function itself (C code on a hit; TypeError for an unhashable argument). An unhashable argument
    (which the normaliser refuses, or a dtype spelled as an unhashable object) is normalised each time."""
    memo = functools.lru_cache(maxsize=1024, typed=True)(normalise)

    @functools.wraps(normalise)
    def policy(*options):
        try:
            return memo(*options)
        except TypeError:  # unhashable (or refused: then the direct call raises the same error again)
            return normalise(*options)
    policy.memo = memo
    return policy


gather_policy = _remembered(_gather)
"""``gather_policy(coalesce, oob, target, tile_rows, dyn_ubuf_size, strict, dtype)``: a whole-array gather's
:class:`Policy`."""

scatter_policy = _remembered(_scatter)
"""``scatter_policy(coalesce, atomic, oob, conflict, target, tile_rows, dyn_ubuf_size, strict, last_path, dtype)``:
a whole-array scatter's :class:`Policy`."""

mgather_policy = _remembered(_mgather)
"""``mgather_policy(coalesce, oob, target, exec, strict, dyn_ubuf_size)``: a tile MGATHER's :class:`Policy`."""

mscatter_policy = _remembered(_mscatter)
"""``mscatter_policy(coalesce, atomic, oob, conflict, target, strict, dyn_ubuf_size)``: a tile MSCATTER's
:class:`Policy`."""


__all__ = ["Call", "Operand", "Policy", "check_last_path", "check_tile_rows",
           "gather_policy", "mgather_policy", "mscatter_policy", "scatter_policy"]
