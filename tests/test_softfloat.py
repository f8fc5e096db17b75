"""kernels/softfloat.py: RNE float16 / bfloat16 addition on raw bits against numpy / ml_dtypes (their own float32 ->
16-bit conversions), on the CPU, compiled for CUDA and on the CUDA simulator."""
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

from simt_pto.kernels.a5.intrinsics import cpu_plain_add_half
from simt_pto.kernels.softfloat import add_bits, bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16

FORMATS = {
    "float16": (np.float16, 5, 10),
    "bfloat16": (ml_dtypes.bfloat16, 8, 7),
}


@njit  # (no disk cache: Numba would key it on this file alone, not on kernels/softfloat.py it inlines)
def _add_many(a, b, out, exp_bits, man_bits):
    for i in range(a.size):
        out[i] = add_bits(a[i], b[i], exp_bits, man_bits)


def add_f16_bits(a, b):
    return add_bits(a, b, 5, 10)


def add_bf16_bits(a, b):
    return add_bits(a, b, 8, 7)


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


def _check(a, b, fmt, got=None):
    """``got`` (by default the CPU adder's sums of ``a`` and ``b``) against the correctly rounded sums."""
    dt, exp_bits, man_bits = FORMATS[fmt]
    if got is None:
        got = np.empty(a.size, np.uint16)
        _add_many(a, b, got, exp_bits, man_bits)
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


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_random_pairs(fmt):
    _, e, m = FORMATS[fmt]
    rng = np.random.default_rng(1234 + e)
    a, b = _random_bits(rng, 200_000, e, m)
    _check(a, b, fmt)
    _check(b, a, fmt)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_specials_all_pairs(fmt):
    _, e, m = FORMATS[fmt]
    sp = _special_bits(e, m)
    a, b = np.meshgrid(sp, sp, indexing="ij")
    _check(a.ravel().copy(), b.ravel().copy(), fmt)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_exhaustive_b_for_a_subset(fmt):
    """Every b in 0..0xFFFF against a subset of a (specials plus a stride over all patterns)."""
    _, e, m = FORMATS[fmt]
    a_vals = np.concatenate([_special_bits(e, m), np.arange(0, 1 << 16, 4099, dtype=np.uint32).astype(np.uint16)])
    allb = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    a = np.repeat(a_vals, allb.size)
    b = np.tile(allb, a_vals.size)
    _check(a, b, fmt)


@njit
def _round_many(f, out, exp_bits):
    for i in range(f.size):
        out[i] = f32_to_f16(f[i]) if exp_bits == 5 else f32_to_bf16(f[i])


@njit
def _widen_many(h, out, exp_bits):
    for i in range(h.size):
        out[i] = f16_to_f32(h[i]) if exp_bits == 5 else bf16_to_f32(h[i])


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_finite_16_bit_float_widens_exactly(fmt):
    dt, e, m = FORMATS[fmt]
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    halves = halves[(halves & (((1 << e) - 1) << m)) != (((1 << e) - 1) << m)]
    widened = np.empty(halves.size, np.float32)
    _widen_many(halves.astype(np.int64), widened, e)
    np.testing.assert_array_equal(widened.view(np.uint32), halves.view(dt).astype(np.float32).view(np.uint32))


def _assert_rounds_as(values, fmt):
    dt, e, _ = FORMATS[fmt]
    rounded = np.empty(values.size, np.int64)
    _round_many(values, rounded, e)
    with np.errstate(over="ignore"):
        expected = values.astype(dt).view(np.uint16)
    bad = np.nonzero(rounded != expected)[0]
    assert bad.size == 0, [(hex(values.view(np.uint32)[i]), hex(rounded[i]), hex(expected[i])) for i in bad[:10]]


