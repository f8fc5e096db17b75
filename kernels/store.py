"""The store of one MSCATTER element, ``table[e] op= v`` (MSCATTER.md, "ScatterAtomicOp", "Conflict
Resolution"): the Store / Add / Max / Min rule per element format, written once for every target.

:func:`store_rule` names four read-modify-write primitives (``rmw_add``, ``rmw_max``, ``rmw_min``,
``rmw_add_half``); who runs it binds them:

* the A5 kernels (:mod:`simt_pto.kernels.a5.simt`) bind them to the hardware atomics (``atomicAdd`` /
  ``atomicMax`` / ``atomicMin``, and the 32-bit CAS loop of a 16-bit float add), since lanes race;
* sequential code (the A2/A3 loops, the A5 ``(1, 1)`` scalar fallback) takes :func:`sequential_store`: the
  primitives of this module, a plain load, combine and store, since nothing races.

Either way the result of one store is the same bits: integer adds wrap in the element type, float32 adds round
in float32, float16 / bfloat16 adds round once in the element type (:mod:`.softfloat`), float32 Max / Min
order -0.0 below +0.0 and a NaN by its sign bit (:func:`store_max_f32`).

``atomic`` and ``fmt`` are compile-time constants of each generated rule (a ``functools.cache`` factory): once
inlined, one branch survives, and Numba prunes the dead ones before it inlines the helpers they call. Whoever
compiles a rule (or a loop or kernel that inlines one) names the policy in its on-disk cache key explicitly
(``key=`` of :mod:`simt_pto.kernels.cache`).
"""
from __future__ import annotations

import functools
import types

import numba
import numpy as np

from simt_pto.enums import ElementFormat, ScatterAtomicOp
from simt_pto.launch_spec import KernelPolicy
from .cache import njit  # numba.njit, made safe for the disk cache and Ctrl-C
from .softfloat import BF16_EXP_BITS, BF16_MAN_BITS, F16_EXP_BITS, F16_MAN_BITS, add_bits

# -- the element formats: how a (ScatterAtomicOp, dtype) is stored (simt_pto.enums.ElementFormat) -------------

EDGE = {ElementFormat.F16: ElementFormat.F16_EDGE, ElementFormat.BF16: ElementFormat.BF16_EDGE}
"""The mid-word format of each 16-bit float Add format."""


@functools.cache  # (a few dozen values: a planned scatter asks without a Python call)
def element_format(atomic: ScatterAtomicOp, dtype_name: str) -> ElementFormat:
    """The element format of a scatter of ``dtype_name`` with ``atomic``: F16 / BF16 for a 16-bit float Add,
    F32_ORDER for float32 Max / Min, NATIVE otherwise."""
    if atomic == ScatterAtomicOp.ADD and dtype_name == "float16":
        return ElementFormat.F16
    if atomic == ScatterAtomicOp.ADD and dtype_name == "bfloat16":
        return ElementFormat.BF16
    if atomic in (ScatterAtomicOp.MAX, ScatterAtomicOp.MIN) and dtype_name == "float32":
        return ElementFormat.F32_ORDER
    return ElementFormat.NATIVE


@functools.cache  # (as element_format)
def source_dtype(atomic: ScatterAtomicOp, fmt: ElementFormat, dtype):
    """The numpy dtype the source values are read as: the element type for a NATIVE atomic, the int32 bits for
    F32_ORDER, the raw bits (``dtype.bits``) otherwise (stores move bits; 16-bit float adds work on bits)."""
    if fmt == ElementFormat.F32_ORDER:
        return np.dtype(np.int32)
    if fmt == ElementFormat.NATIVE and atomic != ScatterAtomicOp.NONE:
        return dtype.numpy
    return dtype.bits


# -- the rule ----------------------------------------------------------------------------------------------

