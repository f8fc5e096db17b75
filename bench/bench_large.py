"""Whole-array gather / scatter on the GPU against PyTorch peers measured in the same run (issue 6).

    python bench/bench_large.py [--quick]

Reports each emulator op's effective bandwidth (bytes read + written, median of repeats; inputs already on the
device; the time between CUDA events recorded before and after the call, so host work inside the call that leaves
the device idle counts, as it does for the peer) and its ratio to the peer. A call is timed after a first one of
its signature: what a loop of calls runs (the kept launch, ``simt_pto.host.kept_launch``):

* row gather (float32, random rows) vs ``torch.index_select`` at 8, 32, 128, 512 columns, and vs the
  device-to-device copy bandwidth at 512 columns;
* element gather vs ``torch.take``; element scatter-add vs ``torch.index_add_``;
  scatter max vs ``torch.scatter_reduce_(amax)``;
* deterministic Last scatter vs ``torch.index_put_`` under ``torch.use_deterministic_algorithms(True)``,
  with a bitwise check that both give the sequential last-writer result.

Without a CUDA GPU (or without PyTorch) it says so and exits 0: there is no peer to measure against.
"""
from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np
from gpu_peer import torch_on_gpu


def _timer(torch, fn, repeat):
    fn()  # warm-up (and kernel compilation)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    args = parser.parse_args(argv)
    torch = torch_on_gpu("this benchmark needs a GPU")
    if torch is None:
        return 0
    import simt_pto as pto
    dev = "cuda"
    repeat = 5 if args.quick else 20
    n_rows = 1 << (18 if args.quick else 20)
    rng = np.random.default_rng(0)
    rows = []

    def report(name, nbytes, t_ours, t_peer, peer):
        rows.append((name, nbytes / t_ours / 1e9, nbytes / t_peer / 1e9, t_peer / t_ours, peer))

    # device-to-device copy bandwidth
    buf = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    out = torch.empty_like(buf)
    t_copy = _timer(torch, lambda: out.copy_(buf), repeat)
    copy_gbs = 2 * buf.numel() / t_copy / 1e9

    for cols in (8, 32, 128, 512):
        table = torch.rand(n_rows, cols, device=dev)
        idx = torch.as_tensor(rng.integers(0, n_rows, n_rows // 2).astype(np.int32), device=dev)
        idx64 = idx.long()
        nbytes = 2 * idx.numel() * cols * 4 + idx.numel() * 4
        ours = _timer(torch, lambda: pto.gather(table, idx, oob="clamp"), repeat)
        peer = _timer(torch, lambda: torch.index_select(table, 0, idx64), repeat)
        report(f"row gather f32 x{cols}", nbytes, ours, peer, "torch.index_select")
        if cols == 512:
            rows.append((f"row gather f32 x{cols} vs copy", nbytes / ours / 1e9, copy_gbs, nbytes / ours / 1e9 / copy_gbs,
                         "D2D copy"))

    n = n_rows * 16
    flat = torch.rand(n, device=dev)
    eidx = torch.as_tensor(rng.integers(0, n, n).astype(np.int32), device=dev)
    nbytes = 3 * n * 4
    report("elem gather f32", nbytes, _timer(torch, lambda: pto.gather(flat, eidx, coalesce="elem", oob="clamp"), repeat),
           _timer(torch, lambda: torch.take(flat, eidx.long()), repeat), "torch.take")
    src = torch.rand(n, device=dev)
    report("elem scatter-add f32", nbytes,
           _timer(torch, lambda: pto.scatter(flat, src, eidx, coalesce="elem", atomic="add"), repeat),
           _timer(torch, lambda: flat.index_add_(0, eidx.long(), src), repeat), "torch.index_add_")
    report("elem scatter-max f32", nbytes,
           _timer(torch, lambda: pto.scatter(flat, src, eidx, coalesce="elem", atomic="max"), repeat),
           _timer(torch, lambda: flat.scatter_reduce_(0, eidx.long(), src, "amax"), repeat),
           "torch.scatter_reduce_(amax)")

    # deterministic Last: bitwise against torch's deterministic index_put_
    small = torch.zeros(n // 4, device=dev)
    lidx = torch.as_tensor(rng.integers(0, n // 4, n).astype(np.int32), device=dev)
    ours_t, theirs_t = small.clone(), small.clone()
    torch.use_deterministic_algorithms(True)
    t_peer = _timer(torch, lambda: theirs_t.index_put_((lidx.long(),), src), repeat)
    torch.use_deterministic_algorithms(False)
    t_ours = _timer(torch, lambda: pto.scatter(ours_t, src, lidx, coalesce="elem", conflict="last"), repeat)
    report("elem Last scatter f32", nbytes, t_ours, t_peer, "deterministic index_put_")
    same = torch.equal(ours_t.view(torch.int32), theirs_t.view(torch.int32))

    print(f"GPU: {torch.cuda.get_device_name()}; D2D copy {copy_gbs:.0f} GB/s; repeats {repeat} (median)")
    print("| op | simt_pto GB/s | peer GB/s | ratio | peer |")
    print("|---|---|---|---|---|")
    for name, ours, peer, ratio, peer_name in rows:
        print(f"| {name} | {ours:.0f} | {peer:.0f} | {ratio:.2f}x | {peer_name} |")
    print(f"Last scatter bitwise equal to deterministic index_put_: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
