"""Numba's on-disk cache must notice an edit to a helper in another file (simt_pto.kernels.cache), and its
faults must cost a recompile, never the run.

Plain Numba stamps a cache entry with the defining file alone: a kernel that inlines a helper from
another file keeps running the old helper after an edit. A damaged cache file, no writable cache folder,
or a source edited during a session must not break a later run or store code under the wrong source.
Each step below is a fresh process, as a user's next run would be.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import requires_cuda

import simt_pto  # noqa: F401  (installs the locators)
from simt_pto.kernels import cache

HELPER = "from numba import njit\n\n@njit(inline='always', cache=True)\ndef bump(x):\n    return x + {step}\n"
KERNEL = "from numba import njit\nfrom helper import bump\n\n@njit(cache=True)\ndef kernel(x):\n    return bump(x)\n"
RUN = textwrap.dedent("""
    import sys
    from simt_pto.kernels import cache
    if sys.argv[2] == "watch":
        cache.watch(sys.argv[1])
    sys.path.insert(0, sys.argv[1])
    import kernel
    print(kernel.kernel(10), sum(kernel.kernel.stats.cache_hits.values()))
""")


def _run(folder: Path, mode: str) -> tuple[int, int]:
    p = subprocess.run([sys.executable, "-c", RUN, str(folder), mode], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    value, hits = p.stdout.split()
    return int(value), int(hits)


def _project(folder: Path, step: int) -> None:
    (folder / "helper.py").write_text(HELPER.format(step=step))
    (folder / "kernel.py").write_text(KERNEL)


def test_edit_to_an_inlined_helper_recompiles_the_kernel(tmp_path):
    _project(tmp_path, step=1)
    assert _run(tmp_path, "watch") == (11, 0)  # compiled and saved
    assert _run(tmp_path, "watch") == (11, 1)  # loaded from the disk cache: the stamp is stable
    (tmp_path / "helper.py").write_text(HELPER.format(step=2))
    assert _run(tmp_path, "watch") == (12, 0)  # the helper's edit is seen: recompiled
    assert _run(tmp_path, "watch") == (12, 1)


def test_unwatched_code_keeps_numbas_own_stamp(tmp_path):
    """The control: outside the watched folders Numba's locator stands, and it misses the edit."""
    _project(tmp_path, step=1)
    assert _run(tmp_path, "plain") == (11, 0)
    (tmp_path / "helper.py").write_text(HELPER.format(step=2))
    assert _run(tmp_path, "plain") == (11, 1)  # stale: exactly what the package's own kernels are spared


def test_package_kernels_are_watched():
    kernels = Path(cache.__file__).parent
    for module in ("a2a3/mgather.py", "a2a3/mscatter.py", "a2a3/walk.py", "a5/mgather.py", "a5/mscatter.py",
                   "a5/device.py", "cube_l1_walk.py", "tuning.py"):
        assert cache.watched(kernels / module)
    assert cache.watched(Path(simt_pto.__file__).parent / "enums.py")  # policy constants frozen at compile
    assert not cache.watched(Path(subprocess.__file__))


def test_the_digest_covers_the_kernels_tuning_table(monkeypatch):
    """The constants the kernels compile in live in kernels/tuning.py: a change to that file's content (as this
    process imported it) changes the source digest every kernel's cache entry is stamped with."""
    from simt_pto.kernels import tuning
    before = cache.source_digest()
    path = str(Path(tuning.__file__).resolve())
    assert cache._at_import.get(path) is not None  # taken at the first stamp after its import, as for any module
    monkeypatch.setitem(cache._at_import, path, "0" * 64)  # the table as if it had held other values
    assert cache.source_digest() != before
    monkeypatch.undo()
    assert cache.source_digest() == before


