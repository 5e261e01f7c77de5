"""Suites (rlweb/suites): the form's checks by field (the experiment form's, per algorithm x environment), the
launch of each task as an experiment as room opens under the per-user limit of runs, the page's data with the
aggregates across tasks, the CSV downloads, the self-contained report, and who may see and cancel a suite.
The browser test that trains a suite on the real stack: tests/e2e/test_suites.py."""

from __future__ import annotations

import csv
import io
import re

import numpy as np
import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from rlweb.experiments import lifecycle, redis_keys
from rlweb.experiments.models import Event, Experiment, Run
from rlweb.projects.models import Membership, Project
from rlweb.scores import aggregates
from rlweb.suites import report, tasks
from rlweb.suites.forms import ENV_LISTS
from rlweb.suites.models import Suite
from tests.web.helpers import PASSWORD

TINY = ("hidden_layers=16\ndqn.learning_starts=50\ndqn.buffer_size=1000\ndqn.batch_size=16\nppo.num_envs=2\n"
        "ppo.n_steps=32\nppo.batch_size=32")


def suite_data(**overrides) -> dict:
    data = {"name": "classic", "algorithms": ["dqn", "ppo"], "env_list": "",
            "env_ids": "CartPole-v1\nAcrobot-v1, MountainCar-v0", "num_seeds": "2", "total_steps": "400",
            "eval_interval": "0", "eval_episodes": "2", "device": "cpu", "use_presets": "on", "overrides": TINY}
    data.update(overrides)
    return data


def errors_of(response) -> dict:
    return response.context["form"].errors


def test_the_form_shows_the_named_lists_with_their_sources(owner_client):
    response = owner_client.get(reverse("suite-new"))
    assert response.status_code == 200
    lists = response.context["env_lists"]
    assert lists["atari5"]["ids"] == ["ALE/BattleZone-v5", "ALE/DoubleDunk-v5", "ALE/NameThisGame-v5",
                                      "ALE/Phoenix-v5", "ALE/Qbert-v5"]
    assert "2210.02019" in lists["atari5"]["source"]
    assert all(entry["source"] for entry in lists.values())
    assert b'id="env-lists"' in response.content and b"Launch the suite" in response.content


@pytest.mark.parametrize("field, value, message", [
    ("algorithms", ["dqn", "no-such-algorithm"], "Select a valid choice"),
    ("algorithms", [], "This field is required"),
    ("env_ids", "CartPole-v1\nNoSuchEnv-v9", "dqn on NoSuchEnv-v9: "),
    ("env_ids", "Pendulum-v1", "dqn on Pendulum-v1: "),  # continuous actions: DQN cannot act there
    ("env_ids", " ".join(f"Env{index}-v0" for index in range(31)), "At most 30 environments"),
    ("num_seeds", "0", "greater than or equal to 1"),
    ("num_seeds", "21", "less than or equal to 20"),
    ("num_seeds", "two", "Enter a whole number"),
    ("num_seeds", "9", "allows a user 8 queued or running runs"),  # seeds start together: past the limit, never
    ("total_steps", "0", "greater than or equal to 1"),
    ("eval_episodes", "0", "greater than or equal to 1"),
    ("overrides", "dqn.learning_rate=-1", "dqn on CartPole-v1: learning_rate: "),
    ("overrides", "ppo.no_such_thing=3", "ppo has no hyperparameter “no_such_thing”"),
    ("overrides", "sac.learning_rate=3e-4", "sac is not one of the chosen algorithms"),
    ("overrides", "just some words", "is not name=value"),
])
def test_it_refuses_bad_values_next_to_their_field_and_launches_nothing(owner_client, field, value, message):
    response = owner_client.post(reverse("suite-new"), suite_data(**{field: value}))
    assert response.status_code == 200
    errors = errors_of(response)
    assert field in errors, errors
    assert any(message in text for text in errors[field]), errors[field]
    assert not Suite.objects.exists() and not Experiment.objects.exists()


