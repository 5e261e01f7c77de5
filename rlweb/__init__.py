"""rlweb: the Django project. The Celery app loads with it so that tasks use this app."""

from rlweb.celery import app as celery_app

__all__ = ["celery_app"]
