"""Device and loop code, one package per target: ``cpu`` (numpy golden), ``a2a3`` (Numba-jitted
sequential loops) and ``a5`` (the SIMT kernels, one source for the GPU, the CPU and the CUDA simulator).
Installed as ``simt_pto.kernels``; ``import simt_pto`` does not import it: the first op on a target does.

Numba's on-disk cache of these loops and kernels is keyed by the whole package source (see
:mod:`.cache`), not only by the file that defines each one: importing this package installs that locator,
before any of its functions is decorated."""
from pathlib import Path

from numba.core import caching as _numba_caching

from simt_pto import policy as _model
from . import cache

cache.watch(Path(__file__).parent)
cache.watch(Path(_model.__file__).parent)
cache.install(_numba_caching.CacheImpl)
