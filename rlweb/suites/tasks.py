"""The suites app's side of Celery: its periodic chore (a beat entry in rlweb/celery.py).

A suite's waiting tasks start as soon as one of its owner's runs ends, in the process that ended it (the
`run_ended` signal, heard in apps.py); `advance_suites` every 10 s is the safety net.
"""

from __future__ import annotations

from rlweb.celery import app
from rlweb.suites import launching


@app.task(name="rlweb.advance_suites")
def advance_suites() -> None:
    """A periodic chore (celery beat): advance every running suite."""
    launching.advance_all()
