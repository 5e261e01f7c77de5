"""The sweep pages (rlweb/sweeps/views.py): the form and its refusals, the live page and its data and figures,
cancel, extend and "launch the best", and strangers. Trials train with the real task function."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from rlweb.experiments import workers
from rlweb.experiments.models import Experiment, Run
from rlweb.experiments.tasks import train_run
from rlweb.sweeps import study
from rlweb.sweeps.models import Sweep, Trial
from rlweb.sweeps.tasks import advance_sweeps
from tests.web.chore_helpers import sweeps_not_told_of_run_ends, writes_of
from tests.web.helpers import TINY_DQN, form_data

pytestmark = pytest.mark.django_db(transaction=True)  # Optuna writes through its own connection


def sweep_form(**overrides) -> dict:
    """What the browser posts for a tiny DQN sweep over the learning rate."""
    data = {key: value for key, value in form_data().items() if key.startswith("hp_")}
    data.update({"name": "lr sweep", "algorithm": "dqn", "env_id": "CartPole-v1", "total_steps": "300",
                 "eval_interval": "100", "eval_episodes": "1", "objective": "last", "last_evaluations": "2",
                 "threshold": "", "sampler": "random", "seed": "0", "pruner": "none", "trials": "3",
                 "parallel": "2", "seeds_per_trial": "1", "device": "cpu", "preset": "none",
                 "hp_learning_rate": "1e-4:1e-2:log"})
    data.update(overrides)
    return data


def train_queued(sweep: Sweep) -> None:
    """Be the worker until the sweep has ended: its queued runs, one after another."""
    for _ in range(100):
        queued = Run.objects.filter(experiment__sweep_trial__sweep=sweep, status=Run.Status.QUEUED).first()
        if queued is None:
            sweep.refresh_from_db()
            if not sweep.is_active:
                return
            study.advance(sweep.pk)
            continue
        train_run(queued.pk)
    raise AssertionError("the sweep did not end")


def test_the_form_starts_a_sweep_whose_first_trials_are_queued_experiments(owner_client, owner):
    response = owner_client.post(reverse("sweep-new"), sweep_form())
    sweep = Sweep.objects.get()
    assert response.status_code == 302 and response["Location"] == sweep.get_absolute_url()
    assert sweep.space == [{"name": "learning_rate", "type": "float", "low": 1e-4, "high": 1e-2, "log": True,
                            "choices": []}]
    assert sweep.fixed["batch_size"] == TINY_DQN["batch_size"].__str__() and "learning_rate" not in sweep.fixed
    trials = list(sweep.trial_set.order_by("number"))
    assert len(trials) == 2  # two at once
    for trial in trials:
        experiment = trial.experiment
        assert experiment.owner == owner and experiment.hyperparameters["learning_rate"] == trial.params["learning_rate"]
        assert 1e-4 <= trial.params["learning_rate"] <= 1e-2
        assert list(experiment.runs.values_list("status", flat=True)) == ["queued"]
    # the trials are on the sweep's page, not in the experiment list
    assert "lr sweep · trial" not in owner_client.get(reverse("experiment-list")).content.decode()


@pytest.mark.parametrize("field, value, message", [
    ("hp_learning_rate", "1e-2:1e-4", "low end must be below its high end"),
    ("hp_gamma", "0:0.99:log", "a log scale needs a range above 0"),
    ("hp_learning_rate", "0:1e-2", "'0': must be greater than 0"),  # the algorithm's own bounds
    ("hp_double_q", "1:2", "a range is LOW:HIGH or LOW:HIGH:log, of a number hyperparameter"),
    ("hp_batch_size", "16|abc", "'abc'"),
    ("hp_batch_size", "16|5000", "with batch_size=5000"),  # above the replay buffer
    ("hp_gradient_steps", "1|100000", "with gradient_steps=100000: must be at most 400 here"),  # the work budget
])
def test_a_bad_search_range_is_refused_next_to_its_field_and_nothing_starts(owner_client, field, value, message):
    response = owner_client.post(reverse("sweep-new"), sweep_form(**{field: value}))
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert field in errors and message in " ".join(errors[field]), errors
    assert not Sweep.objects.exists() and not Experiment.objects.exists()


def test_processes_above_the_queues_worker_cores_are_refused_in_a_sweep_too(owner_client, live_redis):
    workers.write_entry({"node": "small@host-a", "host": "host-a", "queues": "cpu", "pid": 4242, "started": 0,
                         "device": "cpu", "gpu_memory_mb": 0, "visible_devices": "", "cores": 2})
    data = {key: value for key, value in sweep_form(algorithm="ppo").items() if not key.startswith("hp_")}
    response = owner_client.post(reverse("sweep-new"), {**data, "hp_learning_rate": "1e-4:1e-2:log",
                                                        "hp_processes": "1|4"})
    assert response.status_code == 200 and not Sweep.objects.exists()
    (message,) = response.context["form"].errors["hp_processes"]
    assert message.startswith("with processes=4: must be at most 2: the workers of queue cpu have at most 2 cores")


def test_the_median_pruners_warm_up_is_the_users_or_a_third_of_the_run(owner_client):
    response = owner_client.post(reverse("sweep-new"), sweep_form(pruner="median", pruner_warmup_steps="301"))
    assert "At most the steps per trial (300)." in response.context["form"].errors["pruner_warmup_steps"]
    assert not Sweep.objects.exists()
    owner_client.post(reverse("sweep-new"), sweep_form(pruner="median", pruner_warmup_steps="100"))
    owner_client.post(reverse("sweep-new"), sweep_form(pruner="median", name="default warm-up"))
    chosen, default = Sweep.objects.get(name="lr sweep"), Sweep.objects.get(name="default warm-up")
    assert (chosen.pruner_warmup_steps, default.pruner_warmup_steps) == (100, None)
    assert study.make_pruner(study.config_of(chosen)).warmup_steps == 100
    assert study.make_pruner(study.config_of(default)).warmup_steps == 100  # 300 // 3
    page = owner_client.get(chosen.get_absolute_url()).content.decode()
    assert "pruner median after 100 steps" in page
    assert "pruner median after a third of the run" in owner_client.get(default.get_absolute_url()).content.decode()


def test_a_sweep_with_nothing_to_search_or_a_grid_over_a_range_is_refused(owner_client):
    response = owner_client.post(reverse("sweep-new"), sweep_form(hp_learning_rate="0.001"))
    assert "Nothing to search" in " ".join(response.context["form"].non_field_errors())
    response = owner_client.post(reverse("sweep-new"), sweep_form(sampler="grid"))
    assert "needs lists of values, not ranges (learning_rate)" in " ".join(response.context["form"].errors["sampler"])
    response = owner_client.post(reverse("sweep-new"), sweep_form(objective="threshold"))
    assert "Give the return to reach." in response.context["form"].errors["threshold"]
    response = owner_client.post(reverse("sweep-new"), sweep_form(parallel="5", seeds_per_trial="2"))
    assert "10 runs at once" in " ".join(response.context["form"].errors["parallel"])
    assert not Sweep.objects.exists()


def test_a_grid_sweep_has_as_many_trials_as_combinations(owner_client):
    owner_client.post(reverse("sweep-new"), sweep_form(sampler="grid", trials="50", hp_learning_rate="0.001|0.003",
                                                       hp_gamma="0.9|0.95|0.99"))
    assert Sweep.objects.get().trials == 6


def test_the_form_starts_from_the_environments_preset_and_around_an_experiment(owner_client, make_experiment):
    page = owner_client.get(reverse("sweep-new") + "?algorithm=dqn&env_id=Acrobot-v1")
    form = page.context["form"]
    assert form.chosen_preset["name"] == "zoo:Acrobot-v1"
    assert form["hp_learning_rate"].value() == "0.00063"
    experiment = make_experiment(hyperparameters={**TINY_DQN, "hidden_layers": [32, 32], "learning_rate": 0.002})
    form = owner_client.get(reverse("sweep-new") + f"?around={experiment.pk}").context["form"]
    assert form["hp_learning_rate"].value() == "0.002" and form["hp_hidden_layers"].value() == "32,32"
    assert form["total_steps"].value() == experiment.total_steps and form["name"].value() == "tiny sweep"


def test_the_page_its_data_and_figures_follow_the_trials_to_the_best(owner_client):
    owner_client.post(reverse("sweep-new"), sweep_form())
    sweep = Sweep.objects.get()
    page = owner_client.get(sweep.get_absolute_url()).content.decode()
    assert "lr sweep" in page and 'id="trial-table"' in page and "learning_rate" in page
    waiting = owner_client.get(reverse("sweep-figures", args=[sweep.pk])).json()
    assert waiting["history"] == {"message": "Drawn once a trial has completed."}
    train_queued(sweep)
    data = owner_client.get(reverse("sweep-data", args=[sweep.pk])).json()
    assert data["status"] == "finished" and data["finished"] == 3
    assert [trial["state"] for trial in data["trials"]] == ["complete"] * 3
    best = max(data["trials"], key=lambda trial: trial["value"])
    assert data["best"]["number"] == best["number"] and data["best"]["params"] == best["params"]
    assert all(trial["steps"] == 300 for trial in data["trials"])
    compare = owner_client.get(data["compare_url"])  # the trials' runs side by side, the best first
    assert compare.status_code == 200 and [run.pk for run in compare.context["runs"]][0] == \
        next(trial for trial in data["trials"] if trial["number"] == best["number"])["runs"][0]["id"]
    figures = owner_client.get(reverse("sweep-figures", args=[sweep.pk])).json()
    assert figures["history"]["data"][0]["type"] == "scatter"  # Optuna's optimisation history
    assert "data" in figures["importances"] and "data" in figures["slices"]
    assert len(figures["curves"]["data"]) == 3 and len(figures["parallel"]["data"]) == 3
    assert figures["curves"]["data"][0]["x"] == [100, 200, 300]
    assert figures["parallel"]["data"][0]["x"] == ["learning_rate", "value"]


def test_launching_the_best_makes_an_experiment_with_its_values_and_the_seeds_asked(owner_client):
    owner_client.post(reverse("sweep-new"), sweep_form(trials="2"))
    sweep = Sweep.objects.get()
    response = owner_client.post(reverse("sweep-launch-best", args=[sweep.pk]), {"seeds": "3"})
    assert response.status_code == 302 and response["Location"] == sweep.get_absolute_url()  # nothing done yet
    train_queued(sweep)
    best = study.best_trial(sweep)
    response = owner_client.post(reverse("sweep-launch-best", args=[sweep.pk]), {"seeds": "3"})
    experiment = Experiment.objects.exclude(sweep_trial__isnull=False).get()
    assert response["Location"] == experiment.get_absolute_url()
    assert experiment.hyperparameters == best.experiment.hyperparameters and experiment.num_seeds == 3
    assert experiment.runs.count() == 3 and "best (trial" in experiment.name
    response = owner_client.post(reverse("sweep-launch-best", args=[sweep.pk]), {"seeds": "0"})
    assert Experiment.objects.exclude(sweep_trial__isnull=False).count() == 1


def test_cancel_stops_the_trials_and_extend_adds_more(owner_client):
    owner_client.post(reverse("sweep-new"), sweep_form(trials="4"))
    sweep = Sweep.objects.get()
    owner_client.post(reverse("sweep-cancel", args=[sweep.pk]))
    sweep.refresh_from_db()
    assert sweep.status == "cancelled"
    assert set(Run.objects.values_list("status", flat=True)) == {"cancelled"}  # they were queued: they end at once
    assert set(sweep.trial_set.values_list("state", flat=True)) == {"failed"}
    assert sweep.trial_set.count() == 2
    owner_client.post(reverse("sweep-extend", args=[sweep.pk]), {"more": "2"})
    sweep.refresh_from_db()
    assert (sweep.status, sweep.trials) == ("running", 6)
    assert sweep.trial_set.filter(state=Trial.State.RUNNING).count() == 2  # two new ones at once
    train_queued(sweep)
    sweep.refresh_from_db()
    assert sweep.status == "finished" and sweep.trial_set.count() == 6


def test_an_ended_sweep_is_deleted_with_its_trials_and_study_and_a_running_one_is_not(owner_client):
    owner_client.post(reverse("sweep-new"), sweep_form(trials="2"))
    sweep = Sweep.objects.get()
    from django.contrib.messages import get_messages

    response = owner_client.post(reverse("sweep-delete", args=[sweep.pk]))
    assert response["Location"] == sweep.get_absolute_url() and Sweep.objects.exists()  # it runs: refused
    assert [str(message) for message in get_messages(response.wsgi_request)][-1] == (
        "Cancel the sweep, and wait for its runs to stop, before deleting it.")
    train_queued(sweep)
    response = owner_client.post(reverse("sweep-delete", args=[sweep.pk]))
    assert response["Location"] == reverse("sweep-list")
    assert [str(message) for message in get_messages(response.wsgi_request)][-1] == (
        f"Deleted the sweep “{sweep.name}” and its trials.")
    assert not Sweep.objects.exists() and not Trial.objects.exists() and not Experiment.objects.exists()
    import optuna

    assert sweep.study_name not in [summary.study_name for summary in optuna.get_all_study_summaries(
        study.storage_at(study.storage_url()))]


def test_a_stranger_cannot_see_or_steer_another_users_sweep(owner_client, stranger_client):
    owner_client.post(reverse("sweep-new"), sweep_form())
    sweep = Sweep.objects.get()
    for name in ("sweep-detail", "sweep-data", "sweep-figures"):
        assert stranger_client.get(reverse(name, args=[sweep.pk])).status_code == 404
    for name, data in (("sweep-cancel", {}), ("sweep-extend", {"more": "5"}), ("sweep-launch-best", {"seeds": "1"}),
                       ("sweep-delete", {})):
        assert stranger_client.post(reverse(name, args=[sweep.pk]), data).status_code == 404
    assert "lr sweep" not in stranger_client.get(reverse("sweep-list")).content.decode()
    response = stranger_client.get(reverse("sweep-new") + f"?around={sweep.trial_set.first().experiment_id}")
    assert response.status_code == 404
    sweep.refresh_from_db()
    assert (sweep.status, sweep.trials) == ("running", 3)


def read(client, url: str):
    """GET `url`, asserting that nothing was written to the database (Django's or Optuna's) meanwhile."""
    import optuna

    def optuna_trials():
        return [(summary.study_name, summary.n_trials) for summary in optuna.get_all_study_summaries(
            study.storage_at(study.storage_url()))]

    before = optuna_trials(), list(Trial.objects.values()), list(Sweep.objects.values()), list(Run.objects.values())
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200
    assert writes_of(queries) == [], f"a GET of {url} wrote"
    after = optuna_trials(), list(Trial.objects.values()), list(Sweep.objects.values()), list(Run.objects.values())
    assert after == before
    return response


def test_the_sweep_pages_only_read_and_the_periodic_chore_advances_the_sweep(owner_client):
    owner_client.post(reverse("sweep-new"), sweep_form(trials="3"))
    sweep = Sweep.objects.get()
    first = sweep.trial_set.get(number=0)
    with sweeps_not_told_of_run_ends():  # its worker died before it advanced the sweep
        assert train_run(first.experiment.runs.get().pk) == "succeeded"
    for url in (sweep.get_absolute_url(), reverse("sweep-data", args=[sweep.pk]), reverse("sweep-list"),
                reverse("sweep-figures", args=[sweep.pk])):
        read(owner_client, url)
    assert read(owner_client, reverse("sweep-data", args=[sweep.pk])).json()["trials"][0]["state"] == "running"
    advance_sweeps.apply()  # as beat sends it
    first.refresh_from_db()
    assert first.state == "complete" and sweep.trial_set.count() == 3  # the third trial started in its place


def test_a_trials_run_that_ends_advances_its_sweep_at_once(owner_client):
    owner_client.post(reverse("sweep-new"), sweep_form(trials="3"))
    sweep = Sweep.objects.get()
    assert train_run(sweep.trial_set.get(number=0).experiment.runs.get().pk) == "succeeded"  # no advance, no chore
    assert sweep.trial_set.get(number=0).state == "complete" and sweep.trial_set.count() == 3


def test_a_sweep_whose_study_was_never_made_gets_one_at_the_next_chore_not_from_its_page(owner_client, owner):
    sweep = Sweep.objects.create(owner=owner, name="half made", algorithm="dqn", env_id="CartPole-v1", total_steps=300,
                                 eval_interval=100, trials=2, parallel=1, device="cpu", fixed=dict(TINY_DQN),
                                 space=[{"name": "learning_rate", "type": "float", "low": 1e-4, "high": 1e-2,
                                         "log": True}])
    read(owner_client, sweep.get_absolute_url())
    assert read(owner_client, reverse("sweep-data", args=[sweep.pk])).json()["trials"] == []
    advance_sweeps.apply()
    data = owner_client.get(reverse("sweep-data", args=[sweep.pk])).json()
    assert len(data["trials"]) == 1 and data["trials"][0]["state"] == "running"
    assert owner_client.get(reverse("sweep-figures", args=[sweep.pk])).status_code == 200


def test_messages_about_one_seed_or_one_trial_say_it_in_the_singular(owner_client):
    from django.contrib.messages import get_messages

    owner_client.post(reverse("sweep-new"), sweep_form(trials="1", parallel="1"))
    sweep = Sweep.objects.get()
    train_queued(sweep)
    response = owner_client.post(reverse("sweep-launch-best", args=[sweep.pk]), {"seeds": "1"})
    assert [str(message) for message in get_messages(response.wsgi_request)][-1] == \
        "Launched the best trial's values with 1 seed."
    response = owner_client.post(reverse("sweep-extend", args=[sweep.pk]), {"more": "1"})
    assert [str(message) for message in get_messages(response.wsgi_request)][-1] == "1 more trial."


def test_the_data_tells_the_trials_training_from_those_waiting_for_a_worker(owner_client):
    """Two trials at once with one worker: one trains, the other's run waits in the queue."""
    owner_client.post(reverse("sweep-new"), sweep_form(parallel="2"))
    sweep = Sweep.objects.get()
    data = owner_client.get(reverse("sweep-data", args=[sweep.pk])).json()
    assert (data["training"], data["queued"]) == (0, 2)
    first = Run.objects.filter(experiment__sweep_trial__sweep=sweep).order_by("pk").first()
    Run.objects.filter(pk=first.pk).update(status=Run.Status.RUNNING)
    data = owner_client.get(reverse("sweep-data", args=[sweep.pk])).json()
    assert (data["training"], data["queued"]) == (1, 1)


def test_the_launch_refusal_counts_one_active_run_in_the_singular(owner_client, settings):
    from django.contrib.messages import get_messages

    settings.MAX_ACTIVE_RUNS_PER_USER = 2
    owner_client.post(reverse("sweep-new"), sweep_form(trials="1", parallel="1"))
    sweep = Sweep.objects.get()
    response = owner_client.post(reverse("sweep-launch-best", args=[sweep.pk]), {"seeds": "2"})
    assert [str(message) for message in get_messages(response.wsgi_request)][-1] == \
        "You have 1 queued or running run; this site allows 2 at a time."
