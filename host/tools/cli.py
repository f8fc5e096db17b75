"""The ``simt-pto`` command line. Each subcommand lives in its own module exposing
``register(subparsers)``, which adds its parser and sets ``func`` (returning an exit status).

It follows the Unix conventions, the same for every subcommand and for ``python -m simt_pto``:

* 0 success; 1 a check failed, or the run failed (one line on stderr: a write error such as a full disk, a request
  too large for memory, a missing extra, anything unexpected); 2 a usage error (argparse's usage line and one error
  line naming the argument: a bad number names the allowed range); 130 interrupted (Ctrl-C: one line);
  141 (128 + SIGPIPE, what a shell reports for a program its pipe's reader closed) when the reader of stdout went
  away (``simt-pto demo | head -1``): nothing more is printed.
* No traceback, unless ``--debug`` asks for one (before or after the subcommand): then every error but a usage
  error is raised as it is.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys

from simt_pto._version import __version__
from simt_pto.backend import JitRequiredError, MissingExtraError

SUBCOMMANDS = (
    "simt_pto.host.tools.demo",            # simt-pto demo
    "simt_pto.host.tools.kernel_report",   # simt-pto inspect
    "simt_pto.host.tools.coalesce_cli",    # simt-pto coalesce
    "simt_pto.host.tools.validate_last",   # simt-pto validate-last
    "simt_pto.host.tools.selftest",        # simt-pto selftest
)


EXIT_FAILED = 1  # a check failed, or the run did (one line on stderr)
EXIT_USAGE = 2  # a bad argument (argparse's usage and one error line), or Numba's JIT disabled
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE
DEBUG_HELP = "on an error, show Python's traceback instead of one line"


class _OutputError(OSError):
    """stdout could not take the output (a full disk, /dev/full), and nothing of it is left to flush again."""


@contextlib.contextmanager
def _writing_output():
    """A write error in here is stdout's; a closed pipe stays a BrokenPipeError."""
    try:
        yield
    except (BrokenPipeError, _OutputError):  # already told apart (a --help printed through _MarkedStdout)
        raise
    except OSError as exc:
        raise _OutputError(exc.errno, exc.strerror) from exc


class _MarkedStdout:
    """``sys.stdout`` while a command runs: what its writes raise is stdout's. A buffered stdout meets the error again
    at the flush after the command, but an unbuffered one (PYTHONUNBUFFERED=1) leaves that flush nothing to fail on,
    and a full disk would read as any other OSError. The rest is the stream's own."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        with _writing_output():
            return self._stream.write(text)

    def writelines(self, lines):
        with _writing_output():
            self._stream.writelines(lines)

    def flush(self):
        with _writing_output():
            self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def _marking_stdout():
    stream = sys.stdout
    if stream is not None:  # None: pythonw, no console
        sys.stdout = _MarkedStdout(stream)
    try:
        yield
    finally:
        if isinstance(sys.stdout, _MarkedStdout):  # unless the command pointed it elsewhere itself
            sys.stdout = stream


class _Parser(argparse.ArgumentParser):
    """argparse's parser, and through ``add_subparsers`` each subcommand's, but for what it prints on stdout."""

    def _print_message(self, message, file=None):
        if not message or file is None or file is not sys.stdout:
            try:
                return super()._print_message(message, file)
            except OSError:  # a full stderr: dropped, as Python 3.11's argparse drops it (3.10's lets it through)
                return None
        # argparse drops a write error here, for the flush after --help or --version to meet again; but with an
        # unbuffered stdout (PYTHONUNBUFFERED=1) nothing is left to flush, and the command would end with status 0
        with _writing_output():
            file.write(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="simt-pto",
        description="An emulator of the PTO ISA memory instructions MGATHER and MSCATTER (Ascend A2/A3 and A5): "
                    "run the spec's examples, compile and inspect the A5 kernels, predict coalescing, validate "
                    "Conflict::Last scatters at scale, and check every A5 backend of this machine.",
        epilog="Run 'simt-pto COMMAND --help' for the options of one command. 'python -m simt_pto' is the same "
               "command line. Exit status: 0 success; 1 a check or the run failed (one line on stderr); 2 a bad "
               "argument; 130 interrupted (Ctrl-C); 141 the reader of the output went away (a closed pipe). An "
               "error prints one line, no traceback: --debug shows it.")
    parser.add_argument("--version", action="version", version=f"simt-pto {__version__}",
                        help="print the version and exit")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(name).register(sub)
    for subparser in sub.choices.values():  # `simt-pto demo --debug` too; SUPPRESS keeps a --debug given before
        subparser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    return parser


def main(argv=None) -> int:
    """Run one ``simt-pto`` command: its exit status (argparse's own exits, --help and usage errors, raise
    SystemExit as argparse does)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    run = _Run(debug="--debug" in argv)  # before parsing: a failure while the parser is built
    try:
        try:
            with _marking_stdout():
                status = run(argv)
        except SystemExit:  # --help, --version, a usage error: what argparse printed must reach stdout too
            _flush_output()
            raise
        finally:  # argparse (a usage error) and warnings drop a write error on stderr, for the flush at exit to
            _silence(sys.stderr)  # meet again (status 120, not 2): as fail does for stdout
        _flush_output()  # here, not at exit: a write error must be reported, not ignored at shutdown
        return status
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001  (one line each; --debug shows the traceback)
        if run.debug:
            raise
        return run.fail(exc)


