"""The experiment and run lists: their query parameters (search, filters, sort, page), read and checked.

A parameter that makes no sense (an unknown sort key or status, a malformed tag) is ignored, and
`ListQuery.problems` says so, for the page to show; the list never fails because of its query.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import trainer
from django.core.paginator import Paginator
from django.db.models import Avg, Count, F, FloatField, Max, Q, Sum
from django.db.models.functions import Cast
from django.http import QueryDict

from rlweb.experiments.forms import TAG
from rlweb.experiments.models import LOGGED, Experiment, Run
from rlweb.projects import access

PAGE_SIZE = 25
MAX_TEXT = 200  # longest search or env id taken from a query

# sort key -> the field it orders by; "-key" sorts descending
EXPERIMENT_SORTS = {"name": "name", "algorithm": "algorithm", "env": "env_id", "runs": "run_count",
                    "progress": "progress", "best": "best_return", "created": "created"}
RUN_SORTS = {"run": "id", "experiment": "experiment__name", "status": "status", "progress": "progress",
             "eval": "eval_return_mean", "best": "best_eval_return", "algorithm": "experiment__algorithm",
             "env": "experiment__env_id", "started": "first_started_at", "finished": "finished_at"}


@dataclass
class ListQuery:
    search: str = ""
    status: str = ""
    algorithm: str = ""
    env: str = ""
    tag: str = ""
    project: int | None = None  # a project's id: only its experiments and runs
    sort: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def filtered(self) -> bool:
        return any((self.search, self.status, self.algorithm, self.env, self.tag, self.project))


def read_query(params: QueryDict, sorts: dict, default_sort: str) -> ListQuery:
    """The list's query parameters, each checked; what does not fit is left out and named in `problems`."""
    query = ListQuery()
    query.search, query.env = (plain_text(params, name, query.problems) for name in ("q", "env"))
    status, algorithm, tag, sort = (params.get(name, "").strip() for name in ("status", "algorithm", "tag", "sort"))
    if status and status not in Run.Status.values:
        query.problems.append(f"Unknown status “{status[:40]}” ignored; one of {', '.join(Run.Status.values)}.")
    else:
        query.status = status
    if algorithm and algorithm not in (*trainer.algorithm_names(), LOGGED):
        query.problems.append(f"Unknown algorithm “{algorithm[:40]}” ignored.")
    else:
        query.algorithm = algorithm
    if tag and not TAG.fullmatch(tag):
        query.problems.append(f"“{tag[:40]}” is not a tag; the tag filter is ignored.")
    else:
        query.tag = tag
    if sort and sort.removeprefix("-") not in sorts:
        query.problems.append(f"Cannot sort by “{sort[:40]}”; sorted by {default_sort.removeprefix('-')} instead.")
    project = params.get("project", "").strip()
    if project.isascii() and project.isdigit() and len(project) <= 18:
        query.project = int(project)
    elif project:
        query.problems.append(f"“{project[:40]}” is not a project; the project filter is ignored.")
    query.sort = sort if sort and sort.removeprefix("-") in sorts else default_sort
    return query


def plain_text(params: QueryDict, name: str, problems: list[str]) -> str:
    """A text parameter, stripped and cut to MAX_TEXT; one holding a NUL character (which no name or env id
    holds, and PostgreSQL cannot compare) is ignored."""
    text = params.get(name, "").strip()[:MAX_TEXT]
    if "\x00" in text:
        problems.append(f"The {name} filter holds a NUL character; it is ignored.")
        return ""
    return text


def has_tag(tag: str, prefix: str = "") -> Q:
    """Rows whose tag list holds `tag` (any case). Tags are plain ASCII (forms.TAG), so the list's JSON text
    holds it as `"tag"`: a text match that works on SQLite and PostgreSQL alike."""
    return Q(**{f"{prefix}tags__icontains": json.dumps(tag)})


def order(queryset, sorts: dict, sort: str):
    column = F(sorts[sort.removeprefix("-")])
    ordering = column.desc(nulls_last=True) if sort.startswith("-") else column.asc(nulls_last=True)
    return queryset.order_by(ordering, "-id")


