"""The typed call (simt_pto/call.py) and the one kept-launch road (host/kept_launch.py), issue #38.

* Every option is normalised once, before any cache key is built: spellings of one option give one call and hit one
  signature entry; values that validate differently (``True`` and ``1``) stay distinct.
* A repeated call of every operand kind the kept launch serves (numpy, PyTorch CPU tensors, JAX arrays; tile ops)
  runs its kept launch, gives numpy's answer, and still refuses what the full path refuses.
* A repeated whole-array call enters at most five of the package's files (traced with ``sys.setprofile``).
"""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import simt_pto as pto
from conftest import ArrayInterfaceOnly, DLPackOnly
from simt_pto import call as typed_call
from simt_pto.enums import Coalesce, LastPath, OwnerLayout
from simt_pto.host import kept_launch
from simt_pto.plan import SIGNATURES, CallCache


def operands(seed=0, rows=64, cols=64, n=8):
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((rows, cols)).astype(np.float32)
    idx = rng.integers(0, rows, n).astype(np.int32)
    src = rng.standard_normal((n, cols)).astype(np.float32)
    return table, idx, src


# -- one policy per meaning ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("spellings", [
    ("elem", "ELEM", Coalesce.ELEM, 1, np.int64(1)),
])
def test_spellings_of_one_option_are_one_policy(spellings):
    policies = {typed_call.gather_policy(c, "clamp", "a5", None, None, True, None) for c in spellings}
    assert len(policies) == 1 and next(iter(policies)).coalesce is Coalesce.ELEM


@pytest.mark.parametrize("target", ["a5", "a2a3"])
def test_spellings_of_one_call_share_one_kept_launch(target, no_full_path):
    CallCache.clear_all()
    table, idx, _ = operands()
    flat = idx.astype(np.int32) * 64 + 5
    first = pto.gather(table, flat, coalesce="elem", oob="clamp", target=target)
    no_full_path()
    for spelling in (Coalesce.ELEM, "Elem", 1):
        got = pto.gather(table, flat, coalesce=spelling, oob=pto.GatherOOB.CLAMP, target=target)
        assert np.array_equal(got, table.reshape(-1)[flat]) and np.array_equal(got, first)


@pytest.mark.parametrize("option, good, bad", [
    ("strict", True, 1),
    ("tile_rows", 4, True),
    ("dyn_ubuf_size", 1024, True),
])
def test_values_that_validate_differently_stay_distinct(option, good, bad):
    table, idx, _ = operands()
    pto.gather(table, idx, **{option: good})  # validated and kept
    pto.gather(table, idx, **{option: good})
    with pytest.raises(TypeError, match=option):
        pto.gather(table, idx, **{option: bad})  # equal to the good value as a key part, and refused all the same


def test_each_option_is_normalised_once_per_first_call(monkeypatch):
    """A first call of new spellings normalises each option once: from_any (and flag_from_any) run once per enum
    option, at the API boundary, and not again below it."""
    counts: dict[str, int] = {}
    for name in ("from_any", "flag_from_any"):
        real = getattr(typed_call, name)

        def counted(*args, _real=real, **kwargs):
            what = args[-1] if len(args) >= 2 and isinstance(args[-1], str) else "?"
            counts[what] = counts.get(what, 0) + 1
            return _real(*args, **kwargs)
        monkeypatch.setattr(typed_call, name, counted)
    typed_call.scatter_policy.memo.cache_clear()
    table, idx, src = operands(3)
    pto.scatter(table, src, idx, coalesce="ROW", atomic="None", oob="Undefined", conflict="Last", strict=np.True_)
    assert counts == {"coalesce": 1, "atomic": 1, "oob": 1, "conflict": 1, "strict": 1}


def test_last_path_and_owner_layout_are_enums():
    assert typed_call.check_last_path("owner") is LastPath.OWNER and LastPath.OWNER == "owner"
    with pytest.raises(ValueError, match="last_path: expected 'auto', 'slot' or 'owner', got 'Owner'"):
        typed_call.check_last_path("Owner")  # as documented: lower case only, as before the enum
    with pytest.raises(TypeError, match="last_path must be a string"):
        typed_call.check_last_path(1)
    table, idx, src = operands(4, rows=32, n=40)
    want = table.copy()
    for p, r in enumerate(idx):
        want[r] = src[p]
    for last_path in ("owner", LastPath.OWNER):
        got = table.copy()
        pto.scatter(got, src, idx, last_path=last_path)
        assert np.array_equal(got, want)
    plans = ["\n".join(pto.scatter_plan(table.copy(), src, idx, last_path="owner", owner=owner).describe())
             for owner in ("dense", "compact", OwnerLayout.COMPACT)]
    assert "compact_owner" not in plans[0] and "compact_owner" in plans[1] and plans[1] == plans[2]


# -- the kept launch serves every host backend ----------------------------------------------------------------------

def test_the_simulator_keeps_whole_array_launches(simulator_backend, no_full_path, monkeypatch):
    from simt_pto.kernels.a5 import simt
    table, idx, src = operands(11, rows=16, cols=8, n=4)
    written = np.zeros_like(table)
    pto.gather(table, idx), pto.scatter(written, src, idx)  # the first calls keep their launches
    no_full_path()
    simulated, real = [], simt._simulate
    monkeypatch.setattr(simt, "_simulate", lambda *args: (simulated.append(1), real(*args)))
    other = np.array([15, 0, 7, 7], np.int32)
    assert np.array_equal(pto.gather(table, other), table[other])
    pto.scatter(written, src * 2, other)
    want = np.zeros_like(table)
    want[idx] = src
    want[[15, 0, 7]] = 2 * src[[0, 1, 3]]  # Conflict::Last: the later position of the repeated 7 wins
    assert np.array_equal(written, want)
    assert simulated, "the kept launches did not run on the simulator"


