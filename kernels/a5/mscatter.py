"""MSCATTER on A5: the SIMT kernels of MSCATTER.md ("A5 Form", "Conflict Resolution",
"Performance Considerations — A5").

* ``simt_mscatter_row_kernel`` / ``simt_mscatter_elem_kernel``: the source-centric walks of the
  gather kernels, storing with a plain racing store (Conflict::Default) or a hardware atomic.
* ``simt_mscatter_row_last_kernel`` / ``simt_mscatter_elem_last_kernel``: Conflict::Last, sized by
  the destination. Each thread owns one destination slot at a time and scans the index tile in
  reverse for the largest flat source index that writes it (after the OOB remap; masked writers
  never win), stopping at the first hit. No atomics, no read-back: deterministic by construction,
  and every slot has exactly one writer, so a launch may spread slots over several blocks.

Factories take the index rule, the ScatterAtomicOp value and the element format
(:mod:`simt_pto.kernels.store`) as compile-time constants and return the kernel as plain Python over the intrinsics of
:mod:`.intrinsics` (compiled per backend by :mod:`.simt`). ``launch`` is ``(block_lo, block_hi, grid,
kLaunchWarps)``; a warp's lanes run as one span of ``SPAN_LANES`` lanes (one on CUDA, 32 on the CPU).
"""
from __future__ import annotations

import functools

from simt_pto.enums import ElementFormat, IndexRule, ScatterAtomicOp
from simt_pto.kernels.store import store_element
from simt_pto.kernels.tuning import CLAIM_PREFETCH_MIN_SLOTS
from .device import (claim_compact_owner, claim_elem_owner, claim_private_elem_owner,
                     claim_row_owner, compact_owner_row, dense_tile, last_elem, last_row, owner_row, plain_elements,
                     reset_owner, rows_ahead, scatter_elems, scatter_row, serial_prefetch_ahead, walk_block_share,
                     walk_elems, walk_elems_serial, walk_grid, walk_rows,
                     write_compact_elem_owner, write_elem_owner, write_private_elem_owner)
from .intrinsics import SPAN_LANES, block_range


@functools.cache
def simt_mscatter_row_kernel(rule: IndexRule, atomic: ScatterAtomicOp, fmt: ElementFormat):
    """Row coalesce, ``table[remap(idx[r]), :] op= src[r, :]``; the Row walk of ``simt_mgather_row_kernel``
    (:func:`.device.walk_rows`, :func:`.device.scatter_row`). Masked (Skip) rows issue no store; the predicate is
    per row, so it is warp-uniform.

    With atomic NONE on one thread (the ``multicore`` backend's calling thread) the walk visits the rows in source
    order, so a later row overwrites an earlier one: the whole-array Row Conflict::Last's serial loop
    (``host/a5_planner.takes_serial_row_last``).

    On the CPU a warp prefetches the table row a later row will update (:func:`.device.scatter_row`), where the
    table's view is indexed by element (not the uint32 words of a 16-bit float table)."""
    tuple_table, prefetches = _row_prefetch_view(fmt)

    def simt_mscatter_row_kernel(launch, table, src, src_rs, src_cs, idx, idx_step, table_rows,
                                 valid_rows, valid_cols, tile_rows, row_warps, warps_per_row):
        words = table[0] if tuple_table else table  # (a compile-time choice)
        ahead = rows_ahead(valid_cols, words.itemsize) if prefetches else 0
        walk_rows(launch, tile_rows, valid_rows, row_warps, warps_per_row, scatter_row,
                  (table, src, src_rs, src_cs, idx, idx_step, table_rows, valid_cols, rule, words, ahead), store_element)

    return simt_mscatter_row_kernel


def _row_prefetch_view(fmt: ElementFormat) -> tuple[bool, bool]:
    """``(tuple_table, prefetches)`` of a Row scatter kernel of element format ``fmt``: whether its table is a tuple
    whose first array is the one to prefetch in (the (int32, uint32) pair of a float32 Max / Min; the (words, edge,
    head) of a mid-word 16-bit float Add), and whether a CPU warp prefetches rows ahead (the views indexed by element:
    the native one and the pair's)."""
    word_pair = fmt == ElementFormat.F32_ORDER
    return word_pair or fmt in (ElementFormat.F16_EDGE, ElementFormat.BF16_EDGE), word_pair or fmt == ElementFormat.NATIVE


