"""Helpers for the tests of pages that only read and of the periodic chores that do the writing instead."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def sweeps_not_told_of_run_ends():
    """The sweeps app does not hear `run_ended` meanwhile: as if the worker died before it advanced the sweep, so
    only the periodic chore (or an explicit advance) records what ended."""
    from rlweb.experiments.signals import run_ended
    from rlweb.sweeps import study

    uid = "rlweb.sweeps.advance_after_run"
    assert run_ended.disconnect(dispatch_uid=uid)
    try:
        yield
    finally:
        run_ended.connect(study.advance_after_run, dispatch_uid=uid)


def writes_of(queries) -> list[str]:
    """The statements among Django's captured `queries` (CaptureQueriesContext) that change the database."""
    return [query["sql"] for query in queries if query["sql"].lstrip().upper().startswith(("INSERT", "UPDATE",
                                                                                             "DELETE", "REPLACE"))]
