"""WSGI entry point (the test client and plain WSGI servers)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rlweb.settings")

application = get_wsgi_application()
