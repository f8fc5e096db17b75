"""The public API is typed: the package ships ``py.typed``, every public function and method is annotated, and
``mypy --strict`` is clean on tests/typing_user.py, a user's script that calls each of them and pins what they
return. mypy runs against a regular install: it cannot see the packages setuptools' editable install maps (an
import hook), so against the editable install of README's test environment it would find no ``simt_pto.host``.

The public API: the names in ``simt_pto.__all__``; the public functions and classes of the public modules
(``dtypes``, ``nz``, ``reference``, ``coalescing``); the records the public functions return (the plans of
``gather_plan`` / ``scatter_plan``, selftest's result).
"""
from __future__ import annotations

import importlib.util
import inspect
import os
import re
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import simt_pto as pto
from simt_pto.host.tools.selftest import SelftestResult
from simt_pto.launch_spec import CallPlan, HostStep, KernelPolicy, LaunchSpec
from test_layers import regular_install

USER_SCRIPT = Path(__file__).with_name("typing_user.py")
RECORDS = (CallPlan, LaunchSpec, KernelPolicy, HostStep, SelftestResult)
"""Classes the public functions return, whose methods a user calls."""


def _functions_of(cls: type) -> dict:
    """The public methods and properties of ``cls`` (and of its bases in this package), and its ``__init__``."""
    out = {}
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith("simt_pto"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") and name != "__init__":
                continue
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            elif isinstance(value, property):
                value = value.fget
            if inspect.isfunction(value):
                out[f"{cls.__module__}.{cls.__name__}.{name}"] = value
    return out


def public_api() -> dict:
    """Qualified name -> function, for every public function and method."""
    out, classes = {}, list(RECORDS)
    for name in pto.__all__:
        obj = getattr(pto, name)
        if inspect.ismodule(obj):
            for member_name, member in vars(obj).items():
                if member_name.startswith("_") or getattr(member, "__module__", None) != obj.__name__:
                    continue
                if inspect.isclass(member):
                    classes.append(member)
                elif inspect.isfunction(member):
                    out[f"{obj.__name__}.{member_name}"] = member
        elif inspect.isclass(obj):
            classes.append(obj)
        elif inspect.isfunction(obj):
            out[f"{obj.__module__}.{obj.__qualname__}"] = obj
    for cls in classes:
        out.update(_functions_of(cls))
    return out


def test_every_public_function_and_method_is_annotated():
    """Every parameter and every return is annotated, and the annotations resolve at run time (a misspelt name in
    an installed package's annotation is silently ``Any`` to mypy)."""
    api = public_api()
    assert {"simt_pto.host.tile_ops.mgather", "simt_pto.host.whole_array.gather", "simt_pto.host.in_memory.gather_plan",
            "simt_pto.host.tools.coalescing.analyze",
            "simt_pto.tile.Tile.from_array", "simt_pto.reference.slots", "simt_pto.nz.to_nz",
            "simt_pto.launch_spec.LaunchSpec.with_args", "simt_pto.geometry.LaunchGeometry.block"} <= set(api)
    missing, unresolved = {}, {}
    for name, fn in api.items():
        signature = inspect.signature(fn)
        params = [p for i, p in enumerate(signature.parameters.values()) if not (i == 0 and p.name in ("self", "cls"))]
        gaps = [p.name for p in params if p.annotation is inspect.Parameter.empty]
        if signature.return_annotation is inspect.Signature.empty:
            gaps.append("return")
        if gaps:
            missing[name] = gaps
        try:
            typing.get_type_hints(fn)
        except Exception as e:  # noqa: BLE001  (any failure to evaluate is the finding)
            unresolved[name] = repr(e)
    assert not missing, missing
    assert not unresolved, unresolved


@pytest.fixture(scope="module")
def mypy() -> list[str]:
    """The command that runs mypy. README's test install has it (the ``test`` extra): missing, this fails."""
    if importlib.util.find_spec("mypy") is None:
        pytest.fail("mypy is not installed in this environment: README's test install (pip install -e \".[test]\") "
                    "has it, or pip install mypy")
    return [sys.executable, "-m", "mypy"]


def run_mypy(mypy: list[str], site: Path, work: Path) -> subprocess.CompletedProcess:
    """``mypy --strict`` on the user script, ``simt_pto`` found in ``site`` only: PYTHONPATH puts it among the
    installed packages (typed by its ``py.typed``; errors inside it are not the user's and are not reported), and
    the working folder is ``work``, not the repository, whose ``simt_pto/`` folder mypy would take for the package.
    No configuration file is read; the cache goes to ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    return subprocess.run([*mypy, "--strict", "--config-file=", "--cache-dir", str(work / ".mypy_cache"),
                           str(USER_SCRIPT)],
                          capture_output=True, text=True, cwd=work, env=env, timeout=300)


def test_mypy_strict_is_clean_on_a_user_script(mypy, tmp_path, tmp_path_factory):
    site = regular_install(tmp_path_factory.getbasetemp())
    assert (site / "simt_pto" / "py.typed").is_file()
    out = run_mypy(mypy, site, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success: no issues found in 1 source file" in out.stdout, out.stdout


def _lines_calling(call: str) -> list[int]:
    """The lines of the user script's refused calls that call ``call``."""
    source = USER_SCRIPT.read_text().splitlines()
    start = source.index("def refused_calls() -> None:")
    return [n for n, line in enumerate(source, 1) if n > start and line.strip().startswith(call)]


def test_the_check_fails_when_a_public_name_is_any_or_loses_an_annotation(mypy, tmp_path, tmp_path_factory):
    """The type check has teeth: with ``pto.gather`` typed ``Any`` (the root's lazy re-export without its
    ``TYPE_CHECKING`` import, the state before this check) and one parameter of ``mscatter`` unannotated, mypy
    fails on the user script's calls of both."""
    broken = tmp_path / "site"
    shutil.copytree(regular_install(tmp_path_factory.getbasetemp()), broken, ignore=shutil.ignore_patterns("*.dist-info"))
    edits = {
        broken / "simt_pto" / "__init__.py": [
            ("    from .host.whole_array import gather, scatter\n", "    from .host.whole_array import scatter\n"),
            ("if not TYPE_CHECKING:", "if True:"), ("def __getattr__(name: str) -> object:", "def __getattr__(name: str):")],
        broken / "simt_pto" / "host" / "tile_ops.py": [("coalesce: CoalesceLike = Coalesce.ROW,\n             atomic",
                                                         "coalesce=Coalesce.ROW,\n             atomic")],
    }
    for path, changes in edits.items():
        text = path.read_text()
        for old, new in changes:
            assert text.count(old) == 1, (path, old)
            text = text.replace(old, new)
        path.write_text(text)
    out = run_mypy(mypy, broken, tmp_path / "work")
    assert out.returncode == 1, out.stdout + out.stderr
    flagged = {int(n) for n in re.findall(r"typing_user\.py:(\d+): error: Unused \"type: ignore\"", out.stdout)}
    assert set(_lines_calling("pto.gather(") + _lines_calling("pto.mscatter(")) <= flagged, out.stdout
    assert 'Expression is of type "Any"' in out.stdout, out.stdout


def test_the_user_script_runs():
    """The script's calls are real ones: it runs (the model, the tile ops and whole arrays on ``cpu``, an A5 plan)."""
    out = subprocess.run([sys.executable, str(USER_SCRIPT)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
