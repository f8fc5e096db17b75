"""``simt-pto coalesce``: the coalescing analyzer (:mod:`simt_pto.host.tools.coalescing`) on the command line.

    simt-pto coalesce --op mgather --coalesce elem --idx idx.npy --table 65536x64 --dtype float16 [--tile RxC]
                      [--atomic add] [--json]

Prints, per warp-level memory instruction of the A5 launches that call makes, the GM segments and sectors
touched, bytes requested vs moved, efficiency and the UB access regularity (``--json``: the report as JSON,
with ``gm_loads`` / ``gm_stores`` / ``gm_atomics`` summaries). Nothing runs on a GPU, unless ``--measure`` asks for
the GPU's own counters of the same launches beside the prediction (:mod:`.counter_check`). The call is the whole-array
one (``simt_pto.gather`` / ``scatter``, every launch its plan makes) unless ``--call tile`` or a tile-only option
(``--tile-layout``, ``--idx-layout``, a Row ``--tile`` whose cols are not the table's) asks for the tile op's launch,
replayed per tile (:func:`simt_pto.host.tools.coalescing.analyze`).
"""
from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np

from simt_pto import dtypes
from simt_pto.errors import ConstraintError, OutOfBoundsError

from . import coalescing, counter_check, gpu_counters
from .arguments import load_npy, memory_problem, non_negative_int


def _shape(text: str) -> tuple[int, ...]:
    try:
        parts = tuple(int(p) for p in text.lower().replace("*", "x").split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ROWSxCOLS (or N), got {text!r}") from None
    if not 1 <= len(parts) <= 2 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"expected ROWSxCOLS (or N) with positive extents, got {text!r}")
    return parts


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "coalesce", help="predict the memory coalescing of an A5 MGATHER / MSCATTER call (no GPU needed)",
        description="Predict the memory coalescing of the A5 kernels one MGATHER / MSCATTER call launches, from its "
                    "indices alone (nothing runs on a GPU). For each warp-level memory instruction the report gives "
                    "the global-memory segments and sectors touched, the bytes requested and moved, the efficiency, "
                    "and how regular the UB accesses are. By default the call is the whole-array one "
                    "(simt_pto.gather / simt_pto.scatter on a5): the report replays every launch its plan makes, as "
                    "the hardware makes it where the emulator moves rows in wider units. --call tile replays the "
                    "tile op's launch (simt_pto.mgather / simt_pto.mscatter) once per tile instead; --tile-layout, "
                    "--idx-layout and a Row --tile whose cols are not the table's describe a tile op and select it.",
        epilog="Example: simt-pto coalesce --op mgather --coalesce elem --idx idx.npy --table 65536x64 "
               "--dtype float16. With --json the report is one JSON object, with gm_loads / gm_stores / "
               "gm_atomics summaries. A whole-array Conflict::Last scatter is replayed on its slot-centric path "
               "unless --last-path owner (one owner per table slot) is given; the multicore backend's serial "
               "loop (--last-path auto, Elem) and the compact owner path are not modelled and are refused by name.")
    p.add_argument("--op", required=True, choices=("mgather", "mscatter"), help="the instruction")
    p.add_argument("--coalesce", default="row", choices=("row", "elem"),
                   help="row: whole rows; elem: single elements (default row)")
    p.add_argument("--idx", required=True, metavar="FILE.npy",
                   help="the indices (.npy): Row 1-D row indices; Elem 1-D or 2-D element indices")
    p.add_argument("--table", required=True, type=_shape, metavar="ROWSxCOLS", help="the GM table's shape")
    p.add_argument("--dtype", default="float32", help="element type (default float32)")
    p.add_argument("--call", choices=("whole", "tile"),
                   help="whole: every launch of the whole-array call; tile: the tile op's launch, once per tile "
                        "(default: tile when --tile-layout, --idx-layout or a Row --tile whose cols are not the "
                        "table's is given, else whole)")
    p.add_argument("--tile", type=_shape, metavar="RxC",
                   help="valid shape of one dst / src tile (default: 256 rows Row, 4096 positions Elem, "
                        "halved until the tiles fit the UB budget); a whole call takes R as its tile_rows")
    p.add_argument("--tile-layout", choices=("row_major", "col_major"),
                   help="the dst / src tile's BLayout (a tile op only)")
    p.add_argument("--idx-layout", choices=("row", "col", "row_major", "col_major"),
                   help="Row: [1, R] RowMajor (row) or [R, 1] ColMajor (col); Elem: the index tile's BLayout "
                        "(a tile op only)")
    p.add_argument("--atomic", default="none", choices=("none", "add", "max", "min"), help="MSCATTER atomic op")
    p.add_argument("--conflict", default="last", choices=("last", "default"), help="MSCATTER conflict policy")
    p.add_argument("--last-path", default="slot", choices=("slot", "owner", "auto"),
                   help="whole-array Conflict::Last: the slot-centric kernels, one launch per tile (default); the "
                        "owner path; or what the multicore backend chooses")
    p.add_argument("--owner", choices=("dense", "compact"),
                   help="--last-path owner: one owner per table slot (dense, modelled) or per distinct slot "
                        "(compact, not modelled); default: the call's choice")
    p.add_argument("--oob", default="undefined",
                   help="GatherOOB (undefined, clamp, wrap, zero) or ScatterOOB (undefined, skip, clamp, wrap)")
    p.add_argument("--no-strict", dest="strict", action="store_false",
                   help="UNDEFINED masks out-of-range indices instead of refusing them")
    p.add_argument("--base-offset", type=non_negative_int, default=0, metavar="BYTES",
                   help="GM table start address modulo 128 (a multiple of the element size)")
    p.add_argument("--dyn-ubuf-size", type=non_negative_int, default=None, metavar="BYTES", help="A5 dynamic UB size")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--measure", action="store_true",
                   help="also run the call's launches on this machine's CUDA GPU and put the GPU's own counters "
                        "(global-memory sectors per request of loads, stores and atomics, through CUPTI: the "
                        "counters extra) beside the prediction; exit status 1 when a kind differs by more than "
                        f"{counter_check.TOLERANCE:.0%}%. A whole-array call only")
    p.set_defaults(func=run, parser=p)
    return p