@functools.cache
def simt_mscatter_elem_kernel(rule: IndexRule, atomic: ScatterAtomicOp, fmt: ElementFormat):
    """Elem coalesce, ``table[remap(idx[i, j])] op= src[i, j]``; the Elem walk of ``simt_mgather_elem_kernel``
    (:func:`.device.walk_elems`, :func:`.device.scatter_elems`).

    With an atomic and a span of lanes (the CPU), the next span's destination slots are prefetched while this
    span's atomics run: a locked read-modify-write waits for its own cache miss, a prefetch does not."""

    # compile-time facts of the policy (the ISA's ``if constexpr``): Numba prunes the branch they rule out (only
    # a tuple table has a words array at [0])
    prefetches = atomic != ScatterAtomicOp.NONE
    word_pair = fmt == ElementFormat.F32_ORDER                                   # (int32, uint32) views
    edge_words = fmt == ElementFormat.F16_EDGE or fmt == ElementFormat.BF16_EDGE  # (words, edge, head)
    shift = 1 if fmt in (ElementFormat.F16, ElementFormat.BF16) or edge_words else 0  # two elements a uint32 word

    def simt_mscatter_elem_kernel(launch, table, src, src_rs, src_cs, idx, idx_rs, idx_cs, table_size,
                                  valid_rows, valid_cols, tile_rows):
        dense = dense_tile(src_rs, src_cs, valid_cols) and dense_tile(idx_rs, idx_cs, valid_cols)
        if word_pair or edge_words:   # prefetch hints go to the words array: (int32, uint32) or (words, edge, head)
            words = table[0]
        else:
            words = table
        walk_elems(launch, tile_rows, valid_rows, valid_cols, scatter_elems,
                   (table, src, src_rs, src_cs, idx, idx_rs, idx_cs, table_size, valid_cols, dense, rule, prefetches,
                    words, shift), store_element)

    return simt_mscatter_elem_kernel


PLAIN_STORE_KERNELS = frozenset({"simt_mscatter_elem_serial_kernel", "simt_mscatter_row_serial_kernel"})
"""The kernels of the ``multicore`` backend alone, each run by one thread in source order: their store rule is bound
to plain loads and stores (:mod:`.simt`), and no CUDA form exists. They view a 16-bit float table as its uint16
elements (:func:`.device.plain_elements`), and add on them with :func:`.intrinsics.cpu_plain_add_half`, which a loop
vectorises."""


@functools.cache
def simt_mscatter_elem_serial_kernel(rule: IndexRule, atomic: ScatterAtomicOp, fmt: ElementFormat):
    """The Elem scatter as one thread's serial loop, what the ``multicore`` backend runs on the calling thread over
    the whole grid: the positions of ``simt_mscatter_elem_kernel`` in source order (block by block, row-major:
    :func:`.device.walk_elems_serial`), each ``table[remap(idx)] op= src`` by the store rule with plain loads and
    stores (:data:`PLAIN_STORE_KERNELS`), the same bits per element as the atomic's.

    * With an atomic op it is the atomic kernel's plain form, run only while no other launch writes memory its
      table shares (``LaunchSpec.multicore_plain_kernel``, :mod:`simt_pto.kernels.writers`): x86 runs a locked instruction only once the
      loads before it are done, so each atomic waits for its own cache miss; plain adds overlap theirs (measured in
      ``HostTuning.plain_add_max_updates``, ``plain_half_add_max_updates`` and ``plain_rmw_max_updates`` in
      ``host/tuning.py``).
    * With atomic NONE it is Conflict::Last's serial loop itself (a later position overwrites an earlier one), the
      whole-array Elem Last of a few million updates or into a table of a few MB (``host/a5_planner.takes_serial_last``); its stores
      compose with other writers as the owner path's do.

    A 16-bit float Add on a table that starts or ends mid-word has no such form: its boundary words hold bytes
    outside the table."""
    if fmt in (ElementFormat.F16_EDGE, ElementFormat.BF16_EDGE):
        raise ValueError(f"simt_mscatter_elem_serial_kernel: no plain form for the mid-word format {fmt.name}")
    prefetches = atomic != ScatterAtomicOp.NONE                                  # a read-modify-write waits for its load
    word_pair = fmt == ElementFormat.F32_ORDER                                   # (int32, uint32) views
    halves = fmt in (ElementFormat.F16, ElementFormat.BF16)                      # uint16 elements of uint32 words

    def simt_mscatter_elem_serial_kernel(launch, table, src, src_rs, src_cs, idx, idx_rs, idx_cs, table_size,
                                        valid_rows, valid_cols, tile_rows):
        dense = dense_tile(src_rs, src_cs, valid_cols) and dense_tile(idx_rs, idx_cs, valid_cols)
        elements = plain_elements(table, halves)
        if word_pair:   # prefetch hints go to the words array
            words = elements[0]
        else:
            words = elements
        ahead = serial_prefetch_ahead(table_size * words.itemsize) if prefetches else 0
        walk_elems_serial(launch, tile_rows, valid_rows, valid_cols,
                         (elements, src, src_rs, src_cs, idx, idx_rs, idx_cs, table_size, valid_cols, dense, rule,
                          ahead, words), store_element)

    return simt_mscatter_elem_serial_kernel


