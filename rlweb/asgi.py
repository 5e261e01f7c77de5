"""ASGI entry point: `uvicorn rlweb.asgi:application`. The live stream is served by async generators here. Bodies
are bounded before Django reads them (rlweb/body_limit.py).

The objects made while starting (Django, every view module, the libraries: some 300,000) are frozen out of the
garbage collector: a full collection then scans only what requests made since, instead of pausing a request for
100-200 ms now and then (history.json under 10,000 points a second, benchmarks/client_logging.py)."""

import gc
import os

from django.core.asgi import get_asgi_application
from django.urls import get_resolver

from rlweb.body_limit import BodyLimit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rlweb.settings")

application = BodyLimit(get_asgi_application())
get_resolver().url_patterns  # imports every view module now, to be frozen with the rest
gc.collect()
gc.freeze()
