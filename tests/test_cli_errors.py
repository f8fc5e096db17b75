"""Every bad argument of ``simt-pto validate-last``, ``coalesce`` and ``inspect`` ends the way argparse ends
one: the usage line, then one error line naming the argument, on stderr; exit code 2; no traceback."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest


def simt_pto(*argv):
    return subprocess.run([sys.executable, "-m", "simt_pto.host.cli", *argv], capture_output=True, text=True,
                          timeout=300)


def assert_argparse_error(proc, command, needle):
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith(f"usage: simt-pto {command}"), proc.stderr
    assert "Traceback" not in proc.stderr
    error = lines[-1]
    assert error.startswith(f"simt-pto {command}: error: "), proc.stderr
    assert needle in error, error


@pytest.mark.parametrize("argv, needle", [
    (["--rows", "0"], "argument --rows: expected a positive integer, got 0"),
    (["--rows", "-5"], "argument --rows: expected a positive integer, got -5"),
    (["--cols", "0"], "argument --cols: expected a positive integer, got 0"),
    (["--repeat", "0"], "argument --repeat: expected a positive integer, got 0"),
    (["--n", "0"], "argument --n: expected a positive integer, got 0"),
    (["--n", "10", "--cols", "64"], "argument --n: a Row workload moves whole rows of --cols 64 elements"),
    (["--rows", "many"], "argument --rows: expected a positive integer, got 'many'"),
])
def test_validate_last_bad_arguments(argv, needle):
    assert_argparse_error(simt_pto("validate-last", *argv), "validate-last", needle)


@pytest.fixture
def idx_files(tmp_path):
    files = {"3d": np.zeros((2, 2, 2), np.int32), "2d": np.zeros((2, 4), np.int32)}
    paths = {}
    for name, array in files.items():
        paths[name] = tmp_path / f"{name}.npy"
        np.save(paths[name], array)
    paths["text"] = tmp_path / "text.npy"
    paths["text"].write_text("not an array")
    paths["missing"] = tmp_path / "missing.npy"
    return paths


@pytest.mark.parametrize("idx, extra, needle", [
    ("3d", ["--coalesce", "elem"], "argument --idx: "),
    ("2d", ["--coalesce", "row"], "argument --idx: "),
    ("text", [], "argument --idx: cannot read"),
    ("missing", [], "argument --idx: cannot read"),
    ("2d", ["--coalesce", "elem", "--dtype", "float64"], "float64"),
])
def test_coalesce_bad_arguments(idx_files, idx, extra, needle):
    proc = simt_pto("coalesce", "--op", "mgather", "--idx", str(idx_files[idx]), "--table", "64x64", *extra)
    assert_argparse_error(proc, "coalesce", needle)


@pytest.mark.parametrize("argv, needle", [
    (["--rows", "0"], "argument --rows: expected a positive integer, got 0"),
    (["--cols", "-1"], "argument --cols: expected a positive integer, got -1"),
    (["--dtype", "float64"], "float64"),
    (["--atomic", "max", "--dtype", "float16"], "Atomic Type Support"),
])
def test_inspect_bad_arguments(argv, needle):
    argv = ["--op", "mscatter", "--coalesce", "elem", *argv]
    assert_argparse_error(simt_pto("inspect", *argv), "inspect", needle)
