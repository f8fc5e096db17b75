"""The ``a2a3`` target: the A2/A3 vector-core MGATHER / MSCATTER paths as sequential Numba-jitted loops
(MGATHER.md / MSCATTER.md, "A2/A3 Form", "NZ Layout (A2/A3)"), walking in the hardware's order."""
from .mgather import rows_gatherer, run_mgather, tile_gatherer
from .mscatter import rows_scatterer, run_mscatter, tile_scatterer

__all__ = ["rows_gatherer", "rows_scatterer", "run_mgather", "run_mscatter", "tile_gatherer", "tile_scatterer"]
