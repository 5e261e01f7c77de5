"""Plugins on the site: the example package's algorithm offered by the form, trained by the real task, checkpointed
and evaluated; its environment suggested; workers reporting their plugins; broken plugins kept aside; a run on a
worker without the package failed at once, naming it. Needs `pip install -e examples/plugin`."""

from __future__ import annotations

import importlib.metadata
import json
import time

import pytest
import trainer
from django.urls import reverse

from rlweb.experiments import workers
from rlweb.experiments.models import Run
from rlweb.experiments.tasks import train_run
from tests.plugin_fixtures import (BROKEN_PACKAGE, EXAMPLE, EXAMPLE_ENV, broken_plugins,  # noqa: F401 (a fixture)
                                    needs_example_plugin)
from tests.web.api_helpers import owner_api  # noqa: F401  (a fixture)
from tests.web.helpers import TINY_DQN, form_data

TINY_SOFT_DQN = {"learning_starts": 20, "batch_size": 8, "buffer_size": 200, "hidden_layers": "16"}

pytestmark = needs_example_plugin


def example_version() -> str:
    return importlib.metadata.version(EXAMPLE)


def register_worker(node: str, queues: str, algorithms: dict | None = None, device: str = "cpu") -> None:
    """A live worker entry as Registration writes it; `algorithms` replaces what this process has."""
    entry = {"node": node, "host": "test-host", "queues": queues, "device": device, "gpu_memory_mb": 0,
             "visible_devices": "", "pid": 1, "started": time.time(), "cores": 2, **workers.algorithms_entry()}
    if algorithms is not None:
        entry["algorithms"] = json.dumps(algorithms)
    workers.write_entry(entry)


def soft_dqn_form(**overrides) -> dict:
    data = form_data(algorithm="soft-dqn", env_id=EXAMPLE_ENV, total_steps="300", eval_interval="150")
    data = {key: value for key, value in data.items() if not key.startswith("hp_")}
    data.update({f"hp_{param.name}": str(param.default) for param in trainer.get_spec("soft-dqn").params()})
    data.update({f"hp_{name}": str(value) for name, value in TINY_SOFT_DQN.items()})
    data.update(overrides)
    return data


def test_the_form_offers_the_plugins_algorithm_with_its_fields_and_suggests_its_environment(owner_client):
    page = owner_client.get(reverse("experiment-new") + "?algorithm=soft-dqn").content.decode()
    assert '<option value="soft-dqn" selected>' in page
    assert 'name="hp_temperature"' in page  # its own field, declared like the built-ins'
    assert f'<option value="{EXAMPLE_ENV}">' in page


def test_the_form_offers_only_algorithms_a_live_worker_of_the_queue_has(owner_client, settings):
    settings.WORKER_TTL_SECONDS = 600  # the entries must outlive the test's requests on a loaded machine
    builtins_only = {name: f"rlweb {trainer.__version__}" for name in trainer.algorithm_names() if name != "soft-dqn"}
    register_worker("plain@test-host", "cpu", builtins_only)
    page = owner_client.get(reverse("experiment-new")).content.decode()
    assert '<option value="soft-dqn"' not in page and '<option value="dqn"' in page
    response = owner_client.post(reverse("experiment-new") + "?algorithm=soft-dqn", soft_dqn_form())
    assert response.status_code == 200 and "soft-dqn is not one of the available choices" in response.content.decode()
    register_worker("gpu@test-host", "gpu", device="test GPU")  # has it, but serves another queue
    assert '<option value="soft-dqn"' in owner_client.get(reverse("experiment-new")).content.decode()
    response = owner_client.post(reverse("experiment-new") + "?algorithm=soft-dqn", soft_dqn_form())
    assert f"No live worker of the cpu queue has soft-dqn from {EXAMPLE} {example_version()}" in \
        response.content.decode()
    assert owner_client.post(reverse("experiment-new") + "?algorithm=soft-dqn",
                             soft_dqn_form(device="cuda")).status_code == 302
    register_worker("older@test-host", "cpu", {**builtins_only, "soft-dqn": f"{EXAMPLE} 0.0.1"})
    response = owner_client.post(reverse("experiment-new") + "?algorithm=soft-dqn", soft_dqn_form(name="again"))
    assert "No live worker of the cpu queue" in response.content.decode()  # another version is no better
    register_worker("plugged@test-host", "cpu")  # this process's algorithms: the example's too
    assert owner_client.post(reverse("experiment-new") + "?algorithm=soft-dqn",
                             soft_dqn_form(name="at last")).status_code == 302


def test_the_plugins_algorithm_launched_from_the_form_trains_checkpoints_and_evaluates(owner_client):
    register_worker("plugged@test-host", "cpu")
    response = owner_client.post(reverse("experiment-new") + "?algorithm=soft-dqn",
                                 soft_dqn_form(checkpoint_interval="150"))
    assert response.status_code == 302, response.content.decode()[:2000]
    run = Run.objects.get()
    assert run.experiment.hyperparameters["plugin"] == f"{EXAMPLE} {example_version()}"
    assert train_run(run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.steps_done == 300 and run.eval_return_mean is not None
    checkpoint = run.checkpoints.order_by("-step").first()
    agent = checkpoint.load_agent()
    assert agent.name == "soft-dqn" and len(agent.evaluate(episodes=2)["returns"]) == 2


def test_a_run_claimed_by_a_worker_with_another_version_fails_at_once_naming_the_package(make_experiment):
    experiment = make_experiment(algorithm="soft-dqn", env_id=EXAMPLE_ENV,
                                 hyperparameters={**TINY_SOFT_DQN, "plugin": f"{EXAMPLE} 9.0.0"})
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=experiment.total_steps, task_id="t")
    assert train_run(run.pk) == "failed"
    run.refresh_from_db()
    assert f"needs the package {EXAMPLE} 9.0.0, but {EXAMPLE} {example_version()} is installed here" in run.error
    assert run.steps_done == 0


