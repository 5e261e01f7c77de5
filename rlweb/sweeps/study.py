"""A sweep's Optuna study, in our own database, and how its trials become runs.

    create ──> advance: ask Optuna for trials (up to `parallel` at once), each an experiment with one run per seed
                 ^         │
                 │         v  the runs train on the workers; the first seed's sink is watched by a PruningSink
                 │            (trainer/sweep.py) that reports every evaluation to the trial and asks the pruner:
                 │            a pruned trial's runs stop with status `pruned`
                 └─ advance: a trial whose runs have all ended is told to Optuna (complete, pruned or failed)

`advance` is idempotent and takes a Redis lock per sweep: the worker calls it when a trial's run ends (the
experiments app's `run_ended` signal, connected in apps.py), and the periodic chore `advance_sweeps` (tasks.py,
celery beat) every 10 s; pages never do. Everything it needs is in the database (the study, the trials, the
runs), so a sweep goes on after a restart of everything: queued runs are sent again and lost ones resumed by
lifecycle.py, and the next `advance` tells and asks what is due.
The study is in Optuna's own tables of the same database (SQLite or PostgreSQL): no other service. Only
Optuna's public API is used: a trial is reopened in a worker through the storage's own methods (`trial_for`).
"""

from __future__ import annotations

import functools
import logging
import math
import statistics
import time

import redis
import trainer
from django.conf import settings
from django.db import connection, transaction
from django.template.defaultfilters import pluralize
from django.utils import timezone
from trainer.sweep import (Dimension, PruningSink, SweepConfig, at_the_floor, default_startup_trials, finished_trials,
                           finished_values_at, make_pruner, make_sampler, objective_value, steps_to_threshold)

from rlweb.experiments import lifecycle, redis_keys
from rlweb.experiments.models import Event, Experiment, Run
from rlweb.sweeps.models import Sweep, Trial

logger = logging.getLogger(__name__)

TYPES = {"int": int, "float": float, "str": str, "bool": bool}
LOCK_SECONDS = 120  # an advance holding the lock longer than this (a crashed one) lets the next one in
PRUNED_FLAG_SECONDS = 8 * 24 * 3600
STORAGE_URLS: set[str] = set()  # the databases storage_at has opened
STORAGE_OPEN_TRIES = 8  # open_storage: about 3 s of waits in all
METHODS: dict[str, dict] = {}  # sweeps of another method than Optuna's: {method: {"create", "advance_locked"}}


def register_method(method: str, create, advance_locked) -> None:
    """Another search method's start and advance (pbt.py registers population-based training, in apps.py's
    ready()); `advance` calls it under the sweep's lock, so it is told of ended runs and chores as trials are."""
    METHODS[method] = {"create": create, "advance_locked": advance_locked}


# --- the study ----------------------------------------------------------------------------------------------