def test_locators_are_installed_for_cpu_and_cuda_caches(simulator_backend):
    from simt_pto.kernels.a5 import simt
    simt.namespace("cuda")  # the first CUDA compile installs the CUDA one
    from numba.core import caching as core_caching
    from numba.cuda.core import caching as cuda_caching

    for impl in (core_caching.CacheImpl, cuda_caching.CacheImpl):
        first = impl._locator_classes[0]
        assert issubclass(first, cache._SourceDigestLocator)
        assert list(first.fallbacks) == impl._locator_classes[1:]
        cache.install(impl)  # idempotent
        assert impl._locator_classes[1] is not first and impl._locator_classes[0] is first


REAL_MODE = textwrap.dedent("""
    import sys
    from numba.cuda.dispatcher import CUDACache
    from simt_pto.enums import IndexRule
    from simt_pto.kernels import cache
    from simt_pto.kernels.a5.simt import bound_source
    from simt_pto.launch_spec import KernelPolicy
    py_func = bound_source("simt_mgather_row_kernel", KernelPolicy(rule=IndexRule.IDENTITY), "cuda")
    first = CUDACache(py_func)
    locator = first._impl.locator
    assert isinstance(locator, cache._SourceDigestLocator), type(locator)
    assert locator.get_source_stamp() == cache.source_digest()
    assert first.cache_path.startswith(sys.argv[1]), first.cache_path   # Numba's NUMBA_CACHE_DIR locator, wrapped
    first._cache_file.save(("probe",), {"payload": 42})
    print(CUDACache(py_func)._cache_file.load(("probe",)))              # a new process-level cache reads it back
""")


