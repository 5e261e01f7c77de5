"""The run list (`/runs/`): every run of the user's, across experiments; sortable, filterable, searchable,
paginated; a query that makes no sense is ignored with a message, never an error."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from rlweb.experiments import lifecycle, lists
from rlweb.experiments.models import Run

URL = reverse("run-list")


@pytest.fixture
def runs(make_experiment):
    """Four runs of three experiments, in different states; those that started did so once."""
    now = timezone.now()
    cartpole = make_experiment(name="CartPole baseline", tags=["baseline", "cartpole"])
    pendulum = make_experiment(name="Pendulum SAC", algorithm="sac", env_id="Pendulum-v1", tags=["sweep"],
                               hyperparameters={})
    acrobot = make_experiment(name="Acrobot PPO", algorithm="ppo", env_id="Acrobot-v1", hyperparameters={})
    return {
        "succeeded": Run.objects.create(experiment=cartpole, seed=0, total_steps=400, steps_done=400,
                                        status="succeeded", first_started_at=now - timedelta(minutes=9),
                                        started_at=now - timedelta(minutes=9), attempts=1,
                                        finished_at=now - timedelta(minutes=1), eval_return_mean=180.0,
                                        best_eval_return=200.0),
        "running": Run.objects.create(experiment=cartpole, seed=1, total_steps=1000, steps_done=250,
                                      status="running", first_started_at=now - timedelta(seconds=60),
                                      started_at=now - timedelta(seconds=60), attempts=1, heartbeat_at=now,
                                      eval_return_mean=20.0, best_eval_return=25.0),
        "failed": Run.objects.create(experiment=pendulum, seed=0, total_steps=500, steps_done=100, status="failed",
                                     first_started_at=now - timedelta(hours=1), started_at=now - timedelta(hours=1),
                                     attempts=1, finished_at=now - timedelta(minutes=50)),
        "queued": Run.objects.create(experiment=acrobot, seed=0, total_steps=300),
    }


def listed(response) -> list[int]:
    assert response.status_code == 200
    return [run.pk for run in response.context["page"]]


def test_it_lists_every_run_of_the_owner_newest_first_with_status_progress_and_returns(owner_client, runs):
    response = owner_client.get(URL)
    assert listed(response) == sorted((run.pk for run in runs.values()), reverse=True)
    html = response.content.decode()
    running = runs["running"]
    assert f'<progress max="1000" value="250">' in html and "250 / 1000" in html
    assert "180.0" in html and "200.0" in html  # latest and best eval return
    assert 'class="tag" href="?tag=baseline"' in html and "Pendulum-v1" in html and "sac" in html
    assert f'href="{running.get_absolute_url()}"' in html


def test_a_running_run_shows_an_estimate_of_the_time_left(owner_client, runs):
    # 250 of 1000 steps in 60 s: 750 more take about 180 s
    assert 170 <= runs["running"].seconds_left <= 190
    assert "3 min left" in owner_client.get(URL).content.decode()
    assert runs["queued"].seconds_left is None and runs["succeeded"].seconds_left is None


def test_a_resumed_run_estimates_from_the_steps_of_its_current_attempt(runs):
    run = runs["running"]
    run.start_step = 200  # resumed at 200: 50 steps in 60 s, 750 to go
    assert 880 <= run.seconds_left <= 920


@pytest.mark.parametrize("sort, order", [
    ("status", ["failed", "queued", "running", "succeeded"]),
    ("-status", ["succeeded", "running", "queued", "failed"]),
    ("progress", ["queued", "failed", "running", "succeeded"]),  # 0/300, 100/500, 250/1000, 400/400
    ("-best", ["succeeded", "running", "queued", "failed"]),  # no evaluation: last, newest first
    ("started", ["failed", "succeeded", "running", "queued"]),  # not started: last
    ("experiment", ["queued", "running", "succeeded", "failed"]),  # Acrobot, CartPole (newest first), Pendulum
])
def test_the_column_headers_sort_it(owner_client, runs, sort, order):
    by_id = {run.pk: name for name, run in runs.items()}
    assert [by_id[pk] for pk in listed(owner_client.get(URL, {"sort": sort}))] == order


def test_a_resumed_run_is_listed_and_sorted_by_its_first_start(owner_client, runs):
    run = runs["failed"]  # started an hour ago; cancelled instead, and resumed now
    Run.objects.filter(pk=run.pk).update(status="cancelled")
    assert lifecycle.resume(run) and lifecycle.claim(run.pk, worker="test")
    run.refresh_from_db()
    assert run.started_at > run.first_started_at + timedelta(minutes=59)
    response = owner_client.get(URL, {"sort": "started"})
    by_id = {run.pk: name for name, run in runs.items()}
    assert [by_id[pk] for pk in listed(response)] == ["failed", "succeeded", "running", "queued"]
    first = timezone.localtime(run.first_started_at)
    shown = f'<time datetime="{first.isoformat()}">{first:%b} {first.day}, {first:%H:%M}</time>'
    assert shown in response.content.decode()


def test_a_header_links_to_the_other_direction_once_sorted_and_keeps_the_filters(owner_client, runs):
    response = owner_client.get(URL, {"sort": "status", "tag": "baseline"})
    link = response.context["sort_links"]["status"]
    assert link["direction"] == "asc" and "sort=-status" in link["url"] and "tag=baseline" in link["url"]
    assert 'aria-sort="ascending"' in response.content.decode()


@pytest.mark.parametrize("query, expected", [
    ({"status": "running"}, ["running"]),
    ({"algorithm": "sac"}, ["failed"]),
    ({"env": "Acrobot-v1"}, ["queued"]),
    ({"tag": "baseline"}, ["running", "succeeded"]),
    ({"tag": "BASELINE"}, ["running", "succeeded"]),
    ({"tag": "base"}, []),  # a whole tag, not part of one
    ({"q": "cartpole"}, ["running", "succeeded"]),
    ({"q": "pendulum", "status": "failed", "algorithm": "sac", "env": "Pendulum-v1", "tag": "sweep"}, ["failed"]),
    ({"q": "nothing like it"}, []),
])
def test_it_filters_by_status_algorithm_env_and_tag_and_searches_by_name(owner_client, runs, query, expected):
    by_id = {run.pk: name for name, run in runs.items()}
    response = owner_client.get(URL, query)
    assert [by_id[pk] for pk in listed(response)] == expected
    if not expected:
        assert "No runs match these filters." in response.content.decode()


@pytest.mark.parametrize("query, message", [
    ({"sort": "password"}, "Cannot sort by"),
    ({"sort": "--status"}, "Cannot sort by"),
    ({"status": "exploded"}, "Unknown status"),
    ({"algorithm": "alphago"}, "Unknown algorithm"),
    ({"tag": '"],"x'}, "is not a tag"),
])
def test_a_query_that_makes_no_sense_is_ignored_with_a_message(owner_client, runs, query, message):
    response = owner_client.get(URL, query)
    assert len(listed(response)) == 4  # the filter or sort is left out, not the list
    assert any(message in str(note) for note in response.context["messages"])


@pytest.mark.parametrize("page", ["2", "0", "-1", "abc", "99999999999999999999", ""])
def test_any_page_number_answers_a_page(owner_client, runs, page):
    assert owner_client.get(URL, {"page": page}).status_code == 200


def test_it_is_split_into_pages_whose_links_keep_the_query(owner_client, make_experiment):
    experiment = make_experiment(name="many")
    Run.objects.bulk_create(Run(experiment=experiment, seed=seed, total_steps=10)
                            for seed in range(lists.PAGE_SIZE + 3))
    first = owner_client.get(URL, {"status": "queued"})
    assert len(first.context["page"]) == lists.PAGE_SIZE and first.context["page"].has_next()
    assert 'href="?status=queued&amp;page=2"' in first.content.decode()
    second = owner_client.get(URL, {"status": "queued", "page": "2"})
    assert len(second.context["page"]) == 3
    assert not set(listed(first)) & set(listed(second))
    assert f"{lists.PAGE_SIZE + 1}–{lists.PAGE_SIZE + 3} of {lists.PAGE_SIZE + 3} runs" in second.content.decode()


def test_a_stranger_sees_none_of_the_owners_runs(stranger_client, runs):
    response = stranger_client.get(URL)
    assert listed(response) == []
    assert "CartPole baseline" not in response.content.decode()
    assert listed(stranger_client.get(URL, {"tag": "baseline"})) == []


def test_it_needs_a_login(client, db):
    response = client.get(URL)
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_the_count_of_one_run_or_one_experiment_is_singular(owner_client, queued_run):
    assert "1–1 of 1 run</p>" in owner_client.get(URL).content.decode()
    assert "1–1 of 1 experiment</p>" in owner_client.get(reverse("experiment-list")).content.decode()