def test_the_simulator_keeps_tile_op_launches(simulator_backend):
    table, idx, _ = operands(12, rows=16, cols=8, n=4)
    for rows in (idx, idx[::-1].copy()):
        dst = pto.Tile("float32", 4, 8)
        index = pto.Tile("int32", 1, 8, valid=(1, 4))
        index.set(rows.reshape(1, 4))
        pto.mgather(dst, pto.GlobalTensor(table), index)
        assert np.array_equal(dst.valid_numpy(), table[rows])
    kept = [e for e in SIGNATURES._entries.values() if getattr(e, "kept", None) is not None
            and not isinstance(e, kept_launch.Entry)]
    assert kept, "the tile op's signature kept no launch on the simulator"


def test_a_new_backend_forgets_the_kept_launches(simulator_backend):
    table, idx, _ = operands(13)
    pto.set_a5_backend("multicore")
    pto.gather(table, idx)
    assert any(getattr(e, "kept", None) is not None for e in SIGNATURES._entries.values())
    pto.set_a5_backend("simulator")  # a launch bound to the multicore kernels must not run on the simulator
    assert len(SIGNATURES) == 0
    assert np.array_equal(pto.gather(table, idx), table[idx])


# -- the kept launch serves every operand kind --------------------------------------------------------------------

def _torch():
    try:
        import torch as module
    except ImportError:
        pytest.skip("PyTorch is not installed")
    return module


@pytest.mark.parametrize("target", ["a5", "a2a3"])
@pytest.mark.parametrize("protocol", ["dlpack", "array interface"])
def test_a_repeated_call_on_another_host_producer_takes_the_kept_launch(target, protocol, no_full_path):
    """Arrays of another library, exporting DLPack or the array interface only: a repeated gather returns numpy, a
    repeated scatter writes the producer's memory in place, both from the kept launch."""
    wrap = DLPackOnly if protocol == "dlpack" else ArrayInterfaceOnly
    table, idx, src = operands(14)
    written = table.copy()
    pto.gather(wrap(table), wrap(idx), target=target)
    pto.scatter(wrap(written), wrap(src), wrap(idx), target=target)
    no_full_path()
    other = np.random.default_rng(3).permutation(64)[:8].astype(np.int32)
    got = pto.gather(wrap(table), wrap(other), target=target)
    assert type(got) is np.ndarray and np.array_equal(got, table[other])
    pto.scatter(wrap(written), wrap(src * 2), wrap(other), target=target)
    want = table.copy()
    want[idx] = src
    want[other] = 2 * src
    assert np.array_equal(written, want)


@pytest.mark.parametrize("target", ["a5", "a2a3"])
def test_a_repeated_torch_gather_takes_the_kept_launch(target, no_full_path):
    torch = _torch()
    table, idx, _ = operands(5)
    t_table, t_idx = torch.from_numpy(table), torch.from_numpy(idx)
    pto.gather(t_table, t_idx, target=target)
    no_full_path()
    for seed in range(3):
        other = np.random.default_rng(seed).integers(0, 64, 8).astype(np.int32)
        got = pto.gather(t_table, torch.from_numpy(other), target=target)
        assert isinstance(got, torch.Tensor) and np.array_equal(got.numpy(), table[other])


def test_a_repeated_torch_scatter_takes_the_kept_launch_and_bumps_the_version(no_full_path):
    torch = _torch()
    table, idx, src = operands(6)
    t_table, t_src, t_idx = torch.from_numpy(table.copy()), torch.from_numpy(src), torch.from_numpy(idx)
    pto.scatter(t_table, t_src, t_idx)
    no_full_path()
    before = t_table._version
    got = pto.scatter(t_table, t_src * 2, t_idx)
    want = table.copy()
    for p, r in enumerate(idx):
        want[r] = 2 * src[p]
    assert got is t_table and np.array_equal(t_table.numpy(), want) and t_table._version == before + 1


def test_what_the_full_path_refuses_is_refused_after_a_kept_launch_exists():
    """A tensor that requires grad, an inference tensor written outside inference mode, a lazy negation: a kept
    launch exists for their signature, and they still get the full path's answer."""
    torch = _torch()
    table, idx, src = operands(7)
    t_table, t_src, t_idx = torch.from_numpy(table.copy()), torch.from_numpy(src), torch.from_numpy(idx)
    for _ in range(2):
        pto.gather(t_table, t_idx)
        pto.scatter(t_table, t_src, t_idx)
    with pytest.raises(pto.ConstraintError, match="requires grad"):
        pto.gather(t_table.clone().requires_grad_(True), t_idx)
    with torch.inference_mode():
        frozen = torch.from_numpy(table.copy()).clone()
    with pytest.raises(pto.ConstraintError, match="inference_mode"):
        pto.scatter(frozen, t_src, t_idx)
    negated = torch._neg_view(torch.from_numpy(table.copy()))
    assert np.array_equal(pto.gather(negated, t_idx).numpy(), -table[idx])  # read as torch reads it
    written = torch.from_numpy(table.copy())
    pto.scatter(written, torch._neg_view(t_src.clone()), t_idx)  # a source read as torch reads it
    want = table.copy()
    for p, r in enumerate(idx):
        want[r] = -src[p]
    assert np.array_equal(written.numpy(), want)
    with torch.inference_mode():
        frozen_idx = torch.from_numpy(idx[::-1].copy()).clone()
    assert np.array_equal(pto.gather(frozen, frozen_idx).numpy(), table[idx[::-1]])  # reading one is allowed


