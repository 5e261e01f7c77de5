"""Settings come from environment variables with safe defaults; a bad boolean stops startup."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from rlweb.settings import broker_url, env_bool, media_storage, stored_secret_key

REPO = Path(__file__).resolve().parents[2]


def django_check(tmp_path, **environment):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("RLWEB_", "DATABASE_URL"))}
    env.update(RLWEB_VAR_DIR=str(tmp_path / "var"), **environment)
    return subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("raw, expected", [("True", True), ("False", False)])
def test_booleans_read_exactly_true_or_false(monkeypatch, raw, expected):
    monkeypatch.setenv("RLWEB_DEBUG", raw)
    assert env_bool("RLWEB_DEBUG", not expected) is expected


@pytest.mark.parametrize("raw", ["true", "1", "yes", "", "FALSE"])
def test_any_other_boolean_is_refused(monkeypatch, raw):
    monkeypatch.setenv("RLWEB_DEBUG", raw)
    with pytest.raises(ImproperlyConfigured, match="RLWEB_DEBUG must be True or False"):
        env_bool("RLWEB_DEBUG", False)


def test_startup_fails_on_a_bad_boolean(tmp_path):
    result = django_check(tmp_path, RLWEB_ALLOW_SIGNUP="yes")
    assert result.returncode != 0 and "RLWEB_ALLOW_SIGNUP must be True or False" in result.stderr


def test_a_fresh_install_starts_with_defaults_and_keeps_a_private_secret_key(tmp_path):
    result = django_check(tmp_path)
    assert result.returncode == 0, result.stderr
    key_file = tmp_path / "var" / "secret_key"
    assert len(key_file.read_text().strip()) >= 50
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


def test_the_secret_key_is_generated_once(tmp_path):
    first = stored_secret_key(tmp_path / "secret_key")
    assert stored_secret_key(tmp_path / "secret_key") == first


def test_an_empty_secret_key_file_is_an_error(tmp_path):
    (tmp_path / "secret_key").write_text("")
    with pytest.raises(ImproperlyConfigured, match="empty"):
        stored_secret_key(tmp_path / "secret_key")


@pytest.mark.parametrize("url, expected", [
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("unix:///srv/rlweb/var/redis.sock?db=0", "redis+socket:///srv/rlweb/var/redis.sock?virtual_host=0"),
    ("unix:///tmp/r.sock", "redis+socket:///tmp/r.sock?virtual_host=0"),
])
def test_the_broker_url_follows_redis_url(url, expected):
    assert broker_url(url) == expected


def test_celery_is_configured_for_long_runs():
    from django.conf import settings

    from rlweb.celery import app

    assert app.conf.task_acks_late is True and app.conf.worker_prefetch_multiplier == 1
    assert app.conf.broker_transport_options["visibility_timeout"] > settings.RUN_TIME_LIMIT
    assert app.conf.task_ignore_result is True and app.conf.accept_content == ["json"]
    assert app.conf.task_time_limit == settings.RUN_TIME_LIMIT
    assert "rlweb.train_run" in app.tasks


S3_VARIABLES = ("RLWEB_S3_BUCKET", "RLWEB_S3_ENDPOINT_URL", "RLWEB_S3_ACCESS_KEY_ID", "RLWEB_S3_SECRET_ACCESS_KEY",
                "RLWEB_S3_REGION", "RLWEB_S3_URL_SECONDS")


def test_checkpoints_and_videos_stay_in_the_local_media_folder_by_default(monkeypatch):
    for variable in S3_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    assert media_storage() == {"BACKEND": "rlweb.storage.MediaStorage"}


def test_a_bucket_switches_them_to_django_storages_s3(monkeypatch):
    monkeypatch.setenv("RLWEB_S3_BUCKET", "runs")
    monkeypatch.setenv("RLWEB_S3_ENDPOINT_URL", "http://minio:9000")
    monkeypatch.setenv("RLWEB_S3_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("RLWEB_S3_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("RLWEB_S3_REGION", "eu-west-1")
    storage = media_storage()
    assert storage["BACKEND"] == "storages.backends.s3.S3Storage"
    assert storage["OPTIONS"] | {"max_memory_size": 0} == {
        "bucket_name": "runs", "endpoint_url": "http://minio:9000", "access_key": "key", "secret_key": "secret",
        "region_name": "eu-west-1", "signature_version": "s3v4", "file_overwrite": False, "default_acl": None,
        "querystring_auth": True, "querystring_expire": 600, "max_memory_size": 0, "addressing_style": "path"}


def test_s3_settings_without_a_bucket_stop_startup(tmp_path):
    result = django_check(tmp_path, RLWEB_S3_ENDPOINT_URL="http://minio:9000")
    assert result.returncode != 0 and "RLWEB_S3_ENDPOINT_URL set without RLWEB_S3_BUCKET" in result.stderr
    result = django_check(tmp_path, RLWEB_S3_REDIRECT="True")
    assert result.returncode != 0 and "RLWEB_S3_REDIRECT=True needs RLWEB_S3_BUCKET" in result.stderr
