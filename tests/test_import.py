"""``import simt_pto`` changes nothing in the process: no kernel module, no Numba patch, no ``numba.cuda``,
no CUDA driver call, no environment variable. The first op does what it needs."""
from __future__ import annotations

import subprocess
import sys
import textwrap

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
""")


def test_import_has_no_side_effects():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:5] == ["[]", "False", "True", "True", "0"]
