"""Correctly rounded (round-to-nearest-even) float16 / bfloat16 addition on raw bits.

:func:`add_bits` uses nothing but int64 arithmetic (no float ops, no views), so the same ``@njit``
function runs from Numba CPU code, from Numba CUDA kernels (compiled as a device function) and
from the CUDA simulator. It is what an ``AtomicAdd`` in a 16-bit float element type does:
each addition is rounded once, in the element type. The CPU kernels' adder, :func:`add_bits_cpu`,
gives a float16 sum of finite operands to the CPU's float32 adder (same result, bit for bit).

Semantics (IEEE 754 addition, RNE):

* any NaN operand -> a quiet NaN (the first NaN operand with its quiet bit set);
* ``inf + -inf`` -> the default quiet NaN (positive sign, quiet bit only);
* ``x + (-x)`` -> ``+0``; ``-0 + -0`` -> ``-0``;
* overflow -> signed infinity; subnormals are fully supported (no flush to zero).
"""
from __future__ import annotations

import numba
import numpy as np

from simt_pto.kernels.cache import njit

F16_EXP_BITS = 5
F16_MAN_BITS = 10
BF16_EXP_BITS = 8
BF16_MAN_BITS = 7


@njit(inline="always", cache=True)
def add_bits(a, b, exp_bits, man_bits):
    """Correctly rounded sum of two binary floats with ``exp_bits`` / ``man_bits`` fields (raw bits
    in, raw bits out). All intermediates are int64."""
    one = numba.int64(1)
    eb_ = numba.int64(exp_bits)
    mb_ = numba.int64(man_bits)
    a = numba.int64(a)
    b = numba.int64(b)
    width = eb_ + mb_ + one
    allmask = (one << width) - one
    a = a & allmask
    b = b & allmask
    emask = (one << eb_) - one
    mmask = (one << mb_) - one
    hidden = one << mb_
    qbit = one << (mb_ - one)
    sshift = eb_ + mb_

    sa = (a >> sshift) & one
    sb = (b >> sshift) & one
    ea = (a >> mb_) & emask
    eb = (b >> mb_) & emask
    ma = a & mmask
    mb = b & mmask

    # NaN / infinity
    if ea == emask and ma != 0:
        return a | qbit
    if eb == emask and mb != 0:
        return b | qbit
    if ea == emask:
        if eb == emask and sa != sb:
            return (emask << mb_) | qbit          # inf + -inf: default quiet NaN
        return a
    if eb == emask:
        return b

    # zeros
    a_zero = ea == 0 and ma == 0
    b_zero = eb == 0 and mb == 0
    if a_zero and b_zero:
        if sa == sb:
            return a                               # +0 + +0 = +0, -0 + -0 = -0
        return numba.int64(0)                      # +0 + -0 = +0 under RNE
    if a_zero:
        return b
    if b_zero:
        return a

    # significands with 3 extra bits (guard, round, sticky); subnormals have exponent 1
    if ea == 0:
        xa = one
        ga = ma
    else:
        xa = ea
        ga = ma | hidden
    if eb == 0:
        xb = one
        gb = mb
    else:
        xb = eb
        gb = mb | hidden
    ga = ga << 3
    gb = gb << 3

    # order by magnitude: (xa, ga) >= (xb, gb)
    if xb > xa or (xb == xa and gb > ga):
        xa, xb = xb, xa
        ga, gb = gb, ga
        sa, sb = sb, sa

    d = xa - xb
    if d > 0:
        if d >= mb_ + 5:
            gb = one if gb != 0 else numba.int64(0)
        else:
            sticky = one if (gb & ((one << d) - one)) != 0 else numba.int64(0)
            gb = (gb >> d) | sticky

    if sa == sb:
        g = ga + gb
    else:
        g = ga - gb
        if g == 0:
            return numba.int64(0)                  # exact cancellation: +0 under RNE
    x = xa
    sign = sa

    # normalize: the leading one belongs at bit man_bits + 3
    top = hidden << 3
    if g >= (top << 1):
        sticky = g & one
        g = (g >> 1) | sticky
        x += one
    else:
        while g < top and x > one:
            g = g << 1
            x -= one

    # round to nearest, ties to even
    grs = g & numba.int64(7)
    sig = g >> 3
    if grs > 4 or (grs == 4 and (sig & one) != 0):
        sig += one
        if sig == (hidden << 1):
            sig = sig >> 1
            x += one
    if sig < hidden:
        xfield = numba.int64(0)                    # subnormal (x == 1)
    else:
        xfield = x
    if xfield >= emask:
        return (sign << sshift) | (emask << mb_)   # overflow -> infinity
    return (sign << sshift) | (xfield << mb_) | (sig & mmask)


