"""Sweeps end to end below the pages (rlweb/sweeps/study.py): the Optuna study in our own database, trials as
experiments whose runs the real task function trains (two threads: two trials at once), the first seed's sink
asking the pruner, and the sweep going on past crashed trials."""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

import optuna
import pytest
from django.db import connection

from rlweb.experiments.models import Event, Run
from rlweb.experiments.tasks import train_run
from rlweb.sweeps import study
from rlweb.sweeps.models import Sweep, Trial
from rlweb.sweeps.tasks import advance_sweeps
from tests.web import envs_for_outage_tests
from tests.web.chore_helpers import sweeps_not_told_of_run_ends
from tests.web.helpers import TINY_DQN

# Optuna writes through its own connection: the test's database must not sit in one open transaction
pytestmark = pytest.mark.django_db(transaction=True)


def train_one(run_id: int) -> str:
    try:
        return train_run(run_id)
    finally:
        connection.close()  # the thread's own connection


def work(sweep: Sweep, threads: int = 2, timeout: float = 240) -> dict[int, str]:
    """Be the workers: train the sweep's queued runs with the real task function, `threads` at once, until the
    sweep has ended. Returns each run's status as its task returned it."""
    done: dict[int, str] = {}
    deadline = time.monotonic() + timeout
    with ThreadPoolExecutor(threads) as pool:
        running: dict = {}
        while True:
            sweep.refresh_from_db()
            if not sweep.is_active and not running:
                return done
            assert time.monotonic() < deadline, f"the sweep did not end: {list(sweep.trial_set.values())}"
            queued = (Run.objects.filter(experiment__sweep_trial__sweep=sweep, status=Run.Status.QUEUED)
                      .exclude(pk__in=[*done, *running.values()]).order_by("pk"))
            for run in queued[:threads - len(running)]:
                running[pool.submit(train_one, run.pk)] = run.pk
            if running:
                finished, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in finished:
                    done[running.pop(future)] = future.result()
            else:
                study.advance(sweep.pk)
                time.sleep(0.1)


def make_sweep(owner, **fields) -> Sweep:
    values = {"owner": owner, "name": "lr search", "algorithm": "dqn", "env_id": "CartPole-v1",
              "fixed": {**TINY_DQN, "exploration_fraction": "0.3"},
              "space": [{"name": "learning_rate", "type": "float", "low": 1e-5, "high": 3e-2, "log": True}],
              "total_steps": 2000, "eval_interval": 250, "eval_episodes": 3, "sampler": "random", "seed": 3,
              "pruner": "median", "trials": 6, "parallel": 2, "device": "cpu"}
    values.update(fields)
    sweep = Sweep.objects.create(**values)
    study.create(sweep)
    return sweep


@pytest.mark.slow
def test_a_six_trial_sweep_with_a_median_pruner_two_at_once_prunes_some_and_finds_a_best(owner):
    sweep = make_sweep(owner)
    assert sweep.trial_set.count() == 2  # two trials at once from the start
    statuses = work(sweep)
    sweep.refresh_from_db()
    assert sweep.status == Sweep.Status.FINISHED
    trials = list(sweep.trial_set.order_by("number"))
    assert [trial.number for trial in trials] == list(range(6))
    states = [trial.state for trial in trials]
    assert Trial.State.PRUNED in states, states
    assert set(states) <= {Trial.State.COMPLETE, Trial.State.PRUNED}, [trial.reason for trial in trials]
    best = study.best_trial(sweep)
    assert best is not None and best.value == max(t.value for t in trials if t.value is not None)
    # Optuna's study agrees: the same states and the same best
    optuna_study = study.load_study(sweep)
    assert [t.state.name.lower() for t in optuna_study.trials] == [str(state) for state in states]
    assert optuna_study.best_trial.number == best.number and optuna_study.best_value == pytest.approx(best.value)
    # a pruned trial's run ended `pruned` right after the evaluation that decided it, with its checkpoint and why
    pruned = next(trial for trial in trials if trial.state == Trial.State.PRUNED)
    run = pruned.experiment.runs.get()
    assert statuses[run.pk] == Run.Status.PRUNED and run.status == Run.Status.PRUNED
    assert pruned.pruned_at is not None and pruned.pruned_at < sweep.total_steps
    last_eval = Event.objects.filter(run=run, kind="eval").order_by("-seq").first()
    assert run.steps_done - last_eval.step <= 100, "it stopped right after the evaluation that decided it"
    assert run.checkpoints.filter(tag="final").exists()
    finished = Event.objects.get(run=run, kind="finished")
    assert finished.values["status"] == "pruned" and "median" in finished.values["reason"]
    assert pruned.reason == finished.values["reason"]
    # the trials' values are the objective (the final evaluation) of their runs
    complete = next(trial for trial in trials if trial.state == Trial.State.COMPLETE)
    assert complete.value == study.evaluations(complete.experiment.runs.get())[-1][1]
    assert complete.params["learning_rate"] == complete.experiment.hyperparameters["learning_rate"]


