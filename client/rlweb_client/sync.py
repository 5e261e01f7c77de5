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
INIT_ONLY = ("op", "local_id", "server", "resume", "from_step")  # fields of the init line not sent to create a run
RESUME_FIELDS = ("host", "command", "git_commit", "client_version")


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
    offsets = next((record for record in synced if "seq_offset" in record), {})
    if run_id is None:
        run_id, offsets = start_run(api, path, init)
        append_record(path, {"op": "synced", "run_id": run_id, **offsets})
    seq_offset, time_offset = offsets.get("seq_offset", 0), offsets.get("time_offset", 0.0)
    if seq_offset or time_offset:  # a run resumed offline: its points number on after those stored before
        records = [(line, shifted(record, seq_offset, time_offset)) for line, record in records]
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


def start_run(api: Api, path: Path, init: dict) -> tuple:
    """The run the file's points go to: a new one, or the one it resumes (`init(resume=...)` while offline); its id
    and, for a resumed run, how far its points' seqs and times are shifted (they were numbered from 1 and 0 s)."""
    if init.get("resume") is not None:
        body = {key: init[key] for key in RESUME_FIELDS if key in init}
        try:
            answer = api.post(f"/logged-runs/{init['resume']}/resume", {**body, "from_step": init.get("from_step")})
        except Refused as error:
            if error.status != 404:
                raise
            print(f"{path.name}: run {init['resume']}, which it resumes, is gone ({error.detail}); making a new run")
        else:
            print(f"{path.name}: resumed run {answer['id']}: {urljoin(api.site, str(answer.get('url') or ''))}")
            return answer["id"], {"seq_offset": answer["next_seq"] - 1, "time_offset": answer["seconds"]}
    answer = api.post("/logged-runs", {key: value for key, value in init.items() if key not in INIT_ONLY})
    print(f"{path.name}: created run {answer['id']}: {urljoin(api.site, str(answer.get('url') or ''))}")
    return answer["id"], {}


def shifted(record: dict, seq_offset: int, time_offset: float) -> dict:
    """An offline line of a resumed run with its points' seqs and times (and its finish's last seq) shifted."""
    if record.get("op") == "points":
        return {**record, "points": [{**point, "seq": point["seq"] + seq_offset,
                                      "time": round(point["time"] + time_offset, 3)} for point in record["points"]]}
    if record.get("op") == "finish" and record.get("last_seq"):
        return {**record, "last_seq": record["last_seq"] + seq_offset}
    return record


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
