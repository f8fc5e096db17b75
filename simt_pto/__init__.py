"""simt_pto: an emulator of the PTO ISA memory instructions MGATHER and MSCATTER.

Three targets behind one tile / tensor API: ``a5`` (the A5 SIMT kernels, one Numba source compiled for a
CUDA GPU, for the CPU on all cores, or run on Numba's CUDA simulator), ``a2a3`` (the sequential
vector-core paths as Numba-jitted loops) and ``cpu`` (the CPU simulator's reference semantics in numpy,
the golden). ``import simt_pto`` chooses no A5 backend: the first A5 call does (``simt_pto.backend``).

``import simt_pto`` loads the model only (enums, dtypes, tiles, tensors, the reference). The tile ops
(``mgather``, ``mscatter``, ``tload``, ``tstore``: :mod:`simt_pto.host.tile_ops`), the whole-array ops (``gather``,
``scatter``: :mod:`simt_pto.host.whole_array`; ``gather_plan`` / ``scatter_plan``, what they would launch:
:mod:`simt_pto.host.in_memory`) and the tools (``coalescing``, ``inspect_kernel``, ``selftest``:
:mod:`simt_pto.host.tools`) are imported at their first use, by :func:`__getattr__`; this is the one place the
model names the runtime and the tools (the import-linter contracts in pyproject.toml state it). A type checker reads the same names from the
``if TYPE_CHECKING:`` imports below, which never run: it sees their signatures, not ``Any``.
"""
from typing import TYPE_CHECKING

# source_files first: it notes the package's files as the import found them (the kernel cache's reference)
from . import source_files  # noqa: F401  (imported for its moment, not its names)
from .backend import MissingExtraError, a5_backend, a5_backends, set_a5_backend
from . import backend, dtypes, nz, reference
from .dtypes import DType
from .enums import (BLayout, Coalesce, GatherExec, GatherOOB, Layout, ScatterAtomicOp, ScatterConflict,
                    ScatterOOB, SLayout, TileType, TARGETS)
from .errors import ConstraintError, OutOfBoundsError
from .geometry import LaunchGeometry, elem_geometry, last_geometry, row_geometry
from .tensor import GlobalTensor
from .tile import Tile
from ._version import __version__ as __version__  # written once, in _version.py

if TYPE_CHECKING:  # the lazy re-exports below, as a type checker sees them; never imported at run time
    from .host.in_memory import gather_plan, scatter_plan
    from .host.whole_array import gather, scatter
    from .host.tools import coalescing
    from .host.tools.kernel_report import inspect_kernel
    from .host.tools.selftest import selftest
    from .host.tile_ops import mgather, mscatter, tload, tstore


__all__ = [
    "BLayout", "Coalesce", "ConstraintError", "DType", "GatherExec", "GatherOOB", "GlobalTensor", "Layout",
    "LaunchGeometry", "MissingExtraError", "OutOfBoundsError", "SLayout", "ScatterAtomicOp", "ScatterConflict", "ScatterOOB", "TARGETS",
    "Tile", "TileType", "a5_backend", "a5_backends", "coalescing", "dtypes", "elem_geometry", "gather", "gather_plan",
    "inspect_kernel", "last_geometry", "mgather", "mscatter", "nz", "reference", "row_geometry", "scatter",
    "scatter_plan", "selftest", "set_a5_backend", "tload", "tstore",
]

_OPS = ("mgather", "mscatter", "tload", "tstore")
_WHOLE_ARRAY = ("gather", "scatter")  # in memory or over Dask arrays
_PLANS = ("gather_plan", "scatter_plan")
_LAZY = frozenset(_OPS + _WHOLE_ARRAY + _PLANS + ("coalescing", "inspect_kernel", "selftest"))


if not TYPE_CHECKING:  # hidden from type checkers, so that they report a misspelt name instead of typing it Any
    def __getattr__(name: str) -> object:
        """The public names of the runtime and the tools, imported on first access (then kept as attributes).

        Importing them eagerly would make ``import simt_pto`` load the host side, and through the tools the kernels
        and Numba; the model itself never needs them. Imported under :data:`.backend.first_use`, as every import
        simt_pto makes at its first use: several threads may make it at once."""
        if name not in _LAZY:  # asked without the lock: a probe of a name that is not there never waits for it
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        with backend.first_use:
            if name in _OPS:
                from .host import tile_ops
                value = getattr(tile_ops, name)
            elif name in _WHOLE_ARRAY:
                from .host import whole_array
                value = getattr(whole_array, name)
            elif name in _PLANS:
                from .host import in_memory
                value = getattr(in_memory, name)
            elif name == "coalescing":
                from .host.tools import coalescing as value
            elif name == "inspect_kernel":
                from .host.tools.kernel_report import inspect_kernel as value
            else:
                from .host.tools.selftest import selftest as value
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