def storage_url() -> str:
    """Our own database, as SQLAlchemy names it."""
    database = connection.settings_dict
    if database["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{database['NAME']}"
    if database["ENGINE"] == "django.db.backends.postgresql":
        from sqlalchemy.engine import URL

        return URL.create("postgresql+psycopg", username=database.get("USER") or None,
                          password=database.get("PASSWORD") or None, host=database.get("HOST") or None,
                          port=int(database["PORT"]) if database.get("PORT") else None,
                          database=database["NAME"]).render_as_string(hide_password=False)
    raise RuntimeError(f"sweeps need SQLite or PostgreSQL, not {database['ENGINE']}")


@functools.cache
def storage_at(url: str):
    """One Optuna storage (one connection pool) per database and process. SQLite waits for Django's writes as
    Django waits for its (a busy timeout) instead of failing at once."""
    STORAGE_URLS.add(url)
    return open_storage(url)


def open_storage(url: str):
    """An Optuna storage on `url`. The first one opened on a database makes Optuna's tables; two processes doing that
    at once collide, one failing on a table or version row that the other just made (the first sweep of a fresh
    install, created while the periodic chore advances sweeps in the worker: the page failed). The one that failed
    opens it again and finds them made."""
    import optuna
    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

    options = {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    for attempt in range(1, STORAGE_OPEN_TRIES + 1):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=options)
        except (IntegrityError, OperationalError, ProgrammingError) as error:
            if attempt == STORAGE_OPEN_TRIES:
                raise
            logger.info("opening the sweeps' Optuna storage failed (%s): trying again", str(error).splitlines()[0])
            time.sleep(0.1 * attempt)


def close_storages() -> None:
    """Close the storages' connections (a test database cannot be dropped while they are open)."""
    for url in list(STORAGE_URLS):
        storage_at(url).engine.dispose()
    storage_at.cache_clear()
    STORAGE_URLS.clear()


def dimensions(sweep: Sweep) -> list[Dimension]:
    return [Dimension(item["name"], TYPES[item["type"]], low=item.get("low"), high=item.get("high"),
                      log=bool(item.get("log")), choices=tuple(item.get("choices") or ())) for item in sweep.space]


def startup_trials(sweep: Sweep) -> int:
    """Trials the median pruner lets finish before it prunes any: RL Zoo's 5, fewer in a small sweep."""
    return default_startup_trials(sweep.trials)


def objective_of(sweep: Sweep) -> str:
    """The objective as trainer/sweep.py names it: final, best, last-N, or threshold (the web's own)."""
    return f"last-{sweep.last_evaluations}" if sweep.objective == "last" else sweep.objective


def config_of(sweep: Sweep) -> SweepConfig:
    """The command line's description of the sweep, for its sampler and pruner (trainer/sweep.py)."""
    objective = objective_of(sweep)
    return SweepConfig(algorithm=sweep.algorithm, env_id=sweep.env_id, dimensions=dimensions(sweep),
                       total_steps=sweep.total_steps, eval_interval=sweep.eval_interval,
                       eval_episodes=sweep.eval_episodes, objective=objective, trials=sweep.trials,
                       jobs=sweep.parallel, seeds=sweep.seeds_per_trial, seed=sweep.seed, sampler=sweep.sampler,
                       pruner=sweep.pruner, startup_trials=startup_trials(sweep),
                       warmup_steps=sweep.pruner_warmup_steps, study_name=sweep.study_name)


def load_study(sweep: Sweep, draw: int | None = None):
    """The sweep's study with its pruner, and its sampler when a trial is to be asked for (`draw`). `draw` numbers
    the sampler's seed: each trial asked for gets a sampler of its own (one trial is asked for at a time), seeded
    by the trials before it, so the same sweep samples the same values and two trials never draw the same random
    start. Without `draw`, for telling and reading, a neutral sampler: the grid sampler's own would stop the
    study, which only `study.optimize` may do, when its last point is told."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    config = config_of(sweep)
    sampler = make_sampler(config, draw) if draw is not None else optuna.samplers.RandomSampler(seed=sweep.seed)
    storage = storage_at(storage_url())
    try:
        return optuna.load_study(study_name=sweep.study_name, storage=storage, sampler=sampler,
                                 pruner=make_pruner(config))
    except KeyError:  # its creation did not get this far (the database went away just after the sweep's row)
        return optuna.create_study(study_name=sweep.study_name, storage=storage, direction=sweep.direction,
                                   sampler=sampler, pruner=make_pruner(config), load_if_exists=True)


def grid_size(space: list[dict]) -> int:
    return math.prod(len(item["choices"]) for item in space if len(item.get("choices") or ()) > 1)


# --- trials -------------------------------------------------------------------------------------------------

def advance(sweep_id: int) -> None:
    """Tell Optuna about the trials that have ended, and start new ones while the sweep has room; then mark it
    finished when every trial has ended. Safe to call from any process at any time: it waits while another
    process advances the sweep."""
    try:
        lock = redis_keys.redis_client().lock(f"rlweb:sweep:{sweep_id}:advance", timeout=LOCK_SECONDS,
                                              blocking_timeout=30)
        if not lock.acquire():
            return
    except redis.RedisError as error:
        logger.warning("sweep %s: cannot take its lock (%s); it goes on at the next advance", sweep_id, error)
        return
    try:
        sweep = Sweep.objects.filter(pk=sweep_id).first()
        if sweep is not None:
            advance_locked(sweep)
    finally:
        try:
            lock.release()
        except redis.RedisError:  # expired, or Redis went away: the timeout frees it
            pass


def advance_locked(sweep: Sweep) -> None:
    import optuna

    if sweep.method in METHODS:  # another method's sweep (pbt.py's population), not an Optuna study
        return METHODS[sweep.method]["advance_locked"](sweep)
    study = load_study(sweep)
    known = {trial.number: trial for trial in study.get_trials(deepcopy=False)}
    for trial in sweep.trial_set.filter(state=Trial.State.RUNNING).select_related("experiment"):
        conclude(sweep, study, trial, known.get(trial.number))
    recorded = set(sweep.trial_set.values_list("number", flat=True))
    for number, frozen in known.items():  # asked for by an advance that died before it recorded the trial
        if frozen.state == optuna.trial.TrialState.RUNNING and number not in recorded:
            study.tell(number, state=optuna.trial.TrialState.FAIL)
    if sweep.status != Sweep.Status.RUNNING:
        return
    started, asked = len(recorded), len(known)
    active = sweep.trial_set.filter(state=Trial.State.RUNNING).count()
    while active < sweep.parallel and started < sweep.trials and room_for_runs(sweep):
        if start_trial(sweep, draw=asked):
            active += 1
        started += 1
        asked += 1
    if started >= sweep.trials and not sweep.trial_set.filter(state=Trial.State.RUNNING).exists():
        Sweep.objects.filter(pk=sweep.pk, status=Sweep.Status.RUNNING).update(
            status=Sweep.Status.FINISHED, finished_at=timezone.now())


def room_for_runs(sweep: Sweep) -> bool:
    """The site's limit of queued and running runs per user holds for sweeps too: the next trial waits."""
    return Run.active_count(sweep.owner_id) + sweep.seeds_per_trial <= settings.MAX_ACTIVE_RUNS_PER_USER


def start_trial(sweep: Sweep, draw: int) -> bool:
    """Ask Optuna for a trial and launch it as an experiment; False when its values are refused (the trial is then
    recorded failed, with the reason)."""
    import optuna

    study = load_study(sweep, draw)
    asked = study.ask()
    params = {dimension.name: dimension.suggest(asked) for dimension in dimensions(sweep)}
    try:
        hyperparameters = trainer.validate(sweep.algorithm, sweep.env_id, {**sweep.fixed, **params})
    except trainer.ConfigError as error:
        reason = "; ".join(f"{name}: {message}" for name, message in error.errors.items())
        study.tell(asked, state=optuna.trial.TrialState.FAIL)
        Trial.objects.create(sweep=sweep, number=asked.number, params=params, state=Trial.State.FAILED,
                             reason=f"refused values: {reason}")
        return False
    with transaction.atomic():
        experiment = Experiment.objects.create(
            owner_id=sweep.owner_id, project_id=sweep.project_id, name=f"{sweep.name} · trial {asked.number}"[:200],
            algorithm=sweep.algorithm, env_id=sweep.env_id, hyperparameters=hyperparameters, preset=sweep.preset,
            total_steps=sweep.total_steps, eval_interval=sweep.eval_interval, eval_episodes=sweep.eval_episodes,
            num_seeds=sweep.seeds_per_trial, device=sweep.device, tags=["sweep"],
            description=f"Trial {asked.number} of the sweep “{sweep.name}”.")
        Trial.objects.create(sweep=sweep, number=asked.number, experiment=experiment, params=params)
        lifecycle.launch(experiment)
    return True


def conclude(sweep: Sweep, study, trial: Trial, frozen) -> None:
    """Record a trial whose runs have all ended, in Optuna and on its row; only its steps while some still train."""
    import optuna

    experiment = trial.experiment
    runs = list(experiment.runs.all()) if experiment else []
    trial.steps = sum(run.steps_done for run in runs)
    if any(run.is_active for run in runs):
        Trial.objects.filter(pk=trial.pk).update(steps=trial.steps)
        return
    state, value, reason = outcome(sweep, runs)
    if frozen is not None and frozen.state == optuna.trial.TrialState.RUNNING:
        if state == Trial.State.COMPLETE:
            study.tell(trial.number, value)
        else:
            study.tell(trial.number, state=optuna.trial.TrialState.PRUNED if state == Trial.State.PRUNED
                       else optuna.trial.TrialState.FAIL)
    pruned_at = max((run.steps_done for run in runs if run.status == Run.Status.PRUNED), default=None)
    Trial.objects.filter(pk=trial.pk).update(state=state, value=value, steps=trial.steps, pruned_at=pruned_at,
                                             reason=reason or trial.reason)


def outcome(sweep: Sweep, runs: list[Run]) -> tuple[str, float | None, str]:
    """(state, value, reason) of a trial whose runs have all ended: the mean of its seeds' objectives when
    they all succeeded; pruned when the pruner stopped it; failed otherwise (a crash, a NaN, a cancel)."""
    if not runs:
        return Trial.State.FAILED, None, "its experiment was deleted"
    if any(run.status == Run.Status.PRUNED for run in runs):
        seed = min(runs, key=lambda run: run.seed)
        return Trial.State.PRUNED, None, pruned_reason(seed)
    unsuccessful = [run for run in runs if run.status != Run.Status.SUCCEEDED]
    if unsuccessful:
        run = unsuccessful[0]
        return Trial.State.FAILED, None, f"run {run.pk} (seed {run.seed}) {run.status}: {run.error or 'no error'}"[:2000]
    values = [run_objective(sweep, run) for run in runs]
    if any(value is None or not math.isfinite(value) for value in values):
        return Trial.State.FAILED, None, f"an evaluation gave no finite return ({values})"
    return Trial.State.COMPLETE, statistics.fmean(values), ""


def evaluations(run: Run) -> list[tuple[int, float]]:
    """(step, mean return) of the run's evaluations, in order."""
    rows = Event.objects.filter(run=run, kind="eval").order_by("seq").values_list("step", "values")
    return [(step, float(values["eval/return_mean"])) for step, values in rows
            if isinstance(values.get("eval/return_mean"), (int, float))]


def run_objective(sweep: Sweep, run: Run) -> float | None:
    points = evaluations(run)
    if sweep.objective == "threshold":
        return steps_to_threshold(points, sweep.threshold, sweep.total_steps)
    if not points:
        return None
    return objective_value([value for _, value in points], objective_of(sweep))


def pruned_reason(run: Run) -> str:
    finished = Event.objects.filter(run=run, kind="finished").order_by("-seq").values_list("values", flat=True).first()
    return (finished or {}).get("reason", "") or "pruned"


# --- the workers' side --------------------------------------------------------------------------------------

def pruned_key(experiment_id: int) -> str:
    return f"rlweb:trial:{experiment_id}:pruned"


def trial_for(study, number: int):
    """The trial numbered `number` of `study`, to report to and ask its pruner from a process other than the one
    that asked for it (a worker), through the storage's public methods: Optuna has no lookup by number."""
    import optuna

    storage = storage_at(storage_url())
    trial_id = storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study.study_name),
                                                               number)
    return optuna.trial.Trial(study, trial_id)


