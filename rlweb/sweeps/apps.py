from django.apps import AppConfig


class SweepsConfig(AppConfig):
    """Sweeps hook into experiments, which knows nothing of them: a run that ends advances its trial's sweep
    (the `run_ended` signal), and a trial's runs report their evaluations to the sweep's pruner (a watcher
    of the run's sink)."""

    name = "rlweb.sweeps"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rlweb.experiments.signals import run_ended
        from rlweb.experiments.sink import watch_runs
        from rlweb.sweeps import pbt, study

        run_ended.connect(study.advance_after_run, dispatch_uid="rlweb.sweeps.advance_after_run")
        watch_runs(study.watch_trial_run)
        study.register_method("pbt", create=pbt.create, advance_locked=pbt.advance_locked)
        watch_runs(pbt.watch_member_run)
