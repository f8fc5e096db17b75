"""Device and loop code, one package per target: ``cpu`` (numpy golden), ``a2a3`` (Numba-jitted
sequential loops) and ``a5`` (the SIMT kernels, one source for the GPU, the CPU and the CUDA simulator).
Installed as ``simt_pto.kernels``; ``import simt_pto`` does not import it: the first op on a target does.

Every jitted function here is made by :func:`.cache.njit` / :func:`.cache.cuda_jit`: Numba's on-disk cache of
these loops and kernels is keyed by the whole package source as this process imported it, survives damaged
or unwritable cache files, and a compile is atomic with respect to Ctrl-C (see :mod:`.cache`). Importing this
package installs the cache locator, before any of its functions is decorated, and makes ``os.fork()`` wait
for a compile running in another thread."""
from pathlib import Path

from numba.core import caching as _numba_caching

from simt_pto import policy as _model
from . import cache

cache.watch(Path(__file__).parent)
cache.watch(Path(_model.__file__).parent)
cache.install(_numba_caching.CacheImpl)
cache.install_fork_guard()
