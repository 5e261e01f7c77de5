"""The experiment list (`/`): a user sees their own experiments only; sortable, filterable, searchable, paginated;
a query that makes no sense is ignored with a message, never an error."""

import pytest
from django.urls import reverse
from django.utils import timezone

from rlweb.experiments import lists
from rlweb.experiments.models import Experiment, Run


def test_it_lists_the_owners_experiments(owner_client, make_experiment):
    make_experiment(name="CartPole sweep")
    response = owner_client.get(reverse("experiment-list"))
    assert response.status_code == 200
    assert b"CartPole sweep" in response.content


def test_it_hides_other_users_experiments(stranger_client, make_experiment):
    make_experiment(name="CartPole sweep")
    response = stranger_client.get(reverse("experiment-list"))
    assert response.status_code == 200
    assert b"CartPole sweep" not in response.content
    assert b"No experiments yet" in response.content


def test_a_run_whose_worker_went_silent_counts_as_stopped_and_the_page_writes_nothing(owner_client, queued_run,
                                                                                     settings):
    """The page only reads: the lost-run reaper (a periodic chore) marks the run lost (test_pages_only_read.py)."""
    from datetime import timedelta

    stale = timezone.now() - timedelta(seconds=settings.HEARTBEAT_TIMEOUT + 5)
    Run.objects.filter(pk=queued_run.pk).update(status="running", heartbeat_at=stale)
    page = owner_client.get(reverse("experiment-list")).content.decode()
    assert "1 stopped" in page and "1 running" not in page
    queued_run.refresh_from_db()
    assert queued_run.status == "running" and not queued_run.error and not queued_run.finished_at


URL = reverse("experiment-list")


@pytest.fixture
def experiments(make_experiment):
    cartpole = make_experiment(name="CartPole baseline", tags=["baseline", "cartpole"])
    Run.objects.create(experiment=cartpole, seed=0, total_steps=400, steps_done=400, status="succeeded",
                       eval_return_mean=150.0, best_eval_return=200.0)
    Run.objects.create(experiment=cartpole, seed=1, total_steps=400, steps_done=100, status="running",
                       heartbeat_at=timezone.now(), eval_return_mean=50.0, best_eval_return=60.0)
    pendulum = make_experiment(name="Pendulum SAC", algorithm="sac", env_id="Pendulum-v1", tags=["sweep"],
                               hyperparameters={})
    Run.objects.create(experiment=pendulum, seed=0, total_steps=400, steps_done=40, status="failed",
                       best_eval_return=-900.0)
    acrobot = make_experiment(name="Acrobot PPO", algorithm="ppo", env_id="Acrobot-v1", hyperparameters={})
    return {"cartpole": cartpole, "pendulum": pendulum, "acrobot": acrobot}


def names(response) -> list[str]:
    assert response.status_code == 200
    return [experiment.name.split()[0] for experiment in response.context["page"]]


def test_it_shows_run_counts_progress_and_returns_per_experiment(owner_client, experiments):
    html = owner_client.get(URL).content.decode()
    assert "1 running" in html and "1 done" in html and "1 stopped" in html
    assert '<progress max="800" value="500">' in html  # the steps of both CartPole runs
    assert "100.0" in html and "200.0" in html  # mean of the latest evaluations, best one
    assert 'href="?tag=baseline"' in html


@pytest.mark.parametrize("sort, order", [
    ("", ["Acrobot", "Pendulum", "CartPole"]),  # newest first
    ("name", ["Acrobot", "CartPole", "Pendulum"]),
    ("-name", ["Pendulum", "CartPole", "Acrobot"]),
    ("-runs", ["CartPole", "Pendulum", "Acrobot"]),
    ("-best", ["CartPole", "Pendulum", "Acrobot"]),  # no runs: last
    ("progress", ["Pendulum", "CartPole", "Acrobot"]),  # 10%, 62.5%, none
    ("env", ["Acrobot", "CartPole", "Pendulum"]),
])
def test_the_column_headers_sort_it(owner_client, experiments, sort, order):
    assert names(owner_client.get(URL, {"sort": sort} if sort else {})) == order


@pytest.mark.parametrize("query, expected", [
    ({"status": "running"}, ["CartPole"]),
    ({"status": "failed"}, ["Pendulum"]),
    ({"algorithm": "ppo"}, ["Acrobot"]),
    ({"env": "Pendulum-v1"}, ["Pendulum"]),
    ({"tag": "sweep"}, ["Pendulum"]),
    ({"tag": "Cartpole"}, ["CartPole"]),
    ({"q": "ppo"}, ["Acrobot"]),
    ({"q": "A", "sort": "name"}, ["Acrobot", "CartPole", "Pendulum"]),  # any case
    ({"q": "zzz"}, []),
])
def test_it_filters_by_status_algorithm_env_and_tag_and_searches_by_name(owner_client, experiments, query,
                                                                         expected):
    response = owner_client.get(URL, query)
    assert names(response) == expected
    if not expected:
        assert b"No experiments match these filters." in response.content


def test_a_run_status_filter_counts_each_experiment_once(owner_client, experiments):
    Run.objects.create(experiment=experiments["cartpole"], seed=2, total_steps=400, status="running",
                       heartbeat_at=timezone.now())
    assert names(owner_client.get(URL, {"status": "running"})) == ["CartPole"]


@pytest.mark.parametrize("query, message", [
    ({"sort": "owner__password"}, "Cannot sort by"),
    ({"status": "RUNNING"}, "Unknown status"),
    ({"algorithm": "x" * 500}, "Unknown algorithm"),
    ({"tag": "a,b"}, "is not a tag"),
])
def test_a_query_that_makes_no_sense_is_ignored_with_a_message(owner_client, experiments, query, message):
    response = owner_client.get(URL, query)
    assert len(names(response)) == 3
    assert any(message in str(note) for note in response.context["messages"])


def test_it_is_split_into_pages(owner_client, owner):
    Experiment.objects.bulk_create(Experiment(owner=owner, name=f"e{number:02d}", algorithm="dqn",
                                              env_id="CartPole-v1", total_steps=10)
                                   for number in range(lists.PAGE_SIZE + 1))
    first = owner_client.get(URL, {"sort": "name"})
    assert len(first.context["page"]) == lists.PAGE_SIZE and 'href="?sort=name&amp;page=2"' in first.content.decode()
    last = owner_client.get(URL, {"sort": "name", "page": "2"})
    assert [experiment.name for experiment in last.context["page"]] == [f"e{lists.PAGE_SIZE:02d}"]
    assert owner_client.get(URL, {"page": "nonsense"}).status_code == 200


def test_a_stranger_cannot_filter_their_way_to_the_owners_experiments(stranger_client, experiments):
    for query in ({}, {"tag": "baseline"}, {"status": "running"}, {"q": "CartPole"}):
        assert names(stranger_client.get(URL, query)) == []


def test_an_imported_experiment_without_an_environment_leaves_any_environment_chosen(owner_client, experiments,
                                                                                      make_experiment):
    make_experiment(name="imported", algorithm="logged", env_id="", hyperparameters={})  # a TensorBoard import's
    response = owner_client.get(URL)
    assert response.context["choices"]["envs"] == ["Acrobot-v1", "CartPole-v1", "Pendulum-v1"]
    assert '<option value="" selected>' not in response.content.decode()  # an empty env would be selected, blank
