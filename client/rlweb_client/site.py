"""Drive an rlweb site from code (a notebook, a CI job, a paper's plotting script): launch experiments on its
workers, wait for their runs, read their metrics and statistics. A thin layer over the JSON API (`/api/docs`):

    site = rlweb_client.Site()                      # $RLWEB_URL and $RLWEB_TOKEN
    experiment = site.launch("ppo", "CartPole-v1", total_steps=50_000, num_seeds=5)
    runs = site.wait(experiment["id"])              # every run ended: their final evaluations, statuses, ...
    curves = [site.metrics(run["id"])["eval/return_mean"] for run in runs]
    stats = site.statistics([run["id"] for run in runs])  # rliable's IQM and intervals, once computed
    path = site.download(site.checkpoints(runs[0]["id"])[0])  # then trainer.load(path) evaluates it here

A refusal (a bad hyperparameter, a run that is not yours) raises `Refused` with the API's detail, by field."""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Optional

from rlweb_client.run import VERSION
from rlweb_client.transport import Api, Refused

__all__ = ["Site", "Refused", "FINISHED"]

FINISHED = ("succeeded", "failed", "cancelled", "lost", "pruned")  # a run in one of these has ended


class Site:
    """The rlweb site at `url` (default $RLWEB_URL) with an API token (default $RLWEB_TOKEN)."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, timeout: float = 60.0):
        url = url or os.environ.get("RLWEB_URL")
        token = token or os.environ.get("RLWEB_TOKEN")
        if not url or not token:
            raise ValueError("rlweb_client.Site needs the site's url and an API token (or RLWEB_URL and RLWEB_TOKEN)")
        self.api = Api(url, token, user_agent=f"rlweb-client/{VERSION}", timeout=timeout)

    def get(self, path: str, **query) -> Any:
        """GET an API path (`/runs/3`), with a query."""
        pairs = {key: value for key, value in query.items() if value is not None}
        return self.api.get(path + ("?" + urllib.parse.urlencode(pairs) if pairs else ""))

    def launch(self, algorithm: str, env_id: str, total_steps: int, num_seeds: int = 1,
               hyperparameters: Optional[dict] = None, **fields) -> dict:
        """Create an experiment and queue its runs, checked as the form checks it (a refusal names each field).
        `fields`: the experiment's other settings (name, preset, eval_interval, device, project, ...)."""
        body = {"algorithm": algorithm, "env_id": env_id, "total_steps": total_steps, "num_seeds": num_seeds,
                **({"hyperparameters": hyperparameters} if hyperparameters else {}), **fields}
        return self.api.post("/experiments", body)

    def experiment(self, experiment_id: int) -> dict:
        return self.get(f"/experiments/{int(experiment_id)}")

    def runs(self, experiment: Optional[int] = None, **filters) -> list[dict]:
        """Every run of yours (or of one experiment), every page of them; `filters`: status, algorithm, env, tag, q."""
        found, page = [], 1
        while True:
            answer = self.get("/runs", experiment=experiment, page=page, **filters)
            found += answer["items"]
            if page >= answer["pages"]:
                return found
            page += 1

    def run(self, run_id: int) -> dict:
        return self.get(f"/runs/{int(run_id)}")

    def wait(self, experiment: int, timeout: Optional[float] = None, poll: float = 5.0, progress: bool = True
             ) -> list[dict]:
        """The experiment's runs once every one has ended (succeeded, failed, cancelled, lost or pruned); a line on
        each change while `progress`. TimeoutError after `timeout` seconds, saying where they stand."""
        deadline = None if timeout is None else time.monotonic() + timeout
        said = None
        while True:
            runs = self.runs(experiment=experiment)
            ended = sum(run["status"] in FINISHED for run in runs)
            where = f"experiment {experiment}: {ended} of {len(runs)} runs ended" + "".join(
                f", {count} {status}" for status, count in sorted(Counter(run["status"] for run in runs).items())
                if status not in FINISHED)
            if progress and where != said:
                print(where, flush=True)
                said = where
            if runs and ended == len(runs):
                return runs
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{where} after {timeout:g} s")
            time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))

    def cancel(self, run_id: int) -> str:
        """Stop a run: `cancelled` (it had not started, or was logged from a script), `stopping` (it saves a final
        checkpoint, then ends cancelled) or `ended` (it had ended already)."""
        return self.api.post(f"/runs/{int(run_id)}/cancel", {})["outcome"]

    def resume(self, run_id: int) -> str:
        """Queue a cancelled or lost run again from its latest checkpoint (`queued`); `Refused` (409) says why not."""
        return self.api.post(f"/runs/{int(run_id)}/resume", {})["outcome"]

    def change(self, run_id: int, **values) -> dict:
        """Change live hyperparameters of a running run (`change(run_id, learning_rate=1e-4)`), checked as on its
        page; the recorded change, which its worker applies at its next step. `Refused` names a bad value."""
        return self.api.post(f"/runs/{int(run_id)}/hyperparameters", {"values": values})["change"]

    def events(self, run_id: int, kinds: Optional[str] = None) -> list[dict]:
        """Every stored event of a run, not downsampled, in order (`kinds`: e.g. "eval" or "train,episode")."""
        found, after = [], 0
        while after is not None:
            page = self.get(f"/runs/{int(run_id)}/events", after=after, kinds=kinds)
            found += page["events"]
            after = page["next_after"]
        return found

    def checkpoints(self, run_id: int) -> list[dict]:
        """The run's checkpoints: id, step, tag (periodic, best, final) and `download_url`."""
        return self.get(f"/runs/{int(run_id)}/checkpoints")

    def videos(self, run_id: int) -> list[dict]:
        """The run's episode videos, newest first: id, step, episode_return and `download_url`."""
        return self.get(f"/runs/{int(run_id)}/videos")

    def download(self, item: dict, folder=".", name: Optional[str] = None) -> Path:
        """Save a checkpoint or video (an item of `checkpoints` or `videos`) into `folder`, named as the site names
        it unless `name`; its path. A trained run's checkpoint loads with `trainer.load(path)`."""
        return self.api.download(item["download_url"], folder, name)

    def metrics(self, run_id: int) -> dict:
        """Every metric of a run, downsampled as its page draws them: {key: {"step": [...], "value": [...], ...}}
        (every bucket keeps its smallest and largest value; `/runs/ID/events` through `get` has every value)."""
        return self.get(f"/runs/{int(run_id)}/metrics")["metrics"]

    def statistics(self, run_ids: Iterable[int], timeout: float = 300.0, **options) -> dict:
        """RL-grade statistics of the runs (IQM, median, mean, optimality gap with 95% intervals, probability of
        improvement, profiles), waiting while the site computes them; `options`: by, metric, count, last."""
        runs = ",".join(str(int(run_id)) for run_id in run_ids)
        deadline = time.monotonic() + timeout
        while True:
            answer = self.get("/statistics", runs=runs, **options)
            if answer.get("state") == "done":
                return answer
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the statistics were not computed within {timeout:g} s: {json.dumps(answer)[:200]}")
            time.sleep(0.5)
