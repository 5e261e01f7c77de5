from django.apps import AppConfig


class ProjectsConfig(AppConfig):
    """Projects share experiments, sweeps and logged runs with members (access.py holds the one rule)."""

    name = "rlweb.projects"
    default_auto_field = "django.db.models.BigAutoField"
