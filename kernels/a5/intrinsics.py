"""The SIMT intrinsics the A5 kernels are written against, bound per backend.

A kernel is plain Python (``kernels/a5/mgather.py``, ...) that names these functions; it is never run
as written. :mod:`.simt` makes one copy of the kernel per backend with these names bound to that
backend's implementation and compiles it there:

* ``cuda`` (a GPU, or Numba's CUDA simulator): the thread is one CUDA thread, ``(blockIdx.x,
  threadIdx.y, threadIdx.x)``; the atomics are ``numba.cuda.atomic.*``.
* ``cpu``: the thread is a whole block range of one CPU worker: ``block_range`` yields the blocks
  ``[launch[0], launch[1])``, ``warp_range`` every warp of the block in order, and the 32 lanes of a warp
  run as one span (``first_lane()`` 0, ``SPAN_LANES`` 32), which the kernels walk as a contiguous run (a
  warp's lanes touch consecutive elements, so on a CPU they are one vectorisable loop instead of 32 strided
  ones).
  The atomics are LLVM ``atomicrmw`` / ``cmpxchg`` on the element (Numba has none for the CPU).

``launch`` is the tuple ``(block_lo, block_hi, grid_blocks, launch_warps)`` every kernel takes first:
the launch geometry of :mod:`simt_pto.geometry`, passed the same way to both backends (on CUDA,
``launch_warps`` is ``blockDim.y`` and ``grid_blocks`` is ``gridDim.x``; ``block_lo`` / ``block_hi``
are unused).

The stubs below only name and document the intrinsics (as ``numba.cuda.stubs`` does); calling one from
Python raises. ``SPAN_LANES`` is a constant, not a function: bound per family as a global of the kernel's copy, it
is a compile-time fact Numba's dead-branch pruning reads, so each family's kernels are typed and lowered without
the other's branches (``if lanes == 1``), which LLVM would only drop afterwards: the same machine code, compiled in
less time (docs/performance.md).
"""
from __future__ import annotations

import llvmlite.ir as llvm_ir
import numba
import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from simt_pto.geometry import WARP
from simt_pto.kernels import softfloat
from simt_pto.kernels.tuning import INLINE_COPY_MAX_BYTES


class UnboundIntrinsic(RuntimeError):
    """A kernel source was run as plain Python instead of through :mod:`.simt`."""


def _stub(name):
    def stub(*args):
        raise UnboundIntrinsic(f"{name}() is a SIMT intrinsic: launch the kernel through simt_pto.kernels.a5.simt")
    stub.__name__ = name
    return stub


block_range = _stub("block_range")
"""``block_range(launch)``: the block indices this thread runs (CUDA: ``blockIdx.x`` alone)."""
warp_range = _stub("warp_range")
"""``warp_range(launch)``: the warps (``threadIdx.y``) this thread runs (CUDA: its own alone)."""
first_lane = _stub("first_lane")
"""``first_lane()``: the first of the ``SPAN_LANES`` lanes this thread runs as one contiguous span (CUDA:
``threadIdx.x``; CPU: 0)."""
SPAN_LANES = 0
"""The lanes a thread runs as one contiguous span: 32 on the CPU (a warp), 1 on CUDA (the thread's own lane). A
constant each family binds (0 here: a kernel run as plain Python never gets this far, its ``block_range`` raises)."""
atomic_add = _stub("atomic_add")
"""``atomic_add(ary, i, v)``: ``old = ary[i]; ary[i] = old + v; return old``, atomically (int32, uint32,
int64, float32)."""
atomic_max = _stub("atomic_max")
"""``atomic_max(ary, i, v)``: ``ary[i] = max(ary[i], v)`` atomically, signed or unsigned by the dtype; returns
the old value."""
atomic_min = _stub("atomic_min")
"""``atomic_min(ary, i, v)``: likewise with ``min``."""
atomic_cas = _stub("atomic_cas")
"""``atomic_cas(ary, i, old, new)``: ``if ary[i] == old: ary[i] = new``, atomically; returns the value read."""
prefetch = _stub("prefetch")
"""``prefetch(ary, i)``: a hint that ``ary[i]`` is about to be updated (CPU: a cache-line prefetch ahead of a
locked atomic, which waits for its own miss; CUDA: nothing)."""
prefetch_read = _stub("prefetch_read")
"""``prefetch_read(ary, i, n)``: a hint that ``ary[i:i + n]`` is about to be read (CPU: a read prefetch of each
64-byte line of the run, so a random row read does not wait for its miss; CUDA: nothing)."""