def test_a_task_refused_in_several_places_says_which_pair_each_message_is_about(owner_client):
    response = owner_client.post(reverse("suite-new"), suite_data(
        algorithms=["dqn", "sac"], env_ids="CartPole-v1 Pendulum-v1", overrides=""))
    errors = errors_of(response)["env_ids"]
    assert any(text.startswith("dqn on Pendulum-v1: ") for text in errors), errors
    assert any(text.startswith("sac on CartPole-v1: ") for text in errors), errors
    assert not any(text.startswith(("dqn on CartPole-v1", "sac on Pendulum-v1")) for text in errors), errors


def test_a_named_list_stands_in_for_empty_environments_and_tasks_take_their_tuned_presets(owner, owner_client):
    response = owner_client.post(reverse("suite-new"), suite_data(
        algorithms=["ppo"], env_list="classic", env_ids="", num_seeds="1", overrides=""))
    suite = Suite.objects.get()
    assert response.status_code == 302 and response["Location"] == suite.get_absolute_url()
    assert suite.env_ids == ENV_LISTS["classic"][1] and suite.env_list == "classic"
    tasks = list(suite.tasks.select_related("experiment"))
    assert [task.env_id for task in tasks] == ENV_LISTS["classic"][1]
    acrobot = next(task for task in tasks if task.env_id == "Acrobot-v1")
    assert acrobot.preset == "zoo:Acrobot-v1" and acrobot.hyperparameters["num_envs"] == 16  # RL Zoo's tuned values
    assert all(task.experiment.owner == owner and task.experiment.runs.count() == 1 for task in tasks)


def test_overrides_go_on_top_of_the_presets_for_the_algorithms_they_name(owner_client):
    owner_client.post(reverse("suite-new"), suite_data(env_ids="CartPole-v1", num_seeds="1"))
    tasks = {task.algorithm: task.hyperparameters for task in Suite.objects.get().tasks.all()}
    assert tasks["dqn"]["hidden_layers"] == tasks["ppo"]["hidden_layers"] == "16"  # name=value: both have it
    assert (tasks["dqn"]["learning_starts"], tasks["ppo"]["n_steps"], tasks["ppo"]["num_envs"]) == (50, 32, 2)
    assert tasks["ppo"]["n_epochs"] == 20  # untouched: RL Zoo's CartPole value


def test_the_suite_launches_what_fits_the_limit_of_runs_and_the_rest_as_runs_end(owner, owner_client):
    response = owner_client.post(reverse("suite-new"), suite_data())
    suite = Suite.objects.get()
    assert "2 experiments wait for room" in " ".join(str(message) for message in response.wsgi_request._messages)
    launched = Run.objects.filter(experiment__suite_task__suite=suite)
    assert launched.count() == 8 and suite.tasks.filter(launched_at__isnull=True).count() == 2  # 8: the site's limit
    assert list(suite.tasks.exclude(experiment=None).values_list("algorithm", "env_id")) == [
        ("dqn", "CartPole-v1"), ("ppo", "CartPole-v1"), ("dqn", "Acrobot-v1"), ("ppo", "Acrobot-v1")]
    first = suite.tasks.get(position=0).experiment
    assert (first.name, first.num_seeds, first.total_steps, first.device) == ("classic · CartPole DQN", 2, 400, "cpu")
    for run in first.runs.all():  # two runs end: room for one more experiment of two seeds
        assert lifecycle.cancel(run) == Run.Status.CANCELLED
    assert suite.tasks.filter(launched_at__isnull=True).count() == 1
    assert Run.objects.filter(experiment__suite_task__suite=suite).count() == 10
    assert Run.active_count(owner.pk) == 8
    from django.contrib.messages import get_messages

    response = owner_client.post(reverse("suite-cancel", args=[suite.pk]))
    assert response.status_code == 302
    assert [str(message) for message in get_messages(response.wsgi_request)][-1] == "Suite cancelled; 8 runs stopping."
    suite.refresh_from_db()
    assert suite.status == "cancelled" and not Run.objects.filter(status__in=Run.ACTIVE).exists()
    assert suite.tasks.filter(launched_at__isnull=True).count() == 1  # a cancelled suite starts nothing more


