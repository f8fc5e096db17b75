"""Host side: dispatch (:mod:`.dispatch`, the one entry point of the tile ops; :mod:`.a5`, the A5 launches,
staging and scalar fallbacks), the whole-array tiling (:mod:`.large`), the coalescing analyzer, compile
inspection, the demo and the command line. Installed as ``simt_pto.host``."""
