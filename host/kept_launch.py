"""The kept launch: what a repeated call of one signature runs, bound once, with each call's operands put in place.

A call's validation and plan read its signature only (:class:`simt_pto.call.Call` for a whole array, the tile op's
key in :mod:`simt_pto.constraints`): its operands' kinds, shapes, dtypes and policy. Once a call of a signature has
run, :class:`KeptLaunch` keeps its launches (the ``multicore`` backend's compiled kernels with every argument but
the operands bound, :func:`simt_pto.kernels.a5.simt.multicore_launcher`; on the CUDA simulator its launches so bound,
:func:`~simt_pto.kernels.a5.simt.simulator_launcher`; on the GPU backend the packed launch,
:func:`~simt_pto.kernels.a5.simt.single_gpu_launcher`; the A2/A3 loops), bound by the target's runtime (this module
imports no kernel: the tile ops' dispatch imports it), in the signature's entry of the one
signature cache (:data:`simt_pto.plan.SIGNATURES`). A later call of the signature hands its own operands to
:meth:`KeptLaunch.run` (host memory) or :meth:`KeptLaunch.run_device` (device pointers), which checks what depends
on those operands and nothing else, before anything is written:

* overlap: the operands the full path requires apart (:mod:`simt_pto.aliasing`) share no byte;
* alignment: a 16-bit float Add's table starts on a 4-byte boundary where its launch takes whole words;
* the index values: narrowed as the full path narrows them (:func:`~.arrays.checked_indices`) and, under a policy
  that leaves out-of-range indices undefined, in range (on the device, by the device scan; where a launch checks the
  range itself, as the Conflict::Last claim does with its ``refused`` flags, right after that launch, before any
  launch writes the table).

A call that fails a check gets False (or None) and nothing written: the caller takes the full path, which raises its
one refusal. :func:`whole_operands` turns a whole-array call's host operands (numpy arrays, PyTorch CPU tensors, JAX
arrays, any other host producer of DLPack or the array interface: those a kept launch takes as they are; a copy due
takes the full path) into its
:class:`~simt_pto.call.Call` and the memory the launches take, leaving to the full path every tensor torch's rules
(:mod:`simt_pto.torch_rules`) treat apart; :func:`device_operands` does the same for device arrays.
"""
from __future__ import annotations

import ctypes
import functools
import sys
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from simt_pto import backend as _backend
from simt_pto import torch_rules
from simt_pto.aliasing import ranges_overlap
from simt_pto.backend import imported
from simt_pto.call import Call, Operand, Policy
from simt_pto.enums import BLayout, Coalesce
from simt_pto.launch_spec import CallPlan, LaunchSpec
from simt_pto.plan import SIGNATURES, SMALL_INDEX_COUNT, CallCache, Plan

from . import tuning
from .arrays import (FOREIGN, JAX, NUMPY, TORCH, aligned_empty, checked_indices, host_memory, jax_result,
                     new_device_array, torch_result)

_UINT32 = np.dtype(np.uint32)
_new = tuple.__new__
_may_share_memory = getattr(np.may_share_memory, "_implementation", np.may_share_memory)
"""``np.may_share_memory`` without numpy's ``__array_function__`` dispatch (NEP 18's ``_implementation``: the C
function itself; a Python frame less, 0.3 µs of a repeated scatter): the kept launch's operands are ndarrays."""
_view = np.ndarray.view


