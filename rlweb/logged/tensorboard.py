"""Import a TensorBoard log folder as a finished logged run: the page (rlweb/logged/views.py), the API
(`POST /api/logged-runs/import-tensorboard`) and `python -m rlweb_client import-tensorboard DIR` send it as a .zip
or .tar.gz archive, unpacked here into a temporary folder and read with TensorBoard's own reader (EventAccumulator).

Unpacking is bounded and safe: a member with an absolute path or `..`, a link or a device, more than MAX_MEMBERS
members, or more than `settings.TENSORBOARD_IMPORT_MAX_MB` in all (the archive itself, and its members unpacked)
is refused before anything is stored. As in TensorBoard, each folder holding event files is a run: an archive of a
`runs/` folder with one subfolder per run (CleanRL's, SB3's, Lightning's) makes one run each, named by its folder.
Each scalar becomes a value of the point at its step: the tag is the metric name, the time is seconds since the
run's first scalar's wall time. Characters a metric name may not hold become `_`.
"""

from __future__ import annotations

import os
import re
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from django.conf import settings

from rlweb.experiments import storage_use
from rlweb.experiments.models import Run
from rlweb.logged import runs
from rlweb.logged.runs import Refused

MAX_MEMBERS = 10_000
EVENT_FILE = "events.out.tfevents"
NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_./ -]")
ARCHIVE_SUFFIX = re.compile(r"\.(zip|tar\.gz|tgz|tar)$", re.IGNORECASE)  # "ppo_1.zip" names its run "ppo_1"


def max_bytes() -> int:
    return settings.TENSORBOARD_IMPORT_MAX_MB * storage_use.MEGABYTE


def too_large(what: str, size: int) -> Refused:
    return Refused(413, f"{what} takes {storage_use.describe(size)}; an imported TensorBoard folder may take "
                        f"{storage_use.describe(max_bytes())} (RLWEB_TENSORBOARD_IMPORT_MAX_MB).")


def import_archive(user, experiment: str, upload, name: str = "") -> list[Run]:
    """Finished logged runs of `user`'s experiment `experiment`, one per folder holding event files in `upload` (a
    Django UploadedFile of a .zip or .tar.gz), with their scalars; in the archive's order of folders. Refused (400,
    413) with why, storing nothing: every folder is read before the first run is made."""
    if upload.size > max_bytes():
        raise too_large("The archive", upload.size)
    with tempfile.TemporaryDirectory(prefix="rlweb-tensorboard-") as folder:
        unpack(upload, Path(folder))
        found = read_runs(Path(folder))
    if not found:
        raise Refused(400, "The archive holds no TensorBoard scalars (no events.out.tfevents file with a scalar).")
    label = name or ARCHIVE_SUFFIX.sub("", getattr(upload, "name", "") or "")
    made = []
    for where, points in found:
        run_name = label if len(found) == 1 else f"{name}/{where}" if name else where
        run = runs.create(user, experiment, {}, name=run_name[:200],
                          command="imported from a TensorBoard log folder" + ("" if where == "." else f": {where}"))
        for start in range(0, len(points), runs.MAX_POINTS):
            runs.add_points(run, points[start:start + runs.MAX_POINTS])
        runs.finish(run, Run.Status.SUCCEEDED, last_seq=len(points), reason="imported from TensorBoard")
        made.append(run)
    return made


# --- unpacking ---------------------------------------------------------------------------------------------

def unpack(upload, folder: Path) -> None:
    upload.seek(0)
    if zipfile.is_zipfile(upload):
        upload.seek(0)
        with zipfile.ZipFile(upload) as archive:
            unpack_zip(archive, folder)
        return
    upload.seek(0)
    try:
        with tarfile.open(fileobj=upload, mode="r:*") as archive:
            unpack_tar(archive, folder)
    except (tarfile.ReadError, EOFError, OSError) as error:
        raise Refused(400, f"The file is neither a .zip nor a .tar.gz archive ({error}).") from None


