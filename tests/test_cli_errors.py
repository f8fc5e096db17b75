"""Every bad argument of ``simt-pto demo``, ``validate-last``, ``coalesce`` and ``inspect`` ends the way argparse ends
one: the usage line, then one error line naming the argument (a bad number: the allowed range), on stderr; exit code
2; no traceback. The shell's conventions, tried on the real command line in subprocesses: a closed pipe ends the
command quietly (exit 141), a write error is one line (exit 1), Ctrl-C one line (exit 130), and nothing prints a
traceback unless ``--debug`` asks; progress bars go to a terminal only."""
from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys

import numpy as np
import pytest

from conftest import requires_toolchain, run_simt_pto


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
    (["--rows", "0"], "argument --rows: expected a positive integer up to 2147483648, got 0"),
    (["--rows", "-5"], "argument --rows: expected a positive integer up to 2147483648, got -5"),
    (["--cols", "0"], "argument --cols: expected a positive integer, got 0"),
    (["--repeat", "0"], "argument --repeat: expected a positive integer, got 0"),
    (["--n", "0"], "argument --n: expected a positive integer, got 0"),
    (["--n", "10", "--cols", "64"], "argument --n: a Row workload moves whole rows of --cols 64 elements"),
    (["--rows", "many"], "argument --rows: expected a positive integer up to 2147483648, got 'many'"),
    (["--seed", "-1"], "argument --seed: expected a non-negative integer, got -1"),
    (["--rows", "3000000000"], "argument --rows: expected a positive integer up to 2147483648, got 3000000000"),
    (["--coalesce", "elem", "--rows", "100000", "--cols", "100000"],
     "argument --cols: an Elem table of --rows x --cols slots takes int32 indices: at most 2147483648 slots, "
     "got 100000 x 100000 = 10000000000"),
    (["--n", "99999999999999"], "argument --n: this workload (65536x64 float32 tables kept 5 times, 99999999999936 "
                                "source elements and their indices) needs at least "),
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
    ("text", [], "argument --idx: {text}: not a readable .npy array"),
    ("missing", [], "argument --idx: {missing}: no such file"),
    ("/dev/zero", [], "argument --idx: /dev/zero: not a regular file (a .npy file is needed)"),
    ("/dev/null", [], "argument --idx: /dev/null: not a regular file"),
    ("2d", ["--coalesce", "elem", "--dtype", "float64"], "float64"),
    ("2d", ["--base-offset", "-4"], "argument --base-offset: expected a non-negative integer, got -4"),
    ("2d", ["--dyn-ubuf-size", "-1"], "argument --dyn-ubuf-size: expected a non-negative integer, got -1"),
    ("2d", ["--coalesce", "elem", "--table", "99999999999999x8"],
     "argument --table: a 99999999999999x8 float32 table needs at least "),
])
def test_coalesce_bad_arguments(idx_files, idx, extra, needle):
    if idx.startswith("/dev/") and not os.path.exists(idx):
        pytest.skip(f"no {idx} on this system")
    path = idx if idx.startswith("/") else str(idx_files[idx])
    proc = simt_pto("coalesce", "--op", "mgather", "--idx", path, "--table", "64x64", *extra)  # the last --table wins
    assert_argparse_error(proc, "coalesce", needle.format(**{k: str(v) for k, v in idx_files.items()}))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_coalesce_refuses_a_fifo_before_it_is_opened(tmp_path):
    """Opening a FIFO blocks until a writer comes: ``--idx`` is refused unless it is a regular file, as validate-last
    refuses one (tests/test_small_holes.py). In a subprocess, so that a command that opens it fails the test by the
    timeout instead of hanging the suite."""
    fifo = tmp_path / "idx.npy"
    os.mkfifo(fifo)
    proc = subprocess.run([sys.executable, "-m", "simt_pto", "coalesce", "--op", "mgather", "--idx", str(fifo),
                           "--table", "64x64"], capture_output=True, text=True, timeout=60)
    assert_argparse_error(proc, "coalesce", f"argument --idx: {fifo}: not a regular file")


@pytest.mark.parametrize("argv, needle", [
    (["--rows", "0"], "argument --rows: expected a positive integer, got 0"),
    (["--cols", "-1"], "argument --cols: expected a positive integer, got -1"),
    (["--dtype", "float64"], "float64"),
    (["--atomic", "max", "--dtype", "float16"], "Atomic Type Support"),
])
def test_inspect_bad_arguments(argv, needle):
    argv = ["--op", "mscatter", "--coalesce", "elem", *argv]
    assert_argparse_error(simt_pto("inspect", *argv), "inspect", needle)


