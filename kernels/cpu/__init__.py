"""The ``cpu`` target: the CPU simulator's documented semantics in numpy, the golden the other targets
are tested against where semantics coincide."""
from .mgather import run_mgather
from .mscatter import run_mscatter

__all__ = ["run_mgather", "run_mscatter"]