def test_a_crashed_trial_is_recorded_failed_and_the_sweep_goes_on(owner):
    envs_for_outage_tests.Steps.hooks[150] = lambda: (_ for _ in ()).throw(RuntimeError("test env: crashed"))
    sweep = make_sweep(owner, env_id="rlweb-test/Steps-v0", trials=3, parallel=1, pruner="none", total_steps=300,
                       eval_interval=100, eval_episodes=1, fixed=dict(TINY_DQN))
    work(sweep, threads=1)
    sweep.refresh_from_db()
    trials = list(sweep.trial_set.order_by("number"))
    assert sweep.status == Sweep.Status.FINISHED
    assert [trial.state for trial in trials] == ["failed", "complete", "complete"]
    assert "test env: crashed" in trials[0].reason
    assert [trial.value for trial in trials[1:]] == [10.0, 10.0]  # ten-step episodes, reward 1 each
    assert [t.state.name for t in study.load_study(sweep).trials] == ["FAIL", "COMPLETE", "COMPLETE"]


def test_the_grid_sampler_visits_every_point_once(owner):
    space = [{"name": "learning_rate", "type": "float", "choices": [1e-3, 3e-3]},
             {"name": "batch_size", "type": "int", "choices": [8, 16, 32]}]
    sweep = make_sweep(owner, env_id="rlweb-test/Steps-v0", sampler="grid", space=space, trials=6, parallel=3,
                       pruner="none", total_steps=100, eval_interval=100, eval_episodes=1, fixed=dict(TINY_DQN))
    work(sweep, threads=3)
    points = sorted((trial.params["learning_rate"], trial.params["batch_size"]) for trial in sweep.trial_set.all())
    assert points == sorted((lr, batch) for lr in (1e-3, 3e-3) for batch in (8, 16, 32))


def test_values_the_algorithm_refuses_end_that_trial_not_the_sweep(owner):
    # batch_size above the replay buffer is refused by trainer.validate for the trial that draws it
    space = [{"name": "batch_size", "type": "int", "choices": [16, 5000]}]
    sweep = make_sweep(owner, env_id="rlweb-test/Steps-v0", sampler="grid", space=space, trials=2, parallel=2,
                       pruner="none", total_steps=100, eval_interval=100, eval_episodes=1, fixed=dict(TINY_DQN))
    work(sweep)
    trials = {trial.params["batch_size"]: trial for trial in sweep.trial_set.all()}
    assert trials[16].state == "complete"
    assert trials[5000].state == "failed" and trials[5000].experiment is None
    assert "refused values" in trials[5000].reason and "batch_size" in trials[5000].reason


def test_a_sweep_goes_on_after_everything_restarts(owner):
    """The study and the trials are in the database: an advance from a fresh process (the periodic chore after a
    restart) records a trial that ended while nothing watched, and starts the next."""
    sweep = make_sweep(owner, env_id="rlweb-test/Steps-v0", trials=2, parallel=1, pruner="none", total_steps=100,
                       eval_interval=100, eval_episodes=1, fixed=dict(TINY_DQN))
    first = sweep.trial_set.get()
    from rlweb.experiments import lifecycle

    with sweeps_not_told_of_run_ends():  # the run ends; its worker dies before it advances the sweep
        assert lifecycle.train(first.experiment.runs.get().pk) == "succeeded"
    first.refresh_from_db()
    assert first.state == "running"
    study.close_storages()  # a new process: no storage, no cached state
    advance_sweeps.apply()  # the periodic chore, as beat sends it
    first.refresh_from_db()
    assert first.state == "complete"
    assert sweep.trial_set.count() == 2


