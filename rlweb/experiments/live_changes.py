"""Hyperparameters changed while a run trains, from its page.

The run page's form offers the hyperparameters the algorithm declares live (trainer's schema, `Param.live`: learning
rates, entropy coefficient, clip range, epsilon's end, exploration noise, ...), filled in with the run's current
values. A change is checked as the experiment form checks a new config (`trainer.params.check_live_changes`:
bounds, cross-field checks, the per-step work budget; then `trainer.validate` on the whole config after it: the
memory estimate, issue 27), recorded on the run (`Run.live_changes`) and pushed to the worker through a Redis list
next to the stop flag (`push_change`, `redis_keys.changes_key`). The worker's sink (sink.py) reads it with the stop
flag (every half second); the runner checks it again, applies it and reports a `hyperparameters` event, which the
sink writes into the change's entry (`record_change`: step, seq, old and new values, or the error) and which the
page draws as a log line and a mark on every chart.

Schedule: a run may also start with changes planned at given steps (`schedule_changes`: PBT's best member launched
again, rlweb/sweeps/pbt.py). Each is an entry with `scheduled` and its `step`, written before the run is queued; the
runner applies it when the run reaches that step (the same replay as a resume's), and its report fills the entry in.

Resume: a checkpoint saves the config as it is, changes included. A resumed attempt replays the changes whose event
came after its checkpoint (forgotten with the rest of the interrupted attempt) at the step they were applied at,
and applies at once any change its worker never took (`changes_to_replay`).
"""

from __future__ import annotations

import json
import math
import uuid

import redis
import trainer
from django import forms
from django.db import transaction
from django.utils import timezone
from trainer.params import NOT_LIVE, ConfigError, check_live_changes, no_effect, run_config, unused_settings

from rlweb.experiments.forms import HYPERPARAMETER_PREFIX, hyperparameter_field
from rlweb.experiments.models import Run
from rlweb.experiments.redis_keys import STOP_FLAG_SECONDS, changes_key, redis_client


def current_values(run: Run) -> dict:
    """The run's hyperparameters now: its experiment's, with every change asked for and not refused on top."""
    values = dict(run.experiment.hyperparameters)
    for entry in run.live_changes:
        if "error" not in entry and not (entry.get("scheduled") and "seq" not in entry):  # not a change to come
            values.update(entry["values"])
    return values


def schedule_changes(run: Run, schedule: list[tuple[int, dict]]) -> None:
    """Plan changes of a run not yet queued: [(step, values)], each applied when the run reaches its step."""
    now = timezone.now().isoformat()
    run.live_changes = [*run.live_changes, *({"id": uuid.uuid4().hex, "values": values, "step": int(step),
                                              "scheduled": True, "requested_at": now} for step, values in schedule)]
    Run.objects.filter(pk=run.pk).update(live_changes=run.live_changes)


def applied_changes(run: Run) -> dict[str, list[tuple[int, object, object]]]:
    """{name: [(step, old, new), ...]} of the changes the run's worker applied, in order."""
    applied: dict[str, list] = {}
    for entry in run.live_changes:
        for name, change in (entry.get("changes") or {}).items():
            applied.setdefault(name, []).append((entry["step"], change["old"], change["new"]))
    return applied


def changed_text(value, changes: list[tuple[int, object, object]]) -> str:
    """How the compare page shows a changed setting: "0.001 → 0.0005 changed at step 3,000" (each change in turn)."""
    return str(value) + "".join(f" → {new} changed at step {step:,}" for step, _, new in changes)