def run(args) -> int:
    """Bad arguments end in argparse's usage and one error line naming the argument (exit 2)."""
    parser = args.parser
    try:  # a regular .npy file (a FIFO or a device is refused before it is opened), as validate-last reads one
        idx = load_npy(args.idx)
    except ValueError as exc:
        parser.error(f"argument --idx: {args.idx}: {exc}")
    try:
        itemsize = dtypes.resolve(args.dtype).itemsize
    except (TypeError, ValueError):
        itemsize = 1  # the analysis names the bad dtype below
    problem = memory_problem(math.prod(args.table) * itemsize)  # the analysis models the table in memory
    if problem:
        parser.error(f"argument --table: a {'x'.join(map(str, args.table))} {args.dtype} table {problem}")
    if not isinstance(idx, np.ndarray) or idx.ndim not in (1, 2) or (args.coalesce == "row" and idx.ndim != 1):
        want = "1-D (one row index per destination row)" if args.coalesce == "row" else "1-D or 2-D"
        parser.error(f"argument --idx: {args.idx} holds a {getattr(idx, 'ndim', '?')}-D array; "
                     f"--coalesce {args.coalesce} needs {want}")
    try:
        report = coalescing.analyze(
            args.op, args.coalesce, idx, args.table, args.tile, args.dtype, atomic=args.atomic,
            conflict=args.conflict, oob=args.oob, strict=args.strict, base_offset_bytes=args.base_offset,
            tile_layout=args.tile_layout, idx_layout=args.idx_layout, dyn_ubuf_size=args.dyn_ubuf_size,
            call=args.call, last_path=args.last_path, owner=args.owner)
    except (ConstraintError, OutOfBoundsError, ValueError, TypeError) as exc:
        parser.error(" ".join(str(exc).split()))
    if args.measure:
        return _measure(args, parser, idx, report)
    if args.json:
        json.dump(report.as_dict(), sys.stdout, indent=2)
        print()
    else:
        print(report.format())
    return 0


def _measure(args, parser, idx, report) -> int:
    """``--measure``: the GPU's counters for the same launches beside the model (:mod:`.counter_check`)."""
    if report.call != "whole":
        parser.error("argument --measure: measures a whole-array call (leave out --call tile and the tile-only "
                     "options)")
    try:
        checked = counter_check.measure_call(
            args.op, args.coalesce, idx, args.table, args.dtype, atomic=args.atomic, conflict=args.conflict,
            oob=args.oob, tile_shape=args.tile, last_path=args.last_path, base_offset_bytes=args.base_offset)
    except gpu_counters.CountersUnavailable as exc:
        print(f"simt-pto coalesce --measure: the GPU's counters cannot be read here: {exc}", file=sys.stderr)
        return 3
    if args.json:
        json.dump({"report": report.as_dict(), "measured": [vars(k) for k in checked.kinds],
                   "launches": [{"kernel": c.kernel, **c.values} for c in checked.launches],
                   "agrees": checked.agrees()}, sys.stdout, indent=2)
        print()
    else:
        print(report.format())
        print()
        print(counter_check.format_checks([(f"{args.op} {args.coalesce}", checked.kinds)], "this GPU"))
    return 0 if checked.agrees() else 1


def main(argv=None) -> int:
    """Run ``simt-pto coalesce`` alone (``python -m simt_pto.host.tools.coalesce_cli ...``): the command line's
    :func:`~simt_pto.host.tools.cli.main`, with its exit statuses and error lines."""
    from .cli import main as cli_main  # not at module level: the command line imports this module
    return cli_main(["coalesce", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
