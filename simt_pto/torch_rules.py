"""PyTorch tensors as operands: read as torch reads them, written only where torch itself would write them.

A tensor's memory is not always its values. torch keeps some of its views lazy: ``x.conj().imag`` holds the
imaginary parts unnegated and sets the *negative bit* (``is_neg()``), which every torch op honours and which
DLPack and ``__cuda_array_interface__`` do not carry; ``conj()`` of a complex tensor sets the conjugate bit
(``is_conj()``); a zero tensor (``_is_zerotensor()``) reads as zeros whatever its memory holds. Other tensors have
no memory to read in the strided layout the kernels take (``meta``, sparse, mkldnn, quantized and nested tensors,
a ``FakeTensor``, a wrapper subclass, a ``torch.func`` or functionalization wrapper).

The rules, one function each, called by every route that takes a tensor (the whole-array calls in
``simt_pto.host.arrays`` and their fast path, and :class:`~simt_pto.tensor.GlobalTensor` for the tile ops):

* :func:`for_read`: the tensor whose memory holds the values torch reads: the tensor itself (detached, the same
  memory), or for a lazy view a resolved copy (``resolve_conj().resolve_neg()``; zeros for a zero tensor). A
  tensor with no readable memory is refused (TypeError naming the argument).
* :func:`check_write`: the refusals of torch's own in-place write (``index_put_``) under the caller's grad mode,
  raised before anything is written: a lazy view (its memory would get the wrong sign; torch refuses to write a
  zero tensor), an inference tensor outside ``torch.inference_mode()``, and a tensor that requires grad while grad
  mode is on (torch refuses a leaf; for a non-leaf it would record the write in the graph, which these ops cannot
  do: no ``grad_fn`` is recorded, so they refuse rather than let autograd compute a wrong gradient).
  A whole-array call's read (``op`` given) of a tensor that requires grad is refused while grad mode is on: the
  result records no ``grad_fn``, so a loss built on it would leave the tensor without a gradient, silently.
* Forward-mode AD: a dual tensor (``torch.autograd.forward_ad.make_dual``, inside a ``dual_level``; grad mode does
  not turn it off) is refused as a whole-array call's operand and as any call's written tensor (ConstraintError):
  torch's own ops carry its tangent into the result (or overwrite it on a write), these ops would drop it, and a
  Jacobian-vector product built on them would come out wrong without a word. :func:`forward_ad_active` tells the
  fast paths when to leave such a call to the full path.
* :func:`bump_version`: after the write, the tensor's version counter goes up, as after any in-place torch op
  (``torch.autograd.graph.increment_version``; an inference tensor has none). A backward pass that saved the
  tensor then refuses to use the overwritten values ("one of the variables needed for gradient computation has been
  modified by an inplace operation"), exactly as after ``index_put_``.
* :func:`for_write` (the whole-array calls) and :func:`in_place` plus :func:`writing` (a tile op's
  ``GlobalTensor``, which uses a tensor's memory in place and cannot stand a copy for a lazy view) combine them.

Nothing here imports torch: a tensor can only come from a process that imported it (:func:`torch_of`).
"""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from .errors import ConstraintError

_NOT_ITS_MEMORY = {
    "Python": "a tensor subclass with its own dispatch (FakeTensor, a wrapper subclass such as a jagged "
              "NestedTensor)",
    "Functionalize": "a functionalization wrapper (torch.func.functionalize, torch.compile tracing)",
    "FuncTorchBatched": "a torch.func.vmap batched tensor",
    "FuncTorchGradWrapper": "a torch.func.grad / jacrev wrapper",
}
"""Dispatch keys of tensors whose memory, if any, does not hold their values: what each one is, for the message."""


