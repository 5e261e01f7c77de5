"""`python -m rlweb_client import-tensorboard DIR --experiment NAME`: send a TensorBoard log folder to the site,
zipped (its event files and folders, nothing else), as finished runs of the logged experiment NAME, one per folder
holding event files (a `runs/` folder of several runs makes several); the server reads the scalars
(rlweb/logged/tensorboard.py). Standard library only."""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path
from typing import Optional

from rlweb_client.run import VERSION
from rlweb_client.transport import Api, Refused, Unreachable

EVENT_FILE = "events.out.tfevents"


def zip_folder(folder: Path, archive: Path) -> int:
    """Zip the event files under `folder` (links are not followed) into `archive`; returns how many."""
    count = 0
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        for path in sorted(folder.rglob(f"{EVENT_FILE}*")):
            if path.is_file() and not path.is_symlink():
                bundle.write(path, path.relative_to(folder).as_posix())
                count += 1
    return count


def import_folder(folder: Path, experiment: str, name: Optional[str], url: Optional[str],
                  token: Optional[str]) -> int:
    """0 when the site made the run (its address is printed), else 1 with why."""
    if not url or not token:
        print("give the site's address and an API token (--url and --token, or RLWEB_URL and RLWEB_TOKEN)")
        return 1
    if not folder.is_dir():
        print(f"{folder} is not a folder")
        return 1
    with tempfile.TemporaryDirectory(prefix="rlweb-tensorboard-") as scratch:
        archive = Path(scratch) / f"{folder.resolve().name or 'tensorboard'}.zip"
        if not zip_folder(folder, archive):
            print(f"no TensorBoard event files ({EVENT_FILE}*) in {folder}")
            return 1
        api = Api(url, token, user_agent=f"rlweb-client/{VERSION}", timeout=600)
        fields = {"experiment": experiment, **({"name": name} if name else {})}
        try:
            answer = api.post_file("/logged-runs/import-tensorboard", fields, str(archive))
        except (Refused, Unreachable) as error:
            print(f"{folder}: not imported: {error}")
            return 1
    made = answer.get("runs") or [{"id": answer["id"], "name": ".", "url": answer.get("url", "")}]  # older sites
    if len(made) == 1:
        print(f"{folder}: imported as run {made[0]['id']}: {made[0]['url']}")
    else:
        print(f"{folder}: imported {len(made)} runs, one per folder of event files:")
        for run in made:
            print(f"  {run['name']}: run {run['id']}: {run['url']}")
    return 0


def add_command(commands) -> None:
    command = commands.add_parser("import-tensorboard", help="import a TensorBoard log folder as finished runs",
                                  description="Send the TensorBoard event files under FOLDER as finished runs of "
                                              "the logged experiment NAME, one per folder holding event files.")
    command.add_argument("folder", type=Path, help="the log folder, e.g. ./runs/ppo_1, or ./runs for every run in it")
    command.add_argument("--experiment", required=True, help="the experiment's name (made on first use)")
    command.add_argument("--name", help="the run's label (default: the folder's name; with several runs, each is "
                                        "NAME/its folder)")
    command.add_argument("--url", default=os.environ.get("RLWEB_URL"), help="the rlweb site (default: $RLWEB_URL)")
    command.add_argument("--token", default=os.environ.get("RLWEB_TOKEN"), help="an API token (default: $RLWEB_TOKEN)")


def add_watch_command(commands) -> None:
    """`watch-tensorboard` (tensorboard_watch.py, which needs TensorBoard's reader and is imported when it runs)."""
    command = commands.add_parser(
        "watch-tensorboard", help="follow a TensorBoard log folder and send its scalars live",
        description="Follow FOLDER while scripts write TensorBoard logs into it and send each folder of event "
                    "files, as it grows, as a live run of the logged experiment NAME. Ctrl-C finishes the runs.")
    command.add_argument("folder", type=Path, help="the log folder, e.g. ./runs (it may not exist yet)")
    command.add_argument("--experiment", required=True, help="the experiment's name (made on first use)")
    command.add_argument("--idle", type=float, default=600.0,
                         help="seconds without new scalars after which a run is finished (default 600)")
    command.add_argument("--interval", type=float, default=2.0, help="seconds between looks (default 2)")
    command.add_argument("--until-idle", action="store_true",
                         help="end once every run found has finished, instead of waiting for more")
    command.add_argument("--videos", type=Path, default=None,
                         help="a folder of episode videos: each run's are in VIDEOS/<its folder's name>, as CleanRL's "
                              "--capture-video writes them (videos/NAME beside runs/NAME); uploaded as they appear")
    command.add_argument("--project", type=int, default=None, help="a project's id (default: $RLWEB_PROJECT)")
    command.add_argument("--url", default=os.environ.get("RLWEB_URL"), help="the rlweb site (default: $RLWEB_URL)")
    command.add_argument("--token", default=os.environ.get("RLWEB_TOKEN"), help="an API token (default: $RLWEB_TOKEN)")
