"""What the GPU benchmarks against PyTorch share (``bench_large.py``, ``gpu_call_overhead.py``): the check that a
CUDA GPU runs the A5 kernels and that PyTorch, the peer, is importable."""
from __future__ import annotations


def torch_on_gpu(what: str):
    """The ``torch`` module when the A5 backend is the GPU and PyTorch is installed; else None, after saying which
    is missing (the benchmark then exits 0: ``what`` names what it needs the GPU for)."""
    import simt_pto as pto
    if pto.a5_backend() != "gpu":
        print(f"no CUDA GPU: the A5 kernels run on the CPU or the CUDA simulator here; {what}")
        return None
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed: no peer to measure against")
        return None
    return torch
