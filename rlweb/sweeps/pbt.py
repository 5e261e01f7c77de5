"""Population-based training on the queue's workers: a sweep whose `method` is `pbt` (the rules are trainer/pbt.py's).

Each member of the population is a trial of the sweep, with an experiment of one run, all launched at once. The
population moves from ready point to ready point together:

    members train ──> at the first evaluation at or past the next ready step (every `ready_interval` env steps) a
      ^               member's run stops, as a cancel does (a final checkpoint), and waits (`Trial.ready_step`)
      │                     │
      │                     v  once no member trains (the last one has stopped, or ended): `advance`
      │               rank the waiting members by their recent evaluations (the sweep's objective so far); each of the
      │               bottom `quantile` copies the latest checkpoint of one of the top `quantile` into its own run
      │               (weights, optimizer state, normalisation statistics; its own seed kept) and gets the donor's
      │               values explored (x0.8 or x1.2, or drawn anew) as a live change of its run (a `PbtCopy` row)
      └────────────── every waiting member is resumed from its latest checkpoint (the copied one, for a copier)

So everything goes through what any run has: the stop of a watcher of its sink (as a pruned trial's), a checkpoint
in storage (any worker host reads it), `lifecycle.resume`, and a live change replayed by the resumed attempt, which
reports it in a `hyperparameters` event (old and new values). A member whose worker dies is lost and resumes by
itself like any run; the population waits for it. `advance` runs under the sweep's lock (study.advance), when a
member's run ends (the `run_ended` signal) and in the periodic chore; pages never do.

A member's replay buffer is not in its checkpoint: an off-policy member (DQN) refills it after every ready point.
"""

from __future__ import annotations

import json
import logging
import random
import tempfile
import uuid
import zipfile
from pathlib import Path

import trainer
from django.db import transaction
from django.utils import timezone
from trainer import pbt as rules
from trainer.events import Sink

from rlweb.experiments import lifecycle
from rlweb.experiments.files import save_with_file
from rlweb.experiments.live_changes import current_values, schedule_changes
from rlweb.experiments.models import Checkpoint, Event, Experiment, Run
from rlweb.sweeps import study
from rlweb.sweeps.models import PbtCopy, Sweep, Trial

logger = logging.getLogger(__name__)
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf"]  # plotly's own, one per member in every panel of the settings chart


def searched_names(sweep: Sweep) -> list[str]:
    return [dimension.name for dimension in study.dimensions(sweep) if not dimension.fixed]


# --- the start --------------------------------------------------------------------------------------------

def create(sweep: Sweep) -> None:
    """Launch the population: `sweep.trials` members, each with values drawn from the space (seeded by the
    sweep's seed) and a run seeded apart from the others'."""
    rng = random.Random(sweep.seed)
    dimensions = study.dimensions(sweep)
    for number in range(sweep.trials):
        values = rules.initial_values(dimensions, rng)
        try:
            hyperparameters = trainer.validate(sweep.algorithm, sweep.env_id, {**sweep.fixed, **values})
        except trainer.ConfigError as error:
            reason = "; ".join(f"{name}: {message}" for name, message in error.errors.items())
            Trial.objects.create(sweep=sweep, number=number, params=values, state=Trial.State.FAILED,
                                 reason=f"refused values: {reason}")
            continue
        with transaction.atomic():
            experiment = Experiment.objects.create(
                owner_id=sweep.owner_id, project_id=sweep.project_id, name=f"{sweep.name} · member {number}"[:200],
                algorithm=sweep.algorithm, env_id=sweep.env_id, hyperparameters=hyperparameters, preset=sweep.preset,
                total_steps=sweep.total_steps, eval_interval=sweep.eval_interval, eval_episodes=sweep.eval_episodes,
                num_seeds=1, device=sweep.device, tags=["sweep", "pbt"],
                description=f"Member {number} of the population-based training “{sweep.name}”.")
            Trial.objects.create(sweep=sweep, number=number, experiment=experiment, params=values)
            (run,) = lifecycle.launch(experiment)
            run.seed = sweep.seed + number
            Run.objects.filter(pk=run.pk).update(seed=run.seed)
    advance(sweep)


