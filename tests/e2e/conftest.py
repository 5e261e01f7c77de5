"""The browser tests' fixtures (tests/e2e/stack.py): one chromium for the session, and for each test module an rlweb:
a fresh one on a copy of one migrated database, or the session's shared one for the modules marked `shared_site`
(run last)."""

from tests.e2e.stack import (browser, chromium_for_session, migrated_database, shared_last,  # noqa: F401 (fixtures)
                             shared_site_stack, site, site_stack)


def pytest_collection_modifyitems(items):
    shared_last(items)
