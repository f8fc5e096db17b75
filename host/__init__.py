"""Host side: dispatch (:mod:`.dispatch`, the one entry point of the tile ops; :mod:`.a5_planner`, what an A5 call
launches, tile op or whole array; :mod:`.a5_runner`, which runs it, staged for the GPU) and the whole-array ops
(:mod:`.whole_array`, :mod:`.in_memory`). Installed as
``simt_pto.host``. The tools (the coalescing analyzer, compile inspection, selftest, the demo and the command
line) live in :mod:`simt_pto.host.tools`, which imports this package and is imported by none of it."""