def test_a_repeated_jax_gather_takes_the_kept_launch(no_full_path):
    jnp = pytest.importorskip("jax.numpy")
    table, idx, _ = operands(8)
    j_table, j_idx = jnp.asarray(table), jnp.asarray(idx)
    pto.gather(j_table, j_idx)
    no_full_path()
    got = pto.gather(j_table, j_idx)
    assert type(got) is type(j_table) and np.array_equal(np.asarray(got), table[idx])


@pytest.mark.parametrize("target", ["a5", "a2a3"])
@pytest.mark.parametrize("coalesce", ["row", "elem"])
@pytest.mark.parametrize("offset", [0, 1])
def test_a_repeated_gather_into_out_takes_the_kept_launch(no_full_path, target, coalesce, offset):
    """``out=``: after the first call of a signature, a call into any numpy ``out`` of that shape (here
    each at ``offset`` float32s into a buffer: the address modulo 8 is part of the signature) runs the kept launch
    and writes ``out`` in place, no byte beside it."""
    table, idx, _ = operands(16)
    flat = idx * 64 + 7
    wanted = table[idx] if coalesce == "row" else table.reshape(-1)[flat]
    index = idx if coalesce == "row" else flat
    size = wanted.size
    buffers = [np.full(size + 2, -1, np.float32) for _ in range(2)]
    outs = [b[offset:offset + size].reshape(wanted.shape) for b in buffers]
    assert pto.gather(table, index, coalesce=coalesce, target=target, out=outs[0]) is outs[0]
    no_full_path()
    for out, buffer in zip(outs[::-1], buffers[::-1]):
        out[...] = 0
        assert pto.gather(table, index, coalesce=coalesce, target=target, out=out) is out
        assert out.tobytes() == wanted.tobytes()
        assert (np.delete(buffer, np.arange(offset, offset + size)) == -1).all()


@pytest.mark.parametrize("target", ["a5", "a2a3"])
def test_a_repeated_gather_into_a_tensor_takes_the_kept_launch_and_bumps_its_version(no_full_path, target):
    """A PyTorch ``out``: written in place by the kept launch, its version counter bumped on each call (autograd
    then refuses a backward that saved it); one that requires grad is refused under grad mode (torch's rule, on the
    full path) after the kept calls as before them."""
    torch = pytest.importorskip("torch")
    table, idx, _ = operands(8)
    out = torch.zeros(8, 64)
    pto.gather(table, idx, target=target, out=out)
    no_full_path()
    for step in range(2):
        before = out._version
        out.zero_()
        assert pto.gather(table, idx, target=target, out=out) is out
        assert np.array_equal(out.numpy(), table[idx]) and out._version > before + 1


def test_a_tensor_out_that_requires_grad_is_refused_after_kept_calls():
    torch = pytest.importorskip("torch")
    table, idx, _ = operands(8)
    pto.gather(table, idx, out=torch.zeros(8, 64))
    pto.gather(table, idx, out=torch.zeros(8, 64))
    leaf = torch.zeros(8, 64, requires_grad=True)
    with pytest.raises(pto.ConstraintError, match="requires grad"):
        pto.gather(table, idx, out=leaf)
    assert not leaf.detach().any()


@pytest.mark.parametrize("target", ["a5", "a2a3"])
def test_a_kept_gather_into_out_refuses_what_the_full_path_refuses_before_writing(target):
    """The kept launch into ``out`` checks, before its launch, what depends on the call's memory: an index past the
    table (refused, ``out`` as it was: a launch that checks ranges as it runs would have written part of it), and
    an ``out`` that shares memory with the table or the index."""
    table, idx, _ = operands(8)
    out = np.zeros((8, 64), np.float32)
    pto.gather(table, idx, target=target, out=out)
    policy = typed_call.gather_policy("row", "undefined", target, None, None, True, None)
    assert SIGNATURES.lookup(kept_launch.into_operands(policy, table, idx, out)[0]).kept is not None
    bad = idx.copy()
    bad[5] = 64
    out[...] = 3
    with pytest.raises(pto.OutOfBoundsError):
        pto.gather(table, bad, target=target, out=out)
    assert (out == 3).all()
    with pytest.raises(pto.ConstraintError, match="out .*shares memory with table"):
        pto.gather(table, idx, target=target, out=table[8:16])
    flat_idx = np.zeros(64, np.int32)
    flat_table = np.arange(64, dtype=np.int32)
    assert (pto.gather(flat_table, flat_idx[:8], coalesce="elem", target=target, out=np.ones(8, np.int32)) == 0).all()
    with pytest.raises(pto.ConstraintError, match="out .*shares memory with idx"):
        pto.gather(flat_table, flat_idx[:8], coalesce="elem", target=target, out=flat_idx[4:12])
    assert np.array_equal(pto.gather(table, idx, target=target, out=out), table[idx])


def test_a_jax_table_gathered_from_can_still_be_donated_and_is_not_kept_alive():
    """The kept launch keeps nothing of a JAX operand past the call but its address modulo 8: JAX still donates
    the table's buffer to a jitted call (it does not while a numpy view of the buffer lives), the donated table is
    then refused, and a table the caller drops is freed."""
    jax = pytest.importorskip("jax")
    table, idx, _ = operands(8)
    j_table, j_idx = jax.numpy.asarray(table), jax.numpy.asarray(idx)
    for _ in range(3):
        assert np.array_equal(np.asarray(pto.gather(j_table, j_idx)), table[idx])
    if jax.devices()[0].platform == "cpu":
        assert id(j_table) in kept_launch._JAX_ALIGNMENT  # (what this test is about: the kept address)
    buffer = j_table.unsafe_buffer_pointer()
    doubled = jax.jit(lambda a: a * 2, donate_argnums=0)(j_table)
    assert j_table.is_deleted() and doubled.unsafe_buffer_pointer() == buffer
    with pytest.raises(TypeError, match="table: the JAX array has been deleted"):
        pto.gather(j_table, j_idx)
    other = jax.numpy.asarray(table + 1)
    assert np.array_equal(np.asarray(pto.gather(other, j_idx)), table[idx] + 1)
    gone = weakref.ref(other)
    del other
    gc.collect()
    assert gone() is None


