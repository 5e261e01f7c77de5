"""The browser tests' fixtures (tests/e2e/stack.py): a fresh rlweb per test module, each on a copy of one migrated
database, and one chromium for the session."""

from tests.e2e.stack import browser, chromium_for_session, migrated_database, site, site_stack  # noqa: F401 (fixtures)
