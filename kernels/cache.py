"""Numba's on-disk kernel cache and compiles, made safe for the package's kernels.

Every jitted function of the package is made by :func:`njit` / :func:`cuda_jit` (or passed through :func:`guard`),
which build Numba's dispatcher and add four guarantees to it:

* **The cache key describes the code that was compiled.** Numba stamps each cache index with the one file that defines
  the jitted function (its content from Numba 0.68; its modification time and size before, which a reinstall of the
  same files changes). Our kernels compile in code from other files: inlined device helpers (``kernels/a5/device.py``,
  ``kernels/index_policy.py``, ``kernels/softfloat.py``) and module constants (``simt_pto.geometry``,
  ``simt_pto.policy``) frozen at compile time. :func:`install` puts a locator in front of Numba's own: for a function
  defined under a watched root it wraps the locator Numba would have chosen (same cache folder, same file names) and
  stamps the index with :func:`source_digest` instead, a digest of the content of every ``.py`` file under the watched
  roots. An imported module counts with its source as it was imported, not as it is on disk now: its digest is taken
  once, the first time a stamp is formed after its import. A module whose file was written or replaced after
  ``import simt_pto`` began, as seen at that first look (an edit during the session, or a copy that kept an older
  file's time: the process may run code that no file holds any more), makes the process compile without the disk
  cache (:func:`stale_source`, one warning). The moment is ``import simt_pto``'s (:mod:`simt_pto.source_files`
  notes each file's identity then), not the process's start: a process may have started long before it ran Python (a
  shell that installed the package, then replaced itself with ``simt-pto demo``: ``( pip install . && simt-pto demo
  )``), and the files it wrote in between are no edit.
* **A damaged cache file costs a recompile, not the run.** A ``.nbi`` index or ``.nbc`` data file that cannot be
  read (truncated, garbage, or damaged inside: each file written here ends with a SHA-256 seal of its content,
  checked before anything in it is unpickled or loaded) is reported once by a :class:`KernelCacheWarning` naming
  the file; the kernel is compiled and the entry overwritten.
* **No writable cache folder costs the cache, not the run.** Numba refuses ``cache=True`` when none of its
  locators finds a writable folder; the kernels then compile without the disk cache (one warning saying why),
  and so does a kernel whose cache entry cannot be written.
* **A compile is atomic with respect to Ctrl-C and other signals.** A ``KeyboardInterrupt`` (or a timeout's
  exception from a SIGALRM handler) that lands inside Numba's compiler can leave its global typing registries
  half-loaded, and every later compile in the process fails; llvmlite may crash. While one of our dispatchers
  compiles in the main thread, the signals programs handle in Python are held (:func:`simt_pto.interrupts.completed`):
  the compile completes, then the previous handlers run (``KeyboardInterrupt`` reaches the caller, and the next call
  finds the signature compiled).

:func:`install_fork_guard` makes ``os.fork()`` wait for a compile running in another thread: Numba's compiler lock
would otherwise be inherited held, and the child would hang at its first compile.

Every compile of ours runs in :func:`compile_scope`: Numba's inlining without its repeated work
(:mod:`.numba_inlining`), and Python's cyclic garbage collector paused until the compile returns.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import os
import pickle
import sys
import uuid
import warnings
from pathlib import Path

import numba
from numba.core import sigutils

from simt_pto import source_files
from simt_pto.interrupts import completed

from . import numba_inlining

_ROOTS: list[Path] = []


class KernelCacheWarning(UserWarning):
    """The on-disk kernel cache is not used for a kernel (or an entry of it is rebuilt); results are unaffected."""


_warned: set = set()


def _warn_once(key, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, KernelCacheWarning, stacklevel=3)


def watch(root) -> None:
    """Add a source folder: functions defined under it are stamped with the digest of all its ``.py``
    files (and those of the other watched folders)."""
    root = Path(root).resolve()
    if root not in _ROOTS:
        _ROOTS.append(root)
        for path, seen in source_files.identities(str(root)).items():
            _identity_at_watch.setdefault(path, seen)  # the package's own files: as ``import simt_pto`` found them


def watched(py_file) -> bool:
    path = Path(py_file).resolve()
    return any(path.is_relative_to(root) for root in _ROOTS)


# -- the source digest -------------------------------------------------------------------------------------

# The stale-source check. A watched module's code is what its file held when it was imported, which was after
# ``import simt_pto`` began (when :mod:`simt_pto.source_files` noted each file's identity) and, for a watched folder
# outside the package, after :func:`watch` named it. Its file still holds that code if it has the identity (mtime,
# size, inode) noted then: a file rewritten or replaced since, even by one with an older modification time (``cp
# -p``, ``rsync -a``, ``tar x``), marks the process stale. The times themselves are not compared with the import's
# moment: a file stamped in the future (clock skew, an archive, a network file system) is no edit. Not the process's
# start either (``/proc/self/stat``): ``( pip install . && simt-pto demo )`` forks a subshell, installs, then
# replaces the subshell with ``simt-pto`` (bash runs a subshell's last command without a fork), so the files pip
# wrote are newer than the process, but noted by the import as they are.

_identity_at_watch: dict[str, source_files.FileIdentity] = dict(source_files.AT_IMPORT)
_at_import: dict[str, str] = {}     # source path of an imported module -> its digest, taken once
_by_stat: dict[str, tuple] = {}     # source path -> (identity, digest): unimported files are re-read only when changed
_stale: str | None = None           # why the process's code may differ from the files (sticky)


def _file_digest(path: str) -> tuple[str, source_files.FileIdentity]:
    seen = source_files.identity(path)
    memo = _by_stat.get(path)
    if memo is None or memo[0] != seen:
        with open(path, "rb") as f:
            memo = seen, hashlib.sha256(f.read()).hexdigest()
        _by_stat[path] = memo
    return memo[1], seen


_real_folders: dict[str, str] = {}  # a module file's folder -> its real path (the roots are resolved: a symlinked
                                   # site-packages or /var -> /private/var spells the same file two ways); one
                                   # realpath per folder, not per module: the first stamp looks at every module


def _imported_sources() -> set[str]:
    prefixes = tuple(str(root) + os.sep for root in _ROOTS)
    found = set()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str):
            folder, name = os.path.split(file)
            real = _real_folders.get(folder)
            if real is None:
                real = _real_folders[folder] = os.path.realpath(folder)
            if (real + os.sep).startswith(prefixes):
                found.add(os.path.join(real, name))
    return found


def _changed_since_import(path: str, seen: source_files.FileIdentity) -> bool:
    """Whether the file of an imported module is not as noted when the import began (or unnoted: created since)."""
    return _identity_at_watch.get(path) != seen


def _source_state() -> str:
    global _stale
    imported = _imported_sources()
    h = hashlib.sha256()
    for path in sorted({path for root in _ROOTS for path in source_files.python_files(str(root))}):
        digest = _at_import.get(path)
        if digest is None:
            digest, seen = _file_digest(path)
            if path in imported:
                _at_import[path] = digest
                if _stale is None and _changed_since_import(path, seen):
                    _stale = (f"{path} changed on disk after this process imported simt_pto (the module it imported "
                              "may differ)")
        h.update(path.encode())
        h.update(digest.encode())
    return h.hexdigest()


def source_digest() -> str:
    """The digest of every ``.py`` file under the watched roots, an imported module's file as it was at its import
    (a module not imported yet: as it is now; its code cannot be in anything compiled so far)."""
    return _source_state()


def stale_source() -> str | None:
    """Why this process may run code that differs from the package's files (an imported watched module's file was
    written or replaced after ``import simt_pto`` began, as first looked at), or None. Once set, the process compiles
    without the disk cache."""
    _source_state()
    return _stale


class _SourceDigestLocator:
    """Numba's choice of locator for the function (its cache folder and file names), stamped with :func:`source_digest`."""

    fallbacks: tuple = ()
    """Numba's own locator classes, tried in Numba's order (set by :func:`install`)."""

    stale: str | None = None
    """:func:`stale_source` when the stamp was formed: the stamp then matches no index, and :func:`guard`
    disables the cache."""

    def __init__(self, inner, key: str | None = None):
        self._inner = inner
        self._key = key

    @classmethod
    def from_function(cls, py_func, py_file):
        if not watched(py_file):
            return None
        for fallback in cls.fallbacks:
            inner = fallback.from_function(py_func, py_file)
            if inner is not None:
                return cls(inner, getattr(py_func, CACHE_KEY, None))
        return None

    def get_disambiguator(self):
        """Numba's (the source line), and the function's compile-time policy (:data:`CACHE_KEY`): each
        specialization of one kernel source has an index file of its own."""
        inner = self._inner.get_disambiguator()
        return inner if self._key is None else f"{inner}.{self._key}"

    def get_source_stamp(self):
        """The digest alone: it covers the function's own file (under a watched root) by content. Numba's own stamp
        is that file's content from Numba 0.68 but its modification time and size before: a reinstall that wrote
        the same files anew (``pip install .``) would miss every index there."""
        digest = source_digest()
        self.stale = _stale
        if self.stale is not None:  # a stamp no index holds: nothing is loaded, and no other process loads it back
            digest = f"source unknown: {uuid.uuid4().hex}"
        return digest

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


