"""Every URL pattern of the project, walked from the URL resolver (a new view cannot be left out): an
anonymous visitor is sent to a login page, a signed-in stranger gets a 404 (or 403/405) for another user's
objects and never their data, with GET and with POST; every POST without a CSRF token is refused. The owner's objects
are in a project: its viewer reads every one of them and is refused every change, its editor acts on them."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model
from django.core.files.base import ContentFile
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve

from rlweb.accounts.models import Invitation, SiteSettings
from rlweb.alerts.models import AlertRule
from rlweb.api.models import ApiToken
from rlweb.experiments.models import Checkpoint, Experiment, Run, Video
from rlweb.projects.models import Membership, Project
from rlweb.suites.models import Suite, SuiteTask
from rlweb.sweeps.models import Sweep, Trial
from tests.web.helpers import PASSWORD, body_of

SECRET = "owner-secret-7f3a"  # in the owner's experiment name, video file and invitation note
# meant for visitors; and the client's source, which pip downloads without a session
ANONYMOUS_PAGES = {"login", "signup", "invitation-accept", "admin:login", "client-archive"}
LOGIN_PAGES = ("/login/?next=", "/admin/login/?next=")
OBJECT_KWARGS = {"experiment_id", "run_id", "checkpoint_id", "video_id", "invitation_id", "sweep_id", "user_id",
                 "token_id", "project_id", "suite_id"}
NOT_SHARED = {"invitation_id", "user_id", "token_id"}  # a project shares none of these: its members get 404 too
# managing members, and moving an experiment in or out of a project: 403 to the members
OWNER_ONLY = {"project-member-add", "project-member-remove", "api-1:member_add", "experiment-project"}
# a member's own settings about a shared object (their alerts for it): theirs to save, nothing of the owner's changes
OWN_SETTINGS = {"experiment-alerts"}
API_PUBLIC = {"api-1:openapi-json", "api-1:openapi-view", "api-1:api-root"}  # schema, docs and root (a 404): no data
ROUTE_PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>|\(\?P<(\w+)>[^)]*\)")


@dataclass
class Pattern:
    route: str
    name: str  # namespace:name, or the route for an unnamed one
    callback: object
    kwargs: set

    def url(self, values: dict) -> str:
        def value(match):
            name = match.group(1) or match.group(2)
            assert name in values, f"{self.name} takes <{name}>: give the walker an object for it"
            return str(values[name])
        return "/" + ROUTE_PARAMETER.sub(value, self.route).replace("^", "").replace("$", "")


def every_pattern(resolver=None, prefix="", namespace=None):
    for entry in (resolver or get_resolver()).url_patterns:
        if isinstance(entry, URLResolver):
            yield from every_pattern(entry, prefix + str(entry.pattern), entry.namespace or namespace)
        else:
            assert isinstance(entry, URLPattern)
            route = prefix + str(entry.pattern)
            name = f"{namespace}:{entry.name}" if namespace and entry.name else entry.name or route
            yield Pattern(route, name, entry.callback, {a or b for a, b in ROUTE_PARAMETER.findall(route)})


def first_per_route(patterns):
    """One pattern per route: the API names each method of a path (`GET` and `DELETE /api/experiments/<id>`) with a
    pattern of its own, and the first one answers them all."""
    seen = set()
    return [pattern for pattern in patterns if not (pattern.route in seen or seen.add(pattern.route))]


PATTERNS = first_per_route(every_pattern())


@pytest.fixture
def world(owner, stranger, admin_user, trained_run, make_experiment, django_user_model):
    """The owner's experiment (a trained run, a queued one, a cancelled one, a video) and sweep, in the owner's
    project with a viewer and an editor, and an admin's invitation."""
    experiment = trained_run.experiment
    project = Project.objects.create(owner=owner, name=SECRET)
    members = {role: django_user_model.objects.create_user(role, password=PASSWORD) for role in ("viewer", "editor")}
    for role, member in members.items():
        Membership.objects.create(project=project, user=member, role=role)
    Experiment.objects.filter(pk=experiment.pk).update(name=SECRET, tags=[SECRET], project=project)
    queued = Run.objects.create(experiment=experiment, seed=1, total_steps=400)
    cancelled = Run.objects.create(experiment=experiment, seed=2, total_steps=400, status="cancelled")
    video = Video(run=trained_run, step=200, episode_return=9.0)
    video.file.save("step_200.mp4", ContentFile(b"\x00\x00\x00\x18ftypmp42" + SECRET.encode()), save=True)
    sweep = Sweep.objects.create(owner=owner, name=SECRET, algorithm="dqn", env_id="CartPole-v1", total_steps=400,
                                 status="cancelled", project=project,  # ended: its pages read the database only
                                 eval_interval=200, space=[{"name": "learning_rate", "type": "float", "low": 1e-4,
                                                            "high": 1e-2, "log": True}])
    Trial.objects.create(sweep=sweep, number=0, experiment=experiment, params={"learning_rate": 1e-3}, state="failed")
    suite = Suite.objects.create(owner=owner, name=SECRET, algorithms=["dqn"], env_ids=["CartPole-v1"], num_seeds=3,
                                 total_steps=400, eval_interval=200, project=project)  # running: its cancel acts
    SuiteTask.objects.create(suite=suite, position=0, algorithm="dqn", env_id="CartPole-v1", experiment=experiment,
                             launched_at=trained_run.created)
    invitation = Invitation.objects.create(note=SECRET, created_by=admin_user,
                                           expires_at=trained_run.created.replace(year=2100))
    values = {"experiment_id": experiment.pk, "run_id": trained_run.pk, "checkpoint_id": trained_run.checkpoints.first().pk,
              "video_id": video.pk, "invitation_id": invitation.pk, "token": invitation.token, "sweep_id": sweep.pk,
              "user_id": owner.pk,  # the staff's Users page clears this user's failed sign-ins
              "token_id": ApiToken.issue(owner, SECRET)[0].pk, "project_id": project.pk, "username": "viewer",
              "suite_id": suite.pk,
              # the admin's own patterns: anyone but staff is sent to a login page before these are read
              "object_id": experiment.pk, "id": owner.pk, "content_type_id": 1, "app_label": "experiments",
              "url": "no-such-page/"}
    runs_for = {"run-cancel": queued.pk, "run-resume": cancelled.pk}  # a state change the stranger must not make
    return {"values": values, "runs_for": runs_for, "experiment": experiment, "queued": queued, "sweep": sweep,
            "suite": suite,
            "cancelled": cancelled, "video": video, "invitation": invitation, "owner": owner, "stranger": stranger,
            "admin": admin_user, **members}