@pytest.mark.parametrize("argv, needle", [
    (["--seed", "-1"], "argument --seed: expected a non-negative integer, got -1"),
    (["--seed", "x" * 100], "argument --seed: expected a non-negative integer, got '" + "x" * 40 + "...'"),
])
def test_demo_bad_arguments(argv, needle):
    assert_argparse_error(simt_pto("demo", *argv), "demo", needle)


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
    (dict(shape="99999999x99999999"), "argument --table-shape: a 99999999x99999999 float32 table kept 5 times needs "
                                      "at least "),
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


# -- the shell's conventions ----------------------------------------------------------------------------------------

QUICK_SELFTEST = ("selftest", "--quick", "--backend", "multicore", "--family", "scalar_gather")
TINY_VALIDATE = ("validate-last", "--coalesce", "elem", "--rows", "8", "--cols", "8", "--n", "64", "--repeat", "2")


def python_m(*argv, module="simt_pto", buffered=True, **kwargs) -> subprocess.Popen:
    """``python -m simt_pto ARGV`` in a fresh interpreter, started; ``buffered=False`` as under
    ``PYTHONUNBUFFERED=1`` (every write reaches the pipe at once, not at the flush at exit)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    return subprocess.Popen([sys.executable, "-m", module, *argv], env=env, **kwargs)


@pytest.mark.parametrize("module, argv, buffered", [
    ("simt_pto", ("demo",), True),  # the writes at the flush at exit
    ("simt_pto", QUICK_SELFTEST, False),  # each write as it comes
    ("simt_pto", ("--help",), True),
    ("simt_pto.host.tools.coalesce_cli", ("--op", "mgather", "--coalesce", "elem", "--idx", "{idx}",
                                            "--table", "64x64"), True),
])
def test_a_closed_pipe_ends_the_command_quietly(idx_files, module, argv, buffered):
    """``simt-pto demo | head -1``, with a reader that goes away before the first line (so every write meets the
    closed pipe, whatever the timing): exit 141 (128 + SIGPIPE), nothing on stderr."""
    argv = [a.format(idx=idx_files["2d"]) for a in argv]
    proc = python_m(*argv, module=module, buffered=buffered, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert err == ""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full (the always-full device) on this system")
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("argv", [
    ("demo",),
    ("coalesce", "--op", "mgather", "--coalesce", "elem", "--idx", "{idx}", "--table", "64x64"),
    ("coalesce", "--op", "mgather", "--coalesce", "elem", "--idx", "{idx}", "--table", "64x64", "--json"),
    TINY_VALIDATE,
    QUICK_SELFTEST,
    pytest.param(("inspect", "--op", "mscatter", "--coalesce", "elem"), marks=requires_toolchain),
], ids=["demo", "coalesce", "coalesce --json", "validate-last", "selftest", "inspect"])
def test_a_full_disk_is_one_error_line(idx_files, argv, buffered):
    """``simt-pto demo > /dev/full``: exit 1 and the same one line on stderr whether the write fails at the flush
    after the command (buffered) or in the command's own print (PYTHONUNBUFFERED=1); no traceback, and no
    "Exception ignored" from the flush at exit."""
    argv = [a.format(idx=idx_files["2d"]) for a in argv]
    with open("/dev/full", "w") as full:
        proc = python_m(*argv, buffered=buffered, stdout=full, stderr=subprocess.PIPE, text=True)
        err = proc.communicate(timeout=120)[1]
    assert (proc.returncode, err) == (1, f"simt-pto {argv[0]}: error: cannot write the output: "
                                         "No space left on device\n")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full (the always-full device) on this system")
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("argv", [("demo", "--seed", "-1"), ("validate-last", "--rows", "0"), ("no-such-command",)],
                         ids=" ".join)
def test_a_usage_error_on_a_full_stderr_is_status_2(argv, buffered):
    """``simt-pto demo --seed -1 2>/dev/full``: still exit 2. argparse drops the write error of its usage lines, and
    a buffered stderr kept them for the flush at exit to fail on again (status 120)."""
    with open("/dev/full", "w") as full:
        proc = python_m(*argv, buffered=buffered, stdout=subprocess.PIPE, stderr=full, text=True)
        out = proc.communicate(timeout=120)[0]
    assert (proc.returncode, out) == (2, "")


@pytest.mark.parametrize("sink", ["/dev/full", "closed pipe"])
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("argv", [("--help",), ("--version",), ("demo", "--help"), ("coalesce", "--help")],
                         ids=" ".join)
def test_help_and_version_report_a_write_error(argv, buffered, sink):
    """What argparse prints for --help and --version meets a full disk or a closed pipe as any command's output does,
    under PYTHONUNBUFFERED=1 too: argparse drops the error of its own write, and an unbuffered stdout (or a help
    longer than the buffer) leaves the flush after it nothing to fail on. ``coalesce --help`` is longer than
    /dev/full's 4096-byte buffer."""
    if sink == "/dev/full":
        if not os.path.exists("/dev/full"):
            pytest.skip("no /dev/full (the always-full device) on this system")
        with open("/dev/full", "w") as full:
            proc = python_m(*argv, buffered=buffered, stdout=full, stderr=subprocess.PIPE, text=True)
            err = proc.communicate(timeout=120)[1]
        assert (proc.returncode, err) == (1, "simt-pto: error: cannot write the output: No space left on device\n")
    else:
        proc = python_m(*argv, buffered=buffered, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        proc.stdout.close()  # the reader went away before the first byte
        err = proc.stderr.read()
        assert (proc.wait(timeout=120), err) == (141, "")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX")
def test_ctrl_c_is_one_line_and_exit_130(ctrl_c_handled):
    """SIGINT in the middle of a run (after its first line): ``simt-pto validate-last: interrupted``, exit 130."""
    proc = python_m("validate-last", "--coalesce", "elem", "--rows", "64", "--cols", "64", "--n", "100000",
                    "--repeat", "100000", buffered=False, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("A5 backend: ")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err == "simt-pto validate-last: interrupted\n"


def test_progress_bars_go_to_a_terminal_only():
    """validate-last draws its progress bars where stderr is a terminal, and nowhere else (a file, a pipe)."""
    proc = simt_pto(*TINY_VALIDATE)  # stderr: a StringIO, as a file or a pipe
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    pty, fcntl, termios = (pytest.importorskip(name, reason="no pseudo-terminals on this system")
                           for name in ("pty", "fcntl", "termios"))
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # a new one is 0 columns wide
    with python_m(*TINY_VALIDATE, stdout=subprocess.DEVNULL, stderr=follower) as child:
        os.close(follower)
        drawn = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            drawn += chunk
        assert child.wait(timeout=120) == 0
    os.close(leader)
    assert b"LAST on a5" in drawn and b"DEFAULT on a5" in drawn


@pytest.fixture
def failing_demo(monkeypatch):
    """``simt-pto demo`` raising what the test puts in ``failing_demo.error``."""
    from simt_pto.host.tools import demo

    class Failure:
        error: BaseException = RuntimeError("injected fault")

    def run_demo(seed):
        raise Failure.error

    monkeypatch.setattr(demo, "run_demo", run_demo)
    return Failure


@pytest.mark.parametrize("error, status, line", [
    (RuntimeError("injected fault"), 1,
     "simt-pto demo: error: RuntimeError: injected fault (run with --debug for the traceback)"),
    (MemoryError("Unable to allocate 5.68 TiB"), 1,
     "simt-pto demo: error: not enough memory for this request (Unable to allocate 5.68 TiB); pick smaller sizes"),
    (PermissionError(13, "Permission denied", "/x/case.npz"), 1, "simt-pto demo: error: Permission denied: /x/case.npz"),
    (KeyboardInterrupt(), 130, "simt-pto demo: interrupted"),
])
def test_an_error_is_one_line_without_a_traceback(failing_demo, error, status, line):
    failing_demo.error = error
    try:
        proc = simt_pto("demo")
    except KeyboardInterrupt:  # not into pytest, which would stop the session
        pytest.fail("KeyboardInterrupt went through the command line")
    assert (proc.returncode, proc.stdout, proc.stderr) == (status, "", line + "\n")


@pytest.mark.parametrize("argv", [["--debug", "demo"], ["demo", "--debug"]])
def test_debug_shows_the_traceback(failing_demo, argv):
    with pytest.raises(RuntimeError, match="injected fault"):
        simt_pto(*argv)
