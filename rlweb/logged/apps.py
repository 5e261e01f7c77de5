from django.apps import AppConfig


class LoggedConfig(AppConfig):
    """Runs logged from a user's own script through the API (runs.py). When the lost-run reaper gives up on one
    (its script went silent), the run's error says so in a script's terms (the `run_ended` signal)."""

    name = "rlweb.logged"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rlweb.experiments.signals import run_ended
        from rlweb.logged import runs

        run_ended.connect(runs.explain_silence, dispatch_uid="rlweb.logged.explain_silence")
