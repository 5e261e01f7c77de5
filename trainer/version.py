"""The library's version: `trainer.__version__`, and written into every checkpoint's config.json."""

__version__ = "0.1.0"
