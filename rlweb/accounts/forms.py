from datetime import timedelta

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import UserCreationForm
from django.utils import timezone

from rlweb.accounts.models import Invitation


class SignupForm(UserCreationForm):
    """A new account. The first account of a fresh install also administers the site."""

    def save(self, commit=True):
        user = super().save(commit=False)
        if not get_user_model().objects.exists():
            user.is_staff = user.is_superuser = True
        if commit:
            user.save()
        return user


class InvitationForm(forms.ModelForm):
    class Meta:
        model = Invitation
        fields = ["note"]

    days = forms.IntegerField(label="Valid for (days)", min_value=1, max_value=90, initial=7)

    def save(self, created_by) -> Invitation:
        invitation = super().save(commit=False)
        invitation.created_by = created_by
        invitation.expires_at = timezone.now() + timedelta(days=self.cleaned_data["days"])
        invitation.save()
        return invitation
