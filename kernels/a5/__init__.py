"""The ``a5`` target: the A5 SIMT kernels as Numba CUDA kernels.

On a machine with a CUDA GPU they run for real; otherwise on Numba's CUDA simulator, from the same
source. The backend is chosen (``simt_pto.backend``) before ``numba.cuda`` is first imported, which
is why this package resolves it before importing its kernels.
"""
from simt_pto.backend import a5_backend

BACKEND = a5_backend()

from numba.cuda.core import caching as _cuda_caching  # noqa: E402

from simt_pto.kernels import cache  # noqa: E402

cache.install(_cuda_caching.CacheImpl)  # numba-cuda keeps a locator list of its own

from .launch import resolve_mgather, resolve_mscatter, run_mgather, run_mscatter  # noqa: E402

__all__ = ["BACKEND", "resolve_mgather", "resolve_mscatter", "run_mgather", "run_mscatter"]
