"""The coalescing model beside the GPU's own counters: sectors per request, predicted and measured, per access kind.

:mod:`.coalescing` predicts, for each warp-level memory instruction of a call's launches, the 32-byte sectors it
touches; :mod:`.gpu_counters` reads what the GPU counted for the same launches (``l1tex__t_sectors`` and
``l1tex__t_requests`` of global loads, stores, atomics and reductions). This module puts the two side by side:

* :func:`replay_on_gpu` runs exactly the launches the analyzer replays for a whole-array call: each launch of the
  call's plan in the hardware's element-width form where the emulator widens its moves
  (:attr:`~simt_pto.launch_spec.LaunchSpec.hardware`), its host arrays staged on the device once;
* :func:`predicted` and :func:`measured` total the two sides per kind (``ld``, ``st``, ``atom``). The model's
  UB streams (index, source and destination tiles) count too: on a CUDA GPU they are device arrays in global
  memory, as :meth:`~.coalescing.CoalescingReport.emulated` totals them. The GPU's ``red`` (an atomic whose result
  is unused) is an atomic of the model's;
* :func:`compare` gives one :class:`KindCheck` a kind, :func:`rank_disagreements` the pairs of points that the
  model and the GPU order differently.

They agree when every kind's sectors per request is within :data:`TOLERANCE` of the model and no pair of points
is ordered differently. :func:`measure_call` does all of it for one call (``simt-pto coalesce --measure``).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .gpu_counters import COALESCING_METRICS, LaunchCounters

KINDS = ("ld", "st", "atom")
TOLERANCE = 0.05
"""Sectors per request may differ from the model's by this fraction (issue 39's agreement)."""


@dataclass(frozen=True)
class KindCheck:
    """One access kind of one call: the model's and the GPU's sectors and requests."""

    kind: str
    predicted_sectors: float
    predicted_requests: float
    measured_sectors: float
    measured_requests: float

    @property
    def predicted(self) -> float | None:
        """The model's sectors per request (None: no request of this kind)."""
        return self.predicted_sectors / self.predicted_requests if self.predicted_requests else None

    @property
    def measured(self) -> float | None:
        return self.measured_sectors / self.measured_requests if self.measured_requests else None

    @property
    def error(self) -> float | None:
        """``measured / predicted - 1`` (None when either side has no request; :meth:`agrees` decides those)."""
        p, m = self.predicted, self.measured
        return None if p is None or m is None else m / p - 1.0

    def agrees(self, tolerance: float = TOLERANCE) -> bool:
        """Within ``tolerance`` of the model; a kind that only one side has disagrees."""
        if self.predicted is None or self.measured is None:
            return self.predicted is None and self.measured is None
        return abs(self.error) <= tolerance


def predicted(report) -> dict[str, tuple[float, float]]:
    """``kind -> (sectors, requests)`` of a :class:`~.coalescing.CoalescingReport`, GM and UB streams together."""
    return {kind: (float(s.sectors), float(s.requests)) for kind, s in report.emulated().items()}


def measured(launches: Sequence[LaunchCounters], kernels: Sequence[str] | None = None) -> dict[str, tuple[float, float]]:
    """``kind -> (sectors, requests)`` summed over ``launches`` (those whose mangled name holds one of ``kernels``,
    when given: a call's own kernels, not an index scan or a copy); ``red`` counts as ``atom``. A ValueError names
    the launches seen when none is one of ``kernels``."""
    if kernels:
        picked = [c for c in launches if any(k in c.kernel for k in kernels)]
        if not picked:
            raise ValueError(f"no launch of {', '.join(kernels)} among the {len(launches)} profiled: "
                             f"{', '.join(c.kernel for c in launches) or 'none'}")
        launches = picked
    out = {}
    for kind, ops in (("ld", ("ld",)), ("st", ("st",)), ("atom", ("atom", "red"))):
        out[kind] = (sum(c.get(op, "sectors") for c in launches for op in ops),
                     sum(c.get(op, "requests") for c in launches for op in ops))
    return out


def compare(predicted_traffic: dict, measured_traffic: dict) -> list[KindCheck]:
    """One :class:`KindCheck` per kind either side has."""
    out = []
    for kind in KINDS:
        ps, pr = predicted_traffic.get(kind, (0.0, 0.0))
        ms, mr = measured_traffic.get(kind, (0.0, 0.0))
        if pr or mr:
            out.append(KindCheck(kind, ps, pr, ms, mr))
    return out


def rank_disagreements(points: Sequence[tuple[str, float, float]], tolerance: float = TOLERANCE
                       ) -> list[tuple[str, str]]:
    """The pairs ``(a, b)`` of ``(label, predicted, measured)`` points that the model puts in one order and the GPU
    in the other, each by more than ``tolerance`` (points within it of each other are ties on that side)."""
    def order(x: float, y: float) -> int:
        if math.isclose(x, y, rel_tol=tolerance):
            return 0
        return -1 if x < y else 1
    out = []
    for i, (a, pa, ma) in enumerate(points):
        for b, pb, mb in points[i + 1:]:
            model, gpu = order(pa, pb), order(ma, mb)
            if model and gpu and model != gpu:
                out.append((a, b))
    return out


# -- one call on the GPU ----------------------------------------------------------------------------------------

def replay_on_gpu(call, backend: str = "gpu") -> Callable[[], None]:
    """``run()``: the launches of ``call`` (a :class:`~simt_pto.launch_spec.CallPlan` built for the ``multicore``
    backend, as the analyzer builds it) as the analyzer replays them (each launch's ``hardware`` form where it has
    one), on ``backend`` (``"gpu"``; ``"simulator"`` to check the staging without a GPU), the host arrays staged
    once (the same host array, the same device array for every launch), synchronised at the end. ``run.kernels``
    names the kernels launched, in order."""
    from simt_pto.host import a5_runner
    from simt_pto.kernels.a5 import simt

    launches = [spec.hardware or spec for spec in call.launches]
    if len(launches) != len(call.steps):
        raise ValueError("replay_on_gpu: the plan has host steps (a guard's or the scalar fallback's): "
                         f"{call.describe()}")
    staged: dict[int, object] = {}

    def stage(value):
        if backend != "gpu" or not a5_runner.holds_host_memory(value):
            return value
        if id(value) not in staged:
            staged[id(value)] = a5_runner.to_device(value)
        return staged[id(value)]

    arguments = [tuple(stage(value) for _, value in spec.args) for spec in launches]

    def run() -> None:
        for spec, args in zip(launches, arguments):
            simt.launch(spec, backend, args)
        if backend == "gpu":  # (numba.cuda is in real mode: the launches above ran on the GPU)
            import numba.cuda
            numba.cuda.synchronize()
    run.kernels = tuple(dict.fromkeys(spec.kernel for spec in launches))  # type: ignore[attr-defined]
    return run


@dataclass(frozen=True)
class CallCheck:
    """One call measured: the analyzer's report, the launches profiled and the comparison per kind."""

    report: object
    launches: tuple[LaunchCounters, ...]
    kinds: tuple[KindCheck, ...]

    def agrees(self, tolerance: float = TOLERANCE) -> bool:
        return all(k.agrees(tolerance) for k in self.kinds)


def measure_call(op: str, coalesce: str, idx: np.ndarray, table_shape: tuple[int, int], dtype: str = "float32", *,
                 atomic: str = "none", conflict: str = "last", oob: str = "undefined", tile_shape=None,
                 last_path: str = "slot", base_offset_bytes: int = 0, profile: Callable | None = None,
                 backend: str = "gpu") -> CallCheck:
    """The analyzer's report of a whole-array call (:func:`~.coalescing.analyze`, ``call="whole"``) and the GPU's
    counters for the same launches (:func:`replay_on_gpu` under :func:`.gpu_counters.measure`, or ``profile(run)``
    when given: it runs ``run`` and returns the launches' :class:`~.gpu_counters.LaunchCounters`), compared per
    kind. ``backend="simulator"`` replays the launches on Numba's CUDA simulator (with a ``profile`` of one's own:
    the simulator has no counters)."""
    from simt_pto.host.in_memory import gather_plan, scatter_plan

    from . import coalescing, gpu_counters

    if profile is None:
        gpu_counters.require()  # before anything is staged on a device
    report = coalescing.analyze(op, coalesce, idx, table_shape, tile_shape, dtype, atomic=atomic, conflict=conflict,
                                oob=oob, call="whole", last_path=last_path, base_offset_bytes=base_offset_bytes)
    row = report.coalesce.name == "ROW"
    table = coalescing.table_at(table_shape, report.dtype, base_offset_bytes)
    given = np.asarray(idx).astype(np.uint32)
    flat = given.reshape(-1) if row else given
    options = dict(coalesce=coalesce, oob=oob, target="a5", tile_rows=None if tile_shape is None else tile_shape[0],
                   backend="multicore")
    if report.op == "MGATHER":
        call = gather_plan(table, flat, **options)
    else:
        src = np.zeros((flat.size, table_shape[1]) if row else flat.shape, dtype=table.dtype)
        call = scatter_plan(table, src, flat, atomic=atomic, conflict=conflict, last_path=last_path, **options)
    run = replay_on_gpu(call, backend)
    launches = tuple((profile or gpu_counters.measure)(run))
    kinds = compare(predicted(report), measured(launches, run.kernels))
    return CallCheck(report, launches, tuple(kinds))


def format_checks(rows: Sequence[tuple[str, Sequence[KindCheck]]], device: str, tolerance: float = TOLERANCE) -> str:
    """A markdown table: per point and kind, predicted and measured sectors per request, the error, the verdict."""
    lines = [f"Sectors per request, the model against {device} (agreement: within {tolerance:.0%})", "",
             "| point | kind | predicted | measured | error | requests (model / GPU) | agrees |",
             "|---|---|---|---|---|---|---|"]
    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"
    for label, kinds in rows:
        for k in kinds:
            err = "-" if k.error is None else f"{k.error:+.1%}"
            lines.append(f"| {label} | {k.kind} | {fmt(k.predicted)} | {fmt(k.measured)} | {err} | "
                         f"{k.predicted_requests:.0f} / {k.measured_requests:.0f} | "
                         f"{'yes' if k.agrees(tolerance) else 'NO'} |")
    return "\n".join(lines) + "\n"


__all__ = ["COALESCING_METRICS", "CallCheck", "KINDS", "KindCheck", "TOLERANCE", "compare", "format_checks",
           "measure_call", "measured", "predicted", "rank_disagreements", "replay_on_gpu"]
