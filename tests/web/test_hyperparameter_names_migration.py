"""Migration 0016 gives stored experiments, and the live changes of their runs, the names left from the vocabulary
work (`_coef`, q-learning's `exploration_*`, `normalize_batch_returns`), and takes them back when it is reversed;
the migrated values build the same config as the old ones."""

import pytest
import trainer

from tests.web.helpers import migrate, migrate_to_latest

BEFORE = ("experiments", "0015_checkpoint_replaced")
AFTER = ("experiments", "0016_hyperparameter_names")

OLD = {
    "qlearning": {"epsilon_start": 0.9, "epsilon_decay": 0.999, "epsilon_min": 0.05, "learning_rate": 0.2},
    "es": {"l2_coeff": 0.01, "sigma": 0.05},
    "rnd-ppo": {"ext_adv_coeff": 1.5, "int_adv_coeff": 0.5, "entropy_coef": 0.001},
    "reinforce": {"normalize_returns": False},
    "vpg": {"normalize_returns": True, "entropy_coef": 0.0},
    "ppo": {"normalize_rewards": True, "entropy_coef": 0.01},
}
NEW = {
    "qlearning": {"exploration_initial_eps": 0.9, "exploration_decay": 0.999, "exploration_final_eps": 0.05,
                  "learning_rate": 0.2},
    "es": {"l2_coef": 0.01, "sigma": 0.05},
    "rnd-ppo": {"ext_adv_coef": 1.5, "int_adv_coef": 0.5, "entropy_coef": 0.001},
    "reinforce": {"normalize_batch_returns": False},
    "vpg": {"normalize_batch_returns": True, "entropy_coef": 0.0},
    "ppo": {"normalize_rewards": True, "entropy_coef": 0.01},
}
OLD_CHANGES = [{"id": "a", "values": {"epsilon_min": 0.02}, "requested_at": "2026-10-01T00:00:00+00:00", "step": 500,
                "seq": 9, "changes": {"epsilon_min": {"old": 0.05, "new": 0.02}}},
               {"id": "b", "values": {"learning_rate": 0.1}, "requested_at": "2026-10-01T00:01:00+00:00"}]
NEW_CHANGES = [{"id": "a", "values": {"exploration_final_eps": 0.02}, "requested_at": "2026-10-01T00:00:00+00:00",
                "step": 500, "seq": 9, "changes": {"exploration_final_eps": {"old": 0.05, "new": 0.02}}},
               {"id": "b", "values": {"learning_rate": 0.1}, "requested_at": "2026-10-01T00:01:00+00:00"}]


@pytest.fixture
def at_0015(transactional_db):
    apps = migrate(BEFORE)
    yield apps
    migrate_to_latest()


def stored(apps) -> tuple[dict[str, dict], list]:
    Experiment = apps.get_model("experiments", "Experiment")
    Run = apps.get_model("experiments", "Run")
    return ({experiment.algorithm: experiment.hyperparameters for experiment in Experiment.objects.all()},
            Run.objects.get(experiment__algorithm="qlearning").live_changes)


def test_stored_experiments_and_live_changes_get_the_new_names_and_the_old_ones_back_when_reversed(at_0015):
    User = at_0015.get_model("auth", "User")
    Experiment = at_0015.get_model("experiments", "Experiment")
    Run = at_0015.get_model("experiments", "Run")
    owner = User.objects.create(username="old-timer")
    for algorithm, hyperparameters in OLD.items():
        experiment = Experiment.objects.create(owner=owner, name=algorithm, algorithm=algorithm,
                                               env_id="CartPole-v1", hyperparameters=hyperparameters,
                                               total_steps=1_000)
        if algorithm == "qlearning":
            Run.objects.create(experiment=experiment, total_steps=1_000, live_changes=OLD_CHANGES)
    assert stored(migrate(AFTER)) == (NEW, NEW_CHANGES)
    assert stored(migrate(BEFORE)) == (OLD, OLD_CHANGES)


@pytest.mark.parametrize("algorithm", list(OLD))
def test_old_and_new_names_build_the_same_config(algorithm):
    spec = trainer.get_spec(algorithm)
    assert spec.build_config(OLD[algorithm]) == spec.build_config(NEW[algorithm])
