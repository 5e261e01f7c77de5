"""The ways rlweb is run and shipped: `make run` (rlweb/devserver.py), docker-compose.yml, .env.example."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from rlweb import devserver

REPO = Path(__file__).resolve().parent.parent
SETTINGS_VARIABLE = re.compile(r"""["'](RLWEB_[A-Z0-9_]+|DATABASE_URL|REDIS_URL)["']""")


def environment_variables_read_by_settings() -> set[str]:
    """Every RLWEB_*, DATABASE_URL and REDIS_URL named in settings.py: all of them are read from the
    environment there (os.environ.get, env_bool, env_int, env_list, dj_database_url)."""
    names = set(SETTINGS_VARIABLE.findall((REPO / "rlweb" / "settings.py").read_text()))
    if "dj_database_url.config(" in (REPO / "rlweb" / "settings.py").read_text():
        names.add("DATABASE_URL")  # dj_database_url reads it without naming it
    return names


def variables_in_env_example() -> set[str]:
    return set(re.findall(r"^#? ?([A-Z][A-Z0-9_]*)=", (REPO / ".env.example").read_text(), re.MULTILINE))


def test_ci_runs_every_folder_of_tests():
    """A folder of tests that .ci/run names in none of its parts would never run in CI (tests/scores once)."""
    ci = (REPO / ".ci" / "run").read_text()
    folders = {path.parent.relative_to(REPO).as_posix() for path in (REPO / "tests").rglob("test_*.py")}
    missed = sorted(folder for folder in folders - {"tests"} if not re.search(rf"{re.escape(folder)}\b", ci))
    assert not missed, f"test folders .ci/run does not run: {missed}"
    assert "tests/test_*.py" in ci and "make test" in ci  # the top folder's tests, and the pages' scripts (test-js)


def test_env_example_lists_every_variable_the_settings_read():
    read = environment_variables_read_by_settings()
    assert {"RLWEB_SECRET_KEY", "RLWEB_DEBUG", "REDIS_URL", "DATABASE_URL"} <= read  # the parsing works
    assert read - variables_in_env_example() == set()


def test_env_example_lists_nothing_that_nobody_reads():
    compose = (REPO / "docker-compose.yml").read_text()
    used_by_compose = set(re.findall(r"\$\{([A-Z0-9_]+)", compose))
    stale = variables_in_env_example() - environment_variables_read_by_settings() - used_by_compose
    assert stale == set()


@pytest.fixture(scope="module")
def compose_config():
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose is not installed (Debian: apt-get install docker-compose; .ci/run does)")
    result = subprocess.run(
        ["docker-compose", "-f", "docker-compose.yml", "config"], cwd=REPO, capture_output=True, text=True,
        env={key: value for key, value in os.environ.items() if key != "COMPOSE_FILE"},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_docker_compose_file_is_valid(compose_config):
    quiet = subprocess.run(["docker-compose", "config", "-q"], cwd=REPO, capture_output=True, text=True)
    assert quiet.returncode == 0, quiet.stderr
    for service in ("postgres:", "redis:", "web:", "worker-gpu:"):
        assert f"\n  {service}\n" in compose_config


def test_the_gpu_worker_reserves_a_gpu_and_serves_the_gpu_queue(compose_config):
    gpu_worker = compose_config.split("\n  worker-gpu:\n")[1].split("\n  worker-cpu:\n")[0]
    assert "driver: nvidia" in gpu_worker
    assert re.search(r"capabilities:\s*\n\s*- gpu", gpu_worker)
    assert re.search(r"- --queues\s*\n\s*- gpu\n", gpu_worker)
    assert re.search(r"- --pool\s*\n\s*- solo\n", gpu_worker)


def test_local_url_points_a_browser_at_a_wildcard_address():
    assert devserver.local_url("0.0.0.0", 8000) == "http://127.0.0.1:8000/"
    assert devserver.local_url("::", 8001) == "http://[::1]:8001/"
    assert devserver.local_url("127.0.0.1", 8002) == "http://127.0.0.1:8002/"


@pytest.fixture
def var_dir():
    # a short path: a unix socket path may not be longer than 107 bytes
    with tempfile.TemporaryDirectory(prefix="rlweb-", dir="/tmp") as path:
        yield Path(path)


def own_environment() -> dict:
    """The environment of a fresh `make run`: no Redis or database given, so it starts its own."""
    return {key: value for key, value in os.environ.items()
            if key not in ("REDIS_URL", "DATABASE_URL", "RLWEB_VAR_DIR", "CELERY_BROKER_URL")}


def processes_using(var: Path) -> list[str]:
    """The processes whose environment or command line names `var`: everything a devserver started."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            text = (proc / "environ").read_bytes() + (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if f"RLWEB_VAR_DIR={var}\0".encode() in text or f"{var}/redis.sock".encode() in text:
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            found.append(f"{proc.name}: {command}")
    return found


def test_a_redis_left_over_from_a_killed_run_is_shut_down_first(var_dir):
    env = dict(own_environment())
    leftover = devserver.start_redis(var_dir, env)
    try:
        assert env["REDIS_URL"] == f"unix://{var_dir}/redis.sock?db=0"
        env2 = dict(own_environment())
        fresh = devserver.start_redis(var_dir, env2)  # finds the first one answering on the socket
        assert leftover.process.wait(timeout=20) == 0
        assert devserver.redis_command(var_dir / "redis.sock", b"PING") == b"+PONG\r\n"
        devserver.stop([fresh])
    finally:
        devserver.stop([leftover])
    assert processes_using(var_dir) == []


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Devserver:
    """`python -m rlweb.devserver` in a subprocess, started and waited for until its "running" line."""

    def __init__(self, var: Path, port: int):
        started = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rlweb.devserver", "--port", str(port), "--var-dir", str(var)],
            env=own_environment(), cwd=REPO, stdout=subprocess.PIPE, text=True,
        )
        self.output = []
        for line in self.process.stdout:
            self.output.append(line)
            if line.startswith("rlweb is running at"):
                assert line.strip() == f"rlweb is running at http://127.0.0.1:{port}/"
                break
        else:
            raise AssertionError(f"the devserver exited with {self.process.wait()} before it was running")
        self.start_seconds = time.monotonic() - started
        # the children write to the same pipe: keep reading it so that they never block on a full one
        self.reader = threading.Thread(target=self.output.extend, args=(self.process.stdout,), daemon=True)
        self.reader.start()

    def line_starting(self, prefix: str, timeout: float = 30) -> str:
        """The first output line that starts with `prefix`, waited for: the devserver prints the sign-up line
        after its own request to the sign-up page, which a busy machine may answer after the test's."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = next((line for line in list(self.output) if line.startswith(prefix)), None)
            if line is not None:
                return line
            time.sleep(0.1)
        raise AssertionError(f"no line starting {prefix!r} in {timeout} s: {''.join(self.output)[-2000:]}")

    def exit_code(self) -> int:
        try:
            return self.process.wait(timeout=60)
        finally:
            self.process.kill()
            self.reader.join(timeout=10)


@pytest.mark.timeout(300)
def test_the_devserver_serves_the_site_and_ctrl_c_stops_everything(var_dir):
    port = free_port()
    first = Devserver(var_dir, port)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
            assert response.status == 200
            assert "login" in response.url  # every page asks for a login
        signup = first.line_starting("First time here?").split()[-1]
        with urllib.request.urlopen(signup, timeout=10) as response:
            assert response.status == 200
        assert len(processes_using(var_dir)) >= 3  # redis, the worker, the web server
    finally:
        first.process.send_signal(signal.SIGINT)
        assert first.exit_code() == 0
    assert processes_using(var_dir) == []

    second = Devserver(var_dir, port)  # the database, static files and Redis data are there already
    second.process.send_signal(signal.SIGTERM)
    assert second.exit_code() == 0
    assert processes_using(var_dir) == []
    assert second.start_seconds < 30


def test_a_dead_child_is_started_again_after_a_doubling_back_off_and_called_out_when_it_keeps_dying(tmp_path, capsys):
    commands = [["false"]] * 7 + [["sleep", "30"]]  # dies at once seven times, then stays up

    def launch():
        return devserver.Child("the test child", commands.pop(0), dict(os.environ), stop_steps=[(signal.SIGKILL, 5)])

    service = devserver.Service(launch, tmp_path / "child.log")
    now, back_offs = time.monotonic(), []
    for _ in range(7):  # the supervisor's clock is `now`: the back-offs pass at once
        service.child.process.wait(timeout=30)
        service.watch(now)  # notices the death
        back_offs.append(service.restart_at - now)
        dead = service.child
        service.watch(service.restart_at - 0.1)
        assert service.child is dead  # not started again before its back-off is over
        now = service.restart_at
        service.watch(now)
        assert service.child is not dead
    assert back_offs == pytest.approx([1, 2, 4, 8, 16, 30, 30])  # now + 30 - now is not always 30 in floats
    messages = capsys.readouterr().err
    assert messages.count("the test child exited with code 1 after") == 7
    assert messages.count("starting the test child again") == 7
    assert messages.count(f"the test child keeps dying (5 times in 15 s): read {tmp_path / 'child.log'} for why. "
                          "rlweb goes on trying, waiting up to 30 s; Ctrl-C stops everything") == 1

    service.watch(service.child.started + devserver.STAYED_UP)  # up for a minute: it has recovered
    assert "the test child has stayed up for 60 s since it was started again" in capsys.readouterr().err
    service.child.signal(signal.SIGKILL)
    assert service.child.process.wait(timeout=30) == -signal.SIGKILL
    service.watch(now)
    assert service.restart_at - now == pytest.approx(1)
    assert "the test child was killed by SIGKILL after" in capsys.readouterr().err
    assert commands == []


def test_a_busy_port_is_refused_with_a_clear_message(var_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "rlweb.devserver", "--port", str(port), "--var-dir", str(var_dir)],
            env=own_environment(), cwd=REPO, capture_output=True, text=True, timeout=60,
        )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"rlweb: cannot listen on 127.0.0.1:{port} (Address already in use): pick another with --port (make run PORT=...)"
    )
    assert processes_using(var_dir) == []


def test_the_readme_links_only_to_files_that_exist():
    readme = (REPO / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#]+)\)", readme)
    assert "docs/screenshots/run-page.png" in targets
    assert [target for target in targets if "://" not in target and not (REPO / target).exists()] == []


def test_the_web_server_freezes_what_it_loaded_out_of_the_garbage_collector():
    """A full collection scanning Django and every view module paused history.json for 100-200 ms now and then under
    load; rlweb.asgi loads the views first and freezes them all (a change that drops either part fails here)."""
    probe = ("import gc, rlweb.asgi, sys; "
             "print(gc.get_freeze_count(), 'rlweb.experiments.run_views' in sys.modules, 'rlweb.api.api' in sys.modules)")
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL")}
    answer = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    frozen, views_loaded, api_loaded = answer.stdout.split()
    assert int(frozen) > 100_000 and views_loaded == api_loaded == "True", answer.stderr