copy_run = _stub("copy_run")
"""``copy_run(dst, dst_start, src, src_start, n)``: ``dst[dst_start + j] = src[src_start + j]`` for ``j < n``
(arrays of one dtype that do not overlap; CPU: one ``memcpy``, CUDA: a loop)."""
stream_run = _stub("stream_run")
"""``stream_run(dst, dst_start, src, src_start, n)``: :func:`copy_run` whose stores go around the caches, for a
destination too large to stay in them (CPU: non-temporal 16-byte stores, which neither read the destination's
lines first nor evict the source's; the unaligned ends by plain stores. CUDA: :func:`copy_run`). A thread that
streamed calls :func:`store_fence` before its work is handed back."""
store_fence = _stub("store_fence")
"""``store_fence()``: the stores this thread made, streamed ones included, are visible to every thread before any
store or load after it (CPU: a sequentially consistent fence; x86's non-temporal stores are weakly ordered and a
lock may not drain them. CUDA: nothing; a launch's end orders its stores)."""

float32_from_bits = _stub("float32_from_bits")
"""``float32_from_bits(bits)``: the float32 whose bits are the low 32 of the integer ``bits``."""
float32_bits = _stub("float32_bits")
"""``float32_bits(f)``: the bits of float32 ``f``, as a non-negative int64."""
float32_sum = _stub("float32_sum")
"""``float32_sum(x, y)``: ``x + y`` in float32, rounded once (subnormals kept). With the two bit casts, what the
16-bit float adder (:mod:`simt_pto.kernels.softfloat`) computes with."""

NAMES = ("block_range", "warp_range", "first_lane", "SPAN_LANES", "atomic_add", "atomic_max", "atomic_min",
         "atomic_cas", "prefetch", "prefetch_read", "copy_run", "stream_run", "store_fence", "float32_from_bits",
         "float32_bits", "float32_sum")


# -- CPU ---------------------------------------------------------------------------------------------------

def _element_pointer(context, builder, aryty, ary, idxty, idx):
    array = context.make_array(aryty)(context, builder, ary)
    idx = context.cast(builder, idx, idxty, types.intp)
    return cgutils.get_item_pointer(context, builder, aryty, array, [idx], wraparound=False)


def _rmw_op(dtype, signed_op, unsigned_op, float_op):
    if isinstance(dtype, types.Float):
        return float_op
    return signed_op if dtype.signed else unsigned_op


def _atomic_rmw(signed_op, unsigned_op, float_op):
    """An ``@intrinsic`` ``f(ary, i, v) -> old``: LLVM ``atomicrmw <op>`` (monotonic, as CUDA's relaxed
    atomics) on ``ary[i]``."""

    @intrinsic
    def rmw(typingctx, ary, idx, val):
        if not isinstance(ary, types.Array) or not isinstance(idx, types.Integer):
            return None
        op = _rmw_op(ary.dtype, signed_op, unsigned_op, float_op)
        if op is None:
            return None

        def codegen(context, builder, sig, args):
            aryty, idxty, valty = sig.args
            ptr = _element_pointer(context, builder, aryty, args[0], idxty, args[1])
            value = context.cast(builder, args[2], valty, aryty.dtype)
            return builder.atomic_rmw(op, ptr, value, "monotonic")

        return ary.dtype(ary, idx, val), codegen

    return rmw


