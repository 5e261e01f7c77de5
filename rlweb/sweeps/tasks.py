"""The sweeps app's side of Celery: its periodic chore (a beat entry in rlweb/celery.py).

A sweep advances as soon as one of its trials' runs ends, in the worker that ended it (the `run_ended` signal,
heard in apps.py); `advance_sweeps` every 10 s is the safety net: trials whose runs ended elsewhere (a lost
run, a cancel) or whose advance failed, and sweeps that wait for room under the user's limit of runs.
"""

from __future__ import annotations

from rlweb.celery import app
from rlweb.sweeps import study


@app.task(name="rlweb.advance_sweeps")
def advance_sweeps() -> None:
    """A periodic chore (celery beat): advance every sweep that runs or has trials still to record."""
    study.advance_all()
