"""Changing live hyperparameters of a running run from its page: the form offers the live ones with the current
values, the view checks a change as the experiment form checks, records it on the run and pushes it to the worker
through Redis; the worker applies it within a second and reports it (log line, chart marks); it survives a resume
and the compare page shows it as "changed at step N"."""

import dataclasses
import json
import threading
import time

import pytest
import trainer
import redis
from django.db import connection
from django.test import Client
from django.urls import reverse

from rlweb.experiments import lifecycle, redis_keys
from rlweb.experiments.live_changes import request_change
from rlweb.experiments.models import Checkpoint, Event, Experiment, Run
from rlweb.experiments.tasks import train_run
from trainer import registry
from trainer.algorithms.dqn import DQN, DQNConfig
from trainer.params import param
from trainer.registry import DQN_FAMILY, AlgorithmSpec, register

JSON = {"Accept": "application/json"}
TOTAL = 4_000
LONG = 100_000  # a run cancelled long before its end; its resumed attempt is given a shorter one (`shorten`)


def change(client, run, headers=JSON, **values):
    return client.post(reverse("run-change", args=[run.pk]), {f"hp_{name}": value for name, value in values.items()},
                       headers=headers)


def sent(client: redis.Redis, run) -> list:
    return client.lrange(redis_keys.changes_key(run.pk), 0, -1)


@pytest.fixture
def running_run(queued_run):
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.RUNNING, attempts=1)
    queued_run.refresh_from_db()
    return queued_run


def test_the_page_of_a_running_run_offers_its_live_hyperparameters_with_current_values(owner_client, running_run):
    page = owner_client.get(running_run.get_absolute_url()).content.decode()
    assert 'id="live-change-form"' in page and 'name="hp_learning_rate" value="0.0023"' in page
    assert 'name="hp_exploration_final_eps"' in page and 'name="hp_buffer_size"' not in page  # sizes are not live
    request_change(running_run, {"learning_rate": 0.0005})
    page = owner_client.get(running_run.get_absolute_url()).content.decode()
    assert 'name="hp_learning_rate" value="0.0005"' in page  # what was asked for last
    Run.objects.filter(pk=running_run.pk).update(status=Run.Status.SUCCEEDED)
    assert 'id="live-change-form"' not in owner_client.get(running_run.get_absolute_url()).content.decode()


def test_a_valid_change_is_recorded_and_sent_to_the_worker(owner_client, running_run, live_redis):
    response = change(owner_client, running_run, learning_rate="0.0005", exploration_final_eps="0.04")
    assert response.status_code == 200, response.content
    running_run.refresh_from_db()
    (entry,) = running_run.live_changes
    assert entry["values"] == {"learning_rate": 0.0005}  # only what differs from the current values
    assert [json.loads(text) for text in sent(live_redis, running_run)] == [{"id": entry["id"],
                                                                             "values": {"learning_rate": 0.0005}}]


def test_a_change_to_a_run_whose_values_came_through_the_form_is_sent(owner_client, running_run, live_redis):
    """The form's values hold `processes` (1) for a one-process algorithm, whose config has no such field."""
    experiment = running_run.experiment
    experiment.hyperparameters = trainer.validate("dqn", "CartPole-v1", dict(experiment.hyperparameters))
    assert experiment.hyperparameters["processes"] == 1
    experiment.save()
    response = change(owner_client, running_run, learning_rate="0.0005")
    assert response.status_code == 200, response.content
    assert len(sent(live_redis, running_run)) == 1


def test_an_invalid_value_is_refused_next_to_its_field_and_nothing_is_sent(owner_client, running_run, live_redis):
    response = change(owner_client, running_run, learning_rate="-1", exploration_final_eps="lots")
    assert response.status_code == 400
    assert response.json()["errors"] == {"learning_rate": ["must be greater than 0"],
                                         "exploration_final_eps": ["must be a number"]}
    running_run.refresh_from_db()
    assert running_run.live_changes == [] and sent(live_redis, running_run) == []
    # without the page's script: back to the run page, with the message
    response = change(owner_client, running_run, headers={}, learning_rate="2")
    assert response.status_code == 302 and response.url == running_run.get_absolute_url()
    assert "learning_rate: must be at most 1" in owner_client.get(response.url).content.decode()
    assert sent(live_redis, running_run) == []


