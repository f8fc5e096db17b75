"""What a call launches: one A5 kernel launch as a typed record (:class:`LaunchSpec`), and a call's plan
(:class:`CallPlan`), the ordered launches and named host steps that host dispatch produces for every call.

The A5 kernels are specialised at compile time on their policy (MGATHER.md / MSCATTER.md, the ``if constexpr``
of the A5 headers): the OOB rule, the atomic op and the element format, as enums (:class:`KernelPolicy`). A
launch names its kernel as the spec does (``simt_mscatter_elem_kernel``), carries that policy, its arguments by
name, its block geometry (``dim3(32, kLaunchWarps)``, :mod:`simt_pto.geometry`) and its grid. The A5 runner,
the whole-array path, the coalescing analyzer, ``simt-pto inspect``, selftest, the compile proof and the
benchmarks all read these records; none of them rebuilds an argument list or reads a policy by position.

Plain data, part of the model: it imports no kernel and runs nothing.
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from .enums import ElementFormat, IndexRule, ScatterAtomicOp, ScatterConflict
from .geometry import LaunchGeometry

FORMAT_NAMES = {ElementFormat.NATIVE: "native", ElementFormat.F16: "float16-cas", ElementFormat.BF16: "bfloat16-cas",
                ElementFormat.F32_ORDER: "float32-order", ElementFormat.F16_EDGE: "float16-cas-edge",
                ElementFormat.BF16_EDGE: "bfloat16-cas-edge"}
"""How every report names an element format (the store rule's, :class:`~simt_pto.enums.ElementFormat`): a plan's
:meth:`CallPlan.describe`, ``simt-pto inspect``, the compile proof."""


@dataclass(frozen=True)
class KernelPolicy:
    """The compile-time policy of one kernel specialization; fields a kernel does not take are None."""

    rule: IndexRule | None = None
    """The remap the OOB policy compiles to."""
    atomic: ScatterAtomicOp | None = None
    """MSCATTER's atomic op (scatter kernels that store through the store rule)."""
    fmt: ElementFormat | None = None
    """How the scatter stores one element (with ``atomic``)."""
    conflict: ScatterConflict | None = None
    """MSCATTER's conflict policy: it selects the kernel (Last: the slot-centric or owner kernels) and is recorded
    for the reader; no kernel is compiled on it."""

    @staticmethod
    @functools.lru_cache(maxsize=256, typed=True)
    def of(rule: IndexRule | None = None, atomic: ScatterAtomicOp | None = None, fmt: ElementFormat | None = None,
           conflict: ScatterConflict | None = None) -> KernelPolicy:
        """``KernelPolicy(rule, atomic, fmt, conflict)``, made once per value (the policy is immutable; a call's
        launches ask for it on every call)."""
        return KernelPolicy(rule, atomic, fmt, conflict)

    def factory_args(self) -> dict[str, IndexRule | ScatterAtomicOp | ElementFormat]:
        """The compile-time constants the kernel's factory takes, by name (``rule``, ``atomic``, ``fmt``)."""
        return {name: value for name, value in (("rule", self.rule), ("atomic", self.atomic), ("fmt", self.fmt))
                if value is not None}

    @property
    def cache_key(self) -> str:
        """The policy as it enters the on-disk cache key of the kernel compiled for it (file-name safe), e.g.
        ``rule-clamp.atomic-add.fmt-f16``; ``"none"`` for a kernel that takes no policy."""
        parts = [f"{name}-{value.name.lower()}" for name, value in self.factory_args().items()]
        return ".".join(parts) or "none"

    def compiled(self) -> KernelPolicy:
        """The part of the policy a kernel is compiled on (``conflict`` only selects the kernel)."""
        return replace(self, conflict=None)

    def describe(self) -> dict[str, str]:
        """The policy by name, for reports: ``{"rule": "clamp", "atomic": "add", "format": "float16-cas", ...}``
        (:data:`FORMAT_NAMES`)."""
        out = {}
        for key, value in (("rule", self.rule), ("atomic", self.atomic), ("format", self.fmt),
                           ("conflict", self.conflict)):
            if value is not None:
                out[key] = FORMAT_NAMES[value] if key == "format" else value.name.lower()
        return out


@dataclass(frozen=True, eq=False, init=False)
class LaunchSpec:
    """One kernel launch: ``kernel`` over ``grid`` blocks of ``geometry.block`` threads, with ``args`` by name in
    the kernel's parameter order (after its ``launch`` tuple)."""

    kernel: str
    """The kernel's name in the spec (``simt_mgather_row_kernel``, ...)."""
    policy: KernelPolicy
    args: tuple[tuple[str, Any], ...]
    geometry: LaunchGeometry
    grid: int = 1
    writes: tuple[str, ...] = ()
    """The arguments the kernel writes: a GPU launch copies those that are host memory back."""
    hardware: LaunchSpec | None = None
    """Where the emulator launches something other than the hardware would (the whole-array Row gather and the
    owner write move each row in units of up to 8 bytes, a bit copy either way), the hardware's launch: element
    moves. The coalescing analyzer models this one; None where the two are the same."""
    multicore_threads: int | None = None
    """The most threads the ``multicore`` backend runs this launch on (None: all of them). A launch too small to
    pay for waking a second thread says 1: its blocks then run in order on the calling thread. Nothing else reads
    it: a GPU runs the blocks as it schedules them."""
    multicore_plain_kernel: str | None = None
    """A kernel of the same arguments, policy and grid that the ``multicore`` backend runs instead, on the calling
    thread, when no other launch is writing memory the table shares at the time (the Elem scatter's plain
    read-modify-writes, ``simt_mscatter_elem_serial_kernel``; ``simt_pto.kernels.writers``); otherwise it runs
    ``kernel``. None: always ``kernel``. Nothing else reads it."""

    def __init__(self, kernel: str, policy: KernelPolicy, args: tuple[tuple[str, Any], ...], geometry: LaunchGeometry,
                 grid: int = 1, writes: tuple[str, ...] = (), hardware: LaunchSpec | None = None,
                 multicore_threads: int | None = None, multicore_plain_kernel: str | None = None) -> None:
        # one update of the instance's dict instead of a frozen dataclass's nine object.__setattr__ calls: every
        # call builds its launches
        self.__dict__.update(kernel=kernel, policy=policy, args=args, geometry=geometry, grid=grid, writes=writes,
                             hardware=hardware, multicore_threads=multicore_threads, multicore_plain_kernel=multicore_plain_kernel)

    @property
    def arguments(self) -> dict[str, Any]:
        """The arguments by name."""
        return dict(self.args)

    def values(self) -> tuple[Any, ...]:
        """The arguments in the kernel's order."""
        return tuple([value for _, value in self.args])

    def with_args(self, **changes: Any) -> LaunchSpec:
        """The same launch with some arguments replaced (staged device copies, a benchmark's index pattern)."""
        unknown = set(changes) - {name for name, _ in self.args}
        if unknown:
            raise KeyError(f"{self.kernel} has no argument {', '.join(sorted(unknown))}")
        return replace(self, args=tuple((name, changes.get(name, value)) for name, value in self.args))


def launch_spec(kernel: str, policy: KernelPolicy, geometry: LaunchGeometry, *, grid: int = 1,
                writes: tuple[str, ...] = (), hardware: LaunchSpec | None = None, multicore_threads: int | None = None,
                multicore_plain_kernel: str | None = None, **args: Any) -> LaunchSpec:
    """A :class:`LaunchSpec` with its arguments as keywords, in the kernel's parameter order."""
    return LaunchSpec(kernel, policy, tuple(args.items()), geometry, int(grid), tuple(writes), hardware, multicore_threads,
                      multicore_plain_kernel)


@dataclass(frozen=True)
class HostStep:
    """A named step of a call that runs on the host, not as a kernel launch: the ``(1, 1)`` scalar fallbacks,
    the cube core's GM -> L1 walk and copy, the A2/A3 loops, the CPU simulator's numpy."""

    name: str
    run: Callable[[], None] = field(compare=False, repr=False)


@dataclass(frozen=True, init=False)
class CallPlan:
    """Everything one validated call runs, in order: :class:`LaunchSpec` launches and :class:`HostStep` steps.
    ``guard`` is entered around all of them (the staged boundary words of a mid-word 16-bit float Add: staged at
    entry, written back at exit, under their locks)."""

    steps: tuple[LaunchSpec | HostStep, ...]
    guard: Callable[[], contextlib.AbstractContextManager[Any]] = field(default=contextlib.nullcontext,
                                                                         compare=False, repr=False)
    guard_name: str | None = None
    """What ``guard`` does, for the reader (``"stage and publish the boundary words"``), or None."""

    def __init__(self, steps: tuple[LaunchSpec | HostStep, ...],
                 guard: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
                 guard_name: str | None = None) -> None:
        # as LaunchSpec's: one dict update, for the plan every call builds
        self.__dict__.update(steps=steps, guard=guard, guard_name=guard_name)

    @property
    def launches(self) -> tuple[LaunchSpec, ...]:
        """The kernel launches, in order."""
        return tuple(step for step in self.steps if isinstance(step, LaunchSpec))

    def describe(self) -> list[str]:
        """One line per step: what a call launches, for a reader."""
        lines = [] if self.guard_name is None else [f"around all: {self.guard_name}"]
        for step in self.steps:
            if isinstance(step, LaunchSpec):
                policy = ", ".join(f"{k}={v}" for k, v in step.policy.describe().items())
                threads = "" if step.multicore_threads is None else f" multicore threads<={step.multicore_threads}"
                lines.append(f"launch {step.kernel} [{policy}] grid={step.grid} block=(32, "
                             f"{step.geometry.launch_warps}){threads}")
                if step.multicore_plain_kernel is not None:
                    lines.append(f"       (multicore, no other writer of the table: {step.multicore_plain_kernel} on the "
                                 f"calling thread)")
                if step.hardware is not None:
                    lines.append(f"       (the hardware: {step.hardware.kernel} moving elements, block=(32, "
                                 f"{step.hardware.geometry.launch_warps}))")
            else:
                lines.append(f"host   {step.name}")
        return lines


__all__ = ["FORMAT_NAMES", "CallPlan", "HostStep", "KernelPolicy", "LaunchSpec", "launch_spec"]