def store_max_f32(views, e, v_bits):
    """ScatterAtomicOp MAX on float32 with integer compares (``views`` = the table as (int32, uint32),
    ``v_bits`` the value's int32 bits): IEEE floats order like sign-magnitude integers, so a non-negative value
    is an int32 max and a negative one a uint32 min. (-0.0 orders below +0.0; a NaN with the sign clear wins,
    one with it set loses.)"""
    if v_bits >= 0:
        rmw_max(views[0], e, v_bits)
    else:
        rmw_min(views[1], e, numba.uint32(v_bits))


def store_min_f32(views, e, v_bits):
    """ScatterAtomicOp MIN on float32: an int32 min for non-negative values, a uint32 max for negative ones
    (see :func:`store_max_f32`)."""
    if v_bits >= 0:
        rmw_min(views[0], e, v_bits)
    else:
        rmw_max(views[1], e, numba.uint32(v_bits))


HELPERS = (store_max_f32, store_min_f32)
"""The rule's helpers, bound with the same primitives as the rule (the atomic forms; sequential code binds
:data:`SEQUENTIAL_HELPERS` under their names)."""


@njit(inline="always")
def order_key_f32(bits):
    """float32 bits (int32) as an int32 that orders as :func:`store_max_f32` orders floats (sign-magnitude): a
    negative value's magnitude bits flipped, so that a larger magnitude comes lower. Its own inverse."""
    return bits ^ ((bits >> numba.int32(31)) & numba.int32(0x7FFFFFFF))


def sequential_max_f32(views, e, v_bits):
    """ScatterAtomicOp MAX on float32 as one plain read-modify-write: the order of :func:`store_max_f32`, the larger
    of two order keys (:func:`order_key_f32`) stored back as bits. The atomic form's branch on the value's sign is a
    coin toss on random data (an Elem scatter of 256K: 1.30 ms with it, 0.37 without); this has none, and a Row
    scatter's row of them vectorises."""
    views[0][e] = order_key_f32(max(order_key_f32(views[0][e]), order_key_f32(v_bits)))


def sequential_min_f32(views, e, v_bits):
    """ScatterAtomicOp MIN on float32 as one plain read-modify-write (see :func:`sequential_max_f32`)."""
    views[0][e] = order_key_f32(min(order_key_f32(views[0][e]), order_key_f32(v_bits)))


SEQUENTIAL_HELPERS = {"store_max_f32": sequential_max_f32, "store_min_f32": sequential_min_f32}
"""What code that runs a rule on one thread binds for :data:`HELPERS`, by the names the rule calls: the same bits
for every (table, value) pair, without the branch the atomics need."""


@functools.cache
def store_rule(atomic: ScatterAtomicOp, fmt: ElementFormat):
    """The store of one scatter element, ``table[e] op= v``, for one (ScatterAtomicOp value, element format).
    ``table`` and ``v`` are as the format holds them: the element view (NATIVE), raw bits (a store; F16 / BF16,
    A5: the uint32 words, or for F16_EDGE / BF16_EDGE the (words, edge, head) triple, which A5 binds
    ``rmw_add_half`` for), the (int32, uint32) views and int32 bits (F32_ORDER)."""

    # compile-time facts of the policy (the ISA's ``if constexpr``): Numba prunes the branches they rule out
    # before typing, so each specialization types and inlines one store
    plain = atomic == ScatterAtomicOp.NONE
    add_f16 = not plain and fmt in (ElementFormat.F16, ElementFormat.F16_EDGE)
    add_bf16 = not plain and fmt in (ElementFormat.BF16, ElementFormat.BF16_EDGE)
    ordered_max = fmt == ElementFormat.F32_ORDER and atomic == ScatterAtomicOp.MAX
    ordered_min = fmt == ElementFormat.F32_ORDER and atomic == ScatterAtomicOp.MIN
    add = atomic == ScatterAtomicOp.ADD
    take_max = atomic == ScatterAtomicOp.MAX

    def store_element(table, e, v):
        if plain:
            table[e] = v
        elif add_f16:
            rmw_add_half(table, e, v, F16_EXP_BITS, F16_MAN_BITS)
        elif add_bf16:
            rmw_add_half(table, e, v, BF16_EXP_BITS, BF16_MAN_BITS)
        elif ordered_max:
            store_max_f32(table, e, v)
        elif ordered_min:
            store_min_f32(table, e, v)
        elif add:
            rmw_add(table, e, v)
        elif take_max:
            rmw_max(table, e, v)
        else:
            rmw_min(table, e, v)

    return store_element


