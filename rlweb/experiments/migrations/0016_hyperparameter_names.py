"""The names left from the vocabulary work (0007): every coefficient spelt `_coef`, q-learning's epsilon named as the
DQN family's, and REINFORCE/VPG's per-batch return normalisation named apart from the running reward scaling of the
others. Stored experiments, and the live changes asked of their runs, get the new names (old checkpoints load through
trainer/params.py's ALIASES). The renames are written out here, as they were on the day, so that this migration means
the same whatever trainer's aliases become later. Sweeps keep the names they were made with: their Optuna studies
know the searched hyperparameters by name, and the trials' configs are built through the aliases (trainer.validate),
so the experiments a sweep makes get the new names."""

from django.db import migrations

RENAMES = {  # algorithm -> {old name: new name}
    "es": {"l2_coeff": "l2_coef"},
    "rnd-ppo": {"ext_adv_coeff": "ext_adv_coef", "int_adv_coeff": "int_adv_coef"},
    "qlearning": {"epsilon_start": "exploration_initial_eps", "epsilon_decay": "exploration_decay",
                  "epsilon_min": "exploration_final_eps"},
    "reinforce": {"normalize_returns": "normalize_batch_returns"},
    "vpg": {"normalize_returns": "normalize_batch_returns"},
}


def renamed(values, renames: dict[str, str]):
    """`values` (a dict of hyperparameters) with its keys renamed; anything else as it is."""
    if not isinstance(values, dict):
        return values
    return {renames.get(key, key): value for key, value in values.items()}


def renamed_changes(entries, renames: dict[str, str]):
    """A run's `live_changes` with the names in each entry's asked `values` and applied `changes` renamed."""
    if not isinstance(entries, list):
        return entries
    return [{**entry, **{key: renamed(entry[key], renames) for key in ("values", "changes") if key in entry}}
            if isinstance(entry, dict) else entry for entry in entries]


def rename(apps, renames_of):
    Experiment = apps.get_model("experiments", "Experiment")
    Run = apps.get_model("experiments", "Run")
    for experiment in Experiment.objects.filter(algorithm__in=list(RENAMES)).iterator():
        hyperparameters = renamed(experiment.hyperparameters, renames_of(experiment.algorithm))
        if hyperparameters != experiment.hyperparameters:
            experiment.hyperparameters = hyperparameters
            experiment.save(update_fields=["hyperparameters"])
    runs = Run.objects.filter(experiment__algorithm__in=list(RENAMES)).exclude(live_changes=[])
    for run in runs.select_related("experiment").only("live_changes", "experiment__algorithm").iterator():
        live_changes = renamed_changes(run.live_changes, renames_of(run.experiment.algorithm))
        if live_changes != run.live_changes:
            run.live_changes = live_changes
            run.save(update_fields=["live_changes"])


def forwards(apps, schema_editor):
    rename(apps, lambda algorithm: RENAMES[algorithm])


def backwards(apps, schema_editor):
    rename(apps, lambda algorithm: {new: old for old, new in RENAMES[algorithm].items()})


class Migration(migrations.Migration):
    dependencies = [("experiments", "0015_checkpoint_replaced")]
    operations = [migrations.RunPython(forwards, backwards)]
