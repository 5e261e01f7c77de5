"""Helpers for the web tests: a tiny DQN experiment, the form data that creates it, and SSE readers."""

from __future__ import annotations

import json

import trainer
from asgiref.sync import async_to_sync
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import AsyncClient

PASSWORD = "a long test password 1"

# A DQN small enough to train in a few seconds: it still runs every part of the path
TINY_DQN = {"learning_starts": 50, "batch_size": 16, "buffer_size": 1000, "train_frequency": 4,
            "gradient_steps": 1, "target_update_interval": 50, "hidden_layers": "32,32"}
TINY_STEPS = 400


def form_data(**overrides) -> dict:
    """What the browser posts for a tiny DQN CartPole experiment."""
    data = {"name": "tiny", "algorithm": "dqn", "env_id": "CartPole-v1", "num_seeds": "1",
            "total_steps": str(TINY_STEPS), "eval_interval": "200", "eval_episodes": "2",
            "checkpoint_interval": "0", "video_interval": "0", "device": "cpu", "auto_resume": "on",
            "max_auto_resumes": "3"}
    data.update({f"hp_{param.name}": str(param.default) for param in trainer.get_spec("dqn").params()})
    data.update({f"hp_{name}": str(value) for name, value in TINY_DQN.items()})
    data.update(overrides)
    return data


def parse_sse(text: str) -> list[dict]:
    """The messages of an SSE body: dicts with `event` (default "message"), `id`, `data` and comments."""
    messages = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        message = {"event": "message", "id": None, "data": "", "comment": None}
        for line in block.split("\n"):
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "":
                message["comment"] = value
            elif field in ("event", "id", "data", "retry"):
                message[field] = value
        messages.append(message)
    return messages


def events_of(messages: list[dict]) -> list[dict]:
    """The run events in parsed SSE messages; each one's SSE id must be its `seq`."""
    events = [json.loads(message["data"]) for message in messages if message["event"] == "message" and message["data"]]
    ids = [int(message["id"]) for message in messages if message["event"] == "message" and message["data"]]
    assert ids == [event["seq"] for event in events]
    return events


def read_to_end(chunks) -> list:
    """Every chunk of an async iterator (a live stream, or the content Django's test Client got from one), read in
    this thread through async_to_sync: the stream's database reads run here, in the test's transaction."""
    async def read():
        return [chunk async for chunk in chunks]

    return async_to_sync(read)()


def body_of(response) -> bytes:
    """The whole body of a response from Django's test Client. The live streams are async generators, which that
    Client does not iterate: their content is read to the end here."""
    if not response.streaming:
        return response.content
    if response.is_async:
        return b"".join(read_to_end(response.streaming_content))
    return b"".join(response.streaming_content)


def sse_text(response) -> str:
    """The body of an SSE response from Django's test Client, which reads the view's async generator to its end."""
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/event-stream"
    return body_of(response).decode()


def read_sse(response) -> list[dict]:
    """Every run event a (sync, test client) SSE response sends before it ends."""
    messages = parse_sse(sse_text(response))
    assert messages[-1]["event"] == "end"
    return events_of(messages)


async def async_sse_text(user, url: str, **headers) -> str:
    """The body of an SSE response served through Django's ASGI handler (the async generator path)."""
    client = AsyncClient()
    await client.aforce_login(user)
    response = await client.get(url, headers=headers)
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    assert response.is_async, "under ASGI the stream must be an async generator"
    return "".join([chunk.decode() async for chunk in response.streaming_content])


async def read_sse_async(user, url: str, **headers) -> list[dict]:
    messages = parse_sse(await async_sse_text(user, url, **headers))
    assert messages[-1]["event"] == "end"
    return events_of(messages)



def migrate(target: tuple[str, str]):
    """Migrate the test database to `target` (app, migration name); the apps as they were there."""
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    return executor.loader.project_state([target]).apps


def migrate_to_latest() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def register_idle_workers(*queue_lists: str, cores: int = 2) -> list[str]:
    """Write one live entry per argument into the real worker registry (workers.py), as idle Celery workers would:
    "cpu,gpu" is a worker of both queues; a gpu worker says it has a GPU. The scheduler sends a queued run only to a free worker: with these, the
    run's message goes out (and waits in Redis, since no process consumes it). Returns the node names."""
    import time

    from rlweb.experiments import workers

    nodes = []
    for index, queues in enumerate(queue_lists):
        node = f"test-worker-{index}@test-host"
        gpu = "gpu" in queues.split(",")  # a gpu worker has one: the form accepts device cuda only then
        workers.write_entry({"node": node, "host": "test-host", "queues": queues,
                             "device": "NVIDIA test GPU" if gpu else "cpu", "gpu_memory_mb": 80000 if gpu else 0, "visible_devices": "", "pid": 1000 + index, "started": time.time(),
                             "cores": cores})
        nodes.append(node)
    return nodes