def test_an_ended_suite_is_deleted_with_its_experiments_and_a_running_one_is_not(scored_suite, owner_client):
    delete = reverse("suite-delete", args=[scored_suite.pk])
    from django.contrib.messages import get_messages

    response = owner_client.post(delete)
    assert response["Location"] == scored_suite.get_absolute_url()  # still running: refused
    assert [str(message) for message in get_messages(response.wsgi_request)][-1] == (
        "Cancel the suite, and wait for its runs to stop, before deleting it.")
    assert Experiment.objects.count() == 6
    Suite.objects.filter(pk=scored_suite.pk).update(status="finished")
    response = owner_client.post(delete)
    assert response["Location"] == reverse("suite-list")
    assert [str(message) for message in get_messages(response.wsgi_request)][-1] == (
        f"Deleted the suite “{scored_suite.name}” and its experiments.")
    assert not Suite.objects.exists() and not Experiment.objects.exists() and not Run.objects.exists()


def test_a_suites_experiment_links_back_to_it(scored_suite, owner_client):
    experiment = scored_suite.tasks.first().experiment
    page = owner_client.get(experiment.get_absolute_url()).content.decode()
    assert f'<a href="{scored_suite.get_absolute_url()}" id="suite-link">classic</a>' in page


def test_the_same_form_posted_twice_makes_one_suite(owner_client):
    data = suite_data(env_ids="CartPole-v1", num_seeds="1", submission_token="a" * 32)
    first = owner_client.post(reverse("suite-new"), data)
    second = owner_client.post(reverse("suite-new"), data)
    assert first["Location"] == second["Location"] and Suite.objects.count() == 1 and Experiment.objects.count() == 2


def finish_runs(suite: Suite, score_of) -> None:
    """Record each run of the suite as succeeded with the score `score_of(run)`, as a worker records a run's end."""
    for run in Run.objects.filter(experiment__suite_task__suite=suite).select_related("experiment"):
        score = score_of(run)
        Run.objects.filter(pk=run.pk).update(status="succeeded", steps_done=run.total_steps, eval_return_mean=score,
                                             best_eval_return=score + 1)


@pytest.fixture
def scored_suite(owner, owner_client, settings):
    """A suite of dqn and ppo on CartPole, Acrobot and MountainCar with 2 seeds, all launched and scored."""
    settings.MAX_ACTIVE_RUNS_PER_USER = 12
    owner_client.post(reverse("suite-new"), suite_data())
    suite = Suite.objects.get()
    base = {"CartPole-v1": 100.0, "Acrobot-v1": -300.0, "MountainCar-v0": -190.0}
    finish_runs(suite, lambda run: base[run.experiment.env_id] + 50 * (run.experiment.algorithm == "ppo") + 7 * run.seed)
    return suite


def test_the_page_data_holds_every_run_and_the_aggregates_that_rliable_would_give(scored_suite, owner_client):
    data = owner_client.get(reverse("suite-data", args=[scored_suite.pk])).json()
    assert len(data["runs"]) == 12 and data["counts"] == {"succeeded": 12}
    found = data["aggregates"]
    assert found["ready"] and found["tasks"] == ["CartPole-v1", "Acrobot-v1", "MountainCar-v0"]
    assert found["runs_per_task"] == {"dqn": 2, "ppo": 2}
    matrices = {}
    for algorithm in ("dqn", "ppo"):
        runs = {(row["env_id"], row["seed"]): row["score"] for row in data["runs"] if row["algorithm"] == algorithm}
        matrices[algorithm] = np.array([[report.normalised(env_id, runs[(env_id, seed)]) for env_id in found["tasks"]]
                                        for seed in (0, 1)])
    expected = aggregates.aggregate_scores(matrices, report.REPS, report.SEED)
    for algorithm in ("dqn", "ppo"):
        for metric in ("iqm", "median", "mean", "optimality_gap"):
            assert found["algorithms"][algorithm][metric] == pytest.approx(list(expected[algorithm][metric]))
    assert found["algorithms"]["ppo"]["iqm"][0] > found["algorithms"]["dqn"]["iqm"][0]  # ppo scored 50 more each
    cartpole = next(row for row in data["table"] if row["env_id"] == "CartPole-v1")
    assert cartpole["cells"]["ppo"] == {"n": 2, "mean": 153.5, "std": 3.5, "normalised": pytest.approx(
        np.mean([report.normalised("CartPole-v1", 150.0), report.normalised("CartPole-v1", 157.0)]))}