def test_the_workers_page_shows_each_workers_plugins_and_the_broken_ones(owner_client, broken_plugins):
    register_worker("plugged@test-host", "cpu")
    page = owner_client.get(reverse("worker-list")).content.decode()
    assert f"<code>soft-dqn</code> <span class=\"muted\">{EXAMPLE} {example_version()}</span>" in page
    assert "<code>import-error</code> broken: " + BROKEN_PACKAGE in page  # the worker's own report
    assert f"<code>bad-config</code> from {BROKEN_PACKAGE} 1.0.0 is broken" in page  # this web server's
    assert page.count('id="algorithm-plugins"') == 1 and page.index("</title>") < page.index('id="algorithm-plugins"')


def test_a_plugin_that_crashes_in_train_fails_its_run_and_the_worker_trains_the_next(make_experiment,
                                                                                     broken_plugins):
    crashing = make_experiment(algorithm="crashing", hyperparameters={})
    run = Run.objects.create(experiment=crashing, seed=0, total_steps=crashing.total_steps, task_id="t1")
    assert train_run(run.pk) == "failed"
    run.refresh_from_db()
    assert "failed on purpose" in run.error
    plain = make_experiment(hyperparameters=dict(TINY_DQN))
    after = Run.objects.create(experiment=plain, seed=0, total_steps=plain.total_steps, task_id="t2")
    assert train_run(after.pk) == "succeeded"


def test_a_broken_plugin_is_not_offered_and_the_form_still_works(owner_client, broken_plugins):
    page = owner_client.get(reverse("experiment-new")).content.decode()
    assert '<option value="import-error"' not in page and '<option value="bad-config"' not in page
    response = owner_client.post(reverse("experiment-new") + "?algorithm=import-error",
                                 form_data(algorithm="import-error"))
    assert response.status_code == 200 and Run.objects.count() == 0


def test_a_plugin_run_is_compared_beside_a_built_in_one_on_the_plugins_environment(owner_client, make_experiment):
    soft = make_experiment(algorithm="soft-dqn", env_id=EXAMPLE_ENV, total_steps=300, eval_interval=150,
                           hyperparameters=trainer.validate("soft-dqn", EXAMPLE_ENV, TINY_SOFT_DQN))
    dqn = make_experiment(env_id=EXAMPLE_ENV, total_steps=300, eval_interval=150)
    runs = [Run.objects.create(experiment=experiment, total_steps=300) for experiment in (soft, dqn)]
    for run in runs:
        assert train_run(run.pk) == "succeeded"
    selected = {"runs": ",".join(str(run.pk) for run in runs)}
    data = owner_client.get(reverse("compare-data"), selected).json()
    assert [row["algorithm"] for row in data["runs"]] == ["soft-dqn", "dqn"]
    returns = next(metric for metric in data["metrics"] if metric["key"] == "eval/return_mean")
    assert all(returns["runs"][str(run.pk)] for run in runs)  # both curves, side by side
    page = owner_client.get(reverse("compare"), selected)
    assert page.status_code == 200
    assert "temperature" in [row["name"] for row in page.context["hyperparameters"]]


@pytest.mark.django_db(transaction=True)
def test_a_sweep_over_the_plugins_live_setting_trains_its_trials(owner):
    from tests.web.test_sweep_study import make_sweep, work

    sweep = make_sweep(owner, algorithm="soft-dqn", env_id=EXAMPLE_ENV, fixed=dict(TINY_SOFT_DQN), trials=2,
                       parallel=1, pruner="none", total_steps=300, eval_interval=150, eval_episodes=1,
                       space=[{"name": "temperature", "type": "float", "low": 0.001, "high": 0.1, "log": True}])
    statuses = work(sweep, threads=1)
    sweep.refresh_from_db()
    assert sweep.status == sweep.Status.FINISHED and sorted(statuses.values()) == ["succeeded", "succeeded"]
    trials = list(sweep.trial_set.order_by("number"))
    assert [trial.state for trial in trials] == ["complete", "complete"]
    assert all(trial.experiment.algorithm == "soft-dqn" and 0.001 <= trial.experiment.hyperparameters["temperature"]
               <= 0.1 for trial in trials)


def test_the_api_launches_the_plugins_algorithm_and_refuses_its_bad_values_by_field(owner_api):
    body = {"name": "soft", "algorithm": "soft-dqn", "env_id": EXAMPLE_ENV, "total_steps": 300, "eval_interval": 150,
            "eval_episodes": 2, "device": "cpu", "hyperparameters": dict(TINY_SOFT_DQN)}
    response = owner_api.post_json("/api/experiments", body)
    assert response.status_code == 201, response.content
    run = Run.objects.get(experiment_id=response.json()["id"])
    assert run.experiment.hyperparameters["plugin"] == f"{EXAMPLE} {example_version()}"
    assert train_run(run.pk) == "succeeded"
    refused = owner_api.post_json("/api/experiments", {**body, "hyperparameters": {"temperature": -1}})
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["body", "hyperparameters", "temperature"]
