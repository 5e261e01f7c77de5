"""One name per hyperparameter idea across algorithms (trainer/params.py, ALIASES): stored experiments get
the new names. The renames are written out here, as they were on the day, so that this migration means the
same whatever trainer's aliases become later."""

from django.db import migrations

DQN_FAMILY = ("dqn", "double-dqn", "dueling-dqn", "noisy-dqn", "nstep-dqn", "per-dqn", "c51", "rainbow")
CONTINUOUS = {"q_learning_rate": "critic_learning_rate", "normalize_observation": "normalize_observations",
              "normalize_reward": "normalize_rewards"}
DDPG = {**CONTINUOUS, "num_updates_per_iter": "gradient_steps", "lr_annealing": "lr_schedule"}

RENAMES = {  # algorithm -> {old name: new name}
    **{name: {"adam_epsilon": "optimizer_epsilon", "target_update_tau": "tau", "n_step": "n_step_return"}
       for name in DQN_FAMILY},
    "r2d1": {"adam_epsilon": "optimizer_epsilon", "n_step": "n_step_return"},
    "ppo": {"adam_eps": "optimizer_epsilon"},
    "rnd-ppo": {"adam_eps": "optimizer_epsilon"},
    "a2c": {"lr_pi": "policy_learning_rate", "lr_v": "critic_learning_rate", "optimizer_eps": "optimizer_epsilon",
            "entropy_beta": "entropy_coef", "critic_beta": "value_coef"},
    "vpg": {"entropy_beta": "entropy_coef", "value_learning_rate": "critic_learning_rate"},
    "es": {"normalize_observation": "normalize_observations"},
    "sac": CONTINUOUS,
    "ddpg": DDPG,
    "td3": DDPG,
}


def converted(old: str, new: str, value):
    """DDPG's switch `lr_annealing` (true or false) became the `lr_schedule` (linear or constant) of the others."""
    if (old, new) == ("lr_annealing", "lr_schedule"):
        return "linear" if value is True else "constant"
    if (old, new) == ("lr_schedule", "lr_annealing"):
        return value == "linear"
    return value


def rename(apps, renames_of):
    Experiment = apps.get_model("experiments", "Experiment")
    for experiment in Experiment.objects.filter(algorithm__in=list(RENAMES)).iterator():
        renames = renames_of(experiment.algorithm)
        values = experiment.hyperparameters
        if not isinstance(values, dict) or not any(old in values for old in renames):
            continue
        experiment.hyperparameters = {renames.get(key, key): converted(key, renames[key], value) if key in renames
                                      else value for key, value in values.items()}
        experiment.save(update_fields=["hyperparameters"])


def forwards(apps, schema_editor):
    rename(apps, lambda algorithm: RENAMES[algorithm])


def backwards(apps, schema_editor):
    rename(apps, lambda algorithm: {new: old for old, new in RENAMES[algorithm].items()})


class Migration(migrations.Migration):
    dependencies = [("experiments", "0006_run_lifecycle")]
    operations = [migrations.RunPython(forwards, backwards)]