class TrialPruning(PruningSink):
    """Watches the sink of a trial's run (rlweb/experiments/sink.py's hook, `watch_trial_run`). The first seed
    reports each evaluation's value so far to the Optuna trial and asks the pruner; once pruned, the run stops
    as a cancel does (a final checkpoint) and ends `pruned`, its "finished" event saying why, and a Redis flag
    stops the trial's other seeds within half a second. A pruner that cannot be asked (the database is busy)
    never fails the run: it goes on unpruned."""

    def __init__(self, sink, trial: Trial):
        run, sweep = sink.run, trial.sweep
        first_seed = run.seed == min(trial.experiment.runs.values_list("seed", flat=True))
        super().__init__(None, prune=first_seed and sweep.pruner != Sweep.Pruner.NONE, total_steps=sweep.total_steps,
                         objective=objective_of(sweep), evaluations=[value for _, value in evaluations(run)])
        self.sink, self.sweep, self.record = sink, sweep, trial
        self.study = None

    def ask_pruner(self, step: int) -> None:
        try:
            super().ask_pruner(step)
        except Exception as error:  # the pruner is advice: training goes on without it
            logger.warning("run %s: cannot ask the pruner (%s); going on", self.sink.run.pk, error)

    def trial_for(self, step: int):
        self.study = load_study(self.sweep)
        return trial_for(self.study, self.record.number)

    def why(self, step: int, value: float) -> str:
        return why_pruned(self.sweep, self.study, step, value)

    def prune_at(self, step: int, reason: str) -> None:
        super().prune_at(step, reason)
        logger.info("run %s: %s", self.sink.run.pk, reason)
        self.sink.redis_call(self.sink.client.set, pruned_key(self.record.experiment_id), "1", ex=PRUNED_FLAG_SECONDS)

    def should_stop(self) -> bool:
        if self.pruned_at is None and self.sink.redis_call(self.sink.client.exists,
                                                           pruned_key(self.record.experiment_id)):
            super().prune_at(self.sink.steps_done, "pruned with the trial's first seed")
        return self.pruned_at is not None


