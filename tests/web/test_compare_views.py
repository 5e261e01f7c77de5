"""The compare page, its data endpoint and the CSV/JSON export: the selection in the URL, access (runs a
user may not see are counted, never shown), validation of every query parameter, export content."""

import csv
import io
import json
import re

import pytest
from django.core.files.base import ContentFile
from django.test import Client
from django.urls import reverse

from rlweb.experiments import compare
from rlweb.experiments.models import Event, Run, Video
from tests.web.test_compare import add_events, returns

PAGE, DATA = reverse("compare"), reverse("compare-data")
CSV, JSON = reverse("compare-export-csv"), reverse("compare-export-json")
ENDPOINTS = [PAGE, DATA, CSV, JSON]


@pytest.fixture
def sweep(make_experiment):
    """Two seeds of a DQN experiment with episode returns and evaluations on different steps."""
    experiment = make_experiment(name="dqn sweep", hyperparameters={"learning_rate": 0.001, "gamma": 0.99})
    runs = [Run.objects.create(experiment=experiment, seed=seed, total_steps=400) for seed in (0, 1)]
    returns(runs[0], [100, 200, 300], [10.0, 20.0, 30.0])
    returns(runs[1], [150, 300], [12.0, 40.0])
    for run in runs:
        add_events(run, "eval", [(300, {"eval/return_mean": 25.0 + run.seed, "eval/return_std": 1.0})])
    return runs


@pytest.fixture
def secret_run(stranger, make_experiment):
    experiment = make_experiment(owner=stranger, name="stranger's secret experiment", hyperparameters={"tau": 0.123})
    run = Run.objects.create(experiment=experiment, seed=7, total_steps=400)
    returns(run, [100], [99.0])
    return run


def without_csrf_token(page: str) -> str:
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', "", page)


def ids(*runs) -> str:
    return ",".join(str(run.pk) for run in runs)


# --- the page ----------------------------------------------------------------------------------------

def test_the_page_shows_the_selected_runs_their_differing_settings_and_export_links(owner_client, sweep, make_experiment):
    other = make_experiment(name="faster", hyperparameters={"learning_rate": 0.01, "gamma": 0.99})
    third = Run.objects.create(experiment=other, seed=0, total_steps=400)
    response = owner_client.get(PAGE, {"runs": ids(*sweep, third)})
    assert response.status_code == 200
    page = response.content.decode()
    assert f'data-run-ids="{ids(*sweep, third)}"' in page
    assert f'{CSV}?runs={ids(*sweep, third)}' in page and f'{JSON}?runs={ids(*sweep, third)}' in page
    differs = [row["name"] for row in response.context["hyperparameters"] if row["differs"]]
    assert differs == ["seed", "learning_rate"]
    assert '<tr class="differs"><th scope="row"><code>learning_rate</code>' in page
    assert '<tr class="same"><th scope="row"><code>gamma</code>' in page
    assert "left out" not in page


def test_runs_the_user_may_not_see_are_left_out_with_a_notice_and_nothing_about_them(owner_client, sweep,
                                                                                    secret_run):
    response = owner_client.get(PAGE, {"runs": ids(sweep[0], secret_run)})
    page = response.content.decode()
    assert response.status_code == 200 and response.context["runs"] == [sweep[0]]
    assert "1 of the runs in this link is left out" in page
    assert "secret" not in page and "tau" not in page and "0.123" not in page
    missing = owner_client.get(PAGE, {"runs": f"{sweep[0].pk},999999"})
    assert missing.context["left_out"] == 1  # a missing run reads the same as somebody else's
    assert without_csrf_token(missing.content.decode()) == without_csrf_token(page)


def test_a_run_shared_by_link_shows_to_its_owner_only(stranger_client, sweep):
    response = stranger_client.get(PAGE, {"runs": ids(*sweep)})
    assert response.status_code == 200 and response.context["runs"] == []
    assert "2 of the runs in this link are left out" in response.content.decode()
    assert "dqn sweep" not in response.content.decode()


def test_checkbox_forms_and_experiments_redirect_to_one_runs_list(owner_client, sweep, make_experiment):
    response = owner_client.get(PAGE, {"runs": [str(sweep[1].pk), str(sweep[0].pk)], "group": "experiment"})
    assert response.status_code == 302 and response.url == f"{PAGE}?runs={ids(sweep[1], sweep[0])}&group=experiment"
    whole = owner_client.get(PAGE, {"experiment": str(sweep[0].experiment_id)})
    assert whole.url == f"{PAGE}?runs={ids(*sweep)}"


