"""``import simt_pto`` changes nothing in the process: no kernel module, no Numba patch, no ``numba.cuda``,
no CUDA driver call, no environment variable. It loads the model only: the runtime and the tools it re-exports
are imported at their first use, and every public name still works. The first op does what it needs."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import os, sys
    environ = dict(os.environ)
    from numba.core import caching
    locators = list(caching.CacheImpl._locator_classes)
    import simt_pto
    print([m for m in sys.modules if m.startswith("simt_pto.kernels")])
    print("numba.cuda" in sys.modules)
    print(dict(os.environ) == environ)
    print(caching.CacheImpl._locator_classes == locators)
    print(simt_pto.backend.gpu_present.cache_info().currsize)  # the CUDA driver probe, never called
    print(sorted(m for m in sys.modules if m in ("simt_pto.ops", "simt_pto.dask") or m.startswith("simt_pto.host")))
""")


def _run(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split("\n")


def test_import_has_no_side_effects():
    assert _run(PROBE)[:6] == ["[]", "False", "True", "True", "0", "[]"]


LAZY = textwrap.dedent("""
    import sys
    import simt_pto
    names = set(simt_pto.__all__)
    print(sorted(names - set(dir(simt_pto))))                       # dir() lists every public name
    print(simt_pto.mgather.__module__, simt_pto.tstore.__module__)  # the tile ops: the runtime, no tool
    print(sorted(m for m in sys.modules if m.startswith("simt_pto.host.tools")))
    print(simt_pto.gather.__module__, simt_pto.scatter.__module__)
    print(simt_pto.coalescing.__name__, simt_pto.coalescing.analyze.__name__)
    print(simt_pto.inspect_kernel.__module__, simt_pto.selftest.__module__)
    print(sorted(n for n in names if getattr(simt_pto, n, None) is None))
    print(simt_pto.gather is simt_pto.gather, "gather" in vars(simt_pto))  # kept after the first access
    print(hasattr(simt_pto, "no_such_name"))
    try:
        simt_pto.no_such_name
    except AttributeError as e:
        print(e)
    from simt_pto import scatter, selftest  # from-imports reach the lazy names too
    print(callable(scatter) and callable(selftest))
""")


def test_public_names_are_imported_at_first_use():
    assert _run(LAZY)[:11] == [
        "[]",
        "simt_pto.host.tile_ops simt_pto.host.tile_ops",
        "[]",
        "simt_pto.host.whole_array simt_pto.host.whole_array",
        "simt_pto.host.tools.coalescing analyze",
        "simt_pto.host.tools.kernel_report simt_pto.host.tools.selftest",
        "[]",
        "True True",
        "False",
        "module 'simt_pto' has no attribute 'no_such_name'",
        "True",
    ]


def test_the_command_line_loads_no_kernel_and_no_numba_cuda_before_a_command_runs():
    """``simt-pto inspect`` switches ``numba.cuda`` to real mode only if nothing imported it first: building the
    parser (every subcommand's module) must not."""
    out = _run(textwrap.dedent("""
        import sys
        from simt_pto.host.tools import cli
        cli.build_parser()
        print("numba.cuda" in sys.modules, sorted(m for m in sys.modules if m.startswith("simt_pto.kernels")))
    """))
    assert out[0] == "False []"


def test_the_tile_ops_old_path_warns_and_gives_the_same_functions():
    """``simt_pto.ops`` stays for one release, as a deprecated alias of the tile ops (``simt_pto.host.tile_ops``)."""
    import importlib
    import simt_pto
    sys.modules.pop("simt_pto.ops", None)
    with pytest.warns(DeprecationWarning, match="simt_pto.ops is deprecated"):
        old = importlib.import_module("simt_pto.ops")
    assert (old.mgather, old.mscatter, old.tload, old.tstore) == (
        simt_pto.mgather, simt_pto.mscatter, simt_pto.tload, simt_pto.tstore)
