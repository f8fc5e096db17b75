"""The package's source files as ``import simt_pto`` found them: each ``.py`` file's identity (modification time, size,
inode) when the import began.

The package imports this module before any other, so every module of the package was read from its file after
:data:`AT_IMPORT` was noted. The kernel cache (:mod:`simt_pto.kernels.cache`) stores a compiled kernel under a digest of the
package's files, and a process whose modules may differ from those files must not store anything: it compares each
imported module's file with its identity here. A file replaced after the import began shows a new identity even when
its modification time is older than the import (``cp -p``, ``rsync -a`` and ``tar x`` keep the old file's time), which
a comparison of times alone misses. Reading the identities costs one ``stat`` per file, about 1 ms for the package.
"""
from __future__ import annotations

import os

FileIdentity = tuple[int, int, int]
"""A file's ``(st_mtime_ns, st_size, st_ino)``: replacing or rewriting the file changes it."""


def python_files(root: str) -> list[str]:
    """The ``.py`` files under ``root``, ``__pycache__`` folders not entered: without NUMBA_CACHE_DIR they hold the
    package's kernel cache, thousands of files."""
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [name for name in subfolders if name != "__pycache__"]
        found.extend(os.path.join(folder, name) for name in files if name.endswith(".py"))
    return found


def identity(path: str) -> FileIdentity:
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size, st.st_ino


def identities(root: str) -> dict[str, FileIdentity]:
    """Each ``.py`` file under ``root`` (as :func:`python_files` names it) -> its identity now; a file that vanishes
    while this runs is left out."""
    found = {}
    for path in python_files(root):
        try:
            found[path] = identity(path)
        except OSError:
            pass
    return found


AT_IMPORT: dict[str, FileIdentity] = identities(os.path.dirname(os.path.realpath(__file__)))
"""The package folder's ``.py`` files when ``import simt_pto`` began. A regular install holds the kernels and the host here
too; an editable install maps them to folders of their own, whose files :func:`simt_pto.kernels.cache.watch` adds when
``simt_pto.kernels`` is imported, before any kernel module."""