@functools.cache
def simt_mscatter_row_serial_kernel(rule: IndexRule, atomic: ScatterAtomicOp, fmt: ElementFormat):
    """The Row scatter with an atomic op as one thread's serial loop, the plain form of ``simt_mscatter_row_kernel``
    (``LaunchSpec.multicore_plain_kernel``): the same Row walk on the calling thread over the whole grid, so the rows
    come in source order, each element ``table[remap(idx[r]) * validCols + j] op= src[r, j]`` by the store rule with
    plain loads and stores (:data:`PLAIN_STORE_KERNELS`), the same bits per element as the atomic's. It runs only
    while no other launch writes memory its table shares (:mod:`simt_pto.kernels.writers`): x86 has no float atomic
    add, so each atomic element is a compare-and-swap loop, where a plain element is a load, an add and a store
    (measured in ``HostTuning.plain_row_add_max_updates``, ``host/tuning.py``).

    A 16-bit float Add on a table that starts or ends mid-word has no such form: its boundary words hold bytes
    outside the table."""
    if fmt in (ElementFormat.F16_EDGE, ElementFormat.BF16_EDGE):
        raise ValueError(f"simt_mscatter_row_serial_kernel: no plain form for the mid-word format {fmt.name}")
    tuple_table, prefetches = _row_prefetch_view(fmt)
    halves = fmt in (ElementFormat.F16, ElementFormat.BF16)  # uint16 elements of uint32 words: a row's adds vectorise

    def simt_mscatter_row_serial_kernel(launch, table, src, src_rs, src_cs, idx, idx_step, table_rows,
                                        valid_rows, valid_cols, tile_rows, row_warps, warps_per_row):
        elements = plain_elements(table, halves)
        words = elements[0] if tuple_table else elements
        ahead = rows_ahead(valid_cols, words.itemsize) if prefetches or halves else 0
        walk_rows(launch, tile_rows, valid_rows, row_warps, warps_per_row, scatter_row,
                  (elements, src, src_rs, src_cs, idx, idx_step, table_rows, valid_cols, rule, words, ahead),
                  store_element)

    return simt_mscatter_row_serial_kernel


@functools.cache
def simt_mscatter_row_last_kernel(rule: IndexRule):
    """Row, Conflict::Last (``last_owner_find_row``): the thread owning table row ``slot`` finds the
    largest ``r`` with ``remap(idx[r]) == slot`` and copies ``src[r, :]`` into it."""

    def simt_mscatter_row_last_kernel(launch, table, src, src_rs, src_cs, idx, idx_step, table_rows,
                                      valid_rows, valid_cols):
        walk_grid(launch, table_rows, last_row,
                  (table, src, src_rs, src_cs, idx, idx_step, table_rows, valid_rows, valid_cols, rule))

    return simt_mscatter_row_last_kernel


@functools.cache
def simt_mscatter_elem_last_kernel(rule: IndexRule):
    """Elem, Conflict::Last (``last_owner_find_elem``): the thread owning flat slot ``slot`` finds the
    largest flat ``p = r * validCols + c`` with ``remap(idx[r, c]) == slot`` and stores ``src[r, c]``."""

    def simt_mscatter_elem_last_kernel(launch, table, src, src_rs, src_cs, idx, idx_rs, idx_cs, table_size,
                                       valid_rows, valid_cols):
        walk_grid(launch, table_size, last_elem,
                  (table, src, src_rs, src_cs, idx, idx_rs, idx_cs, table_size, valid_cols, valid_rows * valid_cols, rule))

    return simt_mscatter_elem_last_kernel