def _same_jax_array(got, want) -> None:
    """``got`` is the JAX array ``want`` is: type, placement, commitment, dtype, shape, weak type and bits."""
    assert type(got) is type(want)
    assert (got.sharding, got.committed, got.dtype, got.shape, got.weak_type) == \
        (want.sharding, want.committed, want.dtype, want.shape, want.weak_type)
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int8", "uint32"])
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_a_repeated_jax_gather_gives_what_jnp_asarray_gives(no_full_path, dtype, coalesce):
    """The kept launch's JAX result is made by jaxlib's constructor (host/arrays.jax_result): each call's result is
    the array ``jnp.asarray`` makes of the values, and a later call leaves an earlier result as it was (its memory is
    the result's own)."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    from simt_pto.host import arrays
    rng = np.random.default_rng(11)
    bits = rng.integers(0, 1 << 8 * np.dtype(np.uint8 if dtype == "int8" else np.uint16 if "16" in dtype
                                             else np.uint32).itemsize, (32, 16))
    j_table = jnp.asarray(bits.astype({"int8": np.uint8, "float16": np.uint16, "bfloat16": np.uint16}
                                      .get(dtype, np.uint32))).view(dtype)
    table = np.asarray(j_table)
    if coalesce == "elem":  # (Elem indices address the flat table)
        table = table.reshape(-1)
    idx_a, idx_b = rng.integers(0, len(table), (2, 6)).astype(np.int32)
    pto.gather(j_table, jnp.asarray(idx_a), coalesce=coalesce)
    no_full_path()
    first = pto.gather(j_table, jnp.asarray(idx_a), coalesce=coalesce)
    second = pto.gather(j_table, jnp.asarray(idx_b), coalesce=coalesce)
    if jax.devices()[0].platform == "cpu":
        assert arrays._JAX_PUT[0] is not None, "jaxlib's constructor failed its probe: JAX gathers pay jnp.asarray"
    _same_jax_array(first, jnp.asarray(table[idx_a]))
    _same_jax_array(second, jnp.asarray(table[idx_b]))


@pytest.mark.parametrize("target", ["a5", "a2a3"])
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_a_large_repeated_jax_gather_is_taken_by_jax_without_a_copy(no_full_path, monkeypatch, target, coalesce):
    """A repeated JAX gather whose result reaches ``jax_zero_copy_result_bytes`` makes it at JAX's 64-byte boundary,
    and JAX takes that memory as it is: the JAX array's buffer is the memory the launch wrote (JAX copies an array that
    starts anywhere else). Each call's result is its own: a later call leaves an earlier one as it was. The threshold
    is lowered so that a small call reaches it."""
    jax = pytest.importorskip("jax")
    if jax.devices()[0].platform != "cpu":
        pytest.skip("JAX's first device is not a CPU: its result is copied to the device by design")
    from simt_pto.host import arrays, tuning
    table, idx, _ = operands(21, rows=64, cols=32, n=24)
    index = idx if coalesce == "row" else idx * 32 + 5
    want = table[idx] if coalesce == "row" else table.reshape(-1)[index]
    j_table = jax.numpy.asarray(table if coalesce == "row" else table.reshape(-1))
    handed = []

    def spy(result):
        handed.append(result)
        return arrays.jax_result(result)

    with tuning.tuned(jax_zero_copy_result_bytes=want.nbytes):
        pto.gather(j_table, jax.numpy.asarray(index), coalesce=coalesce, target=target)
        no_full_path()
        monkeypatch.setattr(kept_launch, "jax_result", spy)
        results = [pto.gather(j_table, jax.numpy.asarray(ix), coalesce=coalesce, target=target)
                   for ix in (index, index[::-1].copy())]
    assert len(handed) == 2
    for made, got in zip(handed, results):
        assert made.ctypes.data % arrays.JAX_ZERO_COPY_ALIGNMENT == 0
        assert got.unsafe_buffer_pointer() == made.ctypes.data, "JAX copied the result"
    assert np.array_equal(np.asarray(results[0]), want)
    assert np.array_equal(np.asarray(results[1]), want[::-1])


def test_aligned_empty_starts_at_the_boundary_and_holds_its_elements():
    from simt_pto.host.arrays import aligned_empty
    for size in (1, 7, 512, 4099):
        for dtype in (np.dtype(np.float16), np.dtype(np.float64)):
            made = aligned_empty(size, dtype, 64)
            assert made.shape == (size,) and made.dtype == dtype and made.flags.c_contiguous and made.flags.writeable
            assert made.ctypes.data % 64 == 0
            made[:] = np.arange(size)  # the whole view is writable memory of its own
            assert np.array_equal(made, np.arange(size).astype(dtype))


_JAX_TWO_DEVICES = """
import numpy as np, jax, jax.numpy as jnp, simt_pto as pto
from simt_pto.host import in_memory
table = np.arange(4096, dtype=np.float32).reshape(64, 64)
idx = np.array([5, 9, 63, 0, 5, 1, 2, 3], np.int32)
j_table, j_idx = jnp.asarray(table), jnp.asarray(idx)
pto.gather(j_table, j_idx)
def refuse(*args, **kwargs):
    raise AssertionError("the call took the full path")