def test_float32_rounds_to_float16_as_numpy_does():
    """Finite float32 values round as numpy's ``astype(float16)`` does: ties, subnormal results (with bits lost below
    the tie bit) and overflow included."""
    rng = np.random.default_rng(7)
    exponents = rng.integers(95, 146, 400_000)  # from below float16's smallest subnormal to past its overflow
    bits = (rng.integers(0, 2, exponents.size) << 31) | (exponents << 23) | rng.integers(0, 1 << 23, exponents.size)
    ties = rng.integers(0, 1 << 10, 2000) << 13 | 0x1000  # exact ties of normal results, both parities
    bits[:ties.size] = (bits[:ties.size] & ~0x7FFFFF) | ties
    _assert_rounds_as(bits.astype(np.uint32).view(np.float32), "float16")


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


def test_float32_rounds_to_bfloat16_as_ml_dtypes_does():
    """Float32 values (subnormals, ties of both parities, the overflow edge and the infinities) round as ml_dtypes'
    ``astype(bfloat16)`` does."""
    rng = np.random.default_rng(11)
    bits = rng.integers(0, 1 << 32, 400_000, dtype=np.uint64).astype(np.int64)
    bits = bits[(bits & 0x7F800000) != 0x7F800000]  # finite
    ties = (rng.integers(0, 1 << 16, 2000) << 16) | 0x8000  # exact ties, both parities of the kept half
    bits[:ties.size] = ties & 0x7F7FFFFF
    edge = np.array([0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00008000, 0x00018000, 0x80000001,
                     0x7F800000, 0xFF800000], np.int64)  # the overflow edge, subnormal ties, the infinities
    _assert_rounds_as(np.concatenate([bits, edge]).astype(np.uint32).view(np.float32), "bfloat16")


def test_nan_bits_are_the_first_nans_quieted_and_inf_minus_inf_the_default_nan():
    """Bit for bit, not only "a NaN": the float adder's own NaN bits never reach the result."""
    assert add_f16_bits(0x7C01, 0x7E05) == 0x7E01  # the first NaN operand, quieted
    assert add_f16_bits(0x3C00, 0xFD03) == 0xFF03  # a NaN in b: b quieted, its sign and payload kept
    assert add_f16_bits(0x7C00, 0xFC00) == 0x7E00 and add_f16_bits(0xFC00, 0x7C00) == 0x7E00
    assert add_bf16_bits(0xFF81, 0x3F80) == 0xFFC1
    assert add_bf16_bits(0x7F80, 0xFF80) == 0x7FC0
    assert add_f16_bits(0xFC00, 0xFC00) == 0xFC00 and add_f16_bits(0x7C00, 0x7BFF) == 0x7C00


_PTX_SCRIPT = textwrap.dedent("""
    from numba import cuda
    from simt_pto.kernels.a5 import simt

    add_bits = simt.namespace("cuda")["add_bits"]  # the adder as the A5 kernels' CUDA family binds it

    def k(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = add_bits(a[i], b[i], 5, 10) ^ add_bits(b[i], a[i], 8, 7)

    sig = "void(uint16[::1], uint16[::1], uint16[::1])"
    for cc in ((8, 0), (9, 0)):
        ptx, resty = cuda.compile_ptx(k, sig, cc=cc)
        assert ".entry" in ptx, ptx[:500]
        adds = [line.split()[0] for line in ptx.splitlines() if line.strip().startswith("add.") and "f32" in line]
        assert adds and all(op in ("add.f32", "add.rn.f32") for op in adds), adds  # no .ftz: subnormals kept
        assert ".f64" not in ptx and "call.uni" not in ptx, "a double or a call in the adder's PTX"
    print("PTX_OK", len(ptx))
""")