class KeptLaunch:
    """The launches of one call signature, bound once (in the manner of a prepared statement: every argument but the
    operands fixed), run on each later call's own operands.

    * ``steps``: ``(launch, views)`` in order; ``launch(*arrays)`` takes the arrays named by ``views`` (host:
      ``(name, dtype)`` pairs, each array viewed as that dtype, or passed as it is where the dtype is None: an
      operand in the launch's dtype, or one its launcher reads as that dtype itself; device: names, each given as
      a data pointer).
    * ``made``: arrays each call makes afresh: ``name -> (size, dtype)`` (a gather's output; the Conflict::Last
      owners, from a one-array pool (:data:`_SPARE_OWNER`), and ``refused`` flags, zeroed).
    * ``apart``: pairs of operand names that may share no byte.
    * ``indices``: ``indices(arrays)``: puts the index bits the launches take in ``arrays["idx"]`` and says whether
      the call may run (False: an index the full path refuses, or one it must look at).
    * ``checked_by``: the step after which the ``refused`` flags are read (a launch that checks the range itself).
    * ``aligned_to``: the table's start address must be a multiple of it (a 16-bit float Add's whole-word form).
    * ``result_alignment``: the byte boundary ``"dst"`` is made at (0: wherever numpy puts it;
      :func:`.arrays.aligned_empty`): a JAX table's large result, which JAX then takes without a copy.
    * ``scan``: on the device, the index scan (:class:`~simt_pto.kernels.a5.direct_launch.IndexScan`) or None.
    """

    __slots__ = ("steps", "made", "apart", "indices", "checked_by", "aligned_to", "scan", "device", "_makers",
                 "_viewed", "_spare_owner", "_early_wake")

    def __init__(self, steps: tuple, *, made: dict | None = None, apart: tuple = (), indices: Callable | None = None,
                 checked_by: int | None = None, aligned_to: int = 1, result_alignment: int = 0, scan: Any = None,
                 device: bool = False):
        self.steps, self.made, self.apart, self.indices = steps, made or {}, apart, indices
        self.checked_by, self.aligned_to, self.scan, self.device = checked_by, aligned_to, scan, device
        # how each made array is made: the owners from the pool (every launch's reset marks them unowned), the
        # refused flags zeroed, anything else (a gather's output, which its launch writes whole) uninitialised
        # (a result at the boundary asked for, by its own maker)
        aligned = functools.partial(aligned_empty, alignment=result_alignment) if result_alignment else np.empty
        self._makers = tuple([(name, _take_owner if name == "owner" else np.zeros if name == "refused" else
                               aligned if name == "dst" else np.empty, size, dtype)
                              for name, (size, dtype) in self.made.items()])
        self._viewed = () if device else self._host_steps()
        # the helper threads of the first launch on several threads (its launcher's ``early_wake``, simt.EarlyWake),
        # woken as the call starts, so that their wake-up overlaps the call's checks, its result's making and the
        # launches before it
        self._early_wake = None if device or not tuning.current().early_wake_helpers else next(
            (launch.early_wake for launch, _ in steps if hasattr(launch, "early_wake")), None)
        self._spare_owner: list = []  # the device owner array of the last call that finished (at most one)

    # -- binding ---------------------------------------------------------------------------------------------

    @classmethod
    def of(cls, call: CallPlan, operands: dict[str, np.ndarray], launcher: Callable, *, made: tuple[str, ...] = (),
           made_as: dict[str, tuple[int, np.dtype]] | None = None, apart: tuple = (), indices: Callable | None = None,
           aligned_to: int = 1, result_alignment: int = 0, launcher_reads_as: bool = False) -> KeptLaunch | None:
        """The kept launches of ``call``, a plan that has just run on the ``multicore`` backend over the host arrays
        ``operands`` (by the names its launches give them; each launch must take each operand whole), each bound by
        ``launcher(spec, names)`` (:func:`simt_pto.kernels.a5.simt.multicore_launcher`, which the A5 runtime passes:
        this module imports no kernel), or None for a plan that cannot be repeated so: a host step or a guard, an
        array argument that is neither an operand nor ``made`` (``"dst"``, ``"owner"``, ``"refused"``), a float32
        Max / Min's pair of table views. ``made_as``: ``name -> (size, dtype)`` of a made array each call makes
        otherwise than its launches take it (the same bytes: a gather's result in its own dtype, which each launch
        views as it took it). ``result_alignment``: as the class takes it. ``launcher_reads_as``: ``launcher`` takes a
        ``reads_as`` argument (:func:`simt_pto.kernels.a5.simt.multicore_launcher`'s): each array a call hands in a
        dtype of its own but of the launch's element size (a float32 table where the kernel moves uint32 bits) is
        passed as it is, and the launcher reads it as the launch's dtype; otherwise run() views it."""
        if call.guard_name is not None or not call.steps:
            return None
        sizes: dict[str, tuple[int, np.dtype]] = {}
        steps, checked_by = [], None
        for spec in call.steps:
            if not isinstance(spec, LaunchSpec):  # a host step
                return None
            views = []
            for name, value in spec.args:
                if isinstance(value, tuple):  # the float32 Max / Min (int32, uint32) pair
                    return None
                if not isinstance(value, np.ndarray):
                    continue
                if name in operands:
                    whole = operands[name]
                    if value.nbytes != whole.nbytes or _address(value) != _address(whole):
                        return None
                elif name in made and sizes.setdefault(name, (value.size, value.dtype)) == (value.size, value.dtype):
                    if name == "refused" and checked_by is None:
                        checked_by = len(steps)  # the launch that sets the flags
                else:
                    return None
                views.append((name, np.dtype(value.dtype)))
            # the arrays a call hands over in the dtype the launch takes go last, where run() passes them unviewed;
            # before them those the launcher reads as the launch's dtype (their dtype None: run() passes them too)
            viewed, read_as, passed, handed = [], [], [], []
            for name, dtype in views:
                bits_given = name == "idx" and indices is not None and getattr(indices, "gives_bits", True)
                have = (made_as[name][1] if made_as and name in made_as else dtype) if name in made else (
                    _UINT32 if bits_given else operands[name].dtype)
                if name in made and have == dtype or bits_given:
                    handed.append((name, dtype))
                elif have == dtype:  # an operand in the launch's own dtype: passed as it is
                    passed.append((name, None))
                elif launcher_reads_as and have.itemsize == dtype.itemsize:
                    read_as.append((name, dtype))
                    passed.append((name, None))
                else:
                    viewed.append((name, dtype))
            views = viewed + passed + handed
            names = tuple(name for name, _ in views)
            launch = launcher(spec, names, reads_as=tuple(read_as)) if read_as else launcher(spec, names)
            if launch is None:
                return None
            steps.append((launch, tuple(views)))
        if made_as:
            sizes.update(made_as)
        return cls(tuple(steps), made=sizes, apart=apart, indices=indices, checked_by=checked_by,
                   aligned_to=aligned_to, result_alignment=result_alignment)

    def _host_steps(self) -> tuple:
        """The host steps as run() takes them: ``(launch, names, dtypes, as_they_are)``. ``names`` are viewed as
        ``dtypes`` (each a C call); ``as_they_are``, the launch's last arguments, are passed as they are: the index
        bits ``indices`` makes (uint32), the arrays the call makes in the launch's own dtype, and the operands
        :meth:`of` marked so (dtype None)."""
        given = {"idx": _UINT32} if self.indices is not None and getattr(self.indices, "gives_bits", True) else {}
        for name, (_, dtype) in self.made.items():
            given[name] = dtype
        host = []
        for launch, views in self.steps:  # (loops and zip, no comprehension: a first call's trace counts frames)
            cut = len(views)
            while cut and (views[cut - 1][1] is None or given.get(views[cut - 1][0]) == views[cut - 1][1]):
                cut -= 1
            names, dtypes = zip(*views) if views else ((), ())
            host.append((launch, names[:cut], dtypes[:cut], names[cut:]))
        return tuple(host)

    # -- running ---------------------------------------------------------------------------------------------

    def run(self, arrays: dict[str, np.ndarray]) -> bool:
        """Run the kept launches on ``arrays`` (the call's operands by name, host memory; the ``made`` arrays are
        added, a gather's output among them) and return True; False, having written nothing the caller owns, for a
        call whose checks send it to the full path."""
        if self._early_wake is None:
            return self._run(arrays)
        early = self._early_wake()
        try:
            early.wake()
            return self._run(arrays)
        finally:
            early.release()

    def _run(self, arrays: dict[str, np.ndarray]) -> bool:
        for a, b in self.apart:
            if _may_share_memory(arrays[a], arrays[b]):  # numpy's bounds check, in C (aliasing.may_overlap's)
                return False
        if self.aligned_to > 1 and _address(arrays["table"]) % self.aligned_to:
            return False
        if self.indices is not None and not self.indices(arrays):
            return False
        for name, make, size, dtype in self._makers:
            arrays[name] = make(size, dtype)
        # each launch's arrays viewed as it takes them, by C calls alone (a comprehension is a Python frame per step)
        get = arrays.__getitem__
        if self.checked_by is None:
            for launch, names, dtypes, as_they_are in self._viewed:
                if launch(*map(_view, map(get, names), dtypes), *map(get, as_they_are)) is False:
                    return False  # a gather's launch that met an index past the table (its output is dropped)
        else:
            for at, (launch, names, dtypes, as_they_are) in enumerate(self._viewed):
                launch(*map(_view, map(get, names), dtypes), *map(get, as_they_are))
                if at == self.checked_by and arrays["refused"].any():
                    return False  # an index past the table: the full path refuses the call (only owners written)
        if "owner" in self.made:
            _keep_owner(arrays["owner"])
        return True

    def run_device(self, pointers: dict[str, tuple[int, int]], template: Any) -> Any | None:
        """Run the kept launches on device operands (``name -> (data pointer, bytes)``), in order; a gather's output
        is a new device array of ``template``'s library, returned (a scatter returns True). The Conflict::Last owner
        path's owner array is made on the device for the call, or is the spare the last call of this launch left
        (its reset launch marks every owner unowned: nothing of a call before is read); two calls at once never
        share one. None: the call takes the full path (operands that share bytes, an index the device scan finds
        out of range), nothing written."""
        for a, b in self.apart:
            (at_a, size_a), (at_b, size_b) = pointers[a], pointers[b]
            if ranges_overlap((at_a, at_a + size_a), (at_b, at_b + size_b)):
                return None
        if self.scan is not None and self.scan.out_of_range(pointers["idx"][0]):
            return None
        out = owner = None
        if "dst" in self.made:
            size, dtype = self.made["dst"]
            out = new_device_array(template, size)
            pointers = {**pointers, "dst": (out.__cuda_array_interface__["data"][0], 0)}
        if "owner" in self.made:
            try:
                owner = self._spare_owner.pop()  # (atomic: a call running beside this one makes its own)
            except IndexError:
                size, dtype = self.made["owner"]
                owner = new_device_array(template, size, dtype)
            pointers = {**pointers, "owner": (owner.__cuda_array_interface__["data"][0], 0)}
        for launch, names in self.steps:
            launch(*[pointers[name][0] for name in names])
        imported("numba.cuda").synchronize()  # the GPU backend: numba.cuda is in real mode; the call returns when done
        if owner is not None and not self._spare_owner:
            self._spare_owner.append(owner)
        return True if out is None else out


