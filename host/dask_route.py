"""Whole-array gather / scatter over Dask arrays: tables larger than one machine, on a Dask cluster (issue 25).

``pto.gather`` / ``pto.scatter`` hand a call here when one of its arrays is a Dask array; :func:`gather` and
:func:`scatter` take the arguments of :func:`simt_pto.host.in_memory.gather` / :func:`~simt_pto.host.in_memory.scatter`
and give, computed, the in-memory call's result (MGATHER.md / MSCATTER.md, the whole-array form):

* **The rules are global** ("Out-of-Bounds Behaviour"): every index is cast to uint32 and remapped by the OOB
  policy against the capacity of the whole table (its rows, Row; its elements, Elem), never a chunk's.
  UNDEFINED (with ``strict``) refuses an out-of-range index with the in-memory call's
  :class:`~simt_pto.errors.OutOfBoundsError`, naming the global positions and values. Numpy indices are checked
  before the graph is built; Dask indices by a reduction (count, first positions and values) that every task
  reading or writing the table depends on: the same error is raised when the result is computed, and no chunk
  is written before it.
* **Conflict::Last keeps the largest global source position** ("Conflict Resolution"), the C-order position in
  ``idx``: a slot's updates reach its chunk in increasing position and the chunk's in-memory scatter keeps the
  last. Conflict::Default leaves each slot one of its writers; the atomics apply every update.
* **The work runs where the data is** (the "Tiled-Iteration Pattern" one level up). The table is chunked along
  its rows (Row: whole rows per chunk; Elem: a 1-D table, or a 2-D one with whole rows, as runs of its flat
  extent). Per index chunk one routing task splits the lookups / updates by the table chunk that owns their slot,
  as ``(local slot, position, value)``; per (index chunk, table chunk) a task keeps that pair's share. A gather
  runs the in-memory gather per pair, next to the table chunk, and combines the shares per index chunk (the
  result is chunked like ``idx``). A scatter runs the in-memory scatter once per table chunk, on a copy of it:
  Dask arrays are immutable, so the result is a new Dask array chunked like the table, where a chunk nobody
  writes is the table's own. The tasks number O(index chunks x table chunks); no table data passes through the
  client.
* **Empty chunks are no work.** An index chunk with no index (a filtered ``idx`` after ``compute_chunk_sizes()``),
  a chunk of width 0 along any axis of ``idx`` / ``src``, an empty table chunk: each routes and writes nothing,
  and the result is the in-memory call's. An ``idx`` with no index at all is the in-memory no-op (a gather's
  result of the right shape, the table unchanged).
* **out= / store= are written, never returned unwritten.** Checked before anything runs by the in-memory
  ``out``'s rules (writable, the result's shape and dtype). Where the scheduler runs tasks in the caller's process
  (``sync``, ``threads``), the tasks write the destination (:func:`dask.array.store`). Where tasks run in other
  processes (the ``processes`` scheduler, a process pool, a ``distributed`` client), a task that wrote a numpy
  array (``np.memmap`` too), a tensor or any other object would write its pickled copy: the caller's process
  writes those from the computed blocks instead, block by block as they finish on a ``distributed`` client. Only
  a Zarr array over a store outside this process (a folder, an object store) is written by the workers, each of
  its chunks by one task (:func:`_aligned`).

Each chunk's call runs ``target`` (``"a5"``: the A5 kernels on the worker's own backend, its GPU or its cores)
with local slots, which are in range (OOB policy UNDEFINED there). :func:`warm` has every worker load the
compiled kernels from Numba's disk cache once (one worker per host compiles what the cache lacks first).

Dask is an optional dependency (``pip install 'simt_pto[dask]'``); this module is imported only for a Dask array.
"""
from __future__ import annotations

import copyreg
import functools
import operator
import socket
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import dask.local
import dask.threaded
import numpy as np
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from simt_pto import dtypes as _dt
from simt_pto import torch_rules
from simt_pto.call import gather_policy, scatter_policy
from simt_pto.enums import IndexRule, ScatterAtomicOp, ScatterOOB, target_from_any
from simt_pto.errors import ConstraintError, OutOfBoundsError
from simt_pto.plan import out_of_range
from simt_pto.policy import index_rule
from simt_pto.tensor import plain_array

from . import arrays, in_memory, tiling

NUMPY_CHUNK = 1 << 22
"""Positions per chunk of a numpy ``idx`` / ``src`` (or a numpy table's rows) that meets Dask arrays."""
INDEX_MIN, INDEX_END = -(2 ** 31), 2 ** 32
"""Indices of a wider integer dtype lie in ``[INDEX_MIN, INDEX_END)``, where the uint32 cast of the value is that
of the same value as int32 / uint32 (the in-memory call's rule)."""
_PROXY_ROWS = 4096
"""Index rows of the small stand-in call that validates a call's rules: at least one full tile's worth."""
_SHOWN = 5
"""Out-of-range positions an OutOfBoundsError names (as :func:`simt_pto.plan.check_indices`)."""


# -- refusals raised on a worker reach the client pickled ----------------------------------------------------

def _rebuild_error(cls, message, attributes):
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(attributes)
    return error


def _reduce_error(error):
    return _rebuild_error, (type(error), str(error), dict(error.__dict__))


# These errors' __init__ takes the parts of the message, which default exception pickling (``cls(*args)``) does
# not pass back: without this, a worker's refusal would reach the client as an unpickling failure.
copyreg.pickle(ConstraintError, _reduce_error)
copyreg.pickle(OutOfBoundsError, _reduce_error)


# -- the call's arrays -----------------------------------------------------------------------------------------

def is_dask_array(x) -> bool:
    """Whether ``x`` is a Dask collection, told by its class's module (no Dask import: the host's routing test)."""
    return type(x).__module__.startswith("dask.")