def url_of(pattern: Pattern, world) -> str:
    values = dict(world["values"])
    if pattern.name in world["runs_for"]:
        values["run_id"] = world["runs_for"][pattern.name]
    url = pattern.url(values)
    assert resolve(url).func == pattern.callback, f"{url} does not reach {pattern.name}"
    run = world["runs_for"].get(pattern.name, world["values"]["run_id"])
    return f"{url}?runs={run}&experiment={world['experiment'].pk}"  # ids in the query too (compare)


def assert_nothing_changed(world):
    world["experiment"].refresh_from_db()
    assert Run.objects.get(pk=world["queued"].pk).status == "queued"
    assert Run.objects.get(pk=world["cancelled"].pk).status == "cancelled"
    assert Checkpoint.objects.filter(run__experiment=world["experiment"]).exists()
    assert Video.objects.filter(pk=world["video"].pk).exists()
    world["invitation"].refresh_from_db()
    assert world["invitation"].state == "open"
    assert set(get_user_model().objects.values_list("username", flat=True)) == {
        "owner", "stranger", "admin", "viewer", "editor"}
    assert sorted(Membership.objects.values_list("user__username", "role")) == [("editor", "editor"), ("viewer", "viewer")]
    assert not SiteSettings.current().signup_open
    assert set(Experiment.objects.values_list("owner__username", flat=True)) == {"owner"}
    sweep = Sweep.objects.get(pk=world["sweep"].pk)  # neither cancelled, extended nor deleted, and no best launched
    assert (sweep.status, sweep.trials, Experiment.objects.count()) == ("cancelled", 20, 1)
    assert not ApiToken.objects.filter(revoked_at__isnull=False).exists()
    assert Suite.objects.get(pk=world["suite"].pk).status == "running"  # not cancelled
    # nobody set alerts on the owner's behalf; a stranger never got to the owner's experiment
    assert not AlertRule.objects.filter(owner=world["owner"]).exists()
    assert not AlertRule.objects.filter(owner=world["stranger"], experiment__isnull=False).exists()


