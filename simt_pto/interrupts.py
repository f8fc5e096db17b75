"""Signals held over steps that must not stop half-done: their handlers run once the step is complete.

A Python signal handler runs wherever the main thread is when the signal arrives, and the exception it raises
(``KeyboardInterrupt`` for Ctrl-C; ``TimeoutError`` or the like from a timeout's SIGALRM handler) leaves from there.
Some steps leave the process broken if cut: Numba's compiler leaves its typing registries half-loaded (every later
compile fails with "generator raised StopIteration"), llvmlite may crash freeing a half-built module, and a first
import of Numba leaves half-initialised modules in ``sys.modules`` (every later call fails with an ``ImportError``,
an ``AttributeError`` or a ``KeyError`` from a registration made twice). While the main thread runs such a step, the
signals are only noted; when the step ends, the handlers that were installed before run with them, in the order
they arrived (the first exception one raises leaves, as it would have, and the signals after it are dropped:
two different signals within one step are rare, and the first decides). Another thread's step holds nothing: only
the main thread takes signals. Nothing is held for a signal that is ignored or left to the operating system (the
process then dies, leaving nothing half-built), or whose handler is not a Python callable.

* :func:`completed` runs a step with :data:`CATCHABLE` held: every compile of the package, and the first imports
  (:data:`simt_pto.backend.first_use` holds them while the main thread holds it).
* :func:`uninterrupted` holds SIGINT alone, for a step that runs on every call (the ``multicore`` launch's wake-up of
  its helper threads): a few C calls.

Holds nest: a signal is held by the outermost hold that names it, which delivers it. A hold leaves the handlers as it
found them whatever lands in the middle (another handler's exception while it swaps them in puts them back; a
handler the step installs itself stays, and runs for the signals that arrived), and a child forked during a hold gets
the handlers back.
"""
from __future__ import annotations

import _signal  # signal's C functions: a hold runs on every multicore launch of more than one thread
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

CATCHABLE: tuple[int, ...] = tuple(getattr(signal, name) for name in
                                   ("SIGINT", "SIGTERM", "SIGHUP", "SIGALRM", "SIGVTALRM", "SIGUSR1", "SIGUSR2")
                                   if hasattr(signal, name))
"""The signals a program's Python handlers commonly raise from: Ctrl-C, a termination request, a timeout's alarm."""

_held_now: set[int] = set()
"""The signals the main thread holds now (a nested hold leaves them to the outer one)."""

_active: list = []
"""The holds in force, outermost first: a child forked meanwhile gets the handlers back (:func:`_after_fork`)."""

Held = tuple[list, list]
"""What :func:`hold` returns: ``[(signal, previous handler, collector), ...]`` it replaced, and ``[(signal, frame),
...]`` received meanwhile."""


def hold(signals: tuple[int, ...] = (signal.SIGINT,)) -> Held | None:
    """Start holding ``signals`` (those with a Python handler, not held already), when in the main thread; the token
    for :func:`release` (None where nothing is held)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    replaced: list = []
    received: list = []
    collect = received.append
    try:
        for signum in signals:
            if signum in _held_now:
                continue
            previous = _signal.getsignal(signum)
            if not callable(previous):
                continue

            def collector(signum, frame):
                collect((signum, frame))

            _held_now.add(signum)
            replaced.append((signum, previous, collector))
            try:
                _signal.signal(signum, collector)
            except ValueError:  # not the main interpreter
                replaced.pop()
                _held_now.discard(signum)
                break
    except BaseException:
        # another signal's handler raised in the middle (a timeout's alarm): put back what was replaced, then let the
        # exception leave, as it would have without the hold
        _restore(replaced)
        raise
    if not replaced:
        return None
    held = (replaced, received)
    if not _active:
        _watch_forks()
    _active.append(held)
    return held


def _restore(replaced: list) -> None:
    """The previous handler of each signal ``replaced`` lists, where the collector is still installed (a handler that
    code installed during the hold is left in place)."""
    for signum, previous, collector in replaced:
        _held_now.discard(signum)
        if _signal.getsignal(signum) is collector:
            _signal.signal(signum, previous)  # from here a new signal goes to ``previous`` directly


def release(held: Held | None) -> None:
    """End the hold :func:`hold` started: the previous handlers are back, and run now for the signals that arrived
    (so this raises ``KeyboardInterrupt`` after a Ctrl-C, by default)."""
    if held is None:
        return
    replaced, received = held
    for at in range(len(_active) - 1, -1, -1):  # (the last, unless holds were released out of order)
        if _active[at] is held:
            del _active[at]
            break
    try:
        _restore(replaced)
    finally:
        for signum, frame in received:
            handler = _signal.getsignal(signum)  # the previous one, or what the step installed
            if callable(handler):
                handler(signum, frame)
            else:  # the default (the process ends, as it would have) or ignored
                _signal.raise_signal(signum)


_fork_hook_installed = False


def _watch_forks() -> None:
    """Once, at the first hold: a child forked while a hold is in force (by another thread, during the first import)
    gets the previous handlers back; the hold's release runs in the parent only."""
    global _fork_hook_installed
    if not _fork_hook_installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork)
        _fork_hook_installed = True


def _after_fork() -> None:
    while _active:
        replaced, _ = _active.pop()
        _restore(replaced)
    _held_now.clear()


def uninterrupted(step: Callable, *args: Any, **kws: Any) -> Any:
    """``step(*args, **kws)`` with SIGINT held until it returns (:func:`hold`)."""
    held = hold()
    try:
        return step(*args, **kws)
    finally:
        release(held)


def completed(step: Callable, *args: Any, **kws: Any) -> Any:
    """``step(*args, **kws)`` with :data:`CATCHABLE` held until it returns (:func:`hold`)."""
    held = hold(CATCHABLE)
    try:
        return step(*args, **kws)
    finally:
        release(held)
