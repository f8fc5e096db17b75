"""kernels/softfloat.py: RNE float16 / bfloat16 addition vs ml_dtypes / numpy, for the inlined integer adder
and for the CPU kernels' adder (whose float16 sums of finite operands go through float32)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest
from numba import njit

from conftest import requires_cuda, requires_toolchain

from simt_pto.kernels.softfloat import add_bf16_bits, add_bits_cpu, add_f16_bits, f16_to_f32, f32_to_f16

FORMATS = {
    "float16": (np.float16, add_f16_bits, 5, 10),
    "bfloat16": (ml_dtypes.bfloat16, add_bf16_bits, 8, 7),
}


@njit(cache=True)
def _add_many_f16(a, b, out):
    for i in range(a.size):
        out[i] = add_f16_bits(a[i], b[i])


@njit(cache=True)
def _add_many_bf16(a, b, out):
    for i in range(a.size):
        out[i] = add_bf16_bits(a[i], b[i])


@njit(cache=True)
def _add_many_cpu(a, b, out, exp_bits, man_bits):
    for i in range(a.size):
        out[i] = add_bits_cpu(a[i], b[i], exp_bits, man_bits)


_MANY = {"float16": _add_many_f16, "bfloat16": _add_many_bf16}
ADDERS = ("inlined", "cpu")


def _reference(a_bits, b_bits, dt):
    """Correctly rounded a + b: the float32 sum (exact enough: double rounding is innocuous since
    24 >= 2p + 2 for p = 11 / 8) rounded once to the 16-bit type."""
    a32 = a_bits.view(dt).astype(np.float32)
    b32 = b_bits.view(dt).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return (a32 + b32).astype(dt).view(np.uint16)


def _special_bits(exp_bits, man_bits):
    emask = (1 << exp_bits) - 1
    mmask = (1 << man_bits) - 1
    vals = []
    for s in (0, 1):
        sb = s << (exp_bits + man_bits)
        vals += [sb,                                   # zero
                 sb | 1, sb | 2, sb | 3, sb | (mmask >> 1), sb | mmask,   # subnormals
                 sb | (1 << man_bits), sb | (1 << man_bits) | 1,       # smallest normals
                 sb | (emask << man_bits),            # inf
                 sb | (emask << man_bits) | 1,        # signalling NaN
                 sb | (emask << man_bits) | (1 << (man_bits - 1)),     # quiet NaN
                 sb | ((emask - 1) << man_bits) | mmask,               # max finite
                 sb | ((emask - 1) << man_bits) | (mmask - 1),
                 sb | ((emask - 1) << man_bits),
                 sb | ((emask >> 1) << man_bits),     # 1.0
                 sb | ((emask >> 1) << man_bits) | 1,
                 sb | (((emask >> 1) + man_bits + 1) << man_bits),     # 2^(p)
                 sb | (((emask >> 1) + man_bits + 2) << man_bits) | mmask]
    return np.array(vals, dtype=np.uint16)


def _random_bits(rng, n, exp_bits, man_bits):
    """Random bit patterns, biased so a good share have nearby exponents, are subnormal, are
    special, or sit near overflow."""
    emask = (1 << exp_bits) - 1
    a = rng.integers(0, 1 << 16, n, dtype=np.uint32).astype(np.uint16)
    b = rng.integers(0, 1 << 16, n, dtype=np.uint32).astype(np.uint16)
    # a quarter: b's exponent within +-3 of a's (cancellation, carries)
    q = n // 4
    ea = (a[:q].astype(np.int64) >> man_bits) & emask
    eb = np.clip(ea + rng.integers(-3, 4, q), 0, emask)
    b[:q] = ((b[:q].astype(np.int64) & ~(emask << man_bits)) | (eb << man_bits)).astype(np.uint16)
    # an eighth: subnormal / tiny operands
    s = slice(q, q + n // 8)
    k = n // 8
    a[s] = ((a[s].astype(np.int64) & ((1 << man_bits) - 1) | (rng.integers(0, 2, k) << (exp_bits + man_bits))
             | (rng.integers(0, 2, k) << man_bits))).astype(np.uint16)
    # an eighth: near overflow
    s2 = slice(q + k, q + 2 * k)
    a[s2] = ((a[s2].astype(np.int64) & ((1 << man_bits) - 1) | (rng.integers(0, 2, k) << (exp_bits + man_bits))
              | ((emask - rng.integers(1, 3, k)) << man_bits))).astype(np.uint16)
    b[s2] = ((b[s2].astype(np.int64) & ((1 << man_bits) - 1) | (rng.integers(0, 2, k) << (exp_bits + man_bits))
              | ((emask - rng.integers(1, 4, k)) << man_bits))).astype(np.uint16)
    # specials mixed in
    sp = _special_bits(exp_bits, man_bits)
    m = n // 32
    a[-m:] = rng.choice(sp, m)
    b[-2 * m:-m] = rng.choice(sp, m)
    return a, b


def _check(a, b, fmt, adder):
    dt, _, exp_bits, man_bits = FORMATS[fmt]
    got = np.empty(a.size, np.uint16)
    if adder == "inlined":
        _MANY[fmt](a, b, got)
    else:
        _add_many_cpu(a, b, got, exp_bits, man_bits)
    ref = _reference(a, b, dt)
    emask = (1 << exp_bits) - 1
    qbit = 1 << (man_bits - 1)

    def isnan(x):
        x = x.astype(np.int64)
        return (((x >> man_bits) & emask) == emask) & ((x & ((1 << man_bits) - 1)) != 0)

    gn, rn = isnan(got), isnan(ref)
    bad = np.nonzero(gn != rn)[0]
    assert bad.size == 0, [(hex(a[i]), hex(b[i]), hex(got[i]), hex(ref[i])) for i in bad[:10]]
    # NaN results are quiet
    assert np.all(got[gn] & qbit), "NaN result is not quiet"
    ok = gn | (got == ref)
    bad = np.nonzero(~ok)[0]
    assert bad.size == 0, [(hex(a[i]), hex(b[i]), hex(got[i]), hex(ref[i])) for i in bad[:10]]


@pytest.mark.parametrize("adder", ADDERS)
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_random_pairs(fmt, adder):
    _, _, e, m = FORMATS[fmt]
    rng = np.random.default_rng(1234 + e)
    a, b = _random_bits(rng, 200_000, e, m)
    _check(a, b, fmt, adder)
    _check(b, a, fmt, adder)


@pytest.mark.parametrize("adder", ADDERS)
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_specials_all_pairs(fmt, adder):
    _, _, e, m = FORMATS[fmt]
    sp = _special_bits(e, m)
    a, b = np.meshgrid(sp, sp, indexing="ij")
    _check(a.ravel().copy(), b.ravel().copy(), fmt, adder)


@pytest.mark.parametrize("adder", ADDERS)
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_exhaustive_b_for_a_subset(fmt, adder):
    """Every b in 0..0xFFFF against a subset of a (specials plus a stride over all patterns)."""
    _, _, e, m = FORMATS[fmt]
    a_vals = np.concatenate([_special_bits(e, m), np.arange(0, 1 << 16, 4099, dtype=np.uint32).astype(np.uint16)])
    allb = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    a = np.repeat(a_vals, allb.size)
    b = np.tile(allb, a_vals.size)
    _check(a, b, fmt, adder)


@njit(cache=True)
def _round_many(f, out):
    for i in range(f.size):
        out[i] = f32_to_f16(f[i])


@njit(cache=True)
def _widen_many(h, out):
    for i in range(h.size):
        out[i] = f16_to_f32(h[i])


def test_float32_float16_conversions_match_numpy():
    """The CPU adder's conversions: every finite float16 widens exactly; finite float32 values round as numpy's
    ``astype(float16)`` does, ties, subnormal results (with bits lost below the tie bit) and overflow included."""
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    halves = halves[(halves & 0x7C00) != 0x7C00]
    widened = np.empty(halves.size, np.float32)
    _widen_many(halves.astype(np.int64), widened)
    np.testing.assert_array_equal(widened.view(np.uint32), halves.view(np.float16).astype(np.float32).view(np.uint32))

    rng = np.random.default_rng(7)
    exponents = rng.integers(95, 146, 400_000)  # from below float16's smallest subnormal to past its overflow
    bits = (rng.integers(0, 2, exponents.size) << 31) | (exponents << 23) | rng.integers(0, 1 << 23, exponents.size)
    ties = rng.integers(0, 1 << 10, 2000) << 13 | 0x1000  # exact ties of normal results, both parities
    bits[:ties.size] = (bits[:ties.size] & ~0x7FFFFF) | ties
    values = bits.astype(np.uint32).view(np.float32)
    rounded = np.empty(values.size, np.int64)
    _round_many(values, rounded)
    with np.errstate(over="ignore"):
        expected = values.astype(np.float16).view(np.uint16)
    bad = np.nonzero(rounded != expected)[0]
    assert bad.size == 0, [(hex(bits[i]), hex(rounded[i]), hex(expected[i])) for i in bad[:10]]


def test_signed_zero_and_nan_rules():
    # x + (-x) = +0, -0 + -0 = -0, +0 + -0 = +0
    assert add_f16_bits(0x3C00, 0xBC00) == 0x0000
    assert add_f16_bits(0x8000, 0x8000) == 0x8000
    assert add_f16_bits(0x0000, 0x8000) == 0x0000
    assert add_f16_bits(0x8000, 0x0000) == 0x0000
    assert add_bf16_bits(0x3F80, 0xBF80) == 0x0000
    assert add_bf16_bits(0x8000, 0x8000) == 0x8000
    # inf + -inf -> quiet NaN; NaN in -> quiet NaN out
    r = add_f16_bits(0x7C00, 0xFC00)
    assert (r & 0x7C00) == 0x7C00 and (r & 0x0200)
    r = add_f16_bits(0x7C01, 0x3C00)
    assert (r & 0x7C00) == 0x7C00 and (r & 0x0200)
    r = add_bf16_bits(0x7F81, 0x3F80)
    assert (r & 0x7F80) == 0x7F80 and (r & 0x0040)
    # overflow -> inf
    assert add_f16_bits(0x7BFF, 0x7BFF) == 0x7C00
    assert add_f16_bits(0xFBFF, 0xFBFF) == 0xFC00
    assert add_bf16_bits(0x7F7F, 0x7F7F) == 0x7F80
    # float16 2048 + 1 = 2048 (tie to even), 2049 not representable
    assert add_f16_bits(0x6800, 0x3C00) == 0x6800
    # results are in range
    assert 0 <= add_f16_bits(0xFFFF, 0xFFFF) <= 0xFFFF


_PTX_SCRIPT = textwrap.dedent("""
    import types
    import numba
    from numba import cuda
    import numba.cuda.dispatcher as _disp
    from simt_pto.kernels.softfloat import add_f16_bits, add_bf16_bits

    # numba-cuda 0.30.4: CUDADispatcher.compile_device (the path a device function called from a
    # kernel takes, njit or cuda.jit(device=True)) asks the *current device* for its compute
    # capability even under compile_ptx(cc=...), which fails with no driver. Stand in a device.
    _disp.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))

    def k(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = add_f16_bits(a[i], b[i]) ^ add_bf16_bits(b[i], a[i])

    sig = "void(uint16[::1], uint16[::1], uint16[::1])"
    ptx, resty = cuda.compile_ptx(k, sig, cc=(9, 0))
    assert ".entry" in ptx or ".visible .entry" in ptx, ptx[:500]
    assert ".f32" not in ptx and ".f64" not in ptx and ".f16" not in ptx, "float ops in the soft-float PTX"
    print("PTX_OK", len(ptx))
""")


@requires_toolchain
def test_compiles_for_cuda_without_gpu():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    p = subprocess.run([sys.executable, "-c", _PTX_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "PTX_OK" in p.stdout, p.stdout + p.stderr


@requires_cuda
def test_runs_in_cuda_simulator():
    script = textwrap.dedent("""
        import numpy as np
        from numba import cuda
        from simt_pto.kernels.softfloat import add_f16_bits

        @cuda.jit
        def k(a, b, out):
            i = cuda.grid(1)
            if i < out.size:
                out[i] = add_f16_bits(a[i], b[i])

        a = np.array([0x3C00, 0x6800, 0x7C00], np.uint16)
        b = np.array([0x3C00, 0x3C00, 0xFC00], np.uint16)
        out = np.zeros(3, np.uint16)
        k[1, 32](a, b, out)
        assert out[0] == 0x4000 and out[1] == 0x6800 and (out[2] & 0x7E00) == 0x7E00, out
        print("SIM_OK")
    """)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "SIM_OK" in p.stdout, p.stdout + p.stderr
