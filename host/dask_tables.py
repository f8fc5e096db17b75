"""Deprecated: the old import path of the Dask route. Use ``import simt_pto.dask`` (the same ``gather``, ``scatter``
and ``warm``), or just ``pto.gather`` / ``pto.scatter``, which take Dask arrays. This module goes in the next
release; importing it warns (DeprecationWarning) and gives the functions of :mod:`simt_pto.host.dask_route`."""
from __future__ import annotations

import warnings

from .dask_route import INDEX_END, INDEX_MIN, NUMPY_CHUNK, WARM_COLS, gather, is_dask_array, scatter, warm

warnings.warn("simt_pto.host.dask_tables is deprecated: import simt_pto.dask instead (the same gather, scatter and "
              "warm); this path goes in the next release", DeprecationWarning, stacklevel=2)

__all__ = ["INDEX_END", "INDEX_MIN", "NUMPY_CHUNK", "WARM_COLS", "gather", "is_dask_array", "scatter", "warm"]
