"""``simt-pto demo``: every target agrees with the expected results; rejected calls name their rule."""
from simt_pto.host.tools.cli import main


def test_demo_cross_checks_every_target(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith("| ")]
    assert [c.strip() for c in table[0].split("|")[3:6]] == ["cpu", "a2a3", "a5"]
    assert len(table) > 10 and not any("FAIL" in line for line in table)
    assert all(" ok " in line.split("|")[5] for line in table[1:])  # A5 runs every case
    assert "rejected by rule: [R, 1] ColMajor index on a2a3: index tile BLayout::RowMajor" in out
    assert out.rstrip().endswith("all targets agree with the expected results")
