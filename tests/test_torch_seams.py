"""Where simt_pto meets PyTorch and JAX (issue 37, items 1, 2 and 9): tensors read as torch reads them, written only
where torch's own in-place write would be, autograd told of every write; arrays that cannot be read refused naming
the argument; index and data arrays in the other byte order taken alike for every width.

Oracles: torch's own ops (indexing, ``torch.take``, ``index_put_`` under the same grad mode, autograd's version
check) and numpy. The cases skip where torch (or JAX) is not installed.
"""
from __future__ import annotations

import math
import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import simt_pto as pto
from conftest import TARGETS, requires_cuda

torch = pytest.importorskip("torch", reason="the PyTorch seams need torch (pip install torch)")

from simt_pto.call import scatter_policy  # noqa: E402  (after the skip: nothing here runs without torch)
from simt_pto.host import in_memory, kept_launch  # noqa: E402
from simt_pto.plan import SIGNATURES  # noqa: E402


def conj_imag():
    """``(x, x.conj().imag)``: a complex64 tensor and the float32 view of its imaginary parts that torch reads
    negated (the negative bit)."""
    x = torch.complex(torch.arange(16.0), 100 + torch.arange(16.0)).reshape(8, 2)
    view = x.conj().imag
    assert view.is_neg() and not view.is_contiguous()
    return x, view


def neg_view(values):
    """A tensor holding ``-values`` in memory that torch reads as ``values`` (``torch._neg_view``)."""
    view = torch._neg_view(-torch.as_tensor(values))
    assert view.is_neg()
    return view


# -- item 1: views with a lazy negation ----------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_a_view_with_a_lazy_negation_is_read_as_torch_reads_it(target):
    _, table = conj_imag()
    idx = torch.tensor([1, 3, 1])
    assert torch.equal(pto.gather(table, idx, target=target), table[idx])
    assert torch.equal(pto.gather(table, idx, coalesce="elem", target=target), torch.take(table, idx))
    # as the indices: memory holds -1, -3; torch reads 1, 3
    assert torch.equal(pto.gather(torch.arange(8.0).reshape(4, 2), neg_view([1, 3]), target=target),
                       torch.arange(8.0).reshape(4, 2)[[1, 3]])
    # as the source of a scatter: torch's index_put_ of the same source is the oracle
    src = neg_view(torch.arange(4.0).reshape(2, 2) + 1)
    got, want = torch.zeros(4, 2), torch.zeros(4, 2)
    pto.scatter(got, src, torch.tensor([2, 0]), target=target)
    want.index_put_((torch.tensor([2, 0]),), src)
    assert torch.equal(got, want)


@pytest.mark.parametrize("target", TARGETS)
def test_a_view_with_a_lazy_negation_is_never_written(target):
    x, table = conj_imag()
    before = x.clone()
    with pytest.raises(pto.ConstraintError, match=r"table is a view with a lazy negation .*resolve_neg"):
        pto.scatter(table, torch.ones(1, 2), torch.tensor([2]), target=target)
    with torch.no_grad(), pytest.raises(pto.ConstraintError, match="table is a view with a lazy negation"):
        pto.scatter(table, torch.ones(1, 2), torch.tensor([2]), coalesce="row", atomic="add", target=target)
    assert torch.equal(x, before) and table._version == 0
    out = neg_view(torch.zeros(2, 2))
    with pytest.raises(pto.ConstraintError, match="out is a view with a lazy negation"):
        pto.gather(torch.ones(4, 2), torch.tensor([0, 1]), out=out, target=target)
    assert torch.equal(out, torch.zeros(2, 2))


@pytest.mark.parametrize("target", TARGETS)
def test_a_zero_tensor_reads_as_zeros_and_is_not_written(target):
    table = torch._efficientzerotensor((4, 2))
    assert table._is_zerotensor()
    assert torch.equal(pto.gather(table, torch.tensor([3, 0]), target=target), torch.zeros(2, 2))
    with pytest.raises(pto.ConstraintError, match="table is a zero tensor"):
        pto.scatter(table, torch.ones(1, 2), torch.tensor([1]), target=target)
    with pytest.raises(RuntimeError, match="ZeroTensors are immutable"):  # torch refuses the write too
        table.index_put_((torch.tensor([1]),), torch.ones(1, 2))


def _fake_tensor():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        return torch.ones(4, 2)