def test_experiments_of_other_users_are_not_expanded(stranger_client, sweep):
    response = stranger_client.get(PAGE, {"experiment": str(sweep[0].experiment_id)}, follow=True)
    assert response.context["runs"] == [] and "were left out" in response.content.decode()


def test_without_runs_the_page_explains_how_to_pick_them_and_offers_the_users_runs(owner_client, sweep, secret_run):
    response = owner_client.get(PAGE)
    page = response.content.decode()
    assert response.status_code == 200 and 'id="compare-empty"' in page
    assert f'name="runs" value="{sweep[0].pk}"' in page and f'value="{secret_run.pk}"' not in page


@pytest.mark.parametrize("query, message", [
    ({"runs": "abc"}, "run numbers"), ({"runs": "3,x"}, "run numbers"), ({"runs": "-1"}, "run numbers"),
    ({"runs": "9" * 40}, "run numbers"), ({"runs": ",".join(map(str, range(1, 52)))}, "at most 50 runs"),
    ({"group": "colour"}, "group must be"), ({"band": "iqr"}, "band must be"), ({"x": "episodes"}, "x must be"),
    ({"threshold": "lots"}, "threshold must be a number"), ({"threshold": "nan"}, "finite"),
])
@pytest.mark.parametrize("url", ENDPOINTS)
def test_bad_query_values_are_a_400_with_a_message(owner_client, sweep, url, query, message):
    response = owner_client.get(url, {"runs": ids(*sweep), **query})
    assert response.status_code == 400
    text = response.json()["error"] if url != PAGE else response.content.decode()
    assert message in text


def test_a_checkbox_form_with_a_bad_value_lands_on_the_message(owner_client, sweep):
    response = owner_client.get(PAGE, {"runs": [str(sweep[0].pk), "x"]}, follow=True)
    assert response.status_code == 400 and "is not one" in response.content.decode()


@pytest.mark.parametrize("url", ENDPOINTS)
def test_every_endpoint_needs_a_login(url, sweep):
    response = Client().get(url, {"runs": ids(*sweep)})
    assert response.status_code == 302 and response.url.startswith(reverse("login"))


# --- the data the page draws ------------------------------------------------------------------------------

def test_the_data_has_each_runs_curves_groups_and_summary(owner_client, sweep, secret_run):
    overlay = owner_client.get(DATA, {"runs": ids(*sweep, secret_run)}).json()
    assert overlay["metrics"][0]["key"] == "rollout/episode_return" and "groups" not in overlay["metrics"][0]
    assert overlay["metrics"][0]["runs"][str(sweep[1].pk)] == {"x": [150, 300], "value": [12.0, 40.0]}
    along_time = owner_client.get(DATA, {"runs": ids(*sweep), "x": "time"}).json()
    assert along_time["metrics"][0]["runs"][str(sweep[1].pk)]["x"] == [1.5, 3.0]
    data = owner_client.get(DATA, {"runs": ids(*sweep, secret_run), "group": "experiment", "threshold": "25.5"}).json()
    assert data["left_out"] == 1 and [run["id"] for run in data["runs"]] == [run.pk for run in sweep]
    assert "secret" not in json.dumps(data) and "secret" not in json.dumps(overlay)
    metric = data["metrics"][0]
    assert metric["key"] == "rollout/episode_return" and "runs" not in metric
    assert metric["groups"][0]["label"] == f"dqn sweep #{sweep[0].experiment_id}"
    assert metric["groups"][0]["seeds"] == 2 and metric["groups"][0]["x"][-1] == 300
    assert metric["groups"][0]["mean"][-1] == pytest.approx(35.0)  # (30 + 40) / 2 at step 300
    assert [row["steps_to_threshold"] for row in data["summary"]] == [None, 300]
    assert data["options"] == {"group": "experiment", "band": "std", "x": "step", "threshold": 25.5}


def test_the_data_grows_as_a_running_run_reports(owner_client, sweep):
    Run.objects.filter(pk=sweep[0].pk).update(status="running")
    before = owner_client.get(DATA, {"runs": ids(sweep[0])}).json()
    returns(sweep[0], [400], [50.0])
    after = owner_client.get(DATA, {"runs": ids(sweep[0])}).json()
    assert before["runs"][0]["active"] and after["metrics"][0]["runs"][str(sweep[0].pk)]["value"][-1] == 50.0
    assert len(after["metrics"][0]["runs"][str(sweep[0].pk)]["x"]) == 4


