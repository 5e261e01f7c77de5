"""Template filters for the experiment pages."""

from django import template

from rlweb.experiments import notes
from rlweb.experiments.live_changes import LiveChangeForm, applied_changes, changed_text

register = template.Library()


@register.filter
def markdown(text: str) -> str:
    """Notes as sanitised HTML (notes.render)."""
    return notes.render(text or "")


@register.inclusion_tag("experiments/_notes.html", takes_context=True)
def notes_section(context, text: str, action: str, editable: bool = True) -> dict:
    """The notes card of a run or experiment page: the rendered notes, and the form that edits them for a user who
    may (a project's viewer only reads them)."""
    return {"notes": text, "action": action, "max_length": notes.MAX_LENGTH, "csrf_token": context.get("csrf_token"),
            "editable": editable}


@register.filter
def duration(seconds: float | None) -> str:
    """A short, rounded duration: "45 s", "12 min", "3 h 05 min", "2 d 4 h"; "" for None."""
    if seconds is None:
        return ""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


@register.filter
def steps(value) -> str:
    """A step count as people read it in a narrow column: 950, 9500, 84k, 61.5k, 1.2M, 10M."""
    if value is None:
        return "–"
    value = int(value)
    if value < 10_000:
        return str(value)
    if value < 1_000_000:
        return f"{value / 1_000:.3g}k"
    return f"{value / 1_000_000:.3g}M"


@register.simple_tag
def live_change_form(run):
    """The form that changes a running run's live hyperparameters (None when it is not running, or is logged from a
    script)."""
    return LiveChangeForm(run) if run.status == run.Status.RUNNING and not run.experiment.is_logged else None


@register.simple_tag
def hyperparameter_value(run, name: str, value) -> str:
    """A run's hyperparameter as its page shows it: "0.001 → 0.0005 changed at step 512" once changed live."""
    changes = applied_changes(run).get(name)
    return changed_text(value, changes) if changes else str(value)