def _quiet(make):
    """``make()`` without its warnings: quantized tensors are deprecated, nested and CSR ones a prototype or beta;
    all are still made."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make()


def _quantized():
    return _quiet(lambda: torch.quantize_per_tensor(torch.ones(4, 2), 0.5, 0, torch.quint8))


def _nested(layout):
    return _quiet(lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=layout))


UNREADABLE = {
    "meta": (lambda: torch.ones(4, 2, device="meta"), "on the 'meta' device"),
    "sparse": (lambda: torch.ones(4, 2).to_sparse(), "torch.sparse_coo tensor"),
    "sparse_csr": (lambda: _quiet(lambda: torch.ones(4, 2).to_sparse_csr()), "torch.sparse_csr tensor"),
    "quantized": (_quantized, "quantized tensor"),
    "nested": (lambda: _nested(torch.strided), "nested tensor"),
    "jagged": (lambda: _nested(torch.jagged), "nested tensor"),
    "fake": (_fake_tensor, "FakeTensor is a tensor subclass with its own dispatch"),
}


@pytest.mark.parametrize("kind", UNREADABLE)
@pytest.mark.parametrize("role", ["table", "idx", "src", "out"])
def test_a_tensor_with_no_readable_memory_is_refused_naming_the_argument(kind, role):
    make, words = UNREADABLE[kind]
    bad = make()
    table, idx = torch.zeros(4, 2), torch.tensor([1, 2])
    before = table.clone()
    with pytest.raises(TypeError, match=f"^{role}: .*{words}"):
        if role == "out":
            pto.gather(table, idx, out=bad, target="cpu")
        elif role == "src":
            pto.scatter(table, bad, idx, target="cpu")
        else:
            pto.gather(bad if role == "table" else table, bad if role == "idx" else idx, target="cpu")
    assert torch.equal(table, before)


def test_tensors_of_torch_func_transforms_are_refused():
    table = torch.ones(4, 2)

    def gathered(row):
        with pytest.raises(TypeError, match="^table: .*torch.func.vmap batched tensor"):
            pto.gather(row, torch.tensor([0]), target="cpu")
        return row
    torch.func.vmap(gathered)(torch.ones(3, 4, 2))

    def loss(w):
        with pytest.raises(TypeError, match="^table: .*torch.func.grad"):
            pto.gather(w, torch.tensor([0]), target="cpu")
        return w.sum()
    torch.func.grad(loss)(table)


def test_a_tensor_subclass_without_its_own_dispatch_is_read_as_a_tensor():
    class Tagged(torch.Tensor):
        pass
    table = torch.arange(8.0).reshape(4, 2).as_subclass(Tagged)
    got = pto.gather(table, torch.tensor([3, 1]), target="cpu")
    assert isinstance(got, torch.Tensor) and torch.equal(got, torch.arange(8.0).reshape(4, 2)[[3, 1]])


# -- item 2: a write keeps torch's in-place rules, and autograd sees it --------------------------------------------

def _torch_refuses(table, src, idx) -> bool:
    """Whether torch's own index_put_ refuses this write under the current grad / inference mode."""
    try:
        table.index_put_((idx,), src)
    except RuntimeError:
        return True
    return False


def _leaf():
    return torch.zeros(4, 2, requires_grad=True)


def _inference():
    with torch.inference_mode():
        return torch.zeros(4, 2)


def _plain():
    return torch.zeros(4, 2)


