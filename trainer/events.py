"""Events a training run reports, and the sinks that receive them.

An event is a plain dict, the one schema used by the sinks, the database, the API and the charts:

    {"kind": "episode", "step": 1234, "time": 5.2, "values": {"rollout/episode_return": 21.0, ...}}

kinds: "started", "episode", "train", "eval", "time", "checkpoint", "video", "hyperparameters", "finished",
"failed".
`step` is the env step count, `time` wall seconds since the run started. Metric keys are namespaced
(`rollout/`, `train/`, `eval/`, `time/`, and `system/`, which a `time` event carries every few seconds:
trainer/system_metrics.py); lifecycle events carry their details in `values`
("finished" has `status`: "succeeded" or "cancelled"; "failed" has `error` and `traceback`;
"checkpoint" has `path`, `tag` and `step`, or `tag`, `step` and `error` (no `path`) when the file could
not be written; "video" has `path`, `step`, `episode_return` and `length`, or `error` once when the env
cannot render ("No videos: ..."), or `error` and `step` when a video could not be written;
"hyperparameters" reports a change asked for while the run trains (`Sink.changes`): `changes` maps each name
to {"old", "new"}, or `error` (and `errors` by name) says why it was refused and nothing changed; `id` is the
request's, when it had one).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

LIFECYCLE_KINDS = ("started", "checkpoint", "video", "hyperparameters", "finished", "failed")
METRIC_KINDS = ("episode", "train", "eval", "time")


def make_event(kind: str, step: int, time: float, values: dict) -> dict:
    return {"kind": kind, "step": int(step), "time": round(float(time), 4), "values": values}


class Sink:
    """Receives events; may ask the run to stop. Subclasses override what they need."""

    def emit(self, event: dict) -> None:
        pass

    def should_stop(self) -> bool:
        return False

    def changes(self) -> list[dict]:
        """Hyperparameter changes asked for since the last call; the runner asks with `should_stop` (every
        STOP_POLL_SECONDS). Each is {"values": {name: value}} with an optional "id" (echoed in its event) and an
        optional "step": apply it once the run reaches that env step (a resumed run replaying a change)."""
        return []

    def close(self) -> None:
        pass


class StdoutSink(Sink):
    """One line per lifecycle, eval and episode event (every `episode_every`-th episode)."""

    def __init__(self, stream=None, episode_every: int = 10):
        self.stream = stream or sys.stdout
        self.episode_every = episode_every
        self.episodes = 0

    def emit(self, event: dict) -> None:
        if event["kind"] == "episode":
            self.episodes += 1
            if self.episodes % self.episode_every:
                return
        elif event["kind"] in ("train", "time"):
            return
        values = " ".join(f"{key}={_short(value)}" for key, value in event["values"].items() if key != "traceback")
        print(f"[{event['kind']:>10}] step={event['step']} {values}", file=self.stream, flush=True)
        if event["kind"] == "failed":
            print(event["values"].get("traceback", ""), file=self.stream, flush=True)


class JsonLinesSink(Sink):
    """Every event as one JSON line appended to `path`."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = self.path.open("a", encoding="utf-8")

    def emit(self, event: dict) -> None:
        self.file.write(json.dumps(event) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class ProgressBarSink(Sink):
    """A tqdm progress bar over env steps, with the latest episode and eval returns."""

    def __init__(self, total_steps: int):
        from tqdm import tqdm

        self.bar = tqdm(total=total_steps, unit="step", dynamic_ncols=True)
        self.postfix: dict[str, str] = {}

    def emit(self, event: dict) -> None:
        self.bar.update(max(0, min(event["step"], self.bar.total) - self.bar.n))
        values = event["values"]
        if "rollout/episode_return" in values:
            self.postfix["return"] = f"{values['rollout/episode_return']:.1f}"
        if "eval/return_mean" in values:
            self.postfix["eval"] = f"{values['eval/return_mean']:.1f}"
        if self.postfix:
            self.bar.set_postfix(self.postfix, refresh=False)

    def close(self) -> None:
        self.bar.close()


class MultiSink(Sink):
    """Fans events out to several sinks; stops when any of them asks."""

    def __init__(self, *sinks: Sink):
        self.sinks = [sink for sink in sinks if sink is not None]

    def emit(self, event: dict) -> None:
        for sink in self.sinks:
            sink.emit(event)

    def should_stop(self) -> bool:
        return any(sink.should_stop() for sink in self.sinks)

    def changes(self) -> list[dict]:
        return [change for sink in self.sinks for change in sink.changes()]

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


class ListSink(Sink):
    """Keeps every event in memory (for tests and notebooks); `stop_after` stops the run at a step; `changes`
    are hyperparameter changes handed to the runner at its first poll (give each a "step" to time it)."""

    def __init__(self, stop_after: int | None = None, changes: list[dict] | None = None):
        self.events: list[dict] = []
        self.stop_after = stop_after
        self.requested = list(changes or [])

    def emit(self, event: dict) -> None:
        self.events.append(event)

    def should_stop(self) -> bool:
        return self.stop_after is not None and bool(self.events) and self.events[-1]["step"] >= self.stop_after

    def changes(self) -> list[dict]:
        requested, self.requested = self.requested, []
        return requested

    def of_kind(self, kind: str) -> list[dict]:
        return [event for event in self.events if event["kind"] == kind]


def _short(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
