"""The conventions a user of a Python package expects (issue #23): a license and full metadata, ``py.typed``,
``python -m simt_pto`` and ``simt-pto --version``, plain-text help for every subcommand and option, a hint naming
the ``toolchain`` extra where the CUDA compiler libraries are missing, and a repository that refers to nothing
outside itself."""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import requires_cuda, run_simt_pto

import simt_pto
from simt_pto.host.tools import cli, kernel_report

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
TOOLCHAIN_HINT = 'pip install "simt_pto[toolchain]"'


def run_cli(*argv):
    """``simt-pto ARGV`` in this process: (exit code, stdout, stderr)."""
    done = run_simt_pto(*argv)
    return done.returncode, done.stdout, done.stderr


# -- license and metadata ----------------------------------------------------------------------------------

def test_the_license_is_apache_2_and_the_metadata_says_so():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert PROJECT["license"] in ("Apache-2.0", {"text": "Apache-2.0"})
    assert "License :: OSI Approved :: Apache Software License" in PROJECT["classifiers"]
    assert "LICENSE" in PYPROJECT["tool"]["setuptools"]["license-files"]


def test_the_metadata_is_complete_and_points_nowhere_outside():
    assert PROJECT["authors"] and PROJECT["keywords"] and PROJECT["description"]
    classifiers = set(PROJECT["classifiers"])
    for minor in (10, 11, 12, 13):
        assert f"Programming Language :: Python :: 3.{minor}" in classifiers
    assert "Typing :: Typed" in classifiers
    assert any(c.startswith("Operating System ::") for c in classifiers)
    assert any(c.startswith("Topic ::") for c in classifiers)
    assert "urls" not in PROJECT  # the project has no public home to point at