def why_pruned(sweep: Sweep, study, step: int, value: float) -> str:
    """The pruner's decision in words, for the run's log."""
    if sweep.pruner == Sweep.Pruner.MEDIAN:
        others = finished_values_at(finished_trials(study), step)
        if at_the_floor(value, others):
            median = (f" no better than the worst of {len(others)} finished trials, where half of them were "
                      f"({min(others):.2f}), while others did better")
        else:
            median = (f" below the median {statistics.median(others):.2f} of {len(others)} finished "
                      f"trial{pluralize(len(others))}" if others else "")
        return f"pruned at step {step:,}: value so far {value:.2f}{median} at that step (median pruner)"
    return f"pruned at step {step:,}: value so far {value:.2f}, not among the best of its rung (Hyperband)"


def watch_trial_run(sink) -> TrialPruning | None:
    """The sink hook (registered in apps.py): a trial's runs report to their sweep's pruner; others are not watched."""
    trial = Trial.objects.select_related("sweep", "experiment").filter(experiment_id=sink.run.experiment_id).first()
    if trial is not None and trial.sweep.method in METHODS:  # watched by its method's own hook (pbt.py)
        return None
    return TrialPruning(sink, trial) if trial is not None else None


def advance_after_run(sender, run_id: int, **kwargs) -> None:
    """Receives `run_ended` (connected in apps.py): a trial's run has ended, so its sweep advances now rather
    than at the next periodic chore."""
    sweep_id = Trial.objects.filter(experiment__runs=run_id).values_list("sweep_id", flat=True).first()
    if sweep_id is not None:
        advance(sweep_id)


