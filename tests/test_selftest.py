"""``simt-pto selftest``: it passes on the backends this machine has, and it catches a broken kernel.

The fault test injects a one-line fault into one specialization of one kernel (the Elem gather under
GatherOOB::Wrap drops the last element of each block) and checks that selftest fails with exit status 1,
names only that specialization's cases, and writes ``.npz`` cases that ``--replay`` fails on while the
fault is in and passes on once it is gone. Backends are named as ``simt_pto.backend`` names them; the old
``--backend cpu`` still runs the ``multicore`` backend, and says so.
"""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import requires_cuda

from simt_pto import dtypes
from simt_pto.enums import IndexRule
from simt_pto.host.tools import cli, selftest
from simt_pto.kernels import a5 as a5_kernels
from simt_pto.kernels.a5 import simt

KERNEL_SOURCE = Path(a5_kernels.__file__).parent / "mgather.py"
FAULT = ("        walk_elems(launch, tile_rows, valid_rows, valid_cols, gather_elems,\n",
         "        walk_elems(launch, tile_rows, valid_rows, valid_cols - 1, gather_elems,\n")  # a column short


def run_cli(capsys, *argv):
    status = cli.main(["selftest", *argv])
    out = capsys.readouterr().out
    return status, out, json.loads(out.strip().splitlines()[-1]) if "--json" in argv else None


QUICK_FAMILIES = ("row_gather", "elem_last_scatter", "scalar_scatter")
"""A few families keep the suite's compile time down; every family runs in ``simt-pto selftest`` itself."""


def test_quick_selftest_passes_on_multicore(capsys):
    families = [arg for name in QUICK_FAMILIES for arg in ("--family", name)]
    status, out, report = run_cli(capsys, "--backend", "multicore", "--quick", *families, "--json")
    assert status == 0, out
    assert report["ok"] and set(report["backends"]) == {"multicore"}
    element_dtypes = len(dtypes.ELEMENT_DTYPES["a5"])
    assert report["backends"]["multicore"]["families"] == {
        name: {"passed": element_dtypes, "failed": 0, "failures": []} for name in QUICK_FAMILIES}
    assert "numba" in report["versions"] and "multicore (" in out


def test_the_old_backend_name_cpu_still_runs_multicore_and_warns(capsys):
    status = cli.main(["selftest", "--backend", "cpu", "--quick", "--family", "scalar_gather", "--json"])
    captured = capsys.readouterr()
    report = json.loads(captured.out.strip().splitlines()[-1])
    assert status == 0 and set(report["backends"]) == {"multicore"}, captured.out
    assert captured.err.startswith("simt-pto selftest: warning: A5 backend 'cpu' is deprecated"), captured.err
    assert "'multicore'" in captured.err
    with pytest.warns(DeprecationWarning, match="'cpu' is deprecated") as caught:
        result = selftest.selftest(["cpu"], quick=True, families=("scalar_gather",))
    assert caught[0].filename == __file__  # the warning points at the caller's line
    assert result.ok and set(result.backends) == {"multicore"}


def test_the_matrix_covers_every_policy_atomic_and_dtype():
    cases = selftest.matrix()
    a5_dtypes = {d.name for d in dtypes.ELEMENT_DTYPES["a5"]}
    for family in selftest.FAMILIES:
        if family == "whole_array":
            continue
        mine = [c for c in cases if c["family"] == family]
        assert {c["dtype"] for c in mine} == a5_dtypes, family
        policies = selftest.GATHER_OOB if family.endswith("gather") else selftest.SCATTER_OOB
        assert {c["oob"] for c in mine} == set(policies), family
    for family in ("row_scatter", "elem_scatter", "scalar_scatter"):
        pairs = {(c["atomic"], c["dtype"]) for c in cases if c["family"] == family}
        for atomic in ("add", "max", "min"):
            supported = {d.name for d in dtypes.atomic_dtypes("a5", dtypes.ScatterAtomicOp[atomic.upper()])}
            assert {d for a, d in pairs if a == atomic} == supported, (family, atomic)
    edge = [selftest.build(c)[0] for c in cases if c["variant"] == "edge" and c["family"] == "row_gather"]
    assert any(p["blayout"] == "col_major" for p in edge) and any(p["idx_layout"] == "col" for p in edge)
    assert all(p["tile_shape"][0] > p["rows"] or p["tile_shape"][1] > p["cols"] for p in edge)


