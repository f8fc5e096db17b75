"""Host side: the command line, the demo, compile inspection, and (large shapes) tiling across blocks.
Installed as ``simt_pto.host``."""
