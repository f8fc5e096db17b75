"""Deprecated: the old import path of the tile ops. Use ``pto.mgather`` / ``pto.mscatter`` / ``pto.tload`` /
``pto.tstore`` (``import simt_pto as pto``); they live in :mod:`simt_pto.host.tile_ops`, beside the dispatch they
hand their plans to. This module goes in the next release; importing it warns (DeprecationWarning)."""
from __future__ import annotations

import warnings

from simt_pto.host.tile_ops import mgather, mscatter, tload, tstore

warnings.warn("simt_pto.ops is deprecated: use pto.mgather / pto.mscatter / pto.tload / pto.tstore (they live in "
              "simt_pto.host.tile_ops); this path goes in the next release", DeprecationWarning, stacklevel=2)

__all__ = ["mgather", "mscatter", "tload", "tstore"]
