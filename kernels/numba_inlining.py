"""Numba's IR inlining with each callee's scope copied once: the same compiled code, in about two thirds of the time.

Every kernel of this package is written as small ``inline="always"`` helpers (walks, visitors, the store rule, the
16-bit float adder), which Numba inlines at IR level, before typing. For each call site it copies the callee's IR
twice (``InlineWorker.inline_ir``, numba and numba-cuda alike), and it copies that IR block by block, each block with
a fresh ``copy.deepcopy`` memo: so each block gets its own copy of the callee's whole variable scope, every variable
of the function in it. The callee's IR holds what it has already inlined, so the cost grows with the depth of the
helpers. In a cold compile of a float16 Add Elem kernel for the GPU, these copies were about 60% of the time.

:func:`scope_copied_once` runs a compile with one change: within one copy of a callee's IR, every block's variables
share one copy of the scope, as a single ``copy.deepcopy`` of the IR's blocks would give (Numba asserts that an
inlined function has one scope, by equality). Nothing else changes: the two copies of one inlining are still
distinct, and deep copies of IR outside the inliner (loop unrolling, for one) copy as before. Measured on the
2-core development machine, a cold run of the test suite went from 7:12 to 4:55, and the compile proof's 213 GPU
specializations gave the same PTX, byte for byte (``tests/test_numba_inlining.py`` checks it on a kernel).

It is a workaround of Numba's cost, not of its result, and it is scoped: the two methods it replaces
(``Scope.__deepcopy__``, which Numba does not define, and ``InlineWorker.inline_ir``) are in place only while a
compile of ours runs, under Numba's compiler lock, which every Numba compile takes (numba-cuda's takes it first), so
no other compile in the process ever sees them, and ``import simt_pto`` changes nothing. Where a Numba version
defines ``Scope.__deepcopy__`` itself or has no ``InlineWorker.inline_ir``, it does nothing.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import sys
import threading

_PAIRS = (("numba.core.ir", "numba.core.inline_closurecall"),
          ("numba.cuda.core.ir", "numba.cuda.core.inline_closurecall"))
"""(IR module, inliner module) of Numba's CPU compiler and of numba-cuda's (taken when numba-cuda is loaded)."""

_state = threading.local()  # the copies of one inlining (``copies``): scope id -> (scope, its copy)
_depth = 0  # nested scope_copied_once blocks of the thread that holds the compiler lock


def _scope_deepcopy(self, memo):
    """``copy.deepcopy`` of a Numba ``Scope``: inside an inlining, one copy per scope for the whole copy of the
    callee's IR; elsewhere as Python's default deep copy (a new object, its attributes deep-copied)."""
    copies = getattr(_state, "copies", None)
    if copies is not None:
        hit = copies.get(id(self))
        if hit is not None and hit[0] is self:
            memo[id(self)] = hit[1]
            return hit[1]
    new = self.__class__.__new__(self.__class__)
    memo[id(self)] = new
    for name, value in self.__dict__.items():
        setattr(new, name, copy.deepcopy(value, memo))
    if copies is not None:
        copies[id(self)] = (self, new)  # the source is held: its id cannot be reused while the entry lives
    return new


def _sharing(inline_ir):
    """``InlineWorker.inline_ir`` with one scope copy per source scope while it runs (its two copies of the callee
    copy two different scopes: the callee's, then the first copy's)."""
    @functools.wraps(inline_ir)
    def inline_ir_sharing(self, *args, **kwargs):
        outer = getattr(_state, "copies", None)
        _state.copies = {}
        try:
            return inline_ir(self, *args, **kwargs)
        finally:
            _state.copies = outer
    return inline_ir_sharing


def _patchable() -> list:
    """The (Scope class, InlineWorker class) pairs of the loaded compilers that this workaround applies to."""
    pairs = []
    for ir_name, inliner_name in _PAIRS:
        if inliner_name.startswith("numba.cuda.") and "numba.cuda.core" not in sys.modules:
            continue  # numba-cuda not loaded (or Numba's own, older numba.cuda): nothing of it compiles
        try:
            ir = importlib.import_module(ir_name)
            inliner = importlib.import_module(inliner_name)
        except ImportError:
            continue
        scope, worker = getattr(ir, "Scope", None), getattr(inliner, "InlineWorker", None)
        if scope is None or worker is None or not callable(getattr(worker, "inline_ir", None)):
            continue
        if "__deepcopy__" in vars(scope):
            continue  # this Numba copies scopes its own way: leave it
        pairs.append((scope, worker))
    return pairs


@contextlib.contextmanager
def scope_copied_once():
    """Run the body (a Numba compile of ours) with each inlined callee's scope copied once per copy of its IR,
    holding Numba's compiler lock (re-entrant, so the compile inside takes it again)."""
    global _depth
    from numba.core.compiler_lock import global_compiler_lock
    with global_compiler_lock:
        if _depth:
            _depth += 1
            try:
                yield
            finally:
                _depth -= 1
            return
        patched = []
        try:
            for scope, worker in _patchable():
                # recorded before it is replaced: the finally below restores whatever this loop got to
                patched.append((scope, worker, vars(worker).get("inline_ir")))  # None: inherited (deleting restores)
                worker.inline_ir = _sharing(worker.inline_ir)
                scope.__deepcopy__ = _scope_deepcopy
            _depth = 1
            yield
        finally:
            _depth = 0
            for scope, worker, own in reversed(patched):
                if own is None:
                    if "inline_ir" in vars(worker):
                        del worker.inline_ir
                else:
                    worker.inline_ir = own
                if "__deepcopy__" in vars(scope):
                    del scope.__deepcopy__


def compiling(compile_fn):
    """``compile_fn`` run inside :func:`scope_copied_once` (a dispatcher's ``_compile_for_args``, ``compile_ptx``)."""
    @functools.wraps(compile_fn)
    def compile_with_scopes_copied_once(*args, **kwargs):
        with scope_copied_once():
            return compile_fn(*args, **kwargs)
    return compile_with_scopes_copied_once


__all__ = ["compiling", "scope_copied_once"]
