"""Stopping rlweb (Ctrl-C of `make run`, here its SIGTERM) while a run trains, on the real stack."""

from __future__ import annotations

import time

import pytest

from tests.e2e.stack import running_site

pytestmark = pytest.mark.e2e

RUN_STATE = """
from rlweb.experiments.models import Run
run = Run.objects.get(pk={run_id})
result = dict(status=run.status, steps_done=run.steps_done, error=run.error,
              checkpoints=list(run.checkpoints.values_list("tag", "step")))
"""


def test_stopping_rlweb_mid_run_ends_the_run_cancelled_with_a_final_checkpoint_to_resume_from(tmp_path):
    with running_site(tmp_path) as site:
        run_id = site.orm("""
            from django.contrib.auth import get_user_model
            from rlweb.experiments.models import Experiment, Run
            from rlweb.experiments.lifecycle import enqueue
            owner = get_user_model().objects.create_user("shutdown-owner")
            experiment = Experiment.objects.create(
                owner=owner, name="far too long", algorithm="dqn", env_id="CartPole-v1", total_steps=10_000_000,
                hyperparameters=dict(learning_starts=500, batch_size=32, buffer_size=10_000, train_frequency=4,
                                     gradient_steps=1, hidden_layers="64,64"))
            run = Run.objects.create(experiment=experiment, total_steps=10_000_000)
            enqueue(run)
            result = run.pk
        """)
        state = site.orm(RUN_STATE.format(run_id=run_id))
        deadline = time.monotonic() + 120
        while not (state["status"] == "running" and state["steps_done"] > 0) and time.monotonic() < deadline:
            time.sleep(1)
            state = site.orm(RUN_STATE.format(run_id=run_id))
        assert state["status"] == "running" and state["steps_done"] > 0, state
    # the site is stopped now; its database is still there
    state = site.orm(RUN_STATE.format(run_id=run_id))
    assert state["status"] == "cancelled", state
    assert 0 < state["steps_done"] < 10_000_000
    assert ["final", state["steps_done"]] in state["checkpoints"], state
    log = (tmp_path / "devserver.log").read_text()
    assert "stopping the run with a final checkpoint" in log
    assert "Cold shutdown" not in log  # the worker then shut down warmly, without the supervisor's SIGQUIT