def test_a_running_run_shows_its_latest_evaluation_and_no_score_yet(scored_suite, owner_client):
    run = Run.objects.filter(experiment__suite_task__suite=scored_suite).first()
    Run.objects.filter(pk=run.pk).update(status="running", heartbeat_at=timezone.now(), eval_return_mean=None,
                                         steps_done=200)
    for seq, value in ((1, 12.0), (2, 31.5)):
        Event.objects.create(run=run, seq=seq, kind="eval", step=100 * seq, time=1.0,
                             values={"eval/return_mean": value, "eval/return_std": 1.0})
    row = next(row for row in owner_client.get(reverse("suite-data", args=[scored_suite.pk])).json()["runs"]
               if row["id"] == run.pk)
    assert (row["status"], row["latest_eval"], row["score"], row["progress"]) == ("running", 31.5, None, 50.0)


def test_the_best_evaluation_can_be_the_score(scored_suite, owner_client):
    data = owner_client.get(reverse("suite-data", args=[scored_suite.pk]), {"score": "best"}).json()
    assert data["score"] == "best" and {row["score"] for row in data["runs"]} >= {101.0, 108.0}


def test_a_task_without_every_score_is_left_out_and_says_why(scored_suite, owner_client):
    Run.objects.filter(experiment__suite_task__suite=scored_suite, experiment__env_id="Acrobot-v1", seed=1,
                       experiment__algorithm="dqn").update(status="running", eval_return_mean=None)
    found = owner_client.get(reverse("suite-data", args=[scored_suite.pk])).json()["aggregates"]
    assert found["tasks"] == ["CartPole-v1", "MountainCar-v0"]
    assert found["left_out"] == {"Acrobot-v1": "1 run without a score yet"}
    Run.objects.filter(experiment__suite_task__suite=scored_suite, experiment__env_id="Acrobot-v1").update(
        status="failed")
    found = owner_client.get(reverse("suite-data", args=[scored_suite.pk])).json()["aggregates"]
    assert found["left_out"] == {"Acrobot-v1": "4 runs ended without a score (failed or cancelled)"}


def test_the_aggregates_are_cached_per_score_matrix(scored_suite, owner_client, monkeypatch):
    owner_client.get(reverse("suite-data", args=[scored_suite.pk]))
    monkeypatch.setattr(aggregates, "aggregate_scores", lambda *args: pytest.fail("bootstrapped again"))
    assert owner_client.get(reverse("suite-data", args=[scored_suite.pk])).json()["aggregates"]["ready"]


def test_a_large_suite_is_bootstrapped_off_the_request_and_found_ready_after(scored_suite, owner_client, monkeypatch):
    monkeypatch.setattr(report, "INLINE_DRAWS", 0)  # as a suite of 5 x 10 x 10 runs would be (1.5 s in a request)
    url = reverse("suite-data", args=[scored_suite.pk])
    waiting = owner_client.get(url).json()["aggregates"]
    assert not waiting["ready"] and "algorithms" not in waiting
    assert redis_keys.redis_client().exists(tasks.pending_key(scored_suite.pk, "final"))  # sent once, to a worker
    tasks.suite_aggregates(scored_suite.pk, "final")  # what the worker runs
    assert not redis_keys.redis_client().exists(tasks.pending_key(scored_suite.pk, "final"))
    ready = owner_client.get(url).json()["aggregates"]
    assert ready["ready"] and set(ready["algorithms"]) == {"dqn", "ppo"}


def test_the_scores_csv_has_one_row_per_run(scored_suite, owner_client):
    response = owner_client.get(reverse("suite-csv", args=[scored_suite.pk]))
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"] == f'attachment; filename="suite{scored_suite.pk}-classic-scores.csv"'
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(rows) == 12
    assert sorted((row["algorithm"], row["env_id"], row["seed"]) for row in rows) == sorted(
        (algorithm, env_id, str(seed)) for algorithm in ("dqn", "ppo")
        for env_id in ("CartPole-v1", "Acrobot-v1", "MountainCar-v0") for seed in (0, 1))
    row = next(row for row in rows if (row["algorithm"], row["env_id"], row["seed"]) == ("ppo", "Acrobot-v1", "1"))
    assert (row["status"], float(row["score (final evaluation)"])) == ("succeeded", -243.0)
    assert float(row["normalised_score"]) == pytest.approx(report.normalised("Acrobot-v1", -243.0))


