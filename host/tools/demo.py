"""``simt-pto demo``: the spec's example tile ops on every target, cross-checked, printed as a table.

Each case builds fresh inputs, computes its expected result with plain numpy (the spec's formula, as a
sequential loop where order matters), and runs on every target. A cell is ``ok`` (bitwise equal to the
expectation), ``n/a`` (the target rejects the call by a spec rule: the rule is listed under the
table), ``cpu sim`` (the ``cpu`` target's documented divergence: it follows MSCATTER's CPU reference form, an
element-wise plain replace with no atomic or OOB parameter) or ``FAIL``. The exit status is 1 if any cell failed.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from simt_pto.host import dispatch
from simt_pto.backend import a5_backend
from simt_pto.errors import ConstraintError
from simt_pto.host.tile_ops import mgather, mscatter
from simt_pto.tensor import GlobalTensor
from simt_pto.tile import Tile

from .arguments import non_negative_int

TARGETS = ("cpu", "a2a3", "a5")


@dataclass
class Case:
    name: str
    spec: str                   # the spec example it mirrors
    build: Callable             # rng -> inputs dict
    run: Callable               # (inputs, target) -> result array
    expected: Callable          # inputs -> expected array
    cpu_differs: bool = False   # the CPU simulator's MSCATTER semantics differ by design


def _table(rng, rows, cols, dtype):
    return rng.integers(-100, 100, (rows, cols)).astype(dtype)


# -- the cases ---------------------------------------------------------------------------------------

def _embedding_lookup():
    def build(rng):
        table = _table(rng, 64, 64, np.float16)
        idx = rng.integers(-3, 70, 8).astype(np.int32)  # some out of range: Clamp
        return dict(table=table, idx=idx)

    def run(d, target):
        dst = Tile(np.float16, 8, 64)
        idx = Tile.from_array(d["idx"][None, :], 1, 8)
        mgather(dst, GlobalTensor(d["table"]), idx, coalesce="row", oob="clamp", target=target)
        return dst.numpy()

    def expected(d):
        rows = np.minimum(d["idx"].astype(np.int64) & 0xFFFFFFFF, 63)
        return d["table"][rows]
    return Case("embedding lookup", "MGATHER Row, Clamp, half 8x64", build, run, expected)


def _wrapped_elem_gather_case(name, what, shape, gather):
    """An Elem MGATHER case under Wrap from a 256-element float table: ``gather(d, target)`` runs it and returns
    the destination; the expected result is the uint32 index modulo 256, written out."""
    def build(rng):
        return dict(table=rng.random(256).astype(np.float32), idx=rng.integers(-300, 600, shape).astype(np.int32))

    def expected(d):
        return d["table"][(d["idx"].astype(np.int64) & 0xFFFFFFFF) % 256]
    return Case(name, what, build, gather, expected)


def _elem_2d():
    def run(d, target):
        dst = Tile(np.float32, 8, 32)
        mgather(dst, GlobalTensor(d["table"]), Tile.from_array(d["idx"]), coalesce="elem", oob="wrap", target=target)
        return dst.numpy()
    return _wrapped_elem_gather_case("2-D random access", "MGATHER Elem, Wrap, float 8x32", (8, 32), run)


def _row_colmajor_idx():
    def build(rng):
        return dict(table=_table(rng, 64, 64, np.float16), idx=rng.integers(0, 64, 8).astype(np.int32))

    def run(d, target):
        dst = Tile(np.float16, 8, 64)
        idx = Tile.from_array(d["idx"][:, None], 8, 8, blayout="col_major")
        mgather(dst, GlobalTensor(d["table"]), idx, coalesce="row", target=target)
        return dst.numpy()
    return Case("[R, 1] ColMajor index", "MGATHER Row, A5 only", build, run, lambda d: d["table"][d["idx"]])


def _gather_zero():
    def build(rng):
        return dict(table=_table(rng, 16, 32, np.int8), idx=np.array([3, 16, -1, 15], np.int32))

    def run(d, target):
        dst = Tile(np.int8, 4, 32)
        mgather(dst, GlobalTensor(d["table"]), Tile.from_array(d["idx"][None, :], 1, 8), oob="zero",
                    target=target)
        return dst.numpy()

    def expected(d):
        return _rows_or_zero(d["table"], d["idx"], (4, 32))
    return Case("OOB rows read zero", "MGATHER Row, Zero, int8 4x32", build, run, expected)



def _rows_or_zero(table, idx, shape):
    """A Row gather under GatherOOB::Zero, written out: row ``r`` is ``table[uint32(idx[r])]``, or zeros when that
    is out of range."""
    out = np.zeros(shape, table.dtype)
    for r, i in enumerate(idx.astype(np.int64) & 0xFFFFFFFF):
        if i < table.shape[0]:
            out[r] = table[i]
    return out

def _scalar_gather():
    def build(rng):
        return dict(table=rng.random(32).astype(np.float32), idx=np.array([[7]], np.int32))

    def run(d, target):
        dst = Tile(np.float32, 1, 8, valid=(1, 1))
        idx = Tile.from_array(d["idx"], 1, 8)
        mgather(dst, GlobalTensor(d["table"]), idx, coalesce="elem", target=target)
        return dst.valid_numpy()
    return Case("(1, 1) degenerate", "MGATHER Elem (1, 1): scalar path", build, run,
                lambda d: d["table"][d["idx"]])


def _sequential_scatter(table, src_rows, idx_rows, op=None):
    table = table.copy()
    for s, i in zip(src_rows, idx_rows):
        table[i] = s if op is None else op(table[i], s)
    return table


def _row_scatter_case(name, what, dtype, table_rows, cols, idx_high, oob, slot, atomic="none", combine=None):
    """A Row MSCATTER case of 8 source rows into a ``table_rows x cols`` table: ``slot`` is the OOB rule written
    out (index -> row), ``combine`` the atomic op (None: a store)."""
    def build(rng):
        return dict(table=_table(rng, table_rows, cols, dtype), src=_table(rng, 8, cols, dtype),
                    idx=rng.integers(0, idx_high, 8).astype(np.int32))

    def run(d, target):
        table = d["table"].copy()
        mscatter(GlobalTensor(table), Tile.from_array(d["src"]), Tile.from_array(d["idx"][None, :], 1, 8),
                 coalesce="row", atomic=atomic, oob=oob, target=target)
        return table

    def expected(d):
        return _sequential_scatter(d["table"], d["src"], slot(d["idx"]), combine)
    return Case(name, what, build, run, expected, cpu_differs=True)


def _embedding_scatter():
    return _row_scatter_case("embedding scatter", "MSCATTER Row, Clamp, float 8x32", np.float32, 64, 32, 70,
                             "clamp", lambda idx: np.minimum(idx, 63))


def _row_atomic_add():
    return _row_scatter_case("atomic-add aggregation", "MSCATTER Row, Add, Wrap, int32 8x16", np.int32, 16, 16, 40,
                             "wrap", lambda idx: idx % 16, atomic="add", combine=np.add)


def _sparse_update():
    def build(rng):
        return dict(table=rng.random(256).astype(np.float32), src=rng.random((8, 32)).astype(np.float32),
                    idx=rng.permutation(300)[:256].reshape(8, 32).astype(np.int32))

    def run(d, target):
        table = d["table"].copy()
        mscatter(GlobalTensor(table), Tile.from_array(d["src"]), Tile.from_array(d["idx"]),
                     coalesce="elem", oob="skip", target=target, strict=target != "cpu")
        return table

    def expected(d):
        keep = d["idx"] < 256
        return _sequential_scatter(d["table"], d["src"][keep], d["idx"][keep])
    return Case("sparse update", "MSCATTER Elem, Skip, float 8x32", build, run, expected)


def _deterministic_last():
    def build(rng):
        return dict(table=np.zeros((64, 64), np.float16), src=_table(rng, 8, 64, np.float16),
                    idx=rng.integers(0, 4, 8).astype(np.int32))  # heavy collisions

    def run(d, target):
        table = d["table"].copy()
        idx = Tile.from_array(d["idx"][:, None], 8, 16, blayout="col_major") if target == "a5" else \
            Tile.from_array(d["idx"][None, :], 1, 16)
        mscatter(GlobalTensor(table), Tile.from_array(d["src"]), idx, coalesce="row", oob="clamp",
                     conflict="last", target=target)
        return table

    def expected(d):
        return _sequential_scatter(d["table"], d["src"], d["idx"])
    return Case("deterministic Last", "MSCATTER Row, Last, half, 8 rows onto 4", build, run, expected,
                cpu_differs=True)


def _scalar_scatter():
    def build(rng):
        return dict(table=rng.random(32).astype(np.float32), src=np.array([[2.5]], np.float32),
                    idx=np.array([[9]], np.int32))

    def run(d, target):
        table = d["table"].copy()
        mscatter(GlobalTensor(table), Tile.from_array(d["src"], 1, 8), Tile.from_array(d["idx"], 1, 8),
                     coalesce="elem", target=target)
        return table

    def expected(d):
        out = d["table"].copy()
        out[9] = 2.5
        return out
    return Case("(1, 1) degenerate scatter", "MSCATTER Elem (1, 1): scalar path", build, run, expected)


def _l1_tile(dtype, rows, cols):
    """An L1 (``TileType::Mat``) NZ tile: ColMajor + SLayout RowMajor + 512 B fractals."""
    return Tile(dtype, rows, cols, loc="mat", blayout="col_major", slayout="row_major")


def _l1_row():
    def build(rng):
        return dict(table=_table(rng, 64, 64, np.float16), idx=rng.integers(-4, 72, 16).astype(np.int32))

    def run(d, target):
        dst = _l1_tile(np.float16, 16, 64)
        mgather(dst, GlobalTensor(d["table"]), GlobalTensor(d["idx"]), coalesce="row", oob="zero",
                    target=target)
        return dst.numpy()

    def expected(d):
        return _rows_or_zero(d["table"], d["idx"], (16, 64))
    return Case("L1 row gather (NZ)", "MGATHER GM -> L1 Row, Zero, half 16x64", build, run, expected)


def _l1_elem():
    def run(d, target):
        dst = _l1_tile(np.float32, 16, 16)
        scratch = GlobalTensor(np.zeros(16 * 16, np.float32))
        mgather(dst, GlobalTensor(d["table"]), GlobalTensor(d["idx"]), coalesce="elem", oob="wrap",
                exec="simt" if target == "a5" else "scalar", scratch=scratch, target=target)
        return dst.numpy()
    return _wrapped_elem_gather_case("L1 elem gather (scratch)",
                                     "MGATHER GM -> L1 Elem, Wrap, float 16x16 (SIMT on a5)", (16, 16), run)


CASES = (_embedding_lookup, _elem_2d, _row_colmajor_idx, _gather_zero, _scalar_gather, _embedding_scatter,
         _row_atomic_add, _sparse_update, _deterministic_last, _scalar_scatter, _l1_row, _l1_elem)


def available_targets() -> list[str]:
    found = []
    for target in TARGETS:
        try:
            dispatch.runner(target)
            found.append(target)
        except ImportError:
            pass
    return found


def run_demo(seed: int = 0, out=print) -> int:
    targets = available_targets()
    rules: list[str] = []
    rows = []
    failed = False
    for make in CASES:
        case = make()
        inputs = case.build(np.random.default_rng(seed))
        want = case.expected(inputs)
        cells = []
        for target in targets:
            try:
                case.run(inputs, target)  # the first call compiles the kernel: time the second
            except ConstraintError as err:
                rules.append(f"{case.name} on {target}: {err.rule}")
                cells.append(f"n/a [{len(rules)}]")
                continue
            start = time.perf_counter()
            got = case.run(inputs, target)
            ms = (time.perf_counter() - start) * 1e3
            same = got.shape == want.shape and got.tobytes() == np.asarray(want, got.dtype).tobytes()
            if same:
                cells.append(f"ok {ms:7.1f} ms")
            elif target == "cpu" and case.cpu_differs:
                cells.append("cpu sim")
            else:
                cells.append("FAIL")
                failed = True
        rows.append((case.name, case.spec, *cells))
    header = ("case", "spec example", *targets)
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    def line(r):
        return "| " + " | ".join(str(v).ljust(w) for v, w in zip(r, widths)) + " |"
    out(f"simt_pto demo: A5 backend = {a5_backend()}, targets = {', '.join(targets)}, seed = {seed} "
        "(times: one warm call, validation included)")
    out(line(header))
    out("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        out(line(r))
    for i, rule in enumerate(rules, 1):
        out(f"[{i}] rejected by rule: {rule}")
    if any("cpu sim" in cell for r in rows for cell in r):
        out("cpu sim: the cpu target follows the spec pages' CPU reference form of MSCATTER: element-wise, plain replace")
    out("FAILED" if failed else "all targets agree with the expected results")
    return 1 if failed else 0


DESCRIPTION = """Run the example MGATHER / MSCATTER tile ops of the PTO ISA pages on every target (cpu, a2a3, a5),
check each result bit for bit against a plain numpy computation of the spec's formula, and print one table. A cell
reads ok, n/a (the target refuses the call by a spec rule, listed under the table), cpu sim (the cpu target's
MSCATTER is an element-wise plain replace, as the spec's CPU reference form is) or FAIL."""
"""``simt-pto demo --help`` (argparse refills the lines)."""


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="run the spec's example tile ops on every target, cross-checked",
                              description=DESCRIPTION, epilog="Exit status: 0 when no cell failed, 1 when one did.")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of the random inputs (default 0)")
    p.set_defaults(func=lambda args: run_demo(args.seed))
