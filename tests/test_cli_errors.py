"""Every bad argument of ``simt-pto validate-last``, ``coalesce`` and ``inspect`` ends the way argparse ends
one: the usage line, then one error line naming the argument, on stderr; exit code 2; no traceback."""
from __future__ import annotations


import numpy as np
import pytest

from conftest import run_simt_pto


simt_pto = run_simt_pto


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


# -- validate-last on the user's own files ------------------------------------------------------------------------

@pytest.fixture
def user_files(tmp_path):
    rng = np.random.default_rng(3)
    idx = rng.integers(0, 40, 600, dtype=np.int32)
    files = {"idx": idx, "src": np.arange(600, dtype=np.float32), "rsrc": np.arange(600 * 8, dtype=np.float32).reshape(600, 8),
             "table": np.zeros((40, 8), np.float32), "f8": (np.arange(600) % 100).astype(np.uint8),
             "idx64": idx.astype(np.int64), "idx2d": idx.reshape(20, 30), "short": np.arange(5, dtype=np.float32),
             "idxwide": np.where(np.arange(600) == 7, np.int64(2 ** 32), idx.astype(np.int64)).reshape(20, 30),
             "idxfloat": idx.astype(np.float32), "src2d": np.arange(600, dtype=np.float32).reshape(20, 30),
             "rsrc3d": np.arange(600 * 8, dtype=np.float32).reshape(20, 30, 8),
             "f64src": np.arange(600, dtype=np.float64), "objects": np.array([{"a": 1}], dtype=object)}
    paths = {}
    for name, array in files.items():
        paths[name] = tmp_path / f"{name}.npy"
        np.save(paths[name], array, allow_pickle=True)
    paths["text"] = tmp_path / "text.npy"
    paths["text"].write_text("not an array")
    paths["missing"] = tmp_path / "missing.npy"
    return {k: str(v) for k, v in paths.items()}


@pytest.mark.parametrize("coalesce, src, table, dtype", [
    ("elem", "src", ["--table-shape", "20x16"], "float32"),
    ("row", "rsrc", ["--table-file", "table"], None),
    ("elem", "f8", ["--table-shape", "10x32"], "float8_e4m3"),  # no A2/A3 golden: the serial loop
])
def test_validate_last_on_user_files_is_deterministic(user_files, coalesce, src, table, dtype):
    table = [table[0], user_files.get(table[1], table[1])]
    argv = ["validate-last", "--coalesce", coalesce, "--idx", user_files["idx"], "--src", user_files[src], *table,
            "--repeat", "2", *(["--dtype", dtype] if dtype else [])]
    proc = simt_pto(*argv)
    assert proc.returncode == 0, proc.stderr
    assert "LAST: 2 runs, 0 mismatches against the golden, 0 between runs: DETERMINISTIC" in proc.stdout
    if dtype == "float8_e4m3":
        assert "golden: a serial Python loop" in proc.stdout


@pytest.mark.parametrize("coalesce, idx, src, table", [
    ("elem", "idx64", "src", ["--table-shape", "20x16"]),   # int64 indices: a checked int32 copy
    ("elem", "idx2d", "src2d", ["--table-shape", "20x16"]),  # N-D indices, the source of their shape
    ("row", "idx2d", "rsrc3d", ["--table-file", "table"]),   # Row: (20, 30) indices, a (20, 30, 8) source
])
def test_validate_last_takes_int64_and_nd_indices(user_files, coalesce, idx, src, table):
    argv = ["validate-last", "--coalesce", coalesce, "--idx", user_files[idx], "--src", user_files[src],
            table[0], user_files.get(table[1], table[1]), "--repeat", "2"]
    proc = simt_pto(*argv)
    assert proc.returncode == 0, proc.stderr
    assert "LAST: 2 runs, 0 mismatches against the golden, 0 between runs: DETERMINISTIC" in proc.stdout
    assert "600 source" in proc.stdout  # every index, flattened in C order


@pytest.mark.parametrize("change, needle", [
    (dict(idx="missing"), "argument --idx: {missing}: no such file"),
    (dict(idx="text"), "argument --idx: {text}: not a readable .npy array"),
    (dict(src="objects"), "argument --src: {objects}: not a readable .npy array"),
    (dict(idx="idxwide"), "argument --idx: {idxwide}: idx[0, 7] = 4294967296 is outside [-2147483648, 4294967296)"),
    (dict(idx="idxfloat"), "argument --idx: {idxfloat}: idx: index dtype must be an integer dtype"),
    (dict(idx="idx2d"), "argument --src: {src}: an Elem source has idx's shape, (20, 30), got (600,)"),
    (dict(src="short"), "argument --src: {short}: an Elem source has idx's shape, (600,), got (5,)"),
    (dict(src="f64src"), "argument --src: {f64src}: dtype float64 differs from the table's float32"),
    (dict(shape="5x5"), "argument --idx: {idx}: "),  # indices up to 39 into a 25-slot table, under undefined
    (dict(extra=["--rows", "8"]), "argument --rows: not allowed with argument --idx"),
    (dict(extra=["--table-file", "{table}"]), "argument --table-shape: not allowed with argument --table-file"),
])
def test_validate_last_bad_files(user_files, change, needle):
    idx, src = user_files[change.get("idx", "idx")], user_files[change.get("src", "src")]
    extra = [e.format(**user_files) for e in change.get("extra", [])]
    argv = ["validate-last", "--coalesce", "elem", "--idx", idx, "--src", src,
            "--table-shape", change.get("shape", "20x16"), *extra]
    assert_argparse_error(simt_pto(*argv), "validate-last", needle.format(**user_files))


def test_validate_last_refuses_out_of_range_indices_naming_the_first(user_files):
    """Under --oob undefined the indices must be in range: the whole-array refusal, in the command's words."""
    raw = np.load(user_files["idx"]).view(np.uint32)
    bad = np.flatnonzero(raw >= 25)
    proc = simt_pto("validate-last", "--coalesce", "elem", "--idx", user_files["idx"], "--src", user_files["src"],
                    "--table-shape", "5x5")
    assert_argparse_error(proc, "validate-last", (
        f"argument --idx: {user_files['idx']}: {bad.size} index(es) out of range [0, 25) under --oob undefined "
        f"(first: position {bad[0]}, uint32 index {raw[bad[0]]}); pick --oob skip, clamp or wrap"))
    assert proc.stderr.strip().splitlines()[-1].endswith("pick --oob skip, clamp or wrap")