def test_a_trials_run_asks_the_pruner_through_the_sink_hook_and_its_end_advances_the_sweep(owner, monkeypatch):
    """The sweeps app watches a trial's run through the experiments sink's hook (apps.py): the first evaluation is
    reported to the Optuna trial (reopened in the worker with the public API) and the pruner stops the run, which
    ends `pruned` saying why; its end (the `run_ended` signal) advances the sweep at once, with no chore or page."""
    every_one = optuna.pruners.ThresholdPruner(lower=10**9)  # prunes at the first evaluation it may
    monkeypatch.setattr(study, "make_pruner", lambda config: every_one)
    sweep = make_sweep(owner, env_id="rlweb-test/Steps-v0", trials=2, parallel=1, total_steps=300, eval_interval=100,
                       eval_episodes=1, fixed=dict(TINY_DQN))
    first = sweep.trial_set.get()
    run = first.experiment.runs.get()
    assert train_run(run.pk) == Run.Status.PRUNED
    run.refresh_from_db()
    assert run.status == Run.Status.PRUNED and run.steps_done < 200
    finished = Event.objects.get(run=run, kind="finished")
    assert finished.values["status"] == "pruned" and finished.values["reason"].startswith("pruned at step 100: ")
    frozen = study.load_study(sweep).trials[0]
    assert frozen.state == optuna.trial.TrialState.PRUNED and list(frozen.intermediate_values) == [100]
    first.refresh_from_db()
    assert (first.state, first.pruned_at, first.reason) == ("pruned", run.steps_done, finished.values["reason"])
    assert sweep.trial_set.filter(number=1, state=Trial.State.RUNNING).exists()  # the next one, started at once


def test_the_median_pruner_waits_for_its_startup_trials_and_warm_up(owner):
    sweep = make_sweep(owner, trials=20)
    assert study.startup_trials(sweep) == 5
    pruner = study.load_study(sweep).pruner
    assert isinstance(pruner, optuna.pruners.MedianPruner)
    assert (pruner.startup_trials, pruner.warmup_steps) == (5, sweep.total_steps // 3)


def test_a_pruned_trials_log_says_which_rule_stopped_it():
    from rlweb.sweeps.study import why_pruned

    def finished_trials(*finals):
        recorded = optuna.create_study(direction="maximize")
        for final in finals:
            trial = recorded.ask()
            trial.report(-500, 100)
            trial.report(final, 200)
            recorded.tell(trial, final)
        return recorded

    sweep = Sweep(pruner=Sweep.Pruner.MEDIAN)
    assert why_pruned(sweep, finished_trials(-500, -480, -120), 200, -490.0) == (
        "pruned at step 200: value so far -490.00 below the median -480.00 of 3 finished trials at that step "
        "(median pruner)")
    assert why_pruned(sweep, finished_trials(-500, -500, -120), 200, -500.0) == (
        "pruned at step 200: value so far -500.00 no better than the worst of 3 finished trials, where half of "
        "them were (-500.00), while others did better at that step (median pruner)")
    assert why_pruned(sweep, finished_trials(-120), 200, -490.0) == (
        "pruned at step 200: value so far -490.00 below the median -120.00 of 1 finished trial at that step "
        "(median pruner)")


def test_processes_opening_the_storage_at_once_on_a_fresh_database_all_open_it(tmp_path):
    """The first sweep of a fresh install, created while the periodic chore advances sweeps in the worker: two
    processes opened Optuna's storage at once, both made its tables, and one failed (the page answered 500; before
    open_storage tried again, 28 of 40 such openings failed, four threads at a time)."""
    opened, failed = [], []

    def open_it(url: str, together: threading.Barrier) -> None:
        together.wait()
        try:
            opened.append(study.open_storage(url))
        except Exception as error:
            failed.append(repr(error))

    for attempt in range(2):
        url = f"sqlite:///{tmp_path / f'fresh-{attempt}.sqlite3'}"
        together = threading.Barrier(4)
        threads = [threading.Thread(target=open_it, args=(url, together)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not failed and len(opened) == 8, failed
    assert opened[0].get_all_studies() == []  # a working storage: its tables are there
    for storage in opened:
        storage.engine.dispose()
