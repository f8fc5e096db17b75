"""The tuned constants of the kernels and their launchers: one table, each with one line saying what it trades and
where it was measured ("dev machine": the 2-core AMD EPYC development machine, 32 MB L3; the measurements are in
docs/performance.md, "Why the thresholds are where they are").

Each is a plain module-level int or float, and a kernel module takes it by name (``from simt_pto.kernels.tuning
import ROW_PREFETCH_BYTES``): a jitted function that reads a global scalar has it frozen in at compile time. The
kernel-cache digest (:mod:`simt_pto.kernels.cache`) covers this file, so an edit here recompiles the kernels. Each
picks how the same work is spread or paced (prefetch distances, block ranges, a scan's grid, a poll); none changes
which results a call may give. The host's thresholds are a table of their own, :mod:`simt_pto.host.tuning` (the
kernels may not import the host). This module imports nothing.
"""

CHUNKS_PER_WORKER = 4
"""Block ranges per worker of a multicore launch: uneven blocks against a call per range (2-4 level, 8-16 slower; dev, 2026-11-30)."""

HELPER_WAIT_POLLS = 1 << 14
"""Polls by a launch's caller, GIL released, for its helpers' end before it sleeps: a late wake vs a busy core (dev machine, 2026-11-30)."""

ROW_PREFETCH_BYTES = 4096
"""Bytes of rows a CPU warp prefetches ahead (16 rows of 256 B): misses in flight against lines evicted unused (dev machine, 2026-11-30)."""

INLINE_COPY_MAX_BYTES = 64
"""Longest row a CPU kernel copies inline, not by a memcpy call: 32-64 B rows 8-18% faster, 128-256 B level (dev machine, 2026-11-30)."""

STREAMED_RESULT_BYTES = 8 << 20
"""A CPU Row gather into at least this many bytes streams its stores: its speed against its reader's misses (dev machine, 2026-11-29)."""

SERIAL_PREFETCH_AHEAD = 128
"""Positions ahead the serial Elem walk prefetches an update's target in a larger table: its misses against eviction (2026-11-30)."""

SERIAL_PREFETCH_AHEAD_NEAR = 32
"""... and in a table of at most SERIAL_PREFETCH_NEAR_BYTES, which the caches answer sooner (dev machine, 2026-11-30)."""

SERIAL_PREFETCH_NEAR_BYTES = 1 << 22
"""The table bytes up to which the serial Elem walk prefetches SERIAL_PREFETCH_AHEAD_NEAR ahead (dev machine, 2026-11-30)."""

CLAIM_PREFETCH_AHEAD = 64
"""Positions ahead a CPU worker prefetches the owner it will claim: overlap against eviction; 256 no faster (dev machine, 2026-11-26)."""

CLAIM_PREFETCH_MIN_SLOTS = 1 << 16
"""Owners from which the claim prefetches: fewer stay in a core's L2, where it only costs; 256K no faster (dev machine, 2026-11-26)."""

SCAN_BLOCK = 1024
"""Threads per block of the GPU index scans (a CUDA block's most): fewer, fuller blocks (untuned; H200, 2026-11-26)."""

SCAN_MAX_BLOCKS = 1024
"""Most blocks of a GPU index scan (threads stride past it): a smaller grid against more work a thread (untuned; H200, 2026-11-26)."""

WAIT_SLICE_S = 20e-6
"""Seconds between a waiting writer's polls: how late it sees the table free against polling (untuned; dev machine, 2026-11-26)."""
