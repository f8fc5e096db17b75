"""The ``a5`` target: the A5 SIMT kernels, one source for three backends (``simt_pto.backend``).

The kernels (:mod:`.mgather`, GM -> L1 included, and :mod:`.mscatter`) are plain Python over the intrinsics of
:mod:`.intrinsics`; :mod:`.simt` compiles them for a CUDA GPU, Numba's CUDA simulator or the CPU, and
launches them. Choosing a kernel for a call, staging and the scalar fallbacks are host code
(:mod:`simt_pto.host.a5_runner`). Importing this package imports no ``numba.cuda``: the backend is resolved at the
first launch.
"""
from .mgather import simt_mgather_elem_kernel, simt_mgather_l1_elem_kernel, simt_mgather_row_kernel
from .mscatter import (simt_mscatter_elem_serial_kernel, simt_mscatter_elem_kernel, simt_mscatter_elem_last_kernel,
                       simt_mscatter_elem_owner_claim_kernel, simt_mscatter_elem_owner_write_kernel,
                       simt_mscatter_owner_reset_kernel, simt_mscatter_row_kernel, simt_mscatter_row_last_kernel,
                       simt_mscatter_row_owner_claim_kernel, simt_mscatter_row_owner_write_kernel,
                       simt_mscatter_row_serial_kernel)

from .mscatter import (simt_mscatter_compact_owner_claim_kernel, simt_mscatter_elem_compact_owner_write_kernel,
                       simt_mscatter_elem_private_owner_claim_kernel, simt_mscatter_elem_private_owner_write_kernel,
                       simt_mscatter_row_compact_owner_write_kernel)

KERNELS = {factory.__name__: factory for factory in (
    simt_mgather_row_kernel, simt_mgather_elem_kernel, simt_mgather_l1_elem_kernel,
    simt_mscatter_row_kernel, simt_mscatter_elem_kernel, simt_mscatter_elem_serial_kernel, simt_mscatter_row_serial_kernel,
    simt_mscatter_row_last_kernel,
    simt_mscatter_elem_last_kernel,
    simt_mscatter_owner_reset_kernel, simt_mscatter_row_owner_claim_kernel, simt_mscatter_row_owner_write_kernel,
    simt_mscatter_elem_owner_claim_kernel, simt_mscatter_elem_owner_write_kernel,
    simt_mscatter_elem_private_owner_claim_kernel, simt_mscatter_elem_private_owner_write_kernel,
    simt_mscatter_compact_owner_claim_kernel, simt_mscatter_row_compact_owner_write_kernel,
    simt_mscatter_elem_compact_owner_write_kernel)}
"""Every A5 kernel factory by the kernel's spec name: what a :class:`simt_pto.launch_spec.LaunchSpec` names.
A factory takes the policy's compile-time constants by name (``rule``, ``atomic``, ``fmt``) and returns the
kernel as plain Python over the intrinsics (:mod:`.simt` binds and compiles it per backend)."""

__all__ = ["KERNELS", "simt_mgather_elem_kernel", "simt_mgather_l1_elem_kernel", "simt_mgather_row_kernel",
           "simt_mscatter_elem_serial_kernel", "simt_mscatter_elem_kernel", "simt_mscatter_elem_last_kernel",
           "simt_mscatter_elem_owner_claim_kernel", "simt_mscatter_elem_owner_write_kernel",
           "simt_mscatter_owner_reset_kernel", "simt_mscatter_row_kernel", "simt_mscatter_row_last_kernel",
           "simt_mscatter_row_owner_claim_kernel", "simt_mscatter_row_owner_write_kernel", "simt_mscatter_row_serial_kernel"]
