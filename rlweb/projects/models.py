"""A project groups experiments, sweeps and logged runs (they point at it). Its owner adds members as viewers,
who see everything in it, or editors, who also launch into it, cancel, resume, change and delete. Who may do what
is decided in access.py alone."""

from django.conf import settings
from django.db import models
from django.urls import reverse


class Project(models.Model):
    name = models.CharField(max_length=200)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="owned_projects")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "pk"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("project-detail", args=[self.pk])


class Membership(models.Model):
    class Role(models.TextChoices):
        VIEWER = "viewer", "viewer: sees everything in the project"
        EDITOR = "editor", "editor: also launches, cancels, resumes, changes and deletes"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        ordering = ["user__username"]
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="one_membership_per_user")]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} ({self.role})"
