"""`python -m rlweb_client watch-tensorboard`: a TensorBoard folder followed while torch's SummaryWriter writes it,
against a live server: its scalars arrive while the writer is still writing, a run folder that appears later gets
its own run, every scalar is stored as written, and each run is finished once its files stop growing."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

from rlweb.api.models import ApiToken
from rlweb.experiments.models import Event, Run
from tests.web.test_tensorboard_import import CLIENT, stored


def wait_for(condition, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while not (found := condition()):
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.1)
    return found


def write(writer: SummaryWriter, steps: range, scale: float) -> dict[tuple[str, int], float]:
    source = {}
    for step in steps:
        writer.add_scalar("charts/episodic_return", scale * step, step)
        source[("charts/episodic_return", step)] = float(np.float32(scale * step))
    writer.flush()
    return source


@pytest.mark.django_db(transaction=True)
def test_a_folder_written_by_summarywriters_is_followed_live_one_run_per_folder(live_server, owner, tmp_path):
    _, token = ApiToken.issue(owner, "watch")
    runs_folder = tmp_path / "runs"
    watcher = subprocess.Popen(
        [sys.executable, "-m", "rlweb_client", "watch-tensorboard", str(runs_folder), "--experiment", "watched",
         "--idle", "8", "--interval", "0.2", "--until-idle"], cwd=tmp_path, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(CLIENT), "RLWEB_URL": live_server.url, "RLWEB_TOKEN": token})
    try:
        assert watcher.stdout.readline().startswith("waiting for event files"), watcher.stderr.read()
        first = SummaryWriter(str(runs_folder / "ppo_1"))  # the folder appears after the watcher started
        source = write(first, range(0, 20), 1.5)
        run = wait_for(lambda: Run.objects.filter(experiment__name="watched").first(), 30, "the first run")
        wait_for(lambda: len(stored(run.pk)) == 20, 30, "the first scalars")  # drawn while the writer is open
        assert Run.objects.get(pk=run.pk).status == Run.Status.RUNNING
        source |= write(first, range(20, 50), 1.5)
        second = SummaryWriter(str(runs_folder / "ppo_2"))
        later = write(second, range(0, 30), -2.0)
        first.close()
        second.close()
        out, errors = watcher.communicate(timeout=60)  # both finish once idle for 8 s (a margin for a loaded machine)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.communicate()
    assert watcher.returncode == 0, out + errors
    runs = list(Run.objects.filter(experiment__name="watched").select_related("logged").order_by("pk"))
    assert [run.logged.name for run in runs] == ["ppo_1", "ppo_2"]
    assert [run.status for run in runs] == [Run.Status.SUCCEEDED] * 2
    assert stored(runs[0].pk) == source and stored(runs[1].pk) == later
    times = list(Event.objects.filter(run=runs[0], kind__in=("train", "episode", "eval")).order_by("seq")
                 .values_list("time", flat=True))  # from the events' own wall times, not from when they were read
    assert times[0] == 0.0 and times == sorted(times) and times[-1] < 30
    assert "ppo_1: finished after 50 points (its files did not grow for 8 s)" in out, out


@pytest.mark.django_db(transaction=True)
def test_a_watcher_killed_and_started_again_goes_on_in_the_same_run_with_every_scalar_once(live_server, owner,
                                                                                          tmp_path):
    _, token = ApiToken.issue(owner, "watch")
    command = [sys.executable, "-m", "rlweb_client", "watch-tensorboard", "runs", "--experiment", "watched",
               "--idle", "4", "--interval", "0.2", "--until-idle"]
    options = {"cwd": tmp_path, "text": True, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE,
               "env": {**os.environ, "PYTHONPATH": str(CLIENT), "RLWEB_URL": live_server.url, "RLWEB_TOKEN": token}}
    writer = SummaryWriter(str(tmp_path / "runs" / "ppo_1"))
    source = write(writer, range(0, 30), 1.5)
    first = subprocess.Popen(command, **options)
    try:
        run = wait_for(lambda: Run.objects.filter(experiment__name="watched").first(), 30, "the run")
        wait_for(lambda: len(stored(run.pk)) == 30, 30, "the first scalars")
    finally:
        first.kill()  # as a closed terminal or a lost SSH session ends it: no finish
        first.communicate()
    source |= write(writer, range(30, 50), 1.5)
    writer.close()
    again = subprocess.run(command, timeout=60, **options)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"ppo_1: this watcher followed it before, into run {run.pk}" in again.stdout
    assert list(Run.objects.filter(experiment__name="watched").values_list("pk", flat=True)) == [run.pk]
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED and run.attempts == 2
    assert stored(run.pk) == source  # every scalar, once
    assert Event.objects.filter(run=run, kind="train").count() == 50