@pytest.fixture
def faulty_elem_gather(tmp_path, monkeypatch):
    """``simt_mgather_elem_kernel`` with one line changed, for the Wrap specialization only (the copy is a
    module of its own in ``tmp_path``, so Numba's disk cache of the real kernel is not touched). The A5 runner
    finds a kernel's factory by its spec name (``KERNELS``), and keeps what it compiled per (kernel, policy,
    backend): that memo is emptied whenever the factory changes."""
    text = KERNEL_SOURCE.read_text()
    assert text.count(FAULT[0]) >= 1
    text = text.replace(FAULT[0], FAULT[1]).replace("from .", "from simt_pto.kernels.a5.")
    (tmp_path / "faulty_mgather.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    faulty = importlib.import_module("faulty_mgather")
    real = a5_kernels.KERNELS["simt_mgather_elem_kernel"]

    def factory(rule):
        return faulty.simt_mgather_elem_kernel(rule) if rule == IndexRule.WRAP else real(rule)

    def use(kernel_factory):
        monkeypatch.setitem(a5_kernels.KERNELS, "simt_mgather_elem_kernel", kernel_factory)
        simt.forget_compiled()

    use(factory)
    yield use, real
    simt.forget_compiled()  # the faulty kernel is not left compiled for the tests that follow


def test_an_injected_fault_fails_selftest_with_a_replayable_case(capsys, tmp_path, faulty_elem_gather):
    out_dir = tmp_path / "cases"
    status, out, report = run_cli(capsys, "--backend", "multicore", "--quick", "--family", "elem_gather",
                                  "--out", str(out_dir), "--json")
    assert status == 1, out
    family = report["backends"]["multicore"]["families"]["elem_gather"]
    assert family["failed"] >= 1 and family["passed"] >= 1
    assert {f["params"]["oob"] for f in family["failures"]} == {"wrap"}
    files = sorted(out_dir.glob("*.npz"))
    assert len(files) == family["failed"]
    assert f"replay: simt-pto selftest --replay {files[0]}" in out
    shrunk = selftest.load(files[0])[0]
    assert shrunk["rows"] == 1  # the smallest failing call: one row still shows the dropped element
    status, out, _ = run_cli(capsys, "--replay", str(files[0]))
    assert status == 1 and "expected" in out
    use, real = faulty_elem_gather
    use(real)  # the fault fixed
    status, out, _ = run_cli(capsys, "--replay", str(files[0]))
    assert status == 0, out


def test_shards_keep_each_policy_whole_and_balance_the_cases():
    cases = selftest.matrix()

    def policy(c):
        return c["family"], c["atomic"], c["oob"], c["conflict"]
    groups = {}
    for c in cases:
        groups.setdefault(policy(c), []).append(c["seed"])
    parts = selftest.shards(cases, 4)
    assert len(parts) == 4
    assert sorted(c["seed"] for part in parts for c in part) == [c["seed"] for c in cases]  # each case once
    for part in parts:  # a policy's cases (its kernel's every dtype) in one worker
        for key in {policy(c) for c in part}:
            assert [c["seed"] for c in part if policy(c) == key] == groups[key]
    sizes = [len(part) for part in parts]
    assert max(sizes) - min(sizes) <= max(len(g) for g in groups.values())
    few = selftest.shards(cases[:3], 8)  # more workers than policies: no empty shard
    assert all(few) and len(few) == len({policy(c) for c in cases[:3]})
    assert sorted(c["seed"] for part in few for c in part) == [0, 1, 2]


def test_selftest_in_worker_processes_gives_what_one_process_gives():
    families = ("row_gather", "scalar_scatter")
    alone = selftest.selftest(["multicore"], quick=True, families=families, jobs=1)
    workers = selftest.selftest(["multicore"], quick=True, families=families, jobs=2)
    assert alone.ok and workers.ok
    assert workers.to_json()["backends"]["multicore"]["families"] == alone.to_json()["backends"]["multicore"]["families"]
    assert sum(f.passed for f in workers.backends["multicore"].values()) == 2 * len(dtypes.ELEMENT_DTYPES["a5"])


def test_a_workers_failures_come_back_with_their_replay_files(tmp_path, faulty_elem_gather):
    """What a worker process returns (run here in this process, where the fault is in)."""
    cases = [c for c in selftest.matrix(("elem_gather",), quick=False) if c["oob"] == "wrap"][:3]
    got = selftest._run_shard("multicore", ("elem_gather",), cases, str(tmp_path / "cases"))
    family = got["elem_gather"]
    assert family.failed == 3 and family.passed == 0
    assert all(path and Path(path).is_file() for _, _, path in family.failures)


@pytest.mark.parametrize("argv,message", [
    (["--backend", "tpu"], "--backend: 'tpu' is not available"),
    (["--replay", "/nonexistent/case.npz"], "--replay: no such file"),
    (["--family", "row"], "argument --family: invalid choice"),
    (["--jobs", "0"], "argument --jobs: expected a positive number of worker processes, got '0'"),
])
def test_bad_arguments_exit_2_with_one_error_line(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["selftest", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "usage: simt-pto selftest" in err and "Traceback" not in err


def test_replay_refuses_a_file_that_is_not_a_case(capsys, tmp_path):
    bogus = tmp_path / "bogus.npz"
    np.savez(bogus, table=np.zeros(3))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["selftest", "--replay", str(bogus)])
    assert exit_.value.code == 2 and "is not a selftest case" in capsys.readouterr().err


@pytest.mark.simulator
@requires_cuda
def test_selftest_on_the_simulator(capsys):
    """A tenth of the cases, the kernels interpreted by Numba's CUDA simulator."""
    from simt_pto import a5_backends
    if "simulator" not in a5_backends():
        pytest.skip("numba.cuda runs in real mode in this process: no simulator")
    result = selftest.selftest(["simulator"], quick=True, families=("row_gather", "elem_last_scatter", "row_scatter"))
    fams = result.backends["simulator"]
    assert result.ok and sum(f.passed for f in fams.values()) >= 2, result.to_json()