def test_the_aggregates_csv_has_one_row_per_algorithm_and_metric(scored_suite, owner_client):
    rows = list(csv.DictReader(io.StringIO(owner_client.get(
        reverse("suite-aggregates-csv", args=[scored_suite.pk])).content.decode())))
    assert [(row["algorithm"], row["metric"]) for row in rows] == [
        (algorithm, metric) for algorithm in ("dqn", "ppo") for metric in ("iqm", "median", "mean", "optimality_gap")]
    assert all(float(row["low_95"]) <= float(row["value"]) <= float(row["high_95"]) for row in rows)
    assert rows[0]["tasks"] == "CartPole-v1 Acrobot-v1 MountainCar-v0" and rows[0]["bootstrap_reps"] == "10000"


def test_the_report_is_one_file_that_names_nothing_outside_itself(scored_suite, owner_client):
    response = owner_client.get(reverse("suite-report", args=[scored_suite.pk]))
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="suite{scored_suite.pk}-classic-report.html"'
    html = response.content.decode()
    assert "Plotly" in html and "window.SuiteReport" in html and 'id="suite-data"' in html
    markup = re.sub(r"<script.*?</script>", "", html, flags=re.S)  # the page's own tags, not plotly.js's code
    assert not re.search(r"""(?:src|href)\s*=\s*["'](?!data:|#)""", markup), "a file the report would have to fetch"
    assert "<script src" not in html and "@import" not in markup and "url(" not in markup
    assert html.count("<script") == 4  # the data, plotly.js, the drawing script, the call that draws


def test_strangers_get_404_and_a_projects_viewer_sees_but_cannot_cancel(scored_suite, owner, stranger_client,
                                                                     django_user_model):
    urls = [reverse(name, args=[scored_suite.pk]) for name in
            ("suite-detail", "suite-data", "suite-csv", "suite-aggregates-csv", "suite-report")]
    for url in urls:
        assert stranger_client.get(url).status_code == 404, url
    for action in ("suite-cancel", "suite-delete"):
        assert stranger_client.post(reverse(action, args=[scored_suite.pk])).status_code == 404
    assert b"classic" not in stranger_client.get(reverse("suite-list")).content
    project = Project.objects.create(owner=owner, name="team")
    Suite.objects.filter(pk=scored_suite.pk).update(project=project)
    Experiment.objects.update(project=project)
    viewer = django_user_model.objects.create_user("viewer", password=PASSWORD)
    Membership.objects.create(project=project, user=viewer, role="viewer")
    client = Client()
    client.force_login(viewer)
    for url in urls:
        assert client.get(url).status_code == 200, url
    for action in ("suite-cancel", "suite-delete"):
        assert client.post(reverse(action, args=[scored_suite.pk])).status_code == 403
    assert Suite.objects.filter(pk=scored_suite.pk, status="running").exists()


def test_the_nav_links_the_suites_list(owner_client, scored_suite):
    page = owner_client.get(reverse("suite-list")).content.decode()
    assert f'href="{reverse("suite-list")}">Suites</a>' in page and scored_suite.get_absolute_url() in page


def test_a_suite_in_a_project_needs_the_owner_to_be_its_editor(owner, owner_client, django_user_model):
    other = django_user_model.objects.create_user("other", password=PASSWORD)
    project = Project.objects.create(owner=other, name="theirs")
    Membership.objects.create(project=project, user=owner, role="viewer")
    response = owner_client.post(reverse("suite-new"), suite_data(env_ids="CartPole-v1", project=str(project.pk)))
    assert "project" in errors_of(response)
    Membership.objects.filter(project=project).update(role="editor")
    owner_client.post(reverse("suite-new"), suite_data(env_ids="CartPole-v1", num_seeds="1", project=str(project.pk)))
    assert set(Experiment.objects.values_list("project__name", flat=True)) == {"theirs"}
    page = owner_client.get(project.get_absolute_url()).content.decode()  # the suite, not its experiments one by one
    assert Suite.objects.get().get_absolute_url() in page and "CartPole DQN" not in page