# -- the jit decorators ------------------------------------------------------------------------------------

CACHE_KEY = "__simt_pto_cache_key__"
"""The attribute of a function that names its compile-time policy (``KernelPolicy.cache_key``): set by
:func:`njit` / :func:`cuda_jit` from ``key=``, it enters the name of the function's cache index, so two
specializations of one source never share an entry."""


def _keyed(fn, key: str | None):
    if key is not None:
        setattr(fn, CACHE_KEY, key)
    return fn


def njit(py_func=None, *, key: str | None = None, **options):
    """``numba.njit`` with the same options, the dispatcher passed through :func:`guard` (``cache=True`` included).
    ``key`` names the function's compile-time policy in its cache entry (:data:`CACHE_KEY`)."""
    def decorate(fn):
        return guard(numba.njit(**{**options, "cache": False})(_keyed(fn, key)), cache=options.get("cache", False))
    return decorate if py_func is None else decorate(py_func)


def cuda_jit(py_func=None, *, key: str | None = None, **options):
    """``numba.cuda.jit`` with the same options, the dispatcher passed through :func:`guard` (the CUDA simulator's
    kernels compile nothing and come back as they are); ``key`` as for :func:`njit`. Raises
    :class:`~simt_pto.backend.MissingExtraError` without numba-cuda (Numba's built-in ``numba.cuda`` is not it)."""
    from simt_pto.backend import imported, require_numba_cuda
    require_numba_cuda("a CUDA kernel")
    cuda = imported("numba.cuda")

    def decorate(fn):
        return guard(cuda.jit(**{**options, "cache": False})(_keyed(fn, key)), cache=options.get("cache", False))
    return decorate if py_func is None else decorate(py_func)


