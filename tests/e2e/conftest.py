"""The browser tests' fixtures (tests/e2e/stack.py): one chromium for the session, and for each test module an rlweb:
a fresh one on a copy of one migrated database, or the session's shared one for the modules marked `shared_site`
(run last). A test that fails shows what its site's processes logged while it ran, and what its pages showed."""

import pytest

from tests.e2e.stack import (SHARED_SITE, browser, chromium_for_session, log_sizes,  # noqa: F401 (fixtures)
                             logs_since, migrated_database, pages_shown, settle, shared_last, shared_site_stack, site,
                             site_stack)

SITE_LOGS = pytest.StashKey[tuple]()  # a test's site's var folder, and its logs' sizes when the test began
FAILED = pytest.StashKey[bool]()  # the test's call failed


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
        item.stash[FAILED] = True
        if "browser" in item.funcargs:
            report.sections.append(("what its pages showed when it failed", pages_shown(item.funcargs["browser"])))
        if SITE_LOGS in item.stash:
            report.sections.append(("the site's logs while the test ran", logs_since(*item.stash[SITE_LOGS])))
    return report


@pytest.fixture(autouse=True)
def settled_after_a_failure(request):
    """A test on the shared rlweb that fails midway leaves what it started going (a 200,000-step run, say), and the
    next test's run waits behind it on the one worker until it fails too: CI 2026-11-29 lost a second test and four
    minutes of a core so. After a failed test the shared rlweb is settled (stack.settle), as after each module."""
    yield
    stack = request.node.funcargs.get("site_stack")
    if stack is not None and request.node.stash.get(FAILED, False) and request.node.get_closest_marker(SHARED_SITE):
        settle(stack)
