"""`manage.py check --deploy` passes with the environment docker-compose gives its services."""

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT = re.compile(r"\$\{([A-Z0-9_]+):-([^}]*)\}")


def compose_environment() -> dict[str, str]:
    """The `x-rlweb` environment of docker-compose.yml, with `${NAME:-default}` as compose reads it with no .env."""
    text = (REPO / "docker-compose.yml").read_text()
    block = text.split("environment: &rlweb-environment\n", 1)[1]
    environment = {}
    for line in block.splitlines():
        if not line.startswith("    ") or not line.strip():
            break
        name, _, value = line.strip().partition(": ")
        value = value.split("  #", 1)[0].strip().strip('"')
        environment[name] = DEFAULT.sub(lambda match: match.group(2), value)
    return environment


def manage(tmp_path, *arguments, **overrides):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("RLWEB_", "DATABASE_URL", "REDIS_"))}
    env.update(compose_environment(), RLWEB_VAR_DIR=str(tmp_path), **overrides)  # the volume's path is not ours here
    return subprocess.run([sys.executable, "manage.py", *arguments], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=180)


def test_the_compose_environment_is_read_as_compose_reads_it():
    environment = compose_environment()
    assert environment["RLWEB_DEBUG"] == "False" and environment["RLWEB_HTTPS"] == "True"
    assert environment["RLWEB_ALLOW_SIGNUP"] == "" and environment["RLWEB_SECRET_KEY"] == ""
    assert environment["DATABASE_URL"].startswith("postgres://")


def test_check_deploy_passes_with_the_compose_settings(tmp_path):
    result = manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_catches_a_site_without_https(tmp_path):
    """The same check fails where it should: plain http (the `make run` default) is not a deployment."""
    result = manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", RLWEB_HTTPS="False")
    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr
