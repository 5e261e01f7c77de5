from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "rlweb.api"
    default_auto_field = "django.db.models.BigAutoField"