MODES = {
    "grad": lambda: torch.enable_grad(),
    "no_grad": lambda: torch.no_grad(),
    "inference_mode": lambda: torch.inference_mode(),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("make", [_leaf, _inference, _plain], ids=["leaf_requires_grad", "inference", "plain"])
@pytest.mark.parametrize("mode", MODES)
def test_a_scatter_is_refused_exactly_where_index_put_is(target, make, mode):
    """Leaves that require grad, inference tensors and plain tensors, written under grad mode, no_grad and inference
    mode: refused where torch refuses, before anything is written; else written, with the version counter bumped
    as torch bumps it (an inference tensor has none)."""
    src, idx = torch.full((2, 2), 7.0), torch.tensor([3, 1])
    oracle, table = make(), make()
    version = None if table.is_inference() else table._version
    with MODES[mode]():
        refused = _torch_refuses(oracle, src, idx)
        if refused:
            with pytest.raises(pto.ConstraintError, match="^MSCATTER on .*table (is a leaf|was made under)"):
                pto.scatter(table, src, idx, target=target)
            assert torch.equal(table.detach(), torch.zeros(4, 2))
        else:
            assert pto.scatter(table, src, idx, target=target) is table
            assert torch.equal(table.detach(), oracle.detach())
    if version is not None:
        assert table._version - version == (0 if refused else 1) == oracle._version - version


@pytest.mark.parametrize("keys", ["dispatch keys", "no dispatch keys"])
def test_the_rules_are_the_same_with_and_without_torchs_dispatch_keys(keys, monkeypatch):
    """A plain dense CPU tensor passes the rules in one C call (its dispatch keys, ``torch_rules.plain_keys``); a
    torch without ``torch._C._dispatch_keys`` takes every check one by one. Either way a lazy negation is read as
    torch reads it and never written, a zero tensor reads as zeros, an inference tensor is not written outside
    inference mode, and a plain tensor is read and written in place."""
    from simt_pto import torch_rules
    monkeypatch.setattr(torch_rules, "PLAIN_KEYS", [])
    if keys == "no dispatch keys":
        monkeypatch.delattr(torch._C, "_dispatch_keys")
        assert torch_rules.plain_keys(torch) == [None, None]
    else:
        plain, read_keys = torch_rules.plain_keys(torch)
        assert plain == read_keys(torch.zeros(2)) != read_keys(neg_view([1.0, 2.0]))
    _, lazy = conj_imag()
    idx = torch.tensor([1, 3, 1])
    assert torch.equal(pto.gather(lazy, idx, target="cpu"), lazy[idx])
    with pytest.raises(pto.ConstraintError, match="table is a view with a lazy negation"):
        pto.scatter(lazy, torch.ones(1, 2), torch.tensor([2]), target="a5")
    assert torch.equal(pto.gather(torch._efficientzerotensor((4, 2)), torch.tensor([3, 0]), target="a5"),
                       torch.zeros(2, 2))
    with pytest.raises(pto.ConstraintError, match="table was made under torch.inference_mode"):
        pto.scatter(_inference(), torch.ones(1, 2), torch.tensor([2]), target="a5")
    table = torch.zeros(4, 2)
    assert pto.scatter(table, torch.full((1, 2), 5.0), torch.tensor([2]), target="a5") is table
    assert torch.equal(pto.gather(table, torch.tensor([2, 0]), target="a5"), torch.tensor([[5.0, 5.0], [0.0, 0.0]]))


def test_threads_that_make_their_first_torch_calls_at_once_all_pass_the_rules(monkeypatch):
    """The dispatch keys of a plain tensor are read once per process, by whichever thread calls first: eight threads
    that call at once, again and again with the keys forgotten and the interpreter switching threads every
    microsecond, all pass, and one pair of keys is kept (an append per thread left four entries, 59 times in 200, and
    every later call failed to unpack them)."""
    import sys
    import threading

    from simt_pto import torch_rules
    interval = sys.getswitchinterval()
    errors: list = []
    try:
        sys.setswitchinterval(1e-6)
        for _ in range(100):
            monkeypatch.setattr(torch_rules, "PLAIN_KEYS", [])
            barrier = threading.Barrier(8)

            def first_call():
                barrier.wait()
                try:
                    torch_rules.for_read(torch.zeros(4), "table")
                    torch_rules.check_write(torch.zeros(4), "table", "MSCATTER", "a5")
                except Exception as exc:  # noqa: BLE001 - collected, asserted below
                    errors.append(exc)
            threads = [threading.Thread(target=first_call) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert len(torch_rules.PLAIN_KEYS) == 2
    finally:
        sys.setswitchinterval(interval)
    assert errors == []


@pytest.mark.parametrize("first_in", ["grad mode", "inference mode"])
def test_the_version_bump_counts_as_torchs_own_wherever_its_first_call_is(first_in, monkeypatch):
    """:func:`~simt_pto.torch_rules.bump_version` finds its way to torch's counter at its first call, perhaps under
    inference mode, where a tensor made there has no counter: the way found adds one to a plain tensor's counter
    and its aliases' at each call, as ``torch.autograd.graph.increment_version`` does, and leaves an inference
    tensor as it was."""
    from simt_pto import torch_rules
    monkeypatch.setattr(torch_rules, "_INCREMENT", [])  # (this process's first bump, again)
    table, oracle = torch.zeros(4), torch.zeros(4)
    alias = table.detach()
    mode = torch.inference_mode() if first_in == "inference mode" else torch.enable_grad()
    with mode:
        inference = torch.zeros(2)
        torch_rules.bump_version(inference if first_in == "inference mode" else table)
    if first_in == "grad mode":
        torch.autograd.graph.increment_version(oracle)
    for _ in range(2):
        torch_rules.bump_version(table)
        torch.autograd.graph.increment_version(oracle)
    assert len(torch_rules._INCREMENT) == 1
    assert table._version == oracle._version == alias._version == 3 - (first_in == "inference mode")
    assert torch.equal(inference, torch.zeros(2)) and inference.is_inference() == (first_in == "inference mode")


@pytest.mark.parametrize("target", TARGETS)
def test_a_non_leaf_that_requires_grad_is_refused_while_grad_mode_is_on(target):
    """torch would record the write in the graph; a scatter records no grad_fn, so it refuses rather than let
    backward compute a wrong gradient."""
    w = torch.ones(4, 2, requires_grad=True)
    y = w * 2
    with pytest.raises(pto.ConstraintError, match="table requires grad and grad mode is on.*no grad_fn"):
        pto.scatter(y, torch.ones(1, 2), torch.tensor([0]), target=target)
    with pytest.raises(pto.ConstraintError, match="out requires grad and grad mode is on"):
        pto.gather(torch.ones(4, 2), torch.tensor([0, 1]), out=w[:2] * 1, target=target)
    assert torch.equal(y.detach(), torch.full((4, 2), 2.0))


def _saved_for_backward():
    """``(w, y, loss)``: a non-leaf ``y`` that ``loss`` saved for its backward pass."""
    w = torch.ones(4, 2, requires_grad=True)
    y = w * 2
    return w, y, (y * y).sum()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("route", ["no_grad", "detach"])
def test_backward_refuses_a_tensor_a_scatter_overwrote_as_after_index_put(target, route):
    """The issue's case: without the version bump, backward ran on the overwritten values (gradient 10 where the
    forward pass gives 2). Written under no_grad, or through ``y.detach()`` (which shares the version counter)."""
    src, idx = torch.full((1, 2), 5.0), torch.tensor([0])
    for write in ("index_put_", "pto"):
        w, y, loss = _saved_for_backward()
        with torch.no_grad() if route == "no_grad" else torch.enable_grad():
            written = y if route == "no_grad" else y.detach()
            if write == "index_put_":
                written.index_put_((idx,), src)
            else:
                pto.scatter(written, src, idx, target=target)
        assert torch.equal(y.detach()[0], src[0])
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()


@pytest.mark.parametrize("target", TARGETS)
def test_a_gather_into_out_bumps_the_version_counter(target):
    out = torch.zeros(2, 2)
    pto.gather(torch.arange(8.0).reshape(4, 2), torch.tensor([3, 0]), out=out, target=target)
    assert out._version == 1 and torch.equal(out, torch.arange(8.0).reshape(4, 2)[[3, 0]])
    w, y, loss = _saved_for_backward()
    with torch.no_grad():
        pto.gather(torch.arange(8.0).reshape(4, 2), torch.tensor([3, 0]), out=y[1:3], target=target)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_every_repeated_scatter_bumps_and_is_checked(target, coalesce):
    """A signature that has run takes the fast path where it can: a tensor never does without the rules."""
    table = torch.zeros(4, 2)
    src = torch.ones(2, 2) if coalesce == "row" else torch.ones(2)
    for call in range(1, 4):
        pto.scatter(table, src * call, torch.tensor([1, 3]), coalesce=coalesce, target=target)
        assert table._version == call
    leaf = torch.zeros(4, 2, requires_grad=True)
    for _ in range(2):
        with torch.no_grad():
            pto.scatter(leaf, src, torch.tensor([1, 3]), coalesce=coalesce, target=target)
        with pytest.raises(pto.ConstraintError, match="table is a leaf that requires grad"):
            pto.scatter(leaf, src, torch.tensor([1, 3]), coalesce=coalesce, target=target)
    assert leaf._version == 2


class CudaLike(torch.Tensor):
    """A CPU tensor that exports ``__cuda_array_interface__``, as a CUDA tensor does (no GPU here): what the device
    routes (the GPU fast path, a tile op's GlobalTensor) see of a tensor, up to the memory they would launch on."""

    @property
    def __cuda_array_interface__(self):
        if self.requires_grad:  # as torch's own
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")
        return dict(typestr=self.detach().numpy().dtype.str, shape=tuple(self.shape), strides=None,
                    data=(self.data_ptr(), False), version=2)


def test_the_rules_hold_on_the_device_fast_path(monkeypatch):
    """The GPU's kept launch (:meth:`~simt_pto.host.kept_launch.KeptLaunch.run_device`), stood in for by one that
    records its calls: an inference tensor outside inference mode is refused before it runs; a written table's
    version goes up once it has written; a lazy view never takes the kept launch."""
    policy = scatter_policy("row", "none", "undefined", "last", "a5", None, None, True, "auto", None)
    ran = []

    class Recording:
        def run_device(self, pointers, template):
            ran.append(template)
            return True
    with torch.inference_mode():
        frozen = torch.zeros(4, 2).as_subclass(CudaLike)
    table = torch.zeros(4, 2).as_subclass(CudaLike)
    idx, src = torch.tensor([1], dtype=torch.int32).as_subclass(CudaLike), torch.ones(1, 2).as_subclass(CudaLike)
    key, _ = kept_launch.device_operands(policy, table, idx, src)  # (one signature: the types, dtypes and shapes)
    entry = kept_launch.Entry(1, None, 1)
    entry.kept = Recording()
    SIGNATURES.put(key, entry)
    monkeypatch.setattr(pto.backend, "_resolved", "gpu")  # (what the repeated call reads of the process's backend)
    try:
        with pytest.raises(pto.ConstraintError, match="table was made under torch.inference_mode"):
            in_memory.scatter_with(policy, frozen, src, idx)
        assert ran == []
        assert in_memory.scatter_with(policy, table, src, idx) is table and ran == [table] and table._version == 1
    finally:
        SIGNATURES.take(key)
    lazy = torch._neg_view(torch.zeros(4, 2)).as_subclass(CudaLike)
    assert lazy.is_neg() and kept_launch.device_operands(policy, lazy, idx, src) is None


@requires_cuda
def test_the_device_route_applies_the_same_rules():
    """What the whole-array calls take from a CUDA tensor (:func:`simt_pto.host.arrays.wrap`, on tensors that export
    ``__cuda_array_interface__`` as CUDA tensors do): a lazy view is read from a resolved copy; a tensor that
    requires grad is read detached (its ``__cuda_array_interface__`` refuses it) and written only as torch would
    write it; the caller's tensor is what a scatter returns and whose version it bumps."""
    from simt_pto.host.arrays import wrap
    lazy = torch._neg_view(torch.arange(8.0).reshape(4, 2)).as_subclass(CudaLike)
    read = wrap(lazy, "table", op="MGATHER", target="a5")
    assert read.device and read.user is lazy and torch.equal(read.obj, -torch.arange(8.0).reshape(4, 2))
    leaf = torch.zeros(4, 2).as_subclass(CudaLike).requires_grad_()
    with pytest.raises(pto.ConstraintError, match="table requires grad and grad mode is on"):
        wrap(leaf, "table", op="MGATHER", target="a5")
    with torch.no_grad():
        read = wrap(leaf, "table", op="MGATHER", target="a5")
    assert read.device and not read.obj.requires_grad and read.obj.data_ptr() == leaf.data_ptr()
    with pytest.raises(pto.ConstraintError, match="table is a leaf that requires grad"):
        wrap(leaf, "table", op="MSCATTER", target="a5", written=True)
    with pytest.raises(pto.ConstraintError, match="table is a view with a lazy negation"):
        wrap(lazy, "table", op="MSCATTER", target="a5", written=True)
    with torch.no_grad():
        written = wrap(leaf, "table", op="MSCATTER", target="a5", written=True)
    assert written.user is leaf and written.versioned is leaf and written.obj.data_ptr() == leaf.data_ptr()


# -- the tile ops' GlobalTensor over a tensor --------------------------------------------------------------------

def test_a_global_tensor_refuses_a_lazy_view_and_keeps_the_write_rules():
    from simt_pto import torch_rules
    with pytest.raises(pto.ConstraintError, match="GlobalTensor array is a view with a lazy negation"):
        pto.GlobalTensor(conj_imag()[1])
    leaf = torch.zeros(4, 2, requires_grad=True)
    with pytest.raises(pto.ConstraintError, match="table is a leaf that requires grad"):
        with torch_rules.writing(leaf, "table", "MSCATTER", "a5"):
            raise AssertionError("the rules are checked before the op runs")
    with torch.no_grad(), torch_rules.writing(leaf, "table", "MSCATTER", "a5"):
        pass
    assert leaf._version == 1


def test_a_tile_scatter_into_a_tensor_keeps_torch_in_place_rules():
    """``pto.mscatter`` over a GlobalTensor that wraps a tensor (a CUDA tensor in real use: here a CPU tensor that
    exports ``__cuda_array_interface__``) refuses what torch refuses, before the op runs."""
    leaf = torch.zeros(4, 8).as_subclass(CudaLike).requires_grad_()
    table = pto.GlobalTensor(leaf)
    assert table.on_device and table.torch_tensor is leaf
    src = pto.Tile("float32", 1, 8)
    idx = pto.Tile.from_array(np.array([[3, 0, 0, 0, 0, 0, 0, 0]], np.int32), valid=(1, 1))
    with pytest.raises(pto.ConstraintError, match="MSCATTER on cpu: table is a leaf that requires grad"):
        pto.mscatter(table, src, idx, target="cpu")
    assert leaf._version == 0


# -- item 9: arguments --------------------------------------------------------------------------------------------

def test_a_bool_index_gets_the_same_message_from_every_library():
    table = np.arange(8, dtype=np.float32).reshape(4, 2)
    messages = set()
    arrays = [np.array([True, False]), torch.tensor([True, False])]
    try:
        import jax.numpy as jnp
    except ImportError:
        pass  # numpy and torch still compare
    else:
        arrays.append(jnp.array([True, False]))
    for idx in arrays:
        with pytest.raises(pto.ConstraintError, match="idx: index dtype must be an integer dtype") as info:
            pto.gather(table, idx, target="cpu")
        messages.add(str(info.value))
    assert len(messages) == 1 and "got bool" in messages.pop()


def test_a_deleted_jax_array_is_refused_naming_the_argument():
    jnp = pytest.importorskip("jax.numpy")
    table = np.arange(8, dtype=np.float32).reshape(4, 2)
    gone_table, gone_idx = jnp.ones((4, 2)), jnp.array([1, 2])
    gone_table.delete()
    gone_idx.delete()
    with pytest.raises(TypeError, match="^table: the JAX array has been deleted"):
        pto.gather(gone_table, np.array([1]), target="cpu")
    with pytest.raises(TypeError, match="^idx: the JAX array has been deleted"):
        pto.gather(table, gone_idx, target="cpu")
    with pytest.raises(TypeError, match="^src: the JAX array has been deleted"):
        pto.scatter(table, gone_table, np.array([1, 2, 3, 0]), target="cpu")


@pytest.mark.parametrize("target", TARGETS)
def test_a_tensor_that_requires_grad_is_read_only_under_no_grad(target):
    """A gather from a tensor that requires grad (an embedding's weight) records no grad_fn: outside no_grad a loss
    built on it would leave the weight without a gradient, silently. So it is refused there, as a write is, and
    read as torch reads it under no_grad (or through detach())."""
    weight = torch.nn.Parameter(torch.arange(20.0).reshape(5, 4))
    idx = torch.tensor([3, 0, 3])
    with pytest.raises(pto.ConstraintError, match="table requires grad and grad mode is on"):
        pto.gather(weight, idx, target=target)
    src = torch.ones(3, 4, requires_grad=True)
    table = torch.zeros(5, 4)
    with pytest.raises(pto.ConstraintError, match="src requires grad and grad mode is on"):
        pto.scatter(table, src, idx, target=target, atomic="add" if target != "cpu" else "none")
    assert table.eq(0).all() and table._version == 0
    with torch.no_grad():
        got = pto.gather(weight, idx, target=target)
    assert torch.equal(got, torch.index_select(weight.detach(), 0, idx)) and not got.requires_grad
    assert torch.equal(pto.gather(weight.detach(), idx, target=target), weight.detach()[idx])


@pytest.mark.parametrize("target", TARGETS)
def test_a_dual_tensor_of_forward_mode_ad_is_refused_before_anything_is_written(target):
    """Forward-mode AD is on whatever the grad mode: ``index_select`` of a dual tensor carries its tangent into the
    result, and ``index_put_`` gives the written elements the source's tangent. These ops carry none, so a dual table
    or source is refused (the first call and the repeated one alike: a dual tensor has a plain tensor's dispatch keys,
    so the kept launch must not take it), and the primal is read as usual."""
    import torch.autograd.forward_ad as forward_ad
    idx = torch.tensor([3, 0, 3])
    atomic = "add" if target != "cpu" else "none"
    plain_table = torch.arange(20.0).reshape(5, 4)
    for _ in range(2):  # the second call finds a kept launch for this signature
        assert torch.equal(pto.gather(plain_table, idx, target=target), plain_table[idx])
    with forward_ad.dual_level():
        dual = forward_ad.make_dual(plain_table.clone(), torch.ones(5, 4))
        assert forward_ad.unpack_dual(torch.index_select(dual, 0, idx)).tangent is not None  # torch's own carries it
        for grad_mode in (True, False):
            with torch.set_grad_enabled(grad_mode):
                with pytest.raises(pto.ConstraintError, match="table carries a forward-mode tangent"):
                    pto.gather(dual, idx, target=target)
                table = torch.zeros(5, 4)
                with pytest.raises(pto.ConstraintError, match="src carries a forward-mode tangent"):
                    pto.scatter(table, forward_ad.make_dual(torch.ones(3, 4), torch.ones(3, 4)), idx, target=target,
                                atomic=atomic)
                assert table.eq(0).all() and table._version == 0
                before = forward_ad.unpack_dual(dual).primal.clone()
                with pytest.raises(pto.ConstraintError, match="table carries a forward-mode tangent"):
                    pto.scatter(dual, torch.ones(3, 4), idx, target=target, atomic=atomic)
                assert torch.equal(forward_ad.unpack_dual(dual).primal, before)
        primal = forward_ad.unpack_dual(dual).primal
        assert torch.equal(pto.gather(primal, idx, target=target), plain_table[idx])
        plain = torch.zeros(5, 4)  # a plain tensor inside the level: no tangent, no refusal
        pto.scatter(plain, torch.ones(3, 4), torch.tensor([1, 2, 4]), target=target, atomic=atomic)
        assert torch.equal(plain.sum(1), torch.tensor([0.0, 4, 4, 0, 4]))


def test_a_tile_op_refuses_to_write_a_dual_tensor():
    """A tile op's write into a tensor (``torch_rules.writing``, the rule every tile op that writes a GlobalTensor
    applies) refuses a dual tensor under either grad mode, before the op runs."""
    import torch.autograd.forward_ad as forward_ad
    from simt_pto import torch_rules
    with forward_ad.dual_level():
        dual = forward_ad.make_dual(torch.zeros(4, 8), torch.ones(4, 8))
        for grad_mode in (True, False):
            with torch.set_grad_enabled(grad_mode), pytest.raises(pto.ConstraintError, match="table carries a forwa"):
                with torch_rules.writing(dual, "table", "MSCATTER", "a5"):
                    raise AssertionError("the rules are checked before the op runs")


# -- fuzz: tensors of any view, against torch's own ops ------------------------------------------------------------

FUZZ_DTYPES = ("float32", "float16", "bfloat16", "int32", "int16", "int8", "uint8")
VIEWS = ("prefix", "row_step", "col_slice", "transposed", "lazy_negation", "expanded", "requires_grad")
"""How the table is made from a larger base tensor (the memory around it is checked too): a contiguous prefix of
the base's memory, every other row, a column slice, a transpose, a view with a lazy negation, a broadcast row, and
a leaf that requires grad (a tensor of its own)."""
FUZZ_OPS = ("row_gather", "elem_gather", "row_store", "elem_store", "elem_add")
ROWS, COLS = 6, 5


def _table_view(base, view, rows=ROWS, cols=COLS):
    """A ``rows x cols`` view of ``base`` (at least ``2 rows x 2 cols``), made as ``view`` says (:data:`VIEWS`)."""
    if view == "prefix":
        return base.view(-1)[:rows * cols].view(rows, cols)
    if view == "row_step":
        return base[:2 * rows:2, :cols]
    if view == "col_slice":
        return base[:rows, 1:1 + cols]
    if view == "transposed":
        return base[:cols, :rows].t()
    if view == "lazy_negation":
        return torch._neg_view(base[:rows, :cols])
    if view == "expanded":
        return base[0:1, :cols].expand(rows, cols)
    return base[:rows, :cols].clone().requires_grad_()


def _torch_oracle(op, table, idx, src, target):
    """torch's own op on ``table`` (a clone of the caller's view, written in place for a scatter): the result of a
    gather; None for a scatter."""
    if op == "row_gather":
        return table.index_select(0, idx.reshape(-1).long()).reshape(*idx.shape, COLS)
    if op == "elem_gather":
        return torch.take(table, idx.long())
    if op == "row_store":
        table.index_put_((idx.reshape(-1).long(),), src.reshape(-1, COLS))
    else:  # the CPU simulator's MSCATTER stores whatever the atomic (module docstring of tests/test_fuzz.py)
        table.put_(idx.long(), src, accumulate=op == "elem_add" and target != "cpu")
    return None


def _numpy_copy(t):
    """A plain contiguous numpy copy of ``t``'s values in its own dtype (bfloat16 as simt_pto's numpy dtype)."""
    values = t.detach().resolve_neg().contiguous()
    if values.dtype == torch.bfloat16:
        return values.view(torch.int16).numpy().view(pto.dtypes.resolve("bfloat16").numpy)
    return values.numpy().copy()


@settings(max_examples=int(os.environ.get("SIMT_PTO_FUZZ_EXAMPLES", "100000"))
          if os.environ.get("SIMT_PTO_FUZZ") == "long" else 200, deadline=None,
          derandomize=os.environ.get("SIMT_PTO_FUZZ") != "long",
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_tensors_of_any_view_give_torchs_own_results_or_a_refusal_that_writes_nothing(data):
    """A whole-array call on PyTorch tensors made as users make them (slices, strides, a transpose, a broadcast, a
    lazy negation, a leaf that requires grad under either grad mode; int32 or int64 indices, themselves strided)
    gives what torch's own op gives on the same tensors (``index_select``, ``torch.take``, ``index_put_``,
    ``put_``), on every target, and writes nothing outside the table. Or it refuses (ConstraintError / TypeError),
    with every byte of the base tensor unchanged, and only where a rule of the view says so (a lazy view or a
    broadcast is never written; a tensor that requires grad is read and written only under ``torch.no_grad()``)
    or where the same call on plain numpy copies is refused too (the dtype and shape rules of the op)."""
    target = data.draw(st.sampled_from(TARGETS), label="target")
    dtype = getattr(torch, data.draw(st.sampled_from(FUZZ_DTYPES), label="dtype"))
    op = data.draw(st.sampled_from(FUZZ_OPS), label="op")
    view = data.draw(st.sampled_from(VIEWS), label="view")
    if view in ("lazy_negation", "requires_grad") and not dtype.is_floating_point and dtype != torch.int32:
        view = "prefix"  # (torch negates and differentiates these dtypes only)
    if view == "requires_grad" and not dtype.is_floating_point:
        view = "prefix"
    grad_mode = data.draw(st.booleans(), label="grad mode") if view == "requires_grad" else False
    scatter = op not in ("row_gather", "elem_gather")
    row = op.startswith("row")
    n = data.draw(st.integers(1, ROWS if row and op != "row_gather" else 8), label="updates")
    capacity = ROWS if row else ROWS * COLS
    if op in ("row_store", "elem_store") or (op == "elem_add" and target == "cpu"):
        positions = data.draw(st.permutations(range(capacity)), label="distinct indices")[:n]
    else:
        positions = data.draw(st.lists(st.integers(0, capacity - 1), min_size=n, max_size=n), label="indices")
    idx_dtype = data.draw(st.sampled_from((torch.int32, torch.int64)), label="index dtype")
    idx = torch.tensor(positions, dtype=idx_dtype)
    if data.draw(st.booleans(), label="strided indices"):
        idx = torch.stack([idx, torch.full_like(idx, -1)], dim=1)[:, 0]  # every other element of a larger tensor
    base = (torch.arange(2 * ROWS * 2 * COLS) % 61).reshape(2 * ROWS, 2 * COLS).to(dtype)
    table = _table_view(base, view)
    src = None
    if scatter:
        shape = (n, COLS) if row else (n,)
        src = (torch.arange(math.prod(shape)) % 3 + 1).reshape(shape).to(dtype)
        if data.draw(st.booleans(), label="lazy source") and (dtype.is_floating_point or dtype == torch.int32):
            src = torch._neg_view(-src)  # read as torch reads it: the values of src
    owner = table if view == "requires_grad" else base  # the memory the call may touch, and around it
    before = owner.detach().clone()
    out = out_base = None
    out_view = data.draw(st.sampled_from((None,) + VIEWS[:-1]), label="out view") if op == "row_gather" else None
    if out_view == "lazy_negation" and not (dtype.is_floating_point or dtype == torch.int32):
        out_view = "prefix"
    if out_view is not None:  # a gather into the caller's out=, itself a view of a larger tensor
        out_base = torch.full((2 * max(n, COLS), 2 * max(n, COLS)), 7).to(dtype)
        out = _table_view(out_base, out_view, n, COLS)
        out_before = out_base.clone()
    want_table = table.detach().resolve_neg().clone()  # the values torch reads, before the call

    expected_refusal = ((view == "requires_grad" and grad_mode) or (scatter and view in ("lazy_negation", "expanded"))
                        or out_view == "lazy_negation" or (out_view == "expanded" and n > 1))  # (1 row: no broadcast)
    coalesce = "row" if row else "elem"
    from simt_pto import torch_rules
    keys = list(torch_rules.PLAIN_KEYS or torch_rules.plain_keys(torch))
    if not data.draw(st.booleans(), label="rules by dispatch keys"):  # else every check one by one
        torch_rules.PLAIN_KEYS[:] = [None, None]
    with torch.enable_grad() if grad_mode else torch.no_grad(), warnings.catch_warnings():
        # (the oracle knows it: the CPU simulator's MSCATTER replaces whatever the atomic, and says so)
        warnings.filterwarnings("ignore", message="MSCATTER on cpu: atomic ADD is a plain replace")
        try:
            if scatter:
                got = pto.scatter(table, src, idx, coalesce=coalesce, atomic="add" if op == "elem_add" else None,
                                  target=target)
            else:
                got = pto.gather(table, idx, coalesce=coalesce, target=target,
                                 **({} if out is None else {"out": out.reshape(*idx.shape, COLS)}))
        except (pto.ConstraintError, TypeError) as refusal:
            assert torch.equal(owner.detach(), before), f"refused ({refusal}) after writing"
            assert out_base is None or torch.equal(out_base, out_before), f"refused ({refusal}) after writing out"
            if not expected_refusal:  # the op's own rules: the same call on plain numpy copies is refused too
                with pytest.raises((pto.ConstraintError, TypeError)):
                    np_table = _numpy_copy(table)
                    if scatter:
                        pto.scatter(np_table, _numpy_copy(src), idx.numpy(), coalesce=coalesce,
                                    atomic="add" if op == "elem_add" else None, target=target)
                    else:
                        pto.gather(np_table, idx.numpy(), coalesce=coalesce, target=target)
            return
        finally:
            torch_rules.PLAIN_KEYS[:] = keys
    assert not expected_refusal, f"{view} {'written' if scatter else 'read'} without a refusal"
    want = _torch_oracle(op, want_table, idx, None if src is None else src.resolve_neg(), target)
    if scatter:
        assert got is table
        assert torch.equal(table.detach().resolve_neg(), want_table)
        if owner is base:  # nothing outside the view: the base as torch's own write leaves it
            want_base = before.clone()
            _torch_oracle(op, _table_view(want_base, view), idx, src.resolve_neg(), target)
            assert torch.equal(base, want_base)
    else:
        assert isinstance(got, torch.Tensor) and got.dtype == dtype
        assert torch.equal(got.resolve_neg(), want)
        assert torch.equal(owner.detach(), before)
        if out is not None:  # written in place, and nothing of its base around it
            want_base = out_before.clone()
            _table_view(want_base, out_view, n, COLS).copy_(want.reshape(n, COLS))
            assert torch.equal(out_base, want_base)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("coalesce", ["row", "elem"])
@pytest.mark.parametrize("table_dtype, as_dtype", [(torch.int32, "float32"), (torch.int16, "bfloat16"),
                                                   (torch.float16, "int16")])
def test_a_repeated_gather_with_dtype_gives_the_first_calls_tensor(target, coalesce, table_dtype, as_dtype):
    """``dtype=`` reinterprets the table's bits for the call; the result stays a tensor of the table's own dtype,
    on the first call and on the kept launch's repeats alike (its bits the table's rows)."""
    table = torch.arange(64 * 4, dtype=torch.int16).reshape(64, 4).to(table_dtype)
    idx = torch.tensor([3, 5, 1, 63])
    flat = table.reshape(-1) if coalesce == "elem" else table
    want = flat[idx]
    for _ in range(3):
        got = pto.gather(flat, idx, coalesce=coalesce, dtype=as_dtype, target=target)
        assert got.dtype == table_dtype
        assert torch.equal(got, want)
