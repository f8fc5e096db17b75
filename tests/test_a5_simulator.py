"""A subset of the A5 suite on Numba's CUDA simulator: every kernel the A5 dispatch launches runs at least once
as the interpreted CUDA source, against the same independent oracles as the ``multicore`` backend's full
matrix.

The bodies are those of the backend-agnostic tests (``test_a5_gather``, ``test_a5_scatter``, ``test_l1``),
called with the ``simulator_backend`` fixture active; the owner-based Last path, which only whole-array calls
launch, is checked against a serial loop here.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import simt_pto as pto
from test_a5_gather import test_gather_matrix as gather_case
from test_a5_scatter import test_scatter_matrix as scatter_case
from test_interop import gather_oracle
from test_l1 import test_elem as l1_elem_case

GATHERS = [  # simt_mgather_row_kernel, simt_mgather_elem_kernel, the (1, 1) scalar fallback
    ("row", "float32", "clamp"), ("row", "int8", "zero"), ("elem", "float16", "wrap"), ("elem", "uint32", "zero"),
    ("elem_1x1", "bfloat16", "undefined"),
]
SCATTERS = [  # kernel, dtype, policy, atomic, conflict: every store format and both Last kernels
    ("row", "int32", "skip", "add", "default"), ("row", "float16", "wrap", "add", "default"),
    ("row", "float32", "clamp", "max", "default"), ("row", "uint8", "undefined", "none", "last"),
    ("elem", "bfloat16", "skip", "add", "default"), ("elem", "float32", "wrap", "min", "default"),
    ("elem", "uint32", "clamp", "max", "default"), ("elem", "int16", "skip", "none", "last"),
    ("elem", "int8", "undefined", "none", "default"), ("elem_1x1", "float32", "undefined", "add", "last"),
]


@pytest.mark.parametrize("kernel, dtype, policy", GATHERS)
def test_gather_on_the_simulator(simulator_backend, kernel, dtype, policy):
    gather_case(kernel, dtype, policy)


@pytest.mark.parametrize("kernel, dtype, policy, atomic, conflict", SCATTERS)
def test_scatter_on_the_simulator(simulator_backend, kernel, dtype, policy, atomic, conflict):
    scatter_case(kernel, dtype, policy, atomic, conflict, None)  # (no form to force: the simulator has one)


@pytest.mark.parametrize("dtype, policy", [("float32", "zero"), ("int8", "clamp")])
def test_l1_simt_gather_on_the_simulator(simulator_backend, dtype, policy):
    l1_elem_case("a5", "simt", dtype, policy)


@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_owner_last_on_the_simulator(simulator_backend, coalesce):
    rng = np.random.default_rng(23)
    if coalesce == "row":
        table = np.full((12, 40), -1.0, np.float32)
        src = np.arange(30 * 40, dtype=np.float32).reshape(30, 40)
    else:
        table = np.full(50, -1.0, np.float32)
        src = np.arange(70, dtype=np.float32)
    idx = rng.integers(0, table.shape[0], src.shape[0], dtype=np.int32)
    want = table.copy()
    for i, slot in enumerate(idx.tolist()):  # the sequential order: the last writer wins
        want[slot] = src[i]
    got = table.copy()
    pto.scatter(got, src, idx, coalesce=coalesce, conflict="last", last_path="owner")
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("coalesce", ["row", "elem"])
def test_the_simulator_gathers_into_a_contiguous_out_in_place(simulator_backend, coalesce):
    """The whole-array gather's launch writes the caller's ``out`` itself (``test_interop``'s in-place test on the
    other backends), at an address off the 8-byte boundary, and no byte around it."""
    table = np.arange(48, dtype=np.float32).reshape(12, 4)
    idx = np.array([[3, 11, 0], [7, 7, 2]], np.int32)
    shape = idx.shape + ((4,) if coalesce == "row" else ())
    size = int(np.prod(shape))
    buffer = np.full(size + 2, -1, np.float32)
    out = buffer[1:1 + size].reshape(shape)
    assert pto.gather(table, idx, coalesce=coalesce, out=out) is out
    assert out.tobytes() == gather_oracle(table, idx, coalesce).tobytes()
    assert buffer[0] == -1 and buffer[-1] == -1


def test_simulated_launches_from_two_threads_each_run_their_own_grid(simulator_backend, monkeypatch):
    """Numba's simulator keeps a launch's grid on the kernel object (its ``kernel[grid, block]`` sets it and returns
    the kernel). Configured outside the simulator's lock, a launch ran with the grid another thread's launch of the
    same kernel had set meanwhile, and returned rows its kernel never wrote. Here the other thread's whole launch
    runs just before this one's takes the lock, every time. Oracle: numpy indexing."""
    from simt_pto.kernels.a5 import simt
    rng = np.random.default_rng(3)
    small_table, big_table = (rng.standard_normal((rows, 8)).astype(np.float32) for rows in (42, 37))
    small_idx, big_idx = rng.integers(0, 42, 21).astype(np.int32), rng.integers(0, 37, 300).astype(np.int32)
    pto.gather(small_table, small_idx, coalesce="row", target="a5")  # (compiled: both calls launch one kernel)
    lock, caller, theirs = simt._simulator_lock, threading.current_thread(), []

    class TheOtherLaunchFirst:
        def __enter__(self):
            if threading.current_thread() is caller:
                other = threading.Thread(target=lambda: theirs.append(
                    pto.gather(small_table, small_idx, coalesce="row", target="a5")))
                other.start()
                other.join()
            lock.acquire()

        def __exit__(self, *exc):
            lock.release()
    monkeypatch.setattr(simt, "_simulator_lock", TheOtherLaunchFirst())
    ours = pto.gather(big_table, big_idx, coalesce="row", target="a5")
    assert theirs and all(np.array_equal(got, small_table[small_idx]) for got in theirs)
    assert np.array_equal(ours, big_table[big_idx])
