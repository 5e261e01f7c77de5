"""What the browser tests share: a started rlweb (`python -m rlweb.devserver`: its own Redis, migrations on a
temporary SQLite file, one Celery worker, celery beat, uvicorn), fresh for a module or shared by the modules marked
`shared_site`; Debian's chromium driven by Playwright; and signing up through the real pages."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "docs" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def status_of(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def wait_until(condition, seconds: float, what: str, context=lambda: "", interval: float = 0.2):
    """Call `condition` every `interval` seconds until it returns something true, and return that. After `seconds`,
    fail with `what` did not happen and `context()`: what to show of the state (a log's end, a run's row)."""
    deadline = time.monotonic() + seconds
    while not (value := condition()):
        assert time.monotonic() < deadline, f"{what} within {seconds} s\n{context()}"
        time.sleep(interval)
    return value


@dataclass
class Site:
    url: str
    var: Path
    env: dict
    _shell: Shell | None = field(default=None, repr=False)

    def orm(self, code: str):
        """Run `code` with Django set up on the site's own database; it sets `result`, returned as JSON. The calls share
        one Shell, started again when `env` changed: a Python with Django and torch for each call cost 2-3 s of CPU,
        and tests poll with it."""
        if self._shell is not None and self._shell.env != self.django_env():
            self.close()
        if self._shell is None:
            self._shell = Shell(self)
        return self._shell.orm(code)

    def close(self) -> None:
        """End the Shell that `orm` started, if any."""
        if self._shell is not None:
            self._shell.close()
            self._shell = None

    def django_env(self) -> dict:
        return dict(self.env, RLWEB_VAR_DIR=str(self.var), DJANGO_SETTINGS_MODULE="rlweb.settings")

    @contextlib.contextmanager
    def shell(self):
        """A Shell on the site's database, ended after."""
        shell = Shell(self)
        try:
            yield shell
        finally:
            shell.close()


SHELL = """
import json, sys, textwrap, traceback
import django
django.setup()
answers, sys.stdout = sys.stdout, sys.stderr  # what the code prints is no answer
for line in sys.stdin:
    namespace = {}
    try:
        exec(textwrap.dedent(json.loads(line)), namespace)
        answer = {"result": namespace["result"]}
    except Exception:
        answer = {"error": traceback.format_exc()}
    print(json.dumps(answer), file=answers, flush=True)
"""


