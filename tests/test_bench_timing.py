"""``bench/bench_cpu.py``'s ``paired_times``, the one timer of the benchmarks' paired rounds: how many warm-up pairs
it makes before the timed ones (a peer's first results can be new memory faulted in page by page, which a loop of
calls stops paying: docs/performance.md), and what a round times (each side's own repeated call, after untimed
calls that leave the caches as that side's calls do, not as the other side's last call left them)."""
from __future__ import annotations

import statistics

import numpy as np
import pytest

from conftest import bench_module


@pytest.fixture
def bench_cpu():
    return bench_module("bench_cpu")


def _counted():
    calls = []
    return calls, lambda: calls.append(1)


@pytest.mark.parametrize("seconds, warm_ups", [(60.0, 30), (0.0, 3)])
def test_the_warm_up_runs_three_pairs_then_more_until_thirty_or_its_time_is_up(bench_cpu, monkeypatch, seconds,
                                                                                warm_ups):
    monkeypatch.setattr(bench_cpu, "WARM_UP_SECONDS", seconds)
    (ours, our_call), (theirs, their_call) = _counted(), _counted()
    bench_cpu.paired_times(our_call, their_call, 7, method="pairs")
    assert len(ours) == len(theirs) == warm_ups + 7


class _Clock:
    """A fake ``time.perf_counter``: each call of a side advances it by that side's cost, which is ``first`` for the
    first call after a call of the other side (the caches as the other side left them), ``steady`` after that."""

    def __init__(self):
        self.now, self.last, self.order = 0.0, None, []

    def __call__(self):
        return self.now

    def side(self, name, first, steady):
        def call():
            self.now += steady if self.last == name else first
            self.last = name
            self.order.append(name)
        return call


