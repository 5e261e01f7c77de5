"""Migration 0007 gives stored experiments the hyperparameter names every algorithm now shares, and takes them
back when it is reversed; the migrated values build the same config as the old ones."""

import pytest
import trainer

from tests.web.helpers import migrate, migrate_to_latest

BEFORE = ("experiments", "0006_run_lifecycle")
AFTER = ("experiments", "0007_hyperparameter_vocabulary")

OLD = {
    "a2c": {"lr_pi": 3e-4, "lr_v": 1e-3, "optimizer_eps": 1e-6, "entropy_beta": 0.01, "critic_beta": 0.25,
            "gamma": 0.98},
    "rainbow": {"adam_epsilon": 1.5e-4, "target_update_tau": 1.0, "n_step": 3, "learning_rate": 1e-4},
    "td3": {"q_learning_rate": 1e-3, "normalize_observation": True, "normalize_reward": False,
            "num_updates_per_iter": 2, "lr_annealing": True},
    "ppo": {"adam_eps": 1e-5, "entropy_coef": 0.0},
}
NEW = {
    "a2c": {"policy_learning_rate": 3e-4, "critic_learning_rate": 1e-3, "optimizer_epsilon": 1e-6,
            "entropy_coef": 0.01, "value_coef": 0.25, "gamma": 0.98},
    "rainbow": {"optimizer_epsilon": 1.5e-4, "tau": 1.0, "n_step_return": 3, "learning_rate": 1e-4},
    "td3": {"critic_learning_rate": 1e-3, "normalize_observations": True, "normalize_rewards": False,
            "gradient_steps": 2, "lr_schedule": "linear"},
    "ppo": {"optimizer_epsilon": 1e-5, "entropy_coef": 0.0},
}


@pytest.fixture
def at_0006(transactional_db):
    apps = migrate(BEFORE)
    yield apps
    migrate_to_latest()


def stored(apps) -> dict[str, dict]:
    Experiment = apps.get_model("experiments", "Experiment")
    return {experiment.algorithm: experiment.hyperparameters for experiment in Experiment.objects.all()}


def test_stored_experiments_get_the_shared_names_and_get_the_old_ones_back_when_reversed(at_0006):
    User = at_0006.get_model("auth", "User")
    Experiment = at_0006.get_model("experiments", "Experiment")
    owner = User.objects.create(username="old-timer")
    for algorithm, hyperparameters in OLD.items():
        Experiment.objects.create(owner=owner, name=algorithm, algorithm=algorithm, env_id="CartPole-v1",
                                  hyperparameters=hyperparameters, total_steps=1_000)
    assert stored(migrate(AFTER)) == NEW
    assert stored(migrate(BEFORE)) == OLD


@pytest.mark.parametrize("algorithm", list(OLD))
def test_old_and_new_names_build_the_same_config(algorithm):
    spec = trainer.get_spec(algorithm)
    assert spec.build_config(OLD[algorithm]) == spec.build_config(NEW[algorithm])
