"""Device helpers of the A5 kernels, written once for every backend: the element and row moves, the three walks
every kernel uses (the Row walk, the Elem walk of a tile, the flat grid-stride walk) and the kernels' visitors,
what each does at one step of its walk.

Like the kernels, these are plain Python over the intrinsics of :mod:`.intrinsics`; :mod:`.simt` binds a
copy of each per backend (``cuda.jit(device=True, inline="always")`` or ``njit(inline="always")``), so
they are inlined into the kernel's IR and the policy constants fold. Kernel factories close over policy
constants only (never over functions); a kernel's policy names its on-disk cache entry (``KernelPolicy.cache_key``).
"""
from __future__ import annotations

import numba
import numpy as np

from simt_pto.geometry import WARP
from simt_pto.kernels.index_policy import remap_index
from simt_pto.kernels.softfloat import add_bits
from simt_pto.kernels.tuning import (CLAIM_PREFETCH_AHEAD, ROW_PREFETCH_BYTES, SERIAL_PREFETCH_AHEAD,
                                     SERIAL_PREFETCH_AHEAD_NEAR, SERIAL_PREFETCH_NEAR_BYTES, STREAMED_RESULT_BYTES)
from .intrinsics import (CACHE_LINE_BYTES, SPAN_LANES, atomic_cas, atomic_max, block_range, copy_run, first_lane, prefetch,
                         prefetch_read, stream_run, warp_range)


def block_tile(b, tile_rows, valid_rows):
    """``(row0, rows)`` of block ``b``'s tile: rows ``[b * tile_rows, row0 + rows)`` of the ``valid_rows`` (the
    kernels' multi-block form: block ``b`` runs tile ``b``)."""
    row0 = b * tile_rows
    return row0, min(tile_rows, valid_rows - row0)


def grid_stride(launch, b, ty, lane0):
    """A flat grid-stride walk: ``(first item, stride)`` of thread ``g = b * threads + ty * 32 + lane0``, which takes
    items ``g, g + grid threads, ...`` (``threads = kLaunchWarps * 32`` per block)."""
    threads = launch[3] * WARP
    return b * threads + ty * WARP + lane0, threads * launch[2]


def span_end(first, lanes, stop):
    """End of the span of ``lanes`` consecutive items from ``first`` (``first < stop``), clipped to ``stop``.
    One GPU lane's span is ``first`` alone: written so, the CUDA code stays a straight line."""
    if lanes == 1:
        return first + 1
    return min(first + lanes, stop)


def next_position(r, c, cols, lanes):
    """The position after ``(r, c)`` in a row-major walk of a region ``cols`` wide (the next lane of a span).
    A GPU lane's span has one position, so it never steps: written so, the CUDA code keeps no walk and a
    CPU span divides a flat position into ``(r, c)`` once, not per element."""
    if lanes == 1:
        return r, c
    c += 1
    if c == cols:
        return r + 1, 0
    return r, c


def unsigned_offset(offset):
    """``offset`` (never negative) as an unsigned array index. Numba adds ``len`` to a negative signed index (Python's
    wraparound), a compare and an add per access that the compiler cannot drop for a computed offset; an unsigned
    index has none. In a CPU span loop that is most of the instructions per element, and fewer instructions per
    element keep more independent cache misses in flight (a random gather is bound by their latency)."""
    return numba.uint64(offset)


def tile_offset_2d(r, c, row_stride, col_stride):
    """UB offset of ``(r, c)`` in a RowMajor ``(Cols, 1)`` or ColMajor ``(1, Rows)`` tile."""
    return r * row_stride + c * col_stride


def copy_row_segment(dst, dst_base, dst_cs, src, src_base, src_cs, c, stop, step, lanes):
    """``dst[dst_base + j * dst_cs] = src[src_base + j * src_cs]`` for the columns ``j`` of one warp's lanes
    in the lane order of the Row kernels: ``j = c + k * step + lane`` for ``lane < lanes``, ``j < stop``
    (``c`` is the first lane's column, ``lanes`` the family's ``SPAN_LANES``).

    One GPU lane (``lanes == 1``) issues its loads four (then two) ahead of their stores. The destination and
    the source never overlap (UB and GM, or two GM arrays), but the compiler cannot know that: written one
    element at a time, every store waits for its load and a lane keeps a single load in flight, which caps a
    wide-row copy well below the memory bandwidth. A CPU warp (``lanes == 32``) copies each step's 32
    columns as one contiguous run."""
    if lanes == 1:
        while c + 3 * step < stop:
            v0 = src[src_base + c * src_cs]
            v1 = src[src_base + (c + step) * src_cs]
            v2 = src[src_base + (c + 2 * step) * src_cs]
            v3 = src[src_base + (c + 3 * step) * src_cs]
            dst[dst_base + c * dst_cs] = v0
            dst[dst_base + (c + step) * dst_cs] = v1
            dst[dst_base + (c + 2 * step) * dst_cs] = v2
            dst[dst_base + (c + 3 * step) * dst_cs] = v3
            c += 4 * step
        if c + step < stop:
            v0 = src[src_base + c * src_cs]
            v1 = src[src_base + (c + step) * src_cs]
            dst[dst_base + c * dst_cs] = v0
            dst[dst_base + (c + step) * dst_cs] = v1
            c += 2 * step
        if c < stop:
            dst[dst_base + c * dst_cs] = src[src_base + c * src_cs]
    elif step == lanes and dst_cs == 1 and src_cs == 1:
        # a CPU warp that owns whole rows (kWarpsPerRow == 1): its columns are one contiguous run
        if c < stop:
            copy_run(dst, dst_base + c, src, src_base + c, stop - c)
    else:
        while c < stop:
            for j in range(c, span_end(c, lanes, stop)):
                dst[dst_base + j * dst_cs] = src[src_base + j * src_cs]
            c += step


