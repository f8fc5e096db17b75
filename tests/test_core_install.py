"""The core install: numpy, numba, ml_dtypes and tqdm, no numba-cuda (issue 23; pyproject.toml's extras).

It runs the ``cpu`` and ``a2a3`` targets and ``a5`` on the ``multicore`` backend, also in a process where Numba's
own built-in ``numba.cuda`` was imported first; asking it for a CUDA backend or for ``simt-pto inspect`` is one
error that names the extra to install.

The probes run in a fresh interpreter that has no numba-cuda: in a core install (the second run of ``.ci/run``)
a plain one; where numba-cuda is installed (README's test install), one that sees this environment's
site-packages through a folder of links that leaves numba-cuda and its ``numba.cuda`` redirector out.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from simt_pto.backend import numba_cuda_installed

ROOT = Path(__file__).resolve().parents[1]
CUDA_HINT = 'pip install "simt_pto[cuda]"'
TOOLCHAIN_HINT = 'pip install "simt_pto[toolchain]"'


@pytest.fixture(scope="module")
def core_python(tmp_path_factory):
    """``run(code, **env)``: ``code`` in a fresh interpreter without numba-cuda (the exit code and output)."""
    prefix = ""
    argv = [sys.executable]
    if numba_cuda_installed():
        site_packages = Path(importlib.util.find_spec("numba_cuda").origin).parents[1]
        view = tmp_path_factory.mktemp("core_site")
        for entry in site_packages.iterdir():
            if not entry.name.startswith(("numba_cuda", "_numba_cuda")):
                (view / entry.name).symlink_to(entry)
        argv.append("-S")  # no site-packages but the view (whose .pth files, the editable install's, still run)
        prefix = f"import site; site.addsitedir({str(view)!r})\n"

    def run(code: str, **env) -> subprocess.CompletedProcess:
        environ = {k: v for k, v in os.environ.items() if k not in ("SIMT_PTO_A5_BACKEND", "NUMBA_ENABLE_CUDASIM")}
        return subprocess.run([*argv, "-c", prefix + textwrap.dedent(code)], env=dict(environ, **env),
                              capture_output=True, text=True, timeout=300, cwd=ROOT)
    return run


def _lines(proc: subprocess.CompletedProcess) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_the_probe_has_no_numba_cuda(core_python):
    assert _lines(core_python("""
        import importlib.util
        print(importlib.util.find_spec("numba_cuda"))
    """)) == ["None"]


WHOLE_ARRAY_OPS = textwrap.dedent("""
    import numpy as np
    import simt_pto as pto
    table = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    idx = np.array([5, 63, 0, 5], dtype=np.int32)
    src = np.arange(4 * 8, dtype=np.float32).reshape(4, 8) + 1000
    for target in ("cpu", "a2a3", "a5"):
        gathered = np.array_equal(pto.gather(table, idx, target=target), table[idx])
        out = table.copy()
        pto.scatter(out, src, idx, target=target)  # Conflict::Last: the last row for slot 5 wins
        want = table.copy()
        for i, slot in enumerate(idx.tolist()):
            want[slot] = src[i]
        print(target, gathered, np.array_equal(out, want))
