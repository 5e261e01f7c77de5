from django.apps import AppConfig


class SweepsConfig(AppConfig):
    name = "rlweb.sweeps"
    default_auto_field = "django.db.models.BigAutoField"
