"""The "Environment" card of a run page and the environment diff of the compare page: what made a run (recorded by
its worker, trainer/provenance.py), or what a logged run's script reported (rlweb/logged)."""

import re

from django import template
from trainer import provenance

from rlweb.experiments.compare import diff_rows

register = template.Library()

LOGGED_LABELS = {"host": "host", "git_commit": "git commit", "client_version": "rlweb_client"}
NOT_COMPARED = ("command", "seed", "start_step")  # the hyperparameter table compares the config and the seed


def recorded(run) -> dict:
    """The run's record: its worker's, or for a run logged from a script what that script's client saw."""
    if run.experiment.is_logged:
        logged = getattr(run, "logged", None)
        return {} if logged is None else {"host": logged.host, "git_commit": logged.git_commit,
                                          "client_version": logged.client_version, "command": logged.command}
    return run.environment or {}


def shown_rows(record: dict, logged: bool) -> list[tuple[str, str, str]]:
    """(field, label, value text) of every field but the command."""
    if logged:
        return [(name, label, record.get(name) or "–") for name, label in LOGGED_LABELS.items()]
    return [row for row in provenance.rows(record) if row[0] != "command"]


@register.inclusion_tag("experiments/_environment.html")
def environment_panel(run) -> dict:
    record = recorded(run)
    logged = run.experiment.is_logged
    command = record.get("command", "")
    # shown an option and its value to a piece, each kept on one line; the pieces joined by spaces are the command
    return {"rows": shown_rows(record, logged) if record else [], "command": command,
            "pieces": re.split(r" (?=--)", command), "logged": logged, "pending": not run.is_finished}


@register.inclusion_tag("experiments/_environment_diff.html")
def environment_diff(runs) -> dict:
    """The compare page's table: a row per field of the runs' records, those that differ first."""
    records = [{name: provenance.value_text(name, value) for name, value in recorded(run).items()
                if name not in NOT_COMPARED} for run in runs]
    rows = [{**row, "label": provenance.LABELS.get(row["name"], LOGGED_LABELS.get(row["name"], row["name"]))}
            for row in diff_rows(records)]
    return {"runs": runs, "differing": [row for row in rows if row["differs"]],
            "same": [row for row in rows if not row["differs"]], "any": any(records)}
