from django import forms
from django.conf import settings
from django.contrib import admin

from rlweb.experiments import storage_use
from rlweb.experiments.models import Checkpoint, Event, Experiment, QueueLimit, Run, StorageQuota


class RunInline(admin.TabularInline):
    model = Run
    fields = ["seed", "status", "steps_done", "total_steps", "eval_return_mean", "finished_at"]
    readonly_fields = fields
    extra = 0
    show_change_link = True
    can_delete = False


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "algorithm", "env_id", "num_seeds", "total_steps", "device", "created"]
    list_filter = ["algorithm", "device"]
    search_fields = ["name", "env_id", "owner__username"]
    inlines = [RunInline]


class CheckpointInline(admin.TabularInline):
    model = Checkpoint
    fields = ["tag", "step", "file", "created"]
    readonly_fields = ["created"]
    extra = 0


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "experiment", "seed", "status", "steps_done", "total_steps", "worker_host", "device_used",
                    "heartbeat_at", "eval_return_mean"]
    list_filter = ["status", "device_used"]
    search_fields = ["experiment__name", "task_id", "worker_host"]
    list_select_related = ["experiment"]
    inlines = [CheckpointInline]


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ["run", "seq", "kind", "step", "time"]
    list_filter = ["kind"]
    list_select_related = ["run__experiment"]
    raw_id_fields = ["run"]


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ["run", "tag", "step", "file", "size", "created"]
    list_filter = ["tag"]
    raw_id_fields = ["run"]


@admin.register(StorageQuota)
class StorageQuotaAdmin(admin.ModelAdmin):
    """A user's own quota, in place of settings.STORAGE_QUOTA_MB (RLWEB_STORAGE_QUOTA_MB) for them."""

    list_display = ["user", "megabytes", "used"]
    search_fields = ["user__username"]
    raw_id_fields = ["user"]

    @admin.display(description="Used now")
    def used(self, quota: StorageQuota) -> str:
        return storage_use.describe(storage_use.used_bytes(quota.user))


@admin.register(QueueLimit)
class QueueLimitAdmin(admin.ModelAdmin):
    """A user's own cap on runs training at once on one queue, in place of settings.MAX_RUNNING_PER_USER_PER_QUEUE
    (RLWEB_MAX_RUNNING_PER_USER_PER_QUEUE) for them there (scheduler.py)."""

    list_display = ["user", "queue", "max_running"]
    list_filter = ["queue"]
    search_fields = ["user__username"]
    raw_id_fields = ["user"]

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name == "queue":  # only the queues runs can go to
            names = ["cpu", "gpu", *settings.NAMED_QUEUES]
            return forms.ChoiceField(choices=[(name, name) for name in names], label="Queue")
        return super().formfield_for_dbfield(db_field, request, **kwargs)