def test_a_hyperparameter_that_is_not_live_is_refused(owner_client, running_run, live_redis):
    response = change(owner_client, running_run, buffer_size="10", learning_rate="0.001")
    assert response.status_code == 400
    assert response.json()["errors"] == {"": ["buffer_size: cannot be changed while the run trains"]}
    running_run.refresh_from_db()
    assert running_run.live_changes == [] and sent(live_redis, running_run) == []


def test_a_noisy_run_is_not_offered_epsilon_and_a_change_of_it_is_refused_with_why(owner_client, running_run,
                                                                                     live_redis):
    experiment = running_run.experiment
    experiment.hyperparameters = {**experiment.hyperparameters, "noisy": True}
    experiment.save()
    page = owner_client.get(running_run.get_absolute_url()).content.decode()
    assert 'name="hp_learning_rate"' in page and "hp_exploration_final_eps" not in page
    response = change(owner_client, running_run, exploration_final_eps="0.1")
    assert response.status_code == 400
    assert response.json()["errors"] == {"": ["exploration_final_eps: has no effect on this run: noisy layers explore "
                                              "instead of epsilon"]}
    running_run.refresh_from_db()
    assert running_run.live_changes == [] and sent(live_redis, running_run) == []


def test_a_change_past_the_per_step_work_budget_is_refused_with_why(owner_client, running_run, live_redis):
    """Issue 27: gradient_steps=100000 was within the field's bounds and stalled the run (a phase every 4 env steps
    here: 25,000 updates per env step)."""
    response = change(owner_client, running_run, gradient_steps="100000")
    assert response.status_code == 400
    (message,) = response.json()["errors"]["gradient_steps"]
    assert message.startswith("must be at most 400 here") and "100 gradient updates per env step" in message
    running_run.refresh_from_db()
    assert running_run.live_changes == [] and sent(live_redis, running_run) == []
    response = change(owner_client, running_run, gradient_steps="400")  # within the budget
    assert response.status_code == 200, response.content
    assert json.loads(sent(live_redis, running_run)[0])["values"] == {"gradient_steps": 400}


@dataclasses.dataclass
class LiveBufferConfig(DQNConfig):
    """DQN whose replay buffer may change while it trains: no algorithm has a live setting that sizes memory
    today, and the memory estimate must hold the day one does."""

    buffer_size: int = param(100_000, "Replay buffer capacity, in transitions.", low=1, high=50_000_000, live=True)


@pytest.fixture
def live_buffer_run(running_run):
    spec = register(AlgorithmSpec(name="live-buffer-dqn", family=DQN_FAMILY, description="test", config_class=
                                  LiveBufferConfig, agent_class=DQN, observation_spaces=("Box",),
                                  action_spaces=("Discrete",)))
    Experiment.objects.filter(pk=running_run.experiment_id).update(algorithm=spec.name)
    running_run.refresh_from_db()
    yield running_run
    registry._REGISTRY.pop(spec.name)


def test_a_change_past_the_memory_estimate_is_refused_with_why(owner_client, live_buffer_run, live_redis,
                                                                monkeypatch):
    monkeypatch.setenv("RLWEB_MAX_RUN_MEMORY_MB", "16")  # the run's 1,000 transitions of CartPole: 72 KiB
    response = change(owner_client, live_buffer_run, buffer_size="1000000")  # 69 MiB
    assert response.status_code == 400
    (message,) = response.json()["errors"]["buffer_size"]
    assert "this run would need about 68.7 MiB of memory" in message and "16.0 MiB a run may use here" in message
    assert sent(live_redis, live_buffer_run) == []
    assert change(owner_client, live_buffer_run, buffer_size="100000").status_code == 200  # 6.9 MiB


def test_a_run_past_a_limit_lowered_since_it_started_may_still_change_what_takes_no_memory(
        owner_client, live_buffer_run, live_redis, monkeypatch):
    monkeypatch.setenv("RLWEB_MAX_RUN_MEMORY_MB", "0.01")  # less than the run already holds
    assert change(owner_client, live_buffer_run, learning_rate="0.0005").status_code == 200
    response = change(owner_client, live_buffer_run, buffer_size="2000")  # more memory still: refused
    assert response.status_code == 400 and "a run may use here" in response.json()["errors"]["buffer_size"][0]


