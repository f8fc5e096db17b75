"""The first use of simt_pto from several threads at once works: backend queries, backend changes and calls (tile ops
and whole arrays, every target), in any order, right after ``import simt_pto``.

First use happens once per process, so each case is a fresh subprocess. In it, a barrier releases many threads at
once, each after its own short delay, spread over the second or so that loading Numba and the kernels takes: every
action meets the others at every stage of that loading. Each call's result is checked against numpy. Before the
first imports were serialised (``simt_pto.backend.first_use``), threads that entered Numba by different modules got
each other's half-initialised modules: ``ImportError: cannot import name 'NullCache' from partially initialized
module 'numba.core.caching'``, ``module 'numba' has no attribute 'njit'``, ``partially initialized module
'numba.core.config' has no attribute 'DISABLE_JIT'``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import CUDA_EXTRA, CUDA_EXTRA_REASON

FIRST_USE = r"""
import json, sys, threading, time
import numpy as np
import simt_pto as pto

backends, spread, rounds = sys.argv[1].split(","), float(sys.argv[2]), int(sys.argv[3])
with_torch = sys.argv[4:] == ["torch"]
table = np.arange(48, dtype=np.float32).reshape(12, 4)
idx = np.array([3, 0, 11, 3, 7], dtype=np.int32)
flat_idx = np.array([[5, 0, 47, 7, 1, 2, 3, 4]], dtype=np.int32)


def whole_gather(target):
    assert np.array_equal(pto.gather(table, idx, target=target), table[idx])


def whole_scatter(target):  # distinct rows: the cpu target's replace gives the same as the Add
    rows = np.array([3, 0, 11, 7, 5], dtype=np.int32)
    got, src = np.zeros((12, 4), np.int32), np.arange(20, dtype=np.int32).reshape(5, 4)
    pto.scatter(got, src, rows, atomic="add", target=target)
    want = np.zeros((12, 4), np.int32)
    np.add.at(want, rows, src)
    assert np.array_equal(got, want), got


def tile_gather(target):  # MGATHER Elem into a 1x8 tile
    dst = pto.Tile("float32", 1, 8)
    pto.mgather(dst, pto.GlobalTensor(table.reshape(-1).copy()), pto.Tile.from_array(flat_idx, 1, 8),
                coalesce="elem", target=target)
    assert np.array_equal(dst.data.reshape(-1), table.reshape(-1)[flat_idx[0]]), dst.data


def tile_scatter(target):  # MSCATTER Elem, distinct slots: the cpu target's replace gives the same
    got = np.zeros(48, np.int32)
    src = pto.Tile.from_array(np.arange(1, 9, dtype=np.int32)[None, :], 1, 8)
    pto.mscatter(pto.GlobalTensor(got), src, pto.Tile.from_array(flat_idx, 1, 8), coalesce="elem", atomic="add",
                 target=target)
    want = np.zeros(48, np.int32)
    want[flat_idx[0]] = np.arange(1, 9)
    assert np.array_equal(got, want), got


def torch_gather(target):  # PyTorch operands: the first read of a tensor learns its plain dispatch keys
    import torch
    got = pto.gather(torch.from_numpy(table), torch.from_numpy(idx), target=target)
    assert torch.equal(got, torch.from_numpy(table[idx])), got


def torch_scatter(target):  # ... and the first write
    import torch
    rows = np.array([3, 0, 11, 7, 5], dtype=np.int32)
    got, src = torch.zeros(12, 4, dtype=torch.int32), torch.arange(20, dtype=torch.int32).reshape(5, 4)
    pto.scatter(got, src, torch.from_numpy(rows), atomic="add", target=target)
    want = np.zeros((12, 4), np.int32)
    np.add.at(want, rows, src.numpy())
    assert np.array_equal(got.numpy(), want), got


def backend_query():
    assert pto.a5_backend() in ("gpu", "multicore", "simulator")


def backends_query():
    assert "multicore" in pto.a5_backends()


actions = {"a5_backend": backend_query, "a5_backends": backends_query,
           "plan": lambda: pto.gather_plan(table, idx)}
for name in backends:
    actions[f"set {name}"] = lambda name=name: pto.set_a5_backend(name)
if with_torch:
    import torch  # (before the threads: a tensor exists only in a process that has imported torch)
for target in ("a5", "a2a3", "cpu"):
    for op in (whole_gather, whole_scatter, tile_gather, tile_scatter) + ((torch_gather, torch_scatter) if with_torch
                                                                         else ()):
        actions[f"{op.__name__} {target}"] = lambda op=op, target=target: op(target)

jobs = [name for _ in range(rounds) for name in actions]
barrier = threading.Barrier(len(jobs))
errors = []


def run(k, name):
    barrier.wait()
    time.sleep(spread * k / len(jobs))
    try:
        actions[name]()
    except BaseException as error:  # noqa: BLE001 - reported to the test
        errors.append(f"{name}: {type(error).__name__}: {error}")


threads = [threading.Thread(target=run, args=(k, name)) for k, name in enumerate(jobs)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"threads": len(jobs), "errors": errors}))
"""


def _first_use(backends: tuple[str, ...], spread: float, rounds: int, *extra: str, **env) -> dict:
    proc = subprocess.run([sys.executable, "-c", FIRST_USE, ",".join(backends), str(spread), str(rounds), *extra],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, **env))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("spread", [0.6, 1.2])
def test_first_use_from_many_threads_on_the_multicore_backend(spread):
    """Backend queries, ``set_a5_backend("multicore")`` and tile / whole-array calls on every target, 3 threads per
    action, released together over ``spread`` seconds right after ``import simt_pto``."""
    report = _first_use(("multicore",), spread, 3)
    assert report["threads"] >= 3 * 15
    assert report["errors"] == []


@pytest.mark.skipif(not CUDA_EXTRA, reason=CUDA_EXTRA_REASON)
def test_first_use_from_many_threads_with_backend_changes_to_the_simulator():
    """The same, while other threads switch the A5 backend between ``simulator`` (its first use imports
    ``numba.cuda`` in simulator mode) and ``multicore``: every call runs on one or the other, with the right result."""
    report = _first_use(("simulator", "multicore"), 1.0, 2, SIMT_PTO_A5_BACKEND="multicore")
    assert report["errors"] == []


def test_first_use_from_many_threads_with_pytorch_operands():
    """The same on the ``multicore`` backend with PyTorch CPU tensors too: whole-array gathers and scatters of tensors
    on every target, from many threads right after the first import (test_torch_seams.py races the first reads of
    the dispatch keys themselves)."""
    pytest.importorskip("torch", reason="PyTorch is not installed")
    report = _first_use(("multicore",), 0.6, 3, "torch")
    assert report["threads"] >= 3 * 21
    assert report["errors"] == []
