"""The admin pages for experiments, runs, events and checkpoints."""

import pytest
from django.test import Client
from django.urls import reverse

from rlweb.experiments.models import Checkpoint, Event


@pytest.fixture
def admin_browser(admin_user):
    client = Client()
    client.force_login(admin_user)
    return client


def test_every_model_has_a_working_admin(admin_browser, trained_run):
    for model in ["experiment", "run", "event", "checkpoint"]:
        assert admin_browser.get(reverse(f"admin:experiments_{model}_changelist")).status_code == 200
    pages = [("experiment", trained_run.experiment.pk), ("run", trained_run.pk),
             ("event", Event.objects.filter(run=trained_run).first().pk),
             ("checkpoint", Checkpoint.objects.filter(run=trained_run).first().pk)]
    for model, pk in pages:
        assert admin_browser.get(reverse(f"admin:experiments_{model}_change", args=[pk])).status_code == 200


def test_ordinary_users_are_kept_out(owner_client):
    response = owner_client.get(reverse("admin:experiments_run_changelist"))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_projects_and_queue_limits_have_working_admins(admin_browser, owner, stranger):
    from rlweb.experiments.models import QueueLimit
    from rlweb.projects.models import Membership, Project

    project = Project.objects.create(name="lab", owner=owner)
    Membership.objects.create(project=project, user=stranger, role=Membership.Role.VIEWER)
    limit = QueueLimit.objects.create(user=stranger, queue="cpu", max_running=1)
    assert "lab" in admin_browser.get(reverse("admin:projects_project_changelist")).content.decode()
    assert admin_browser.get(reverse("admin:projects_project_change", args=[project.pk])).status_code == 200
    page = admin_browser.get(reverse("admin:experiments_queuelimit_change", args=[limit.pk])).content.decode()
    assert '<option value="gpu">gpu</option>' in page  # the queue is chosen among those runs go to
    response = admin_browser.post(reverse("admin:experiments_queuelimit_add"),
                                  {"user": stranger.pk, "queue": "h100", "max_running": 2})
    assert response.status_code == 200 and QueueLimit.objects.count() == 1  # not a queue: refused