@requires_toolchain
def test_compiles_for_cuda_without_gpu():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["SIMT_PTO_A5_BACKEND"] = "gpu"
    p = subprocess.run([sys.executable, "-c", _PTX_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "PTX_OK" in p.stdout, p.stdout + p.stderr


@requires_cuda
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_runs_in_cuda_simulator(fmt, tmp_path):
    """The CUDA family's adder on the simulator (its bit casts and add are numpy's there), warnings as errors: a
    bfloat16 sum past float32's range is infinity, silently, as on the GPU."""
    dt, e, m = FORMATS[fmt]
    special = _special_bits(e, m)
    rng = np.random.default_rng(5)
    a = np.concatenate([rng.integers(0, 1 << 16, 3000), np.repeat(special, special.size)]).astype(np.uint16)
    b = np.concatenate([rng.integers(0, 1 << 16, 3000), np.tile(special, special.size)]).astype(np.uint16)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    script = textwrap.dedent(f"""
        import numpy as np
        from numba import cuda
        from simt_pto.kernels.a5 import simt

        add_bits = simt.namespace("cuda")["add_bits"]

        @cuda.jit
        def k(a, b, out):
            i = cuda.grid(1)
            if i < out.size:
                out[i] = add_bits(a[i], b[i], {e}, {m})

        a = np.load({str(tmp_path / "a.npy")!r})
        b = np.load({str(tmp_path / "b.npy")!r})
        out = np.zeros(a.size, np.uint16)
        k[(a.size + 255) // 256, 256](a, b, out)
        np.save({str(tmp_path / "out.npy")!r}, out)
        print("SIM_OK")
    """)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", SIMT_PTO_A5_BACKEND="simulator")
    p = subprocess.run([sys.executable, "-W", "error", "-c", script], env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0 and "SIM_OK" in p.stdout, p.stdout + p.stderr
    _check(a, b, fmt, got=np.load(tmp_path / "out.npy"))


@njit  # (not cached: Numba's cache would not see an edit of the adder it inlines, in another file)
def _cpu_adder_mismatches(b_values, exp_bits, man_bits):
    """Pairs (every a, each of ``b_values``) where the multicore backend's vectorisable plain adder, run as the
    plain Row scatter Add runs it (a loop of ``cpu_plain_add_half`` over a uint16 row), differs from ``add_bits``."""
    row = np.empty(b_values.size, np.uint16)
    bad = 0
    for a in range(1 << 16):
        row[:] = a
        for j in range(row.size):
            cpu_plain_add_half(row, j, b_values[j], exp_bits, man_bits)
        for j in range(row.size):
            if row[j] != add_bits(a, b_values[j], exp_bits, man_bits):
                bad += 1
    return bad


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_the_multicore_plain_adder_gives_add_bits_for_every_a(fmt):
    """``kernels/a5/intrinsics.cpu_plain_add_half`` (the float16 sum by the CPU's conversions where it has them, the
    bfloat16 rounding by integers, the specials by selects) against :func:`add_bits`: every a, and b over the
    specials and a stride through every pattern (the whole 2**32 pairs agreed in a one-off run, docs/performance.md)."""
    _, e, m = FORMATS[fmt]
    b_values = np.unique(np.concatenate([_special_bits(e, m).astype(np.uint16),
                                         np.arange(0, 1 << 16, 97, dtype=np.uint32).astype(np.uint16)]))
    assert _cpu_adder_mismatches(b_values, e, m) == 0


def test_the_plain_row_add_takes_the_integer_adder_where_numba_compiles_for_another_cpu(tmp_path):
    """Under ``NUMBA_CPU_NAME=generic`` (a kernel cache that travels between machines) LLVM may lower the float16
    conversions to calls the JIT does not link, which crashed the process: the plain adder then takes
    :func:`add_bits`, and a float16 Row scatter Add gives ``np.add.at``'s bits (both add in source order, each sum
    rounded once)."""
    code = textwrap.dedent("""
        import numpy as np
        import simt_pto as pto
        from simt_pto.kernels.a5 import intrinsics
        assert not intrinsics.HOST_CONVERTS_HALVES
        rng = np.random.default_rng(7)
        table = rng.standard_normal((64, 16)).astype(np.float16)
        src = rng.standard_normal((300, 16)).astype(np.float16)
        idx = rng.integers(0, 64, 300).astype(np.int32)
        want = table.copy()
        np.add.at(want, idx, src)
        pto.scatter(table, src, idx, coalesce="row", atomic="add", target="a5")
        assert np.array_equal(table.view(np.uint16), want.view(np.uint16))
        print("same bits")
    """)
    env = {**os.environ, "NUMBA_CPU_NAME": "generic", "NUMBA_CACHE_DIR": str(tmp_path),
           "SIMT_PTO_A5_BACKEND": "multicore"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "same bits" in done.stdout, done.stderr[-3000:]
