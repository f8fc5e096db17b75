"""Numba's on-disk kernel cache, made to notice an edit anywhere in the package's source.

Numba stamps each cache index with the modification time and size of the one file that defines the
jitted function. Our kernels compile in code from other files: inlined device helpers
(``kernels/a5/device.py``, ``kernels/index_policy.py``, ``kernels/softfloat.py``) and module
constants (``simt_pto.geometry``) frozen at compile time. An edit to one of those leaves the kernel's
own file untouched, so Numba would load the old machine code and the new semantics would silently not
run (a developer's hazard: an installed release replaces every file at once).

:func:`install` puts a locator in front of Numba's own. For a function defined under a watched root
it wraps the locator Numba would have chosen (same cache folder, same file names) and adds to the
stamp a digest of every ``.py`` file under the watched roots, so any edit there invalidates the
cached kernels once and they recompile. Functions elsewhere are left to Numba's locators.
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

_ROOTS: list[Path] = []


def watch(root) -> None:
    """Add a source folder: functions defined under it are stamped with the digest of all its ``.py``
    files (and those of the other watched folders)."""
    root = Path(root).resolve()
    if root not in _ROOTS:
        _ROOTS.append(root)


def watched(py_file) -> bool:
    path = Path(py_file).resolve()
    return any(path.is_relative_to(root) for root in _ROOTS)


@functools.cache
def _digest(roots: tuple[Path, ...]) -> str:
    files = sorted({path.resolve() for root in roots for path in root.rglob("*.py")})
    h = hashlib.sha256()
    for path in files:
        h.update(str(path).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def source_digest() -> str:
    """The digest of every ``.py`` file under the watched roots (read once per process)."""
    return _digest(tuple(_ROOTS))


class _SourceDigestLocator:
    """Numba's choice of locator for the function, with :func:`source_digest` added to its stamp."""

    fallbacks: tuple = ()
    """Numba's own locator classes, tried in Numba's order (set by :func:`install`)."""

    def __init__(self, inner):
        self._inner = inner

    @classmethod
    def from_function(cls, py_func, py_file):
        if not watched(py_file):
            return None
        for fallback in cls.fallbacks:
            inner = fallback.from_function(py_func, py_file)
            if inner is not None:
                return cls(inner)
        return None

    def get_source_stamp(self):
        return self._inner.get_source_stamp(), source_digest()

    def __getattr__(self, name):  # cache path, disambiguator, ensure_cache_path: Numba's own
        return getattr(self._inner, name)


def install(cache_impl) -> None:
    """Put the source-digest locator first in ``cache_impl._locator_classes`` (Numba's ``CacheImpl``
    for CPU functions, or numba-cuda's for kernels); idempotent."""
    locators = list(cache_impl._locator_classes)
    if locators and issubclass(locators[0], _SourceDigestLocator):
        return
    locator = type(f"SourceDigestLocator_{cache_impl.__module__.replace('.', '_')}", (_SourceDigestLocator,),
                   {"fallbacks": tuple(locators)})
    cache_impl._locator_classes = [locator, *locators]
