"""Host side: dispatch (:mod:`.dispatch`, the one entry point of the tile ops; :mod:`.a5`, the A5 launch plans,
staging and scalar fallbacks) and the whole-array ops (:mod:`.in_memory`, :mod:`.a5_whole_array`). Installed as
``simt_pto.host``. The tools (the coalescing analyzer, compile inspection, selftest, the demo and the command
line) live in :mod:`simt_pto.host.tools`, which imports this package and is imported by none of it."""
