"""The stored events of a run as JSON, not downsampled, a page at a time."""

import pytest
from django.urls import reverse

from rlweb.experiments.models import Event


def events_url(run):
    return reverse("run-events", args=[run.pk])


def test_it_returns_every_stored_event_in_order_with_the_last_seq(owner_client, trained_run):
    data = owner_client.get(events_url(trained_run)).json()
    stored = [event.as_dict() for event in Event.objects.filter(run=trained_run)]
    assert data["events"] == stored and data["next_after"] is None
    assert data["run"]["status"] == "succeeded" and data["run"]["finished"] is True
    assert data["run"]["steps_done"] == data["run"]["total_steps"] == trained_run.total_steps


def test_it_filters_by_seq_and_kind(owner_client, trained_run):
    data = owner_client.get(events_url(trained_run), {"after": "5", "kinds": "episode,eval"}).json()
    assert data["events"] and all(event["seq"] > 5 for event in data["events"])
    assert {event["kind"] for event in data["events"]} == {"episode", "eval"}


def test_long_histories_come_a_page_at_a_time(owner_client, queued_run):
    Event.objects.bulk_create(Event(run=queued_run, seq=seq, kind="episode", step=seq * 10, time=seq,
                                    values={"rollout/episode_return": seq}) for seq in range(1, 101))
    first = owner_client.get(events_url(queued_run), {"limit": "40"}).json()
    assert [event["seq"] for event in first["events"]] == list(range(1, 41)) and first["next_after"] == 40
    last = owner_client.get(events_url(queued_run), {"after": "80", "limit": "40"}).json()
    assert [event["seq"] for event in last["events"]] == list(range(81, 101)) and last["next_after"] is None


@pytest.mark.parametrize("query, message", [
    ({"after": "x"}, "after"), ({"after": "-3"}, "after"), ({"kinds": "episode,bogus"}, "bogus"),
    ({"limit": "0"}, "limit"), ({"limit": "5001"}, "limit"), ({"after": "9" * 30}, "after"),
])
def test_bad_query_parameters_are_a_400_with_a_message(owner_client, queued_run, query, message):
    response = owner_client.get(events_url(queued_run), query)
    assert response.status_code == 400 and message in response.json()["error"]


def test_a_stranger_gets_a_404(stranger_client, trained_run):
    assert stranger_client.get(events_url(trained_run)).status_code == 404
