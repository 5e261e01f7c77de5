"""CSV exports show text that a spreadsheet would run as a formula as plain text (a leading '); numbers,
negative ones included, stay numbers."""

import csv
import io

import pytest
from django.urls import reverse

from rlweb.experiments.models import Run
from rlweb.experiments.run_views import spreadsheet_safe
from rlweb.experiments.sink import RedisSink

HYPERLINK = '=HYPERLINK("http://x","y")'


def csv_of(response) -> list[list[str]]:
    assert response.status_code == 200 and response["Content-Type"] == "text/csv; charset=utf-8"
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


@pytest.mark.parametrize("cell, shown", [
    (HYPERLINK, "'" + HYPERLINK), ("+1+2", "'+1+2"), ("-2+3", "'-2+3"), ("@SUM(A1:A9)", "'@SUM(A1:A9)"),
    ("\t=1", "'\t=1"), ("\r=1", "'\r=1"), ("CartPole-v1", "CartPole-v1"), ("a=b", "a=b"), ("", ""),
    (-1.5, -1.5), (-3, -3), (0, 0), (None, None),
])
def test_formula_text_gets_a_quote_and_numbers_stay_numbers(cell, shown):
    assert spreadsheet_safe([cell]) == [shown]


@pytest.fixture
def hostile_run(make_experiment):
    experiment = make_experiment(name=HYPERLINK, env_id="@cmd|' /C calc'!A0", tags=["=1+1", "-x"])
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=400)
    sink = RedisSink(run, batch_size=10)
    sink.emit({"kind": "episode", "step": 10, "time": 0.5,
               "values": {"rollout/episode_return": -5.0, "=cmd()": 1.0}})
    sink.emit({"kind": "episode", "step": 20, "time": 1.0,
               "values": {"rollout/episode_return": "+SUM(A1)", "=cmd()": -2.0}})
    sink.close()
    return run


def test_the_compare_csv_neutralises_a_formula_in_a_name_or_an_environment(owner_client, hostile_run):
    header, *rows = csv_of(owner_client.get(reverse("compare-export-csv"), {"runs": str(hostile_run.pk)}))
    assert header[:4] == ["run", "experiment", "algorithm", "env_id"]
    assert {row[1] for row in rows} == {"'" + HYPERLINK} and {row[3] for row in rows} == {"'@cmd|' /C calc'!A0"}
    assert [(row[9], row[10]) for row in rows] == [("'=cmd()", "1.0"), ("rollout/episode_return", "-5.0"),
                                                   ("'=cmd()", "-2.0")]


def test_the_run_csv_neutralises_formula_keys_and_values(owner_client, hostile_run):
    header, *rows = csv_of(owner_client.get(reverse("run-csv", args=[hostile_run.pk])))
    assert header == ["seq", "kind", "step", "time", "'=cmd()", "rollout/episode_return"]
    episodes = [row for row in rows if row[1] == "episode"]
    assert [row[4:] for row in episodes] == [["1.0", "-5.0"], ["-2.0", "'+SUM(A1)"]]