# -- a tile op's operands and checks ----------------------------------------------------------------------------

def tile_operands(op: str, tile, table, idx) -> dict:
    """A tile op's operands as its launches name them: the data tile's and the index tile's storage, the table's
    memory (flat: a C-contiguous array's ``ravel`` is a view)."""
    return {"dst" if op == "MGATHER" else "src": tile.data, "idx": idx.data, "table": table.array.ravel()}


def tile_checks(plan) -> dict:
    """The per-call checks of a tile op's kept launch (``apart``, ``indices`` of :class:`KeptLaunch`), for any target:

    * overlap (:mod:`simt_pto.aliasing`; :func:`simt_pto.ub.check_distinct_storage`): an MGATHER's destination
      against its index tile and its table, an MSCATTER's table against both tiles and its tiles against each other;
    * the index values (:func:`simt_pto.plan.check_oob`), under a policy that leaves out-of-range ones undefined:
      the Row walk's indices, or the valid region of an Elem index tile."""
    signature, op = plan.signature, plan.op
    data = "dst" if op == "MGATHER" else "src"
    apart = (((data, "idx"), (data, "table")) if op == "MGATHER" else
             (("table", data), ("table", "idx"), (data, "idx")))
    if not signature.checks_range:
        return {"apart": apart, "indices": None}
    rows, cols, capacity = plan.rows, plan.cols, signature.capacity
    if plan.coalesce == Coalesce.ROW:
        walk = slice(0, rows * plan.idx_step, plan.idx_step)

        def index_bits(bits):
            return bits[walk]
    else:
        padded, row_major = (plan.idx.rows, plan.idx.cols), plan.idx.blayout == BLayout.ROW_MAJOR

        def index_bits(bits):
            grid = bits.reshape(padded) if row_major else bits.reshape(padded[::-1]).T
            return grid[:rows, :cols]

    def indices(arrays: dict) -> bool:
        bits = arrays["idx"] = arrays["idx"].view(_UINT32)  # (the launches take the tile's storage as its bits)
        return all_below(index_bits(bits), capacity)
    return {"apart": apart, "indices": indices}


# -- a whole-array call: its kept launch, from the API boundary ---------------------------------------------------

