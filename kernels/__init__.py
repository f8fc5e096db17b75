"""Device and loop code, one package per target: ``cpu`` (numpy golden), ``a2a3`` (Numba-jitted
sequential loops) and ``a5`` (Numba CUDA SIMT kernels). Installed as ``simt_pto.kernels``.

Numba's on-disk cache of these loops and kernels is keyed by the whole package source (see
:mod:`.cache`), not only by the file that defines each one."""
from pathlib import Path

from numba.core import caching as _numba_caching

import simt_pto
from . import cache

cache.watch(Path(__file__).parent)
cache.watch(Path(simt_pto.__file__).parent)
cache.install(_numba_caching.CacheImpl)