# -- Conflict::Last at scale: the owner-based path (host/a5_planner.py)
# Pass 0 marks every destination slot unowned (-1) on the device; pass 1 claims each slot for the largest
# flat source index that writes it (an atomic max, after the OOB remap); pass 2 walks the destination and
# writes each owned slot from its owner. Bitwise identical to the slot-centric kernels and to the
# sequential order, in O(sources + slots) work, with no host round trip. The reset and claim passes run
# on a flat grid-stride walk: thread ``g = b * threads + ty * 32 + tx`` takes items ``g, g + grid threads, ...``.
# The claims visit the sources from the last down (item ``i`` is source ``n - 1 - i``): a slot's first claim is
# then usually its winner, and on the CPU the later ones find a larger owner and stay plain reads. An owner is a
# source position (Elem: flat), 4 bytes while the positions fit: the claim reads the indices alone, and the write
# reads each winner's value from the source.

@functools.cache
def simt_mscatter_owner_reset_kernel():
    """``owner[:] = -1`` (no writer), on the device before a claim pass (a flat grid)."""

    def simt_mscatter_owner_reset_kernel(launch, owner):
        walk_grid(launch, owner.size, reset_owner, (owner,))

    return simt_mscatter_owner_reset_kernel


@functools.cache
def simt_mscatter_row_owner_claim_kernel(rule: IndexRule):
    """Row: ``owner[remap(idx[r])] = max(owner[...], r)`` over all source rows (a flat grid, from the last row down;
    :func:`.device.claim_row_owner`)."""

    def simt_mscatter_row_owner_claim_kernel(launch, owner, idx, idx_step, table_rows, valid_rows):
        walk_grid(launch, valid_rows, claim_row_owner, (owner, idx, idx_step, table_rows, valid_rows, rule))

    return simt_mscatter_row_owner_claim_kernel


@functools.cache
def simt_mscatter_row_owner_write_kernel():
    """Row: every owned table row takes source row ``owner[slot]``. Block ``b`` covers table rows
    ``[b * tile_rows, ...)`` with the Row walk of ``simt_mscatter_row_kernel``: warps own rows, lanes walk columns
    (one destination row is one plain row copy, so the caller may move it in units wider than the element)."""

    def simt_mscatter_row_owner_write_kernel(launch, table, src, src_rs, src_cs, owner, table_rows, valid_cols,
                                             tile_rows, row_warps, warps_per_row):
        walk_rows(launch, tile_rows, table_rows, row_warps, warps_per_row, owner_row,
                  (table, src, src_rs, src_cs, owner, valid_cols), None)

    return simt_mscatter_row_owner_write_kernel


@functools.cache
def simt_mscatter_elem_owner_claim_kernel(rule: IndexRule):
    """Elem: ``owner[remap(idx[p])] = max(owner[...], p)`` over all flat source positions ``p``
    (:func:`.device.claim_elem_owner`; a flat grid, from the last position down)."""

    def simt_mscatter_elem_owner_claim_kernel(launch, owner, idx, idx_rs, idx_cs, table_size, valid_rows, valid_cols):
        total = valid_rows * valid_cols
        contiguous = idx_cs == 1 and dense_tile(idx_rs, idx_cs, valid_cols)
        prefetches = owner.size >= CLAIM_PREFETCH_MIN_SLOTS
        lanes = SPAN_LANES
        alone = lanes > 1 and launch[2] == 1  # a CPU grid of one block: one thread runs it (never so on CUDA)
        walk_grid(launch, total, claim_elem_owner, (owner, idx, idx_rs, idx_cs, table_size, valid_cols, total,
                                                    contiguous, prefetches, alone, rule))

    return simt_mscatter_elem_owner_claim_kernel


@functools.cache
def simt_mscatter_elem_owner_write_kernel():
    """Elem: every owned slot takes the source element at its owner's position (:func:`.device.write_elem_owner`); a
    thread per slot, in a flat grid, like the slot-centric ``simt_mscatter_elem_last_kernel`` without its scan."""

    def simt_mscatter_elem_owner_write_kernel(launch, table, owner, src, src_rs, src_cs, table_size, valid_cols):
        walk_grid(launch, table_size, write_elem_owner, (table, src, src_rs, src_cs, owner, valid_cols))

    return simt_mscatter_elem_owner_write_kernel


# -- Conflict::Last at scale on several CPU workers: private owners (host/a5_planner.py)
# Two workers claiming one small owner array trade its cache lines at every claim. With a private copy of the
# owners per block (the host launches one block per worker), block ``b`` claims its contiguous share of the
# positions into copy ``b``, and the write takes each slot's largest owner over the copies. A CPU block runs on one
# thread, so its claims are plain loads and stores; on CUDA (where the host never launches these kernels) they are
# atomics, with the same result.

