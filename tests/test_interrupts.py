"""simt_pto.interrupts: signals held over steps that must not stop half-done (compiles, first imports), their handlers
run once the step completes; the hold itself leaves every handler as it found it, whatever lands in the middle."""
from __future__ import annotations

import os
import signal

import pytest

from simt_pto import interrupts

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="the held signals are POSIX ones")


@pytest.fixture
def handlers(ctrl_c_handled):
    """A Python handler for every held signal, as a program that handles them has; all put back after."""
    seen = []
    before = {signum: signal.getsignal(signum) for signum in interrupts.CATCHABLE}
    for signum in interrupts.CATCHABLE:
        if signum != signal.SIGINT:
            signal.signal(signum, lambda signum, frame: seen.append(signum))
    yield seen
    for signum, handler in before.items():
        signal.signal(signum, handler)


def test_the_handlers_run_after_the_step_in_the_order_the_signals_came(handlers):
    def step():
        signal.raise_signal(signal.SIGUSR1)
        signal.raise_signal(signal.SIGALRM)
        assert handlers == []  # held
        return "done"

    assert interrupts.completed(step) == "done"
    assert handlers == [signal.SIGUSR1, signal.SIGALRM]
    with pytest.raises(KeyboardInterrupt):
        interrupts.completed(signal.raise_signal, signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_exception_in_the_middle_of_a_hold_puts_every_handler_back(handlers, monkeypatch):
    """A handler of another signal that raises while the hold swaps handlers in (a timeout's alarm): the hold left
    SIGINT with its collector, and every later Ctrl-C of the process was swallowed."""
    before = {signum: signal.getsignal(signum) for signum in interrupts.CATCHABLE}
    real_signal, calls = interrupts._signal.signal, []

    class Interrupted:
        getsignal = staticmethod(interrupts._signal.getsignal)

        @staticmethod
        def signal(signum, handler):
            calls.append(signum)
            if len(calls) == 3:
                raise TimeoutError("the alarm's handler ran here")
            return real_signal(signum, handler)

    monkeypatch.setattr(interrupts, "_signal", Interrupted)
    with pytest.raises(TimeoutError):
        interrupts.hold(interrupts.CATCHABLE)
    monkeypatch.undo()
    assert {signum: signal.getsignal(signum) for signum in interrupts.CATCHABLE} == before
    assert not interrupts._held_now and not interrupts._active


def test_a_handler_installed_during_a_hold_stays_and_gets_the_signals(handlers):
    got = []

    def mine(signum, frame):
        got.append(signum)

    held = interrupts.hold(interrupts.CATCHABLE)
    signal.raise_signal(signal.SIGTERM)  # held: noted before the step installs its own handler
    signal.signal(signal.SIGTERM, mine)
    interrupts.release(held)
    assert signal.getsignal(signal.SIGTERM) is mine and got == [signal.SIGTERM] and handlers == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_holds_nest_and_the_outer_one_delivers(handlers):
    outer = interrupts.hold(interrupts.CATCHABLE)
    inner = interrupts.hold()  # SIGINT is held already: nothing more
    assert inner is None
    signal.raise_signal(signal.SIGUSR2)
    interrupts.release(inner)
    assert handlers == []
    interrupts.release(outer)
    assert handlers == [signal.SIGUSR2]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_child_forked_during_a_hold_gets_the_handlers_back(handlers):
    """The child of a fork made while the main thread holds the signals (another thread forking during the first
    import of Numba) inherited the collectors, and nothing released them: its Ctrl-C and SIGTERM were swallowed."""
    before = {signum: signal.getsignal(signum) for signum in interrupts.CATCHABLE}
    held = interrupts.hold(interrupts.CATCHABLE)
    try:
        pid = os.fork()
        if pid == 0:  # the child: its handlers must be the program's own again
            same = {signum: signal.getsignal(signum) for signum in interrupts.CATCHABLE} == before
            os._exit(0 if same and not interrupts._held_now else 1)
        _, status = os.waitpid(pid, 0)
    finally:
        interrupts.release(held)
    assert os.waitstatus_to_exitcode(status) == 0


def test_ctrl_c_while_another_thread_holds_first_use_leaves_the_wait(ctrl_c_handled):
    """The main thread waits for ``first_use`` while another thread makes its first import (a compile: seconds). A
    Ctrl-C during the wait leaves it at once, with nothing taken; it was held until the other thread was done."""
    import threading
    import time

    from simt_pto.backend import first_use
    taken, done = threading.Event(), threading.Event()

    def first_import_elsewhere():
        with first_use:
            taken.set()
            done.wait(30)

    other = threading.Thread(target=first_import_elsewhere)
    other.start()
    try:
        assert taken.wait(30)
        threading.Timer(0.2, signal.raise_signal, (signal.SIGINT,)).start()  # (signal.raise_signal: in the process)
        began = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            with first_use:
                raise AssertionError("the lock is the other thread's")
        assert time.monotonic() - began < 5
    finally:
        done.set()
        other.join(30)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler and not interrupts._held_now
    with first_use:  # taken and given back
        pass
