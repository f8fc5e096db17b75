"""``python -m simt_pto``: the ``simt-pto`` command line, the same as the console script.

The command line lives in the tools layer (``simt_pto.host.tools.cli``), which the model may not import (the
import-linter contracts in pyproject.toml); this entry point runs that module as ``__main__`` instead of importing
it, so ``import simt_pto`` and the layer rules stay as they are."""
import runpy

if __name__ == "__main__":
    runpy.run_module("simt_pto.host.tools.cli", run_name="__main__", alter_sys=True)