def store_element(table, e, v):
    """``store_element(table, e, v)``: ``table[e] op= v`` by the kernel's or loop's (ScatterAtomicOp, format), bound
    from :func:`store_rule` (A5: :mod:`simt_pto.kernels.a5.simt`; sequential loops: :func:`sequential_store`). Unbound,
    as here, it only raises."""
    raise RuntimeError("store_element() is bound per kernel or loop by its store policy (simt_pto.kernels.store)")


# -- the sequential primitives: a plain read-modify-write ------------------------------------------------

@njit(inline="always")
def rmw_add(table, e, v):
    """``table[e] = table[e] + v`` in the element type (integers wrap, float32 rounds in float32)."""
    table[e] = table[e] + v


@njit(inline="always")
def rmw_max(table, e, v):
    """``table[e] = max(table[e], v)`` for the integers (signed or unsigned by the dtype; float32 orders its bits,
    :data:`SEQUENTIAL_HELPERS`): the larger stored back, never a branch around the store, which is a coin toss on
    random data."""
    table[e] = max(table[e], v)


@njit(inline="always")
def rmw_min(table, e, v):
    """``table[e] = min(table[e], v)`` (as :func:`rmw_max`)."""
    table[e] = min(table[e], v)


@njit(inline="always")
def rmw_add_half(table, e, v_bits, exp_bits, man_bits):
    """``table[e] += v`` for a 16-bit float on raw bits (``exp_bits`` / ``man_bits`` fields), rounded once (RNE)."""
    table[e] = add_bits(table[e], v_bits, exp_bits, man_bits)


def bind(fn, namespace: dict):
    """A copy of ``fn`` (same code, closure and name; a jitted function's Python source) whose globals are its own
    plus ``namespace``: how one source is given per-backend or per-policy functions (the A5 intrinsics, a loop's
    ``store_element``)."""
    fn = getattr(fn, "py_func", fn)
    scope = dict(fn.__globals__)
    scope.update(namespace)
    copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__qualname__, copy.__doc__, copy.__module__ = fn.__qualname__, fn.__doc__, fn.__module__
    return copy


@functools.cache
def sequential_helpers() -> dict:
    """:data:`SEQUENTIAL_HELPERS` jitted to inline, by name: the scope every one-thread binding of a rule takes
    (:func:`sequential_store`; the A5 plain-store kernels)."""
    return {name: njit(inline="always")(helper) for name, helper in SEQUENTIAL_HELPERS.items()}


@functools.cache
def sequential_store(atomic: ScatterAtomicOp, fmt: ElementFormat):
    """:func:`store_rule` with the sequential primitives: an ``njit(inline="always")`` function that sequential
    loops inline (the A2/A3 scatter's move) and host code calls directly (the A5 scalar fallback, on a one-element
    copy); its cache entry is named by the policy."""
    key = KernelPolicy(atomic=ScatterAtomicOp(atomic), fmt=ElementFormat(fmt)).cache_key
    return njit(inline="always", cache=True, key=key)(bind(store_rule(atomic, fmt), sequential_helpers()))


__all__ = ["EDGE", "HELPERS", "SEQUENTIAL_HELPERS", "bind", "element_format", "order_key_f32", "rmw_add",
           "rmw_add_half", "rmw_max", "rmw_min", "sequential_helpers", "sequential_max_f32", "sequential_min_f32",
           "sequential_store", "source_dtype", "store_element", "store_max_f32", "store_min_f32", "store_rule"]
