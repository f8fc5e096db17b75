"""The ISA's template-parameter enums, with the ISA's values.

Every public function takes either a member, its integer value, or a case-insensitive
string ("row", "Clamp", "none_box"); :func:`from_any` is the one place strings become members.
"""
from __future__ import annotations

import ast
import enum
import functools
import inspect
import textwrap
from typing import TypeAlias, TypeVar, cast

import numpy as np


def _document_members(cls):
    """Give each member the string written under it in the class body as its ``__doc__`` (a bare string after
    an assignment is no docstring to Python: without this, ``GatherOOB.WRAP.__doc__`` would be the class's)."""
    try:
        body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    except (OSError, TypeError):  # no source (a frozen build): the members keep the class docstring
        return cls
    for stmt, after in zip(body, body[1:]):
        if (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)
                and stmt.targets[0].id in cls.__members__):
            cls[stmt.targets[0].id].__doc__ = inspect.cleandoc(after.value.value)
    return cls


@_document_members
class Coalesce(enum.IntEnum):
    """MGATHER.md / MSCATTER.md, "Enums": how the index tile addresses the table."""

    ROW = 0
    """``dst[r, :] = table[idx[r], :]``: one index per row, a 1-D index tile of length R."""
    ELEM = 1
    """``dst[i, j] = table[idx[i, j]]``: one linear element index per element, idx shape == dst shape."""


@_document_members
class GatherOOB(enum.IntEnum):
    """MGATHER.md, "Out-of-Bounds Behaviour". ``capacity`` is TableRows (Row) or TableSize (Elem).
    Indices are cast to uint32 first, so a negative int32 index is a huge one."""

    UNDEFINED = 0
    """No remap; the caller guarantees ``idx < capacity``. The emulator checks it
    (:class:`~simt_pto.OutOfBoundsError`) unless ``strict=False``."""
    CLAMP = 1
    """``idx = min(uint32(idx), capacity - 1)``: -1 with capacity 10 gives 9."""
    WRAP = 2
    """``idx = uint32(idx) % capacity``: -1 with capacity 10 gives 5 (NumPy's ``% 10`` gives 9)."""
    ZERO = 3
    """Out-of-range destinations receive ``T(0)`` (a whole zero row in Row mode)."""


@_document_members
class ScatterOOB(enum.IntEnum):
    """MSCATTER.md, "Out-of-Bounds Behaviour". There is no Zero: an OOB index has no slot to zero."""

    UNDEFINED = 0
    """No remap; the caller guarantees ``idx < capacity`` (checked by the emulator unless ``strict=False``)."""
    SKIP = 1
    """Out-of-range rows / elements are not written; the table keeps its value."""
    CLAMP = 2
    """``idx = min(uint32(idx), capacity - 1)``."""
    WRAP = 3
    """``idx = uint32(idx) % capacity``."""


@_document_members
class ScatterAtomicOp(enum.IntEnum):
    """MSCATTER.md, "Atomic Type Support". Allowed dtypes per target: :data:`simt_pto.dtypes.ATOMIC_DTYPES`."""

    NONE = 0
    """Plain store; collisions resolved by :class:`ScatterConflict` on A5, last write wins on A2/A3."""
    ADD = 1
    """``table[i] += src``, each add rounded in the element type (integers wrap)."""
    MAX = 2
    """``table[i] = max(table[i], src)`` (A5 only)."""
    MIN = 3
    """``table[i] = min(table[i], src)`` (A5 only)."""


@_document_members
class ScatterConflict(enum.IntEnum):
    """MSCATTER.md, "Conflict Resolution" (A5 only; consulted only when the atomic op is NONE)."""

    LAST = 0
    """Deterministic: the source position with the largest flat index wins each slot, as in the
    sequential ``for i in range(N): table[idx[i]] = src[i]``."""
    DEFAULT = 1
    """Plain racing stores: the surviving writer is whichever the scheduler picks."""


