"""The compare page and its endpoints. The URL holds the selection (`/compare/?runs=3,7,9`) and the chart
options; runs the user may not see are left out and only counted. The logic is in compare.py."""

from __future__ import annotations

import csv
import itertools
from urllib.parse import urlencode

from django.contrib import messages
from django.http import JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from rlweb.experiments import compare, compare_stats, live
from rlweb.experiments.models import Experiment
from rlweb.experiments.run_views import Echo, spreadsheet_safe
from rlweb.projects import access

CANDIDATES = 200  # the user's latest runs offered under "Add runs"


def selection(request) -> tuple[list, int, compare.Options]:
    """The runs asked for that the user may see, how many were left out, and the options (SelectionError)."""
    runs, left_out = compare.select_runs(request.user, compare.parse_run_ids(request.GET.getlist("runs")))
    return runs, left_out, compare.parse_options(request.GET, runs)


def compare_page(request):
    if request.GET.getlist("experiment") or len(request.GET.getlist("runs")) > 1:
        return redirect(canonical_url(request))
    try:
        runs, left_out, options = selection(request)
    except compare.SelectionError as error:
        return render(request, "experiments/compare.html", {"error": str(error)}, status=400)
    run_ids = [run.pk for run in runs]
    rows = compare.hyperparameter_rows(runs)
    return render(request, "experiments/compare.html", {
        "runs": runs, "run_ids": ",".join(map(str, run_ids)), "left_out": left_out, "options": options,
        "hyperparameters": rows, "settings_differ": any(row["differs"] for row in rows),
        "groupings": compare.grouping_choices(runs), "bands": compare.BANDS, "max_runs": compare.MAX_RUNS,
        "statistics": {"groupings": compare_stats.grouping_choices(runs), "metrics": compare_stats.METRICS,
                       "metric": compare_stats.default_metric(runs),
                       "counts": compare_stats.COUNTS, "baselines": compare_stats.baseline_bands(runs)},
        "columns": [(run, compare_url([pk for pk in run_ids if pk != run.pk], request.GET)) for run in runs],
        "data_url": compare_url(run_ids, request.GET, view="compare-data"),
        "stream_url": compare_url(run_ids, {}, view="compare-stream"),
        "candidates": compare.runs_visible_to(request.user).exclude(pk__in=run_ids).order_by("-pk")[:CANDIDATES]})


def canonical_url(request) -> str:
    """`?runs=3&runs=7` (a form of checkboxes) and `?experiment=2` (all its runs) as `?runs=3,7,...`."""
    try:
        run_ids = compare.parse_run_ids(request.GET.getlist("runs"))
    except compare.SelectionError:  # the page itself then says what is wrong
        return compare_url([], request.GET, runs=",".join(request.GET.getlist("runs")))
    experiments = Experiment.objects.filter(access.visible(request.user),
                                            pk__in=compare.parse_ids(request.GET.getlist("experiment")))
    for experiment in experiments:
        run_ids += [run.pk for run in experiment.runs.all() if run.pk not in run_ids]
    if len(experiments) < len(request.GET.getlist("experiment")):
        messages.warning(request, "Some of the experiments asked for were left out: they do not exist or are "
                                  "not yours.")
    return compare_url(run_ids, request.GET)


def compare_url(run_ids: list[int], params, runs: str | None = None, view: str = "compare") -> str:
    """The compare page (or its data) for `run_ids`, with the options in `params`."""
    keys = ("group", "band", "x", "threshold") + (("smooth", "log") if view == "compare" else ())
    query = {key: params[key] for key in keys if params.get(key)}
    query = {"runs": runs if runs is not None else ",".join(map(str, run_ids)), **query}
    return f"{reverse(view)}?{urlencode(query, safe=',')}"


def compare_data(request):
    """What the page draws: curves (downsampled), group means and bands, the summary and the videos."""
    try:
        runs, left_out, options = selection(request)
    except compare.SelectionError as error:
        return JsonResponse({"error": str(error)}, status=400)
    return JsonResponse({"left_out": left_out, **compare.comparison(runs, options),
                         "baselines": compare_stats.baseline_bands(runs),
                         "baseline_curves": compare_stats.baseline_curves(runs)})


def compare_statistics(request):
    """IQM, median, mean and optimality gap per group with intervals, probability of improvement, profiles and
    sample-efficiency curves (compare_stats.py): from the cache at once, else {"state": "pending"} while they are
    computed off the request; the page asks again."""
    try:
        runs, _ = compare.select_runs(request.user, compare.parse_run_ids(request.GET.getlist("runs")))
        options = compare_stats.parse_options(request.GET, runs)
    except compare.SelectionError as error:
        return JsonResponse({"error": str(error)}, status=400)
    result = compare_stats.statistics(runs, options)
    return JsonResponse(result, status=202 if result["state"] in ("pending", "partial") else 200)


def compare_stream(request):
    """Server-sent events saying when any of the selected runs reports (live.watch): the page then fetches
    compare-data again, instead of asking every few seconds. `after=run:seq,...` names what the page drew, so that
    what was stored between its fetch and this stream is news too."""
    try:
        runs, _, _ = selection(request)
    except compare.SelectionError as error:
        return JsonResponse({"error": str(error)}, status=400)
    run_ids = [run.pk for run in runs]
    drawn = compare.parse_positions(request.GET.get("after", ""), run_ids)
    response = StreamingHttpResponse(live.watch(run_ids, drawn), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each message on at once
    return response


def compare_export(request, file_format: str):
    """Every stored metric value of the selected runs, as CSV (long format) or JSON, streamed."""
    try:
        runs, left_out, options = selection(request)
    except compare.SelectionError as error:
        return JsonResponse({"error": str(error)}, status=400)
    if file_format == "csv":
        writer = csv.writer(Echo())
        body = (writer.writerow(spreadsheet_safe(row)) for row in itertools.chain([compare.EXPORT_COLUMNS], compare.export_rows(runs)))
        response = StreamingHttpResponse(body, content_type="text/csv; charset=utf-8")
    else:
        body = compare.export_json(runs, left_out, options.threshold)
        response = StreamingHttpResponse(body, content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="compare-{len(runs)}-runs.{file_format}"'
    return response
