"""Device and loop code, one package per target: ``cpu`` (numpy golden), ``a2a3`` (Numba-jitted
sequential loops) and ``a5`` (Numba CUDA SIMT kernels). Installed as ``simt_pto.kernels``."""