""")


def test_the_core_runs_every_target_and_lists_multicore_only(core_python):
    out = _lines(core_python(WHOLE_ARRAY_OPS + textwrap.dedent("""
        import sys
        print(pto.a5_backends(), pto.a5_backend(), pto.set_a5_backend("auto"), "numba.cuda" in sys.modules)
    """)))
    assert out == ["cpu True True", "a2a3 True True", "a5 True True", "('multicore',) multicore multicore False"]


def test_numbas_builtin_numba_cuda_imported_first_leaves_the_multicore_backend_running(core_python):
    out = _lines(core_python(textwrap.dedent("""
        import numba.cuda  # Numba's own, built in: what a core install's `import numba.cuda` loads
        from simt_pto import backend
        print(backend.cuda_mode(), backend.a5_backends())
    """) + WHOLE_ARRAY_OPS))
    assert out == ["builtin ('multicore',)", "cpu True True", "a2a3 True True", "a5 True True"]


@pytest.mark.parametrize("backend", ["simulator", "gpu"])
@pytest.mark.parametrize("builtin_cuda_first", [False, True])
def test_asking_for_a_cuda_backend_names_the_cuda_extra(core_python, backend, builtin_cuda_first):
    out = _lines(core_python(f"""
        import sys
        {"import numba.cuda" if builtin_cuda_first else ""}
        import simt_pto as pto
        from simt_pto import backend
        backend.gpu_present = lambda: True  # a machine with a GPU: the extra is still what is missing
        try:
            pto.set_a5_backend({backend!r})
        except backend.MissingExtraError as e:
            print(type(e).__mro__[1].__name__, e.extra, e)
        print(pto.a5_backend(), pto.set_a5_backend("auto"), pto.a5_backends())
    """))
    assert out == [f"ImportError cuda A5 backend {backend!r} needs numba-cuda, which this install leaves out: "
                   f"{CUDA_HINT}", "multicore multicore ('multicore',)"]


def test_the_environment_variable_asking_for_the_simulator_names_the_cuda_extra(core_python):
    proc = core_python("""
        import numpy as np, simt_pto as pto
        table, idx = np.arange(16, dtype=np.float32).reshape(8, 2), np.array([1], np.int32)
        print(pto.gather(table, idx, target="cpu").tolist())  # the other targets need no backend
        pto.gather(table, idx, target="a5")
    """, SIMT_PTO_A5_BACKEND="simulator")
    assert proc.returncode == 1 and proc.stdout.splitlines() == ["[[2.0, 3.0]]"]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"simt_pto.backend.MissingExtraError: A5 backend 'simulator' needs numba-cuda, which this install leaves "
        f"out: {CUDA_HINT}")


CLI = """
    import sys
    from simt_pto.host.tools import cli
    sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("argv, line", [
    (["selftest", "--backend", "simulator"],
     f"simt-pto selftest: error: A5 backend 'simulator' needs numba-cuda, which this install leaves out: {CUDA_HINT}"),
    (["selftest", "--backend", "gpu", "--quick"],
     f"simt-pto selftest: error: A5 backend 'gpu' needs numba-cuda, which this install leaves out: {CUDA_HINT}"),
    (["inspect", "--op", "mgather", "--coalesce", "row"],
     f"simt-pto inspect: compiling an A5 kernel needs numba-cuda, which this install leaves out: {TOOLCHAIN_HINT}"),
])
def test_the_command_line_names_the_missing_extra_in_one_line_exit_1(core_python, argv, line):
    proc = core_python(CLI.replace("sys.argv[1:]", repr(argv)))
    assert (proc.returncode, proc.stdout, proc.stderr.splitlines()) == (1, "", [line])


def test_inspect_kernel_names_the_toolchain_extra_after_checking_the_call(core_python):
    out = _lines(core_python("""
        import simt_pto as pto
        from simt_pto.backend import MissingExtraError
        try:
            pto.inspect_kernel("mscatter", "row", atomic="max", dtype="float16")  # the spec forbids it on a5
        except pto.ConstraintError as e:
            print("ConstraintError")
        try:
            pto.inspect_kernel("mgather", "row")
        except MissingExtraError as e:
            print(e.extra, e.install)
    """))
    assert out == ["ConstraintError", f"toolchain {TOOLCHAIN_HINT}"]


# -- the metadata ----------------------------------------------------------------------------------------------------

def _project() -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _requirements(specs):
    from packaging.requirements import Requirement
    return [Requirement(s) for s in specs]


def test_the_core_needs_four_packages_and_leaves_numpy_unbounded():
    core = {r.name: r for r in _requirements(_project()["dependencies"])}
    assert set(core) == {"numpy", "numba", "ml_dtypes", "tqdm"}
    assert not any(spec.operator in ("<", "<=", "==", "~=") for spec in core["numpy"].specifier)  # numba caps it


def test_numba_cuda_and_its_numpy_cap_come_with_the_cuda_extra():
    extras = {name: _requirements(specs) for name, specs in _project()["optional-dependencies"].items()}
    cuda = {r.name: str(r.specifier) for r in extras["cuda"]}
    assert cuda == {"numba-cuda": ">=0.30.4", "numpy": "<2.5"}

    def pulls(extra):  # the extras of this package an extra pulls in
        return {e for r in extras[extra] if r.name.replace("-", "_") == "simt_pto" for e in r.extras}
    assert "cuda" in pulls("gpu") and "cuda" in pulls("toolchain")
    assert pulls("test") == {"test-core", "toolchain", "dask", "counters"}
    assert {r.name for r in extras["counters"]} == {"nvidia-cuda-cupti"}  # CUPTI's library alone, no bindings
    assert not any(r.name == "numba-cuda" for r in extras["test-core"])
