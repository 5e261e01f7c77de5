"""Projects from code: list the user's projects (owned or a member of), make one, and, as its owner, add, re-role
and remove members; the same rules and form as the Projects page (rlweb/projects)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from django.shortcuts import get_object_or_404
from ninja import Router, Schema, Status

from rlweb.api.form_input import raise_form_errors
from rlweb.api.schemas import Body
from rlweb.projects import access
from rlweb.projects.forms import MemberForm, ProjectForm
from rlweb.projects.models import Membership, Project
from rlweb.projects.views import member_project

router = Router(tags=["projects"])


class MemberOut(Schema):
    username: str
    role: str

    @staticmethod
    def resolve_username(membership) -> str:
        return membership.user.get_username()


class ProjectOut(Schema):
    id: int
    name: str
    owner: str
    created: datetime
    members: list[MemberOut]

    @staticmethod
    def resolve_owner(project) -> str:
        return project.owner.get_username()

    @staticmethod
    def resolve_members(project) -> list:
        return list(project.memberships.select_related("user"))


class ProjectIn(Body):
    name: str


class MemberIn(Body):
    username: str
    role: Literal["viewer", "editor"] = "viewer"


@router.get("/projects", response=list[ProjectOut])
def project_list(request):
    """The projects you own or are a member of."""
    return access.member_projects(request.user).select_related("owner")


@router.post("/projects", response={201: ProjectOut})
def project_create(request, body: ProjectIn):
    form = ProjectForm(body.dict())
    if not form.is_valid():
        raise_form_errors(form)
    return Status(201, Project.objects.create(name=form.cleaned_data["name"], owner=request.user))


@router.get("/projects/{project_id}", response=ProjectOut)
def project_detail(request, project_id: int):
    return member_project(request, project_id)


@router.post("/projects/{project_id}/members", response=ProjectOut)
def member_add(request, project_id: int, body: MemberIn):
    """Add a member, or give a member another role; only the project's owner may (403 for a member)."""
    project = member_project(request, project_id, manage=True)
    form = MemberForm(body.dict(), project=project)
    if not form.is_valid():
        raise_form_errors(form)
    form.save()
    return project


@router.delete("/projects/{project_id}/members/{username}", response={204: None})
def member_remove(request, project_id: int, username: str):
    """Take a member's access away at once; only the project's owner may."""
    project = member_project(request, project_id, manage=True)
    get_object_or_404(Membership, project=project, user__username=username).delete()
    return Status(204, None)