in_memory.full_gather = refuse
for device in jax.devices():
    with jax.default_device(device):
        got, want = pto.gather(j_table, j_idx), jnp.asarray(table[idx])
        assert type(got) is type(want) and got.sharding == want.sharding == jax.sharding.SingleDeviceSharding(device)
        assert got.committed == want.committed and np.array_equal(np.asarray(got), table[idx])
print("ok", len(jax.devices()))
"""


def test_a_jax_gather_keeps_jaxs_default_device_and_transfer_guard(no_full_path):
    """Where the fast constructor would make something else than ``jnp.asarray`` (a default device the caller set:
    two CPU devices, in a process of their own) it steps aside; a transfer guard refuses both alike."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", _JAX_TWO_DEVICES], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["ok", "2"], done.stderr
    table, idx, _ = operands(12)
    j_table, j_idx = jnp.asarray(table), jnp.asarray(idx)
    pto.gather(j_table, j_idx)
    no_full_path()
    with jax.transfer_guard("disallow"):
        with pytest.raises(Exception, match="Disallowed host-to-device transfer"):
            jnp.asarray(table[idx])
        with pytest.raises(Exception, match="Disallowed host-to-device transfer"):
            pto.gather(j_table, j_idx)


def test_one_signature_cache_holds_tile_ops_and_whole_arrays():
    CallCache.clear_all()
    table, idx, src = operands(9)
    pto.gather(table, idx)
    pto.gather(table, idx)
    dst = pto.Tile("float32", 8, 64)
    idx_tile = pto.Tile.from_array(idx.reshape(1, 8))
    pto.mgather(dst, pto.GlobalTensor(table), idx_tile)
    pto.mgather(dst, pto.GlobalTensor(table), idx_tile)
    entries = list(SIGNATURES._entries.values())
    assert any(isinstance(e, kept_launch.Entry) and e.kept is not None for e in entries)
    assert any(getattr(e, "kept", None) is not None and not isinstance(e, kept_launch.Entry) for e in entries)
    assert np.array_equal(dst.valid_numpy(), table[idx])


# -- the road a repeated call takes --------------------------------------------------------------------------------

def _traced(call) -> tuple[set[str], int]:
    """The package files ``call()`` enters and its call events in them (as ``bench/call_trace.py`` counts)."""
    import simt_pto.host
    import simt_pto.kernels
    roots = tuple(os.path.dirname(m.__file__) + os.sep for m in (pto, simt_pto.host, simt_pto.kernels))
    files: set[str] = set()
    events = 0

    def profile(frame, event, arg):
        nonlocal events
        if event == "call" and frame.f_code.co_filename.startswith(roots):
            files.add(frame.f_code.co_filename)
            events += 1
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return files, events


def _files_entered(call) -> set[str]:
    return _traced(call)[0]


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("target", ["a5", "a2a3"])
def test_a_repeated_call_enters_at_most_five_files(target, kind):
    if target == "a5" and pto.a5_backend() != "multicore":
        pytest.skip("the multicore backend's kept launches are traced")
    table, idx, _ = operands(10)
    flat_idx = (idx * 64 + 3).astype(np.int32)
    src = np.ones(8, np.float32)
    if kind == "torch":  # (a tensor table's scatter also bumps its version counter: torch's rules)
        torch = pytest.importorskip("torch")
        table, idx, flat_idx, src = (torch.from_numpy(a) for a in (table, idx, flat_idx, src))
    calls = [lambda: pto.gather(table, idx, coalesce="row", oob="clamp", target=target),
             lambda: pto.scatter(table.reshape(-1), src, flat_idx, coalesce="elem", atomic="add", target=target)]
    for call in calls:
        call(), call()  # the first keeps the launch
        files = _files_entered(call)
        assert len(files) <= 5, sorted(files)
        if target == "a5":  # the kernel called by its compiled entry: Numba's dispatcher reports no call of it
            assert not [f for f in files if f.endswith(("mgather.py", "mscatter.py"))], sorted(files)


def _unaligned_int32(values: np.ndarray) -> np.ndarray:
    """``values`` as int32 at an address one byte past a multiple of 4 (numpy flags it unaligned)."""
    buffer = bytearray(values.size * 4 + 1)
    out = np.frombuffer(buffer, dtype=np.int32, count=values.size, offset=1)
    out[...] = values
    assert not out.flags.aligned and out.flags.c_contiguous
    return out


def test_a_new_shapes_kept_launch_finds_its_kernels_entry_without_numba_typing(monkeypatch):
    """The compiled entry is looked up once per kernel and kinds of arguments: the kept launches of later shapes
    (a batch of another length) find it without Numba's ``typeof`` (about 10 µs an array), and still give numpy's
    results."""
    if pto.a5_backend() != "multicore":
        pytest.skip("the multicore backend's kept launches")
    import numba.core.dispatcher
    rng = np.random.default_rng(13)
    table = rng.standard_normal((64, 64)).astype(np.float32)
    flat = np.zeros(table.size, np.float32)

    def calls(n):
        idx = rng.integers(0, 64, n).astype(np.int32)
        flat_idx = rng.integers(0, flat.size, n).astype(np.int32)
        src = rng.standard_normal(n).astype(np.float32)
        for _ in range(4):  # the first runs the full path, the second the kept launch, the third finds the entry
            assert np.array_equal(pto.gather(table, idx), table[idx])
            want = flat.copy()
            np.add.at(want, flat_idx, src)
            pto.scatter(flat, src, flat_idx, coalesce="elem", atomic="add")
            assert np.allclose(flat, want, rtol=0, atol=1e-5)
    calls(8)
    typed = []
    real = numba.core.dispatcher.Dispatcher.typeof_pyval
    monkeypatch.setattr(numba.core.dispatcher.Dispatcher, "typeof_pyval",
                        lambda self, value: typed.append(value) or real(self, value))
    for n in (9, 10, 11):
        calls(n)
    assert typed == []


