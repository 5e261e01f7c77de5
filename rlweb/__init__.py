"""rlweb: the Django project. The Celery app lives in rlweb/celery.py (`celery -A rlweb` finds it there);
tasks bind to it by importing it, so importing this package (`python -m rlweb.devserver`) stays light."""
