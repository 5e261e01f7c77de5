import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0003_run_start_step_and_resume'),
    ]

    operations = [
        migrations.CreateModel(
            name='MetricBucket',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('key', models.CharField(max_length=200)),
                ('index', models.PositiveIntegerField()),
                ('width', models.PositiveIntegerField()),
                ('count', models.PositiveIntegerField()),
                ('last_seq', models.PositiveBigIntegerField(help_text='The last event folded in.')),
                ('points', models.JSONField(help_text='[[seq, step, time, value]] of the smallest and the largest value.')),
                ('band', models.JSONField(blank=True, help_text='[lowest mean - std, highest mean + std].', null=True)),
                ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='metric_buckets', to='experiments.run')),
            ],
            options={
                'ordering': ['run_id', 'key', 'index'],
                'constraints': [models.UniqueConstraint(fields=('run', 'key', 'index'), name='unique_metric_bucket')],
            },
        ),
    ]