def test_a_dispatcher_without_numbas_overloads_has_no_compiled_entry():
    """Where a Numba release has no ``overloads`` (or no ``entry_point``), the kept launch calls its dispatcher."""
    from simt_pto.kernels.a5 import simt

    class NoOverloads:
        def typeof_pyval(self, value):
            raise AssertionError("typed without overloads to look in")

    class NoEntryPoint:
        overloads = {("a",): object()}

        def typeof_pyval(self, value):
            return value

    assert simt.compiled_entry(NoOverloads(), (np.zeros(4, np.uint32), 3)) is None
    assert simt.compiled_entry(NoEntryPoint(), ("a",)) is None


@pytest.mark.parametrize("oob", ["undefined", "clamp"])
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_a_kept_launch_takes_index_arrays_of_any_flags(coalesce, oob):
    """A kept launch calls its kernel by the compiled entry found for its first call's argument types: later calls
    whose index array is read-only or unaligned (flags its signature does not key) get numpy's results."""
    rng = np.random.default_rng(12)
    table = rng.standard_normal((64, 64)).astype(np.float32)
    capacity = 64 if coalesce == "row" else table.size
    writable = rng.integers(0, capacity, 8).astype(np.int32)
    read_only = rng.integers(0, capacity, 8).astype(np.int32)
    read_only.flags.writeable = False
    unaligned = _unaligned_int32(rng.integers(0, capacity, 8))
    want_of = (lambda i: table[i]) if coalesce == "row" else (lambda i: table.reshape(-1)[i])
    for idx in (writable, writable, read_only, unaligned, writable, unaligned, read_only):
        assert np.array_equal(pto.gather(table, idx, coalesce=coalesce, oob=oob), want_of(idx))
    flat = np.zeros(table.size, np.float32)
    want = flat.copy()
    src = rng.standard_normal(8).astype(np.float32)
    for idx in (writable, writable, read_only, unaligned, writable, unaligned):
        pto.scatter(flat, src, idx, coalesce="elem", atomic="add")
        np.add.at(want, np.asarray(idx), src)
        assert np.allclose(flat, want, rtol=0, atol=1e-5)


def test_a_kept_launch_of_several_block_ranges_calls_its_kernels_entry_on_every_thread(monkeypatch):
    """A launch cut into block ranges (the thresholds set so that every call of the test is one) calls the compiled
    entries of its kernel and its index check from its second run on, on the caller and its helper threads: later
    calls give numpy's results, a Row gather whose out-of-range index lies in its last range is still refused
    (naming it), and a call after the refusal runs as before."""
    if pto.a5_backend() != "multicore":
        pytest.skip("the multicore backend's launches are cut into block ranges")
    from simt_pto.host import tuning
    from simt_pto.kernels.a5 import simt
    if simt.multicore_workers() < 2:
        pytest.skip("one Numba thread: a launch runs its grid as one range")
    called: list = []
    real = simt.compiled_entry
    caller = threading.get_ident()
    helper_ran = threading.Event()
    waited = threading.Event()

    def counting(dispatcher, args):
        entry = real(dispatcher, args)
        if entry is None:
            return None

        def counted(*arguments):
            called.append(dispatcher)
            if threading.get_ident() != caller:
                helper_ran.set()
            elif not waited.is_set() and sys._getframe(2).f_code is simt._Launch.run.__code__:
                # a launch's ranges go to whichever thread is free, and the caller may take them all before a helper
                # wakes: holding its first range, once, until a helper has run one makes the claim below certain
                waited.set()
                helper_ran.wait(timeout=10)
            return entry(*arguments)
        return counted
    monkeypatch.setattr(simt, "compiled_entry", counting)
    rng = np.random.default_rng(13)
    table = rng.standard_normal((256, 64)).astype(np.float32)
    flat = np.zeros(4096, np.float32)
    want_flat = flat.copy()
    forced = dict(row_copy_one_thread_bytes=0, elem_gather_one_thread_elems=0, atomic_scatter_one_thread_updates=0,
                  plain_add_max_updates=0, plain_rmw_max_updates=0, plain_half_add_max_updates=0)
    with tuning.tuned(**forced), simt.trace_multicore_launches() as ranges:
        for call in range(4):
            rows = rng.integers(0, 256, 512).astype(np.int32)
            assert np.array_equal(pto.gather(table, rows), table[rows])
            elems = rng.integers(0, table.size, 2048).astype(np.int32)
            assert np.array_equal(pto.gather(table, elems, coalesce="elem", oob="clamp"), table.reshape(-1)[elems])
            slots, src = rng.integers(0, flat.size, 2048).astype(np.int32), rng.standard_normal(2048).astype(np.float32)
            pto.scatter(flat, src, slots, coalesce="elem", atomic="add")
            np.add.at(want_flat, slots, src)
            assert np.allclose(flat, want_flat, rtol=0, atol=1e-4), call
        bad = rng.integers(0, 256, 512).astype(np.int32)
        bad[-1] = 300
        with pytest.raises(pto.OutOfBoundsError) as info:
            pto.gather(table, bad)
        assert info.value.values == [300]
        rows = rng.integers(0, 256, 512).astype(np.int32)
        assert np.array_equal(pto.gather(table, rows), table[rows])
    assert len({thread for thread, *_ in ranges}) >= 2, "no launch ran on a helper thread"
    assert len(called) >= 3 * 2, "the launches' ranges did not call the compiled entries"
    assert simt._bits_below in called, "the ranges' index check did not call its compiled entry"


