"""Small holes found by trying the library as a new user would (issue 21, item 6).

* ``NUMBA_DISABLE_JIT=1``: the first ``a5`` / ``a2a3`` call raises one clear :class:`JitRequiredError`, and
  the command line prints one error line (exit 2) instead of a traceback; ``import simt_pto`` and the ``cpu``
  target still work.
* The CUDA simulator's integer Add wraps (and a float32 Add overflows) without a ``RuntimeWarning``.
* ``validate-last`` refuses a truncated ``.npy``, a FIFO or a device before reading it, and reads a big-endian
  file as its values.
* ``selftest`` checks ``--out`` before the run, keeps a failure it cannot write, and names what is wrong with
  a ``--replay`` file.
* float32 Max / Min with NaN and signed zeros: IEEE 754 totalOrder on every A5 path and in the reference,
  against bit patterns written here.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import simt_pto as pto
from simt_pto import reference as ref
from simt_pto.host.tools import cli, selftest, validate_last
from test_cli_errors import assert_argparse_error, simt_pto

# -- NUMBA_DISABLE_JIT ------------------------------------------------------------------------------------------

NO_JIT = dict(os.environ, NUMBA_DISABLE_JIT="1")
JIT_MESSAGE = "needs Numba's JIT compiler, and NUMBA_DISABLE_JIT=1 is set in this process"


def test_without_the_jit_a5_and_a2a3_raise_one_clear_error_and_write_nothing():
    code = textwrap.dedent("""
        import numpy as np, simt_pto as pto
        from simt_pto.backend import JitRequiredError
        table = np.zeros(8, np.float32)
        calls = {
            "a5 scatter add": lambda: pto.scatter(table, np.ones(4, np.float32), np.arange(4, dtype=np.int32),
                                                  coalesce="elem", atomic="add"),
            "a5 gather": lambda: pto.gather(table.reshape(4, 2), np.arange(2, dtype=np.int32), coalesce="row"),
            "a5 on the simulator": lambda: pto.set_a5_backend("simulator"),
            "a2a3 scatter": lambda: pto.scatter(table, np.ones(4, np.float32), np.arange(4, dtype=np.int32),
                                                coalesce="elem", target="a2a3"),
        }
        for name, call in calls.items():
            try:
                call()
                print(name, "ran")
            except JitRequiredError as e:
                print(name, "refused:", e)
        assert not table.any(), table
        print("cpu target", pto.gather(np.arange(8, dtype=np.float32), np.array([3, 1], np.int32),
                                       coalesce="elem", target="cpu"))
        # a tile op of a signature validated before: the same refusal, and an overlap still named first
        from simt_pto.errors import ConstraintError
        gt = pto.GlobalTensor(np.zeros((8, 8), np.float32))
        dst, idx = pto.Tile("float32", 2, 8), pto.Tile("int32", 1, 8, valid=(1, 2))
        for k in range(2):
            try:
                pto.mgather(dst, gt, idx, target="a5")
            except JitRequiredError as e:
                print(f"tile gather {k} refused:", e)
        aliased = pto.Tile("float32", 2, 8)
        aliased.data = gt.array[:2].reshape(-1)
        try:
            pto.mgather(aliased, gt, idx, target="a5")
        except ConstraintError as e:
            print("tile overlap refused:", e)
    """)
    out = subprocess.run([sys.executable, "-c", code], env=NO_JIT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    for name, target in (("a5 scatter add", "a5"), ("a5 gather", "a5"), ("a5 on the simulator", "a5"),
                         ("a2a3 scatter", "a2a3"), ("tile gather 0", "a5"), ("tile gather 1", "a5")):
        line = next(line for line in lines if line.startswith(name + " "))
        assert line.startswith(f"{name} refused: target '{target}' {JIT_MESSAGE}"), line
        assert "unset NUMBA_DISABLE_JIT" in line
    assert "cpu target [3. 1.]" in lines
    assert any(line.startswith("tile overlap refused:") and "shares memory" in line for line in lines), lines


@pytest.mark.parametrize("argv", [
    ["selftest", "--quick", "--backend", "multicore", "--family", "scalar_gather"],
    ["validate-last", "--rows", "64", "--cols", "8", "--n", "512", "--repeat", "1"],
])
def test_without_the_jit_the_command_line_prints_one_line(argv):
    out = subprocess.run([sys.executable, "-m", "simt_pto.host.tools.cli", *argv], env=NO_JIT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"simt-pto {argv[0]}: error: target 'a5' {JIT_MESSAGE}"), lines[0]


# -- the simulator's wrapping Add -------------------------------------------------------------------------------

def test_simulator_add_wraps_and_overflows_without_a_warning(simulator_backend):
    """An int32 / uint32 Add wraps and a float32 Add rounds to inf (or NaN for inf + -inf): specified results,
    so no RuntimeWarning, and ``-W error`` does not turn them into failures."""
    idx = np.arange(4, dtype=np.int32)
    cases = [
        (np.full(4, 2 ** 31 - 1, np.int32), np.array([1, 2, 2 ** 31 - 1, -1], np.int32),
         np.array([-2 ** 31, -2 ** 31 + 1, -2, 2 ** 31 - 2], np.int32)),
        (np.full(4, 2 ** 32 - 1, np.uint32), np.array([1, 2, 2 ** 32 - 1, 0], np.uint32),
         np.array([0, 1, 2 ** 32 - 2, 2 ** 32 - 1], np.uint32)),
        (np.array([3e38, -3e38, np.inf, 1.0], np.float32), np.array([3e38, -3e38, -np.inf, 1.0], np.float32),
         np.array([np.inf, -np.inf, np.nan, 2.0], np.float32)),
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("error", RuntimeWarning)
        for table, src, want in cases:
            pto.scatter(table, src, idx, coalesce="elem", atomic="add")
            np.testing.assert_array_equal(table, want)
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]


# -- validate-last's input files --------------------------------------------------------------------------------

def _write_npy_header(path, descr, shape, data_bytes):
    """A .npy file whose header declares ``shape`` of ``descr``, followed by ``data_bytes`` zero bytes."""
    import io
    from numpy.lib import format as npy_format
    head = io.BytesIO()
    npy_format.write_array_header_1_0(head, {"descr": descr, "fortran_order": False, "shape": shape})
    path.write_bytes(head.getvalue() + bytes(data_bytes))
    return str(path)


@pytest.fixture
def workload(tmp_path):
    idx = np.random.default_rng(5).integers(0, 40, 600, dtype=np.int32)
    paths = {}
    for name, array in {"idx": idx, "src": np.arange(600, dtype=np.float32),
                        "rsrc": np.arange(600 * 8, dtype=np.float32).reshape(600, 8)}.items():
        paths[name] = str(tmp_path / f"{name}.npy")
        np.save(paths[name], array)
    return tmp_path, paths


@pytest.mark.parametrize("shape", [(4_000_000_000_000,), (2 ** 40, 2 ** 20)])
def test_validate_last_refuses_a_header_that_claims_more_than_the_file_holds(workload, shape):
    tmp_path, paths = workload
    big = _write_npy_header(tmp_path / "big.npy", "<f4", shape, 40)
    proc = simt_pto("validate-last", "--coalesce", "elem", "--idx", paths["idx"], "--src", big,
                    "--table-shape", "20x16")
    assert_argparse_error(proc, "validate-last", f"argument --src: {big}: truncated: its header declares shape")
    assert "but the file holds 40 bytes of data" in proc.stderr


@pytest.mark.parametrize("path", ["/dev/zero", "folder"])
def test_validate_last_refuses_what_is_not_a_regular_file(workload, path):
    tmp_path, paths = workload
    if path == "folder":
        path = str(tmp_path)
    proc = simt_pto("validate-last", "--coalesce", "elem", "--idx", paths["idx"], "--src", path,
                    "--table-shape", "20x16")
    assert_argparse_error(proc, "validate-last", f"argument --src: {path}: not a regular file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_validate_last_refuses_a_fifo_instead_of_waiting_on_it(workload):
    tmp_path, paths = workload
    fifo = tmp_path / "idx.npy.fifo"
    os.mkfifo(fifo)
    # a process of its own: opening a FIFO with no writer blocks, and a timeout can end a process, not a thread
    proc = subprocess.run([sys.executable, "-m", "simt_pto.host.tools.cli", "validate-last", "--coalesce", "elem",
                           "--idx", str(fifo), "--src", paths["src"], "--table-shape", "20x16"],
                          capture_output=True, text=True, timeout=60)
    assert_argparse_error(proc, "validate-last", f"argument --idx: {fifo}: not a regular file")


def test_validate_last_reads_a_big_endian_file_as_its_values(workload):
    tmp_path, paths = workload
    for name in ("idx", "rsrc"):
        big_endian = np.load(paths[name])
        big_endian = big_endian.astype(big_endian.dtype.newbyteorder(">"))
        paths[name + "_be"] = str(tmp_path / f"{name}_be.npy")
        np.save(paths[name + "_be"], big_endian)
    table = (np.arange(40 * 8, dtype=np.float32) * 0.5).reshape(40, 8).astype(">f4")
    paths["table_be"] = str(tmp_path / "table_be.npy")
    np.save(paths["table_be"], table)

    class Parser:
        def error(self, message):
            raise AssertionError(message)

    loaded = validate_last._load(Parser(), "--table-file", paths["table_be"])
    assert loaded.dtype == np.dtype("<f4") and loaded.flags.c_contiguous
    np.testing.assert_array_equal(loaded, (np.arange(40 * 8) * 0.5).reshape(40, 8))
    proc = simt_pto("validate-last", "--coalesce", "row", "--idx", paths["idx_be"], "--src", paths["rsrc_be"],
                    "--table-file", paths["table_be"], "--repeat", "1")
    assert proc.returncode == 0, proc.stderr
    assert "LAST: 1 runs, 0 mismatches against the golden, 0 between runs: DETERMINISTIC" in proc.stdout


# -- selftest's --out and --replay ------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["file", "under_a_file"])
def test_selftest_refuses_an_out_folder_it_cannot_write_before_the_run(capsys, tmp_path, where):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    out = blocker if where == "file" else blocker / "cases"
    with pytest.raises(SystemExit) as exit_:
        cli.main(["selftest", "--backend", "multicore", "--quick", "--family", "scalar_gather", "--out", str(out)])
    captured = capsys.readouterr()
    assert exit_.value.code == 2
    assert "usage: simt-pto selftest" in captured.err and "Traceback" not in captured.err
    assert captured.err.strip().splitlines()[-1] == (
        f"simt-pto selftest: error: argument --out: {out}: {blocker} exists and is not a folder")
    assert captured.out == ""  # refused before any case ran
    with pytest.raises(ValueError, match="exists and is not a folder"):
        selftest.selftest(["multicore"], quick=True, families=("scalar_gather",), out_dir=out)


def test_selftest_keeps_a_failure_whose_case_file_cannot_be_written(monkeypatch, tmp_path):
    """Fault injection: every case fails and writing its .npz fails; the report still holds every failure."""
    monkeypatch.setattr(selftest, "execute", lambda p, arrays: ["injected difference"])

    def save(path, *args):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(selftest, "save", save)
    result = selftest.selftest(["multicore"], quick=True, families=("scalar_gather",), out_dir=tmp_path / "cases")
    family = result.backends["multicore"]["scalar_gather"]
    assert not result.ok and family.passed == 0 and family.failed == len(family.failures) > 0
    for _, problems, path in family.failures:
        assert path is None
        assert problems[0] == "injected difference"
        assert problems[-1].startswith("(the case could not be written to ") and "Permission denied" in problems[-1]


@pytest.fixture
def not_a_case(tmp_path):
    np.save(tmp_path / "array.npy", np.zeros(3))
    np.savez(tmp_path / "partial.npz", params='{"family": "row_gather", "dtype": "int8"}', table=np.zeros(3),
             idx=np.zeros(3))
    (tmp_path / "text.npz").write_text("not a zip archive")
    return tmp_path


@pytest.mark.parametrize("name, message", [
    ("/dev/zero", "argument --replay: /dev/zero is not a regular file (a selftest case is an .npz file)"),
    ("folder", "argument --replay: {folder} is not a regular file"),
    ("array.npy", "argument --replay: {path} is not a selftest case (ValueError: it holds one ndarray"),
    ("partial.npz", "argument --replay: {path} is not a selftest case (missing: rows, cols, capacity"),
    ("text.npz", "argument --replay: {path} is not a selftest case ("),
])
def test_replay_names_what_is_wrong_with_the_file(capsys, not_a_case, name, message):
    path = name if name.startswith("/") else str(not_a_case if name == "folder" else not_a_case / name)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["selftest", "--replay", path])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("simt-pto selftest: error: " + message.format(
        folder=not_a_case, path=path)), err


# -- float32 Max / Min: NaN and signed zeros --------------------------------------------------------------------

ONE, NEG_ONE, ZERO, NEG_ZERO = 0x3F800000, 0xBF800000, 0x00000000, 0x80000000
PINF, NINF = 0x7F800000, 0xFF800000
QNAN, NEG_QNAN = 0x7FC00000, 0xFFC00000
QNAN_PAYLOAD, NEG_QNAN_PAYLOAD = 0x7FC00123, 0xFFC00123
SNAN = 0x7F800001

ORDER_CASES = [  # table bits, source bits, Max bits, Min bits: IEEE 754 totalOrder, written out by hand
    (ONE, QNAN, QNAN, ONE),                      # Min(1, NaN) = 1 (PyTorch / JAX: NaN)
    (QNAN, ONE, QNAN, ONE),
    (ZERO, NEG_QNAN, ZERO, NEG_QNAN),            # Max(0, -NaN) = 0
    (NEG_QNAN, ZERO, ZERO, NEG_QNAN),
    (ONE, NEG_QNAN, ONE, NEG_QNAN),
    (NEG_QNAN, ONE, ONE, NEG_QNAN),
    (QNAN, NEG_QNAN, QNAN, NEG_QNAN),
    (NEG_QNAN, QNAN, QNAN, NEG_QNAN),
    (QNAN, QNAN_PAYLOAD, QNAN_PAYLOAD, QNAN),    # among positive NaNs the larger payload is the larger
    (QNAN_PAYLOAD, QNAN, QNAN_PAYLOAD, QNAN),
    (NEG_QNAN, NEG_QNAN_PAYLOAD, NEG_QNAN, NEG_QNAN_PAYLOAD),  # among negative ones, the smaller
    (NEG_QNAN_PAYLOAD, NEG_QNAN, NEG_QNAN, NEG_QNAN_PAYLOAD),
    (PINF, QNAN, QNAN, PINF),
    (NINF, NEG_QNAN, NINF, NEG_QNAN),
    (SNAN, QNAN, QNAN, SNAN),                    # a signalling NaN is below a quiet one, and kept as it is
    (ONE, SNAN, SNAN, ONE),                      # ... and stored from src as it is
    (ZERO, NEG_ZERO, ZERO, NEG_ZERO),            # -0.0 < +0.0, whichever is in the table
    (NEG_ZERO, ZERO, ZERO, NEG_ZERO),
    (NEG_ZERO, NEG_ONE, NEG_ZERO, NEG_ONE),
]
WANT_COLUMN = {"max": 2, "min": 3}


def _f32(bits) -> np.ndarray:
    return np.array(bits, np.uint32).view(np.float32)


@pytest.mark.parametrize("atomic", ["max", "min"])
def test_reference_orders_float32_max_min_by_total_order(atomic):
    for table_bits, src_bits, *want in ORDER_CASES:
        got = ref.combine("float32", atomic, table_bits, src_bits)
        assert got == want[WANT_COLUMN[atomic] - 2], (atomic, hex(table_bits), hex(src_bits), hex(got))
    n = len(ORDER_CASES)
    table = np.array([c[0] for c in ORDER_CASES], np.uint32)
    src = np.array([c[1] for c in ORDER_CASES], np.uint32)
    got = ref.scatter(table, "float32", "elem", [list(range(n))], [src], n, "undefined", atomic)
    np.testing.assert_array_equal(got, np.array([c[WANT_COLUMN[atomic]] for c in ORDER_CASES], np.uint32))


@pytest.fixture(params=["multicore tile op", "multicore whole array", "multicore scalar (1, 1)", "simulator tile op"])
def a5_path(request):
    """One A5 path that runs float32 Max / Min: the SIMT Elem kernel on the multicore backend and on the simulator,
    a whole-array scatter, and the ``(1, 1)`` MScatterScalarImpl."""
    backend, how = request.param.split(" ", 1)
    if backend == "simulator":
        request.getfixturevalue("simulator_backend")
    else:
        previous = pto.a5_backend()
        pto.set_a5_backend("multicore")
        request.addfinalizer(lambda: pto.set_a5_backend(previous))
    return how


@pytest.mark.parametrize("atomic", ["max", "min"])
def test_a5_float32_max_min_follow_total_order(a5_path, atomic):
    n = len(ORDER_CASES)
    want = np.array([c[WANT_COLUMN[atomic]] for c in ORDER_CASES], np.uint32)
    table_bits = np.array([c[0] for c in ORDER_CASES], np.uint32)
    src_bits = np.array([c[1] for c in ORDER_CASES], np.uint32)
    if a5_path == "scalar (1, 1)":
        got = np.empty(n, np.uint32)
        for k in range(n):  # a one-element tile: the scalar pipe's read-modify-write of slot 1
            table = _f32([ONE, table_bits[k], NEG_ONE])
            src = pto.Tile.from_array(_f32([[src_bits[k]]]), 1, 8, valid=(1, 1))
            idx = pto.Tile.from_array(np.ones((1, 1), np.int32), 1, 8, valid=(1, 1))
            pto.mscatter(pto.GlobalTensor(table), src, idx, coalesce="elem", atomic=atomic, target="a5")
            assert table.view(np.uint32)[0] == ONE and table.view(np.uint32)[2] == NEG_ONE
            got[k] = table.view(np.uint32)[1]
    elif a5_path == "whole array":
        table = _f32(table_bits)
        pto.scatter(table, _f32(src_bits), np.arange(n, dtype=np.int32), coalesce="elem", atomic=atomic)
        got = table.view(np.uint32)
    else:
        table = _f32(table_bits)
        src = pto.Tile.from_array(_f32(src_bits)[None, :], 1, 24, valid=(1, n))
        idx = pto.Tile.from_array(np.arange(n, dtype=np.int32)[None, :], 1, 24, valid=(1, n))
        pto.mscatter(pto.GlobalTensor(table), src, idx, coalesce="elem", atomic=atomic, target="a5")
        got = table.view(np.uint32)
    assert [hex(b) for b in got] == [hex(b) for b in want]
