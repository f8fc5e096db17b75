"""``pto.gather`` / ``pto.scatter``: the whole-array ops as the package root exports them.

A call whose operands are all in memory (numpy, device arrays, PyTorch / JAX / DLPack producers) runs the in-memory
op of :mod:`.in_memory`, which states the semantics (MGATHER.md / MSCATTER.md, tile by tile). A call with a Dask array
among its operands takes the Dask route of :mod:`.dask_route`: the same semantics, computed where the table's
chunks live, and a Dask array as the result. Dask is told apart by its class's module, so a call that passes no
Dask array never imports Dask.

Every option is normalised here, once, before either route runs anything: the call's
:class:`~simt_pto.call.Policy` (:func:`simt_pto.call.gather_policy` / ``scatter_policy``: ``strict`` a bool, numpy's
``np.True_`` / ``np.False_`` too, a string such as ``"False"`` or an int is a TypeError; ``last_path`` one of its
strings; ``tile_rows`` None or a positive int; ``coalesce``, ``oob``, ``atomic``, ``conflict`` and ``target`` by
:func:`simt_pto.enums.from_any`; ``dyn_ubuf_size`` None or a non-negative int; ``dtype`` an element dtype). The
in-memory route takes the policy as it is; the operands (and ``out``) are checked by :mod:`.arrays`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar, overload

from simt_pto.backend import first_use
from simt_pto.call import gather_policy, scatter_policy
from simt_pto.enums import Coalesce, GatherOOB, ScatterAtomicOp, ScatterConflict, ScatterOOB

from . import in_memory, kept_launch
from .arrays import ArrayLike, DTypeArg

if TYPE_CHECKING:
    from numpy.typing import NDArray

TableT = TypeVar("TableT")

_GATHER_POLICY, _SCATTER_POLICY = gather_policy.memo, scatter_policy.memo
"""The remembered normalisers themselves (``functools.lru_cache``: C code on a hit)."""


def _dask_operand(*arrays: object) -> bool:
    """Whether any operand is a Dask array, told by its class's module (no Dask import; a loop, not ``any()`` over a
    generator: this runs on every call)."""
    for a in arrays:
        if type(a).__module__.startswith("dask."):
            return True
    return False


@overload
def gather(table: NDArray[Any], idx: ArrayLike, *, coalesce: Coalesce | str = ..., oob: GatherOOB | str = ...,
           target: str = ..., tile_rows: int | None = ..., dyn_ubuf_size: int | None = ..., strict: bool = ...,
           dtype: DTypeArg = ..., out: None = ...) -> NDArray[Any]: ...
@overload
def gather(table: ArrayLike, idx: ArrayLike, *, coalesce: Coalesce | str = ..., oob: GatherOOB | str = ...,
           target: str = ..., tile_rows: int | None = ..., dyn_ubuf_size: int | None = ..., strict: bool = ...,
           dtype: DTypeArg = ..., out: ArrayLike | None = ...) -> Any: ...


def gather(table: ArrayLike, idx: ArrayLike, *, coalesce: Coalesce | str = "row", oob: GatherOOB | str = "undefined",
           target: str = "a5", tile_rows: int | None = None, dyn_ubuf_size: int | None = None, strict: bool = True,
           dtype: DTypeArg = None, out: ArrayLike | None = None) -> Any:
    """Gather a whole array with the A5 semantics of MGATHER: :func:`simt_pto.host.in_memory.gather` (its docstring
    states the rules: Row ``out[p] = table[idx[p], :]``, Elem ``out[p] = table.flat[idx[p]]``, the uint32 cast,
    ``oob``, index dtypes and shapes, ``out=``, what is returned for each array kind).

    With a Dask array among the operands, :func:`simt_pto.dask.gather`: the result is a Dask array
    chunked like ``idx``, with the same semantics, computed where the table's chunks are."""
    try:  # every option, once: a spelling normalised before is found in C, with no Python frame
        policy = _GATHER_POLICY(coalesce, oob, target, tile_rows, dyn_ubuf_size, strict, dtype)
    except TypeError:  # an unhashable option: normalised here, or refused with the normaliser's message
        policy = gather_policy(coalesce, oob, target, tile_rows, dyn_ubuf_size, strict, dtype)
    if out is None:  # a signature that has run: its kept launch, unless a per-call check sends it down the full path
        gathered = kept_launch.gathered(policy, table, idx)
        if gathered is not None:
            return gathered
    elif kept_launch.gathered_into(policy, table, idx, out):  # (the same, into the caller's numpy / PyTorch out)
        return out
    if _dask_operand(table, idx, out):
        with first_use:  # imports Dask: only for a call that passes a Dask array
            from . import dask_route
        return dask_route.gather(table, idx, coalesce=coalesce, oob=oob, target=target, tile_rows=tile_rows,
                                  dyn_ubuf_size=dyn_ubuf_size, strict=strict, dtype=dtype, out=out)
    return in_memory.full_gather(policy, table, idx, out)


def scatter(table: TableT, src: ArrayLike, idx: ArrayLike, *, coalesce: Coalesce | str = "row",
            atomic: ScatterAtomicOp | str = "none", oob: ScatterOOB | str = "undefined",
            conflict: ScatterConflict | str = "last", target: str = "a5", tile_rows: int | None = None,
            dyn_ubuf_size: int | None = None, strict: bool = True, last_path: str = "auto",
            dtype: DTypeArg = None) -> TableT:
    """Scatter a whole array with the semantics of issuing MSCATTER tile by tile in order:
    :func:`simt_pto.host.in_memory.scatter` (its docstring states the rules: Row ``table[idx[p], :] op= src[p, :]``,
    Elem ``table.flat[idx[p]] op= src[p]``, Conflict::Last by C-order position, in place for a writable table, a
    new JAX array for a JAX table).

    With a Dask array among the operands, :func:`simt_pto.dask.scatter`: Dask arrays cannot be
    written, so the updated table is returned as a new Dask array, with the same semantics."""
    options = (coalesce, atomic, oob, conflict, target, tile_rows, dyn_ubuf_size, strict, last_path, dtype)
    try:  # every option, once (as in gather)
        policy = _SCATTER_POLICY(*options)
    except TypeError:
        policy = scatter_policy(*options)
    if kept_launch.scattered(policy, table, src, idx):  # a signature that has run (as in gather)
        return table
    if _dask_operand(table, src, idx):
        with first_use:  # imports Dask: only for a call that passes a Dask array
            from . import dask_route
        updated_dask: TableT = dask_route.scatter(
            table, src, idx, coalesce=coalesce, atomic=atomic, oob=oob, conflict=conflict, target=target,
            tile_rows=tile_rows, dyn_ubuf_size=dyn_ubuf_size, strict=strict, last_path=last_path, dtype=dtype)
        return updated_dask
    return in_memory.full_scatter(policy, table, src, idx)


__all__ = ["gather", "scatter"]
