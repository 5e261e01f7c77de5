from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "rlweb.experiments"
    default_auto_field = "django.db.models.BigAutoField"