@pytest.mark.parametrize("op", ["row gather", "elem add"])
def test_a_launch_of_several_block_ranges_keeps_none_of_its_calls_arrays(op):
    """Once a call whose launch ran on several threads has returned, nothing of the package's holds its arrays: the
    table, the indices, the source and the result are freed when the caller drops them, on the first call of a shape
    and on its kept launch's later runs. (A helper thread that kept its last launch while it slept held that call's
    arrays, a table of any size, until the next launch woke it.)"""
    if pto.a5_backend() != "multicore":
        pytest.skip("the multicore backend's launches are cut into block ranges")
    from simt_pto.host import tuning
    from simt_pto.kernels.a5 import simt
    if simt.multicore_workers() < 2:
        pytest.skip("one Numba thread: a launch runs its grid as one range")
    rng = np.random.default_rng(31)
    forced = dict(row_copy_one_thread_bytes=0, atomic_scatter_one_thread_updates=0, plain_add_max_updates=0,
                  plain_rmw_max_updates=0, plain_half_add_max_updates=0)
    with tuning.tuned(**forced):
        for call in range(4):
            table = rng.standard_normal((256, 64)).astype(np.float32)
            if op == "row gather":
                idx = rng.integers(0, 256, 512).astype(np.int32)
                result = pto.gather(table, idx)
                assert np.array_equal(result, table[idx])
                arrays = [table, idx, result if result.base is None else result.base]  # (its memory's owner)
            else:
                idx = rng.integers(0, table.size, 1 << 15).astype(np.int32)  # (8 blocks of 4096 updates)
                src = rng.standard_normal(1 << 15).astype(np.float32)
                want = table.copy()
                np.add.at(want.reshape(-1), idx, src)
                assert pto.scatter(table, src, idx, coalesce="elem", atomic="add") is table
                assert np.allclose(table, want, rtol=0, atol=1e-4)
                arrays = [table, idx, src]
            refs = [weakref.ref(a) for a in arrays]
            del table, idx, arrays
            if op == "row gather":
                del result
            else:
                del src, want
            for _ in range(200):  # (a helper lets go of a launch just after it reports it finished)
                gc.collect()
                if not any(ref() is not None for ref in refs):
                    break
                time.sleep(0.005)
            assert [ref() is None for ref in refs] == [True] * 3, f"call {call}: an array of the call is still held"


@pytest.mark.parametrize("target, cut", [("a5", "one range"), ("a5", "block ranges"), ("a2a3", "one loop")])
def test_a_kept_launch_hands_its_entries_the_callers_arrays_and_its_dispatchers_their_own_dtypes(target, cut,
                                                                                                  monkeypatch):
    """A repeated whole-array call on ``multicore`` hands its kernels' compiled entries the caller's float32 table and
    source and int32 indices as they are (``multicore_launcher``'s ``reads_as``), and any dispatcher the launch still
    calls (before its entries are known, or under a launch trace) views them as the kernel's uint32 first; the A2/A3
    loops, called through their dispatchers, take them viewed. Every call gives numpy's bits (NaN payloads, -0.0,
    subnormals); a negative and a past-the-table index are still refused, the scatter's table untouched; nothing is
    ever compiled for the caller's dtypes (a kernel compiled for float32, or an index check for int32, which reads -1
    as below the table), and nothing after the first calls."""
    if target == "a5" and pto.a5_backend() != "multicore":
        pytest.skip("the multicore backend's launches")
    import numba.core.dispatcher
    from simt_pto.host import tuning
    from simt_pto.kernels.a5 import simt
    rows = 512 if cut == "block ranges" else 8
    rng = np.random.default_rng(29)
    bits = rng.integers(0, 1 << 32, (rows, 64), dtype=np.uint64).astype(np.uint32)
    bits[0, :4] = [0x7FC00001, 0xFFC12345, 0x80000000, 0x00000001]  # NaN payloads, -0.0, the least subnormal
    table = bits.view(np.float32)
    forced = dict(row_copy_one_thread_bytes=0) if cut == "block ranges" else {}
    compiled: list = []
    real_compile = numba.core.dispatcher.Dispatcher.compile

    def recording(self, sig):
        compiled.append((self.py_func.__name__, sig))
        return real_compile(self, sig)

    def calls(trace=False):
        idx = rng.permutation(rows).astype(np.int32)
        src = np.ascontiguousarray(table[::-1][:rows])
        got = pto.gather(table, idx, target=target)
        assert np.array_equal(got.view(np.uint32), bits[idx])
        dst = np.zeros_like(table)
        pto.scatter(dst, src, idx, coalesce="row", target=target)  # every index once: each row is its source's
        want = np.zeros_like(bits)
        want[idx] = src.view(np.uint32)
        assert np.array_equal(dst.view(np.uint32), want), trace

    monkeypatch.setattr(numba.core.dispatcher.Dispatcher, "compile", recording)
    with tuning.tuned(**forced):
        for _ in range(3):  # the full path, the kept launch's first run, its run that looks the entries up
            calls()
        first_calls = len(compiled)
        for _ in range(3):
            calls()
        with simt.trace_multicore_launches() as ranges:  # a traced launch calls its kernel's dispatcher
            calls(trace=True)
        assert ranges or target == "a2a3", "the traced calls ran no multicore launch"
        for bad in (-1, rows):
            idx = rng.permutation(rows).astype(np.int32)
            idx[-1] = bad
            with pytest.raises(pto.OutOfBoundsError):
                pto.gather(table, idx, target=target)
            dst = np.zeros_like(table)
            with pytest.raises(pto.OutOfBoundsError):
                pto.scatter(dst, table[:rows], idx, coalesce="row", target=target)
            assert not dst.view(np.uint32).any(), f"index {bad}: the refused scatter wrote its table"
        calls()
    callers_dtypes = [(name, sig) for name, sig in compiled
                      if any(isinstance(t, numba.types.Array) and str(t.dtype) in ("float32", "int32") for t in sig)]
    assert callers_dtypes == [], f"compiled for the caller's dtypes: {callers_dtypes}"
    assert compiled[first_calls:] == [], f"compiled after the first calls: {compiled[first_calls:]}"


