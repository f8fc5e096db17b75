"""The ``simt-pto`` command line. Each subcommand lives in its own module exposing
``register(subparsers)``, which adds its parser and sets ``func`` (returning an exit status)."""
from __future__ import annotations

import argparse
import importlib
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


def positive_int(text: str) -> int:
    """An argparse type: an int >= 1 (argparse names the argument in its error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="simt-pto",
        description="An emulator of the PTO ISA memory instructions MGATHER and MSCATTER (Ascend A2/A3 and A5): "
                    "run the spec's examples, compile and inspect the A5 kernels, predict coalescing, validate "
                    "Conflict::Last scatters at scale, and check every A5 backend of this machine.",
        epilog="Run 'simt-pto COMMAND --help' for the options of one command. 'python -m simt_pto' is the same "
               "command line.")
    parser.add_argument("--version", action="version", version=f"simt-pto {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except JitRequiredError as exc:  # the environment, not an argument: one line, no usage, no traceback
        print(f"simt-pto {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except MissingExtraError as exc:  # a backend or tool of an extra this install leaves out: the same, exit 1
        print(f"simt-pto {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