def guard(dispatcher, cache: bool = False):
    """Make one dispatcher of ours (Numba's CPU one or numba-cuda's) safe, and return it: with ``cache``, its
    on-disk cache is enabled with the guarantees of this module's docstring (a damaged file is rebuilt, an
    unwritable cache or an unknown source means no disk cache); a compile it runs in the main thread holds SIGINT
    until it completes, inside :func:`compile_scope` (Numba's inlining building each callee's IR once per process and
    copying its scope once, :mod:`.numba_inlining`: the same code, in about half the time; the garbage collector
    paused). Anything that is not a dispatcher
    (``NUMBA_DISABLE_JIT``'s plain function, the CUDA simulator's kernel) is returned as it is."""
    # Numba's C dispatcher looks ``_compile_for_args`` up on the instance at each miss (numba-cuda's
    # launch-config capture relies on the same lookup): an attribute of this instance wraps exactly its compiles.
    if not callable(getattr(type(dispatcher), "_compile_for_args", None)):
        return dispatcher
    if cache:
        _enable_disk_cache(dispatcher)
    compile_for_args = _in_compile_scope(dispatcher._compile_for_args)
    dispatcher._compile_for_args = functools.partial(completed, compile_for_args)
    return dispatcher


def _enable_disk_cache(dispatcher) -> None:
    try:
        dispatcher.enable_caching()
    except RuntimeError as error:
        if "no locator available" not in str(error):
            raise
        _warn_once("no locator", "simt_pto: no writable folder for Numba's on-disk kernel cache (NUMBA_CACHE_DIR unset "
                   "or read-only, the package's __pycache__ and the user's cache folder read-only: Numba says "
                   f"{error}): kernels compile without the disk cache in this process; set NUMBA_CACHE_DIR to a "
                   "writable folder to keep them")
        return
    disk = dispatcher._cache
    stale = getattr(disk._impl.locator, "stale", None)
    if stale is not None:
        disk.disable()
        _warn_once("stale", f"simt_pto: {stale}: kernels compile without the disk cache in this process, so that no "
                   "entry is stored under source the process does not run (restart Python to use the cache)")
        return
    files = disk._cache_file
    files._dump = functools.partial(_sealed, files._dump)
    files._load_index = functools.partial(_checked_index, files, files._load_index)
    files._load_data = functools.partial(_checked_data, files, files._load_data)
    disk.load_overload = functools.partial(_load_or_rebuild, disk, disk.load_overload)
    disk.save_overload = functools.partial(_save_or_skip, disk, disk.save_overload)