def rows_ahead(valid_cols, itemsize):
    """How many rows ahead a CPU warp prefetches (:func:`prefetch_row_ahead`): ``ROW_PREFETCH_BYTES`` of table rows,
    each counted as at least a cache line, and at least one row. Random row reads are latency-bound: what keeps
    memory busy is the number of lines in flight, so narrow rows are prefetched further ahead than wide ones."""
    return max(1, ROW_PREFETCH_BYTES // max(valid_cols * itemsize, CACHE_LINE_BYTES))


def prefetch_row_ahead(table, idx, idx_step, gr, ahead, last_row, table_rows, valid_cols, rule, lanes):
    """On the CPU (a warp's span, ``lanes > 1``), prefetch the table row that destination row ``gr + ahead``
    (:func:`rows_ahead`) will read (one prefetch per 64-byte line): random row reads are latency-bound, and the
    hardware prefetcher cannot guess the next row. ``last_row`` is the thread's last row, not its block's: a
    block's first rows are prefetched while the block before it ends (stopping at each block's end left the first
    rows of every 256-row block to wait for memory). The index may belong to a range whose check has not run yet,
    so the slot is bounded by the table. A GPU lane does nothing."""
    if lanes > 1 and gr + ahead <= last_row:
        slot, in_range = remap_index(idx[unsigned_offset((gr + ahead) * idx_step)], table_rows, rule)
        if in_range and slot < table_rows:
            prefetch_read(table, slot * valid_cols, valid_cols)


def fill_row_segment(dst, dst_base, dst_cs, c, stop, step, lanes):
    """``dst[dst_base + j * dst_cs] = 0`` over the columns of :func:`copy_row_segment`."""
    while c < stop:
        for j in range(c, span_end(c, lanes, stop)):
            dst[dst_base + j * dst_cs] = 0
        c += step


# -- the walks --------------------------------------------------------------------------------------------------
# The A5 kernels walk their work in three ways: the Row walk (walk_rows: warps own rows, lanes walk columns), the
# Elem walk of a tile (walk_elems: threads take flat positions of the valid region) and the flat grid-stride walk
# (walk_grid: one item per thread at a time, over the whole grid). Each walk is written once; what a kernel does at
# each step is its visitor, a device helper passed as an argument with the kernel's arguments as a tuple. Numba
# inlines a helper passed so as it inlines one called by name (walks and visitors are ``inline="always"``), so each
# kernel compiles to the loop nest it would have spelled out.

def walk_rows(launch, tile_rows, row_count, row_warps, warps_per_row, visit, args, store):
    """The Row walk: block ``b`` takes rows ``[b * tile_rows, ...)`` of ``row_count``; in a block, warp ``ty`` owns
    rows ``ty % kRowWarps, + kRowWarps, ...`` and column segment ``ty // kRowWarps``, whose lanes walk columns
    ``seg * 32 + tx`` in steps of ``kWarpsPerRow * 32`` (so a warp reads or writes 32 consecutive elements of a
    row: one 128 B burst for 4-byte elements).

    For each row ``gr`` of this thread, in order, calls ``visit(args, gr, last_row, col_begin, col_step, lanes,
    store)``: ``last_row`` is the last row of the thread's last block (how far ahead a CPU warp may read indices:
    its next block's rows follow its block's), ``col_begin`` the first column of the thread's first lane
    (``lanes``: the family's ``SPAN_LANES``), ``col_step = kWarpsPerRow * 32``; ``args`` and ``store`` (a
    scatter's store rule, else None) are the kernel's, passed through. The walk goes over row groups of ``kRowWarps`` with the
    warps inside, so a CPU runs a block's warps in lock-step, as an SM interleaves them, and visits the rows in
    order."""
    lane0 = first_lane()
    lanes = SPAN_LANES
    col_step = warps_per_row * WARP
    warps = warp_range(launch)
    # The first warp's row and segment are divided out once and counted along the warps after it: a division per
    # row would stand between a CPU warp and its next row's index read. (The first warp is read by a loop:
    # numba-cuda types ``range.start`` through a device compile that needs a GPU.)
    first_warp = 0
    for ty in warps:
        first_warp = ty
        break
    first_row_warp = first_warp % row_warps
    first_segment = first_warp // row_warps
    last_row = min(launch[1] * tile_rows, row_count) - 1
    for b in block_range(launch):
        row0, rows = block_tile(b, tile_rows, row_count)
        for base in range(0, rows, row_warps):
            row_warp = first_row_warp
            segment = first_segment
            for _ in warps:
                r = base + row_warp
                if r < rows:
                    visit(args, row0 + r, last_row, segment * WARP + lane0, col_step, lanes, store)
                row_warp += 1
                if row_warp == row_warps:
                    row_warp = 0
                    segment += 1


def streams_rows(dst, dst_cs, warps_per_row):
    """Whether a CPU Row gather writes its destination rows with :func:`.intrinsics.stream_run`: a destination of
    at least ``STREAMED_RESULT_BYTES`` (larger than the caches can keep while it is written: a normal store
    first reads the line it writes, and the lines it fills evict the table rows prefetched for the next rows),
    each row one warp's contiguous run. A GPU lane (``lanes == 1``) never does."""
    lanes = SPAN_LANES
    return lanes > 1 and dst_cs == 1 and warps_per_row == 1 and dst.size * dst.itemsize >= STREAMED_RESULT_BYTES


def gather_row(args, gr, last_row, col_begin, col_step, lanes, store):
    """``simt_mgather_row_kernel``'s visitor: this warp's columns of destination row ``gr`` from table row
    ``remap(idx[gr])`` (packed ND, row stride ``validCols``), or ``T(0)`` where the rule masks the row
    (GatherOOB::Zero). ``args = (dst, dst_rs, dst_cs, idx, idx_step, table, table_rows, valid_cols, rule,
    streams, ahead)``; ``streams`` (:func:`streams_rows`): the warp owns whole rows, copied by streaming stores;
    ``ahead`` (:func:`rows_ahead`): how far ahead a CPU warp prefetches."""
    dst, dst_rs, dst_cs, idx, idx_step, table, table_rows, valid_cols, rule, streams, ahead = args
    prefetch_row_ahead(table, idx, idx_step, gr, ahead, last_row, table_rows, valid_cols, rule, lanes)
    slot, in_range = remap_index(idx[unsigned_offset(gr * idx_step)], table_rows, rule)
    if in_range:
        if streams:
            stream_run(dst, gr * dst_rs, table, slot * valid_cols, valid_cols)
        else:
            copy_row_segment(dst, gr * dst_rs, dst_cs, table, slot * valid_cols, 1, col_begin, valid_cols, col_step,
                             lanes)
    else:
        fill_row_segment(dst, gr * dst_rs, dst_cs, col_begin, valid_cols, col_step, lanes)


def scatter_row(args, gr, last_row, col_begin, col_step, lanes, store):
    """``simt_mscatter_row_kernel``'s visitor: ``table[remap(idx[gr]) * validCols + j] op= src[gr, j]`` over this
    warp's columns ``j``, each by the kernel's store rule ``store``; a masked (Skip) row issues no store.
    ``args = (table, src, src_rs, src_cs, idx, idx_step, table_rows, valid_cols, rule, words, ahead)``: with
    ``ahead`` rows (:func:`rows_ahead`; 0: none) a CPU warp first prefetches the row of ``words`` (the table's view
    indexed by element) that row ``gr + ahead`` will update (:func:`prefetch_row_ahead`): random rows are
    latency-bound, a store waits for its line as a load does."""
    table, src, src_rs, src_cs, idx, idx_step, table_rows, valid_cols, rule, words, ahead = args
    if ahead > 0:
        prefetch_row_ahead(words, idx, idx_step, gr, ahead, last_row, table_rows, valid_cols, rule, lanes)
    slot, in_range = remap_index(idx[gr * idx_step], table_rows, rule)
    if in_range:
        dst_row = slot * valid_cols
        c = col_begin
        if lanes > 1 and src_cs == 1:
            # a CPU warp's span of a dense source row: two contiguous runs, unsigned offsets, one loop the compiler
            # vectorises where the store rule is a plain read-modify-write
            src_row = gr * src_rs
            while c < valid_cols:
                for j in range(c, span_end(c, lanes, valid_cols)):
                    store(table, unsigned_offset(dst_row + j), src[unsigned_offset(src_row + j)])
                c += col_step
        else:
            while c < valid_cols:
                for j in range(c, span_end(c, lanes, valid_cols)):
                    store(table, dst_row + j, src[tile_offset_2d(gr, j, src_rs, src_cs)])
                c += col_step


def owner_row(args, slot, last_row, col_begin, col_step, lanes, store):
    """``simt_mscatter_row_owner_write_kernel``'s visitor: this warp's columns of table row ``slot`` from source
    row ``owner[slot]``, if the row has an owner (``>= 0``). ``args = (table, src, src_rs, src_cs, owner,
    valid_cols)``."""
    table, src, src_rs, src_cs, owner, valid_cols = args
    src_row = owner[slot]
    if src_row >= 0:
        copy_row_segment(table, slot * valid_cols, 1, src, src_row * src_rs, src_cs, col_begin, valid_cols, col_step,
                         lanes)


def compact_owner_row(args, k, last_row, col_begin, col_step, lanes, store):
    """``simt_mscatter_row_compact_owner_write_kernel``'s visitor: as :func:`owner_row` for distinct slot ``k``,
    table row ``slots[k]``. ``args = (table, src, src_rs, src_cs, owner, slots, valid_cols)``."""
    table, src, src_rs, src_cs, owner, slots, valid_cols = args
    src_row = owner[k]
    if src_row >= 0:
        copy_row_segment(table, slots[k] * valid_cols, 1, src, src_row * src_rs, src_cs, col_begin, valid_cols,
                         col_step, lanes)


def walk_elems(launch, tile_rows, valid_rows, valid_cols, visit, args, store):
    """The Elem walk of a tile: block ``b`` takes rows ``[b * tile_rows, ...)`` of the ``valid_rows x valid_cols``
    region; thread ``tid = ty * 32 + tx`` walks its flat positions ``tid, tid + launchThreads, ...`` (warps in
    lock-step; ``tid >= total`` idles), a warp's lanes taking consecutive positions.

    For each span of this thread (one position on CUDA, a warp's 32 on the CPU), in order, calls ``visit(args, row0,
    base, p, end, total, lanes, store)``: flat positions ``[p, end)`` of the block's ``total``, whose first row is
    ``row0`` and first flat position in the whole region ``base``; ``args`` and ``store`` as for :func:`walk_rows`.
    A CPU thread running a gather (``store`` None) visits each block as one span: the same positions in the same
    order."""
    lane0 = first_lane()
    lanes = SPAN_LANES
    threads = launch[3] * WARP
    # a gather on the CPU: the warps' spans of a block follow each other (warp ty, step s: positions from s + 32 ty),
    # so the thread that runs them all in order runs the block as one span, one loop without the walk between spans
    # (a scatter keeps warp spans: its visitor prefetches the next span's targets). One call site: the visitor is
    # inlined once
    whole = lanes > 1 and store is None
    for b in block_range(launch):
        row0, tile_valid_rows = block_tile(b, tile_rows, valid_rows)
        total = tile_valid_rows * valid_cols
        base = row0 * valid_cols
        for step in range(0, total, max(total, 1) if whole else threads):
            for ty in warp_range(launch):
                p = step + ty * WARP + lane0
                if p < total:
                    visit(args, row0, base, p, total if whole else span_end(p, lanes, total), total, lanes, store)
                if whole:
                    break


def plain_elements(table, halves):
    """The table a plain-store kernel indexes: a 16-bit float table's uint32 words (the atomic kernels' unit, a
    compare-and-swap's) as its uint16 elements where ``halves`` (a compile-time constant of the kernel: one branch is
    typed), so that each element is loaded and stored alone and a run of adds vectorises; any other as it is."""
    if halves:
        return table.view(np.uint16)
    return table


def serial_prefetch_ahead(table_bytes):
    """How many positions ahead the serial Elem walk prefetches a read-modify-write's target in a table of
    ``table_bytes`` (:func:`walk_elems_serial`): a random update waits for its line, and a table the caches hold
    answers sooner than one they do not, so a small table is prefetched closer to its use."""
    return SERIAL_PREFETCH_AHEAD_NEAR if table_bytes <= SERIAL_PREFETCH_NEAR_BYTES else SERIAL_PREFETCH_AHEAD


def walk_elems_serial(launch, tile_rows, valid_rows, valid_cols, args, store):
    """The Elem scatter of blocks ``[launch[0], launch[1])`` by one CPU thread (``simt_mscatter_elem_serial_kernel``):
    the positions of :func:`walk_elems` in source order (block by block, row-major: the order one thread visits them
    there), ``table[remap(idx)] op= src`` at each by the store rule ``store``; with ``ahead`` > 0 (a read-modify-write,
    which waits for its load; a plain store does not: :func:`serial_prefetch_ahead`) the destination ``ahead``
    positions on is prefetched first (dense tiles). ``args`` as for :func:`scatter_elems`, less its ``shift``, with
    ``ahead`` for its ``lanes``: a plain-store kernel indexes ``words`` by element (:func:`plain_elements`)."""
    table, src, src_rs, src_cs, idx, idx_rs, idx_cs, table_size, valid_cols, dense, rule, ahead, words = args
    row0 = launch[0] * tile_rows
    first, stop = row0 * valid_cols, min(launch[1] * tile_rows, valid_rows) * valid_cols
    if dense:
        for q in range(first, stop):
            later = q + ahead
            if ahead > 0 and later < stop:
                slot, in_range = remap_index(idx[unsigned_offset(later * idx_cs)], table_size, rule)
                if in_range:
                    prefetch(words, slot)
            slot, in_range = remap_index(idx[unsigned_offset(q * idx_cs)], table_size, rule)
            if in_range:
                store(table, unsigned_offset(slot), src[unsigned_offset(q * src_cs)])
        return
    r, c = row0, 0
    for _ in range(first, stop):
        slot, in_range = remap_index(idx[tile_offset_2d(r, c, idx_rs, idx_cs)], table_size, rule)
        if in_range:
            store(table, unsigned_offset(slot), src[tile_offset_2d(r, c, src_rs, src_cs)])
        c += 1
        if c == valid_cols:
            r, c = r + 1, 0


def gather_elems(args, row0, base, p, end, total, lanes, store):
    """``simt_mgather_elem_kernel``'s visitor: ``dst[i, j] = table[remap(idx[i, j])]`` over one span. A CPU span of
    dense tiles with unit column strides runs as one affine loop over flat positions (unsigned offsets,
    :func:`unsigned_offset`); otherwise it divides ``(r, c)`` out once and walks from there (both tiles through
    ``tile_offset_2d``: RowMajor or ColMajor). ``args = (dst, dst_rs, dst_cs, idx, idx_rs, idx_cs, table,
    table_size, valid_cols, dense, rule)``, ``dense`` both tiles :func:`dense_tile` with column stride 1."""
    dst, dst_rs, dst_cs, idx, idx_rs, idx_cs, table, table_size, valid_cols, dense, rule = args
    if lanes > 1 and dense:
        # flat positions are the offsets: indexed ``q * dst_cs`` with the stride a run-time 1, each access became a
        # pointer of its own stepped by a register, and the loop ran 1.5x slower (docs/performance.md)
        for q in range(base + p, base + end):
            gather_element(dst, unsigned_offset(q), idx[unsigned_offset(q)], table, table_size, rule)
    else:
        r = row0 + p // valid_cols
        c = p % valid_cols
        for _ in range(p, end):
            gather_element(dst, tile_offset_2d(r, c, dst_rs, dst_cs), idx[tile_offset_2d(r, c, idx_rs, idx_cs)], table,
                           table_size, rule)
            r, c = next_position(r, c, valid_cols, lanes)


def scatter_elems(args, row0, base, p, end, total, lanes, store):
    """``simt_mscatter_elem_kernel``'s visitor: ``table[remap(idx[i, j])] op= src[i, j]`` over one span, each by
    the store rule ``store``. With ``prefetches`` (an atomic) and a CPU span, the next span's destination words
    (``words[slot >> shift]``) are prefetched first: a locked read-modify-write waits for its own cache miss, a
    prefetch does not. ``args = (table, src, src_rs, src_cs, idx, idx_rs, idx_cs, table_size, valid_cols, dense,
    rule, prefetches, words, shift)``."""
    (table, src, src_rs, src_cs, idx, idx_rs, idx_cs, table_size, valid_cols, dense, rule, prefetches, words,
     shift) = args
    dense = lanes > 1 and dense
    if prefetches and lanes > 1 and end < total:
        r = row0 + end // valid_cols
        c = end % valid_cols
        for q in range(base + end, base + span_end(end, lanes, total)):
            slot, in_range = remap_index(idx[region_offset(q, r, c, idx_rs, idx_cs, dense)], table_size, rule)
            if in_range:
                prefetch(words, slot >> shift)
            r, c = next_position(r, c, valid_cols, lanes)
    r = row0 + p // valid_cols
    c = p % valid_cols
    for q in range(base + p, base + end):
        slot, in_range = remap_index(idx[region_offset(q, r, c, idx_rs, idx_cs, dense)], table_size, rule)
        if in_range:
            store(table, slot, src[region_offset(q, r, c, src_rs, src_cs, dense)])
        r, c = next_position(r, c, valid_cols, lanes)


def walk_grid(launch, count, visit, args):
    """The flat grid-stride walk over ``count`` items: thread ``g = b * threads + ty * 32 + lane0`` takes items
    ``g, g + grid threads, ...`` (:func:`grid_stride`; a CPU warp its 32 lanes' items as one span). Calls
    ``visit(args, item)`` for each, in order."""
    lane0 = first_lane()
    lanes = SPAN_LANES
    for b in block_range(launch):
        for ty in warp_range(launch):
            first, step = grid_stride(launch, b, ty, lane0)
            while first < count:
                for item in range(first, span_end(first, lanes, count)):
                    visit(args, item)
                first += step


def walk_block_share(launch, b, count, visit, args):
    """Block ``b``'s contiguous share of ``count`` items, ``[b * count // grid, (b + 1) * count // grid)``: its
    thread ``t = ty * 32 + lane0`` takes items ``lo + t, lo + t + threads, ...`` (a CPU warp its 32 lanes' items as
    one span, so that a CPU block of one warp walks its share in order). For a kernel whose blocks differ in what
    they visit: it walks its blocks itself."""
    lane0 = first_lane()
    lanes = SPAN_LANES
    lo = b * count // launch[2]
    hi = (b + 1) * count // launch[2]
    threads = launch[3] * WARP
    for ty in warp_range(launch):
        first = lo + ty * WARP + lane0
        while first < hi:
            for item in range(first, span_end(first, lanes, hi)):
                visit(args, item)
            first += threads


def reset_owner(args, s):
    """``simt_mscatter_owner_reset_kernel``'s visitor: slot ``s`` has no writer. ``args = (owner,)``. The offset is
    unsigned (:func:`unsigned_offset`), so that a CPU span is one vectorised fill."""
    owner, = args
    owner[unsigned_offset(s)] = -1


def claim_row_owner(args, item):
    """``simt_mscatter_row_owner_claim_kernel``'s visitor: ``owner[remap(idx[r])] = max(..., r)`` for source row ``r =
    valid_rows - 1 - item``: the rows from the last down, so that most claims find a larger owner there and stay
    plain reads (:func:`claim_elem_owner`). ``args = (owner, idx, idx_step, table_rows, valid_rows, rule)``."""
    owner, idx, idx_step, table_rows, valid_rows, rule = args
    r = valid_rows - 1 - item
    slot, in_range = remap_index(idx[unsigned_offset(r * idx_step)], table_rows, rule)
    if in_range:
        atomic_max(owner, slot, r)


def claim_compact_owner(args, item):
    """``simt_mscatter_compact_owner_claim_kernel``'s visitor: ``owner[ids[p]] = max(..., p)`` unless ``ids[p] < 0``,
    for the flat source position ``p = updates - 1 - item`` (from the last down, as :func:`claim_row_owner`).
    ``args = (owner, ids, updates)``."""
    owner, ids, updates = args
    p = updates - 1 - item
    k = ids[unsigned_offset(p)]
    if k >= 0:
        atomic_max(owner, k, p)


def source_element(src, src_rs, src_cs, valid_cols, p):
    """``src[p // validCols, p % validCols]``, the source element at flat position ``p`` of a ``validCols``-wide tile
    (a dense tile, the whole-array call's source, with no division)."""
    if dense_tile(src_rs, src_cs, valid_cols):
        at = p * src_cs
    else:
        at = tile_offset_2d(p // valid_cols, p % valid_cols, src_rs, src_cs)
    return src[unsigned_offset(at)]


def elem_owner_slot(idx, idx_rs, idx_cs, table_size, valid_cols, contiguous, rule, p):
    """``(slot, in_range)``: the remapped index of flat source position ``p`` (:func:`claim_elem_owner`)."""
    if contiguous:
        raw = idx[unsigned_offset(p)]
    else:
        raw = idx[unsigned_offset(tile_offset_2d(p // valid_cols, p % valid_cols, idx_rs, idx_cs))]
    return remap_index(raw, table_size, rule)


def claim_elem_owner(args, item):
    """``simt_mscatter_elem_owner_claim_kernel``'s visitor: ``owner[remap(idx[p])] = max(..., p)`` for the flat source
    position ``p = total - 1 - item``. The walk visits positions in falling order, so the first claim of a slot is
    usually its largest: on the CPU the rest find a larger owner already there and stay plain reads (``atomic_max``
    reads first), not locked read-modify-writes. Contiguous index tiles (the whole-array call's) are addressed by
    ``p`` alone; a CPU worker with a large owner array (``prefetches``) prefetches the owner it claims
    :data:`~simt_pto.kernels.tuning.CLAIM_PREFETCH_AHEAD` positions later (random reads wait for their misses; a
    locked one stalls the worker). ``alone``: nothing else claims meanwhile (a CPU launch of one block runs on one
    thread), so the max is a plain read and store. ``args = (owner, idx, idx_rs, idx_cs, table_size, valid_cols,
    total, contiguous, prefetches, alone, rule)``, the three flags loop-invariant."""
    owner, idx, idx_rs, idx_cs, table_size, valid_cols, total, contiguous, prefetches, alone, rule = args
    p = total - 1 - item
    lanes = SPAN_LANES
    if lanes > 1 and contiguous and prefetches and p >= CLAIM_PREFETCH_AHEAD:
        ahead, ahead_in_range = remap_index(idx[unsigned_offset(p - CLAIM_PREFETCH_AHEAD)], table_size, rule)
        if ahead_in_range:
            prefetch(owner, ahead)
    slot, in_range = elem_owner_slot(idx, idx_rs, idx_cs, table_size, valid_cols, contiguous, rule, p)
    if in_range:
        if alone:
            if p > owner[unsigned_offset(slot)]:
                owner[unsigned_offset(slot)] = p
        else:
            atomic_max(owner, slot, p)


def claim_private_elem_owner(args, item):
    """``simt_mscatter_elem_private_owner_claim_kernel``'s visitor: :func:`claim_elem_owner` into a block's own copy
    of the owners. On the CPU (one thread per block) the max is a plain read and an unconditional store: a branch on
    it is mispredicted for every slot's first claim; on CUDA it is the atomic. The claim checks the index range
    itself: a slot past the table (only under the rule that leaves out-of-range indices undefined, whose remap
    passes every index) is not claimed, and sets the block's ``refused[0]``, so that the caller refuses the call
    before its write. ``args = (owner, refused, idx, idx_rs, idx_cs, table_size, valid_cols, total, contiguous,
    rule)``."""
    owner, refused, idx, idx_rs, idx_cs, table_size, valid_cols, total, contiguous, rule = args
    p = total - 1 - item
    lanes = SPAN_LANES
    slot, in_range = elem_owner_slot(idx, idx_rs, idx_cs, table_size, valid_cols, contiguous, rule, p)
    if in_range:
        if slot >= table_size:
            refused[0] = 1
        elif lanes > 1:
            owner[unsigned_offset(slot)] = max(owner[unsigned_offset(slot)], p)
        else:
            atomic_max(owner, slot, p)


def write_elem_owner(args, s):
    """``simt_mscatter_elem_owner_write_kernel``'s visitor: slot ``s`` takes ``src[p // validCols, p % validCols]`` for
    its owner ``p`` (a flat source position, :func:`claim_elem_owner`), if it has one (``>= 0``). ``args = (table,
    src, src_rs, src_cs, owner, valid_cols)``."""
    table, src, src_rs, src_cs, owner, valid_cols = args
    p = owner[unsigned_offset(s)]
    if p >= 0:
        table[unsigned_offset(s)] = source_element(src, src_rs, src_cs, valid_cols, p)


def write_private_elem_owner(args, s):
    """``simt_mscatter_elem_private_owner_write_kernel``'s visitor: :func:`write_elem_owner` with the owners in
    ``copies`` of ``table_size`` (one per block of the claim); slot ``s``'s owner is the largest of its copies.
    ``args = (table, src, src_rs, src_cs, owner, table_size, copies, valid_cols)``."""
    table, src, src_rs, src_cs, owner, table_size, copies, valid_cols = args
    p = owner[unsigned_offset(s)]
    for c in range(1, copies):
        q = owner[unsigned_offset(c * table_size + s)]
        if q > p:
            p = q
    if p >= 0:
        table[unsigned_offset(s)] = source_element(src, src_rs, src_cs, valid_cols, p)


def write_compact_elem_owner(args, k):
    """``simt_mscatter_elem_compact_owner_write_kernel``'s visitor: table element ``slots[k]`` takes ``src[p // validCols,
    p % validCols]`` for the owner ``p = owner[k]`` of distinct slot ``k`` (a flat source position), if it has one
    (``>= 0``). ``args = (table, src, src_rs, src_cs, owner, slots, valid_cols)``."""
    table, src, src_rs, src_cs, owner, slots, valid_cols = args
    p = owner[k]
    if p >= 0:
        table[slots[k]] = source_element(src, src_rs, src_cs, valid_cols, p)


def last_row(args, slot):
    """``simt_mscatter_row_last_kernel``'s visitor: table row ``slot`` takes source row ``r``, the largest with
    ``remap(idx[r]) == slot`` (a reverse scan that stops at the first hit), if any. ``args = (table, src, src_rs,
    src_cs, idx, idx_step, table_rows, valid_rows, valid_cols, rule)``."""
    table, src, src_rs, src_cs, idx, idx_step, table_rows, valid_rows, valid_cols, rule = args
    owner = valid_rows - 1
    while owner >= 0:
        s, in_range = remap_index(idx[owner * idx_step], table_rows, rule)
        if in_range and s == slot:
            break
        owner -= 1
    if owner >= 0:
        dst_row = slot * valid_cols
        for c in range(valid_cols):
            table[dst_row + c] = src[tile_offset_2d(owner, c, src_rs, src_cs)]


def last_elem(args, slot):
    """``simt_mscatter_elem_last_kernel``'s visitor: ``table[slot]`` takes ``src[r, c]`` of the largest flat ``p = r *
    validCols + c`` with ``remap(idx[r, c]) == slot`` (a reverse scan that stops at the first hit), if any.
    ``args = (table, src, src_rs, src_cs, idx, idx_rs, idx_cs, table_size, valid_cols, total, rule)``."""
    table, src, src_rs, src_cs, idx, idx_rs, idx_cs, table_size, valid_cols, total, rule = args
    p = total - 1
    while p >= 0:
        r = p // valid_cols
        c = p % valid_cols
        s, in_range = remap_index(idx[tile_offset_2d(r, c, idx_rs, idx_cs)], table_size, rule)
        if in_range and s == slot:
            table[slot] = src[tile_offset_2d(r, c, src_rs, src_cs)]
            break
        p -= 1


def half_sum(word, shift, v_bits, exp_bits, man_bits):
    """``word`` (an int64 holding a 32-bit word) with its 16-bit half at ``shift`` += ``v``, rounded in the element
    type (round-to-nearest-even); the other half as it was."""
    res = add_bits((word >> shift) & 0xFFFF, numba.int64(v_bits), exp_bits, man_bits)
    return (word & ~(numba.int64(0xFFFF) << shift)) | (res << shift)


def cas_add_half(words, w, shift, v_bits, exp_bits, man_bits):
    """``words[w]``'s 16-bit half at ``shift`` += ``v``, rounded in the element type (round-to-nearest-even), as a
    compare-and-swap loop on the 32-bit word."""
    old = numba.int64(words[w])
    while True:
        new = half_sum(old, shift, v_bits, exp_bits, man_bits)
        prev = numba.int64(atomic_cas(words, w, numba.uint32(old), numba.uint32(new)))
        if prev == old:
            return
        old = prev


def atomic_add_half(words, e, v_bits, exp_bits, man_bits):
    """``table[e] += v`` for a 16-bit float (``exp_bits`` / ``man_bits`` fields) held in a uint32 view of
    the table, rounded in the element type (round-to-nearest-even), as a compare-and-swap loop on the
    aligned 32-bit word (:func:`cas_add_half`). The format is passed as field widths so one adder is inlined,
    not two. For a table that starts on a 4-byte boundary and holds an even number of elements (formats F16 /
    BF16); otherwise :func:`atomic_add_half_edge`."""
    cas_add_half(words, e >> 1, (e & 1) * 16, v_bits, exp_bits, man_bits)


def atomic_add_half_edge(table, e, v_bits, exp_bits, man_bits):
    """:func:`atomic_add_half` for a table that starts or ends mid-word (formats F16_EDGE / BF16_EDGE).

    ``table`` is ``(words, edge, head)`` (``host/a5.BoundaryWords``): bit 0 of ``head`` is set when element 0 is
    the high half of its word, bit 1 when that first word is staged (``words`` then starts one word later).
    Element ``e`` is half ``(e + (head & 1)) & 1`` of word ``((e + (head & 1)) >> 1) - (head >> 1)`` of
    ``words``; a word past either end of ``words`` (one the tensor covers only in part and whose other half lies
    outside its allocation) is ``edge[0]`` / ``edge[1]``, a staging copy, so that no CAS touches a byte outside
    the allocation. The CAS runs on the word's array chosen here, so the compiler sees a generic pointer
    (``atom.cas``, not ``atom.global.cas``): one adder inlined, and the common formats keep theirs."""
    words, edge, head = table
    p = e + (head & 1)
    w = (p >> 1) - (head >> 1)
    cell = words
    if w < 0:
        cell = edge
        w = 0
    elif w >= words.size:
        cell = edge
        w = 1
    cas_add_half(cell, w, (p & 1) * 16, v_bits, exp_bits, man_bits)


def gather_element(dst, dst_offset, raw_index, table, table_size, rule):
    """One Elem gather element: ``dst[dst_offset] = table[remap(raw_index)]``, or ``T(0)`` when the remap
    masks it (GatherOOB::Zero)."""
    slot, in_range = remap_index(raw_index, table_size, rule)
    if in_range:
        dst[dst_offset] = table[slot]
    else:
        dst[dst_offset] = 0


def dense_tile(row_stride, col_stride, cols):
    """True when a tile's valid region is one dense run (``row_stride == cols * col_stride``): flat position
    ``q`` of the region is then at offset ``q * col_stride``, so a CPU span walks it as an affine loop the
    compiler vectorises."""
    return row_stride == cols * col_stride


def region_offset(flat, r, c, row_stride, col_stride, dense):
    """Offset of the region position ``(r, c)`` (flat index ``flat``) in a tile: ``flat * col_stride`` for a
    dense tile (:func:`dense_tile`, CPU spans only), else ``tile_offset_2d``. ``dense`` is loop-invariant, so
    the compiler splits a span loop into a dense (affine, vectorisable) and a walking copy. Unsigned
    (:func:`unsigned_offset`): no wraparound test per access."""
    if dense:
        return unsigned_offset(flat * col_stride)
    return unsigned_offset(r * row_stride + c * col_stride)


HELPERS = (block_tile, grid_stride, span_end, next_position, unsigned_offset, tile_offset_2d, dense_tile, region_offset,
           copy_row_segment, fill_row_segment, rows_ahead, prefetch_row_ahead, gather_element, streams_rows,
           walk_rows, gather_row, scatter_row, owner_row, compact_owner_row,
           walk_elems, plain_elements, serial_prefetch_ahead, walk_elems_serial, gather_elems, scatter_elems,
           walk_grid, walk_block_share, reset_owner, claim_row_owner, claim_compact_owner, source_element,
           elem_owner_slot, claim_elem_owner, claim_private_elem_owner,
           write_elem_owner, write_private_elem_owner, write_compact_elem_owner,
           last_row, last_elem,
           half_sum, cas_add_half, atomic_add_half, atomic_add_half_edge)
"""Bound per backend by :mod:`.simt`, in this order (a helper may call the ones before it)."""
