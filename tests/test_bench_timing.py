"""``bench/bench_cpu.py``'s ``paired_times``, the one timer of the benchmarks' paired rounds: how many warm-up pairs
it makes before the timed ones (a peer's first results can be new memory faulted in page by page, which a loop of
calls stops paying: docs/performance.md)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture
def bench_cpu():
    spec = importlib.util.spec_from_file_location("bench_cpu", BENCH / "bench_cpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _counted():
    calls = []
    return calls, lambda: calls.append(1)


@pytest.mark.parametrize("seconds, warm_ups", [(60.0, 30), (0.0, 3)])
def test_the_warm_up_runs_three_pairs_then_more_until_thirty_or_its_time_is_up(bench_cpu, monkeypatch, seconds,
                                                                                warm_ups):
    monkeypatch.setattr(bench_cpu, "WARM_UP_SECONDS", seconds)
    (ours, our_call), (theirs, their_call) = _counted(), _counted()
    bench_cpu.paired_times(our_call, their_call, 7)
    assert len(ours) == len(theirs) == warm_ups + 7