def torch_of(obj: object) -> Any:
    """The ``torch`` module when ``obj`` is a ``torch.Tensor`` (of any subclass), else None. torch is never
    imported here: a tensor exists only in a process that has imported it."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(obj, torch.Tensor) else None


PLAIN_KEYS: list = []
"""``[keys of a plain dense CPU tensor, the function that reads a tensor's keys]`` in this process (:func:`plain_keys`).
"""


def plain_keys(torch: Any) -> list:
    """:data:`PLAIN_KEYS`, read once, from a CPU ``torch.empty(0)`` made outside inference mode; ``[None, None]``
    where this torch has no ``torch._C._dispatch_keys``. One C call then tells a plain dense CPU tensor from every
    tensor the rules here treat apart: a lazy negation or conjugation, a zero tensor, meta / sparse / quantized /
    nested, an inference tensor, a FakeTensor and the ``torch.func`` wrappers each add or lack a dispatch key."""
    if not PLAIN_KEYS:
        keys = getattr(torch._C, "_dispatch_keys", None)  # private, but where torch says what a tensor is
        plain = None
        if keys is not None:
            # (a first call under torch.inference_mode() would read an inference tensor's keys, which lack
            # autograd's: every later plain tensor would then take the long checks)
            with torch.inference_mode(False):
                plain = keys(torch.empty(0, device="cpu"))
        # one slice assignment, atomic under the GIL: threads that make their first calls at once each set the
        # same pair (an append each would leave four entries, and every later call would fail to unpack them)
        PLAIN_KEYS[:] = (plain, keys)
    return PLAIN_KEYS


def _refuse_unreadable(torch: Any, t: Any, what: str) -> None:
    """A TypeError naming ``what`` for a tensor with no memory that holds its values in the strided layout."""
    device = t.device.type
    if device == "meta":
        raise TypeError(f"{what}: a tensor on the 'meta' device has a shape and a dtype but no memory to read or "
                        "write; pass a CPU or CUDA tensor")
    if device not in ("cpu", "cuda"):
        raise TypeError(f"{what}: a tensor on device {t.device} is not host or CUDA memory; pass a CPU or CUDA "
                        "tensor (t.cpu())")
    if t.is_nested:
        raise TypeError(f"{what}: a nested tensor has no single strided memory; pass a padded dense tensor "
                        "(t.to_padded_tensor(0))")
    if t.layout != torch.strided:
        raise TypeError(f"{what}: a {t.layout} tensor has no strided memory; pass t.to_dense()")
    if t.is_quantized:
        raise TypeError(f"{what}: a quantized tensor ({t.dtype}) holds no element dtype of these ops; pass "
                        "t.dequantize() or t.int_repr()")
    dispatch_keys = getattr(torch._C, "_dispatch_keys", None)  # private, but where torch says what wraps a tensor
    keys = dispatch_keys(t) if dispatch_keys is not None else None
    for name, kind in _NOT_ITS_MEMORY.items():
        key = getattr(torch._C.DispatchKey, name, None)
        if key is not None and keys is not None and keys.has(key):
            raise TypeError(f"{what}: {type(t).__name__} is {kind}: its memory does not hold its values; pass a "
                            "plain tensor")


def forward_ad_active() -> bool:
    """Whether a forward-mode AD level is open in this process (``torch.autograd.forward_ad.dual_level``): only then
    can a tensor carry a tangent. One module global of torch's, read: the fast paths ask on every torch operand (the
    kept launch reads it inline)."""
    forward_ad = sys.modules.get("torch.autograd.forward_ad")
    return forward_ad is not None and getattr(forward_ad, "_current_level", -1) >= 0


def _refuse_dual(t: Any, what: str, op: str, target: str | None, use: str) -> None:
    """A ConstraintError naming ``what`` for a dual tensor of the open forward-AD level, which ``use`` would drop."""
    if forward_ad_active():
        forward_ad = sys.modules["torch.autograd.forward_ad"]
        if forward_ad.unpack_dual(t).tangent is not None:
            raise ConstraintError(op, target, "a dual tensor (forward-mode AD) is not an operand of these ops",
                                  f"{what} carries a forward-mode tangent: torch would {use}, and these ops carry no "
                                  f"tangent, so the Jacobian-vector product would be wrong; pass "
                                  f"torch.autograd.forward_ad.unpack_dual({what}).primal")


def _lazy_view(t: Any) -> tuple[str, str] | None:
    """``(what lazy view t is, how to write it instead)`` where its memory is not its values, else None."""
    if t._is_zerotensor():
        return ("zero tensor (_is_zerotensor(): it reads as zeros whatever its memory holds, and torch refuses to "
                "write it too)", "pass a materialized tensor (torch.zeros(...))")
    if t.is_neg():
        return ("view with a lazy negation (is_neg(), as x.conj().imag has: torch reads its memory negated)",
                "scatter into a resolved copy, c = {what}.resolve_neg(), then write it back with {what}.copy_(c)")
    if t.is_conj():
        return ("view with a lazy conjugation (is_conj(): torch reads its memory conjugated)",
                "scatter into a resolved copy, c = {what}.resolve_conj(), then write it back with {what}.copy_(c)")
    return None


def for_read(t: Any, what: str, op: str | None = None, target: str | None = None) -> Any:
    """The tensor whose memory a call reads for ``t`` (the call's ``what``), holding the values torch reads: ``t``
    itself (detached where it requires grad: the same memory, which DLPack exports), or for a lazy view a copy with
    the view resolved. Raises TypeError for a tensor with no such memory.

    With ``op`` (a whole-array call's read), a tensor that requires grad while grad mode is on is refused too
    (ConstraintError, after the TypeError above): torch's own gather (``index_select``, ``F.embedding``) would record
    a ``grad_fn`` there; these ops record none, so a loss built on the result would give ``t`` no gradient without a
    word. Under ``torch.no_grad()``, or on ``t.detach()``, the read is plain."""
    torch = sys.modules["torch"]  # (t is a tensor: torch is imported)
    plain, keys = PLAIN_KEYS or plain_keys(torch)
    checked = keys is None or keys(t) != plain  # (a plain dense CPU tensor, the common case: one C call)
    if checked:
        _refuse_unreadable(torch, t, what)
    if op is not None:
        _refuse_dual(t, what, op, target, "carry its tangent into the result")
    if t.requires_grad:
        if op is not None and torch.is_grad_enabled():
            raise ConstraintError(op, target, "a tensor that requires grad is read only under torch.no_grad()",
                                  f"{what} requires grad and grad mode is on: torch would record this read in the "
                                  "graph, and these ops record no grad_fn, so no gradient would reach it; call "
                                  f"under torch.no_grad(), or pass {what}.detach()")
        t = t.detach()  # the same memory; autograd plays no part in a read
    if not checked:  # (its keys say: no lazy view)
        return t
    if t._is_zerotensor():
        return torch.zeros(t.shape, dtype=t.dtype, device=t.device)
    if t.is_neg() or t.is_conj():
        return t.resolve_conj().resolve_neg()
    return t


def read_in_place(t: Any) -> bool:
    """Whether a read of ``t`` reads its own memory as it is exported (:func:`for_read` takes ``t`` itself): no lazy
    view, no copy, no tensor refused, no grad, no forward-AD level open (the fast paths take only such tensors; the
    others go the full way)."""
    try:
        return not forward_ad_active() and for_read(t, "") is t
    except TypeError:
        return False


def _refuse_lazy(t: Any, what: str, op: str, target: str | None) -> None:
    """A ConstraintError naming ``what`` for a lazy view (:func:`_lazy_view`) where its memory is used as it is."""
    lazy = _lazy_view(t)
    if lazy is not None:
        kind, instead = lazy
        raise ConstraintError(op, target, f"the {what} is used in place, so its memory must hold its values",
                              f"{what} is a {kind}; these ops would read and write its memory as it is: "
                              + instead.format(what=what))


def in_place(t: Any, what: str, op: str) -> Any:
    """The tensor whose memory is used in place for ``t``, read and perhaps written later (a tile op's
    :class:`~simt_pto.tensor.GlobalTensor`): ``t``, detached where it requires grad (the same memory). Refuses a
    tensor with no such memory (TypeError) and a lazy view, which no copy can stand for (ConstraintError). The
    rules of a write (:func:`check_write`) are checked by the op that writes."""
    torch = sys.modules["torch"]  # (t is a tensor: torch is imported)
    plain, keys = PLAIN_KEYS or plain_keys(torch)
    if keys is None or keys(t) != plain:  # (a plain dense CPU tensor, the common case: one C call)
        _refuse_unreadable(torch, t, what)
        _refuse_lazy(t, what, op, None)
    return t.detach() if t.requires_grad else t


def check_write(t: Any, what: str, op: str, target: str | None) -> None:
    """Refuse, before anything is written, a write into ``t`` that torch's own in-place write (``index_put_``)
    would refuse under the calling thread's grad mode, or that would not store the values torch reads:
    ConstraintError (TypeError for a tensor with no memory to write)."""
    torch = sys.modules["torch"]  # (t is a tensor: torch is imported)
    plain, keys = PLAIN_KEYS or plain_keys(torch)
    if keys is None or keys(t) != plain:  # (a plain dense CPU tensor, the common case, is none of these: one C call)
        _refuse_unreadable(torch, t, what)
        _refuse_lazy(t, what, op, target)
        if t.is_inference() and not torch.is_inference_mode_enabled():
            raise ConstraintError(op, target, "an inference tensor is written only inside torch.inference_mode()",
                                  f"{what} was made under torch.inference_mode() and is written outside it (torch "
                                  "refuses that in-place update too); call inside torch.inference_mode(), or pass a "
                                  "clone")
    _refuse_dual(t, what, op, target, "give the written elements the tangent of what is written")
    if t.requires_grad and torch.is_grad_enabled():
        if t.is_leaf:
            detail = (f"{what} is a leaf that requires grad, written while grad mode is on (torch refuses that "
                      "in-place write too)")
        else:
            detail = (f"{what} requires grad and grad mode is on: torch would record the write in the graph, and "
                      "these ops record no grad_fn, so the gradient would be wrong")
        raise ConstraintError(op, target, "a tensor that requires grad is written only under torch.no_grad()",
                              f"{detail}; call under torch.no_grad()")


def for_write(t: Any, what: str, op: str, target: str | None) -> Any:
    """:func:`check_write`, then the tensor whose memory the call writes: ``t``, detached where it requires grad
    (the same memory and version counter, which DLPack and ``__cuda_array_interface__`` export)."""
    check_write(t, what, op, target)
    return t.detach() if t.requires_grad else t


@contextlib.contextmanager
def writing(t: Any, what: str, op: str, target: str | None) -> Iterator[None]:
    """Around an op that writes ``t`` (a tile op's table): :func:`check_write` on entry, :func:`bump_version` as the
    op leaves, finished or interrupted (also when the op refuses the call after this check: a version bump
    changes no value, and at worst makes a later backward refuse)."""
    check_write(t, what, op, target)
    try:
        yield
    finally:
        bump_version(t)


def bump_version(t: Any) -> None:
    """Tell autograd that ``t`` was written in place, as every in-place torch op does: its version counter (shared
    with its views and ``detach()``-ed aliases) goes up, so a backward pass that saved it refuses to run on the
    overwritten values. An inference tensor has no version counter: nothing happens."""
    (_INCREMENT[0] if _INCREMENT else _version_increment(torch_of(t)))(t)


_INCREMENT: list = []
"""``[increment(tensor)]``: :func:`bump_version`'s way in this process's torch, found at its first call."""


def _version_increment(torch: Any) -> Any:
    """``torch.autograd.graph.increment_version``, or the C function it ends in called as it calls it, with a
    one-tensor tuple, once a probe tensor has shown that this torch's C function takes one (about 0.45 µs against 0.8
    through the wrapper on the development machine with torch 2.14: a repeated PyTorch scatter bumps on every call);
    before torch 2.1, which had no wrapper, ``torch._C._increment_version`` on the tensor itself, inference tensors
    skipped."""
    wrapper = getattr(torch.autograd.graph, "increment_version", None)
    c_increment = getattr(torch._C, "_increment_version", None)
    if wrapper is None:  # torch < 2.1
        def increment(t: Any) -> None:
            if not t.is_inference():
                c_increment(t)
        _INCREMENT.append(increment)
        return increment
    try:
        with torch.inference_mode(False):  # (a first call in inference mode: a probe with a version counter)
            probe = torch.zeros(1, device="cpu")
        before = probe._version
        c_increment((probe,))
        takes_tuple = probe._version == before + 1
    except Exception:  # noqa: BLE001 - any other form of the C function: the public wrapper
        takes_tuple = False
    if not takes_tuple:
        _INCREMENT.append(wrapper)
        return wrapper

    def increment_one(t: Any) -> None:
        c_increment((t,))
    _INCREMENT.append(increment_one)
    return increment_one


__all__ = ["PLAIN_KEYS", "bump_version", "check_write", "for_read", "for_write", "in_place", "plain_keys", "read_in_place",
           "torch_of", "writing"]
