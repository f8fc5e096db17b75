"""``bench/worst_of_runs.py``, which makes README's CPU table from several ``bench_peers.py`` runs: each cell is the
lowest ratio of the runs (peer time / ours: the run least in our favour), each per-call case the highest (our time /
numpy's)."""
from __future__ import annotations

import json

import pytest

from conftest import bench_module


def _worst_of_runs():
    return bench_module("worst_of_runs")


def _run(ratios: dict, per_call: float) -> dict:
    return {"results": [{"op": op, "dtype": "float32", "size": size, "peer": peer, "ratio": ratio}
                        for (op, size, peer), ratio in ratios.items()],
            "overhead": [{"case": "gather", "times_numpy": per_call, "us_per_call": per_call, "numpy_us_per_call": 1.0}]}


def test_each_cell_is_the_lowest_ratio_and_each_per_call_case_the_highest(tmp_path, capsys):
    runs = [_run({("row_gather", 1 << 20, "torch"): 1.5, ("row_gather", 1 << 18, "torch"): 0.9}, 5.2),
            _run({("row_gather", 1 << 20, "torch"): 0.8, ("row_gather", 1 << 18, "torch"): 1.1}, 4.9),
            _run({("row_gather", 1 << 20, "torch"): 1.2}, 5.0)]
    paths = []
    for k, run in enumerate(runs):
        paths.append(tmp_path / f"run{k}.json")
        paths[-1].write_text(json.dumps(run))
    assert _worst_of_runs().main([str(p) for p in paths]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| row_gather | torch |"))
    assert row == "| row_gather | torch | float32 | 0.90x (0.90-1.10, 2 of 3 runs) | 0.80x (0.80-1.50) |"
    assert "| gather | 5.2x (4.9-5.2) | 4.9-5.2 | 1.00-1.00 |" in out


@pytest.mark.parametrize("field, value, default, named", [
    ("row_cols", 16, 64, "16, 64 columns"),  # bench_peers.py --row-cols: different Row gathers
    ("method", "rounds", "pairs", "pairs, rounds"),  # --method: rounds of blocks and back-to-back pairs time
])                                                   # different things at 1M-4M
def test_runs_that_measure_different_things_are_not_mixed(tmp_path, capsys, field, value, default, named):
    """Runs whose environments differ in ``field`` are refused, naming both values; a run made before the option
    counts as its default, and so mixes with a run that states the default."""
    paths = [tmp_path / "other.json", tmp_path / "old.json", tmp_path / "default.json"]
    paths[0].write_text(json.dumps({**_run({("row_gather", 1 << 20, "torch"): 0.5}, 5.0), "environment": {field: value}}))
    paths[1].write_text(json.dumps(_run({("row_gather", 1 << 20, "torch"): 1.5}, 5.0)))
    paths[2].write_text(json.dumps({**_run({("row_gather", 1 << 20, "torch"): 1.2}, 5.0),
                                    "environment": {field: default}}))
    assert _worst_of_runs().main([str(paths[0]), str(paths[1])]) == 2
    captured = capsys.readouterr()
    assert named in captured.err and "row_gather" not in captured.out
    assert _worst_of_runs().main([str(paths[1]), str(paths[2])]) == 0
