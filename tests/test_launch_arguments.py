"""Every launch the A5 dispatch builds names its arguments as its kernel names its parameters.

A :class:`simt_pto.launch_spec.LaunchSpec` carries its kernel's arguments by name; the backends pass them in that
order (``spec.values()``), after the launch tuple. A launch whose names drift from the kernel's parameters (a
renamed parameter, two swapped) would pass the wrong array, or a count as an array, silently or at compile time.
The launches are the ones the compile proof enumerates (``tests/compile_a5_matrix.py``: every tile op, GM -> L1
gather and whole-array call of the matrix, both Conflict::Last paths and both owner layouts), planned for the
``multicore`` backend: nothing runs, and no GPU or CUDA toolchain is needed.
"""
from __future__ import annotations

import inspect

import pytest

from simt_pto.enums import GatherExec
from simt_pto.kernels.a5 import KERNELS

import compile_a5_matrix as matrix


def _launches():
    """(what built it, launch) for every launch of the compile matrix's calls."""
    build_plan = matrix._tools().build_plan
    for op, kw in matrix._calls():
        for launch in matrix._tile_launches(build_plan(op, **kw)):
            yield f"{op} tile {kw}", launch
        if op == "mgather" and kw["coalesce"] == "elem":
            for launch in matrix._tile_launches(matrix._l1_plan(kw, GatherExec.SIMT)):
                yield f"{op} l1 {kw}", launch
        for launch in matrix._whole_array_launches(op, kw):
            yield f"{op} whole-array {kw}", launch


def _parameters(kernel: str, policy) -> list[str]:
    """The kernel's parameters after the launch tuple, as its factory builds it for ``policy``."""
    return list(inspect.signature(KERNELS[kernel](**policy.factory_args())).parameters)[1:]


def test_every_launch_names_its_kernels_parameters():
    checked, wrong = set(), []
    for source, launch in _launches():
        kernels = [launch.kernel] + ([launch.multicore_plain_kernel] if launch.multicore_plain_kernel else [])
        for kernel in kernels:
            key = (kernel, launch.policy, tuple(name for name, _ in launch.args))
            if key in checked:
                continue
            checked.add(key)
            names = [name for name, _ in launch.args]
            params = _parameters(kernel, launch.policy)
            if names != params:
                wrong.append(f"{kernel} from {source}: launch names {names}, kernel takes {params}")
    assert not wrong, "\n".join(wrong[:5])
    # the matrix reaches every kernel the dispatch has: a kernel missing here would be unchecked
    assert {kernel for kernel, _, _ in checked} == set(KERNELS)


def test_a_launch_with_a_wrong_name_is_caught():
    """The check itself: the names of one real launch, one renamed, differ from its kernel's parameters."""
    source, launch = next(_launches())
    names = [name for name, _ in launch.args]
    assert names == _parameters(launch.kernel, launch.policy), source
    renamed = [("tile", value) if name == "table" else (name, value) for name, value in launch.args]
    assert [name for name, _ in renamed] != _parameters(launch.kernel, launch.policy)


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_every_kernel_factory_takes_the_policy_by_name(kernel):
    """A factory takes only compile-time constants (``rule``, ``atomic``, ``fmt``) and returns a kernel whose first
    parameter is the launch tuple: what :func:`_parameters` relies on."""
    params = inspect.signature(KERNELS[kernel]).parameters
    assert set(params) <= {"rule", "atomic", "fmt"}, params
