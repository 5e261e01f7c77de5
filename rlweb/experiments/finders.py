"""A static files finder that serves plotly.js from the installed `plotly` package (no CDN)."""

from pathlib import Path

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_DIR = Path(plotly.__file__).resolve().parent / "package_data"
PLOTLY_FILE = "plotly.min.js"
STATIC_PREFIX = "vendor/plotly"


class PlotlyFinder(BaseFinder):
    """Finds exactly one file, `vendor/plotly/plotly.min.js`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=PLOTLY_DIR)
        self.storage.prefix = STATIC_PREFIX

    def check(self, **kwargs):
        return []

    def find(self, path, find_all=False, **kwargs):
        if path != f"{STATIC_PREFIX}/{PLOTLY_FILE}" or not (PLOTLY_DIR / PLOTLY_FILE).is_file():
            return []  # what Django's own finders answer for "not here"
        found = str(PLOTLY_DIR / PLOTLY_FILE)
        return [found] if find_all else found

    def list(self, ignore_patterns):
        if (PLOTLY_DIR / PLOTLY_FILE).is_file():
            yield PLOTLY_FILE, self.storage