class Entry:
    """What the signature cache (:data:`simt_pto.plan.SIGNATURES`) holds for one whole-array :class:`Call`: the
    rows per tile, the call's plan without its arrays (``a5`` / ``a2a3``: the planner's, which holds none; ``cpu``:
    that of one full tile, its table without memory, its tiles over no storage), the tile view's columns
    (:mod:`.in_memory` validates and fills these), and, once a call of the signature has run, its kept launch with,
    for a gather, the result's ``(size, dtype, shape)``."""

    __slots__ = ("tile_rows", "plan", "tile_cols", "kept", "out")

    def __init__(self, tile_rows: int, plan: Plan | None, tile_cols: int):
        self.tile_rows, self.plan, self.tile_cols = tile_rows, plan, tile_cols
        self.kept: KeptLaunch | None = None
        self.out: tuple | None = None


HOST_KEEPING = ("multicore", "simulator")
"""The backends whose kept launches run over host memory (:meth:`KeptLaunch.run`); ``a2a3`` keeps as ``multicore``."""


def keeping_backend(policy: Policy) -> str | None:
    """Where a call of ``policy`` keeps its launches: ``"multicore"`` for ``a2a3`` (its row walk runs on the host
    alike) and for ``a5`` on that backend, ``"gpu"`` for ``a5`` on the GPU; None for the ``cpu`` target, the
    simulator, and an A5 backend not chosen yet (the full path chooses it). Reads the backend the process has
    resolved without resolving it (:func:`simt_pto.backend.a5_backend` runs on the full path)."""
    if policy.target == "a5":
        resolved = _backend._resolved  # (no call: what the repeated call's path reads of the backend)
        return resolved if resolved in HOST_KEEPING or resolved == "gpu" else None
    return "multicore" if policy.target == "a2a3" else None


def gathered(policy: Policy, table, idx) -> Any | None:
    """The result of a whole-array gather whose signature has run, from its kept launch (an array of the table's
    kind); None when the call takes the full path: no kept launch, or a check it fails (the full path then raises
    its refusal)."""
    keeps = _backend._resolved if policy.target == "a5" else "multicore" if policy.target == "a2a3" else None
    if keeps in HOST_KEEPING:  # (keeping_backend, inline: this runs on every repeated call)
        found = whole_operands(policy, table, idx)
        if found is None:
            return None
        key, arrays = found
        entry = SIGNATURES.lookup(key)
        if entry is None or entry.kept is None or not entry.kept.run(arrays):
            return None
        result = arrays["dst"].reshape(entry.out[2])  # (made in the result's dtype)
        kind = key.operands[0].kind
        if kind == NUMPY or kind == FOREIGN:  # (another host producer's table gathers into numpy, as on the full path)
            return result
        if kind == TORCH:  # (the caller's table is a tensor: torch is imported already)
            return torch_result(result, table.dtype)
        return jax_result(result)  # (made for this call: JAX may keep its memory)
    if keeps == "gpu":
        found = device_operands(policy, table, idx)
        entry = None if found is None else SIGNATURES.lookup(found[0])
        if entry is not None:
            result = entry.kept.run_device(found[1], table)
            return None if result is None else result.reshape(entry.out[2])
    return None


def gathered_into(policy: Policy, table, idx, out) -> bool:
    """Whether a whole-array gather into the caller's ``out`` whose signature has run was run by its kept launch
    (``a5`` on a host backend, ``a2a3``; a numpy or PyTorch ``out``, :func:`into_operands`, written in place; a
    tensor's version counter bumped once the launch may have written). False, with nothing written,
    when the call takes the full path (no kept launch; ``out`` sharing memory with the table or the index; an index
    the full path refuses, checked before the launch: ``out`` is the caller's, so no launch may start first)."""
    keeps = _backend._resolved if policy.target == "a5" else "multicore" if policy.target == "a2a3" else None
    if keeps not in HOST_KEEPING:
        return False
    found = into_operands(policy, table, idx, out)
    if found is None:
        return False
    # the caller's out is memory other calls may write too: its stores registered as a composing writer, so that a
    # plain read-modify-write of it (kernels/writers.py) never runs beside them and loses them
    return imported("simt_pto.kernels.writers").write_shared(found[1]["dst"], _run_kept, found, out, -1)


def into_operands(policy: Policy, table, idx, out) -> tuple[Call, dict[str, np.ndarray]] | None:
    """``(call, arrays)`` of a whole-array gather into ``out`` that a kept launch can take (:func:`whole_operands`'
    call with ``out`` as a third operand, and ``out``'s memory as ``arrays["dst"]``), or None (the full path): a
    numpy array or a PyTorch CPU tensor that :func:`_host_operand` takes as a written operand (C-contiguous and
    writable; a tensor without grad, not an inference tensor, not bfloat16, which numpy cannot view)."""
    got_out = _host_operand(out, written=True, aligned=addresses_matter(policy))
    if got_out is None or got_out[0].kind not in (NUMPY, TORCH):  # (another producer's out: the full path)
        return None
    found = whole_operands(policy, table, idx)
    if found is None:
        return None
    call, arrays = found
    arrays["dst"] = got_out[1]
    return _new(Call, (policy, (*call.operands, got_out[0]))), arrays