def advance_all() -> None:
    """The periodic chore (tasks.advance_sweeps): every running sweep, and those with trials still to record."""
    ids = set(Sweep.objects.filter(status=Sweep.Status.RUNNING).values_list("pk", flat=True))
    ids |= set(Trial.objects.filter(state=Trial.State.RUNNING).values_list("sweep_id", flat=True))
    for sweep_id in sorted(ids):
        try:
            advance(sweep_id)
        except Exception:  # one broken sweep must not stop the others
            logger.exception("sweep %s: cannot advance", sweep_id)


# --- what the owner does ------------------------------------------------------------------------------------

def create(sweep: Sweep) -> None:
    """Make the study, then start the first trials."""
    if sweep.method in METHODS:
        return METHODS[sweep.method]["create"](sweep)
    load_study(sweep)
    advance(sweep.pk)


def cancel(sweep: Sweep) -> int:
    """Stop the sweep: no new trials, and every queued or running run of its trials cancelled (each ends with
    a checkpoint, and its trial is recorded failed). Returns how many runs were cancelled."""
    Sweep.objects.filter(pk=sweep.pk, status=Sweep.Status.RUNNING).update(
        status=Sweep.Status.CANCELLED, finished_at=timezone.now())
    runs = Run.objects.filter(experiment__sweep_trial__sweep=sweep, status__in=Run.ACTIVE).select_related("experiment")
    cancelled = sum(lifecycle.cancel(run) != "ended" for run in runs)
    advance(sweep.pk)
    return cancelled


def extend(sweep: Sweep, more: int) -> None:
    """Add `more` trials and go on (a finished or cancelled sweep runs again)."""
    Sweep.objects.filter(pk=sweep.pk).update(trials=sweep.trials + more, status=Sweep.Status.RUNNING,
                                             finished_at=None)
    advance(sweep.pk)


def delete(sweep: Sweep) -> int:
    """Delete an ended sweep with its trials' experiments (their runs, events, checkpoints and videos) and its
    Optuna study. Refused while it runs or a trial's run is queued or running: returns how many such runs there
    are (0 once deleted)."""
    import optuna

    if sweep.is_active:
        return max(1, Run.objects.filter(experiment__sweep_trial__sweep=sweep, status__in=Run.ACTIVE).count())
    for trial in sweep.trial_set.select_related("experiment"):
        if trial.experiment is not None:
            active = lifecycle.delete_experiment(trial.experiment)
            if active:
                return active
    try:
        optuna.delete_study(study_name=sweep.study_name, storage=storage_at(storage_url()))
    except KeyError:  # never made
        pass
    sweep.delete()
    return 0


def best_trial(sweep: Sweep) -> Trial | None:
    done = sweep.trial_set.filter(state=Trial.State.COMPLETE, value__isnull=False)
    return done.order_by("value" if sweep.direction == "minimize" else "-value", "number").first()


def launch_best(sweep: Sweep, seeds: int) -> Experiment | None:
    """The best trial's values as a new experiment of its own with `seeds` seeds (None: no trial completed)."""
    best = best_trial(sweep)
    if best is None:
        return None
    source = best.experiment
    hyperparameters = source.hyperparameters if source else trainer.validate(
        sweep.algorithm, sweep.env_id, {**sweep.fixed, **best.params})
    with transaction.atomic():
        experiment = Experiment.objects.create(
            owner_id=sweep.owner_id, project_id=sweep.project_id,
            name=f"{sweep.name}: best (trial {best.number})"[:200], algorithm=sweep.algorithm, env_id=sweep.env_id, hyperparameters=hyperparameters, preset=sweep.preset,
            total_steps=sweep.total_steps, eval_interval=sweep.eval_interval, eval_episodes=sweep.eval_episodes,
            num_seeds=seeds, device=sweep.device,
            description=f"The best trial ({best.number}, value {best.value:.4g}) of the sweep “{sweep.name}”.")
        lifecycle.launch(experiment)
    return experiment