# Numba's index and data files hold pickles and machine code with no checksum: a flipped byte in the machine code
# can crash the process that loads it. Ours end with a seal, the SHA-256 of the pickle before it; pickle.loads
# ignores what follows a pickle, so plain Numba still reads them, and a file without a seal is read as Numba would.
_SEAL = b"\x00simt_pto sha256:"


class DamagedCacheFile(ValueError):
    """A cache file whose content does not match its seal."""


def _sealed(dump, obj) -> bytes:
    payload = dump(obj)
    return payload + _SEAL + hashlib.sha256(payload).digest()


def _check_seal(path: str, body: bytes) -> None:
    cut = len(body) - len(_SEAL) - 32
    if cut >= 0 and body[cut:cut + len(_SEAL)] == _SEAL and hashlib.sha256(body[:cut]).digest() != body[cut + len(_SEAL):]:
        raise DamagedCacheFile(f"the content of {os.path.basename(path)} does not match its SHA-256 seal")


def _checked_index(files, load_index):
    try:
        with open(files._index_path, "rb") as f:
            pickle.load(f)  # Numba's version header; the sealed pickle follows
            _check_seal(files._index_path, f.read())
    except FileNotFoundError:
        pass
    return load_index()


def _checked_data(files, load_data, name):
    path = files._data_path(name)
    with open(path, "rb") as f:
        _check_seal(path, f.read())
    return load_data(name)


def _load_or_rebuild(disk, load, sig, target_context):
    try:
        loaded = load(sig, target_context)
    except Exception as error:  # whatever a damaged file raises: pickle, EOF, the seal, LLVM, ...
        path = _unreadable_file(disk, sig, target_context)
        _warn_once(("damaged", path), f"simt_pto: the kernel cache file {path} is damaged ({type(error).__name__}: "
                   f"{error}); the kernel is recompiled and the file overwritten")
        return None  # a miss: the dispatcher compiles, then saves over the damaged entry
    compiled_for = _compiled_signature(loaded)
    if compiled_for is not None and compiled_for != tuple(sigutils.normalize_signature(sig)[0]):
        # Numba's index names a data file per signature, chosen as the first number the index does not list; two
        # processes saving different signatures at once both choose it, and the index one of them leaves can name
        # the other's code. Run, it would read the arguments as the types it was compiled for: a miss instead
        return None  # (the dispatcher compiles, then saves over the entry)
    return loaded


def _compiled_signature(loaded) -> tuple | None:
    """The argument types a loaded cache entry was compiled for (a CPU ``CompileResult``, a CUDA kernel), or None."""
    if loaded is None:
        return None
    signature = getattr(loaded, "signature", None)
    if signature is not None and hasattr(signature, "args"):
        return tuple(signature.args)
    argument_types = getattr(loaded, "argument_types", None)
    return tuple(argument_types) if argument_types is not None else None


def _repair_index(files) -> bool:
    """Whether the index cannot be read; it is then emptied in place (the next save adds its entry to the empty
    index; the other entries it listed were unreadable anyway)."""
    try:
        files._load_index()
        return False
    except Exception:  # damaged
        try:
            files.flush()
        except OSError:
            pass  # read-only: the save fails too and says so
        return True


