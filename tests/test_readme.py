"""README tells the truth: its atomic-support matrix is the capability table, and its example runs."""
import importlib.util
import os
import pathlib
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

import simt_pto as pto

ROOT = pathlib.Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()


def _row(target):
    line = next(text for text in README.splitlines() if re.match(rf"\| {target}\b", text))
    cells = [c.strip() for c in line.strip("|").split("|")]
    parse = lambda c: set() if c == "none" else {x.strip() for x in c.split(",")}  # noqa: E731
    return parse(cells[1]), parse(cells[2])


def test_atomic_matrix_matches_the_capability_table():
    for target in pto.TARGETS:
        add, maxmin = _row(target)
        assert add == {d.name for d in pto.dtypes.ATOMIC_DTYPES[(target, pto.ScatterAtomicOp.ADD)]}
        assert maxmin == {d.name for d in pto.dtypes.ATOMIC_DTYPES[(target, pto.ScatterAtomicOp.MAX)]}
        assert maxmin == {d.name for d in pto.dtypes.ATOMIC_DTYPES[(target, pto.ScatterAtomicOp.MIN)]}


def test_api_tour_example():
    table = np.arange(64 * 64, dtype=np.float16).reshape(64, 64)
    idx = pto.Tile.from_array(np.array([[3, 70, -1, 5, 0, 0, 0, 0]], np.int32), valid=(1, 4))
    dst = pto.Tile("float16", 8, 64, valid=(4, 64))
    pto.mgather(dst, pto.GlobalTensor(table), idx, coalesce="row", oob="clamp", target="a5")
    assert "rows 3, 63, 63, 5 of the table" in README
    assert np.array_equal(dst.valid_numpy(), table[[3, 63, 63, 5]])


def test_readme_is_a_page_with_the_guarantees_early():
    lines = README.splitlines()
    assert len(lines) <= 300, f"README has {len(lines)} lines; the long form belongs in docs/guide.md"
    heading = next(n for n, line in enumerate(lines, 1) if line.startswith("## What a call promises"))
    assert heading < 150, f"the guarantees start at line {heading}"
    for page in ("docs/guide.md", "docs/guarantees.md", "docs/performance.md", "docs/gpu.md", "docs/semantics.md"):
        assert page in README and (ROOT / page).is_file(), page


def test_readme_names_no_commit():
    # a commit hash is a word of 7 to 40 hex digits with a letter and a digit in it; run histories go to docs/
    hashes = [w for w in re.findall(r"\b[0-9a-f]{7,40}\b", README) if re.search(r"[a-f]", w) and re.search(r"\d", w)]
    assert not hashes, hashes


def _readme_commands() -> list[str]:
    """The indented shell lines of README that run a tool (not the install lines, which .ci/run runs)."""
    commands = []
    for line in README.splitlines():
        text = line.strip()
        if line.startswith("    ") and (text.startswith("simt-pto ") or text.startswith("python -c ")):
            commands.append(text.split("  #")[0].strip())
    return commands


def test_readme_shows_the_tools():
    names = {c.split()[1] for c in _readme_commands() if c.startswith("simt-pto")}
    assert names == {"demo", "selftest", "validate-last", "coalesce", "inspect"}, names


@pytest.mark.parametrize("command", _readme_commands())
def test_readme_command_runs(command, tmp_path):
    if command.startswith("simt-pto inspect") and importlib.util.find_spec("numba_cuda") is None:
        pytest.skip("simt-pto inspect needs the toolchain extra: pip install 'simt_pto[toolchain]'")
    bin_dir = str(pathlib.Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    # every command in one folder, in README's order: the coalesce line reads the file the line before it writes
    for earlier in _readme_commands():
        if earlier == command:
            break
        if earlier.startswith("python -c "):
            subprocess.run(shlex.split(earlier), cwd=tmp_path, env=env, check=True, timeout=120)
    argv = shlex.split(command)
    if argv[0] == "python":
        argv[0] = sys.executable
    out = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Traceback" not in out.stderr
