"""The browser tests' fixtures (tests/e2e/stack.py): a fresh rlweb per test module and one chromium."""

from tests.e2e.stack import browser, site, site_stack  # noqa: F401 (fixtures)
