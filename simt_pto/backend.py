"""Which machine runs the A5 kernels: a real CUDA GPU, or Numba's CUDA simulator.

The choice must be made before ``numba.cuda`` is first imported (the simulator is selected by
``NUMBA_ENABLE_CUDASIM`` at import time). Order of precedence:

``import simt_pto`` resolves it once (so that no later ``from numba import cuda`` can pick the wrong
mode); :func:`set_a5_backend` may change it until ``numba.cuda`` is first imported.

1. :func:`set_a5_backend`,
2. the environment variable ``SIMT_PTO_A5_BACKEND`` = ``gpu`` | ``simulator`` | ``auto``,
3. ``auto``: the GPU when the CUDA driver reports a device, the simulator otherwise.

If ``numba.cuda`` was already imported by someone else, its mode stands and is reported.
"""
from __future__ import annotations

import ctypes
import os
import sys

ENV_VAR = "SIMT_PTO_A5_BACKEND"
_CHOICES = ("auto", "gpu", "simulator")
_requested: str | None = None
_resolved: str | None = None


def _normalise(name: str) -> str:
    key = str(name).strip().lower()
    key = {"sim": "simulator", "cudasim": "simulator", "cuda": "gpu"}.get(key, key)
    if key not in _CHOICES:
        raise ValueError(f"A5 backend: unknown choice {name!r}; expected one of {', '.join(_CHOICES)}")
    return key


def gpu_present() -> bool:
    """True when the CUDA driver loads and reports at least one device (checked without numba.cuda)."""
    for lib in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            cu = ctypes.CDLL(lib)
        except OSError:
            continue
        count = ctypes.c_int(0)
        try:
            return cu.cuInit(0) == 0 and cu.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0
        except Exception:
            return False
    return False


def set_a5_backend(name: str) -> str:
    """Choose ``"gpu"``, ``"simulator"`` or ``"auto"`` for the A5 target; returns the resolved choice.

    Raises RuntimeError if numba.cuda is already imported in the other mode.
    """
    global _requested, _resolved
    _requested = _normalise(name)
    if "numba.cuda" in sys.modules and _resolved is not None:
        want = _resolve_choice(_requested)
        if want != _resolved:
            raise RuntimeError(f"A5 backend: numba.cuda is already running as {_resolved}; "
                               f"choose the backend before the first A5 call")
        return _resolved
    _resolved = None
    return a5_backend()


def _resolve_choice(choice: str) -> str:
    if choice == "auto":
        return "gpu" if gpu_present() else "simulator"
    return choice


def a5_backend() -> str:
    """``"gpu"`` or ``"simulator"``: where A5 kernels run in this process (prepares numba.cuda)."""
    global _resolved
    if _resolved is not None:
        return _resolved
    if "numba.cuda" in sys.modules:
        from numba.cuda.core import config
        _resolved = "simulator" if config.ENABLE_CUDASIM else "gpu"
        return _resolved
    choice = _resolve_choice(_requested or _normalise(os.environ.get(ENV_VAR, "auto")))
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1" if choice == "simulator" else "0"
    if "numba" in sys.modules:  # numba reads its config at import: make it see the choice
        from numba.core import config
        config.reload_config()
    _resolved = choice
    return choice