def test_the_version_is_written_once():
    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    attr = PYPROJECT["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    module, _, name = attr.rpartition(".")
    assert getattr(__import__(module, fromlist=[name]), name) == simt_pto.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", simt_pto.__version__)


def test_py_typed_is_in_the_package_and_shipped():
    assert (Path(simt_pto.__file__).parent / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["simt_pto"]


# -- python -m simt_pto, --version ---------------------------------------------------------------------------

def test_simt_pto_version_prints_the_version():
    code, out, err = run_cli("--version")
    assert (code, out, err) == (0, f"simt-pto {simt_pto.__version__}\n", "")


def test_python_m_simt_pto_is_the_command_line():
    proc = subprocess.run([sys.executable, "-m", "simt_pto", "--version"], capture_output=True, text=True,
                          timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"simt-pto {simt_pto.__version__}\n", "")
    proc = subprocess.run([sys.executable, "-m", "simt_pto", "no-such-command"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("usage: simt-pto"), proc.stderr


def test_import_simt_pto_does_not_run_the_command_line():
    probe = "import sys, simt_pto; print(sorted(m for m in sys.modules if m.startswith('simt_pto.host')))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, "[]\n"), proc.stderr


# -- help ---------------------------------------------------------------------------------------------------

REST_MARKUP = re.compile(r"``|:(?:func|mod|class|meth|attr|data|exc|obj|ref|doc):`|`_\b")


def _parsers():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {"simt-pto": parser, **{f"simt-pto {name}": p for name, p in sub.choices.items()}}


def test_every_subcommand_is_listed():
    assert set(_parsers()) == {"simt-pto", "simt-pto demo", "simt-pto inspect", "simt-pto coalesce",
                               "simt-pto validate-last", "simt-pto selftest"}


@pytest.mark.parametrize("command", sorted(_parsers()))
def test_help_is_plain_text_with_a_description(command):
    parser = _parsers()[command]
    assert parser.description and len(parser.description.split()) >= 8, command
    text = parser.format_help()
    assert not REST_MARKUP.search(text), (command, REST_MARKUP.search(text).group(0), text)


@pytest.mark.parametrize("command", sorted(_parsers()))
def test_every_option_has_help(command):
    missing = [a.option_strings or a.dest for a in _parsers()[command]._actions
               if not isinstance(a, argparse._SubParsersAction) and not (a.help and a.help.strip())]
    assert not missing, (command, missing)


def test_the_help_runs_as_a_user_runs_it():
    for command in ("demo", "validate-last"):
        code, out, err = run_cli(command, "--help")
        assert code == 0 and err == "" and out.startswith(f"usage: simt-pto {command}")
        description = out.split("\n\n")[1]
        assert not description.startswith("options:"), out  # a description comes before the options


# -- the toolchain hint -------------------------------------------------------------------------------------

def test_a_missing_compiler_library_names_the_extra():
    class DynamicLibNotFoundError(RuntimeError):  # cuda.pathfinder's, by name: nothing is imported for it
        pass

    try:
        try:
            raise DynamicLibNotFoundError("Failure finding libnvrtc.so.13")
        except DynamicLibNotFoundError as inner:
            raise RuntimeError("lowering failed") from inner
    except RuntimeError as outer:
        error = kernel_report.toolchain_missing_error(outer)
    assert isinstance(error, kernel_report.ToolchainError)
    assert TOOLCHAIN_HINT in str(error) and "libnvrtc.so.13" in str(error)
    assert kernel_report.toolchain_missing_error(ValueError("something else")) is None


# A plain install: cuda.pathfinder cannot find libnvrtc / libnvvm. numba-cuda looks them up through these two
# functions (numba.cuda.cuda_paths), on the path of numba.cuda.compile_ptx; they raise what pathfinder raises.
MISSING_LIBRARIES = textwrap.dedent("""
    import sys
    import numba.cuda.cuda_paths as cuda_paths
    from cuda import pathfinder

    def missing(*args, **kwargs):
        raise pathfinder.DynamicLibNotFoundError("Failure finding libnvrtc.so.13: simulated by the test")

    cuda_paths._get_nvrtc = cuda_paths._get_nvvm = missing
    if hasattr(cuda_paths.get_cuda_paths, "_cached_result"):
        del cuda_paths.get_cuda_paths._cached_result
    from simt_pto.host.tools import cli
    sys.exit(cli.main(["inspect", "--op", "mgather", "--coalesce", "row"]))
""")


@requires_cuda
def test_inspect_without_the_compiler_libraries_names_the_extra():
    pytest.importorskip("cuda.pathfinder", reason='needs numba-cuda: pip install "simt_pto[toolchain]"')
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "SIMT_PTO_A5_BACKEND")}
    proc = subprocess.run([sys.executable, "-c", MISSING_LIBRARIES], capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("simt-pto inspect: "), proc.stderr
    assert TOOLCHAIN_HINT in lines[0] and "DynamicLibNotFoundError" in lines[0], proc.stderr


# -- nothing outside the repository --------------------------------------------------------------------------

OUTSIDE = ("../" + "shared", "shared" + "/spec", "shared" + "/gpu.md", "shared" + "/style.md")


def test_no_file_refers_outside_the_repository():
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                                capture_output=True, text=True, timeout=60)
    except OSError:
        pytest.skip("git is not installed")
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    wrong = []
    for name in filter(None, listed.stdout.split("\0")):
        path = ROOT / name
        if not path.is_file():
            continue  # listed but deleted in the working tree
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary
        wrong += [f"{name}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
                  if any(needle in line for needle in OUTSIDE)]
    assert not wrong, "\n".join(wrong)


def test_the_semantics_are_documented_inside_the_project():
    text = (ROOT / "docs" / "semantics.md").read_text()
    for page in ("Out-of-Bounds Behaviour", "Conflict Resolution", "Atomic Type Support", "CPU Reference Form"):
        assert page in text
    for rule in ("uint32", "UNDEFINED", "CLAMP", "WRAP", "ZERO", "SKIP", "strict=False", "LAST", "DEFAULT",
                 "totalOrder", "6d9ff80"):
        assert rule in text, rule
    assert "docs/semantics.md" in (ROOT / "README.md").read_text()