def test_a_round_times_each_sides_own_repeated_call_after_its_untimed_calls(bench_cpu, monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(bench_cpu.time, "perf_counter", clock)
    monkeypatch.setattr(bench_cpu, "WARM_UP_SECONDS", 0.0)
    monkeypatch.setattr(bench_cpu, "BLOCK_WARM_UP", (2, 1e9))
    monkeypatch.setattr(bench_cpu, "BLOCK_TIMED", (3, 1e9))
    ours = clock.side("ours", first=9.0, steady=1.0)
    theirs = clock.side("theirs", first=5.0, steady=2.0)
    ours_t, theirs_t, ratio = bench_cpu.paired_times(ours, theirs, 4)
    # the steady costs alone: the first call after the other side's (9 and 5) is one of the untimed ones
    assert (ours_t, theirs_t, ratio) == (1.0, 2.0, 2.0)
    # 3 warm-up pairs, then 4 rounds of two blocks of 2 + 3 calls, the side that goes first alternating
    rounds = clock.order[6:]
    assert len(rounds) == 4 * 2 * 5
    firsts = [rounds[at] for at in range(0, len(rounds), 10)]
    assert firsts == ["ours", "theirs", "ours", "theirs"]


def test_pairs_time_each_call_right_after_the_other_sides(bench_cpu, monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(bench_cpu.time, "perf_counter", clock)
    monkeypatch.setattr(bench_cpu, "WARM_UP_SECONDS", 0.0)
    ours = clock.side("ours", first=9.0, steady=1.0)
    theirs = clock.side("theirs", first=5.0, steady=2.0)
    assert bench_cpu.paired_times(ours, theirs, 5, method="pairs") == (9.0, 5.0, statistics.median([5 / 9] * 5))


def test_a_block_stops_at_its_time_after_one_call_however_slow(bench_cpu, monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(bench_cpu.time, "perf_counter", clock)
    slow = clock.side("slow", first=10.0, steady=10.0)
    assert bench_cpu.block_time(slow) == 10.0
    assert clock.order == ["slow", "slow"]  # one untimed call and one timed: each is past its block's seconds


def test_an_unknown_method_is_refused_naming_the_choices(bench_cpu):
    with pytest.raises(ValueError, match="rounds, pairs"):
        bench_cpu.paired_times(lambda: None, lambda: None, 1, method="blocks")


def test_bench_peers_times_every_peer_by_the_method_its_command_line_names(monkeypatch, tmp_path):
    bench_peers = bench_module("bench_peers")
    used = []

    def paired_times(ours, peer, repeat, method="rounds"):
        used.append(method)
        return 1.0, 1.0, 1.0
    monkeypatch.setattr(bench_peers, "paired_times", paired_times)
    monkeypatch.setattr(bench_peers, "load_torch", lambda workers: (None, "PyTorch left out (test)"))
    monkeypatch.setattr(bench_peers.pto, "set_a5_backend", lambda backend: None)  # (the process's backend as it is)
    for method in ("pairs", "rounds"):
        used.clear()
        assert bench_peers.main(["--ops", "row_gather", "--sizes", "256", "--row-cols", "16", "--dtypes", "float32",
                                 "--repeat", "1", "--method", method, "--out", str(tmp_path)]) == 0
        assert used and set(used) == {method}  # the Row gather's peers and the per-call overhead alike
        assert f'"method": "{method}"' in (tmp_path / "peers.json").read_text()
        timed = (tmp_path / "peers.csv").read_text()
        assert all(f",{peer}," in timed for peer in ("numpy", "copy", "new copy", "row copy", "row read"))


def test_the_row_gather_table_shows_the_share_of_the_copy_that_a_read_of_the_rows_reaches(monkeypatch, tmp_path):
    """The table's read-bound line shows the read against the copy as timed in their own rounds: with the read at
    4 ms a call and the copy at 1 ms, a quarter of the copy's rate, the most a gather of those rows can get (the
    figures made by hand, as a Row gather bench would return them)."""
    bench_peers = bench_module("bench_peers")
    monkeypatch.setattr(bench_peers, "load_torch", lambda workers: (None, "PyTorch left out (test)"))
    monkeypatch.setattr(bench_peers.pto, "set_a5_backend", lambda backend: None)
    monkeypatch.setitem(bench_peers.BENCHES, "row_gather", lambda rng, n, dtype, torch, repeat, cols: {
        "copy": (9e-3, 1e-3, 1 / 9), "row read": (9e-3, 4e-3, 4 / 9), "read bound": (4e-3, 1e-3, 0.25)})
    assert bench_peers.main(["--ops", "row_gather", "--sizes", "16M", "--dtypes", "float16", "--no-overhead",
                             "--out", str(tmp_path)]) == 0
    (line,) = [line for line in (tmp_path / "peers.md").read_text().splitlines()
               if line.startswith("| That read of the rows vs the plain copy")]
    assert [cell.strip() for cell in line.strip("|").split("|")][1:] == ["float16", "0.25x"]


def test_the_row_gather_bench_times_the_read_against_the_copy_in_rounds_of_their_own(monkeypatch):
    # which callable paired_times got as "ours" and as the peer, for each figure of the Row gather bench
    bench_peers = bench_module("bench_peers")
    pairs = []

    def paired_times(ours, peer, repeat, method="rounds"):
        pairs.append((ours, peer))
        return 1.0, 1.0, 1.0
    monkeypatch.setattr(bench_peers, "paired_times", paired_times)
    result = bench_peers.row_gather(np.random.default_rng(0), 256, np.dtype("float32"), None, 1, cols=16)
    by_name = dict(zip(result, pairs))
    assert set(by_name) == {"numpy", "new copy", "row copy", "copy", "row read", "read bound"}
    assert by_name["read bound"] == (by_name["row read"][1], by_name["copy"][1])  # the read as ours, the copy as peer


@pytest.mark.parametrize("coalesce", ["row", "elem"])
@pytest.mark.parametrize("atomic", ["add", "max", "min"])
def test_the_scatter_atomics_bench_checks_and_times_both_forms_and_numpy(monkeypatch, atomic, coalesce):
    """``bench/bench_scatter_atomics.py`` at a small size: both of our forms and numpy's peer give the checked result
    (the bench raises otherwise) and each is timed, for every op it takes; a Max / Min restores each side's table
    before its timed call (a repeated Max changes nothing)."""
    import numpy as np

    import simt_pto as pto
    if pto.a5_backend() != "multicore":
        pytest.skip("the bench runs the multicore backend's two forms")
    bench = bench_module("bench_scatter_atomics")
    copied = []
    copyto = np.copyto
    monkeypatch.setattr(bench.np, "copyto", lambda dst, src: (copied.append(dst.shape), copyto(dst, src)))
    got = bench.run(2048, np.dtype(np.float32), 16, 2, None, atomic, coalesce)
    assert set(got) == {"plain", "atomic", "numpy"} and all(t > 0 for t in got.values())
    assert len(copied) == (0 if atomic == "add" else 2 * 3)
