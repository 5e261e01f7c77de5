from django.apps import AppConfig


class SuitesConfig(AppConfig):
    """Suites hook into experiments, which knows nothing of them: a run that ends lets the suite's waiting tasks
    start (the `run_ended` signal) and may finish the suite."""

    name = "rlweb.suites"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rlweb.experiments.signals import run_ended
        from rlweb.suites import launching

        run_ended.connect(launching.advance_after_run, dispatch_uid="rlweb.suites.advance_after_run")
