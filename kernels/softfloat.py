"""Correctly rounded (round-to-nearest-even) float16 / bfloat16 addition on raw bits: what an ``AtomicAdd`` in a
16-bit float element type does, each addition rounded once in the element type.

:func:`add_bits` widens both operands to float32, adds them there and rounds the sum once to the 16-bit format.
That is the correctly rounded sum: float32 holds every float16 and bfloat16 exactly, and rounding a sum twice
(to float32, then to the format) gives the once-rounded result when the wider significand has at least
``2p + 2`` bits (float32's 24 against 2 * 11 + 2 for float16, 2 * 8 + 2 for bfloat16). Infinities and NaNs take
the integer rules below, never the float adder, whose NaN bits are the machine's own.

Semantics (IEEE 754 addition, RNE):

* any NaN operand -> a quiet NaN (the first NaN operand with its quiet bit set);
* ``inf + -inf`` -> the default quiet NaN (positive sign, quiet bit only);
* ``x + (-x)`` -> ``+0``; ``-0 + -0`` -> ``-0``;
* overflow -> signed infinity; subnormals are fully supported (no flush to zero: a float16 sum meets no float32
  subnormal, and a bfloat16 one is exact in float32 when it does; the CPU and the GPU's ``add.f32`` keep them).

The functions are written once for every compiler: the float32 bit casts and the add are the three names
:func:`float32_from_bits`, :func:`float32_bits` and :func:`float32_sum`, which the A5 kernels' CUDA family binds to
its own (``kernels/a5/cuda_intrinsics.py``: libdevice on a GPU, numpy on the simulator) together with the
functions here that call them (:data:`HELPERS`), so that the whole adder is inlined into a kernel's IR.
"""
from __future__ import annotations

import numba
import numpy as np

from simt_pto.kernels.cache import njit

F16_EXP_BITS = 5
F16_MAN_BITS = 10
BF16_EXP_BITS = 8
BF16_MAN_BITS = 7

F16_SUBNORMAL_UNIT = 2.0 ** -24
"""The value of float16 bit pattern ``0x0001``."""


@njit(inline="always", cache=True)
def float32_from_bits(bits):
    """The float32 whose bits are the low 32 of ``bits``."""
    return np.uint32(bits).view(np.float32)


@njit(inline="always", cache=True)
def float32_bits(f):
    """The bits of float32 ``f``, as a non-negative int64."""
    return numba.int64(np.float32(f).view(np.uint32))


@njit(inline="always", cache=True)
def float32_sum(x, y):
    """``x + y`` in float32 (one rounding)."""
    return np.float32(x) + np.float32(y)


@njit(inline="always", cache=True)
def f16_to_f32(h):
    """The float32 equal to the finite float16 bits ``h`` (every float16 is a float32 normal or zero)."""
    exp = (h >> F16_MAN_BITS) & 0x1F
    man = h & 0x3FF
    if exp == 0:
        magnitude = np.float32(man) * np.float32(F16_SUBNORMAL_UNIT)
    else:
        magnitude = float32_from_bits(((exp + 112) << 23) | (man << 13))
    return -magnitude if (h >> 15) & 1 else magnitude


@njit(inline="always", cache=True)
def f32_to_f16(f):
    """Finite float32 ``f`` rounded to float16 bits (round-to-nearest-even; overflow -> signed infinity,
    subnormal results kept). Integer-only, as numpy's ``npy_floatbits_to_halfbits``."""
    bits = float32_bits(f)
    sign = (bits >> 16) & 0x8000
    exp = bits & 0x7F800000
    if exp >= 0x47800000:  # |f| >= 2^16
        return sign | 0x7C00
    if exp <= 0x38000000:  # |f| < 2^-14: a float16 subnormal, or zero
        if exp < 0x33000000:  # |f| < 2^-25 rounds to zero (2^-25 itself is a tie, to even: zero)
            return sign
        sig = (0x00800000 | (bits & 0x007FFFFF)) >> (113 - (exp >> 23))
        if (sig & 0x3FFF) != 0x1000 or (bits & 0x7FF) != 0:  # not an exact tie with an even result
            sig += 0x1000
        return sign + (sig >> 13)
    sig = bits & 0x007FFFFF
    if (sig & 0x3FFF) != 0x1000:
        sig += 0x1000
    return sign + ((exp - 0x38000000) >> 13) + (sig >> 13)  # a carry out of the significand bumps the exponent


@njit(inline="always", cache=True)
def bf16_to_f32(h):
    """The float32 equal to the bfloat16 bits ``h`` (a bfloat16 is the high half of a float32)."""
    return float32_from_bits(h << 16)


@njit(inline="always", cache=True)
def f32_to_bf16(f):
    """Float32 ``f`` (finite or infinite) rounded to bfloat16 bits (round-to-nearest-even; a carry out of the
    significand bumps the exponent, up to infinity)."""
    bits = float32_bits(f)
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16


@njit(cache=True)
def add_nonfinite_bits(a, b, exp_bits, man_bits):
    """:func:`add_bits` where ``a`` or ``b`` (16-bit patterns) is an infinity or a NaN, by integer rules: a NaN
    operand, the first, quieted; ``inf + -inf`` the default quiet NaN; else the infinity. Called, not inlined,
    by the CPU kernels (it is rare, and each inlined copy is compile time); a GPU lane inlines it."""
    emask = (numba.int64(1) << exp_bits) - 1
    infinity = emask << man_bits
    qbit = numba.int64(1) << (man_bits - 1)
    mmask = (numba.int64(1) << man_bits) - 1
    if (a & infinity) == infinity and (a & mmask) != 0:
        return a | qbit
    if (b & infinity) == infinity and (b & mmask) != 0:
        return b | qbit
    if (a & infinity) == infinity and (b & infinity) == infinity and a != b:
        return infinity | qbit
    return a if (a & infinity) == infinity else b


@njit(inline="always", cache=True)
def add_bits(a, b, exp_bits, man_bits):
    """Correctly rounded sum of two float16 (``exp_bits`` / ``man_bits`` 5 / 10) or bfloat16 (8 / 7) bit patterns:
    raw bits in (the low 16 of ``a`` and ``b``), raw bits out. Finite operands through float32 (module docstring),
    infinities and NaNs by :func:`add_nonfinite_bits`."""
    a = numba.int64(a) & 0xFFFF
    b = numba.int64(b) & 0xFFFF
    infinity = ((numba.int64(1) << exp_bits) - 1) << man_bits
    if (a & infinity) == infinity or (b & infinity) == infinity:
        return add_nonfinite_bits(a, b, exp_bits, man_bits)
    if exp_bits == F16_EXP_BITS:
        return f32_to_f16(float32_sum(f16_to_f32(a), f16_to_f32(b)))
    return f32_to_bf16(float32_sum(bf16_to_f32(a), bf16_to_f32(b)))


HELPERS = (f16_to_f32, f32_to_f16, bf16_to_f32, f32_to_bf16, add_nonfinite_bits, add_bits)
"""The functions a compiler family that binds its own ``float32_from_bits`` / ``float32_bits`` / ``float32_sum``
binds again, in this order (each calls only the names before it, and those three)."""


__all__ = ["BF16_EXP_BITS", "BF16_MAN_BITS", "F16_EXP_BITS", "F16_MAN_BITS", "HELPERS", "add_bits", "add_nonfinite_bits", "bf16_to_f32",
           "f16_to_f32", "f32_to_bf16", "f32_to_f16", "float32_bits", "float32_from_bits", "float32_sum"]
