"""Ctrl-C held over steps that must not stop half-done: it reaches the caller once the step is complete.

A ``KeyboardInterrupt`` is raised wherever the main thread is when SIGINT arrives. Some steps leave the process
broken if cut: Numba's compiler leaves its typing registries half-loaded (every later compile fails), and a first
import of Numba leaves half-initialised modules in ``sys.modules`` (every later call fails with an ``ImportError``,
an ``AttributeError`` or a ``KeyError`` from a registration made twice). While the main thread runs such a step,
SIGINT is only noted; when the step ends, the handler that was installed before runs with it (``KeyboardInterrupt``
by default). Another thread's step holds nothing: only the main thread takes signals. Nothing is held where SIGINT
is ignored or left to the operating system (the process then dies, leaving nothing half-built), or where the
handler is not a Python callable.

:func:`uninterrupted` runs one function so (every compile of the package, the ``multicore`` launch's wake-up of its
helper threads); :data:`simt_pto.backend.first_use` holds SIGINT while the main thread holds it (the first imports).
Holds nest: the outermost one delivers.
"""
from __future__ import annotations

import _signal  # signal's C functions: hold() runs on every multicore launch of more than one thread
import signal
import threading
from collections.abc import Callable
from typing import Any

_holding = False
"""Whether the main thread holds SIGINT now (a nested hold then holds nothing more)."""

Held = tuple[Callable, list]
"""What :func:`hold` returns when it holds SIGINT: the previous handler and the frames of the SIGINTs received."""


def hold() -> Held | None:
    """Start holding SIGINT, when in the main thread with a Python handler installed and no hold active; the token
    for :func:`release` (None where nothing is held)."""
    global _holding
    if _holding or threading.current_thread() is not threading.main_thread():
        return None
    previous = _signal.getsignal(signal.SIGINT)
    if not callable(previous):
        return None
    received: list = []
    try:
        _signal.signal(signal.SIGINT, lambda signum, frame: received.append(frame))
    except ValueError:  # not the main interpreter
        return None
    _holding = True
    return previous, received


def release(held: Held | None) -> None:
    """End the hold :func:`hold` started: the previous handler is back, and runs now if a SIGINT arrived (so this
    raises ``KeyboardInterrupt`` by default)."""
    global _holding
    if held is None:
        return
    previous, received = held
    _holding = False
    _signal.signal(signal.SIGINT, previous)  # from here a new SIGINT goes to ``previous`` directly
    if received:
        previous(signal.SIGINT, received[0])


def uninterrupted(step: Callable, *args: Any, **kws: Any) -> Any:
    """``step(*args, **kws)`` with SIGINT held until it returns (:func:`hold`)."""
    held = hold()
    try:
        return step(*args, **kws)
    finally:
        release(held)