@requires_cuda
def test_real_cuda_cache_uses_the_locator(tmp_path):
    """numba-cuda in real (non-simulator) mode, no GPU needed: its kernel cache picks the source-digest
    locator, stores its index where Numba's own locator would, and reads back what it saved."""
    env = dict(os.environ, SIMT_PTO_A5_BACKEND="gpu", NUMBA_CACHE_DIR=str(tmp_path))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    p = subprocess.run([sys.executable, "-c", REAL_MODE, str(tmp_path)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[-2] == "{'payload': 42}"


CPU_BACKEND_RUN = textwrap.dedent("""
    import numpy as np
    import simt_pto as pto
    from simt_pto.enums import IndexRule
    from simt_pto.kernels.a5 import simt
    from simt_pto.launch_spec import KernelPolicy
    pto.set_a5_backend("multicore")
    table = np.arange(4096, dtype=np.float32)
    assert (pto.gather(table, np.array([7, 4095, 0], np.int32), coalesce="elem") == [7, 4095, 0]).all()
    kernel = simt.compile_kernel("simt_mgather_elem_kernel", KernelPolicy(rule=IndexRule.IDENTITY), "cpu")
    print(sum(kernel.stats.cache_hits.values()), sum(kernel.stats.cache_misses.values()))
""")


def test_multicore_backend_kernels_load_from_the_disk_cache(tmp_path):
    """The A5 kernels compiled for the CPU (a per-backend copy of one source) are saved by the first process
    and loaded, not recompiled, by the next."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", CPU_BACKEND_RUN], capture_output=True, text=True, env=env,
                           timeout=300) for _ in range(2)]
    for p in runs:
        assert p.returncode == 0, p.stderr
    assert runs[0].stdout.split() == ["0", "1"]   # compiled and saved
    assert runs[1].stdout.split() == ["1", "0"]   # loaded


def _index_file(dispatcher) -> str:
    """The name of the on-disk cache index a dispatcher of the package reads and writes."""
    return os.path.basename(dispatcher._cache._cache_file._index_path)


def _specializations() -> dict:
    """One dispatcher per compile-time specialization, by a label naming it, of every cached source the package
    specialises on a policy: the A2/A3 walks (gather and scatter, every rule, the gather's pre-fill, the scatter's
    atomic op and element format), the sequential store rule, the cube core's L1 walks, and (a few of) the A5
    kernels compiled for the CPU."""
    from simt_pto.enums import ElementFormat, IndexRule, ScatterAtomicOp
    from simt_pto.kernels import cube_l1_walk, store
    from simt_pto.kernels.a2a3 import mgather, mscatter, walk
    from simt_pto.kernels.a5 import simt
    from simt_pto.launch_spec import KernelPolicy
    stores = ((ScatterAtomicOp.NONE, ElementFormat.NATIVE), (ScatterAtomicOp.ADD, ElementFormat.NATIVE),
              (ScatterAtomicOp.ADD, ElementFormat.F16), (ScatterAtomicOp.ADD, ElementFormat.BF16))
    out = {}
    # (the CPU loops and kernels compile UNDEFINED's unchecked rule as CLAMP's or MASK's, index_policy.read_once:
    # one specialization, which tests/test_index_snapshot.py pins)
    checked_rules = [rule for rule in IndexRule if rule != IndexRule.IDENTITY]
    for source in (walk.row_nd, walk.elem_nd, walk.row_nz, walk.elem_nz):
        for rule in checked_rules:
            out["mgather", source.__name__, rule] = mgather.gather_loop(source, rule)
            for atomic, fmt in stores:
                out["mscatter", source.__name__, rule, atomic, fmt] = mscatter.scatter_loop(source, rule, atomic, fmt)
    out["mgather", "row_nz", IndexRule.MASK, "prefill"] = mgather.gather_loop(walk.row_nz, IndexRule.MASK, True)
    for atomic in ScatterAtomicOp:
        for fmt in ElementFormat:
            out["store", atomic, fmt] = store.sequential_store(atomic, fmt)
    for rule in IndexRule:
        out["l1 row", rule] = cube_l1_walk.l1_row_loop(rule, False)
        out["l1 elem", rule] = cube_l1_walk.l1_elem_loop(rule)
    for rule in checked_rules:
        out["a5 gather elem", rule] = simt.compile_kernel("simt_mgather_elem_kernel", KernelPolicy(rule=rule), "cpu")
    out["l1 row", IndexRule.MASK, "prefill"] = cube_l1_walk.l1_row_loop(IndexRule.MASK, True)
    for atomic, fmt in stores[:3] + ((ScatterAtomicOp.ADD, ElementFormat.F16_EDGE),
                                     (ScatterAtomicOp.MAX, ElementFormat.F32_ORDER)):
        policy = KernelPolicy(rule=IndexRule.CLAMP, atomic=atomic, fmt=fmt)
        out["a5 scatter elem", atomic, fmt] = simt.compile_kernel("simt_mscatter_elem_kernel", policy, "cpu")
    return out


def test_two_specializations_never_share_a_cache_entry():
    """A specialization binds its policy as compile-time constants (the A2/A3 walks and the store rule as globals,
    the A5 kernels through their factory), which Numba's own cache key does not see: the policy names the cache
    index explicitly (``simt_pto.kernels.cache.njit(key=...)``), so no two specializations share an index file,
    and code compiled for one is never loaded for another."""
    specs = _specializations()
    files: dict[str, list] = {}
    for label, dispatcher in specs.items():
        files.setdefault(_index_file(dispatcher), []).append(label)
    assert {name: labels for name, labels in files.items() if len(labels) > 1} == {}


POLICY_RUN = textwrap.dedent("""
    import sys
    import numpy as np
    from simt_pto.enums import ElementFormat, IndexRule, ScatterAtomicOp
    from simt_pto.kernels.a2a3 import mgather, mscatter, walk
    op, policy = sys.argv[1], sys.argv[2]
    idx = np.array([4, 1], np.uint32)
    if op == "gather":           # row 4 of a 4 x 2 table is one past the end: clamped to row 3, or wrapped to row 0
        loop = mgather.gather_loop(walk.row_nd, IndexRule[policy.upper()])
        out = np.zeros(4, np.uint32)
        loop(out, 2, np.arange(8, dtype=np.uint32), idx, 1, 2, 2, 4, 2)
    else:                        # float16 bits, stored or added: one loop signature for both
        atomic = ScatterAtomicOp[policy.upper()]
        fmt = ElementFormat.F16 if atomic == ScatterAtomicOp.ADD else ElementFormat.NATIVE
        loop = mscatter.scatter_loop(walk.elem_nd, IndexRule.IDENTITY, atomic, fmt)
        table = np.full(8, 1.5, np.float16)
        loop(np.full(2, 2.0, np.float16).view(np.uint16), 2, table.view(np.uint16), idx, 2, 1, 2, 8)
        out = table[[4, 1]]
    print(out.tolist(), sum(loop.stats.cache_hits.values()), sum(loop.stats.cache_misses.values()))
""")


@pytest.mark.parametrize("op, first, second, expected", [
    ("gather", "clamp", "wrap", "[0, 1, 2, 3] 0 1"),   # the wrap loop, compiled: rows 0 and 1
    ("scatter", "none", "add", "[3.5, 3.5] 0 1"),     # the add loop, compiled: 1.5 + 2.0
])
def test_a_specialization_never_loads_another_ones_code_from_disk(tmp_path, op, first, second, expected):
    """What the explicit key prevents: a process saves a loop compiled for one policy, and the next process asks for
    the same source and argument types under another. That one compiles its own code (a miss), rather than loading
    the first one's (a hit, with the first policy's result); and the first policy still loads its own."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))

    def run(policy):
        p = subprocess.run([sys.executable, "-c", POLICY_RUN, op, policy], capture_output=True, text=True, env=env,
                           timeout=300)
        assert p.returncode == 0, p.stderr
        return p.stdout.strip()

    saved = run(first)
    assert saved.endswith("] 0 1")                               # compiled and saved
    assert run(second) == expected
    assert run(first) == saved[: -len("0 1")] + "1 0"           # loaded from its own entry


# -- faults of the disk cache (issue 21, section 4) ----------------------------------------------------------

REMAP_RUN = textwrap.dedent("""
    import warnings
    warnings.simplefilter("always")
    import numpy as np
    from simt_pto.enums import IndexRule
    from simt_pto.kernels.index_policy import remap_array
    slots, ok = remap_array(np.array([7, -1], np.int32), 5, IndexRule.WRAP)
    stats = remap_array.stats
    print(slots.tolist(), ok.tolist(), sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))
""")
REMAP_RESULT = "[2, 0] [True, True]"   # 7 % 5; -1 is 4294967295, % 5 = 0


def _remap(cache_dir: Path) -> tuple[str, int, int, list[str]]:
    """A fresh process calls ``remap_array`` (one of the package's cached entry points): its result, cache hits,
    cache misses, and the KernelCacheWarning lines it printed."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir))
    p = subprocess.run([sys.executable, "-c", REMAP_RUN], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    *result, hits, misses = p.stdout.split()
    return " ".join(result), int(hits), int(misses), [line for line in p.stderr.splitlines() if "KernelCacheWarning" in line]


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garbage(path: Path) -> None:
    path.write_bytes(b"not a pickle" * 100)


def _zero_machine_code(path: Path) -> None:
    """Zeroes 4 KiB inside the LLVM bitcode of a data file: the pickle around it stays valid (loading it unsealed
    crashed the process with SIGSEGV)."""
    data = bytearray(path.read_bytes())
    at = data.find(b"BC\xc0\xde")
    assert at > 0, "no LLVM bitcode in the data file"
    data[at + 64: at + 4096] = bytes(4096 - 64)
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def saved_remap_cache(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("saved")
    assert _remap(folder) == (REMAP_RESULT, 0, 1, [])  # compiled and saved
    return folder


@pytest.mark.parametrize("suffix, damage", [(".nbi", _truncate), (".nbi", _garbage), (".nbc", _truncate),
                                             (".nbc", _garbage), (".nbc", _zero_machine_code)],
                         ids=["index-truncated", "index-garbage", "data-truncated", "data-garbage", "data-machine-code"])
def test_a_damaged_cache_file_is_recompiled_and_overwritten(saved_remap_cache, tmp_path, suffix, damage):
    shutil.copytree(saved_remap_cache, tmp_path, dirs_exist_ok=True)
    (damaged,) = tmp_path.rglob(f"index_policy.remap_array-*{suffix}")
    damage(damaged)
    result, hits, misses, warned = _remap(tmp_path)
    assert (result, hits, misses) == (REMAP_RESULT, 0, 1)   # recompiled, not failed
    assert len(warned) == 1 and str(damaged) in warned[0], warned
    assert _remap(tmp_path) == (REMAP_RESULT, 1, 0, [])     # the entry was overwritten: loaded, no warning


NO_CACHE_FOLDER = textwrap.dedent("""
    import warnings
    warnings.simplefilter("always")
    from numba.core import caching

    def read_only(locator):
        raise PermissionError(13, "Permission denied", locator.get_cache_path())

    caching._CacheLocator.ensure_cache_path = read_only  # every folder Numba tries (it probes each this way)

    import numpy as np
    import simt_pto as pto
    table = np.arange(12, dtype=np.int32).reshape(6, 2)
    got = pto.gather(table, np.array([5, 0], np.int32), target="a2a3")
    pto.scatter(table, np.ones((2, 2), np.int32), np.array([1, 1], np.int32), atomic="add", target="a2a3")
    print(got.tolist(), table[1].tolist())
""")


def test_no_writable_cache_folder_compiles_without_the_disk_cache(tmp_path):
    """A read-only package with a read-only NUMBA_CACHE_DIR and HOME (simulated where Numba probes each folder: this
    test may run as root): the a2a3 loops and the store rules they inline compile in memory, with one warning."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), HOME=str(tmp_path))
    p = subprocess.run([sys.executable, "-c", NO_CACHE_FOLDER], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[-2] == "[[10, 11], [0, 1]] [4, 5]"
    warned = [line for line in p.stderr.splitlines() if "KernelCacheWarning" in line]
    assert len(warned) == 1 and "no writable folder" in warned[0] and "NUMBA_CACHE_DIR" in warned[0], p.stderr


PARAMS = "STEP = {step}\n"
PARAMS_KERNEL = ("from simt_pto.kernels.cache import njit\nimport params\n\n"
                 "@njit(cache=True)\ndef kernel(x):\n    return x + params.STEP\n")
EDIT_IN_SESSION = textwrap.dedent("""
    import os, sys, warnings
    warnings.simplefilter("always")
    from simt_pto.kernels import cache
    cache.watch(sys.argv[1])
    sys.path.insert(0, sys.argv[1])
    import params                                           # the process runs these constants from now on
    if len(sys.argv) > 2:                                   # the source is edited on disk during the session
        before = os.stat(params.__file__)
        with open(params.__file__, "w") as f:
            f.write(sys.argv[2])
        if sys.argv[3:] == ["keeping an older time"]:       # as cp -p, rsync -a and tar x leave a copied file
            os.utime(params.__file__, ns=(before.st_atime_ns, before.st_mtime_ns - 3_600 * 10**9))
    import kernel                                           # compiled after the edit, freezing params.STEP
    print(kernel.kernel(10), sum(kernel.kernel.stats.cache_hits.values()))
""")


def _session(folder: Path, *edit: str) -> tuple[int, int, list[str]]:
    p = subprocess.run([sys.executable, "-c", EDIT_IN_SESSION, str(folder), *edit], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    value, hits = p.stdout.split()
    return int(value), int(hits), [line for line in p.stderr.splitlines() if "KernelCacheWarning" in line]


def test_a_source_edited_during_a_session_is_not_stored_under_the_new_digest(tmp_path):
    """Issue 21, 4c: a session imports a module of constants (as ``import simt_pto`` imports ``simt_pto.policy``), its
    file is edited, then a kernel that reads the constants compiles. The session freezes the old constants; stored
    under the digest of the edited files, that code would be loaded by every later process (Clamp and Wrap came back
    swapped). The session compiles without the disk cache instead, and says why."""
    (tmp_path / "params.py").write_text(PARAMS.format(step=1))
    (tmp_path / "kernel.py").write_text(PARAMS_KERNEL)
    assert _session(tmp_path) == (11, 0, [])    # imported before the first key, unchanged: cached as usual
    assert _session(tmp_path) == (11, 1, [])
    value, hits, warned = _session(tmp_path, PARAMS.format(step=2))
    assert (value, hits) == (11, 0)              # the session's own (old) constant, compiled, not loaded
    assert len(warned) == 1 and "params.py changed on disk after this process imported simt_pto" in warned[0], warned
    assert _session(tmp_path) == (12, 0, [])    # the next process compiles the edited constant: nothing stale stored
    assert _session(tmp_path) == (12, 1, [])


@pytest.mark.parametrize("spelled", ["real path", "through a symlink"])
def test_a_source_replaced_by_an_older_file_during_a_session_is_not_stored_either(tmp_path, spelled):
    """A module's file replaced, after the import, by a copy that keeps an older modification time (``cp -p``,
    ``rsync -a``, ``tar x``): the check compared modification times with the import's moment and saw no change, so the
    session stored the old constants' kernel under the new files' digest, and later processes loaded it (a changed
    ``FRACTAL_NZ_ROW`` gave wrong rows). The file's identity (time, size, inode) at the import shows the change, also
    where the folder is reached through a symlink (a symlinked site-packages; /var on macOS), which the check, comparing
    the module's path as spelled with the resolved folder, did not look at."""
    real = tmp_path / "real"
    real.mkdir()
    folder = real
    if spelled == "through a symlink":
        folder = tmp_path / "link"
        folder.symlink_to(real, target_is_directory=True)
    (real / "params.py").write_text(PARAMS.format(step=1))
    (real / "kernel.py").write_text(PARAMS_KERNEL)
    assert _session(folder) == (11, 0, [])
    value, hits, warned = _session(folder, PARAMS.format(step=2), "keeping an older time")
    assert (value, hits) == (11, 0)              # the session's own constant, compiled, neither loaded nor stored
    assert len(warned) == 1 and "params.py changed on disk after this process imported simt_pto" in warned[0], warned
    assert _session(folder) == (12, 0, [])      # the next process compiles the replaced file's constant
    assert _session(folder) == (12, 1, [])


def test_a_source_stamped_in_the_future_is_no_edit(tmp_path):
    """A file whose modification time is ahead of the clock (clock skew, an archive, a network file system), not
    touched during the session: the check compared times with the import's moment and turned the disk cache off in
    every process. Only a change of the file's identity since the import counts."""
    (tmp_path / "params.py").write_text(PARAMS.format(step=1))
    (tmp_path / "kernel.py").write_text(PARAMS_KERNEL)
    ahead = time.time() + 86_400
    for name in ("params.py", "kernel.py"):
        os.utime(tmp_path / name, (ahead, ahead))
    assert _session(tmp_path) == (11, 0, [])
    assert _session(tmp_path) == (11, 1, [])    # stored by the first process, loaded by the next


def test_the_packages_files_are_noted_as_the_import_found_them():
    """The package's own modules (``simt_pto.nz``, ``simt_pto.policy``, read at ``import simt_pto``) are compared with
    their files as the import found them, not as they were when the kernels were first imported."""
    from simt_pto import nz, policy, source_files
    for module in (nz, policy):
        path = os.path.realpath(module.__file__)
        assert source_files.AT_IMPORT[path] == source_files.identity(path)
        assert cache._identity_at_watch[path] == source_files.AT_IMPORT[path]


INSTALL_THEN_EXEC = textwrap.dedent("""
    import os, sys, time
    folder, session = sys.argv[1], sys.argv[2]
    time.sleep(0.1)                                         # well after this process started (its fork)
    with open(os.path.join(folder, "params.py"), "w") as f:  # then "installed", as pip writes the package
        f.write("STEP = 1\\n")
    with open(os.path.join(folder, "kernel.py"), "w") as f:
        f.write(sys.argv[3])
    os.execv(sys.executable, [sys.executable, "-c", session, folder])  # the same process now runs the session
""")


def _installed_then_exec(folder: Path) -> tuple[int, int, list[str]]:
    """One process that writes the watched sources, then replaces itself with a session that imports and compiles
    them, as ``( pip install . && simt-pto demo )`` does in a shell: bash forks the subshell, which runs pip, then
    execs the last command in place. The process's start (its fork) is before the files were written."""
    p = subprocess.run([sys.executable, "-c", INSTALL_THEN_EXEC, str(folder), EDIT_IN_SESSION, PARAMS_KERNEL],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    value, hits = p.stdout.split()
    return int(value), int(hits), [line for line in p.stderr.splitlines() if "KernelCacheWarning" in line]


def test_files_written_before_python_ran_are_no_edit_even_after_the_process_started(tmp_path):
    """Issue 37, 10: README's first command, ``pip install . && simt-pto demo``, run in a subshell, warned that
    ``simt_pto/__init__.py changed on disk after this process started`` and compiled without the disk cache: the
    stale-source check compared the files with the process's start, which was the subshell's fork, before pip ran.
    Files written before ``import simt_pto`` hold what the session runs: no warning, and the disk cache is used."""
    assert _installed_then_exec(tmp_path) == (11, 0, [])  # compiled and stored: nothing stale
    assert _installed_then_exec(tmp_path) == (11, 1, [])  # the next one (files written anew, same content) loads it
    # the check itself still works in such a process: an edit after the import turns the disk cache off
    value, hits, warned = _session(tmp_path, PARAMS.format(step=2))
    assert (value, hits) == (11, 0) and len(warned) == 1 and "params.py changed on disk" in warned[0], warned


def test_a_kernels_index_is_stamped_with_the_source_digest_alone():
    """Numba before 0.68 stamps a cache index with the modification time and size of the function's file: in our
    stamp too, a reinstall that wrote the same files anew (``pip install .``) would miss every index and compile all
    over. The digest covers that file by content (it lies under a watched root), and is the whole stamp."""
    from numba.core import caching as core_caching
    from simt_pto.enums import IndexRule
    from simt_pto.kernels.a5 import simt
    from simt_pto.launch_spec import KernelPolicy
    py_func = simt.bound_source("simt_mgather_row_kernel", KernelPolicy(rule=IndexRule.IDENTITY), "cpu")
    locator = core_caching.FunctionCache(py_func)._impl.locator  # (what njit(cache=True) makes)
    assert isinstance(locator, cache._SourceDigestLocator), type(locator)
    assert cache.watched(py_func.__code__.co_filename)
    assert locator.get_source_stamp() == cache.source_digest()


PLUS_ONE = "from simt_pto.kernels.cache import njit\n\n@njit(cache=True)\ndef plus_one(x):\n    return x + 1\n"
CROSS_THE_INDEX = textwrap.dedent("""
    # What two processes that save different signatures of one kernel at once can leave: Numba names a signature's
    # data file by the first number its index does not list, so both choose the same one, and the index the last
    # writer leaves can name the other's code for its signature. Here the float64 signature names the int64 code.
    from numba import types
    files = kern.plus_one._cache._cache_file
    (_, name), = files._load_index().items()
    files._save_index({kern.plus_one._cache._index_key((types.float64,), kern.plus_one.targetctx.codegen()): name})
""")


def _in_folder(folder: Path, code: str) -> str:
    session = (f"import sys; sys.path.insert(0, {str(folder)!r})\nfrom simt_pto.kernels import cache\n"
               f"cache.watch({str(folder)!r})\nimport kern\n" + code)
    p = subprocess.run([sys.executable, "-c", session], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_an_index_entry_that_names_another_signatures_code_is_a_miss(tmp_path):
    """Numba runs a loaded entry as the signature asked for: the int64 code of ``x + 1`` run on 1.5 returned 2. The
    entry is checked against the signature it was compiled for; a mismatch is a miss, compiled and stored anew."""
    (tmp_path / "kern.py").write_text(PLUS_ONE)
    assert _in_folder(tmp_path, "print(kern.plus_one(41))") == "42"
    _in_folder(tmp_path, CROSS_THE_INDEX)
    check = "print(kern.plus_one(1.5), sum(kern.plus_one.stats.cache_hits.values()))"
    assert _in_folder(tmp_path, check) == "2.5 0"  # the crossed entry: compiled, not loaded
    assert _in_folder(tmp_path, check) == "2.5 1"  # stored over it, and loaded by the next process