def scattered(policy: Policy, table, src, idx) -> bool:
    """Whether a whole-array scatter whose signature has run was run by its kept launch (``a5``; ``a2a3``: its loop
    over every row in order); False, with nothing written, when the call takes the full path.
    A PyTorch table goes through torch's in-place rules first and has its version counter bumped once the launch
    may have written."""
    keeps = _backend._resolved if policy.target == "a5" else "multicore" if policy.target == "a2a3" else None
    if keeps in HOST_KEEPING:  # (keeping_backend, inline, as in gathered)
        # (a PyTorch table: its in-place rules checked in whole_operands)
        return _run_kept(whole_operands(policy, table, idx, src), table, 0)
    if keeps == "gpu":
        found = device_operands(policy, table, idx, src)
        entry = None if found is None else SIGNATURES.lookup(found[0])
        if entry is None:
            return False
        if torch_rules.torch_of(table) is None:
            return entry.kept.run_device(found[1], table) is not None
        torch_rules.check_write(table, "table", "MSCATTER", "a5")  # torch's in-place rules, then the bump
        return _bumping(table, lambda: entry.kept.run_device(found[1], table) is not None)
    return False


def _run_kept(found: tuple[Call, dict[str, np.ndarray]] | None, written, written_at: int) -> bool:
    """Whether the kept launch of ``found`` (``(call, arrays)`` of host memory; None: the full path) ran: False, with
    nothing written, where the signature has none or a per-call check fails. ``written``, the call's operand at
    ``written_at`` (a scatter's table, a gather's ``out``), has its version counter bumped where it is a PyTorch
    tensor, once the launch may have written."""
    if found is None:
        return False
    key, arrays = found
    entry = SIGNATURES.lookup(key)
    if entry is None or entry.kept is None:
        return False
    if key.operands[written_at].kind != TORCH:
        return entry.kept.run(arrays)
    return _bumping(written, lambda: entry.kept.run(arrays))


def _bumping(tensor, run: Callable[[], bool]) -> bool:
    """``run()``, which writes ``tensor``'s memory unless it returns False (before anything is written), and the
    tensor's version counter bumped once it may have written (also when it raises: Ctrl-C mid-launch)."""
    wrote = True
    try:
        wrote = run()
        return wrote
    finally:
        if wrote:
            torch_rules.bump_version(tensor)


# -- a whole-array call's operands -----------------------------------------------------------------------------

def addresses_matter(policy: Policy) -> bool:
    """Whether a call of ``policy`` is planned by its operands' addresses (modulo 8, :class:`~simt_pto.call.Operand`'s
    ``align``): on ``a5``, whose Row copy's move unit and 16-bit float Add's word form depend on them, and on
    ``cpu``; not on ``a2a3``, whose loops move elements one by one whatever the address (so its signature reads no
    address, a C call less per operand on every call)."""
    return policy.target != "a2a3"


def _host_operand(obj, written: bool, aligned: bool = True) -> tuple[Operand, np.ndarray] | None:
    """``(signature fields, flat C-contiguous native numpy view of its memory)`` of a host operand a kept launch can take
    as it is, or None (a call that takes the full path: a copy, a conversion or a refusal may be due). ``aligned``:
    the plan depends on its address modulo 8 (a table or a source; not an index array)."""
    if type(obj) is np.ndarray:
        if not obj.flags.c_contiguous or not obj.dtype.isnative or not obj.size:
            return None
        if written and not obj.flags.writeable:
            return None
        flat = obj.ravel()
        return (_new(Operand, (NUMPY, obj.shape, obj.dtype, obj.flags.writeable, _address(flat) & 7 if aligned else 0)),
                flat)
    if not written and type(obj).__module__.startswith("jax"):
        try:
            view = np.asarray(obj)  # a JAX CPU array's own memory, read-only; a deleted one raises
        except Exception:  # noqa: BLE001 - not on the CPU, or not an array: the full path decides
            return None
        if not view.flags.c_contiguous or not view.size:
            return None
        return (_new(Operand, (JAX, view.shape, view.dtype, False, _jax_alignment(obj, view) if aligned else 0)),
                view if view.ndim == 1 else view.ravel())
    torch = sys.modules.get("torch")  # (a tensor exists only in a process that has imported torch)
    if torch is not None and isinstance(obj, torch.Tensor):
        # one C call tells a plain dense CPU tensor from every tensor torch_rules treats apart (a lazy negation or
        # conjugation, a zero tensor, meta / sparse / quantized / nested, an inference tensor, FakeTensor and the
        # torch.func wrappers): their dispatch keys differ; a tensor that requires grad takes the full path too,
        # which applies torch's rules (a read refused under grad mode, a write refused as index_put_ refuses it),
        # and so does any tensor while a forward-AD level is open (a dual tensor has a plain tensor's keys)
        plain, keys = torch_rules.PLAIN_KEYS or torch_rules.plain_keys(torch)
        if (obj.requires_grad or keys is None or keys(obj) != plain or not obj.is_contiguous()
                or torch.autograd.forward_ad._current_level >= 0):  # (torch_rules.forward_ad_active, inline)
            return None
        try:
            view = obj.numpy()  # shares the memory (no bfloat16: numpy has no such dtype, the full path reads it)
        except (TypeError, RuntimeError):
            return None
        if not view.size:
            return None
        return (_new(Operand, (TORCH, view.shape, view.dtype, True, obj.data_ptr() & 7 if aligned else 0)),
                view if view.ndim == 1 else view.ravel())
    if ((hasattr(obj, "__dlpack__") or hasattr(obj, "__array_interface__"))
            and type(obj).__module__.partition(".")[0] != "dask"):  # (a Dask array is never read here: the Dask route)
        # any other host producer (DLPack, the array interface): its memory as the full path reads it, in place
        try:
            view, kind = host_memory(obj, "operand")
        except (TypeError, ValueError, BufferError):  # the full path raises its refusal
            return None
        if kind != FOREIGN or not view.flags.c_contiguous or not view.size or not view.dtype.isnative:
            return None
        if written and not view.flags.writeable:
            return None
        flat = view.ravel()
        return (Operand(FOREIGN, view.shape, view.dtype, view.flags.writeable, _address(flat) & 7 if aligned else 0),
                flat)
    return None


