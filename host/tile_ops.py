"""The public tile ops: MGATHER, MSCATTER, TLOAD, TSTORE, dispatched to a target.

Each op normalises its options into one :class:`~simt_pto.call.Policy`, validates the whole call
(:mod:`simt_pto.constraints`), then hands the resolved plan to the one host entry point, :mod:`.dispatch`, which
runs it on the target: ``cpu`` (numpy golden), ``a2a3``
(Numba loops) or ``a5`` (the SIMT kernels on a GPU, the CPU or the CUDA simulator).
"""
from __future__ import annotations

import contextlib

from simt_pto import aliasing, constraints, torch_rules
from simt_pto.backend import imported
from simt_pto.call import mgather_policy, mscatter_policy
from simt_pto.enums import (Coalesce, CoalesceLike, GatherExec, GatherExecLike, GatherOOB, GatherOOBLike, ScatterAtomicOp,
                    ScatterAtomicOpLike, ScatterConflict, ScatterConflictLike, ScatterOOB, ScatterOOBLike)
from simt_pto.errors import ConstraintError
from simt_pto.tensor import GlobalTensor
from simt_pto.tile import Tile

from . import dispatch

_MGATHER_POLICY, _MSCATTER_POLICY = mgather_policy.memo, mscatter_policy.memo


def mgather(dst: Tile, table: GlobalTensor, idx: Tile | GlobalTensor, *, coalesce: CoalesceLike = Coalesce.ROW,
            oob: GatherOOBLike = GatherOOB.UNDEFINED, target: str = "a5", exec: GatherExecLike = GatherExec.SCALAR,
            scratch: GlobalTensor | None = None, strict: bool = True, dyn_ubuf_size: int | None = None) -> Tile:
    """MGATHER (MGATHER.md): gather from the GM ``table`` into ``dst`` through ``idx``.

    * Row: ``dst[r, :] = table[idx[r], :]`` for ``r < dst.valid_rows``; ``idx`` is ``[1, R]`` (or
      ``[R, 1]`` ColMajor on A5 / row-major on cpu).
    * Elem: ``dst[i, j] = table.flat[idx[i, j]]`` over the valid region; idx valid shape == dst's.

    NumPy equivalent: ``table2d[idx]`` (Row) and ``table.ravel()[idx]`` (Elem), except that indices
    are cast to uint32 first and out-of-range ones follow ``oob``. A ``MAT`` destination takes the
    GM -> L1 path (``idx`` a GM tensor; Elem needs ``scratch``). Returns ``dst``.
    """
    try:  # every option, once: a spelling normalised before is found in C, with no Python frame
        policy = _MGATHER_POLICY(coalesce, oob, target, exec, strict, dyn_ubuf_size)
    except TypeError:  # an unhashable option: normalised here, or refused with the normaliser's message
        policy = mgather_policy(coalesce, oob, target, exec, strict, dyn_ubuf_size)
    # a repeated call (a kernel's tile loop) runs on what its target keeps for its signature
    signature = constraints.cached_mgather(policy, dst, table, idx, scratch)
    if signature is not None and dispatch.run_kept(signature, dst, table, idx):
        return dst
    dispatch.run_mgather(constraints.validated_mgather(policy, dst, table, idx, scratch))
    return dst


def mscatter(table: GlobalTensor, src: Tile, idx: Tile, *, coalesce: CoalesceLike = Coalesce.ROW,
             atomic: ScatterAtomicOpLike = ScatterAtomicOp.NONE, oob: ScatterOOBLike = ScatterOOB.UNDEFINED,
             conflict: ScatterConflictLike = ScatterConflict.LAST, target: str = "a5", strict: bool = True,
             dyn_ubuf_size: int | None = None) -> GlobalTensor:
    """MSCATTER (MSCATTER.md): scatter ``src`` into the GM ``table`` through ``idx``, in place.

    * Row: ``table[idx[r], :] op= src[r, :]``; Elem: ``table.flat[idx[i, j]] op= src[i, j]``.
    * ``atomic``: NONE (store), ADD, MAX, MIN (per-target dtypes: ``simt_pto.dtypes.ATOMIC_DTYPES``).
    * ``conflict`` (A5, atomic NONE): LAST = the largest flat source index wins each slot, as in
      ``for i in range(N): table[idx[i]] = src[i]`` (NumPy's ``table[idx] = src`` promises no order);
      DEFAULT = racing stores. A2/A3 is sequential (last write wins); the CPU simulator always walks
      element-wise with plain replace, ignoring atomic / oob / conflict as documented.

    Returns ``table``.
    """
    options = (coalesce, atomic, oob, conflict, target, strict, dyn_ubuf_size)
    try:  # every option, once (as in mgather)
        policy = _MSCATTER_POLICY(*options)
    except TypeError:
        policy = mscatter_policy(*options)
    if getattr(table, "torch_tensor", None) is None:  # (not a PyTorch table: no in-place rules, no guard to enter)
        _mscatter(policy, table, src, idx)
        return table
    with _torch_write(table, "table", "MSCATTER", policy.target):
        _mscatter(policy, table, src, idx)
    return table