class Shell:
    """One Python process with Django set up on a site's database, running code as `Site.orm` does (in a namespace of
    its own each time) without starting Python, Django and torch for each: that takes seconds on a loaded machine."""

    def __init__(self, site: Site):
        self.env = site.django_env()
        self.process = subprocess.Popen([sys.executable, "-c", SHELL], cwd=REPO, env=self.env, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def orm(self, code: str, timeout: float = 120):
        self.process.stdin.write(json.dumps(code) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)  # one answer a call: nothing is buffered
        assert ready, f"the shell did not answer within {timeout} s:\n{code}"
        line = self.process.stdout.readline()
        assert line, f"the shell ended with code {self.process.wait()}"
        answer = json.loads(line)
        assert "error" not in answer, answer["error"]
        return answer["result"]

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def site_env() -> dict:
    """The environment rlweb starts in: this one without the tests' Redis, database and rlweb settings."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("REDIS_URL", "DATABASE_URL") and not key.startswith("RLWEB_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def migrate_into(var: Path) -> None:
    """Migrate a fresh SQLite database in `var`, as the devserver does when it starts."""
    from rlweb.devserver import SETUP

    done = subprocess.run([sys.executable, "-c", SETUP], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=Site("", var, site_env()).django_env())
    assert done.returncode == 0, done.stderr[-4000:]


@contextlib.contextmanager
def running_site(var: Path):
    """Start rlweb with its state in `var` and yield it as a Site; stop every process it started after."""
    port = free_port()
    env = site_env()
    log = (var / "devserver.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "rlweb.devserver", "--host", "127.0.0.1", "--port", str(port), "--var-dir", str(var)],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    site = None
    try:
        deadline = time.monotonic() + 180
        while status_of(f"{url}/login/") != 200:
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"rlweb did not start:\n{(var / 'devserver.log').read_text()[-4000:]}")
            time.sleep(0.5)
        # `orm` and the tests' own processes reach the site's Redis, as its children do (rlweb.devserver)
        site = Site(url, var, dict(env, REDIS_URL=f"unix://{var / 'redis.sock'}?db=0"))
        yield site
    finally:
        if site is not None:
            site.close()
        server.send_signal(signal.SIGTERM)  # the supervisor stops its children in turn
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
        print(f"devserver log (the end):\n{(var / 'devserver.log').read_text()[-6000:]}")  # shown on a failure


LOG_SHOWN_CHARS = 30_000  # of each log, on a failure: the end of what it wrote while the test ran


def log_sizes(var: Path) -> dict[str, int]:
    """How long each of a site's logs is now (rlweb.devserver: one for each child, devserver.log for them all)."""
    return {path.name: path.stat().st_size for path in var.glob("*.log")}


def logs_since(var: Path, sizes: dict[str, int]) -> str:
    """What each of a site's logs wrote since `sizes` (log_sizes) was taken: the children's own logs, and of
    devserver.log, which holds all of their lines too, only the supervisor's own (`rlweb: ...`)."""
    parts = []
    for path in sorted(var.glob("*.log")):
        with path.open("rb") as log:
            log.seek(sizes.get(path.name, 0))
            text = log.read().decode(errors="replace")
        if path.name == "devserver.log":
            text = "".join(line for line in text.splitlines(keepends=True) if line.startswith("rlweb: "))
        if text:
            cut = f"[{len(text) - LOG_SHOWN_CHARS} characters left out]\n" if len(text) > LOG_SHOWN_CHARS else ""
            parts.append(f"--- {path.name}\n{cut}{text[-LOG_SHOWN_CHARS:]}")
    return "\n".join(parts) or "(nothing)"


PAGE_SHOWN_CHARS = 3_000  # of each open page's text, on a failure


def pages_shown(browser) -> str:
    """What each page open in `browser` shows now (its address and the end of its text): a failed test's last view."""
    shown = []
    for context in browser.contexts:
        for page in context.pages:
            try:
                text = page.locator("body").inner_text(timeout=5_000)
            except Exception as error:  # a closed or hung page says no more than why
                text = f"(its text could not be read: {str(error).splitlines()[0]})"
            shown.append(f"--- {page.url}\n{text[-PAGE_SHOWN_CHARS:]}")
    return "\n".join(shown) or "(no page open)"


@contextlib.contextmanager
def chromium():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


def sign_up(page, url: str, username: str, password: str) -> None:
    """Create an account through the sign-up page; the new user lands on the experiment list."""
    page.goto(url + "/signup/")
    page.fill("#id_username", username)
    page.fill("#id_password1", password)
    page.fill("#id_password2", password)
    page.click("button[type=submit]")
    page.wait_for_function("location.pathname === '/' || document.querySelector('.errorlist') !== null")
    if page.locator(".errorlist").count():  # on the shared site: a name another module took
        pytest.fail(f"signing up {username!r} was refused: {page.inner_text('form')}")
    page.wait_for_url(url + "/")


def charts_fit(page) -> None:
    """Wait until every chart plotly drew has its box's width (after the window changed size, plotly redraws
    a responsive chart at its next resize event, and the run page's on its next draw) and the browser has
    painted: what a screenshot of a narrow page waits for. Charts in a folded group are left out: Chromium still lays
    them out, but they are sized when the group opens."""
    page.wait_for_function("""() => [...document.querySelectorAll('.js-plotly-plot')].every((chart) =>
        !chart._fullLayout || !chart.offsetParent || chart.closest('details:not([open])')
        || Math.abs(chart._fullLayout.width - chart.getBoundingClientRect().width) < 2)""")
    painted(page)


def painted(page) -> None:
    """Wait for two animation frames: the layout and paint of what the page just changed are done."""
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")


def launch_experiment(page, url: str, name: str, fields: dict) -> None:
    """Fill in the new-experiment form (`fields`: form field -> value, on the CPU), launch it and open its run."""
    page.goto(url + "/experiments/new/")
    page.fill("#id_name", name)
    for field, value in fields.items():
        page.fill(f"#id_{field}", value)
    page.select_option("#id_device", "cpu")
    page.click("text=Create and launch")
    page.wait_for_selector("#run-table")
    page.click("#run-table a[data-run-id]")
    page.wait_for_selector("#run-status")


@pytest.fixture(scope="session")
def migrated_database(tmp_path_factory) -> Path:
    """An empty database, migrated once for the session: each module's rlweb starts from a copy of it, and its own
    migrate then has nothing to do (a migration from nothing costs about 1.5 s of CPU more, for each module)."""
    var = tmp_path_factory.mktemp("migrated")
    migrate_into(var)
    return var / "db.sqlite3"


SHARED_SITE = "shared_site"  # the marker of a module that runs on the session's shared rlweb

SETTLE = """
from datetime import timedelta
from django.utils import timezone
from rlweb.experiments import checkpoint_jobs, lifecycle
from rlweb.experiments.models import LOGGED, CheckpointJob, Run
from rlweb.logged import runs as logged_runs
from rlweb.suites import launching
from rlweb.suites.models import Suite
from rlweb.sweeps import study
from rlweb.sweeps.models import Sweep
for sweep in Sweep.objects.filter(status=Sweep.Status.RUNNING):
    study.cancel(sweep)
for suite in Suite.objects.filter(status=Suite.Status.RUNNING):
    launching.cancel(suite)
# a run that a test made up as running, beating a day ahead so that the lost-run reaper leaves it, has no worker to
# end it when cancelled: it ends here
made_up = Run.objects.filter(status=Run.Status.RUNNING, heartbeat_at__gt=timezone.now() + timedelta(hours=1))
made_up.update(status=Run.Status.CANCELLED, finished_at=timezone.now())
for run in Run.objects.filter(status__in=Run.ACTIVE).select_related("experiment"):
    (logged_runs.cancel if run.experiment.algorithm == LOGGED else lifecycle.cancel)(run)
unfinished_jobs = CheckpointJob.objects.filter(status__in=(CheckpointJob.Status.QUEUED, CheckpointJob.Status.RUNNING))
for job in unfinished_jobs:
    checkpoint_jobs.cancel(job)
result = [f"run {pk} {status}" for pk, status in Run.objects.filter(status__in=Run.ACTIVE).values_list("pk", "status")]
result += [f"checkpoint job {pk} {status}" for pk, status in unfinished_jobs.values_list("pk", "status")]
result = result or ["settled"]
"""


def settle(stack: Site) -> None:
    """Leave the shared rlweb idle for the next module: cancel what the last one left going (sweeps, suites, runs,
    checkpoint jobs; the runs it made up, which no worker trains, end at once) and wait until every run and job has
    ended, so that the next module's runs start at once."""
    left = []

    def idle() -> bool:
        left[:] = stack.orm(SETTLE)
        return left == ["settled"]

    wait_until(idle, 180, "the shared rlweb did not settle", lambda: f"still going: {left}", interval=1.0)


def open_signup(django) -> None:
    """Open sign-up on the site that `django` (a Site or a Shell) reaches: the site's first account closes it
    (rlweb.accounts.signup), and a test's other users sign up as an admin allows."""
    django.orm("""
        from rlweb.accounts.models import SiteSettings
        result = SiteSettings.objects.update_or_create(pk=1, defaults={"signup_open": True})[0].pk
    """)


@pytest.fixture(scope="session")
def shared_site_stack(tmp_path_factory, migrated_database):
    """One rlweb for every module marked `shared_site`: starting one costs about 15 s of CPU (six Python processes
    with Django), more than many a module's tests. Such a module signs up users of its own names and finds its
    objects through them; it may not restart or stop the site's workers for good."""
    var = tmp_path_factory.mktemp("e2e-shared")
    shutil.copyfile(migrated_database, var / "db.sqlite3")
    with running_site(var) as stack:
        # the first account signs up on a fresh site; each module's after it too, as an admin allows
        open_signup(stack)
        yield stack


@pytest.fixture(scope="module")
def site_stack(request, tmp_path_factory, migrated_database):
    """The rlweb of one test module, as a Site (url, var folder, env, `orm`): the session's shared one for a module
    marked `shared_site` (settled after the module), otherwise a fresh one on a copy of the migrated empty
    database."""
    if request.node.get_closest_marker(SHARED_SITE):
        stack = request.getfixturevalue("shared_site_stack")
        yield stack
        settle(stack)
        return
    var = tmp_path_factory.mktemp("e2e")
    shutil.copyfile(migrated_database, var / "db.sqlite3")
    with running_site(var) as stack:
        yield stack


def shared_last(items: list) -> None:
    """Order the modules on the shared rlweb after the others (a stable sort): the shared site starts when the first
    of them does and stops at the session's end, and so never idles beside another module's site."""
    items.sort(key=lambda item: item.get_closest_marker(SHARED_SITE) is not None)


@pytest.fixture(scope="module")
def site(site_stack):
    """The base URL of the module's rlweb (site_stack): a fresh one, or the shared one for a `shared_site` module."""
    return site_stack.url


@pytest.fixture(scope="session")
def chromium_for_session():
    """One chromium for the whole session: starting one costs about 1.5 s of CPU, for each module before."""
    with chromium() as browser:
        yield browser


@pytest.fixture(scope="module")
def browser(chromium_for_session):
    """The session's chromium, for one module: the pages and contexts the module opened are closed after it, so none
    goes on polling a site that has stopped."""
    yield chromium_for_session
    for context in chromium_for_session.contexts:
        context.close()
