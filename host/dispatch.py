"""The one host entry point of the tile ops: a validated plan (:class:`simt_pto.plan.Plan`) runs on its target.

:mod:`.tile_ops` validates a call into a plan and forwards it here. :func:`runner` picks the target's code:

* ``cpu``: :mod:`simt_pto.kernels.cpu`, the CPU simulator's semantics in numpy (the golden);
* ``a2a3``: :mod:`simt_pto.kernels.a2a3`, the A2/A3 paths as sequential Numba loops;
* ``a5``: :mod:`simt_pto.host.a5_runner`, the SIMT kernels' dispatch, on the backend :func:`simt_pto.backend.a5_backend`
  chooses at the first A5 call (``gpu``, ``multicore`` or ``simulator``; ``SIMT_PTO_A5_BACKEND`` /
  ``set_a5_backend``).

Each target's code is imported at its first call, so ``import simt_pto`` loads no kernel.
"""
from __future__ import annotations

import importlib

import numpy as np

from simt_pto import backend as _backends
from simt_pto.backend import JitRequiredError, MissingExtraError, a5_backend, first_use, require_jit

from .kept_launch import HOST_KEEPING, KeptLaunch, tile_checks, tile_operands

RUNNERS = {"cpu": "simt_pto.kernels.cpu", "a2a3": "simt_pto.kernels.a2a3", "a5": "simt_pto.host.a5_runner"}
"""The module that runs each target's plans (``run_mgather(plan)``, ``run_mscatter(plan)``)."""


_loaded: dict = {}
"""target -> its runner module, once imported (a dict lookup per call instead of the import system's)."""


def runner(target: str):
    """The module that runs ``target``'s plans (imported on first use, under :data:`~simt_pto.backend.first_use`:
    it loads Numba and the kernels, maybe while another thread does too)."""
    module = _loaded.get(target)
    if module is None:
        try:
            name = RUNNERS[target]
        except KeyError:
            raise ValueError(f"unknown target {target!r}; expected one of {', '.join(RUNNERS)}") from None
        with first_use:
            module = _loaded[target] = importlib.import_module(name)
    return module


def _run(plan, op: str) -> None:
    """Run a validated plan's ``op`` (``run_mgather`` / ``run_mscatter``) on its target (a5: on the current A5
    backend; a2a3: only with Numba's JIT, and its loop kept for the next call of the signature)."""
    if plan.target == "a2a3":
        require_jit("a2a3")
    run = getattr(runner(plan.target), op)
    if plan.target == "a5":
        run(plan, a5_backend())
        return
    run(plan)
    signature = plan.signature
    if plan.target == "a2a3" and signature is not None and signature.kept is None:
        signature.kept = _kept_a2a3(plan)


def _kept_a2a3(plan) -> KeptLaunch | None:
    """The kept launch of an A2/A3 tile op: its ND or NZ loop, looked up once (:func:`simt_pto.kernels.a2a3.tile_gatherer`
    / ``tile_scatterer``), with the per-call checks every tile op's kept launch has (:func:`.kept_launch.tile_checks`);
    None for the plans the loop does not serve (GM -> L1, a device table)."""
    a2a3 = runner("a2a3")
    found = (a2a3.tile_gatherer if plan.op == "MGATHER" else a2a3.tile_scatterer)(plan)
    if found is None:
        return None
    loop, dtype = found
    data = "dst" if plan.op == "MGATHER" else "src"
    views = ((data, np.dtype(dtype)), ("idx", np.dtype(np.uint32)), ("table", np.dtype(dtype)))
    return KeptLaunch(((loop, views),), **tile_checks(plan))


def run_mgather(plan) -> None:
    """Run a validated MGATHER plan on its target (a5: on the current A5 backend)."""
    _run(plan, "run_mgather")


def run_kept(signature, tile, table, idx) -> bool:
    """A repeated tile op (MGATHER or MSCATTER) of a validated signature (:func:`simt_pto.constraints.cached_mgather`
    / ``cached_mscatter``) on the launch its target keeps for it (a5 on ``multicore``:
    ``simt_pto.host.a5_runner.run_kept``; a2a3: its ND loop, :func:`_kept_a2a3`), checked only in what depends on the
    call's memory and index values. False when the target keeps none or the call needs the full path: nothing was
    run."""
    target = signature.target
    # a2a3, and a5 on a backend the process has resolved that keeps launches over host memory (resolving it checked
    # the JIT; choosing another backend forgets every kept launch): the kept launch, with no other call
    if target == "a2a3" or target == "a5" and _backends._resolved in HOST_KEEPING:
        kept = signature.kept
        return kept is not None and kept.run(tile_operands(signature.op, tile, table, idx))
    if target != "a5":
        return False
    try:
        backend = a5_backend()
    except (JitRequiredError, MissingExtraError):  # the full path raises it, after its own checks, as a first call
        return False
    return runner("a5").run_kept(signature, backend, tile, table, idx)


def run_mscatter(plan) -> None:
    """Run a validated MSCATTER plan on its target (a5: on the current A5 backend)."""
    _run(plan, "run_mscatter")


__all__ = ["RUNNERS", "run_kept", "run_mgather", "run_mscatter", "runner"]
