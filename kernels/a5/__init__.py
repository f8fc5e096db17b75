"""The ``a5`` target: the A5 SIMT kernels, one source for three backends (``simt_pto.backend``).

The kernels (:mod:`.mgather`, :mod:`.mscatter`, :mod:`.l1`) are plain Python over the intrinsics of
:mod:`.intrinsics`; :mod:`.simt` compiles them for a CUDA GPU, Numba's CUDA simulator or the CPU, and
launches them. Choosing a kernel for a call, staging and the scalar fallbacks are host code
(:mod:`simt_pto.host.a5`). Importing this package imports no ``numba.cuda``: the backend is resolved at the
first launch.
"""
from .l1 import simt_mgather_l1_elem_kernel
from .mgather import simt_mgather_elem_kernel, simt_mgather_row_kernel
from .mscatter import (simt_mscatter_elem_kernel, simt_mscatter_elem_last_kernel, simt_mscatter_elem_owner_claim_kernel,
                       simt_mscatter_elem_owner_write_kernel, simt_mscatter_owner_reset_kernel, simt_mscatter_row_kernel,
                       simt_mscatter_row_last_kernel, simt_mscatter_row_owner_claim_kernel,
                       simt_mscatter_row_owner_write_kernel)

__all__ = ["simt_mgather_elem_kernel", "simt_mgather_l1_elem_kernel", "simt_mgather_row_kernel",
           "simt_mscatter_elem_kernel", "simt_mscatter_elem_last_kernel", "simt_mscatter_elem_owner_claim_kernel",
           "simt_mscatter_elem_owner_write_kernel", "simt_mscatter_owner_reset_kernel", "simt_mscatter_row_kernel",
           "simt_mscatter_row_last_kernel", "simt_mscatter_row_owner_claim_kernel", "simt_mscatter_row_owner_write_kernel"]
