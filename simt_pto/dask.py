"""The whole-array ops over Dask arrays, for a table larger than one machine held on a Dask cluster:
``import simt_pto.dask`` (``pip install 'simt_pto[dask]'``).

``pto.gather`` / ``pto.scatter`` take Dask operands themselves and hand them here; import this module for what only
the Dask route has:

* :func:`gather` / :func:`scatter` with a destination: ``out=`` (a gather) or ``store=`` (a scatter: a Zarr array
  or any writable array of the table's shape) is written as the call computes, and returned;
* :func:`warm`: every worker of a ``distributed`` client loads the compiled kernels once.

The semantics are the in-memory call's, over the whole table (the OOB rules and Conflict::Last against the global
positions); the work runs where the table's chunks are. The guide's "Dask" section has the details.
"""
from __future__ import annotations

from simt_pto.host.dask_route import gather, is_dask_array, scatter, warm

__all__ = ["gather", "is_dask_array", "scatter", "warm"]
