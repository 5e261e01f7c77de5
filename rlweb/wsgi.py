"""WSGI entry point (plain WSGI servers). The live pages need the ASGI server (asgi.py, uvicorn): their streams are
async generators, which Django under WSGI reads to the end before it sends anything."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rlweb.settings")

application = get_wsgi_application()
