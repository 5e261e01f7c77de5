"""The search benchmark (benchmarks/search.py) at a tiny scale: every method within its budget, and resumable."""

import json
import math

import pytest

from benchmarks import search

METHODS = ["random", "tpe", "tpe-median", "pbt"]
TINY = ["--task", "cartpole-dqn", "--seeds", "0", "--methods", ",".join(METHODS), "--budget-steps", "3000",
        "--trial-steps", "1500", "--population", "2", "--quantile", "0.5", "--ready-interval", "500",
        "--eval-episodes", "1", "--rerun-seeds", "1", "--rerun-episodes", "1", "--jobs", "1"]


@pytest.mark.slow
def test_every_method_searches_within_the_budget_and_a_second_call_runs_nothing_new(tmp_path, capsys):
    search.main([*TINY, "--out", str(tmp_path)])
    out = capsys.readouterr().out
    written = (tmp_path / "results.json").read_text()
    runs = json.loads(written)["runs"]
    assert sorted(runs) == sorted(f"cartpole-dqn/{method}/0" for method in METHODS)
    for entry in runs.values():
        assert 0 < entry["steps"] <= 3000
        assert math.isfinite(entry["best"])
        assert len(entry["rerun"]["values"]) == 1 and math.isfinite(entry["rerun"]["mean"])
    assert len(runs["cartpole-dqn/random/0"]["trials"]) == 2  # budget / trial steps
    assert runs["cartpole-dqn/pbt/0"]["schedule"][0][0] == 0  # the best member's settings from step 0
    assert "| pbt | 0 |" in out and "PBT's best" in out

    search.main([*TINY, "--out", str(tmp_path)])
    again = capsys.readouterr().out
    assert "started" not in again and "re-run on fresh seeds [" not in again
    assert again.count("in results.json: skipped") == len(METHODS)
    assert (tmp_path / "results.json").read_text() == written

    with pytest.raises(SystemExit):  # the pruned sweep was stored with the default warm-up: not resumed with another
        search.main([*TINY, "--warmup-steps", "500", "--out", str(tmp_path)])
    assert "tpe-median/0 with other warmup_steps (None)" in capsys.readouterr().err
