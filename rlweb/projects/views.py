"""The Projects page (the user's projects: owned or a member of; a form to make one) and a project's page (its
members; the owner adds, re-roles and removes them). Only the owner manages members: 403 for a member who tries,
404 for anyone outside the project."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from rlweb.projects import access
from rlweb.projects.forms import MemberForm, ProjectForm
from rlweb.projects.models import Membership, Project


def member_project(request, project_id: int, manage: bool = False) -> Project:
    """The project, if the user owns it or is a member (else 404); with `manage`, only for its owner (else 403)."""
    project = get_object_or_404(access.member_projects(request.user), pk=project_id)
    if manage and project.owner_id != request.user.pk:
        raise PermissionDenied("Only the project's owner manages its members.")
    return project


def project_list(request):
    form = ProjectForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        project = Project.objects.create(name=form.cleaned_data["name"], owner=request.user)
        messages.success(request, f"Project “{project.name}” made: add its members here.")
        return redirect(project)
    projects = access.member_projects(request.user).select_related("owner")
    return render(request, "projects/project_list.html", {
        "form": form, "rows": [(project, access.role_of(request.user, project)) for project in projects]})


def project_detail(request, project_id: int):
    project = member_project(request, project_id)
    return render(request, "projects/project_detail.html", {
        "project": project, "role": access.role_of(request.user, project),
        "members": project.memberships.select_related("user"), "form": MemberForm(project=project),
        "experiments": project.experiments.filter(sweep_trial__isnull=True, suite_task__isnull=True).order_by(
            "-created")[:50],
        "sweeps": project.sweeps.order_by("-created")[:50], "suites": project.suites.order_by("-created")[:50]})


@require_POST
def member_add(request, project_id: int):
    """Add a member with a role, or give an existing member another role."""
    project = member_project(request, project_id, manage=True)
    form = MemberForm(request.POST, project=project)
    if form.is_valid():
        membership = form.save()
        messages.success(request, f"{membership.user.get_username()} is now a {membership.role} of the project.")
    for errors in form.errors.values():
        for error in errors:
            messages.error(request, error)
    return redirect(project)


@require_POST
def member_remove(request, project_id: int):
    project = member_project(request, project_id, manage=True)
    removed, _ = Membership.objects.filter(project=project, user__username=request.POST.get("username", "")).delete()
    if removed:
        messages.success(request, "Removed: they no longer see anything of the project.")
    return redirect(project)