F16_SUBNORMAL_UNIT = 2.0 ** -24
"""The value of float16 bit pattern ``0x0001``."""


@njit(inline="always", cache=True)
def f16_to_f32(h):
    """The float32 equal to the finite float16 bits ``h`` (every float16 is a float32 normal or zero)."""
    exp = (h >> F16_MAN_BITS) & 0x1F
    man = h & 0x3FF
    if exp == 0:
        magnitude = np.float32(man) * np.float32(F16_SUBNORMAL_UNIT)
    else:
        magnitude = np.uint32(((exp + 112) << 23) | (man << 13)).view(np.float32)
    return -magnitude if (h >> 15) & 1 else magnitude


@njit(inline="always", cache=True)
def f32_to_f16(f):
    """Finite float32 ``f`` rounded to float16 bits (round-to-nearest-even; overflow -> signed infinity,
    subnormal results kept). Integer-only, as numpy's ``npy_floatbits_to_halfbits``."""
    bits = numba.int64(np.float32(f).view(np.uint32))
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
def add_f16_bits_finite(a, b):
    """float16 ``a + b`` for finite operands: the float32 sum rounded once to float16. Exact as :func:`add_bits`:
    float32 holds every float16 exactly, and double rounding of a sum is innocuous when the wider significand has
    at least ``2p + 2`` bits (24 >= 2 * 11 + 2). No float32 subnormal arises (float16's smallest magnitude is
    2^-24), so a thread's flush-to-zero mode cannot change the result."""
    return f32_to_f16(f16_to_f32(a) + f16_to_f32(b))


@njit(inline="always", cache=True)
def add_bits_cpu(a, b, exp_bits, man_bits):
    """The CPU kernels' adder (``simt.namespace("cpu")``): a float16 sum of finite operands inlined
    (:func:`add_f16_bits_finite`, about 3x faster than the integer adder; it sits between an atomic's load and its
    compare-and-swap, so its latency is the atomic's), anything else (infinities, NaNs, bfloat16) through
    :func:`add_bits_called`, with the integer adder's rules."""
    if exp_bits == F16_EXP_BITS and man_bits == F16_MAN_BITS:
        a = numba.int64(a) & 0xFFFF
        b = numba.int64(b) & 0xFFFF
        if (a & 0x7C00) != 0x7C00 and (b & 0x7C00) != 0x7C00:
            return add_f16_bits_finite(a, b)
    return add_bits_called(a, b, exp_bits, man_bits)


@njit(cache=True)
def add_bits_called(a, b, exp_bits, man_bits):
    """:func:`add_bits` as a function that is called, not inlined: the A5 kernels compiled for the CPU call it
    (``simt.namespace("cpu")``), so the soft-float compiles once per process instead of into every 16-bit float
    Add specialization (about 5 s of compile each). A GPU lane keeps the inlined adder. The two formats are
    spelled out so that each adder is compiled with its field widths as constants (as when inlined). The CPU
    kernels reach it through :func:`add_bits_cpu`, which keeps the float16 sums of finite operands for itself."""
    if exp_bits == F16_EXP_BITS and man_bits == F16_MAN_BITS:
        return add_bits(a, b, F16_EXP_BITS, F16_MAN_BITS)
    if exp_bits == BF16_EXP_BITS and man_bits == BF16_MAN_BITS:
        return add_bits(a, b, BF16_EXP_BITS, BF16_MAN_BITS)
    return add_bits(a, b, exp_bits, man_bits)


@njit(inline="always", cache=True)
def add_f16_bits(a, b):
    """float16 ``a + b`` on raw bits (uint16-range ints), correctly rounded (RNE)."""
    return add_bits(a, b, F16_EXP_BITS, F16_MAN_BITS)


@njit(inline="always", cache=True)
def add_bf16_bits(a, b):
    """bfloat16 ``a + b`` on raw bits (uint16-range ints), correctly rounded (RNE)."""
    return add_bits(a, b, BF16_EXP_BITS, BF16_MAN_BITS)