def whole_operands(policy: Policy, table, idx, src=None) -> tuple[Call, dict[str, np.ndarray]] | None:
    """``(call, arrays)`` of a whole-array call on host operands a kept launch can take as they are (``arrays``:
    ``"table"``, ``"idx"``, for a scatter ``"src"``: numpy views of the callers' memory), or None (the full path)."""
    aligned = policy.target != "a2a3"  # (addresses_matter, inline)
    if type(table) is np.ndarray and type(idx) is np.ndarray and src is None:  # the commonest call, inline
        flags = table.flags
        if not (flags.c_contiguous and idx.flags.c_contiguous and table.dtype.isnative and table.size and idx.size):
            return None
        flat = table.ravel()  # (1-D: its address read by the compiled reader of its element size, _address inline)
        # (tuple.__new__: the named tuples' own constructors are Python code, and this runs on every call)
        return (_new(Call, (policy, (_new(Operand, (NUMPY, table.shape, table.dtype, flags.writeable,
                                                     (_ADDRESS_READERS.get(flat.itemsize) or _address)(flat) & 7
                                                     if aligned else 0)),
                                     _new(Operand, (NUMPY, idx.shape, idx.dtype, True, 0))))),
                {"table": flat, "idx": idx if idx.ndim == 1 else idx.ravel()})
    if type(table) is np.ndarray and type(src) is np.ndarray and type(idx) is np.ndarray:  # a numpy scatter, inline
        flags, src_flags = table.flags, src.flags
        if not (flags.c_contiguous and flags.writeable and src_flags.c_contiguous and idx.flags.c_contiguous
                and table.dtype.isnative and src.dtype.isnative and table.size and src.size and idx.size):
            return None
        flat_table, flat_src = table.ravel(), src.ravel()
        readers = _ADDRESS_READERS  # (_address, inline, as in the gather's case)
        return (_new(Call, (policy, (_new(Operand, (NUMPY, table.shape, table.dtype, True,
                                                     (readers.get(flat_table.itemsize) or _address)(flat_table) & 7
                                                     if aligned else 0)),
                                     _new(Operand, (NUMPY, src.shape, src.dtype, src_flags.writeable,
                                                    (readers.get(flat_src.itemsize) or _address)(flat_src) & 7
                                                    if aligned else 0)),
                                     _new(Operand, (NUMPY, idx.shape, idx.dtype, True, 0))))),
                {"table": flat_table, "src": flat_src, "idx": idx if idx.ndim == 1 else idx.ravel()})
    torch = sys.modules.get("torch")
    if torch is not None and type(table) is torch.Tensor and type(idx) is torch.Tensor:
        # (the checks of _host_operand, inline: a PyTorch call's per-call cost is mostly these). A tensor the call
        # only reads needs numpy() alone: it refuses every tensor whose memory does not hold its values as they
        # read (a lazy conjugation or negation, a zero tensor, meta, sparse, quantized and nested tensors, the
        # torch.func wrappers, which have no storage), one that requires grad, and bfloat16 (no numpy dtype); an
        # inference tensor is read as any other. The table a scatter writes must also not be an inference tensor
        # (the full path refuses it outside torch.inference_mode(), as torch refuses writing one: one C call, a
        # quarter of its dispatch keys' read). Each view's flags then say whether its memory is C-contiguous. While a
        # forward-AD level is open, any tensor may be dual (numpy() takes one): the full path applies torch's rules.
        if src is not None and table.is_inference() or torch.autograd.forward_ad._current_level >= 0:
            # (torch_rules.forward_ad_active, inline: a function call is a tenth of a repeated call's extra cost)
            return None
        try:
            table_view, idx_view = table.numpy(), idx.numpy()
        except (TypeError, RuntimeError):
            return None
        if not (table_view.flags.c_contiguous and idx_view.flags.c_contiguous and table_view.size and idx_view.size):
            return None
        table_operand = _new(Operand, (TORCH, table_view.shape, table_view.dtype, True,
                                       table.data_ptr() & 7 if aligned else 0))
        idx_operand = _new(Operand, (TORCH, idx_view.shape, idx_view.dtype, True, 0))
        if src is None:
            return (_new(Call, (policy, (table_operand, idx_operand))),
                    {"table": table_view.ravel(), "idx": idx_view if idx_view.ndim == 1 else idx_view.ravel()})
        if type(src) is not torch.Tensor:
            return None
        try:
            src_view = src.numpy()
        except (TypeError, RuntimeError):
            return None
        if not (src_view.flags.c_contiguous and src_view.size):
            return None
        return (_new(Call, (policy, (table_operand,
                                     _new(Operand, (TORCH, src_view.shape, src_view.dtype, True,
                                                    src.data_ptr() & 7 if aligned else 0)),
                                     idx_operand))),
                {"table": table_view.ravel(), "src": src_view.ravel(), "idx": idx_view.ravel()})
    got_table = _host_operand(table, written=src is not None, aligned=aligned)
    if got_table is None:
        return None
    got_idx = _host_operand(idx, False, aligned=False)
    if got_idx is None:
        return None
    if src is None:
        return Call(policy, (got_table[0], got_idx[0])), {"table": got_table[1], "idx": got_idx[1]}
    got_src = _host_operand(src, False, aligned=aligned)
    if got_src is None:
        return None
    return (Call(policy, (got_table[0], got_src[0], got_idx[0])),
            {"table": got_table[1], "src": got_src[1], "idx": got_idx[1]})


