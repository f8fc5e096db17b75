"""Per-call time of repeated whole-array calls on PyTorch device tensors, beside their kernel time (GPU only).

    python bench/gpu_call_overhead.py [--profile]

For each call: the wall time per call over 30 calls after a first one of the same signature (what a loop of calls
runs: the kept device launches of ``simt_pto.host.kept_launch``), synchronised once at the end, and the device time of
the kernels it launched (PyTorch's profiler, 10 calls); ``torch.take`` on the same data is the peer, measured in the
same run. Data: 128K-row gathers from a 256K x 8 float32 table, 8 rows of a 64 x 64 table, 4M-element Elem ops,
Conflict::Last of 4M updates into 1M slots. ``--profile`` adds cProfile's top entries for two calls (where the host
time goes). README's per-call table ("Measured on a GPU", an H200, 2026-11-26) was measured with these loops, in
an earlier, ad-hoc form of this script (the same calls, counts and timers; only the output differed).

Without a CUDA GPU (or PyTorch) it says so and exits 0.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time

import numpy as np
from gpu_peer import torch_on_gpu

CALLS, PROFILED_CALLS = 30, 10


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="cProfile the Row gather and the Elem Add")
    args = parser.parse_args(argv)
    torch = torch_on_gpu("this benchmark times GPU calls")
    if torch is None:
        return 0
    import simt_pto as pto
    dev = "cuda"
    rng = np.random.default_rng(0)
    n_rows = 1 << 18
    table = torch.rand(n_rows, 8, device=dev)
    idx = torch.as_tensor(rng.integers(0, n_rows, n_rows // 2).astype(np.int32), device=dev)
    n = n_rows * 16
    flat = torch.rand(n, device=dev)
    eidx = torch.as_tensor(rng.integers(0, n, n).astype(np.int32), device=dev)
    src = torch.rand(n, device=dev)
    small = torch.zeros(n // 4, device=dev)
    lidx = torch.as_tensor(rng.integers(0, n // 4, n).astype(np.int32), device=dev)
    tiny_table, tiny_idx = torch.rand(64, 64, device=dev), torch.arange(8, dtype=torch.int32, device=dev)
    calls = {
        "Row gather, oob=clamp": lambda: pto.gather(table, idx, oob="clamp"),
        "Row gather, oob=undefined": lambda: pto.gather(table, idx),
        "Row gather, 8 rows of 64 x 64": lambda: pto.gather(tiny_table, tiny_idx, oob="clamp"),
        "Elem gather, oob=clamp": lambda: pto.gather(flat, eidx, coalesce="elem", oob="clamp"),
        "Elem scatter Add, oob=undefined": lambda: pto.scatter(flat, src, eidx, coalesce="elem", atomic="add"),
        "Elem scatter Add, oob=skip": lambda: pto.scatter(flat, src, eidx, coalesce="elem", atomic="add", oob="skip"),
        "Elem Conflict::Last": lambda: pto.scatter(small, src, lidx, coalesce="elem", conflict="last"),
        "torch.take (peer)": lambda: torch.take(flat, eidx.long()),
    }
    print(f"GPU: {torch.cuda.get_device_name()}")
    print("| call | wall µs / call | kernel µs / call | kernels (µs, launches per call) |")
    print("|---|---|---|---|")
    for name, call in calls.items():
        call()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(CALLS):
            call()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - start) / CALLS
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(PROFILED_CALLS):
                call()
            torch.cuda.synchronize()
        events = sorted(prof.key_averages(), key=lambda e: -e.device_time_total)
        device_us = sum(e.device_time_total for e in events) / PROFILED_CALLS
        kernels = ", ".join(f"{e.key[:40]}: {e.device_time_total / PROFILED_CALLS:.0f} x{e.count // PROFILED_CALLS}"
                            for e in events[:4] if e.device_time_total)
        print(f"| {name} | {wall * 1e6:.0f} | {device_us:.0f} | {kernels} |", flush=True)
    if args.profile:
        for name in ("Row gather, oob=clamp", "Elem scatter Add, oob=undefined"):
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(100):
                calls[name]()
            torch.cuda.synchronize()
            profiler.disable()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
            print(f"\ncProfile, 100 calls of {name}:\n{text.getvalue()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
