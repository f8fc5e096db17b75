"""simt_pto.kernels.numba_inlining: each inlined callee's untyped IR built once per process and its scope copied once
per copy of its IR, for our compiles only, with the same compiled code."""
from __future__ import annotations

import threading

import numba
import pytest
from numba.core import inline_closurecall, ir

from conftest import requires_toolchain, run_python
from simt_pto.host.tools import kernel_report
from simt_pto.kernels import numba_inlining
from simt_pto.kernels.a5 import simt


def _untouched() -> bool:
    """Numba's Scope and InlineWorker as Numba defines them."""
    worker = inline_closurecall.InlineWorker
    return ("__deepcopy__" not in vars(ir.Scope) and not hasattr(worker.inline_ir, "__wrapped__")
            and not hasattr(worker.inline_function, "__wrapped__"))


def _float16_add_kernel():
    """The A5 Elem scatter kernel of a float16 Add and its Numba argument types: the deepest inlining of the package
    (walk, visitor, store rule, CAS loop, the 16-bit float adder and its helpers)."""
    spec = kernel_report.launch_of(kernel_report.build_plan("mscatter", "elem", atomic="add", dtype="float16"))
    return spec, kernel_report.signature(spec)


def _compile_cpu(spec, signature) -> list[str]:
    """The machine code of a fresh CPU compile (no disk cache), as its opcodes."""
    dispatcher = numba.njit(signature, nogil=True)(simt.bound_source(spec.kernel, spec.policy, "cpu"))
    return kernel_report.opcodes(next(iter(dispatcher.inspect_asm().values())), "#")


def test_import_and_every_exit_leave_numba_as_it_was():
    assert _untouched()
    with numba_inlining.inlining_without_repeats():
        assert "__deepcopy__" in vars(ir.Scope)
        with numba_inlining.inlining_without_repeats():  # nested: still in place, and the inner exit removes nothing
            pass
        assert "__deepcopy__" in vars(ir.Scope)
    assert _untouched()
    with pytest.raises(RuntimeError, match="inside"):
        with numba_inlining.inlining_without_repeats():
            raise RuntimeError("a failure inside a compile")
    assert _untouched()


def test_each_inlining_copies_each_scope_once_per_copy_of_the_callee(monkeypatch):
    spec, signature = _float16_add_kernel()
    inlinings, asked, made = [0], [0], [0]
    real_deepcopy, real_inline_ir = numba_inlining._scope_deepcopy, inline_closurecall.InlineWorker.inline_ir

    def counting_deepcopy(self, memo):
        copies = getattr(numba_inlining._state, "copies", None)
        if copies is not None:
            asked[0] += 1
            made[0] += id(self) not in copies
        return real_deepcopy(self, memo)

    def counting_inline_ir(self, *args, **kwargs):
        inlinings[0] += 1
        return real_inline_ir(self, *args, **kwargs)

    monkeypatch.setattr(numba_inlining, "_scope_deepcopy", counting_deepcopy)
    monkeypatch.setattr(inline_closurecall.InlineWorker, "inline_ir", counting_inline_ir)
    with numba_inlining.inlining_without_repeats():
        numba.njit(signature, nogil=True)(simt.bound_source(spec.kernel, spec.policy, "cpu"))
    assert inlinings[0] > 20
    # Numba copies a callee's IR twice per inlining, block by block, and each block asks for the function's scope
    # (and through it for its parent): one copy of each is made per copy of the IR, not one per block
    assert made[0] <= 4 * inlinings[0]
    assert asked[0] > 3 * made[0], (asked, made)


def test_a_cpu_kernel_compiles_to_the_same_code_with_each_callee_built_once(monkeypatch):
    """The float16 Add's Elem kernel (the deepest inlining: walk, visitor, store rule, CAS loop, the 16-bit float
    adder and its helpers), compiled three times. Ours, with no callee's IR remembered yet, builds each callee once,
    where Numba's own inlining rebuilds it at every call site; ours again, every callee remembered, builds none. All
    three give the same machine code."""
    monkeypatch.setattr(numba_inlining, "_UNTYPED", {})
    built = []
    real = inline_closurecall.InlineWorker.run_untyped_passes

    def counting(self, func, *args, **kwargs):
        built.append(func)
        return real(self, func, *args, **kwargs)

    monkeypatch.setattr(inline_closurecall.InlineWorker, "run_untyped_passes", counting)
    spec, signature = _float16_add_kernel()
    with numba_inlining.inlining_without_repeats():
        first = _compile_cpu(spec, signature)
    built_first, built[:] = list(built), []
    assert numba_inlining._UNTYPED, "no callee's IR was remembered"
    assert len(built_first) == len(set(built_first)) > 5  # each callee built once, even where inlined at several sites
    plain = _compile_cpu(spec, signature)
    built_plain, built[:] = list(built), []
    assert len(built_plain) > len(built_first)  # Numba's own: rebuilt at each site
    with numba_inlining.inlining_without_repeats():
        remembered = _compile_cpu(spec, signature)
    assert built == []  # every callee remembered from the first compile
    assert first == remembered == plain and len(plain) > 500 and "lock" in plain  # the CAS loop: lock cmpxchg


def test_a_compile_in_another_thread_waits_until_ours_is_done():
    entered, release = threading.Event(), threading.Event()
    seen = []

    def ours():
        with numba_inlining.inlining_without_repeats():
            entered.set()
            release.wait(60)

    def theirs():
        seen.append(numba.njit(lambda x: x + 1)(1))  # a compile of someone else's function

    holder = threading.Thread(target=ours)
    holder.start()
    assert entered.wait(60)
    other = threading.Thread(target=theirs)
    other.start()
    other.join(0.5)
    assert other.is_alive() and not seen  # Numba's compiler lock: it cannot see our replaced methods
    release.set()
    holder.join(60)
    other.join(60)
    assert seen == [2] and _untouched()


GPU_PTX = """
import contextlib, os
os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
from simt_pto.host.tools import kernel_report
from simt_pto.kernels import numba_inlining
spec = kernel_report.launch_of(kernel_report.build_plan("mscatter", "elem", atomic="add", dtype="float16"))
shared = kernel_report.compile_ptx(spec, 90)
remembered = kernel_report.compile_ptx(spec, 90)  # every callee's IR remembered from the compile before
numba_inlining.inlining_without_repeats = contextlib.nullcontext
plain = kernel_report.compile_ptx(spec, 90)
shared, remembered, plain = (kernel_report.opcodes(ptx, "//") for ptx in (shared, remembered, plain))
print(shared == remembered == plain, "atom.global.cas.b32" in plain)
"""


@requires_toolchain
def test_a_gpu_kernel_compiles_to_the_same_ptx_with_and_without_it():
    proc = run_python(GPU_PTX, SIMT_PTO_A5_BACKEND="gpu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["True", "True"]
