"""The browser tests' fixtures (tests/e2e/stack.py): one chromium for the session, and for each test module an rlweb:
a fresh one on a copy of one migrated database, or the session's shared one for the modules marked `shared_site`
(run last). A test that fails shows what its site's processes logged while it ran, and what its pages showed."""

import pytest

from tests.e2e.stack import (browser, chromium_for_session, log_sizes, logs_since,  # noqa: F401 (fixtures)
                             migrated_database, pages_shown, shared_last, shared_site_stack, site, site_stack)

SITE_LOGS = pytest.StashKey[tuple]()  # a test's site's var folder, and its logs' sizes when the test began


def pytest_collection_modifyitems(items):
    shared_last(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    stack = item.funcargs.get("site_stack")
    if stack is not None:
        item.stash[SITE_LOGS] = (stack.var, log_sizes(stack.var))
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and report.failed:
        if "browser" in item.funcargs:
            report.sections.append(("what its pages showed when it failed", pages_shown(item.funcargs["browser"])))
        if SITE_LOGS in item.stash:
            report.sections.append(("the site's logs while the test ran", logs_since(*item.stash[SITE_LOGS])))
    return report

