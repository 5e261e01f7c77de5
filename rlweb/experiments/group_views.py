"""The cancel and delete buttons of a group of experiments launched together (a suite, a sweep): the same flow
and messages, with the group's own cancel and delete (rlweb/suites/launching.py, rlweb/sweeps/study.py)."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect
from django.template.defaultfilters import pluralize


def cancel_group(request, group, cancel, noun: str):
    """Cancel `group` (`cancel` returns how many runs stop) and go back to its page."""
    stopped = cancel(group)
    messages.success(request, f"{noun.capitalize()} cancelled; {stopped} run{pluralize(stopped)} stopping.")
    return redirect(group)


def delete_group(request, group, delete, noun: str, contents: str, list_url: str):
    """Delete `group` and go to `list_url`; while its runs still run, `delete` refuses (returns true) and the
    page says to cancel first."""
    if delete(group):
        messages.error(request, f"Cancel the {noun}, and wait for its runs to stop, before deleting it.")
        return redirect(group)
    messages.success(request, f"Deleted the {noun} “{group.name}” and its {contents}.")
    return redirect(list_url)
