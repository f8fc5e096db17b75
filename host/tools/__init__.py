"""The tools around the library, installed as ``simt_pto.host.tools``: the coalescing analyzer
(:mod:`.coalescing`, and ``simt-pto coalesce``: :mod:`.coalesce_cli`), the compile report of one kernel
specialization (:mod:`.kernel_report`, ``simt-pto inspect``), the A5 self test (:mod:`.selftest`), the demo
(:mod:`.demo`), the Conflict::Last check at scale (:mod:`.validate_last`) and the command line (:mod:`.cli`).

They import the core (the model, ``simt_pto.host`` and the kernels); no module
of the core imports them, so the library runs without them. The package root re-exports a few of their
names lazily (``simt_pto.coalescing``, ``simt_pto.inspect_kernel``, ``simt_pto.selftest``).
"""