def _unreadable_file(disk, sig, target_context) -> str:
    """The file a failed load tripped on: the index (emptied), or the data file the index names for ``sig`` (the
    save that follows the compile overwrites it)."""
    files = disk._cache_file
    if _repair_index(files):
        return files._index_path
    name = files._load_index().get(disk._index_key(sig, target_context.codegen()))
    return files._data_path(name) if name is not None else files._index_path


def _save_or_skip(disk, save, sig, data) -> None:
    try:
        save(sig, data)
        return
    except Exception as error:  # the compiled kernel is in memory already: only its disk copy is at stake
        failure = error
    if _repair_index(disk._cache_file):  # damaged since the load (Numba's save reads the index first)
        _warn_once(("damaged", disk._cache_file._index_path), f"simt_pto: the kernel cache file "
                   f"{disk._cache_file._index_path} is damaged ({type(failure).__name__}: {failure}); it is overwritten")
        try:
            save(sig, data)
            return
        except Exception as error:
            failure = error
    disk.disable()
    _warn_once(("unwritable", disk.cache_path), f"simt_pto: cannot write Numba's kernel cache in {disk.cache_path} "
               f"({type(failure).__name__}: {failure}); kernels compile without the disk cache there")


# -- compiles and signals ----------------------------------------------------------------------------------

@contextlib.contextmanager
def compile_scope():
    """Run the body, a Numba compile of ours (a dispatcher's, or ``numba.cuda.compile_ptx`` of a kernel), holding
    Numba's compiler lock, with each inlined callee's untyped IR built once and its scope copied once
    (:func:`.numba_inlining.inlining_without_repeats`) and Python's cyclic garbage collector paused.

    A compile allocates millions of small objects (Numba's IR is deep-copied at every inlining). Each time those
    allocations cross the collector's threshold it runs, and its oldest generation walks every tracked object of the
    process, Numba's typing registries among them (36 CPU compiles without the pause: 1712 collections inside them,
    4.6 s of 31.9 s; the compile proof's 213 specializations: 180.2 s of compiles without, 165.6 s with; figures in
    docs/performance.md). The cycles a compile leaves are collected by the first collection after it. The collector
    is resumed only if it ran before (the lock keeps two compiles of ours from interleaving; a nested compile finds it
    paused and leaves it so)."""
    with numba_inlining.inlining_without_repeats():
        if not gc.isenabled():
            yield
            return
        gc.disable()
        try:
            yield
        finally:
            gc.enable()


def _in_compile_scope(compile_fn):
    """``compile_fn`` (a dispatcher's ``_compile_for_args``) run inside :func:`compile_scope`."""
    @functools.wraps(compile_fn)
    def compile_in_scope(*args, **kwargs):
        with compile_scope():
            return compile_fn(*args, **kwargs)
    return compile_in_scope


# -- fork ----------------------------------------------------------------------------------------------------

_held: list = []
_fork_guard_installed = False


def _compiler_locks() -> list:
    """The locks a fork waits for, in the order a thread takes them: simt_pto's first imports
    (:data:`simt_pto.backend.first_use`: a child that inherits it held hangs at its first import of a kernel), Numba's
    compiler lock, numba-cuda's."""
    from numba.core.compiler_lock import global_compiler_lock

    from simt_pto.backend import first_use
    locks = [first_use, global_compiler_lock]
    cuda = sys.modules.get("numba.cuda.core.compiler_lock")  # numba-cuda's own, taken after Numba's (its order)
    if cuda is not None and getattr(cuda, "_numba_cuda_compiler_lock", None) is not None:
        locks.append(cuda._numba_cuda_compiler_lock)
    return locks


def _before_fork() -> None:
    for lock in _compiler_locks():  # waits for a first import or a compile running in another thread to finish
        lock.acquire()
        _held.append(lock)


def _after_fork() -> None:
    while _held:
        _held.pop().release()


def install_fork_guard() -> None:
    """Make ``os.fork()`` wait until no thread compiles (it takes Numba's compiler lock, and numba-cuda's, before the
    fork and releases them in parent and child): a child that inherits the lock held by a thread it does not have
    hangs at its first compile. Idempotent."""
    global _fork_guard_installed
    if _fork_guard_installed or not hasattr(os, "register_at_fork"):
        return
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)
    _fork_guard_installed = True
