"""RL-grade statistics of runs (rlweb/experiments/compare_stats.py): what the compare page's "Statistics across
tasks" shows, as JSON. The first request starts the bootstrap off the request and answers 202; ask again until 200."""

from __future__ import annotations

from ninja import Field, Query, Router, Schema, Status
from ninja.errors import HttpError

from rlweb.experiments import compare, compare_stats

router = Router(tags=["statistics"])


class StatisticsQuery(Schema):
    runs: str = Field(..., description="Run ids, separated by commas (at most 50); runs you may not see are left out.")
    by: str = Field("algorithm", description="algorithm, experiment, tag or hp:<hyperparameter>")
    metric: str = Field("", description="eval/return_mean, or rollout/episode_return: the training episodes' return "
                                         "(a logged script's charts/episodic_return too); default the first, unless "
                                         "none of the runs evaluates")
    count: str = Field("final", description="final, best or last (the mean of the last `last` values)")
    last: str = "5"
    improve: str = Field("", description="P(improve > over): two group names; default the first two groups")
    over: str = ""


@router.get("/statistics", response={200: dict, 202: dict})
def statistics(request, query: Query[StatisticsQuery]):
    """Per group: IQM, median, mean and optimality gap of the normalised scores, each (point, low, high) with a 95%
    stratified bootstrap interval; the probability of improvement; performance profiles; sample-efficiency curves.
    `state` is "pending" or "partial" (the aggregates only) with a 202 while they are computed, "done" with a 200."""
    try:
        runs, _ = compare.select_runs(request.auth, compare.parse_run_ids([query.runs]))
        options = compare_stats.parse_options(query.dict(), runs)
    except compare.SelectionError as error:
        raise HttpError(400, str(error)) from None
    result = compare_stats.statistics(runs, options)
    return Status(202 if result["state"] in ("pending", "partial") else 200, result)