def experiments_for(user, query: ListQuery):
    experiments = (Experiment.objects.filter(access.visible(user), sweep_trial__isnull=True)  # a sweep's trials: on its page
                   .select_related("project").annotate(run_count=Count("runs"),
                             # a running run whose worker went silent counts as lost (Run.shown_status)
                             running_count=Count("runs", filter=Q(runs__status=Run.Status.RUNNING)
                                                 & ~Run.silent("runs__")),
                             queued_count=Count("runs", filter=Q(runs__status=Run.Status.QUEUED)),
                             succeeded_count=Count("runs", filter=Q(runs__status=Run.Status.SUCCEEDED)),
                             stopped_count=Count("runs", filter=Q(runs__status__in=[
                                 Run.Status.FAILED, Run.Status.CANCELLED, Run.Status.LOST, Run.Status.PRUNED])
                                                 | Run.silent("runs__")),
                             steps_done=Sum("runs__steps_done"), steps_total=Sum("runs__total_steps"),
                             progress=Cast(Sum("runs__steps_done"), FloatField()) / Sum("runs__total_steps"),
                             latest_return=Avg("runs__eval_return_mean"), best_return=Max("runs__best_eval_return")))
    if query.search:
        experiments = experiments.filter(Q(name__icontains=query.search) | Q(notes__icontains=query.search))
    if query.status:
        experiments = experiments.filter(pk__in=Run.objects.filter(status=query.status).values("experiment_id"))
    if query.algorithm:
        experiments = experiments.filter(algorithm=query.algorithm)
    if query.env:
        experiments = experiments.filter(env_id=query.env)
    if query.tag:
        experiments = experiments.filter(has_tag(query.tag))
    if query.project:
        experiments = experiments.filter(project_id=query.project)
    return order(experiments, EXPERIMENT_SORTS, query.sort)


def runs_for(user, query: ListQuery):
    runs = (Run.objects.filter(access.visible(user, "experiment__")).select_related("experiment", "experiment__project")
            .annotate(progress=Cast(F("steps_done"), FloatField()) / F("total_steps")))
    if query.search:
        runs = runs.filter(Q(experiment__name__icontains=query.search) | Q(notes__icontains=query.search)
                           | Q(experiment__notes__icontains=query.search))
    if query.status:
        runs = runs.filter(status=query.status)
    if query.algorithm:
        runs = runs.filter(experiment__algorithm=query.algorithm)
    if query.env:
        runs = runs.filter(experiment__env_id=query.env)
    if query.tag:
        runs = runs.filter(has_tag(query.tag, prefix="experiment__"))
    if query.project:
        runs = runs.filter(experiment__project_id=query.project)
    return order(runs, RUN_SORTS, query.sort)


def page_of(queryset, params: QueryDict):
    """The requested page (Paginator.get_page: a bad or too large number gives the first or last page)."""
    return Paginator(queryset, PAGE_SIZE).get_page(params.get("page"))


def link_query(params: QueryDict, **changes) -> str:
    """`params` with `changes` applied (None removes a key), as a query string starting with "?"."""
    query = params.copy()
    for name, value in changes.items():
        query.pop(name, None)
        if value is not None:
            query[name] = value
    return "?" + query.urlencode()


def page_link_prefix(params: QueryDict) -> str:
    """The query of the current list without its page, ready for a page number: "?q=x&page=" or "?page="."""
    query = link_query(params, page=None)
    return query + ("&page=" if len(query) > 1 else "page=")


def sort_links(params: QueryDict, sorts: dict, current: str) -> dict:
    """For each sort key: the link a column header points to (ascending first, then toggling) and the
    direction it is sorted in now ("asc", "desc" or "")."""
    links = {}
    for key in sorts:
        direction = "asc" if current == key else "desc" if current == f"-{key}" else ""
        links[key] = {"url": link_query(params, sort=f"-{key}" if direction == "asc" else key, page=None),
                      "direction": direction}
    return links


def filter_choices(user) -> dict:
    """What the filter controls offer: statuses, the algorithms, envs and tags of the experiments the user sees,
    and their projects."""
    experiments = Experiment.objects.filter(access.visible(user))
    tags = sorted({tag for tags in experiments.values_list("tags", flat=True) for tag in tags or []}, key=str.lower)
    return {"statuses": Run.Status.values,
            "algorithms": sorted(set(experiments.values_list("algorithm", flat=True))),
            "envs": sorted(set(experiments.exclude(env_id="").values_list("env_id", flat=True))),  # none: imports
            "tags": tags, "projects": list(access.member_projects(user))}