_JAX_ALIGNMENT: dict = {}
"""``id(array) -> (weak reference, address modulo 8)`` of the JAX CPU arrays whose numpy view is their own buffer
(:func:`_jax_alignment`); an entry leaves when its array dies. Only the address is kept, never the view: a view
held past the call would stop JAX from donating the array's buffer to a jitted call."""


def _jax_alignment(array, view: np.ndarray) -> int:
    """The address modulo 8 of a JAX array's numpy ``view`` (``np.asarray(array)``). Reading it through ``.ctypes``
    costs more than the rest of a JAX operand; a JAX array is immutable and its buffer never moves, so where the view
    is that buffer itself (a CPU array: no copy) the answer is kept for the array's lifetime. A view that is a copy
    (an array on another device) is asked each time."""
    got = _JAX_ALIGNMENT.get(id(array))
    if got is not None and got[0]() is array:
        return got[1]
    address = view.ctypes.data  # (a read-only view: _address would reach .ctypes only after an exception)
    try:
        own = array.unsafe_buffer_pointer() == address
    except Exception:  # noqa: BLE001 - no single buffer (a sharded array), or no such method: ask each time
        own = False
    if own:
        if len(_JAX_ALIGNMENT) >= 4096:  # (a bound: entries of live arrays only, but a program may keep many)
            _JAX_ALIGNMENT.clear()
        key = id(array)

        def forget(ref, key=key):
            if _JAX_ALIGNMENT.get(key, (None,))[0] is ref:
                _JAX_ALIGNMENT.pop(key, None)
        try:
            _JAX_ALIGNMENT[key] = (weakref.ref(array, forget), address & 7)
        except TypeError:  # an array type without weak references: ask each time
            pass
    return address & 7


def _device_operand(obj) -> tuple[Operand, int, int] | None:
    """``(signature fields, data pointer, bytes)`` of a non-empty C-contiguous device array whose
    ``__cuda_array_interface__`` names no stream of its own (none, or the legacy default stream: the one the
    launches use), else None."""
    if isinstance(obj, np.ndarray):
        return None
    if torch_rules.torch_of(obj) is not None and not torch_rules.read_in_place(obj):
        return None  # a lazy view (x.conj().imag), a tensor that requires grad: read as the full path reads it
    try:
        info = obj.__cuda_array_interface__
    except Exception:  # noqa: BLE001 - no device array, or one the full path refuses
        return None
    shape, (pointer, read_only) = tuple(info["shape"]), info["data"]
    if info.get("strides") is not None or info.get("stream") not in (None, 1) or not pointer:
        return None
    size = np.dtype(info["typestr"]).itemsize * int(np.prod(shape, dtype=np.int64))
    return Operand("device", shape, (type(obj), info["typestr"]), not read_only, pointer & 7), pointer, size


def device_operands(policy: Policy, table, idx, src=None) -> tuple[Call, dict[str, tuple[int, int]]] | None:
    """``(call, pointers)`` of a whole-array call on device arrays (``pointers``: ``name -> (data pointer, bytes)``),
    or None for a call that takes the full path (int32 / uint32 indices only: others are narrowed on the host)."""
    names = ("table", "idx") if src is None else ("table", "src", "idx")
    found = [_device_operand(a) for a in ((table, idx) if src is None else (table, src, idx))]
    if any(f is None for f in found) or found[-1][0].dtype[1][1:] not in ("i4", "u4"):
        return None
    return (Call(policy, tuple(f[0] for f in found)),
            {name: (pointer, size) for name, (_, pointer, size) in zip(names, found)})


def whole_indices(plan, checks_range: bool = True, idx_dtype: np.dtype | None = None,
                  read_as_bits: bool = False, launch_masks: bool = False) -> Callable[[dict], bool] | None:
    """A whole-array call's index step: the caller's index array, narrowed as the full path narrows it, as flat
    uint32 bits in ``arrays["idx"]``; False under a policy that leaves out-of-range indices undefined when one is out
    of range (unless a launch checks the range itself: ``checks_range=False``). ``idx_dtype``: the signature's index
    dtype (a numpy dtype: every call of the signature has it, it is part of the key), when known.

    Under such a policy, unless ``launch_masks``, the launches read a private copy of the indices, made before any
    is checked (:func:`_private`): the indices checked are the indices used, whoever writes the caller's array
    meanwhile (another thread's call that scatters into it), so no index past the table is read or written through.
    ``launch_masks``: no copy; the launches read each index once and never past the table (the ``multicore``
    kernels and the A2/A3 loops, compiled with :func:`simt_pto.kernels.index_policy.read_once`'s rule: an index that
    changes after the check reads and writes a table element, or nothing, never memory outside the table).

    ``read_as_bits``: the launches read int32 / uint32 indices as their uint32 bits themselves (a ``multicore``
    launcher's ``reads_as``, :meth:`KeptLaunch.of`; its kernels read each index once, so ``launch_masks`` too): for
    such indices the step leaves them in their dtype and only checks their range (by :data:`_INDEX_RANGE_CHECK`, which
    reads them as uint32 bits), or is None where there is no range to check."""
    check = checks_range and plan.checks_range
    # (checked here or by a launch: either way the launches read what was checked)
    private = plan.checks_range and not launch_masks
    op, target, capacity = plan.op, plan.target, plan.capacity
    if read_as_bits and idx_dtype is not None and _as_bits(idx_dtype):
        if private:
            raise ValueError("whole_indices: read_as_bits is the multicore launchers' form, whose kernels read each "
                             "index once (launch_masks)")
        if not check:
            return None

        def in_range(arrays: dict) -> bool:
            idx = arrays["idx"]  # (flat: whole_operands' view of the caller's)
            return _INDEX_RANGE_CHECK[0](idx, 0, idx.size, capacity)
        setattr(in_range, "gives_bits", False)  # (KeptLaunch.of: the indices stay in the caller's dtype)  # noqa: B010
        return in_range
    if idx_dtype is not None and _as_bits(idx_dtype):
        # int32 / uint32 indices are their bits as they are: the step below without its dtype tests (on every call)
        if not check:
            def as_bits(arrays: dict) -> bool:
                bits = arrays["idx"].view(_UINT32)
                arrays["idx"] = _private(bits) if private else bits
                return True
            return as_bits

        def bits_below(arrays: dict) -> bool:
            bits = arrays["idx"].view(_UINT32)  # (flat: whole_operands' view)
            if private:
                bits = _private(bits)
            arrays["idx"] = bits
            if bits.size <= SMALL_INDEX_COUNT:  # (all_below, inline)
                return bits.size == 0 or max(bits.tolist()) < capacity
            return int(bits.max()) < capacity
        return bits_below

    def indices(arrays: dict) -> bool:
        raw = arrays["idx"]
        if not _as_bits(raw.dtype):  # (int32 / uint32 need no narrowing: any other dtype is narrowed into a copy)
            raw = checked_indices(raw, op, target)
        elif private:
            raw = _private(raw)
        bits = arrays["idx"] = raw.view(_UINT32)  # (flat and C-contiguous: a view)
        return not check or all_below(bits, capacity)
    return indices