def test_the_data_lists_each_runs_videos_with_their_file_url(owner_client, sweep):
    video = Video(run=sweep[1], step=300, episode_return=41.0)
    video.file.save("episode.mp4", ContentFile(b"not really an mp4"), save=True)
    data = owner_client.get(DATA, {"runs": ids(*sweep)}).json()
    assert data["videos"][str(sweep[0].pk)] == []
    assert data["videos"][str(sweep[1].pk)] == [{"id": video.pk, "step": 300, "episode_return": 41.0,
                                                  "url": reverse("video-file", args=[video.pk])}]


# --- export ------------------------------------------------------------------------------------------------

def expected_rows(runs) -> list[list[str]]:
    rows = []
    for run in runs:
        for event in Event.objects.filter(run=run).order_by("seq"):
            for key, value in sorted(event.values.items()):  # keys sorted, as the export has them
                rows.append([str(run.pk), run.experiment.name, "dqn", "CartPole-v1", str(run.seed), str(event.seq),
                             event.kind, str(event.step), str(event.time), key, str(value)])
    return rows


def test_the_csv_export_has_every_stored_value_of_the_visible_runs(owner_client, sweep, secret_run):
    response = owner_client.get(CSV, {"runs": ids(*sweep, secret_run)})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"] == 'attachment; filename="compare-2-runs.csv"'
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0] == compare.EXPORT_COLUMNS
    assert rows[1:] == expected_rows(sweep)
    assert len(rows) == 1 + 2 * 3 + 2 * 2 + 2 * 2  # episodes: return and length; evals: mean and std


def test_the_json_export_has_runs_settings_summary_and_every_value(owner_client, sweep, secret_run):
    response = owner_client.get(JSON, {"runs": ids(*sweep, secret_run), "threshold": "26"})
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    data = json.loads(b"".join(response.streaming_content))
    assert [run["id"] for run in data["runs"]] == [run.pk for run in sweep] and "secret" not in json.dumps(data)
    assert data["left_out"] == 1
    assert data["settings"][str(sweep[0].pk)]["learning_rate"] == 0.001
    assert [row["steps_to_threshold"] for row in data["summary"]] == [None, 300]
    assert data["columns"] == compare.EXPORT_COLUMNS
    assert [[str(cell) for cell in row] for row in data["rows"]] == expected_rows(sweep)


def test_an_export_of_no_visible_runs_is_empty(stranger_client, sweep):
    data = json.loads(b"".join(stranger_client.get(JSON, {"runs": ids(*sweep)}).streaming_content))
    assert data["runs"] == [] and data["rows"] == []


# --- the ways in: lists and pages ------------------------------------------------------------------------

def test_the_run_list_has_a_checkbox_per_run_for_the_compare_form(owner_client, sweep):
    page = owner_client.get(reverse("run-list")).content.decode()
    assert f'<form method="get" action="{PAGE}" id="compare-form">' in page
    for run in sweep:
        assert f'name="runs" value="{run.pk}" form="compare-form"' in page


def test_the_experiment_list_compares_the_runs_of_the_ticked_experiments(owner_client, sweep):
    page = owner_client.get(reverse("experiment-list")).content.decode()
    assert f'name="experiment" value="{sweep[0].experiment_id}" form="compare-form"' in page


def test_the_experiment_page_links_to_a_comparison_of_all_its_seeds(owner_client, sweep):
    page = owner_client.get(reverse("experiment-detail", args=[sweep[0].experiment_id])).content.decode()
    link = f'{PAGE}?experiment={sweep[0].experiment_id}'
    assert f'href="{link}"' in page
    assert owner_client.get(link).url == f"{PAGE}?runs={ids(*sweep)}"


def test_the_run_page_offers_to_compare_the_run_with_others(owner_client, sweep):
    page = owner_client.get(reverse("run-detail", args=[sweep[0].pk])).content.decode()
    assert f'href="{PAGE}?runs={sweep[0].pk}"' in page
    compare_page = owner_client.get(PAGE, {"runs": str(sweep[0].pk)}).content.decode()
    assert '<details class="card add-runs" open>' in compare_page
    assert f'<input type="hidden" name="runs" value="{sweep[0].pk}">' in compare_page
    assert f'<input type="checkbox" name="runs" value="{sweep[1].pk}">' in compare_page
