"""Logged experiments were made with a stock description that said again what their page's heading says (and was
wrong for imported TensorBoard folders): it is taken off the experiments that still have it, as made."""

from django.db import migrations

STOCK = "Runs logged from a script through the API (rlweb_client)."


def forget_stock_description(apps, schema_editor):
    Experiment = apps.get_model("experiments", "Experiment")
    Experiment.objects.filter(algorithm="logged", description=STOCK).update(description="")


class Migration(migrations.Migration):
    dependencies = [("logged", "0001_logged_runs"), ("experiments", "0023_run_environment")]
    operations = [migrations.RunPython(forget_stock_description, migrations.RunPython.noop)]