def _mscatter(policy, table, src, idx) -> None:
    signature = constraints.cached_mscatter(policy, table, src, idx)  # as in mgather
    if signature is not None and dispatch.run_kept(signature, src, table, idx):
        return
    dispatch.run_mscatter(constraints.validated_mscatter(policy, table, src, idx))


def _torch_write(gtensor, what: str, op: str, target: str | None) -> contextlib.AbstractContextManager:
    """Around an op that writes ``gtensor``: where it wraps a PyTorch tensor, torch's in-place rules checked first
    and its version counter bumped as the op leaves (:func:`simt_pto.torch_rules.writing`); else nothing."""
    tensor = getattr(gtensor, "torch_tensor", None)  # (not a GlobalTensor: the op's own checks refuse it)
    return contextlib.nullcontext() if tensor is None else torch_rules.writing(tensor, what, op, target)


def _check_move(op, tile, gtensor):
    if not isinstance(tile, Tile) or not isinstance(gtensor, GlobalTensor):
        raise TypeError(f"{op}: expected (Tile, GlobalTensor)")
    if tile.dtype.itemsize != gtensor.dtype.itemsize:
        raise ConstraintError(op, None, "sizeof(tile.dtype) == sizeof(gtensor.dtype)",
                              f"tile {tile.dtype} vs tensor {gtensor.dtype}")
    rows, cols = gtensor.logical_shape
    vr, vc = tile.valid
    if vr > rows or vc > cols:
        raise ConstraintError(op, None, "transfer within the tensor's shape",
                              f"tile valid {vr}x{vc} exceeds the tensor's logical {rows}x{cols}")
    return gtensor.logical_offsets(vr, vc)


def tload(tile: Tile, gtensor: GlobalTensor) -> Tile:
    """TLOAD (memory-ops.md): ``tile[i, j] = gtensor[i, j]`` over the tile's valid region."""
    offs = _check_move("TLOAD", tile, gtensor)
    aliasing.check_disjoint("TLOAD", None, {"tile": tile.data}, {"gtensor": gtensor.array})
    if gtensor.on_device:  # copy only the span the tile reads
        cuda = imported("numba.cuda")
        lo, hi = int(offs.min()), int(offs.max()) + 1
        span = cuda.as_cuda_array(gtensor.array).reshape(gtensor.size)[lo:hi].copy_to_host()
        values = span.view(gtensor.dtype.numpy)[offs - lo]
    else:
        values = gtensor.host_flat()[offs]
    tile.data[tile.offsets()[: tile.valid_rows, : tile.valid_cols]] = values.view(tile.dtype.numpy)
    return tile


def tstore(gtensor: GlobalTensor, tile: Tile) -> GlobalTensor:
    """TSTORE (memory-ops.md): ``gtensor[i, j] = tile[i, j]`` over the tile's valid region."""
    offs = _check_move("TSTORE", tile, gtensor)
    aliasing.check_disjoint("TSTORE", None, {"gtensor": gtensor.array}, {"tile": tile.data})
    values = tile.valid_numpy()
    if gtensor.on_device:  # read-modify-write only the span the tile covers (padding between rows kept)
        cuda = imported("numba.cuda")
        lo, hi = int(offs.min()), int(offs.max()) + 1
        with _torch_write(gtensor, "gtensor", "TSTORE", None):
            device = cuda.as_cuda_array(gtensor.array).reshape(gtensor.size)[lo:hi]
            span = device.copy_to_host()
            span.view(gtensor.dtype.numpy)[offs - lo] = values.view(gtensor.dtype.numpy)
            device.copy_to_device(span)
    else:  # plain stores, which compose with atomics: registered as a composing writer (kernels/writers.py), so that
        # a plain read-modify-write of the same memory never runs beside them and loses one
        flat = gtensor.flat
        imported("simt_pto.kernels.writers").write_shared(flat, flat.__setitem__, offs, values.view(flat.dtype))
    return gtensor


__all__ = ["mgather", "mscatter", "tload", "tstore"]