def test_the_walker_sees_every_view_of_the_site():
    names = {pattern.name for pattern in PATTERNS}
    assert {"experiment-detail", "run-cancel", "checkpoint-download", "video-file", "compare-export-csv",
            "user-list", "invitation-revoke", "admin:index", "alert-settings", "experiment-alerts",
            "suite-detail", "suite-report", "suite-cancel"} <= names
    assert len(PATTERNS) >= 60
    assert {name for pattern in PATTERNS for name in pattern.kwargs} <= OBJECT_KWARGS | {
        "token", "object_id", "id", "content_type_id", "app_label", "url", "username"}, "a new kind of id: add it to world()"


@pytest.mark.slow
def test_anonymous_visitors_are_sent_to_a_login_page_and_see_nothing(world):
    visitor = Client()
    for pattern in PATTERNS:
        url = url_of(pattern, world)
        for method in ("get", "post"):
            response = getattr(visitor, method)(url)
            content = body_of(response)
            assert response.status_code < 500, (method, url, response.status_code)
            assert SECRET.encode() not in content, (method, url)
            if pattern.route.startswith("api/"):  # the API answers itself, never with a login page
                assert response.status_code in ((200, 404, 405) if pattern.name in API_PUBLIC else (401, 405)), (
                    method, url, response.status_code)
            elif pattern.name not in ANONYMOUS_PAGES:
                assert response.status_code == 302, (method, url, response.status_code)
                assert response["Location"].startswith(LOGIN_PAGES), (method, url, response["Location"])
    assert_nothing_changed(world)


@pytest.mark.slow
def test_a_signed_in_stranger_gets_404_for_other_users_objects_and_never_their_data(world):
    stranger = Client()
    counts = {"refused": 0, "own pages": 0}
    for pattern in PATTERNS:
        url = url_of(pattern, world)
        for method in ("get", "post"):
            stranger.force_login(world["stranger"])  # again: a logout pattern ends the session
            response = getattr(stranger, method)(url)
            content = body_of(response)
            assert response.status_code < 500, (method, url, response.status_code)
            assert SECRET.encode() not in content, (method, url)
            if pattern.name.startswith("admin:") or pattern.route.startswith("admin/"):
                if pattern.name == "admin:login":  # the admin's login form says the stranger is not staff
                    assert response.status_code == 200, (method, url)
                else:  # to the admin's login (its logout: to its index, which sends there)
                    assert response.status_code == 302 and response["Location"].startswith(
                        ("/admin/login/", "/admin/?")) or response["Location"] == "/admin/", (method, url)
            elif pattern.kwargs & OBJECT_KWARGS or pattern.route.startswith("users/"):
                # the API checks a body before the object: a form-encoded one is refused (400, 422) unread
                refused = (403, 404, 405, 400, 422) if pattern.route.startswith("api/") else (403, 404, 405)
                assert response.status_code in refused, (method, url, response.status_code)
                counts["refused"] += 1
            else:
                counts["own pages"] += 1  # lists, forms and compare: the stranger's own (empty) view
    assert_nothing_changed(world)
    assert counts["refused"] >= 30


@pytest.mark.slow
def test_the_owner_reaches_every_object_the_stranger_was_refused(world):
    """So the stranger's 404s come from the ownership check, not from ids that do not exist."""
    owner, admin = Client(), Client()
    owner.force_login(world["owner"])
    admin.force_login(world["admin"])
    for pattern in PATTERNS:
        if not pattern.kwargs & OBJECT_KWARGS or pattern.name == "run-stream":  # a stream follows a live run
            continue
        client = admin if pattern.route.startswith("users/") else owner
        response = client.get(url_of(pattern, world))
        assert response.status_code in (200, 405) or answered(pattern, response), (pattern.name, response.status_code)


def answered(pattern: Pattern, response) -> bool:
    """A 404 of the view's own, past the access check: a DQN run has no Q-table (the view's JSON, not the check's
    HTML 404), and the run is not one logged from a script (the logged-runs API's own 404)."""
    return response.status_code == 404 and (response["Content-Type"] == "application/json"
                                            or pattern.route.startswith("api/logged-runs/"))


