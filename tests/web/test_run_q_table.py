"""The Q-table heatmap of a tabular run: read from the run's latest checkpoint, laid out in 2-D."""

import pytest
from django.urls import reverse

from rlweb.experiments.models import Run
from rlweb.experiments.tasks import train_run


def trained_run(make_experiment, **fields) -> Run:
    experiment = make_experiment(**fields)
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=experiment.total_steps, task_id="q")
    assert train_run(run.pk) == "succeeded"
    return run


@pytest.fixture
def frozen_lake_run(make_experiment) -> Run:
    return trained_run(make_experiment, algorithm="qlearning", env_id="FrozenLake-v1", total_steps=2000,
                       hyperparameters={"exploration_decay": 0.999})


def test_frozen_lake_is_drawn_in_the_shape_of_its_map(owner_client, frozen_lake_run):
    response = owner_client.get(reverse("run-q-table", args=[frozen_lake_run.pk]))
    assert response.status_code == 200
    table = response.json()
    assert table["tag"] == "final" and table["step"] == 2000
    assert (len(table["values"]), len(table["values"][0])) == (4, 4)
    assert table["values"][0][0] is not None  # the start cell was updated
    assert table["values"][1][1] is None and table["actions"][1][1] is None  # a hole ends the episode: never updated
    assert {a for row in table["actions"] for a in row} - {None} <= {0, 1, 2, 3}


def test_a_two_dimensional_grid_has_the_cell_centres_on_its_axes(owner_client, make_experiment):
    run = trained_run(make_experiment, algorithm="qlearning", env_id="MountainCar-v0", total_steps=500,
                      hyperparameters={"grid_size": "6,4"})
    table = owner_client.get(reverse("run-q-table", args=[run.pk])).json()
    assert len(table["x"]) == 6 and len(table["y"]) == 4  # position across, velocity up
    assert (len(table["values"]), len(table["values"][0])) == (4, 6)
    assert table["x"][0] == pytest.approx(-1.2 + 1.8 / 12) and table["y"][-1] == pytest.approx(0.07 - 0.14 / 8)


def test_runs_without_a_table_or_a_checkpoint_say_why(owner_client, make_experiment, queued_run):
    response = owner_client.get(reverse("run-q-table", args=[queued_run.pk]))
    assert response.status_code == 404 and "No checkpoint yet" in response.json()["error"]
    dqn_run = trained_run(make_experiment)
    response = owner_client.get(reverse("run-q-table", args=[dqn_run.pk]))
    assert response.status_code == 404 and "tabular" in response.json()["error"]


def test_a_stranger_gets_a_404(stranger_client, frozen_lake_run):
    response = stranger_client.get(reverse("run-q-table", args=[frozen_lake_run.pk]))
    assert response.status_code == 404 and "error" not in response.content.decode()