_cpu_rmw_add = _atomic_rmw("add", "add", "fadd")
_cpu_rmw_max = _atomic_rmw("max", "umax", None)
_cpu_rmw_min = _atomic_rmw("min", "umin", None)


@intrinsic
def _cpu_cas(typingctx, ary, idx, old, new):
    if not isinstance(ary, types.Array) or not isinstance(ary.dtype, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        aryty, idxty, oldty, newty = sig.args
        ptr = _element_pointer(context, builder, aryty, args[0], idxty, args[1])
        expected = context.cast(builder, args[2], oldty, aryty.dtype)
        value = context.cast(builder, args[3], newty, aryty.dtype)
        pair = builder.cmpxchg(ptr, expected, value, "monotonic", "monotonic")
        return builder.extract_value(pair, 0)

    return ary.dtype(ary, idx, old, new), codegen


CACHE_LINE_BYTES = 64
"""Bytes of an x86-64 cache line, the step of the line prefetch: a fact of the hardware, not a tuned value."""


def _llvm_prefetch(builder, address, write: int) -> None:
    """``llvm.prefetch`` of the line holding ``address`` (an ``i8*``): for a write (1) or a read (0), kept in all
    cache levels (locality 3), data cache (1)."""
    i8p = llvm_ir.IntType(8).as_pointer()
    i32 = llvm_ir.IntType(32)
    fn = cgutils.get_or_insert_function(builder.module, llvm_ir.FunctionType(llvm_ir.VoidType(), [i8p, i32, i32, i32]),
                                        "llvm.prefetch.p0")
    builder.call(fn, [address, i32(write), i32(3), i32(1)])


@intrinsic
def _cpu_prefetch(typingctx, ary, idx):
    if not isinstance(ary, types.Array) or not isinstance(idx, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        aryty, idxty = sig.args
        ptr = _element_pointer(context, builder, aryty, args[0], idxty, args[1])
        _llvm_prefetch(builder, builder.bitcast(ptr, llvm_ir.IntType(8).as_pointer()), 1)
        return context.get_dummy_value()

    return types.none(ary, idx), codegen


@intrinsic
def _cpu_prefetch_lines(typingctx, ary, start, n):
    if not (isinstance(ary, types.Array) and isinstance(start, types.Integer) and isinstance(n, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        # The run is walked by address, so the loop holds no division: the element size is a constant here, where a
        # kernel would read it from the array at run time. One prefetch every 64 bytes from the run's first byte, then
        # one of its last byte: as many as the run has lines, or one more, and a loop whose trip count depends on
        # the run's length alone. (Walking the lines themselves, from the first one's start, made the count depend on
        # where the run starts in its line: rows of 24 to 56 bytes, half of them across two lines, mispredicted the
        # loop's end about once in two rows and took 2.7x as long as with no prefetch.)
        aryty, startty, nty = sig.args
        intp = context.get_value_type(types.intp)
        i8p = llvm_ir.IntType(8).as_pointer()
        first = builder.ptrtoint(_element_pointer(context, builder, aryty, args[0], startty, args[1]), intp)
        itemsize = context.get_abi_sizeof(context.get_data_type(aryty.dtype))
        end = builder.add(first, builder.mul(context.cast(builder, args[2], nty, types.intp), intp(itemsize)))
        with cgutils.for_range_slice(builder, first, end, intp(CACHE_LINE_BYTES)) as (address, _):
            _llvm_prefetch(builder, builder.inttoptr(address, i8p), 0)
        _llvm_prefetch(builder, builder.inttoptr(builder.sub(end, intp(1)), i8p), 0)
        return context.get_dummy_value()

    return types.none(ary, start, n), codegen


def _run_copy(codegen_bytes):
    """An ``@intrinsic`` ``f(dst, dst_start, src, src_start, n)`` over arrays of one dtype whose code is
    ``codegen_bytes(context, builder, dst_pointer, src_pointer, nbytes)``: the run's first bytes (``i8*``) in both
    arrays and its length in bytes (an ``intp``)."""

    def run_copy(typingctx, dst, dst_start, src, src_start, n):
        if not (isinstance(dst, types.Array) and isinstance(src, types.Array) and dst.dtype == src.dtype):
            return None

        def codegen(context, builder, sig, args):
            dstty, dstartty, srcty, sstartty, nty = sig.args
            i8p = llvm_ir.IntType(8).as_pointer()
            dptr = builder.bitcast(_element_pointer(context, builder, dstty, args[0], dstartty, args[1]), i8p)
            sptr = builder.bitcast(_element_pointer(context, builder, srcty, args[2], sstartty, args[3]), i8p)
            itemsize = context.get_abi_sizeof(context.get_data_type(dstty.dtype))
            nbytes = builder.mul(context.cast(builder, args[4], nty, types.intp),
                                 context.get_constant(types.intp, itemsize))
            codegen_bytes(context, builder, dptr, sptr, nbytes)
            return context.get_dummy_value()

        return types.none(dst, dst_start, src, src_start, n), codegen

    run_copy.__name__ = run_copy.__qualname__ = f"_cpu{codegen_bytes.__name__}"  # _cpu_memcpy_bytes, ...
    return intrinsic(run_copy)


def _memcpy_bytes(context, builder, dptr, sptr, nbytes):
    # A run of at most INLINE_COPY_MAX_BYTES is copied inline; a longer one by llvm.memcpy, which, of a length known
    # only at run time, is a call into the C library's memcpy: for a row of 32 or 64 bytes the call and memcpy's
    # choice of method cost as much as the copy.
    intp = context.get_value_type(types.intp)
    if INLINE_COPY_MAX_BYTES <= 0:
        cgutils.raw_memcpy(builder, dptr, sptr, nbytes, 1)
        return
    inline = builder.icmp_unsigned("<=", nbytes, intp(INLINE_COPY_MAX_BYTES))
    with builder.if_else(inline, likely=True) as (small, large):
        with small:
            _inline_copy(builder, dptr, sptr, nbytes, intp, INLINE_COPY_MAX_BYTES)
        with large:
            cgutils.raw_memcpy(builder, dptr, sptr, nbytes, 1)


def _inline_copy(builder, dptr, sptr, nbytes, intp, most: int) -> None:
    """Copy ``nbytes`` (at most ``most``, a power of two) between two runs that do not overlap: for the widest power
    of two ``w`` not above ``nbytes``, the first ``w`` bytes and the last ``w`` (which overlap each other where
    ``nbytes`` is not ``w`` or ``2w``): two unaligned loads, then two stores, whatever the length. A kernel's runs
    have one length per launch (a row's), so its branch is always taken the same way."""
    done = builder.append_basic_block("inline_copy.done")
    width = max(1, most // 2)
    while width >= 1:
        copy = builder.append_basic_block(f"inline_copy.{width}")
        narrower = builder.append_basic_block(f"inline_copy.below{width}")
        builder.cbranch(builder.icmp_unsigned(">=", nbytes, intp(width)), copy, narrower)
        builder.position_at_end(copy)
        _copy_ends(builder, dptr, sptr, nbytes, intp, width)
        builder.branch(done)
        builder.position_at_end(narrower)
        width //= 2
    builder.branch(done)  # (no bytes)
    builder.position_at_end(done)


def _copy_ends(builder, dptr, sptr, nbytes, intp, width: int) -> None:
    value_type = (llvm_ir.VectorType(llvm_ir.IntType(64), width // 8) if width >= 16
                  else llvm_ir.IntType(8 * width)).as_pointer()
    last = builder.sub(nbytes, intp(width))
    head = builder.load(builder.bitcast(sptr, value_type), align=1)
    tail = builder.load(builder.bitcast(builder.gep(sptr, [last]), value_type), align=1)
    builder.store(head, builder.bitcast(dptr, value_type), align=1)
    builder.store(tail, builder.bitcast(builder.gep(dptr, [last]), value_type), align=1)


_cpu_memcpy = _run_copy(_memcpy_bytes)


_STREAM_STORE_BYTES = 16
"""Bytes of one non-temporal store of :func:`_cpu_stream_copy`: SSE's, so a destination that numpy aligns to 16
bytes (its large arrays start 16 past a multiple of 64) streams whole."""


def _stream_bytes(context, builder, dptr, sptr, nbytes):
    # By the destination's address: plain bytes up to its first 16-byte boundary; then whole lines' worth, four
    # 16-byte loads ahead of their four non-temporal stores (``!nontemporal`` on an aligned vector store: MOVNTPS
    # on x86; a line's stores leave together, and a load does not wait behind a store); then single 16-byte steps,
    # then plain bytes. The loads may be unaligned.
    intp = context.get_value_type(types.intp)
    to_boundary = builder.and_(builder.neg(builder.ptrtoint(dptr, intp)), intp(_STREAM_STORE_BYTES - 1))
    head = builder.select(builder.icmp_signed("<", to_boundary, nbytes), to_boundary, nbytes)
    with builder.if_then(builder.icmp_signed(">", head, intp(0)), likely=False):
        cgutils.raw_memcpy(builder, dptr, sptr, head, 1)
    rest = builder.sub(nbytes, head)
    lines_end = builder.add(head, builder.and_(rest, intp(-CACHE_LINE_BYTES)))
    body_end = builder.add(head, builder.and_(rest, intp(-_STREAM_STORE_BYTES)))
    vector = llvm_ir.VectorType(llvm_ir.IntType(64), _STREAM_STORE_BYTES // 8).as_pointer()
    nontemporal = builder.module.add_metadata([llvm_ir.IntType(32)(1)])

    def stream(offset, count):
        offsets = [builder.add(offset, intp(k * _STREAM_STORE_BYTES)) for k in range(count)]
        values = [builder.load(builder.bitcast(builder.gep(sptr, [at]), vector), align=1) for at in offsets]
        for at, value in zip(offsets, values):
            stored = builder.store(value, builder.bitcast(builder.gep(dptr, [at]), vector), align=_STREAM_STORE_BYTES)
            stored.set_metadata("nontemporal", nontemporal)

    with cgutils.for_range_slice(builder, head, lines_end, intp(CACHE_LINE_BYTES)) as (offset, _):
        stream(offset, CACHE_LINE_BYTES // _STREAM_STORE_BYTES)
    with cgutils.for_range_slice(builder, lines_end, body_end, intp(_STREAM_STORE_BYTES)) as (offset, _):
        stream(offset, 1)
    tail = builder.sub(nbytes, body_end)
    with builder.if_then(builder.icmp_signed(">", tail, intp(0)), likely=False):
        cgutils.raw_memcpy(builder, builder.gep(dptr, [body_end]), builder.gep(sptr, [body_end]), tail, 1)


_cpu_stream_copy = _run_copy(_stream_bytes)


@intrinsic
def _cpu_fence(typingctx):
    def codegen(context, builder, sig, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.none(), codegen


@njit(inline="always")
def _cpu_copy_run(dst, dst_start, src, src_start, n):
    if n > 0:
        _cpu_memcpy(dst, dst_start, src, src_start, n)


@njit(inline="always")
def _cpu_stream_run(dst, dst_start, src, src_start, n):
    if n > 0:
        _cpu_stream_copy(dst, dst_start, src, src_start, n)


@njit(inline="always")
def _cpu_store_fence():
    _cpu_fence()


@njit(inline="always")
def _cpu_block_range(launch):
    return range(launch[0], launch[1])


@njit(inline="always")
def _cpu_warp_range(launch):
    return range(launch[3])


@njit(inline="always")
def _cpu_first_lane():
    return 0


@njit(inline="always")
def _cpu_atomic_add(ary, i, v):
    return _cpu_rmw_add(ary, i, v)


@njit(inline="always")
def _cpu_atomic_max(ary, i, v):
    # A plain read first: max only grows, so a value already >= v needs no locked instruction (a locked
    # read-modify-write is a full fence on x86 and would wait for its own cache miss).
    cur = ary[i]
    if v > cur:
        return _cpu_rmw_max(ary, i, v)
    return cur


@njit(inline="always")
def _cpu_atomic_min(ary, i, v):
    cur = ary[i]
    if v < cur:
        return _cpu_rmw_min(ary, i, v)
    return cur


@njit(inline="always")
def _cpu_atomic_cas(ary, i, old, new):
    return _cpu_cas(ary, i, old, new)


@njit(inline="always")
def _cpu_prefetch_element(ary, i):
    _cpu_prefetch(ary, i)


@njit(inline="always")
def _cpu_prefetch_read(ary, i, n):
    if n > 0:
        _cpu_prefetch_lines(ary, i, n)


# -- a 16-bit float add that a loop vectorises (the plain Row scatter Add, one thread) ---------------------------

def _host_converts_halves() -> bool:
    """Whether the code Numba compiles converts between float16 and float32 in hardware (x86 F16C), so that LLVM's
    ``fpext`` / ``fptrunc`` of ``half`` become one instruction each (and vectorise). Only for Numba's default target,
    the host CPU as it is: where a user names another (``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``, e.g. ``generic``
    for a cache that travels) or turns AVX off, LLVM may lower them to calls into a runtime library the JIT does not
    link (a crash, measured with ``NUMBA_CPU_NAME=generic``), and :func:`~simt_pto.kernels.softfloat.add_bits`
    serves."""
    from llvmlite import binding
    from numba.core import config
    if config.CPU_NAME is not None or config.CPU_FEATURES is not None or not config.ENABLE_AVX:
        return False
    try:
        return "+f16c" in binding.get_host_cpu_features().flatten().split(",")
    except Exception:  # noqa: BLE001 - features unknown: the integer adder serves
        return False


HOST_CONVERTS_HALVES = _host_converts_halves()
"""The host's float16 conversions: :func:`_cpu_half_sum`'s float16 path (the kernel cache keys Numba's compiled
code by the host CPU and its features, so a cache never carries it to a CPU without them)."""


@intrinsic
def _cpu_float32_from_half(typingctx, bits):
    """The float32 equal to float16 bits ``bits`` (an unsigned integer): LLVM's exact ``fpext`` of ``half``."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        value = args[0]
        if value.type.width != 16:
            value = builder.trunc(value, llvm_ir.IntType(16))
        return builder.fpext(builder.bitcast(value, llvm_ir.HalfType()), llvm_ir.FloatType())

    return types.float32(bits), codegen


@intrinsic
def _cpu_half_from_float32(typingctx, value):
    """The float16 bits of float32 ``value`` rounded to nearest even (LLVM's ``fptrunc`` to ``half``: overflow to
    infinity, subnormal results kept; F16C's rounding is the MXCSR's, nearest even unless a caller changed it)."""
    if value != types.float32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(builder.fptrunc(args[0], llvm_ir.HalfType()), llvm_ir.IntType(16))

    return types.uint16(value), codegen


_U32 = numba.uint32


@njit(inline="always")
def _cpu_half_sum(a_bits, b_bits, exp_bits, man_bits):
    """:func:`simt_pto.kernels.softfloat.add_bits` (the same bits for every pair of 16-bit patterns) written for a
    loop the compiler vectorises: every operation on 32-bit lanes, the special cases chosen by selects, not branches
    and calls. A finite sum is the float32 sum of the widened operands rounded once to the format, by the hardware's
    conversion (float16 on a host with F16C) or by integer rounding (bfloat16: carry the round-to-nearest-even
    increment into the high half); an infinity or a NaN operand takes the integer rules of
    :func:`~simt_pto.kernels.softfloat.add_nonfinite_bits`."""
    a = _U32(a_bits) & _U32(0xFFFF)
    b = _U32(b_bits) & _U32(0xFFFF)
    infinity = ((_U32(1) << _U32(exp_bits)) - _U32(1)) << _U32(man_bits)
    mantissa = (_U32(1) << _U32(man_bits)) - _U32(1)
    quiet = _U32(1) << _U32(man_bits - 1)
    if exp_bits == softfloat.F16_EXP_BITS:
        if not HOST_CONVERTS_HALVES:
            return _U32(softfloat.add_bits(a, b, exp_bits, man_bits))  # (the specials too: the selects are not needed)
        total = _U32(_cpu_half_from_float32(_cpu_float32_from_half(a) + _cpu_float32_from_half(b)))
    else:
        wide = np.float32(np.uint32(a << _U32(16)).view(np.float32) + np.uint32(b << _U32(16)).view(np.float32))
        sum_bits = np.float32(wide).view(np.uint32)
        total = (sum_bits + _U32(0x7FFF) + ((sum_bits >> _U32(16)) & _U32(1))) >> _U32(16)
    a_special = (a & infinity) == infinity
    b_special = (b & infinity) == infinity
    result = b if b_special else total
    result = a if a_special else result
    result = (infinity | quiet) if (a_special and b_special and a != b) else result
    result = (b | quiet) if (b_special and (b & mantissa) != _U32(0)) else result
    return (a | quiet) if (a_special and (a & mantissa) != _U32(0)) else result


@njit(inline="always")
def cpu_plain_add_half(halves, e, v_bits, exp_bits, man_bits):
    """``halves[e] += v`` for a 16-bit float on its raw bits (``halves``: the table as uint16), rounded once, with a
    plain load and store: the store of a kernel that writes its table alone (the plain Row scatter Add)."""
    halves[e] = numba.uint16(_cpu_half_sum(halves[e], v_bits, exp_bits, man_bits))


CPU = {
    "block_range": _cpu_block_range, "warp_range": _cpu_warp_range, "first_lane": _cpu_first_lane,
    "SPAN_LANES": WARP,  # a warp's lanes: one span
    "atomic_add": _cpu_atomic_add, "atomic_max": _cpu_atomic_max, "atomic_min": _cpu_atomic_min,
    "atomic_cas": _cpu_atomic_cas, "prefetch": _cpu_prefetch_element,
    "prefetch_read": _cpu_prefetch_read, "copy_run": _cpu_copy_run, "stream_run": _cpu_stream_run,
    "store_fence": _cpu_store_fence,
    "float32_from_bits": softfloat.float32_from_bits, "float32_bits": softfloat.float32_bits,
    "float32_sum": softfloat.float32_sum,
}
"""The ``multicore`` backend's intrinsics (Numba's CPU compiler, the ``"cpu"`` family)."""


# -- CUDA (a GPU or the simulator) ------------------------------------------------------------------------------

def cuda_intrinsics() -> dict:
    """The CUDA intrinsics (:mod:`.cuda_intrinsics`); imports ``numba.cuda`` in the mode
    :mod:`simt_pto.backend` chose. Raises :class:`~simt_pto.backend.MissingExtraError` without numba-cuda."""
    from simt_pto.backend import first_use, require_numba_cuda
    require_numba_cuda("the A5 kernels' CUDA backends (gpu, simulator)")
    with first_use:  # it imports numba.cuda, maybe while another thread does too
        from . import cuda_intrinsics as module
    return {name: getattr(module, name) for name in NAMES}


__all__ = ["CPU", "NAMES", "UnboundIntrinsic", "cuda_intrinsics", *NAMES]
