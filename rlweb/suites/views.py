"""Suite pages: the list, the form, the live page with its data, the downloads (scores and aggregates as CSV, the
whole report as one HTML file that opens offline), the cancel and the delete. Every suite is fetched through
`owned_suite`: 404 for other users' (but a project's members), 403 to act as a viewer."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from django.contrib import messages
from django.contrib.staticfiles import finders
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize, slugify
from django.template.loader import render_to_string
from django.views.decorators.http import require_POST

from rlweb.experiments.group_views import cancel_group, delete_group
from rlweb.experiments.run_views import spreadsheet_safe
from rlweb.experiments.views import env_ids
from rlweb.projects import access
from rlweb.suites import launching, report, tasks
from rlweb.suites.forms import ENV_LISTS, SuiteForm
from rlweb.suites.models import Suite

PLOTLY_TEMPLATE = Path(__file__).resolve().parents[2] / "templates" / "_plotly.html"


def plotly_path() -> str:
    """The plotly.js bundle every chart page loads: the one templates/_plotly.html names (`make vendor-plotly`
    vendors it from the installed plotly package's version and rewrites that name)."""
    return re.search(r"vendor/plotly/[\w.-]+\.js", PLOTLY_TEMPLATE.read_text()).group(0)


def owned_suite(request, suite_id: int, edit: bool = False) -> Suite:
    """The suite, under the experiments' rule (rlweb/projects/access.py): 404 if unseen, 403 to act as a viewer."""
    suite = get_object_or_404(Suite.objects.filter(access.visible(request.user)), pk=suite_id)
    if edit and not access.can_edit(request.user, suite):
        raise PermissionDenied("A viewer of this project cannot change it: ask its owner to make you an editor.")
    return suite


def score_choice(request) -> str:
    """The score a run counts with: `?score=final` (the default) or `best`."""
    chosen = request.GET.get("score", "final")
    return chosen if chosen in report.SCORES else "final"


def page_data(suite: Suite, score: str) -> dict:
    """The page's data; a large suite's aggregates, not cached yet, are sent to a worker to bootstrap."""
    data = report.page_data(suite, score)
    if data["aggregates"].get("computing"):
        tasks.send_aggregates(suite.pk, score)
    return data


def suite_list(request):
    suites = Suite.objects.filter(access.visible(request.user))[:200]
    return render(request, "suites/suite_list.html", {"suites": suites})


def suite_new(request):
    form = SuiteForm(request.POST or None, initial=request.GET.dict(), owner=request.user)
    if request.method == "POST" and form.is_valid():
        earlier = form.earlier_submission(request.user)
        if earlier:  # the same form posted again (a double click, a reload): the suite it made
            return redirect(earlier)
        try:
            with transaction.atomic():
                suite = form.save(owner=request.user)
        except IntegrityError:  # the same form, posted at the same moment, made it first
            return redirect(form.earlier_submission(request.user) or "suite-list")
        launching.advance(suite.pk)
        waiting = suite.tasks.filter(launched_at__isnull=True).count()
        messages.success(request, f"Suite started: {form.summary()}." + (
            f" {waiting} experiment{pluralize(waiting)} wait{'s' if waiting == 1 else ''} for room under your limit "
            f"of queued and running runs, and start as runs end." if waiting else ""))
        return redirect(suite)
    return render(request, "suites/suite_form.html", {
        "form": form, "env_ids": env_ids(),
        "env_lists": {key: {"label": label, "ids": ids, "source": source} for key, (label, ids, source) in
                      ENV_LISTS.items()}})


def suite_detail(request, suite_id: int):
    suite = owned_suite(request, suite_id)
    score = score_choice(request)
    return render(request, "suites/suite_detail.html", {
        "suite": suite, "data": page_data(suite, score), "score": score, "scores": report.SCORES,
        "can_edit": access.can_edit(request.user, suite)})


def suite_data(request, suite_id: int):
    """The live part of the page: runs, states, scores and aggregates. Only reads (the bootstrap of a large suite
    is sent to a worker)."""
    return JsonResponse(page_data(owned_suite(request, suite_id), score_choice(request)))


def suite_csv(request, suite_id: int):
    """One row per run: algorithm, environment, seed, state, score and normalised score."""
    suite = owned_suite(request, suite_id)
    return csv_response(report.csv_rows(suite, score_choice(request)), f"{file_stem(suite)}-scores.csv")


def suite_aggregates_csv(request, suite_id: int):
    """One row per algorithm and metric: the value and its 95% interval."""
    suite = owned_suite(request, suite_id)
    data = report.page_data(suite, score_choice(request), inline=True)
    return csv_response(report.aggregate_csv_rows(data), f"{file_stem(suite)}-aggregates.csv")


def suite_report(request, suite_id: int):
    """The whole report as one HTML file: the data, plotly.js, the drawing script and the styles inline, so that it
    opens offline and asks the network for nothing."""
    suite = owned_suite(request, suite_id)
    data = report.page_data(suite, score_choice(request), inline=True)
    html = render_to_string("suites/report.html", {
        "suite": suite, "data": data, "plotly": static_text(plotly_path()),
        "script": static_text("suites/suite_report.js"),
        "styles": static_text("suites/suite.css")})
    response = HttpResponse(html, content_type="text/html; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{file_stem(suite)}-report.html"'
    return response


@require_POST
def suite_cancel(request, suite_id: int):
    return cancel_group(request, owned_suite(request, suite_id, edit=True), launching.cancel, "suite")


@require_POST
def suite_delete(request, suite_id: int):
    return delete_group(request, owned_suite(request, suite_id, edit=True), launching.delete, "suite", "experiments",
                        "suite-list")


def csv_response(rows, filename: str) -> HttpResponse:
    text = io.StringIO()
    writer = csv.writer(text)
    for row in rows:
        writer.writerow(spreadsheet_safe(row))
    response = HttpResponse(text.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def file_stem(suite: Suite) -> str:
    return f"suite{suite.pk}-{slugify(suite.name)[:60] or 'report'}"


def static_text(path: str) -> str:
    """A static file's text, to inline (`</script` escaped so that it cannot end its script element)."""
    found = finders.find(path)
    with open(found, encoding="utf-8") as source:
        return source.read().replace("</script", "<\\/script")