def advance(sweep: Sweep) -> None:
    study.advance(sweep.pk)  # takes the sweep's lock and comes back to advance_locked


# --- the workers' side: a member stops at its ready point ------------------------------------------------

class MemberReady(Sink):
    """Watches a member's run (the sink hook, `watch_member_run`): at its first evaluation at or past
    the next ready step (below the end), the run records the step on its trial and stops as a cancel does."""

    ends_as = "cancelled"

    def __init__(self, sink, trial: Trial):
        self.sink, self.trial = sink, trial
        interval = trial.sweep.ready_interval or trial.sweep.total_steps
        self.ready_at = (sink.run.start_step // interval + 1) * interval
        self.total_steps = trial.sweep.total_steps
        self.stopping_at: int | None = None
        self.reason = ""

    def emit(self, event: dict) -> None:
        step = int(event.get("step", 0))
        if event["kind"] != "eval" or self.stopping_at is not None or not self.ready_at <= step < self.total_steps:
            return
        Trial.objects.filter(pk=self.trial.pk).update(ready_step=step)
        self.stopping_at = step
        self.reason = f"paused at the ready step {step:,}: waits for the population (population-based training)"

    def should_stop(self) -> bool:
        return self.stopping_at is not None


def watch_member_run(sink) -> MemberReady | None:
    """The sink hook (registered in apps.py): a population's member stops at its ready points; others are not
    watched here."""
    trial = Trial.objects.select_related("sweep").filter(experiment_id=sink.run.experiment_id,
                                                         sweep__method=Sweep.Method.PBT).first()
    return MemberReady(sink, trial) if trial is not None else None


# --- the controller ---------------------------------------------------------------------------------------

def member_run(trial: Trial) -> Run | None:
    return trial.experiment.runs.first() if trial.experiment else None


def waiting(trial: Trial, run: Run | None) -> bool:
    """Stopped at a ready point by its watcher (not by a cancel: that sets `stop_requested`)."""
    return (run is not None and trial.ready_step is not None and run.status == Run.Status.CANCELLED
            and not run.stop_requested)


def advance_locked(sweep: Sweep) -> None:
    """Record ended members; once no member trains, make the copies of the ready point and resume the waiting
    members; once none waits either, the sweep has finished."""
    members = [(trial, member_run(trial)) for trial in
               sweep.trial_set.filter(state=Trial.State.RUNNING).select_related("experiment", "sweep")]
    for trial, run in members:
        Trial.objects.filter(pk=trial.pk).update(steps=run.steps_done if run else 0)
    if any(run is not None and run.is_active for _, run in members):
        return
    paused = [(trial, run) for trial, run in members if waiting(trial, run)]
    for trial, run in members:
        if (trial, run) not in paused or sweep.status != Sweep.Status.RUNNING:
            conclude(sweep, trial, run)
    if sweep.status != Sweep.Status.RUNNING:
        return
    if paused:
        ready_point(sweep, paused)
    elif not sweep.trial_set.filter(state=Trial.State.RUNNING).exists():
        Sweep.objects.filter(pk=sweep.pk, status=Sweep.Status.RUNNING).update(
            status=Sweep.Status.FINISHED, finished_at=timezone.now())


def conclude(sweep: Sweep, trial: Trial, run: Run | None) -> None:
    """A member that has ended: complete with its objective when its run succeeded, failed otherwise."""
    state, value, reason = study.outcome(sweep, [run] if run else [])
    if run is not None and waiting(trial, run):
        state, value, reason = Trial.State.FAILED, None, "the sweep was cancelled"
    Trial.objects.filter(pk=trial.pk).update(state=state, value=value, reason=reason or trial.reason,
                                             steps=run.steps_done if run else trial.steps)


def score(sweep: Sweep, run: Run) -> float:
    return rules.score([value for _, value in study.evaluations(run)], study.objective_of(sweep))


def ready_point(sweep: Sweep, paused: list[tuple[Trial, Run]]) -> None:
    step = max(trial.ready_step for trial, _ in paused)
    rng = random.Random(sweep.seed * 1_000_003 + step)
    scores = {trial.number: score(sweep, run) for trial, run in paused}
    members = {trial.number: (trial, run) for trial, run in paused}
    copies = rules.exploit(scores, sweep.quantile, rng)
    for number, (trial, run) in sorted(members.items()):
        with transaction.atomic():
            if number in copies:
                donor_trial, donor_run = members[copies[number]]
                copy_member(sweep, trial, run, donor_trial, donor_run, rng, scores)
            lifecycle.resume(run)
            Trial.objects.filter(pk=trial.pk).update(ready_step=None)


def copy_member(sweep: Sweep, trial: Trial, run: Run, donor_trial: Trial, donor_run: Run, rng: random.Random,
                scores: dict) -> None:
    """`trial`'s run takes `donor_run`'s latest checkpoint (with its own seed and clock) and goes on with the
    donor's values explored, as a change its resumed attempt applies at once; the copy is recorded."""
    source = donor_run.latest_checkpoint()
    if source is None:
        logger.warning("sweep %s: member %s has no checkpoint to copy", sweep.pk, donor_trial.number)
        return
    names = searched_names(sweep)
    donor_values = {name: value for name, value in current_values(donor_run).items() if name in names}
    old = {name: value for name, value in current_values(run).items() if name in names}
    new = rules.explore(donor_values, study.dimensions(sweep), rng, sweep.resample_probability)
    new = {name: new[name] for name in names}
    try:
        trainer.validate(sweep.algorithm, sweep.env_id, {**run.experiment.hyperparameters, **new})
    except trainer.ConfigError as error:  # a combination the algorithm refuses: the donor's values as they are
        logger.info("sweep %s: explored values %s refused (%s); copying %s as they are", sweep.pk, new, error,
                    donor_values)
        new = donor_values
    last = Event.objects.filter(run=run).order_by("-seq").values_list("time", flat=True).first() or 0.0
    copied = Checkpoint(run=run, tag=Checkpoint.Tag.PERIODIC, step=source.step)
    with tempfile.TemporaryDirectory(prefix="rlweb-pbt-") as folder:
        path = rewritten(source, Path(folder), seed=run.seed, seconds_trained=last)
        save_with_file(copied, path, f"step_{source.step}_from_run{donor_run.pk}.zip")
    # the copy is the run's latest: its own later ones go (the resume forgets what it did after the copied step)
    run.checkpoints.filter(step__gt=source.step).exclude(pk=copied.pk).update(replaced=True)
    entry = {"id": uuid.uuid4().hex, "values": new, "requested_at": timezone.now().isoformat(),
             "pbt": {"donor": donor_trial.number, "step": source.step}}
    locked = Run.objects.select_for_update().only("live_changes").get(pk=run.pk)
    Run.objects.filter(pk=run.pk).update(live_changes=[*locked.live_changes, entry])
    PbtCopy.objects.create(sweep=sweep, member=trial, donor=donor_trial, step=source.step,
                           member_score=finite(scores.get(trial.number)),
                           donor_score=finite(scores.get(donor_trial.number)), old=old, donor_values=donor_values,
                           new=new)
    logger.info("sweep %s: member %s copies member %s at step %s: %s -> %s", sweep.pk, trial.number,
                donor_trial.number, source.step, old, new)


def finite(value: float | None) -> float | None:
    return value if value is not None and abs(value) != float("inf") else None


def rewritten(source: Checkpoint, folder: Path, seed: int, seconds_trained: float) -> Path:
    """A copy of `source`'s file with the copier's own seed and clock in its config (its weights as they are):
    the copier plays its own episodes, not the donor's again. Read with the checkpoint's own bounds; no pickle."""
    from trainer.checkpoint import MAX_MODEL_BYTES, open_archive, read_config, read_member  # imports PyTorch

    original = folder / "source.zip"
    with source.file.storage.open(source.file.name, "rb") as stream, original.open("wb") as copy:
        while chunk := stream.read(2**20):
            copy.write(chunk)
    with open_archive(original) as archive:
        config = read_config(archive)
        model = read_member(archive, "model.safetensors", MAX_MODEL_BYTES)
    config.update(seed=int(seed), seconds_trained=float(seconds_trained))
    path = folder / "copied.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("config.json", json.dumps(config, indent=2))
        archive.writestr("model.safetensors", model, compress_type=zipfile.ZIP_STORED)
    return path


# --- what the pages show ----------------------------------------------------------------------------------

def copies_of(sweep: Sweep) -> list[dict]:
    return [{"member": copy.member.number, "donor": copy.donor.number, "step": copy.step,
             "member_score": copy.member_score, "donor_score": copy.donor_score, "old": copy.old, "new": copy.new}
            for copy in sweep.copies.select_related("member", "donor").order_by("step", "id")]


def schedules(sweep: Sweep) -> dict[int, list[tuple[int, dict]]]:
    """{member: [(step, its searched values from then on)]}: its first values, then each copy's."""
    names = searched_names(sweep)
    result = {trial.number: [(0, {name: trial.params.get(name) for name in names})]
              for trial in sweep.trial_set.all()}
    for copy in copies_of(sweep):
        result.setdefault(copy["member"], []).append((copy["step"], copy["new"]))
    return result


def whole_schedule(sweep: Sweep, number: int) -> list[tuple[int, dict]]:
    """Member `number`'s values from step 0, through the members it copied (trainer/pbt.py, `whole_schedule`)."""
    firsts = {member: values[0][1] for member, values in schedules(sweep).items()}
    return rules.whole_schedule(number, firsts, [(copy["member"], copy["donor"], copy["step"], copy["new"])
                                                 for copy in copies_of(sweep)])


def page_data(sweep: Sweep) -> dict:
    from rlweb.sweeps import figures

    data = figures.page_data(sweep)
    copies = copies_of(sweep)
    data.update(method="pbt", copies=copies, version=f"{data['version']}-{len(copies)}",
                waiting=sweep.trial_set.filter(ready_step__isnull=False, state=Trial.State.RUNNING).count())
    if data["best"]:
        data["best"]["schedule"] = whole_schedule(sweep, data["best"]["number"])
    return data


def figures_of(sweep: Sweep) -> dict:
    """{"curves", "lineage", "schedules"}: plotly figures, or a {"message"}."""
    from rlweb.sweeps import figures

    curves = figures.curves(sweep)
    for trace in curves.get("data", []):  # a member, not a trial
        trace["name"] = trace["name"].replace("trial ", "member ", 1)
    return {"curves": curves, "lineage": lineage_figure(sweep), "schedules": schedule_figure(sweep)}


def member_steps(sweep: Sweep) -> dict[int, int]:
    return {trial.number: max(trial.steps, run.steps_done if run else 0)
            for trial in sweep.trial_set.select_related("experiment") for run in [member_run(trial)]}


def lineage_figure(sweep: Sweep) -> dict:
    """One line per member along the env steps, an arrow from the donor to the copier at each copy."""
    steps = member_steps(sweep)
    if not steps:
        return {"message": "Drawn once the population has started."}
    traces = [{"type": "scatter", "mode": "lines", "x": [0, done], "y": [number, number], "name": f"member {number}",
               "line": {"color": "#bbb", "width": 6}, "showlegend": False, "hoverinfo": "name"}
              for number, done in sorted(steps.items())]
    annotations = []
    for copy in copies_of(sweep):
        annotations.append({"x": copy["step"], "y": copy["member"], "ax": copy["step"], "ay": copy["donor"],
                            "xref": "x", "yref": "y", "axref": "x", "ayref": "y", "showarrow": True, "arrowhead": 3,
                            "arrowwidth": 1.5, "arrowcolor": "#2c57b0"})
        traces.append({"type": "scatter", "mode": "markers", "x": [copy["step"]], "y": [copy["member"]],
                       "marker": {"color": "#2c57b0", "size": 8}, "showlegend": False,
                       "name": f"member {copy['member']} copies {copy['donor']}",
                       "hovertext": [f"step {copy['step']:,}: member {copy['member']} copies member {copy['donor']}"],
                       "hoverinfo": "text"})
    return {"data": traces, "layout": {
        "template": "plotly_white", "height": 300, "annotations": annotations,
        "xaxis": {"title": {"text": "env steps"}},
        "yaxis": {"title": {"text": "member"}, "tickmode": "array", "tickvals": sorted(steps),
                  "range": [-0.5, max(steps) + 0.5]},
        "margin": {"l": 60, "r": 20, "t": 20, "b": 50}}}


def schedule_figure(sweep: Sweep) -> dict:
    """Each searched setting's value over the env steps, one line per member (a step at each of its copies), one
    panel per setting."""
    names = searched_names(sweep)
    steps = member_steps(sweep)
    if not names or not steps:
        return {"message": "Drawn once the population has started."}
    logs = {item["name"] for item in sweep.space if item.get("log")}
    traces, layout = [], {"template": "plotly_white", "height": 220 * len(names) + 60,
                          "margin": {"l": 70, "r": 20, "t": 20, "b": 50}, "showlegend": True}
    gap = 0.08
    height = (1 - gap * (len(names) - 1)) / len(names)
    for index, name in enumerate(names):
        axis = "" if index == 0 else str(index + 1)
        bottom = 1 - (index + 1) * height - index * gap
        layout[f"yaxis{axis}"] = {"title": {"text": name}, "domain": [max(0, bottom), bottom + height],
                                  "type": "log" if name in logs else "linear"}
        layout[f"xaxis{axis}"] = {"anchor": f"y{axis}", "matches": "x" if index else None,
                                  "title": {"text": "env steps"} if index == len(names) - 1 else {}}
        for number, schedule in sorted(schedules(sweep).items()):
            x = [step for step, _ in schedule] + [max(steps.get(number, 0), schedule[-1][0])]
            y = [values.get(name) for _, values in schedule] + [schedule[-1][1].get(name)]
            traces.append({"type": "scatter", "mode": "lines+markers", "x": x, "y": y, "xaxis": f"x{axis}",
                           "yaxis": f"y{axis}", "line": {"shape": "hv", "color": COLOURS[number % len(COLOURS)]},
                           "marker": {"color": COLOURS[number % len(COLOURS)]}, "name": f"member {number}",
                           "legendgroup": f"member {number}", "showlegend": index == 0})
    layout["xaxis"].pop("matches")
    return {"data": traces, "layout": layout}


# --- the best member again --------------------------------------------------------------------------------

def launch_best(sweep: Sweep, seeds: int) -> Experiment | None:
    """The best member's whole schedule (`whole_schedule`) as a new experiment with `seeds` seeds: its first values
    as the experiment's, the later ones as live changes planned at their steps. None: no member has completed."""
    best = study.best_trial(sweep)
    if best is None:
        return None
    schedule = whole_schedule(sweep, best.number)
    hyperparameters = trainer.validate(sweep.algorithm, sweep.env_id, {**sweep.fixed, **schedule[0][1]})
    steps = ", ".join(f"{step:,}" for step, _ in schedule[1:]) or "none"
    with transaction.atomic():
        experiment = Experiment.objects.create(
            owner_id=sweep.owner_id, project_id=sweep.project_id,
            name=f"{sweep.name}: best (member {best.number})"[:200], algorithm=sweep.algorithm,
            env_id=sweep.env_id, hyperparameters=hyperparameters, preset=sweep.preset, total_steps=sweep.total_steps,
            eval_interval=sweep.eval_interval, eval_episodes=sweep.eval_episodes, num_seeds=seeds,
            device=sweep.device, tags=["pbt-schedule"],
            description=f"The schedule of the best member ({best.number}, value {best.value:.4g}) of the "
                        f"population-based training “{sweep.name}”, from step 0; its values change at steps {steps}.")
        for run in lifecycle.launch(experiment):
            schedule_changes(run, schedule[1:])
    return experiment
