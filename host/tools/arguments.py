"""What every ``simt-pto`` subcommand checks the same way, before any work starts.

* Numbers: :func:`int_range` makes an argparse ``type=`` that takes an integer in a range, so a bad one ends in
  argparse's usage line and one error line naming the argument and the range (exit 2), never in a traceback from
  deep inside numpy.
* Input files: :func:`regular_file_problem` refuses anything but a regular file before it is opened (a FIFO would
  block the read, a device such as ``/dev/zero`` never ends); :func:`load_npy` reads one ``.npy`` array without
  trusting its header.
* Sizes: :func:`memory_problem` says when a request needs more bytes than this machine has, so a command can refuse
  it as a usage error instead of starting and running out of memory.

This module imports numpy only: the command line builds its parser from it without loading a kernel.
"""
from __future__ import annotations

import argparse
import math
import os
import stat
from collections.abc import Callable

import numpy as np
from numpy.lib import format as npy_format


def _shown(text: str, limit: int = 40) -> str:
    """``text`` as an error message quotes it, cut short (a 5000-digit number is no use on the screen)."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def int_range(low: int = 1, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type=``: an integer in ``[low, high]`` (``high=None``: no upper bound). Anything else is an
    ``ArgumentTypeError``, which argparse turns into ``argument --rows: expected a positive integer up to
    2147483648, got 3000000000`` (exit 2)."""
    what = {0: "a non-negative integer", 1: "a positive integer"}.get(low, f"an integer >= {low}")
    if high is not None:
        what += f" up to {high}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # not a number, or longer than Python's int-from-text limit
            raise argparse.ArgumentTypeError(f"expected {what}, got {_shown(text)}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {what}, got {_shown(str(value))[1:-1]}")
        return value

    parse.__name__ = what  # argparse names a type by its __name__ in a few messages
    return parse


positive_int = int_range(1)
non_negative_int = int_range(0)


def physical_memory() -> int | None:
    """Bytes of memory this machine has, or None where the platform does not say (no ``sysconf``)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def format_bytes(n: int) -> str:
    """``n`` bytes in words: ``512 B``, ``16.0 MiB``, ``5.7 TiB``."""
    if n < 1024:
        return f"{n} B"
    units = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    power = min((int(n).bit_length() - 1) // 10, len(units))
    return f"{n / 1024 ** power:.1f} {units[power - 1]}"


def memory_problem(nbytes: int) -> str | None:
    """None when ``nbytes`` may fit in this machine's memory; else the reason, in words: ``needs at least 5.7 TiB
    of memory, and this machine has 62.8 GiB``. A request that passes may still run out (other processes, the
    kernels' own buffers); one that fails cannot run."""
    have = physical_memory()
    if have is None or nbytes <= have:
        return None
    return f"needs at least {format_bytes(nbytes)} of memory, and this machine has {format_bytes(have)}"


def regular_file_problem(path) -> str | None:
    """None when ``path`` names a regular file (a symbolic link to one included); else why not, in a few words:
    ``no such file``, ``cannot read it (Permission denied)``, ``not a regular file``. Checked with ``stat`` before
    the file is opened: opening a FIFO blocks until a writer comes, and a device such as ``/dev/zero`` never ends
    (some devices act on the open itself)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "no such file"
    except (OSError, ValueError) as exc:  # a path component that is not a folder, a name too long, a NUL byte
        return f"cannot read it ({getattr(exc, 'strerror', None) or exc})"
    return None if stat.S_ISREG(info.st_mode) else "not a regular file"


def load_npy(path) -> np.ndarray:
    """The array of a ``.npy`` file, C-contiguous and in native byte order (an array stored in the other byte order
    is converted; the values are kept). Anything else is a ValueError saying why, in a few words. Checked before any
    data is read: the path is a regular file (:func:`regular_file_problem`), and the header's shape and dtype fit in
    the bytes the file holds (a header may claim terabytes)."""
    problem = regular_file_problem(path)
    if problem == "not a regular file":
        problem += " (a .npy file is needed)"
    if problem is not None:
        raise ValueError(problem)
    try:
        with open(path, "rb") as f:
            version = npy_format.read_magic(f)
            read_header = (npy_format.read_array_header_1_0 if version == (1, 0) else
                           npy_format.read_array_header_2_0 if version == (2, 0) else None)
            if read_header is None:  # 3.0 (utf-8 field names) has no public reader: np.load's own checks only
                shape, dtype = None, None
            else:
                shape, _, dtype = read_header(f)
            data_bytes = os.fstat(f.fileno()).st_size - f.tell()
        declared = None if shape is None or dtype.hasobject else math.prod(shape) * dtype.itemsize
        array = np.load(path, allow_pickle=False) if declared is None or declared <= data_bytes else None
    except (OSError, ValueError, EOFError, MemoryError) as exc:  # not a .npy file, a pickled object array, a bad header
        raise ValueError(f"not a readable .npy array ({' '.join(str(exc).split())})") from None
    if array is None:
        raise ValueError(f"truncated: its header declares shape {shape} of {dtype} ({declared} bytes), but the file "
                         f"holds {data_bytes} bytes of data")
    if not isinstance(array, np.ndarray):
        raise ValueError(f"holds {type(array).__name__}, not one array")
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return np.ascontiguousarray(array)
