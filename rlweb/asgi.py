"""ASGI entry point: `uvicorn rlweb.asgi:application`. The live stream is served by async generators here."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rlweb.settings")

application = get_asgi_application()