@functools.cache
def simt_mscatter_elem_private_owner_claim_kernel(rule: IndexRule):
    """Elem: ``owner[b][remap(idx[p])] = max(owner[b][...], p)`` over block ``b``'s contiguous share of the flat
    source positions (:func:`.device.walk_block_share`, :func:`.device.claim_private_elem_owner`), where
    ``owner[b]`` is copy ``b`` of the ``table_size`` owners (``grid`` copies). ``refused[b]`` is set where block
    ``b`` met a slot past the table: the claim is the call's range check (the write must not run then)."""

    def simt_mscatter_elem_private_owner_claim_kernel(launch, owner, refused, idx, idx_rs, idx_cs, table_size,
                                                      valid_rows, valid_cols):
        total = valid_rows * valid_cols
        contiguous = idx_cs == 1 and dense_tile(idx_rs, idx_cs, valid_cols)
        for b in block_range(launch):
            walk_block_share(launch, b, total, claim_private_elem_owner,
                             (owner[b * table_size:(b + 1) * table_size], refused[b:b + 1], idx, idx_rs, idx_cs,
                              table_size, valid_cols, total, contiguous, rule))

    return simt_mscatter_elem_private_owner_claim_kernel


@functools.cache
def simt_mscatter_elem_private_owner_write_kernel():
    """Elem: every owned slot takes the source element at the largest of its ``copies`` owners
    (:func:`.device.write_private_elem_owner`); ``simt_mscatter_elem_owner_write_kernel`` over the copies."""

    def simt_mscatter_elem_private_owner_write_kernel(launch, table, owner, src, src_rs, src_cs, table_size, copies,
                                                     valid_cols):
        walk_grid(launch, table_size, write_private_elem_owner,
                  (table, src, src_rs, src_cs, owner, table_size, copies, valid_cols))

    return simt_mscatter_elem_private_owner_write_kernel


# -- Conflict::Last at scale, sized by the updates: the compact owner path (host/a5_planner.py)
# For a few updates into a large table, one owner per table slot costs O(slots) memory and time. The host
# remaps the indices with the OOB rule and numbers the distinct slots they reach (``slots``, ascending);
# ``ids[p]`` is the number of update ``p``'s slot, or -1 for an update the rule drops. The owner array then
# has one entry per distinct slot: reset as above, claimed by ``simt_mscatter_compact_owner_claim_kernel``
# (the same atomic max of the flat source position, on ``owner[ids[p]]``), and written by the compact
# write kernels, which walk the ``m`` distinct slots, never the table. O(updates) memory and work.

@functools.cache
def simt_mscatter_compact_owner_claim_kernel():
    """Row and Elem: ``owner[ids[p]] = max(owner[...], p)`` over all flat source positions ``p`` (Row: the
    source row), skipping ``ids[p] < 0`` (a flat grid). The remap happened on the host, so there is no rule."""

    def simt_mscatter_compact_owner_claim_kernel(launch, owner, ids, updates):
        walk_grid(launch, updates, claim_compact_owner, (owner, ids, updates))

    return simt_mscatter_compact_owner_claim_kernel


@functools.cache
def simt_mscatter_row_compact_owner_write_kernel():
    """Row: distinct slot ``k`` (table row ``slots[k]``) takes source row ``owner[k]``, with the Row walk of
    ``simt_mscatter_row_owner_write_kernel`` over the ``distinct`` slots instead of the table rows."""

    def simt_mscatter_row_compact_owner_write_kernel(launch, table, src, src_rs, src_cs, owner, slots, distinct,
                                                     valid_cols, tile_rows, row_warps, warps_per_row):
        walk_rows(launch, tile_rows, distinct, row_warps, warps_per_row, compact_owner_row,
                  (table, src, src_rs, src_cs, owner, slots, valid_cols), None)

    return simt_mscatter_row_compact_owner_write_kernel


@functools.cache
def simt_mscatter_elem_compact_owner_write_kernel():
    """Elem: table element ``slots[k]`` takes ``src[owner[k]]`` for each of the ``distinct`` slots (a flat grid)."""

    def simt_mscatter_elem_compact_owner_write_kernel(launch, table, src, src_rs, src_cs, owner, slots, distinct,
                                                      valid_cols):
        walk_grid(launch, distinct, write_compact_elem_owner, (table, src, src_rs, src_cs, owner, slots, valid_cols))

    return simt_mscatter_elem_compact_owner_write_kernel