@_document_members
class GatherExec(enum.IntEnum):
    """MGATHER.md, "A5 only — SIMT executor for Elem GM → L1": who collects the elements."""

    SCALAR = 0
    """The cube core walks the indices with scalar loads (default; A2/A3 and A5)."""
    SIMT = 1
    """A5 only: ``simt_mgather_l1_elem_kernel`` on the AIV vector core gathers into the GM scratch."""


@_document_members
class TileType(enum.IntEnum):
    """Where a tile lives: VEC = the AIV unified buffer (UB), MAT = L1 / cube buffer."""

    VEC = 0
    MAT = 1


@_document_members
class BLayout(enum.IntEnum):
    """Bulk layout of a tile: how rows and columns are ordered in storage."""

    ROW_MAJOR = 0
    """``offset = r * Cols + c``."""
    COL_MAJOR = 1
    """``offset = c * Rows + r``."""


@_document_members
class SLayout(enum.IntEnum):
    """Sub (fractal) layout of a tile."""

    NONE_BOX = 0
    """No fractal blocks: the plain bulk layout."""
    ROW_MAJOR = 1
    """Row-major 512-byte fractal blocks inside a column-major bulk: the NZ layout."""


@_document_members
class Layout(enum.IntEnum):
    """GlobalTensor layout (GM)."""

    ND = 0
    """Row-major N-D: the last dimension is contiguous."""
    DN = 1
    """Column-major: the second-to-last dimension is contiguous."""
    NZ = 2
    """Fractal NZ: 5-D ``Shape<B, BCols, BRows, 16, C0>`` with ``C0 = 32 / sizeof(T)`` (A2/A3)."""


@_document_members
class IndexRule(enum.IntEnum):
    """The remap a GatherOOB / ScatterOOB policy compiles to (MGATHER.md / MSCATTER.md, "Out-of-Bounds
    Behaviour"; :func:`simt_pto.policy.index_rule`). Every kernel and loop takes it as a compile-time constant
    (``simt_pto.kernels.index_policy.remap_index``), so the branch folds away, as the ISA's ``if constexpr``."""

    IDENTITY = 0
    """GatherOOB / ScatterOOB UNDEFINED: no remap (the host has checked the indices)."""
    CLAMP = 1
    """``min(uint32(i), capacity - 1)``."""
    WRAP = 2
    """``uint32(i) % capacity``."""
    MASK = 3
    """GatherOOB ZERO / ScatterOOB SKIP (and UNDEFINED with ``strict=False``): an out-of-range lane is reported as
    not in range; the caller writes zero (gather) or skips the store (scatter)."""


@_document_members
class ElementFormat(enum.IntEnum):
    """How one MSCATTER element is stored for a (ScatterAtomicOp, dtype) (``simt_pto.kernels.store``): what the
    table argument and the source values are, and which read-modify-write the store rule uses."""

    NATIVE = 0
    """Arithmetic on the element type itself (a store, an integer or float32 add, integer Max / Min)."""
    F16 = 1
    """float16 Add on raw bits (A5: a 32-bit CAS loop on the word holding the element)."""
    BF16 = 2
    """bfloat16 Add on raw bits, likewise."""
    F32_ORDER = 3
    """float32 Max / Min with integer compares, on the table viewed as (int32, uint32)."""
    F16_EDGE = 4
    """float16 Add on a table that starts or ends mid-word (A5: the table's words plus staged boundary words;
    sequential code stores in place, as F16)."""
    BF16_EDGE = 5
    """bfloat16 Add on a table that starts or ends mid-word, likewise."""


TARGETS = ("cpu", "a2a3", "a5")


class LastPath(str, enum.Enum):
    """How a whole-array Conflict::Last scatter (atomic NONE, ``a5``) decides each slot's last writer: the
    per-tile slot-centric kernels issued tile after tile, or the owner path (claim each slot for its largest flat
    source position, then write it from that owner). Both give the sequential result bit for bit; ``AUTO`` picks
    by cost. A ``str`` enum: a member equals its name as the ``last_path=`` argument spells it."""
    AUTO = "auto"
    SLOT = "slot"
    OWNER = "owner"


