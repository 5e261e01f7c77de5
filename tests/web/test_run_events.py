"""The JSON history of a run, which the run page draws before it follows the live stream."""

import pytest
from django.urls import reverse

from rlweb.experiments import history
from rlweb.experiments.models import Checkpoint, Event


def events_url(run):
    return reverse("run-events", args=[run.pk])


def test_it_returns_every_stored_event_in_order_with_the_last_seq(owner_client, trained_run):
    data = owner_client.get(events_url(trained_run)).json()
    stored = [event.as_dict() for event in Event.objects.filter(run=trained_run)]
    assert data["events"] == stored and data["last_seq"] == stored[-1]["seq"] and data["thinned"] == []
    assert data["run"]["status"] == "succeeded" and data["run"]["finished"] is True
    assert data["run"]["steps_done"] == data["run"]["total_steps"] == trained_run.total_steps


def test_it_lists_the_checkpoints_the_run_has_now(owner_client, trained_run):
    data = owner_client.get(events_url(trained_run)).json()
    expected = [{"id": checkpoint.pk, "tag": checkpoint.tag, "step": checkpoint.step,
                 "url": reverse("checkpoint-download", args=[checkpoint.pk])}
                for checkpoint in Checkpoint.objects.filter(run=trained_run)]
    assert data["checkpoints"] == expected and {"best", "final"} <= {item["tag"] for item in expected}


def test_it_filters_by_seq_and_kind(owner_client, trained_run):
    data = owner_client.get(events_url(trained_run), {"after": "5", "kinds": "episode,eval"}).json()
    assert data["events"] and all(event["seq"] > 5 for event in data["events"])
    assert {event["kind"] for event in data["events"]} == {"episode", "eval"}


def test_long_histories_are_thinned_unless_the_full_data_is_asked_for(owner_client, queued_run, monkeypatch):
    Event.objects.bulk_create(Event(run=queued_run, seq=seq, kind="episode", step=seq * 10, time=seq,
                                    values={"rollout/episode_return": seq}) for seq in range(1, 101))
    monkeypatch.setattr(history, "MAX_POINTS_PER_KIND", 10)
    data = owner_client.get(events_url(queued_run)).json()
    assert [event["seq"] for event in data["events"]] == list(range(1, 101, 10))
    assert data["thinned"] == ["episode"] and data["last_seq"] == 100
    full = owner_client.get(events_url(queued_run), {"full": "1"}).json()
    assert len(full["events"]) == 100 and full["thinned"] == []


@pytest.mark.parametrize("query, message", [
    ({"after": "x"}, "after"), ({"after": "-3"}, "after"), ({"kinds": "episode,bogus"}, "bogus"),
    ({"full": "yes"}, "full"), ({"after": "9" * 30}, "after"),
])
def test_bad_query_parameters_are_a_400_with_a_message(owner_client, queued_run, query, message):
    response = owner_client.get(events_url(queued_run), query)
    assert response.status_code == 400 and message in response.json()["error"]


def test_a_stranger_gets_a_404(stranger_client, trained_run):
    assert stranger_client.get(events_url(trained_run)).status_code == 404
