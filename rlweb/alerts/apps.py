from django.apps import AppConfig


class AlertsConfig(AppConfig):
    """Alerts hook into experiments, which knows nothing of them: a run that ends raises its end alerts (the
    `run_ended` signal), and a worker's run reports its metrics to a watcher of its sink that raises the NaN and
    threshold alerts (triggers.py). Messages go out from a Celery task on the jobs queue (delivery.py, tasks.py)."""

    name = "rlweb.alerts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rlweb.alerts import triggers
        from rlweb.experiments.signals import run_ended
        from rlweb.experiments.sink import watch_runs

        run_ended.connect(triggers.alert_run_ended, dispatch_uid="rlweb.alerts.alert_run_ended")
        watch_runs(triggers.watch_run)
