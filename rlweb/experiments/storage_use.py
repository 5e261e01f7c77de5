"""What a user's checkpoints and videos take in storage, and their quota.

The quota is `settings.STORAGE_QUOTA_MB` megabytes (0: no limit), or the admin's `StorageQuota` for the user. Sizes
are the `size` columns stored with each file, so a sum is one query and no storage call. At the quota the form
refuses new runs (forms.py), and a running run stores only its best and final checkpoints (sink.py): its periodic
checkpoints and videos past the limit are dropped, and its log says so.
"""

from __future__ import annotations

from django.conf import settings
from django.db.models import Count, Sum

from rlweb.experiments.models import Checkpoint, Experiment, StorageQuota, Video

MEGABYTE = 1024 * 1024


def quota_bytes(user) -> int | None:
    """The bytes `user` may keep; None: no limit."""
    own = StorageQuota.objects.filter(user=user).values_list("megabytes", flat=True).first()
    megabytes = settings.STORAGE_QUOTA_MB if own is None else own
    return megabytes * MEGABYTE if megabytes > 0 else None


def used_bytes(user) -> int:
    """Bytes of `user`'s stored checkpoints and videos."""
    checkpoints = Checkpoint.objects.filter(run__experiment__owner=user).aggregate(total=Sum("size"))["total"]
    videos = Video.objects.filter(run__experiment__owner=user).aggregate(total=Sum("size"))["total"]
    return (checkpoints or 0) + (videos or 0)


def room_bytes(user) -> int | None:
    """Bytes `user` may still store; None: no limit."""
    quota = quota_bytes(user)
    return None if quota is None else max(0, quota - used_bytes(user))


def use_by_experiment(user) -> list[dict]:
    """`user`'s experiments that keep files, the largest first: the experiment, its checkpoints and videos
    (count, bytes) and its total bytes."""
    use: dict[int, dict] = {}
    for kind, model in (("checkpoints", Checkpoint), ("videos", Video)):
        grouped = model.objects.filter(run__experiment__owner=user).values("run__experiment").annotate(
            count=Count("id"), total=Sum("size"))
        for group in grouped:
            row = use.setdefault(group["run__experiment"], {"checkpoints": 0, "checkpoint_bytes": 0, "videos": 0,
                                                            "video_bytes": 0})
            row[kind] = group["count"]
            row["checkpoint_bytes" if kind == "checkpoints" else "video_bytes"] = group["total"] or 0
    experiments = Experiment.objects.in_bulk(list(use))
    rows = [{"experiment": experiments[pk], **row, "bytes": row["checkpoint_bytes"] + row["video_bytes"]}
            for pk, row in use.items()]
    return sorted(rows, key=lambda row: -row["bytes"])


def describe(size: int) -> str:
    """`size` bytes as people read it: 403.2 MB."""
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:,} {unit}" if unit == "bytes" else f"{size:,.1f} {unit}"
        size /= 1024
    return ""


def full_message(user) -> str | None:
    """Why `user` may start no new run (their storage is full), or None."""
    quota = quota_bytes(user)
    if quota is None:
        return None
    used = used_bytes(user)
    if used < quota:
        return None
    return (f"Your checkpoints and videos take {describe(used)} of the {describe(quota)} this site allows you: "
            f"delete experiments you no longer need (the storage page lists what takes the space), or ask the admin "
            f"for more, before starting new runs.")