class _Run:
    """One command: parses and runs it, and ends it with one line on stderr when it fails."""

    def __init__(self, debug: bool):
        self.debug = debug
        self.prog = "simt-pto"

    def __call__(self, argv) -> int:
        args = build_parser().parse_args(argv)
        self.debug = args.debug
        self.prog = f"simt-pto {args.command}"
        return int(args.func(args) or 0)

    def fail(self, exc: BaseException) -> int:
        """The exit status of a command that raised ``exc``, after its one line on stderr (none for a closed pipe).
        Output that cannot be written is pointed at the null device, so the flush at exit does not fail again."""
        if isinstance(exc, BrokenPipeError):  # the reader of our output went away: say nothing more
            _silence(sys.stdout, always=True)
            _silence(sys.stderr)
            return EXIT_PIPE_CLOSED
        stdout_error = _silence(sys.stdout)
        if stdout_error is None and isinstance(exc, _OutputError):  # the write failed, and left this flush nothing to fail on
            stdout_error = exc
        if isinstance(exc, KeyboardInterrupt):
            self.say("interrupted")
            return EXIT_INTERRUPTED
        if isinstance(exc, JitRequiredError):  # the environment, not an argument: one line, no usage
            self.error(exc)
            return EXIT_USAGE
        if isinstance(exc, MissingExtraError):  # a backend or tool of an extra this install leaves out
            self.error(exc)
        elif isinstance(exc, MemoryError):
            self.error(f"not enough memory for this request ({exc or 'MemoryError'}); pick smaller sizes")
        elif stdout_error is not None:  # the output itself cannot be written (a full disk, /dev/full)
            self.error(f"cannot write the output: {stdout_error.strerror or stdout_error}")
        elif isinstance(exc, OSError):
            self.error(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
        else:
            what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            self.error(f"{what} (run with --debug for the traceback)")
        return EXIT_FAILED

    def error(self, message) -> None:
        """``simt-pto COMMAND: error: MESSAGE`` (argparse's form), on one line."""
        self.say(f"error: {message}")

    def say(self, message) -> None:
        """One line on stderr; nothing when stderr itself cannot be written (a closed pipe, a full disk)."""
        try:
            print(f"{self.prog}: {' '.join(str(message).split())}", file=sys.stderr, flush=True)
        except OSError:
            _silence(sys.stderr, always=True)


def _flush(stream) -> None:
    if stream is not None:
        stream.flush()


def _flush_output() -> None:
    with _writing_output():
        _flush(sys.stdout)


def _silence(stream, always: bool = False) -> OSError | None:
    """Point ``stream``'s file descriptor at the null device when it cannot be written (``always``: in any case),
    so that the flush at interpreter exit does not fail again with "Exception ignored" and status 120: Python's
    recipe for SIGPIPE (the ``signal`` module's documentation). Returns the write error, or None. A stream with no
    file descriptor (a StringIO when the command line runs inside another program) is left as it is."""
    error = None
    try:
        _flush(stream)
    except OSError as exc:
        error = exc
    if error is not None or always:
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
            return error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    return error


if __name__ == "__main__":
    sys.exit(main())
