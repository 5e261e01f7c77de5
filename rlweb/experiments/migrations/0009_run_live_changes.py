from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0008_experiment_preset'),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='live_changes',
            field=models.JSONField(blank=True, default=list, help_text='Hyperparameter changes asked for while it trained, in order: [{id, values, requested_at}, with step, seq and changes ({name: {old, new}}) or error once its worker applied or refused it] (live_changes.py).'),
        ),
    ]
