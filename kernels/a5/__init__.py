"""The ``a5`` target: the A5 SIMT kernels, one source for three backends (``simt_pto.backend``).

The kernels (:mod:`.mgather`, :mod:`.mscatter`, :mod:`.l1`) are plain Python over the intrinsics of
:mod:`.intrinsics`; :mod:`.simt` compiles them for a CUDA GPU, Numba's CUDA simulator or the CPU, and
launches them. Importing this package imports no ``numba.cuda``: the backend is resolved at the first
launch.
"""
from .launch import resolve_mgather, resolve_mscatter, run_mgather, run_mscatter

__all__ = ["resolve_mgather", "resolve_mscatter", "run_mgather", "run_mscatter"]
