"""The ``a2a3`` target: the A2/A3 vector-core MGATHER / MSCATTER paths as sequential Numba-jitted loops
(MGATHER.md / MSCATTER.md, "A2/A3 Form", "NZ Layout (A2/A3)"), walking in the hardware's order."""
from .mgather import bound_gatherer, rows_gatherer, run_mgather, tile_gatherer
from .mscatter import bound_scatterer, rows_scatterer, run_mscatter, tile_scatterer

__all__ = ["bound_gatherer", "bound_scatterer", "rows_gatherer", "rows_scatterer", "run_mgather", "run_mscatter",
           "tile_gatherer", "tile_scatterer"]