def checked_path(name: str) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or re.match(r"[A-Za-z]:", name):
        raise Refused(400, f"The archive's member {name[:200]!r} points outside its folder (an absolute path or "
                           f"`..`): nothing was imported.")
    return path


def unpack_zip(archive: zipfile.ZipFile, folder: Path) -> None:
    members = archive.infolist()
    check_count(len(members))
    for member in members:
        checked_path(member.filename)
        if (member.external_attr >> 16) & 0o170000 == 0o120000:
            raise Refused(400, f"The archive's member {member.filename[:200]!r} is a link: nothing was imported.")
    if sum(member.file_size for member in members) > max_bytes():
        raise too_large("Unpacked, the archive", sum(member.file_size for member in members))
    written = 0
    for member in members:
        if member.is_dir():
            continue
        target = folder / checked_path(member.filename)
        target.parent.mkdir(parents=True, exist_ok=True)
        with archive.open(member) as source, open(target, "wb") as destination:
            while chunk := source.read(1024 * 1024):
                written += len(chunk)
                if written > max_bytes():  # a member larger than its header said
                    raise too_large("Unpacked, the archive", written)
                destination.write(chunk)


def unpack_tar(archive: tarfile.TarFile, folder: Path) -> None:
    members = archive.getmembers()
    check_count(len(members))
    for member in members:
        checked_path(member.name)
        if not (member.isfile() or member.isdir()):
            raise Refused(400, f"The archive's member {member.name[:200]!r} is a link or a device: nothing was "
                               f"imported.")
    total = sum(member.size for member in members if member.isfile())
    if total > max_bytes():
        raise too_large("Unpacked, the archive", total)
    archive.extractall(folder, members=members, filter="data")


def check_count(count: int) -> None:
    if count > MAX_MEMBERS:
        raise Refused(413, f"The archive holds {count:,} files; an imported TensorBoard folder may hold "
                           f"{MAX_MEMBERS:,}.")


# --- reading -----------------------------------------------------------------------------------------------

def read_runs(folder: Path) -> list[tuple[str, list[dict]]]:
    """Every folder under `folder` holding event files with scalars, as (its path from their common parent, "." when
    there is one, and its points), sorted by path."""
    run_folders = sorted({path.parent for path in folder.rglob(f"{EVENT_FILE}*") if path.is_file()})
    common = Path(os.path.commonpath(run_folders)) if run_folders else folder
    found = [(run_folder.relative_to(common).as_posix(), read_points(run_folder)) for run_folder in run_folders]
    return [(where, points) for where, points in found if points]


def read_points(run_folder: Path) -> list[dict]:
    """The scalars of the event files in `run_folder` (one TensorBoard run), as logged-run points (seq 1, 2, ...):
    one per step, with every tag's value at that step."""
    # TensorBoard's reader: about 1 s of CPU, imported by the import only, not at every web process's start
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    by_step: dict[int, dict] = {}
    first_time = None
    reader = EventAccumulator(str(run_folder), size_guidance={SCALARS: 0})  # 0: every scalar, none sampled
    reader.Reload()
    for tag in reader.Tags()[SCALARS]:
        metric = metric_name(tag)
        for scalar in reader.Scalars(tag):
            point = by_step.setdefault(scalar.step, {"wall_time": scalar.wall_time, "values": {}})
            point["wall_time"] = min(point["wall_time"], scalar.wall_time)
            point["values"][metric] = scalar.value
            first_time = scalar.wall_time if first_time is None else min(first_time, scalar.wall_time)
    return [{"seq": seq, "step": step, "time": max(0.0, by_step[step]["wall_time"] - first_time),
             "values": by_step[step]["values"]} for seq, step in enumerate(sorted(by_step), start=1)]


def metric_name(tag: str) -> str:
    return NOT_IN_A_NAME.sub("_", tag)[:runs.MAX_NAME_LENGTH] or "_"
