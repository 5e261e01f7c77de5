"""What a run logged from a user's own script (rlweb_client, through /api/logged-runs) knows beyond a `Run`: where
it came from, and how far its points are stored. Its experiment's algorithm is `experiments.models.LOGGED`."""

from django.db import models

from rlweb.experiments.models import Run


class LoggedRun(models.Model):
    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="logged")
    name = models.CharField(max_length=200, blank=True, help_text="The label its script gave it.")
    host = models.CharField(max_length=200, blank=True, help_text="The machine the script ran on.")
    command = models.TextField(blank=True, help_text="The script's command line.")
    git_commit = models.CharField(max_length=64, blank=True, help_text="The commit the client saw checked out.")
    client_version = models.CharField(max_length=50, blank=True)
    config = models.JSONField(default=dict, blank=True, help_text="The script's configuration, as it sent it.")
    stored_through = models.PositiveBigIntegerField(
        default=0, help_text="The highest point seq stored: a point at or below it is a repeat, dropped (runs.py).")

    def __str__(self):
        return f"run {self.run_id} logged from {self.host or 'an unknown host'}"