class OwnerLayout(str, enum.Enum):
    """The owner state of the Conflict::Last owner path: ``DENSE``, one owner per table slot (O(slots) memory, no
    sort), or ``COMPACT``, one owner per distinct slot reached (O(updates) memory, a sort on the host)."""
    DENSE = "dense"
    COMPACT = "compact"


# What the public functions accept for an enum argument: a member, its integer value or its name (:func:`from_any`).
CoalesceLike: TypeAlias = Coalesce | int | str
GatherOOBLike: TypeAlias = GatherOOB | int | str
ScatterOOBLike: TypeAlias = ScatterOOB | int | str
ScatterAtomicOpLike: TypeAlias = ScatterAtomicOp | int | str
ScatterConflictLike: TypeAlias = ScatterConflict | int | str
GatherExecLike: TypeAlias = GatherExec | int | str
TileTypeLike: TypeAlias = TileType | int | str
BLayoutLike: TypeAlias = BLayout | int | str
SLayoutLike: TypeAlias = SLayout | int | str
LayoutLike: TypeAlias = Layout | int | str


E = TypeVar("E", bound=enum.IntEnum)


def _norm(text: str) -> str:
    return text.strip().lower().replace("-", "").replace("_", "").replace(" ", "")


@functools.cache
def _members_by_name(enum_cls: type[enum.IntEnum]) -> dict[str, enum.IntEnum]:
    return {_norm(member.name): member for member in enum_cls}


_SPELLINGS: dict[tuple[type, str], enum.IntEnum] = {}
"""(enum, string as given) -> member, for the strings :func:`from_any` has resolved: a call that spells its options
as strings pays the normalisation once. At most :data:`_MAX_SPELLINGS` entries."""
_MAX_SPELLINGS = 512


def from_any(enum_cls: type[E], value: object, what: str | None = None) -> E:
    """Turn a member, its integer value, or a case-insensitive name into a member of ``enum_cls``.

    ``what`` names the argument in the error (default: the enum's name).
    """
    if isinstance(value, enum_cls):
        return value
    if type(value) is str:
        known = _SPELLINGS.get((enum_cls, value))
        if known is not None:
            return cast(E, known)
    what = what or enum_cls.__name__
    if isinstance(value, enum.Enum):
        raise TypeError(f"{what}: expected a {enum_cls.__name__}, got {value!r}")
    if isinstance(value, str):
        member = _members_by_name(enum_cls).get(_norm(value))
        if member is not None:
            if type(value) is str and len(_SPELLINGS) < _MAX_SPELLINGS:
                _SPELLINGS[enum_cls, value] = member
            return cast(E, member)
        names = ", ".join(m.name.lower() for m in enum_cls)
        raise ValueError(f"{what}: unknown value {value!r}; expected one of {names}")
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        try:
            return enum_cls(int(value))
        except ValueError:
            values = ", ".join(f"{m.value} ({m.name.lower()})" for m in enum_cls)
            raise ValueError(f"{what}: unknown value {value}; expected one of {values}") from None
    raise TypeError(f"{what}: expected a {enum_cls.__name__}, an int or a string, got {type(value).__name__}")


def flag_from_any(value: object, what: str) -> bool:
    """A yes / no option (``strict``) as a Python bool: ``True`` / ``False``, or numpy's ``np.True_`` / ``np.False_``
    (a flag read from an array). Anything else is a TypeError naming the argument, the type and the value, raised
    before the op does anything: ``strict="False"`` is a non-empty string, which ``bool()`` reads as True, and
    ``strict=2`` or ``None`` means no one thing."""
    if value is True or value is False:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"{what} must be a bool, got {type(value).__name__} {value!r}")


def target_from_any(target: str) -> str:
    """Normalise a target name: ``"a5"``, ``"a2a3"`` (also ``"a2"``, ``"a3"``) or ``"cpu"``."""
    if not isinstance(target, str):
        raise TypeError(f"target: expected a string, got {type(target).__name__}")
    if type(target) is str and target in TARGETS:  # already the canonical name
        return target
    key = _norm(target)
    if key in ("a2", "a3"):
        key = "a2a3"
    if key not in TARGETS:
        raise ValueError(f"target: unknown target {target!r}; expected one of {', '.join(TARGETS)}")
    return key