def test_nothing_to_change_is_said_so(owner_client, running_run, live_redis):
    response = change(owner_client, running_run, learning_rate="0.0023")
    assert response.status_code == 400 and "Nothing to change" in response.json()["errors"][""][0]


def test_a_stranger_gets_404_and_nothing_changes(stranger_client, running_run, live_redis):
    assert change(stranger_client, running_run, learning_rate="0.0005").status_code == 404
    assert stranger_client.get(running_run.get_absolute_url()).status_code == 404
    running_run.refresh_from_db()
    assert running_run.live_changes == [] and sent(live_redis, running_run) == []


def test_a_post_without_the_csrf_token_is_refused(owner, running_run, live_redis):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert change(client, running_run, learning_rate="0.0005").status_code == 403
    running_run.refresh_from_db()
    assert running_run.live_changes == [] and sent(live_redis, running_run) == []


def test_a_run_that_is_not_running_takes_no_change(owner_client, queued_run, live_redis):
    response = change(owner_client, queued_run, learning_rate="0.0005")
    assert response.status_code == 409 and "running" in response.json()["error"]
    assert sent(live_redis, queued_run) == []


def test_the_compare_page_shows_a_change_with_its_step(owner_client, trained_run):
    Run.objects.filter(pk=trained_run.pk).update(live_changes=[
        {"id": "a", "values": {"learning_rate": 0.0005}, "step": 1200, "seq": 9,
         "changes": {"learning_rate": {"old": 0.0023, "new": 0.0005}}},
        {"id": "b", "values": {"learning_rate": -1}, "step": 1300, "seq": 10, "error": "refused"}])
    page = owner_client.get(reverse("compare") + f"?runs={trained_run.pk}").content.decode()
    assert "0.0023 → 0.0005 changed at step 1,200" in page
    assert "step 1,300" not in page  # a refused change changed nothing


# --- with the worker: the real task in this process, the page's requests from another thread ----------------

def post_when_past(owner, run_id: int, step: int, redis_url: str, outcome: dict, stop: bool = False):
    """A thread that posts a change of learning_rate on the run's page once the stream reports `step`, then waits
    for the worker's report of it (and presses cancel when `stop`); timings and answers go into `outcome`."""
    def watch():
        client, page = redis.Redis.from_url(redis_url, decode_responses=True), Client()
        page.force_login(owner)
        last_id, deadline = "0-0", time.monotonic() + 120
        try:
            while time.monotonic() < deadline:
                for _, entries in client.xread({redis_keys.stream_key(run_id): last_id}, block=100, count=500) or []:
                    for last_id, fields in entries:
                        event = json.loads(fields["event"])
                        if "posted" not in outcome and event["step"] > step:
                            outcome["asked_at_step"] = event["step"]
                            outcome["response"] = change(page, Run.objects.get(pk=run_id), learning_rate="0.0005")
                            outcome["posted"] = time.monotonic()
                        elif event["kind"] == "hyperparameters":
                            outcome["applied"], outcome["event"] = time.monotonic(), event
                            if stop:
                                client.set(redis_keys.stop_key(run_id), "1")
                            return
        finally:
            connection.close()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def shorten(run, steps: int) -> None:
    """A cancelled run's total cut to `steps` more than it has done, so that its resumed attempt ends soon."""
    run.refresh_from_db()
    Run.objects.filter(pk=run.pk).update(total_steps=run.steps_done + steps)


def final_learning_rate(run) -> float:
    agent = run.checkpoints.get(tag=Checkpoint.Tag.FINAL).load_agent(device="cpu")
    assert agent.config.learning_rate == agent.optimizer.param_groups[0]["lr"]
    return agent.optimizer.param_groups[0]["lr"]