_private = np.ndarray.copy
"""The private copy of a call's indices that its checks and its launches read, under a policy that refuses
out-of-range indices, where the launches would read an unchecked index as it is (:func:`whole_indices`: the CUDA
simulator's)."""


def _uint32_bits_below(bits: np.ndarray, lo: int, hi: int, capacity: int) -> bool:
    """Whether every one of ``bits[lo:hi]``, 4-byte indices read as their uint32 bits, is below ``capacity`` (what
    :data:`_INDEX_RANGE_CHECK` holds until the A5 runtime hands over the compiled one, ``simt._bits_below``'s
    entry)."""
    return hi <= lo or all_below(bits[lo:hi].view(_UINT32), capacity)


_INDEX_RANGE_CHECK: list = [_uint32_bits_below]
"""``[below]``: the index step's range check (``below(bits, lo, hi, capacity)``, 4-byte indices read as uint32
bits): :func:`_uint32_bits_below`, until :func:`check_index_ranges_with` hands over the kernels' compiled one (this module
imports no kernel)."""


def check_index_ranges_with(below) -> None:
    """Check a whole-array call's int32 / uint32 index range with ``below`` from now on (:data:`_INDEX_RANGE_CHECK`;
    None: keep the one in use)."""
    if below is not None:
        _INDEX_RANGE_CHECK[0] = below


def _as_bits(dt: np.dtype) -> bool:
    """Whether indices of ``dt`` are read as their uint32 bits as they are (int32 / uint32, native byte order)."""
    return dt.itemsize == 4 and dt.kind in "iu" and dt.isnative


def all_below(bits: np.ndarray, capacity: int) -> bool:
    """Whether every one of the uint32 ``bits`` is below ``capacity`` (:func:`simt_pto.plan.indices_below`, in this
    module so that a kept launch's check runs no other module's code): one pass; a plain ``max`` over a few."""
    if bits.size <= SMALL_INDEX_COUNT:
        return bits.size == 0 or max(bits.tolist() if bits.ndim == 1 else bits.ravel().tolist()) < capacity
    return int(bits.max()) < capacity


def _address(array: np.ndarray) -> int:
    """The address of a numpy array's first element (:func:`.arrays.base_address`, here for the same reason as
    :func:`all_below`): a 1-D array's by the compiled reader of its element size (:data:`_ADDRESS_READERS`), any
    other through ctypes."""
    read = _ADDRESS_READERS.get(array.itemsize) if array.ndim == 1 else None
    if read is not None:
        return read(array)
    try:  # a writable C-contiguous array: read through ctypes' buffer view, a quarter of the cost of .ctypes
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError, BufferError):  # read-only, not C-contiguous, or empty
        return array.ctypes.data


_ADDRESS_READERS: dict = {}
"""``{itemsize: read}``: compiled readers of a 1-D array's address (``simt_pto.kernels.a5.simt.address_readers``,
a quarter of ctypes' cost), handed over by :func:`read_addresses_with` once the first kept launch is made (this
module imports no kernel); empty before that, and where Numba gives none."""


def read_addresses_with(readers: dict) -> None:
    """Read 1-D arrays' addresses with ``readers`` from now on (:data:`_ADDRESS_READERS`)."""
    _ADDRESS_READERS.update(readers)


_SPARE_OWNER = CallCache(maxsize=1)
"""The owner array of the last owner-path scatter that finished, by ``(size, dtype)`` (a pool of one spare array,
not a signature cache): the next call of that size takes it instead of a new one. A new array of that size is fresh
pages, which the reset then faults in one by one: 64M updates into 4M slots have 16 MB of owners. Taking it removes
it, so no two calls share one. Its contents are never read: the reset marks every owner unowned."""


def _take_owner(size: int, dtype: np.dtype) -> np.ndarray:
    owner = _SPARE_OWNER.take((size, dtype))
    return np.empty(size, dtype) if owner is None else owner


def _keep_owner(owner: np.ndarray) -> None:
    _SPARE_OWNER.put((owner.size, owner.dtype), owner)


__all__ = ["Entry", "HOST_KEEPING", "KeptLaunch", "all_below", "check_index_ranges_with", "device_operands", "gathered",
           "gathered_into", "into_operands", "keeping_backend", "read_addresses_with", "scattered", "tile_checks",
           "tile_operands", "whole_indices", "whole_operands"]
