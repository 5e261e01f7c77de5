"""`python -m rlweb_client sync DIR`: upload the runs written to offline files in DIR. Each file is replayed in
order: its init creates the run (unless a `synced` line says it exists), points the server stored already are
skipped (its `stored_through`), and every step done is recorded as a `{"op": "synced", ...}` line at the end of the
file, so a sync that is interrupted and run again sends nothing twice."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Optional
from urllib.parse import urljoin

from rlweb_client.batches import count_fitting, max_bytes_of
from rlweb_client.offline import append_record, read_records
from rlweb_client import tensorboard
from rlweb_client.run import VERSION
from rlweb_client.transport import Api, Refused, Unreachable

POINTS_PER_REQUEST = 1000
INIT_ONLY = ("op", "local_id", "server")  # fields of the init line that are not part of the request


class Skipped(Exception):
    """This file cannot be synced as it is (no init line, no server to send it to)."""


def sync_folder(folder: Path, url: Optional[str], token: Optional[str]) -> int:
    """Sync every offline file in `folder`, oldest first; 0 when all are synced, else 1."""
    paths = sorted(folder.glob("*.jsonl"))
    if not paths:
        print(f"no offline runs in {folder}")
        return 0 if folder.is_dir() else 1
    status = 0
    for path in paths:
        try:
            sync_file(path, url, token)
        except Unreachable as error:
            print(f"{path.name}: cannot reach the server ({error}); run the same command again later")
            return 1
        except (Refused, Skipped) as error:
            print(f"{path.name}: not synced: {error}")
            status = 1
    return status


def sync_file(path: Path, url: Optional[str], token: Optional[str]) -> None:
    records = list(read_records(path))
    init = next((record for _, record in records if record.get("op") == "init"), None)
    synced = [record for _, record in records if record.get("op") == "synced"]
    if init is None:
        raise Skipped("it has no init line")
    run_id = next((record["run_id"] for record in reversed(synced) if "run_id" in record), None)
    if any(record.get("finished") for record in synced):
        print(f"{path.name}: already synced (run {run_id})")
        return
    site = url or init.get("server")
    if not site or not token:
        raise Skipped("give the site's address and an API token (--url and --token, or RLWEB_URL and RLWEB_TOKEN)")
    api = Api(site, token, user_agent=f"rlweb-client/{VERSION}")
    if run_id is None:
        answer = api.post("/logged-runs", {key: value for key, value in init.items() if key not in INIT_ONLY})
        run_id = answer["id"]
        append_record(path, {"op": "synced", "run_id": run_id})
        print(f"{path.name}: created run {run_id}: {urljoin(api.site, str(answer.get('url') or ''))}")
    found = api.get(f"/logged-runs/{run_id}")
    stored_through, max_bytes = found["stored_through"] or 0, max_bytes_of(found)
    uploaded_lines = {record["line"] for record in synced if "line" in record}
    total = sum(len(record.get("points", [])) for _, record in records if record.get("op") == "points")
    waiting = []

    def send_waiting():
        nonlocal stored_through
        start = 0
        while start < len(waiting):
            batch = waiting[start:start + POINTS_PER_REQUEST]
            batch = batch[:count_fitting(batch, max_bytes)]
            start += len(batch)
            answer = api.post(f"/logged-runs/{run_id}/points", {"points": batch})
            stored_through = max(stored_through, answer["stored_through"])
            append_record(path, {"op": "synced", "run_id": run_id, "stored_through": stored_through})
            print(f"{path.name}: points stored through {stored_through} (of {total})")
        waiting.clear()

    for line, record in records:
        op = record.get("op")
        if op == "points":
            waiting.extend(point for point in record["points"] if point["seq"] > stored_through)
            continue
        if op in ("file", "finish"):
            send_waiting()
        if op == "file" and line not in uploaded_lines:
            file_path = path.parent / record["path"]  # relative to the folder when copied there
            try:
                api.post_file(f"/logged-runs/{run_id}/files", {"kind": record["kind"], "step": record["step"]},
                              str(file_path))
            except OSError as error:
                print(f"{path.name}: cannot read {file_path} ({error}); the {record['kind']} is not uploaded")
                continue
            append_record(path, {"op": "synced", "run_id": run_id, "line": line})
            print(f"{path.name}: uploaded the {record['kind']} of step {record['step']}")
        elif op == "finish":
            api.post(f"/logged-runs/{run_id}/finish", {key: value for key, value in record.items() if key != "op"})
            append_record(path, {"op": "synced", "run_id": run_id, "finished": True})
            print(f"{path.name}: run {run_id} {record.get('status')}")
    send_waiting()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlweb_client", description="rlweb's logging client.")
    commands = parser.add_subparsers(dest="command", required=True)
    sync = commands.add_parser("sync", help="upload the runs written to offline files in a folder",
                               description="Upload the runs in the offline files of FOLDER (safe to interrupt "
                                           "and run again: nothing is sent twice).")
    sync.add_argument("folder", type=Path, help="the offline folder, e.g. ./rlweb-offline")
    sync.add_argument("--url", default=os.environ.get("RLWEB_URL"),
                      help="the rlweb site (default: $RLWEB_URL, else the one each file was logged to)")
    sync.add_argument("--token", default=os.environ.get("RLWEB_TOKEN"), help="an API token (default: $RLWEB_TOKEN)")
    tensorboard.add_command(commands)
    tensorboard.add_watch_command(commands)
    arguments = parser.parse_args(argv)
    if arguments.command == "watch-tensorboard":
        try:
            from rlweb_client import tensorboard_watch
        except ImportError as error:
            print(f"watch-tensorboard reads event files with TensorBoard's reader ({error}): pip install tensorboard")
            return 1
        return tensorboard_watch.main(arguments)
    if arguments.command == "import-tensorboard":
        return tensorboard.import_folder(arguments.folder, arguments.experiment, arguments.name, arguments.url,
                                         arguments.token)
    return sync_folder(arguments.folder, arguments.url, arguments.token)


if __name__ == "__main__":
    sys.exit(main())