@pytest.mark.parametrize("target", ["a5", "a2a3"])
def test_the_first_call_of_a_new_shape_is_planned_without_tiles(target, monkeypatch):
    """A warm process's first call of a new shape: the target's planner (no Tile built), a bounded road (the gather
    within issue #38's 12 files and 150 call events; the scatter also registers as its table's writer and checks
    its operands' overlap: 13 files, and 14 when Numba's dispatcher reports the kernel's call to the profiler, with
    the kernel's own file, as it did at times for the serial Elem kernel), and the result of numpy's own indexing."""
    if target == "a5" and pto.a5_backend() != "multicore":
        pytest.skip("the multicore backend's road is traced")
    rng = np.random.default_rng(1)
    table = rng.standard_normal((64, 64)).astype(np.float32)
    flat = table.reshape(-1).copy()

    def calls(n):
        idx = rng.integers(0, 64, n).astype(np.int32)
        flat_idx = rng.integers(0, flat.size, n).astype(np.int32)
        src = np.ones(n, np.float32)
        return (lambda: pto.gather(table, idx, coalesce="row", oob="clamp", target=target), idx,
                lambda: pto.scatter(flat, src, flat_idx, coalesce="elem", atomic="add", target=target), flat_idx)
    warm_gather, _, warm_scatter, _ = calls(8)
    warm_gather(), warm_scatter()  # loaded and compiled: what follows is a new shape's first call
    gather, idx, scatter, flat_idx = calls(13)

    def no_tile(*args, **kwargs):
        raise AssertionError("a whole-array call built a Tile")
    monkeypatch.setattr(pto.Tile, "__init__", no_tile)
    got = []
    files, events = _traced(lambda: got.append(gather()))
    assert np.array_equal(got[0], table[idx])
    assert len(files) <= 12 and events <= 150, (events, sorted(files))
    before = flat.copy()
    files, events = _traced(scatter)
    want = before.copy()
    np.add.at(want, flat_idx, np.float32(1))
    assert np.array_equal(flat, want)
    assert len(files) <= 14 and events <= 150, (events, sorted(files))


# -- tile ops: the kept launch on a5 and a2a3 ------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["a5", "a2a3"])
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_a_repeated_tile_op_takes_the_kept_launch_and_still_refuses(target, coalesce, monkeypatch):
    from simt_pto.host import dispatch
    rng = np.random.default_rng(11)
    table = rng.standard_normal((64, 64)).astype(np.float32)
    if coalesce == "row":
        idx_tile, shape = pto.Tile.from_array(rng.integers(0, 64, (1, 8)).astype(np.int32)), (8, 64)
    else:
        idx_tile, shape = pto.Tile.from_array(rng.integers(0, 64 * 64, (8, 8)).astype(np.int32)), (8, 8)
    dst, src = pto.Tile("float32", *shape), pto.Tile.from_array(rng.standard_normal(shape).astype(np.float32))
    written = np.zeros_like(table)
    gt, written_gt = pto.GlobalTensor(table), pto.GlobalTensor(written)
    pto.mgather(dst, gt, idx_tile, coalesce=coalesce, target=target)
    pto.mscatter(written_gt, src, idx_tile, coalesce=coalesce, atomic="add", target=target)
    full = []
    for name in ("run_mgather", "run_mscatter"):
        monkeypatch.setattr(dispatch, name, lambda plan, _name=name: full.append(_name))
    rows = idx_tile.valid_numpy().reshape(-1)
    for k in range(2, 4):
        pto.mgather(dst, gt, idx_tile, coalesce=coalesce, target=target)
        pto.mscatter(written_gt, src, idx_tile, coalesce=coalesce, atomic="add", target=target)
        want = np.zeros_like(table)
        flat_want = want.reshape(-1) if coalesce == "elem" else want
        np.add.at(flat_want, rows, k * src.valid_numpy().reshape(len(rows), -1).squeeze(-1) if coalesce == "elem"
                  else k * src.valid_numpy())
        got = dst.valid_numpy()
        assert np.array_equal(got, table[rows] if coalesce == "row" else table.reshape(-1)[rows].reshape(shape))
        assert np.allclose(written, want, rtol=0, atol=1e-5)
    assert full == []  # every repeated call ran the kept launch
    monkeypatch.undo()
    bad = idx_tile.valid_numpy().copy()
    bad.reshape(-1)[3] = 64 * 64 * 2
    idx_tile.set(bad)
    with pytest.raises(pto.OutOfBoundsError):
        pto.mgather(dst, gt, idx_tile, coalesce=coalesce, target=target)


@pytest.mark.parametrize("target", ["a5", "a2a3"])
def test_a_repeated_tile_op_over_shared_memory_is_refused(target):
    """A signature whose launch is kept, called with a table that is the destination tile's own storage: the kept
    launch's overlap check sends it to the full path, which refuses it before anything is written."""
    dst = pto.Tile("float32", 8, 64)
    idx_tile = pto.Tile.from_array(np.arange(8, dtype=np.int32).reshape(1, 8))
    table = np.arange(8 * 64, dtype=np.float32).reshape(8, 64)
    for _ in range(2):
        pto.mgather(dst, pto.GlobalTensor(table), idx_tile, target=target)
    shared = dst.data.reshape(8, 64)
    before = shared.copy()
    with pytest.raises(pto.ConstraintError, match="share"):
        pto.mgather(dst, pto.GlobalTensor(shared), idx_tile, target=target)
    assert np.array_equal(shared, before)
