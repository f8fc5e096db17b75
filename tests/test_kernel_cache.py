"""Numba's on-disk cache must notice an edit to a helper in another file (simt_pto.kernels.cache).

Plain Numba stamps a cache entry with the defining file alone: a kernel that inlines a helper from
another file keeps running the old helper after an edit. Each step below is a fresh process, as
a user's next run would be.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

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
    for module in ("a2a3/mgather.py", "a2a3/mscatter.py", "a5/mgather.py", "a5/mscatter.py", "a5/l1.py"):
        assert cache.watched(kernels / module)
    assert cache.watched(Path(simt_pto.__file__).parent / "enums.py")  # policy constants frozen at compile
    assert not cache.watched(Path(subprocess.__file__))


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
    from simt_pto.kernels import cache
    from simt_pto.kernels.a5.mgather import simt_mgather_row_kernel
    from simt_pto.kernels.a5.simt import cuda_source
    from simt_pto.kernels.index_policy import IDENTITY
    py_func = cuda_source(simt_mgather_row_kernel(IDENTITY))
    first = CUDACache(py_func)
    locator = first._impl.locator
    assert isinstance(locator, cache._SourceDigestLocator), type(locator)
    assert locator.get_source_stamp()[1] == cache.source_digest()
    assert first.cache_path.startswith(sys.argv[1]), first.cache_path   # Numba's NUMBA_CACHE_DIR locator, wrapped
    first._cache_file.save(("probe",), {"payload": 42})
    print(CUDACache(py_func)._cache_file.load(("probe",)))              # a new process-level cache reads it back
""")


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
    from simt_pto.kernels.a5 import mgather, simt
    from simt_pto.kernels.index_policy import IDENTITY
    pto.set_a5_backend("cpu")
    table = np.arange(4096, dtype=np.float32)
    assert (pto.gather(table, np.array([7, 4095, 0], np.int32), coalesce="elem") == [7, 4095, 0]).all()
    kernel = simt.compile_kernel(mgather.simt_mgather_elem_kernel(IDENTITY), "cpu")
    print(sum(kernel.stats.cache_hits.values()), sum(kernel.stats.cache_misses.values()))
""")


def test_cpu_backend_kernels_load_from_the_disk_cache(tmp_path):
    """The A5 kernels compiled for the CPU (a per-backend copy of one source) are saved by the first process
    and loaded, not recompiled, by the next."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", CPU_BACKEND_RUN], capture_output=True, text=True, env=env,
                           timeout=300) for _ in range(2)]
    for p in runs:
        assert p.returncode == 0, p.stderr
    assert runs[0].stdout.split() == ["0", "1"]   # compiled and saved
    assert runs[1].stdout.split() == ["1", "0"]   # loaded


def test_a2a3_scatter_loops_close_over_their_whole_store_policy():
    """Each A2/A3 scatter loop is a copy of one source with its ``store_element`` bound per (atomic, format)
    (``simt_pto.kernels.store.bind_store``): Numba's cache key sees the closure, not the binding, so the closure
    must hold the whole policy, as integers, or two policies would share one cache index entry."""
    from simt_pto.kernels.a2a3 import mscatter
    for factory in (mscatter.row_nd_loop, mscatter.elem_nd_loop, mscatter.row_nz_loop, mscatter.elem_nz_loop):
        loop = factory(11, 12, 13).py_func
        cells = dict(zip(loop.__code__.co_freevars, (c.cell_contents for c in loop.__closure__)))
        assert cells == {"rule": 11, "atomic": 12, "fmt": 13}, (factory.__name__, cells)