class LiveChangeForm(forms.Form):
    """The live hyperparameters of a run's algorithm, filled in with its current values. Only the fields whose
    value differs from the current one count as the change (`cleaned_data["changes"]`)."""

    def __init__(self, run: Run, data=None):
        super().__init__(data)
        spec = trainer.get_spec(run.experiment.algorithm)
        self.config_class = spec.config_class
        self.algorithm, self.env_id = run.experiment.algorithm, run.experiment.env_id
        self.current = current_values(run)
        self.ignored = self.ignored_settings()
        self.params = [param for param in spec.params() if param.live and param.name not in self.ignored]
        for param in self.params:
            field = self.fields[HYPERPARAMETER_PREFIX + param.name] = hyperparameter_field(param)
            field.initial = self.current.get(param.name, param.default)

    def clean(self):
        cleaned = super().clean()
        others = sorted(key.removeprefix(HYPERPARAMETER_PREFIX) for key in self.data
                        if key.startswith(HYPERPARAMETER_PREFIX) and key not in self.fields)
        for name in others:
            why = no_effect(self.ignored[name]) if name in self.ignored else NOT_LIVE
            self.add_error(None, f"{name[:60]}: {why}")
        asked = {param.name: cleaned[HYPERPARAMETER_PREFIX + param.name] for param in self.params
                 if self.differs(param, cleaned.get(HYPERPARAMETER_PREFIX + param.name))}
        if not asked and not others:
            raise forms.ValidationError("Nothing to change: every value is the run's current one.")
        if not asked:  # only settings refused above
            return cleaned
        try:
            cleaned["changes"] = check_live_changes(self.config_class, self.current, asked)
            self.check_as_the_form_does(cleaned["changes"])
        except ConfigError as error:
            for name, message in error.errors.items():
                field = HYPERPARAMETER_PREFIX + name
                self.add_error(field if field in self.fields else None,
                               message if field in self.fields else f"{name}: {message}")
        return cleaned

    def check_as_the_form_does(self, changes: dict) -> None:
        """The new-experiment form's checks of the whole config on its environment (`trainer.validate`: the memory
        estimate against RLWEB_MAX_RUN_MEMORY_MB, the environment's own checks), applied to the config after the
        change. ConfigError with what the change brings: a run that already needs more than a limit lowered since
        it started may still change its learning rate, but no change may take it past one."""
        try:
            trainer.validate(self.algorithm, self.env_id, {**self.current, **changes})
        except ConfigError as error:
            before = self.form_errors(self.current)
            brought = {name: message for name, message in error.errors.items() if before.get(name) != message}
            if brought:
                raise ConfigError(brought) from None

    def form_errors(self, values: dict) -> dict[str, str]:
        try:
            trainer.validate(self.algorithm, self.env_id, values)
        except ConfigError as error:
            return error.errors
        return {}

    def ignored_settings(self) -> dict[str, str]:
        """The settings the run's config ignores (a noisy DQN's epsilon): not offered, and refused if posted."""
        try:
            return unused_settings(run_config(self.config_class, self.current))
        except ConfigError:
            return {}

    def differs(self, param, raw) -> bool:
        """Whether a posted value is a change (an empty field keeps the current value; one that does not parse is a
        change, refused with its message)."""
        if raw in (None, ""):
            return False
        try:
            return param.parse(raw) != self.current.get(param.name, param.default)
        except ValueError:
            return True


def request_change(run: Run, values: dict) -> dict:
    """Record a checked change on the run and hand it to its worker; returns the entry. The run's row stays locked
    until the change is in Redis, so the worker's report of it finds the entry (redis.RedisError: nothing kept)."""
    entry = {"id": uuid.uuid4().hex, "values": values, "requested_at": timezone.now().isoformat()}
    with transaction.atomic():
        locked = Run.objects.select_for_update().only("live_changes").get(pk=run.pk)
        locked.live_changes.append(entry)
        locked.save(update_fields=["live_changes"])
        push_change(run.pk, {"id": entry["id"], "values": values})
    run.live_changes = locked.live_changes
    return entry


def push_change(run_id: int, change: dict, client: redis.Redis | None = None) -> None:
    """Hand a checked change ({"id", "values"}) to the run's worker; its sink takes it within half a second."""
    pipeline = (client or redis_client()).pipeline()
    pipeline.rpush(changes_key(run_id), json.dumps(change))
    pipeline.expire(changes_key(run_id), STOP_FLAG_SECONDS)
    pipeline.execute()


def changes_to_replay(run: Run, stored_seq: int) -> list[dict]:
    """The recorded changes an attempt that starts after event `stored_seq` must apply: the ones its worker
    never applied (at once), and the ones applied after that event, whose report a resume forgot with the rest of
    the interrupted attempt (at the step they were applied at; the checkpoint's config holds the earlier ones)."""
    return [{"id": entry["id"], "values": entry["values"], "step": entry.get("step")}
            for entry in run.live_changes if "error" not in entry and (entry.get("seq") or math.inf) > stored_seq]


def record_change(run_id: int, values: dict, step: int, seq: int) -> None:
    """Write what the runner did with a change (a `hyperparameters` event) into its entry of `Run.live_changes`:
    the step and seq, and the old and new values or the error. The row is locked (the page may append a change)."""
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).only("live_changes").first()
        if run is None:
            return
        entry = next((entry for entry in run.live_changes if entry.get("id") == values.get("id")), None)
        if entry is None:  # asked for without the page (a test, the shell): recorded as it is
            entry = {"id": values.get("id"), "values": {name: change["new"] for name, change in
                                                        (values.get("changes") or {}).items()}}
            run.live_changes.append(entry)
        entry.update(step=step, seq=seq)
        if "error" in values:
            entry.update(error=values["error"], errors=values.get("errors") or {})
            entry.pop("changes", None)
        else:
            entry["changes"] = values.get("changes") or {}
        run.save(update_fields=["live_changes"])