def _operand(x, what):
    """``x`` as a Dask array of known chunks or a numpy array; TypeError for anything else."""
    if isinstance(x, da.Array):
        if isinstance(x._meta, np.ma.MaskedArray):  # (plain_array's rule: its chunks would be read past their masks)
            raise TypeError(f"{what}: a Dask array of masked chunks; their masks would be ignored (masked elements "
                            f"read and written as any other, the masks left as they were): pass "
                            f"dask.array.ma.filled({what}, value)")
        if any(np.isnan(c) for dim in x.chunks for c in dim):
            raise ValueError(f"{what}: a Dask array of unknown chunk sizes {x.chunks}; call "
                             f"{what}.compute_chunk_sizes() first (positions and slots are global)")
        return x
    if isinstance(x, np.ndarray):
        return x if type(x) is np.ndarray else plain_array(x, what)
    if isinstance(x, np.generic):  # a numpy scalar (np.int32(7)): the 0-d array the in-memory call reads it as
        return np.asarray(x)
    raise TypeError(f"{what}: expected a numpy or Dask array (or a numpy scalar) next to a Dask table, got {type(x).__name__}")


def _table(table, op, target, row):
    """The Dask table of a call, checked as the in-memory call checks a table, and chunked along its rows only."""
    if isinstance(table, np.ndarray) and op == "MGATHER":  # a gather reads it: it becomes a Dask array
        table = da.from_array(table, chunks=(max(1, NUMPY_CHUNK // max(1, table[0].size)),) + table.shape[1:],
                              name=False)
    elif not is_dask_array(table):
        raise TypeError(f"table: a {'scatter' if op == 'MSCATTER' else 'gather'} with Dask indices or sources "
                        "needs a Dask table (dask.array.from_array(table)); a scatter returns the updated table as "
                        f"a new Dask array; got {type(table).__name__}")
    table = _operand(table, "table")
    if not (table.ndim == 2 or (table.ndim == 1 and not row)):
        raise ConstraintError(op, target, f"table is {'2-D' if row else '1-D or 2-D'}", f"table has shape {table.shape}")
    if table.size == 0:
        raise ConstraintError(op, target, "a non-empty table", f"table has shape {table.shape}")
    if table.ndim == 2 and len(table.chunks[1]) > 1:
        raise ConstraintError(op, target, "a Dask table is chunked along its rows only (a chunk holds whole rows)",
                              f"table has {len(table.chunks[1])} chunks {table.chunks[1]} along its columns; "
                              f"rechunk it with table.rechunk({{1: -1}})")
    return table


def _blocks(x):
    """``(key, origin, shape)`` of each block of a Dask array, in C order of its chunk grid."""
    starts = [np.concatenate(([0], np.cumsum(c)))[:-1] for c in x.chunks]
    for index in np.ndindex(*x.numblocks):
        yield ((x.name,) + index, tuple(int(starts[d][i]) for d, i in enumerate(index)),
               tuple(int(x.chunks[d][i]) for d, i in enumerate(index)))


def _table_keys_and_bounds(table, row):
    """The table chunks' keys and bounds in slots (rows, Row; flat elements, Elem): chunk ``t`` owns
    ``[bounds[t], bounds[t + 1])``."""
    keys = [key for key, _, _ in _blocks(table)]
    starts = np.concatenate(([0], np.cumsum(table.chunks[0]))).astype(np.int64)
    return keys, starts if row or table.ndim == 1 else starts * table.shape[1]


def _numpy_chunks(shape, rows=None):
    """Chunks of a numpy ``idx`` / ``src`` of ``shape``: runs of whole trailing axes, ``rows`` (or about
    :data:`NUMPY_CHUNK` positions) along the first."""
    if not shape:
        return ()
    if rows is None:
        rows = max(1, NUMPY_CHUNK // max(1, int(np.prod(shape[1:], dtype=np.int64))))
    return (rows,) + tuple(shape[1:])


def _element_dtype(x, what, dtype):
    """The element dtype of the table or ``src`` ``x`` (``dtype``: the call's, reinterpreting it), or the in-memory
    call's TypeError naming ``what``. The in-memory call reads an array in the other byte order (``>f4`` on a
    little-endian host) from a native copy: it has the native order's element dtype."""
    if dtype is not None:
        return _dt.resolve(dtype)
    try:
        return _dt.resolve(x.dtype.newbyteorder("="))
    except TypeError as exc:
        raise TypeError(f"{what}: {exc}") from None


def _check_src(op, target, table, src, idx, row, dtype):
    """A scatter's ``src``: ``idx.shape + (C,)`` (Row) or ``idx.shape`` (Elem), up to axes of length 1, of the
    table's dtype (the in-memory call's rule and message)."""
    want = tuple(idx.shape) + (table.shape[1],) if row else tuple(idx.shape)
    table_dt = _element_dtype(table, "table", dtype)
    src_dt = _element_dtype(src, "src", dtype)
    in_memory.check_src_shape(op, target, src.shape, src_dt, want, table_dt)
    return want


def _proxy_idx(idx, row, tile_rows):
    """A small index array standing in for ``idx`` in the in-memory call's validation: its dtype, its row width
    (Elem), and as many rows as one full tile of the real call has (``tile_rows``, or the default's cap). An empty
    ``idx`` stands for itself: a call with no index is validated as the in-memory no-op is."""
    if idx.size == 0:
        return np.zeros(idx.shape, dtype=idx.dtype)
    n = int(np.prod(idx.shape[:-1] if not row and idx.ndim > 1 else idx.shape, dtype=np.int64))
    if isinstance(tile_rows, (int, np.integer)) and not isinstance(tile_rows, bool) and tile_rows >= 1:
        n = min(n, int(tile_rows))
    shape = (max(1, min(n, _PROXY_ROWS)),) + ((idx.shape[-1],) if not row and idx.ndim > 1 else ())
    return np.zeros(shape, dtype=idx.dtype)


def _proxy_table(table):
    return np.zeros((1,) + table.shape[1:], dtype=table.dtype)


# -- index checks: the uint32 cast of wide dtypes, and UNDEFINED ------------------------------------------------

def _wide(dtype) -> bool:
    """An index dtype whose values may lie outside ``[-2**31, 2**32)`` (checked before the uint32 cast)."""
    return np.dtype(dtype).itemsize == 8


def _bits(block):
    """The block's indices after the ISA's uint32 cast, flat."""
    a = np.asarray(block).reshape(-1)
    if a.dtype == np.int32 or a.dtype == np.uint32:
        return a.view(np.uint32)
    return a.astype(np.uint32)  # the low 32 bits: the cast of the same value as int32 / uint32


def _global_positions(flat, origin, shape, full_shape):
    """The C-order positions in the whole ``idx`` (of ``full_shape``) of flat positions in its block at
    ``origin`` of ``shape``."""
    if len(shape) <= 1:
        return (origin[0] if origin else 0) + flat
    local = np.unravel_index(flat, shape)
    return np.ravel_multi_index(tuple(o + i for o, i in zip(origin, local)), full_shape)


def _scan(block, *, origin, full_shape, capacity, identity, wide):
    """What the refusal needs of one index chunk: the first index outside ``[-2**31, 2**32)`` (a wide dtype) as
    ``(global position, value)`` or None, and under IDENTITY the out-of-range indices after the uint32 cast:
    ``(count, first global positions, their values)``. A block's C order is increasing in global position."""
    values = np.asarray(block).reshape(-1)
    shape = np.shape(block)
    outside = None
    if wide and values.size and (int(values.min()) < INDEX_MIN or int(values.max()) >= INDEX_END):
        first = int(np.flatnonzero((values < INDEX_MIN) | (values >= INDEX_END))[0])
        outside = int(_global_positions(np.array([first]), origin, shape, full_shape)[0]), int(values[first])
    if not identity:
        return outside, 0, [], []
    bits = _bits(values)
    if bits.size == 0 or int(bits.max()) < capacity:
        return outside, 0, [], []
    bad = np.flatnonzero(bits >= capacity)
    first = bad[:_SHOWN]
    where = _global_positions(first, origin, shape, full_shape)
    return outside, int(bad.size), [int(p) for p in where], [int(bits[p]) for p in first]


def _refuse(scans, *, op, target, capacity, full_shape):
    """Raise what the in-memory call raises for these indices (``scans``: :func:`_scan` of every chunk): an index
    outside ``[-2**31, 2**32)`` (ConstraintError), else an out-of-range one under UNDEFINED (OutOfBoundsError).
    Every task that reads or writes the table depends on this one."""
    outside = [s[0] for s in scans if s[0] is not None]
    if outside:
        position, value = min(outside)
        where = ", ".join(str(int(p)) for p in np.unravel_index(position, full_shape)) if full_shape else ""
        raise ConstraintError(op, target, "index values lie in [-2**31, 2**32) (the ISA's uint32 cast)",
                              f"idx[{where}] = {value} is outside [{INDEX_MIN}, {INDEX_END})")
    count = sum(s[1] for s in scans)
    if count:
        first = sorted((p, v) for _, _, ps, vs in scans for p, v in zip(ps, vs))[:_SHOWN]
        raise out_of_range(op, target, capacity, [p for p, _ in first], [v for _, v in first], count)
    return True


def _refusal(dsk, idx, op, target, capacity, rule, token):
    """The refusal of ``idx``: run now for numpy indices (before anything is built); for Dask indices added to
    ``dsk`` as a reduction, whose key is returned for the table's tasks to depend on (None: nothing to refuse)."""
    identity, wide = rule == IndexRule.IDENTITY, _wide(idx.dtype)
    if not (identity or wide) or idx.size == 0:
        return None
    scan = functools.partial(_scan, full_shape=idx.shape, capacity=capacity, identity=identity, wide=wide)
    refuse = functools.partial(_refuse, op=op, target=target, capacity=capacity, full_shape=idx.shape)
    if isinstance(idx, np.ndarray):
        refuse([scan(idx, origin=(0,) * idx.ndim)])
        return None
    name = f"pto-{op.lower()}-scan-{token}"
    scans = []
    for b, (key, origin, _) in enumerate(_blocks(idx)):
        dsk[(name, b)] = (functools.partial(scan, origin=origin), key)
        scans.append((name, b))
    dsk[(f"pto-{op.lower()}-refuse-{token}", 0)] = (refuse, scans)
    return (f"pto-{op.lower()}-refuse-{token}", 0)


# -- worker side: routing ---------------------------------------------------------------------------------------

def _slots(bits, capacity, rule):
    """``(slots, kept)``: the global slot of each index under the OOB rule (uint32: below 2**32 whatever the
    capacity), and the flat positions of the indices that have one (None: all). IDENTITY drops out-of-range
    indices as MASK does: the refusal runs before any task that could use them."""
    if capacity >= 2 ** 32:  # every uint32 index is in range: nothing to clamp, wrap or drop
        return bits, None
    if rule == IndexRule.CLAMP:
        return np.minimum(bits, np.uint32(capacity - 1)), None
    if rule == IndexRule.WRAP:
        return bits % np.uint32(capacity), None
    keep = bits < capacity
    if keep.all():
        return bits, None
    kept = np.flatnonzero(keep)
    return bits[kept], kept


def _owners(slots, bounds):
    """``(owning chunk, slot local to it)`` of each slot. Dask cuts an axis into equal chunks but a shorter last
    one: then the owner is a division (uint32 throughout); else a binary search over the bounds."""
    sizes = np.diff(bounds)
    step = int(sizes[0])
    if 0 < step and (sizes[:-1] == step).all() and sizes[-1] <= step and bounds[-1] <= 2 ** 32:
        owner = slots // np.uint32(step)
        return owner, slots - owner * np.uint32(step)
    owner = np.searchsorted(bounds[1:-1], slots, side="right")
    return owner, (slots.astype(np.int64) - bounds[owner]).astype(np.uint32)


def _route(bits, capacity, rule, bounds):
    """``(local slots, flat positions, cuts)``: the indices that have a slot, grouped by the table chunk that owns
    it (chunk ``t``'s at ``[cuts[t], cuts[t + 1])``, in increasing position: a stable sort), as slots local to it."""
    slots, kept = _slots(bits, capacity, rule)
    chunks = len(bounds) - 1
    if chunks == 1:
        where = np.arange(bits.size, dtype=np.int64) if kept is None else kept
        return slots.astype(np.uint32), where, np.array([0, slots.size])
    owner, local = _owners(slots, bounds)
    if chunks <= 1 << 16:
        owner = owner.astype(np.uint16)  # numpy's stable sort is a radix sort on 16 bits
    order = np.argsort(owner, kind="stable")
    cuts = np.concatenate(([0], np.cumsum(np.bincount(owner, minlength=chunks))))
    return local[order], (order if kept is None else kept[order]), cuts


def _route_lookups(idx_block, *, capacity, rule, bounds):
    """One index chunk of a gather, split by table chunk: per chunk ``(local slots, flat positions in the block)``."""
    local, where, cuts = _route(_bits(idx_block), capacity, rule, bounds)
    return [(local[a:b], where[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]


def _route_updates(idx_block, src_block, *, capacity, rule, bounds, row_len, origin, full_shape, positions):
    """One index chunk of a scatter, split by table chunk: per chunk ``(local slots, global source positions
    (``positions``) or None, values)``, in increasing position. ``row_len``: the table's row length (Row), 0 (Elem).
    An index chunk may hold no index (a filtered ``idx`` after ``compute_chunk_sizes()``): its shares are empty."""
    bits = _bits(idx_block)
    local, where, cuts = _route(bits, capacity, rule, bounds)
    src = np.asarray(src_block)
    values = (src.reshape(bits.size, row_len) if row_len else src.reshape(-1))[where]  # (0, C) for no index
    at = _global_positions(where, origin, np.shape(idx_block), full_shape) if positions else None
    return [(local[a:b], None if at is None else at[a:b], values[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]


# -- worker side: the in-memory calls on one table chunk -----------------------------------------------------------

def _gather_share(table_block, share, _refused, *, call):
    """The lookups of one index chunk that one table chunk owns: ``(flat positions in the index chunk, values)``."""
    local, where = share
    if local.size == 0:
        return where, None
    return where, in_memory.gather(np.ascontiguousarray(table_block), local, oob="undefined", strict=True, **call)


def _combine(parts, *, shape, dtype, row_len):
    """One chunk of a gather's result from its shares; a lookup with no slot (ZERO, or UNDEFINED without
    ``strict``) reads zero."""
    out = np.zeros(shape, dtype=dtype)
    into = out.reshape(-1, row_len) if row_len else out.reshape(-1)  # Row: whole rows per index position
    for where, values in parts:
        if values is not None:
            into[where] = values
    return out


def _scatter_chunk(table_block, shares, _refused, *, call, reorder, quiet_cpu_atomics):
    """The updates one table chunk owns, applied by the in-memory scatter to a copy of the chunk in increasing
    global source position (Conflict::Last keeps the largest); a chunk nobody writes is returned as it is."""
    shares = [s for s in shares if s[0].size]
    if not shares:
        return table_block
    local = np.concatenate([s[0] for s in shares])
    values = np.concatenate([s[2] for s in shares])
    if reorder:
        order = np.argsort(np.concatenate([s[1] for s in shares]), kind="stable")
        local, values = local[order], values[order]
    out = np.array(table_block, order="C", copy=True)
    with warnings.catch_warnings():
        if quiet_cpu_atomics:  # warned once, on the client that made the call
            warnings.filterwarnings("ignore", message="MSCATTER on cpu: atomic", category=UserWarning)
        in_memory.scatter(out, values, local, oob="undefined", strict=True, **call)
    return out


# -- out= / store=: the computed result written where the caller reads it ------------------------------------------

@dataclass(frozen=True)
class _Destination:
    """A call's ``out=`` / ``store=``: what the caller passed (``user``, returned), what is written (``into``: the
    caller's array, a numpy view of its memory, or the store itself), and whether tasks in other processes write
    ``into`` itself (``shared``) rather than a pickled copy of it."""
    user: Any
    into: Any
    shared: bool
    torch: bool


def _in_memory_zarr_store(store) -> bool:
    """A Zarr store held in this process's memory (zarr 3's MemoryStore, zarr 2's dict / KVStore / MemoryStore, an
    fsspec ``memory://`` file system): pickled to a worker process, it is a copy."""
    if isinstance(store, dict) or any("Memory" in c.__name__ for c in type(store).__mro__):
        return True
    inner = getattr(store, "_mutable_mapping", None)  # zarr 2's KVStore over a mapping
    if inner is not None and _in_memory_zarr_store(inner):
        return True
    protocol = getattr(getattr(store, "fs", None), "protocol", ())
    return "memory" in ((protocol,) if isinstance(protocol, str) else tuple(protocol))


def _workers_write(dest) -> bool:
    """Whether a task in another process (a process pool, a cluster's worker) that writes ``dest`` writes the
    caller's store and not a copy: a Zarr array over a store outside this process's memory (a folder, an object
    store). No other kind is known to: a numpy array (``np.memmap`` too: it pickles as its values), a tensor, an
    h5py dataset (it does not pickle) or an unknown object with ``__setitem__`` is written from the caller's
    process instead."""
    if type(dest).__module__.partition(".")[0] != "zarr":
        return False
    store = getattr(dest, "store", None)
    return store is not None and not _in_memory_zarr_store(store)


def _destination(dest, what, op, target, shape, dtype, reinterpret) -> _Destination:
    """``out=`` (gather) / ``store=`` (scatter) checked before anything runs, by the in-memory ``out``'s rules:
    written in place, of the result's ``shape`` and ``dtype`` (in either byte order; ``reinterpret``: the call's
    ``dtype=`` views host memory of the same width as it), a tensor only where torch would write it
    (:func:`simt_pto.torch_rules.for_write`). Refused: a Dask array (immutable), a JAX array, a device array, a
    numpy masked array (:func:`simt_pto.tensor.plain_array`), an object without ``__setitem__`` and ``shape``."""
    root = type(dest).__module__.partition(".")[0]
    if is_dask_array(dest):
        raise TypeError(f"{what}: a Dask array cannot be written (Dask arrays are immutable); leave {what}= unset "
                        f"and use the returned Dask array, or pass a Zarr array or a numpy array")
    if root in ("jax", "jaxlib"):
        raise TypeError(f"{what}: a JAX array cannot be written; leave {what}= unset and use the returned Dask "
                        "array")
    if not isinstance(dest, np.ndarray) and hasattr(dest, "__cuda_array_interface__"):
        raise TypeError(f"{what}: a device array ({type(dest).__name__}) is not written by the Dask route; pass a "
                        "numpy array or a Zarr array and copy the result to the device")
    is_torch = torch_rules.torch_of(dest) is not None
    if isinstance(dest, np.ndarray):
        if type(dest) is not np.ndarray:
            plain_array(dest, what)  # (a masked array refused; another subclass, a memmap, written as it is)
        into = dest
    elif hasattr(dest, "__dlpack__") or hasattr(dest, "__array_interface__"):  # a torch CPU tensor, ...
        into = arrays.host_memory(torch_rules.for_write(dest, what, op, target) if is_torch else dest, what)[0]
    elif hasattr(dest, "__setitem__") and hasattr(dest, "shape"):  # a Zarr array, an h5py dataset, ...
        into = dest
    else:
        raise TypeError(f"{what}: expected a numpy array, a host tensor or an array-like with __setitem__ and "
                        f"shape (a Zarr array), got {type(dest).__name__}")
    if isinstance(into, np.ndarray):
        if not into.flags.writeable:
            raise ConstraintError(op, target, f"the {what} is written in place",
                                  f"{what} is a read-only array (flags.writeable is False)")
        # (not one in the other byte order: viewed as native, its bytes would be written unswapped)
        if reinterpret and into.dtype != dtype and into.dtype.itemsize == dtype.itemsize and into.dtype.isnative:
            into = into.view(dtype)
    try:
        have = np.dtype(into.dtype) if getattr(into, "dtype", None) is not None else None
    except TypeError:  # a dtype numpy does not know: the store's own assignment decides
        have = None
    # the other byte order is written byte-swapped by numpy's assignment: bit for bit
    if tuple(into.shape) != tuple(shape) or (have is not None and have.newbyteorder("=") != dtype):
        rule = "out has the gathered shape and the table's dtype" if op == "MGATHER" else \
            "store has the table's shape and dtype"
        raise ConstraintError(op, target, rule, f"{what} {tuple(into.shape)} {have if have is not None else '?'}, "
                                                f"expected {tuple(shape)} {dtype}")
    return _Destination(dest, into, _workers_write(dest), is_torch)


def _runs_in_this_process(get) -> bool:
    """Whether Dask's scheduler ``get`` runs every task in the caller's process: the synchronous and threaded
    schedulers, or a thread pool set as the scheduler (``dask.config.set(scheduler=ThreadPoolExecutor(...))``).
    Not the ``processes`` scheduler, a process pool or a ``distributed`` client (its workers are processes of their
    own, or a cluster's; an in-process cluster is treated alike)."""
    if get is dask.local.get_sync or get is dask.threaded.get:
        return True
    if isinstance(get, functools.partial) and get.func is dask.local.get_async and get.args:
        return isinstance(getattr(get.args[0], "__self__", None), ThreadPoolExecutor)
    return False


def _regions(result):
    """``(slices, delayed block)`` of every non-empty block of ``result``, in C order of its chunk grid."""
    blocks = result.to_delayed().reshape(-1)
    return [(tuple(slice(o, o + n) for o, n in zip(origin, shape)), block)
            for (_, origin, shape), block in zip(_blocks(result), blocks) if 0 not in shape]


def _write_from_caller(result, into, get) -> None:
    """Compute ``result`` and write it into ``into`` in the caller's process. On a ``distributed`` client block by
    block as each finishes (the caller holds one block at a time); under another scheduler, its blocks are
    computed together, then written (the caller holds the result once more until then). Every block depends on
    the call's refusal, so a refused call writes nothing."""
    parts = _regions(result)
    if not parts:
        return
    client = getattr(get, "__self__", None)
    if client is not None and type(client).__module__.partition(".")[0] == "distributed":
        from distributed import as_completed
        futures = client.compute([block for _, block in parts])
        region_of = {future.key: region for future, (region, _) in zip(futures, parts)}
        finished = as_completed(futures)
        try:
            for future in finished:
                into[region_of[future.key]] = future.result()
                future.release()
        except BaseException:
            client.cancel(futures)
            raise
        return
    values = dask.compute(*[block for _, block in parts], scheduler=get)
    for (region, _), value in zip(parts, values):
        into[region] = value


def _aligned(result, store):
    """``result`` rechunked so that no two of its blocks write one chunk (zarr 3: one shard) of ``store``: each
    block boundary moved up to the next multiple of the store's chunk along its axis. Two worker processes that
    wrote parts of one store chunk would each read, update and write back the whole chunk, and one of the two
    writes would be lost."""
    unit = getattr(store, "shards", None) or store.chunks
    chunks = []
    for sizes, step, length in zip(result.chunks, unit, result.shape):
        cuts = {min(-(-int(c) // step) * step, length) for c in np.cumsum(sizes)[:-1]}
        edges = [0] + sorted(c for c in cuts if 0 < c < length) + [length]
        chunks.append(tuple(int(b - a) for a, b in zip(edges[:-1], edges[1:])))
    chunks = tuple(chunks)
    return result if chunks == result.chunks else result.rechunk(chunks)


def _store(result, dest: _Destination):
    """Compute ``result`` into the checked ``out=`` / ``store=`` and return what the caller passed. A task writes
    it where the scheduler runs tasks in the caller's process, or where workers write the store itself (a Zarr
    array on disk: :func:`dask.array.store`); else the caller's process writes the computed blocks, so that an
    in-memory destination is never left unwritten by writes that went to a worker's copy."""
    get = dask.base.get_scheduler(collections=[result])
    if _runs_in_this_process(get):  # the lock orders the threads' writes into one store chunk
        da.store(result, dest.into, lock=True, scheduler=get)
    elif dest.shared:  # worker processes: one task per store chunk, so that no lock across processes is needed
        da.store(_aligned(result, dest.into), dest.into, lock=False, scheduler=get)
    else:
        _write_from_caller(result, dest.into, get)
    if dest.torch:
        torch_rules.bump_version(dest.user)  # as torch's own in-place writes do: autograd sees the change
    return dest.user


# -- gather ------------------------------------------------------------------------------------------------------

def gather(table, idx, *, coalesce="row", oob="undefined", target="a5", tile_rows=None, dyn_ubuf_size=None,
           strict=True, dtype=None, out=None):
    """:func:`simt_pto.host.in_memory.gather` over a Dask table (MGATHER.md, "Coalesce::Row", "Coalesce::Elem",
    "Out-of-Bounds Behaviour"): Row ``result[p] = table[idx[p], :]``, Elem ``result[p] = table.flat[idx[p]]``
    for every position ``p`` of ``idx``, the uint32 cast and ``oob`` applied against the whole table.

    ``table`` is a Dask array chunked along its rows (a numpy table becomes one); ``idx`` a numpy or Dask array of
    any shape. Returns a Dask array chunked like ``idx`` (Row: ``idx.shape + (C,)``), which computes to the
    in-memory call's result bit for bit; with ``out`` (a numpy array, a host tensor, or an array-like with
    ``__setitem__`` and ``shape``, e.g. a Zarr array, of the result's shape and dtype), computes it into ``out``
    under any scheduler (:func:`_store`) and returns ``out``. Raises what the in-memory call raises for a call it
    refuses, before anything runs; Dask indices it would refuse by value raise its error when the result is
    computed, before anything is written.
    """
    policy = gather_policy(coalesce, oob, target, tile_rows, dyn_ubuf_size, strict, dtype)  # every option, once
    target, coalesce, oob, row = policy.target, policy.coalesce, policy.oob, policy.row
    tile_rows, dyn_ubuf_size, strict = policy.tile_rows, policy.dyn_ubuf_size, policy.strict
    table = _table(table, "MGATHER", target, row)
    idx = _operand(idx, "idx")
    in_memory.gather_plan(_proxy_table(table), _proxy_idx(idx, row, tile_rows), coalesce=coalesce, oob=oob, target=target,
                      tile_rows=tile_rows, dyn_ubuf_size=dyn_ubuf_size, strict=strict, dtype=dtype,
                      backend="multicore")
    out_dtype = _element_dtype(table, "table", dtype).numpy  # native, as the in-memory call's result
    row_len = table.shape[1] if row else 0
    dest = None if out is None else _destination(out, "out", "MGATHER", target,
                                                 tuple(idx.shape) + ((row_len,) if row else ()), out_dtype,
                                                 dtype is not None)
    capacity = table.shape[0] if row else table.size
    rule = index_rule(oob, strict)
    token = tokenize(table, idx, coalesce, oob, target, tile_rows, dyn_ubuf_size, strict, dtype)
    dsk = {}
    refused = _refusal(dsk, idx, "MGATHER", target, capacity, rule, token)
    if isinstance(idx, np.ndarray):
        # named by the call's token, which hashed idx: a repeated call is the same graph (a random name would
        # give the same route keys other dependencies, which a distributed scheduler warns can deadlock)
        idx = da.from_array(idx, chunks=_numpy_chunks(idx.shape), name=f"pto-gather-idx-{token}")
    out_chunks = idx.chunks + (((row_len,),) if row else ())
    if idx.size == 0:
        result = da.zeros(tuple(sum(c) for c in out_chunks), dtype=out_dtype, chunks=out_chunks)
        return result if dest is None else _store(result, dest)

    name = f"pto-gather-{token}"
    route, share, part = f"pto-gather-route-{token}", f"pto-gather-share-{token}", f"pto-gather-part-{token}"
    table_keys, bounds = _table_keys_and_bounds(table, row)
    idx_cols = 1 if row or idx.ndim < 2 else tiling.elem_tile_cols(  # the in-memory call's tile view of idx
        "MGATHER", target, out_dtype, idx.shape[-1], dyn_ubuf_size)
    call = dict(coalesce=coalesce, target=target, dtype=dtype, dyn_ubuf_size=dyn_ubuf_size,
                tile_rows=tile_rows if row or tile_rows is None else  # Elem: as many elements, within the UB
                tiling.flat_tile_rows("MGATHER", target, out_dtype, tile_rows, idx_cols, dyn_ubuf_size))
    router = functools.partial(_route_lookups, capacity=capacity, rule=rule, bounds=bounds)
    run_share = functools.partial(_gather_share, call=call)
    for b, (key, _, shape) in enumerate(_blocks(idx)):
        dsk[(route, b)] = (router, key)
        for t, table_key in enumerate(table_keys):
            dsk[(share, b, t)] = (operator.getitem, (route, b), t)
            dsk[(part, b, t)] = (run_share, table_key, (share, b, t), refused)
        combine = functools.partial(_combine, shape=shape + ((row_len,) if row else ()), dtype=out_dtype,
                                    row_len=row_len)
        dsk[(name,) + key[1:] + ((0,) if row else ())] = (combine, [(part, b, t) for t in range(len(table_keys))])
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[table, idx])
    result = da.Array(graph, name, out_chunks, dtype=out_dtype)
    return result if dest is None else _store(result, dest)


# -- scatter ------------------------------------------------------------------------------------------------------

def scatter(table, src, idx, *, coalesce="row", atomic="none", oob="undefined", conflict="last", target="a5",
            tile_rows=None, dyn_ubuf_size=None, strict=True, last_path="auto", dtype=None, store=None):
    """:func:`simt_pto.host.in_memory.scatter` into a Dask table (MSCATTER.md, "Coalesce::Row", "Coalesce::Elem",
    "Out-of-Bounds Behaviour", "Conflict Resolution"): Row ``table[idx[p], :] op= src[p, :]``, Elem
    ``table.flat[idx[p]] op= src[p]``, the uint32 cast and ``oob`` applied against the whole table,
    Conflict::Last keeping each slot's largest C-order position ``p``.

    ``table`` is a Dask array chunked along its rows; ``src`` and ``idx`` numpy or Dask arrays (``src``:
    ``idx.shape + (C,)``, Row; ``idx.shape``, Elem). Dask arrays are immutable: returns the updated table as a new
    Dask array with the table's chunks, and ``table`` is unchanged. With ``store`` (a numpy array, a host tensor,
    or an array-like with ``__setitem__`` and ``shape``, e.g. a Zarr array, of the table's shape and dtype),
    computes it into ``store`` under any scheduler (:func:`_store`) and returns ``store``. Raises what the
    in-memory call raises for a call it refuses, before anything runs; Dask indices it would refuse by value raise
    its error when the result is computed, before any chunk is written.
    """
    policy = scatter_policy(coalesce, atomic, oob, conflict, target, tile_rows, dyn_ubuf_size, strict, last_path,
                            dtype)  # every option, once
    target, coalesce, row = policy.target, policy.coalesce, policy.row
    atomic, oob, conflict, last_path = policy.atomic, policy.oob, policy.conflict, policy.last_path
    tile_rows, dyn_ubuf_size, strict = policy.tile_rows, policy.dyn_ubuf_size, policy.strict
    table = _table(table, "MSCATTER", target, row)
    idx = _operand(idx, "idx")
    src = _operand(src, "src")
    want = _check_src("MSCATTER", target, table, src, idx, row, dtype)
    proxy_idx = _proxy_idx(idx, row, tile_rows)
    proxy_src = np.zeros(proxy_idx.shape + ((table.shape[1],) if row else ()), dtype=src.dtype)
    in_memory.scatter_plan(_proxy_table(table), proxy_src, proxy_idx, coalesce=coalesce, atomic=atomic, oob=oob,
                       conflict=conflict, target=target, tile_rows=tile_rows, dyn_ubuf_size=dyn_ubuf_size,
                       strict=strict, last_path=last_path, dtype=dtype, backend="multicore")
    # (native: _destination takes a store of either byte order, and a table in the other one must not refuse both)
    dest = None if store is None else _destination(store, "store", "MSCATTER", target, table.shape,
                                                   table.dtype.newbyteorder("="), dtype is not None)
    capacity = table.shape[0] if row else table.size
    # the CPU simulator's MSCATTER ignores ScatterOOB and uses every index unchecked (as the in-memory call)
    rule = index_rule(ScatterOOB.UNDEFINED if target == "cpu" else oob, strict)
    token = tokenize(table, src, idx, coalesce, atomic, oob, conflict, target, tile_rows, dyn_ubuf_size, strict,
                     last_path, dtype)
    dsk = {}
    refused = _refusal(dsk, idx, "MSCATTER", target, capacity, rule, token)
    if target == "cpu" and atomic != ScatterAtomicOp.NONE and idx.size:
        warnings.warn(f"MSCATTER on cpu: atomic {atomic.name} is a plain replace on the CPU simulator (MSCATTER.md, "
                      "CPU Reference Form: 'Atomic is always plain replace'); target='a2a3' is the sequential golden "
                      "for atomics", UserWarning, stacklevel=2)
    if idx.size == 0:
        return table if dest is None else _store(table, dest)

    # idx and src share one chunking: idx's when it is a Dask array, else src's along the first axis
    if src.shape != want:
        src = src.reshape(want)
    if isinstance(idx, np.ndarray):
        rows = src.chunks[0] if is_dask_array(src) and idx.ndim else None
        idx = da.from_array(idx, chunks=_numpy_chunks(idx.shape, rows), name=f"pto-scatter-idx-{token}")
    src_chunks = idx.chunks + (((table.shape[1],),) if row else ())
    # numpy operands are named by the call's token, which hashed them: a repeated call is the same graph (a random
    # name would give the same route keys other dependencies, which a distributed scheduler warns can deadlock)
    src = (src.rechunk(src_chunks) if is_dask_array(src) else
           da.from_array(src, chunks=src_chunks, name=f"pto-scatter-src-{token}"))

    name = f"pto-scatter-{token}"
    route, share = f"pto-scatter-route-{token}", f"pto-scatter-share-{token}"
    table_keys, bounds = _table_keys_and_bounds(table, row)
    # blocks in C order of the chunk grid are in increasing source position unless idx is cut along a later axis
    reorder = any(len(c) > 1 for c in idx.chunks[1:])
    src_keys = [key for key, _, _ in _blocks(src)]
    shares = [[] for _ in table_keys]
    for b, (key, origin, _) in enumerate(_blocks(idx)):
        router = functools.partial(_route_updates, capacity=capacity, rule=rule, bounds=bounds,
                                   row_len=table.shape[1] if row else 0, origin=origin, full_shape=idx.shape,
                                   positions=reorder)
        dsk[(route, b)] = (router, key, src_keys[b])
        for t in range(len(table_keys)):
            dsk[(share, b, t)] = (operator.getitem, (route, b), t)
            shares[t].append((share, b, t))
    element = _element_dtype(table, "table", dtype)
    idx_cols = 1 if row or idx.ndim < 2 else tiling.elem_tile_cols(  # the in-memory call's tile view of idx
        "MSCATTER", target, element, idx.shape[-1], dyn_ubuf_size)
    call = dict(coalesce=coalesce, atomic=atomic, conflict=conflict, target=target, last_path=last_path, dtype=dtype,
                dyn_ubuf_size=dyn_ubuf_size, tile_rows=tile_rows if row or tile_rows is None else  # (as the gather's)
                tiling.flat_tile_rows("MSCATTER", target, element, tile_rows, idx_cols, dyn_ubuf_size))
    apply = functools.partial(_scatter_chunk, call=call, reorder=reorder,
                              quiet_cpu_atomics=target == "cpu" and atomic != ScatterAtomicOp.NONE)
    for t, table_key in enumerate(table_keys):
        dsk[(name,) + table_key[1:]] = (apply, table_key, shares[t], refused)
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[table, idx, src])
    result = da.Array(graph, name, table.chunks, dtype=table.dtype)
    return result if dest is None else _store(result, dest)


# -- warming the workers ------------------------------------------------------------------------------------------

_WARM_COMPACT_SLOTS = 1 << 18
"""Slots of a warm-up table that the owner path serves with one owner per distinct slot (``a5_planner.owner_layout``:
far more slots than 32 per update)."""
WARM_COLS = (1, 2, 4, 8)
"""Row widths :func:`warm` runs: a Row gather and the owner write move rows in units of 8, 4 or 2 bytes or one
element (``simt_pto.host.a5_planner.row_move_unit``), one kernel signature each; these widths reach every unit."""


def _warm_calls(name, target):
    """One tiny in-memory call per kernel a chunk's call can run (uint32 local indices, OOB UNDEFINED)."""
    d = _dt.resolve(name)
    idx = np.array([3, 0, 3], dtype=np.uint32)
    zeros = functools.partial(np.zeros, dtype=d.numpy)
    for cols in WARM_COLS:
        yield lambda cols=cols: in_memory.gather(zeros((8, cols)), idx, target=target)
        # Conflict::Last: the slot-centric kernels, and the owner path with one owner per slot (a small table) and
        # one per distinct slot reached (a table of many slots per update)
        for rows, path in ((8, "slot"), (8, "owner"), (_WARM_COMPACT_SLOTS, "owner")):
            yield lambda cols=cols, rows=rows, path=path: in_memory.scatter(zeros((rows, cols)), zeros((3, cols)), idx,
                                                                        target=target, last_path=path)
    yield lambda: in_memory.gather(zeros(8), idx, coalesce="elem", target=target)
    for size, path in ((8, "slot"), (8, "owner"), (_WARM_COMPACT_SLOTS, "owner")):
        yield lambda size=size, path=path: in_memory.scatter(zeros(size), zeros(3), idx, coalesce="elem", target=target,
                                                         last_path=path)
    for coalesce, table, src in (("row", (8, 2), (3, 2)), ("elem", (8,), (3,))):
        yield lambda c=coalesce, t=table, s=src: in_memory.scatter(zeros(t), zeros(s), idx, coalesce=c,
                                                               conflict="default", target=target)
        for atomic in (ScatterAtomicOp.ADD, ScatterAtomicOp.MAX, ScatterAtomicOp.MIN):
            if d in _dt.atomic_dtypes(target, atomic):
                yield lambda c=coalesce, t=table, s=src, a=atomic: in_memory.scatter(zeros(t), zeros(s), idx,
                                                                                 coalesce=c, atomic=a, target=target)


def _warm_here(dtypes, targets):
    """Run :func:`_warm_calls` on this worker: Numba loads each kernel from its disk cache, or compiles and caches
    it. Seconds taken."""
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the cpu target's atomic notice
        for target in targets:
            for name in dtypes:
                for run in _warm_calls(name, target):
                    try:
                        run()
                    except ConstraintError:  # a call the target refuses (Conflict::Default on a2a3, ...)
                        pass
    return time.perf_counter() - start


def warm(client=None, *, dtypes=("float32",), targets=("a5",)) -> dict:
    """Have every worker of ``client`` (default: the current ``distributed`` client) load the kernels that
    :func:`gather` / :func:`scatter` run for these element ``dtypes`` on these ``targets`` from Numba's disk cache
    (next to the package's sources, or under ``NUMBA_CACHE_DIR``). One worker per host runs first and compiles what
    the cache lacks; then the others load. Returns ``{worker address: seconds}``.

    Call it after the cluster starts and after workers restart: a fresh worker process otherwise loads each kernel
    at its first call, inside the timed run."""
    if client is None:
        from distributed import get_client
        client = get_client()
    # every worker the scheduler has now, with its machine: asked of the workers themselves, since the client's copy
    # of the scheduler's worker list (``scheduler_info``) is replaced by a periodic refresh that holds no workers
    hosts = client.run(socket.gethostname)
    first = {}
    for address, host in hosts.items():
        first.setdefault(host, address)
    dtypes, targets = tuple(dtypes), tuple(target_from_any(t) for t in targets)
    took = dict(client.run(_warm_here, dtypes, targets, workers=list(first.values())))
    rest = [a for a in hosts if a not in took]
    if rest:
        took.update(client.run(_warm_here, dtypes, targets, workers=rest))
    return took


__all__ = ["INDEX_END", "INDEX_MIN", "NUMPY_CHUNK", "WARM_COLS", "gather", "is_dask_array", "scatter", "warm"]
