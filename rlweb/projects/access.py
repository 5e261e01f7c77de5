"""Who may see and who may act on an experiment, a run, a sweep or a file: the one rule every page, stream, file
and API endpoint uses (through the access helpers `owned_experiment`, `owned_run`, `owned_sweep`).

- See: its owner, and every member of its project (the project's owner, viewers, editors).
- Act (launch into the project, cancel, resume, change, delete, notes, checkpoint jobs, sweeps): its owner, the
  project's owner and its editors. A viewer who tries gets 403; someone who cannot see it gets 404.
- Move it into a project or back to private: its owner alone.

The rule is written as filters over the owner and project fields, so it knows no model of experiments or sweeps:
`prefix` is the path from the queried model to the object that has them (`experiment__` for a run,
`run__experiment__` for a checkpoint)."""

from __future__ import annotations

from django.db.models import Q

from rlweb.projects.models import Membership, Project


def member_projects(user):
    """The projects `user` sees: owned, or a member of (any role)."""
    return Project.objects.filter(Q(owner=user) | Q(memberships__user=user)).distinct()


def editable_projects(user):
    """The projects `user` may launch into: owned, or an editor of."""
    return Project.objects.filter(
        Q(owner=user) | Q(memberships__user=user, memberships__role=Membership.Role.EDITOR)).distinct()


def visible(user, prefix: str = "") -> Q:
    """The rows `user` sees: their own, and those in a project they belong to."""
    return Q(**{f"{prefix}owner": user}) | Q(**{f"{prefix}project__in": member_projects(user).values("pk")})


def can_edit(user, shared) -> bool:
    """Whether `user` may act on `shared` (an experiment or a sweep: anything with owner_id and project_id)."""
    if shared.owner_id == user.pk:
        return True
    if shared.project_id is None:
        return False
    return editable_projects(user).filter(pk=shared.project_id).exists()


def can_move(user, shared) -> bool:
    """Whether `user` may put `shared` in a project or take it out: only its owner decides who sees their work."""
    return shared.owner_id == user.pk


def role_of(user, project: Project) -> str:
    """"owner", "editor", "viewer", or "" for someone outside the project."""
    if project.owner_id == user.pk:
        return "owner"
    return Membership.objects.filter(project=project, user=user).values_list("role", flat=True).first() or ""