def shared(pattern: Pattern) -> bool:
    """A URL of an object the project shares with its members (not a token, a user, an invitation)."""
    return bool(pattern.kwargs & OBJECT_KWARGS) and not pattern.kwargs & NOT_SHARED and not (
        pattern.route.startswith(("users/", "admin/")) or pattern.name.startswith("admin:"))


@pytest.mark.slow
def test_a_projects_viewer_reads_every_shared_object_and_every_post_is_refused(world):
    viewer = Client()
    viewer.force_login(world["viewer"])
    refused = 0
    for pattern in filter(shared, PATTERNS):
        if pattern.name == "run-stream":  # a stream follows a live run
            continue
        url = url_of(pattern, world)
        read = viewer.get(url)
        assert read.status_code in (200, 405) or answered(pattern, read), ("get", pattern.name, read.status_code)
        response = viewer.post(url)
        assert response.status_code < 500, ("post", url, response.status_code)
        # refused (the API checks a body first: a form-encoded one is refused unread), or a view that only reads
        # and answers a POST as it answers a GET
        api_refusals = (400, 422) if pattern.route.startswith("api/") else ()
        if pattern.name in OWN_SETTINGS:  # the viewer's own alerts for the experiment (assert_nothing_changed)
            assert response.status_code in (200, 302), ("post", pattern.name, response.status_code)
        elif response.status_code in (403, 405, *api_refusals):
            refused += 1
        else:
            assert response.status_code == read.status_code and (read.status_code == 200 or answered(pattern, read)), (
                "post", pattern.name, response.status_code)
    assert_nothing_changed(world)
    assert refused >= 25


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)  # the sweep's actions open its Optuna study, through a connection of its own
def test_a_projects_editor_reads_and_acts_on_every_shared_object(world):
    editor = Client()
    editor.force_login(world["editor"])
    acted = 0
    # the deletes last: after them, the other objects are gone
    for pattern in sorted(filter(shared, PATTERNS), key=lambda pattern: "delete" in pattern.name):
        if pattern.name == "run-stream":
            continue
        url = url_of(pattern, world)
        if "delete" not in pattern.name:
            read = editor.get(url)
            assert read.status_code in (200, 405) or answered(pattern, read), ("get", pattern.name, read.status_code)
        response = editor.post(url)
        assert response.status_code < 500, ("post", url, response.status_code)
        if pattern.name in OWNER_ONLY:  # the API checks a form-encoded body first, and refuses it unread
            assert response.status_code in ((403, 400, 422) if pattern.route.startswith("api/") else (403,)), (
                "post", pattern.name, response.status_code)
        else:
            # run-job-cancel: no job was named, the view's own 404 past the access check
            assert response.status_code not in (403, 404) or answered(pattern, response) or (
                pattern.name == "run-job-cancel"), ("post", pattern.name, response.status_code)
            acted += response.status_code in (200, 302)
        if pattern.name == "run-cancel":  # the editor's cancel went through
            assert Run.objects.get(pk=world["queued"].pk).status == "cancelled"
    assert not Sweep.objects.filter(pk=world["sweep"].pk).exists()  # and the sweep's delete
    assert acted >= 10


def test_every_post_without_a_csrf_token_is_refused(world):
    clients = {}
    for role in ("owner", "admin"):
        clients[role] = Client(enforce_csrf_checks=True)
        clients[role].force_login(world[role])
    for pattern in PATTERNS:
        for role, client in clients.items():
            response = client.post(url_of(pattern, world), {"open": "True", "note": "x", "days": "7"})
            if pattern.route.startswith("api/") and response.status_code == 405:
                continue  # a path of the API that takes no POST
            assert response.status_code == 403, (role, pattern.name, response.status_code)
            assert b"CSRF" in body_of(response)
    assert_nothing_changed(world)


def test_sign_in_and_sign_up_forms_need_the_csrf_token_too(world):
    SiteSettings.objects.filter(pk=1).update(signup_open=True)
    visitor = Client(enforce_csrf_checks=True)
    assert visitor.post("/login/", {"username": "owner", "password": PASSWORD}).status_code == 403
    assert visitor.post("/signup/", {"username": "new", "password1": PASSWORD, "password2": PASSWORD}).status_code == 403
    assert not get_user_model().objects.filter(username="new").exists()