@pytest.mark.django_db(transaction=True)
def test_a_change_reaches_the_worker_within_a_second_and_takes_effect(owner, owner_client, make_experiment,
                                                                      redis_url):
    experiment = make_experiment(total_steps=TOTAL, eval_interval=0)
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=TOTAL, task_id="t")
    outcome = {}
    watcher = post_when_past(owner, run.pk, 300, redis_url, outcome)
    assert train_run(run.pk) == "succeeded"
    watcher.join(timeout=10)
    assert outcome["response"].status_code == 200, outcome["response"].content
    assert outcome["applied"] - outcome["posted"] < 2.0  # polled every 0.5 s (slack for a busy machine)
    event = outcome["event"]
    assert event["step"] >= outcome["asked_at_step"]
    assert event["values"]["changes"] == {"learning_rate": {"old": 0.0023, "new": 0.0005}}
    assert final_learning_rate(run) == 0.0005  # the optimizer learned at the new rate to the end
    run.refresh_from_db()
    (entry,) = run.live_changes
    assert (entry["step"], entry["seq"]) == (event["step"], event["seq"])
    assert entry["changes"] == event["values"]["changes"]
    # the page starts from the history: a log line and the mark on the charts
    history = owner_client.get(reverse("run-history", args=[run.pk])).json()
    assert [mark["step"] for mark in history["changes"]] == [event["step"]]
    assert event["seq"] in [line["seq"] for line in history["log"] if line["kind"] == "hyperparameters"]
    compare = owner_client.get(reverse("compare") + f"?runs={run.pk}").content.decode()
    assert f"0.0023 → 0.0005 changed at step {event['step']:,}" in compare


@pytest.mark.django_db(transaction=True)
def test_a_change_made_after_the_checkpoint_a_run_resumes_from_is_applied_again_at_its_step(
        owner, owner_client, make_experiment, redis_url):
    experiment = make_experiment(total_steps=LONG, eval_interval=0, checkpoint_interval=500)
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=LONG, task_id="t")
    outcome = {}
    watcher = post_when_past(owner, run.pk, 700, redis_url, outcome, stop=True)
    assert train_run(run.pk) == "cancelled"
    watcher.join(timeout=10)
    step = outcome["event"]["step"]
    # its worker died before saving anything after the change: lost, its latest checkpoint from before it
    run.checkpoints.filter(step__gte=step).delete()
    Run.objects.filter(pk=run.pk).update(status=Run.Status.LOST)
    resumed_from = run.latest_checkpoint()
    assert resumed_from.step < step
    assert resumed_from.load_agent(device="cpu").config.learning_rate == 0.0023

    assert owner_client.post(reverse("run-resume", args=[run.pk])).status_code == 302
    run.refresh_from_db()
    Run.objects.filter(pk=run.pk).update(total_steps=step + 1_000)
    assert not Event.objects.filter(run=run, kind="hyperparameters").exists()  # forgotten with the attempt
    assert train_run(run.pk) == "succeeded"
    replayed = list(Event.objects.filter(run=run, kind="hyperparameters"))
    assert [event.step for event in replayed] == [step]  # once, at the step it was made at
    assert final_learning_rate(run) == 0.0005
    run.refresh_from_db()
    (entry,) = run.live_changes
    assert (entry["step"], entry["seq"]) == (step, replayed[0].seq)


@pytest.mark.django_db(transaction=True)
def test_a_run_resumed_from_a_checkpoint_that_holds_a_change_does_not_apply_it_twice(owner, make_experiment,
                                                                                     redis_url):
    experiment = make_experiment(total_steps=LONG, eval_interval=0)
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=LONG, task_id="t")
    watcher = post_when_past(owner, run.pk, 100, redis_url, {}, stop=True)
    assert train_run(run.pk) == "cancelled"  # its final checkpoint, saved after the change, holds it
    watcher.join(timeout=10)
    shorten(run, 1_000)
    assert lifecycle.resume(Run.objects.get(pk=run.pk))
    assert train_run(run.pk) == "succeeded"
    assert Event.objects.filter(run=run, kind="hyperparameters").count() == 1
    assert final_learning_rate(run) == 0.0005


def test_the_run_page_shows_a_changed_hyperparameter_with_its_step(owner_client, running_run):
    Run.objects.filter(pk=running_run.pk).update(live_changes=[
        {"id": "a", "values": {"train_frequency": 8}, "step": 512, "seq": 9,
         "changes": {"train_frequency": {"old": 4, "new": 8}}}])
    page = owner_client.get(running_run.get_absolute_url()).content.decode()
    assert "<dd>4 → 8 changed at step 512</dd>" in page
