from django import forms
from django.contrib.auth import get_user_model

from rlweb.projects.models import Membership, Project


class ProjectForm(forms.ModelForm):
    class Meta:
        model = Project
        fields = ["name"]


class MemberForm(forms.Form):
    """Add a member by username, or change an existing member's role (the same username again)."""

    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.VIEWER)

    def __init__(self, *args, project: Project, **kwargs):
        super().__init__(*args, **kwargs)
        self.project = project

    def clean_username(self):
        user = get_user_model().objects.filter(username=self.cleaned_data["username"].strip()).first()
        if user is None:
            raise forms.ValidationError("No user has this username.")
        if user.pk == self.project.owner_id:
            raise forms.ValidationError("The project's owner sees and changes everything in it already.")
        return user

    def save(self) -> Membership:
        membership, _ = Membership.objects.update_or_create(
            project=self.project, user=self.cleaned_data["username"], defaults={"role": self.cleaned_data["role"]})
        return membership
