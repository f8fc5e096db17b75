"""simt_pto: an emulator of the PTO ISA memory instructions MGATHER and MSCATTER.

Three targets behind one tile / tensor API: ``a5`` (the A5 SIMT kernels, one Numba source compiled for a
CUDA GPU, for the CPU on all cores, or run on Numba's CUDA simulator), ``a2a3`` (the sequential
vector-core paths as Numba-jitted loops) and ``cpu`` (the CPU simulator's reference semantics in numpy,
the golden). ``import simt_pto`` chooses no A5 backend: the first A5 call does (``simt_pto.backend``).
"""
from .backend import a5_backend, a5_backends, set_a5_backend
from . import dtypes, nz, reference
from .dtypes import DType
from .enums import (BLayout, Coalesce, GatherExec, GatherOOB, Layout, ScatterAtomicOp, ScatterConflict,
                    ScatterOOB, SLayout, TileType, TARGETS)
from .errors import ConstraintError, OutOfBoundsError
from .geometry import LaunchGeometry, elem_geometry, last_geometry, row_geometry
from .host import coalescing
from .host.inspect import inspect_kernel
from .host.large import gather, scatter
from .host.selftest import selftest
from .ops import mgather, mscatter, tload, tstore
from .tensor import GlobalTensor
from .tile import Tile

__version__ = "0.1.0"

__all__ = [
    "BLayout", "Coalesce", "ConstraintError", "DType", "GatherExec", "GatherOOB", "GlobalTensor", "Layout",
    "LaunchGeometry", "OutOfBoundsError", "SLayout", "ScatterAtomicOp", "ScatterConflict", "ScatterOOB", "TARGETS",
    "Tile", "TileType", "a5_backend", "a5_backends", "coalescing", "dtypes", "elem_geometry", "gather", "inspect_kernel",
    "last_geometry", "mgather", "mscatter", "nz", "reference", "row_geometry", "scatter", "selftest", "set_a5_backend",
    "tload", "tstore",
]
