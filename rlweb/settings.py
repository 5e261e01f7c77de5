"""rlweb settings: everything comes from environment variables, with defaults that run locally.

Variables (all optional):
    RLWEB_VAR_DIR          where local state lives (database, media, secret key); default <repo>/var
    DATABASE_URL           default SQLite at <var>/db.sqlite3; e.g. postgres://user@host:5432/rlweb
    REDIS_URL              live streams, cancel flags and the Celery broker; default redis://127.0.0.1:6379/0
    RLWEB_SECRET_KEY       default: generated once and kept in <var>/secret_key
    RLWEB_DEBUG            True or False (default False)
    RLWEB_ALLOWED_HOSTS    comma-separated; default localhost,127.0.0.1,[::1]
    RLWEB_CSRF_TRUSTED_ORIGINS  comma-separated origins, for a deployment behind a proxy; default none
    RLWEB_ALLOW_SIGNUP     True or False (default True): anyone who reaches the site may create an account
    RLWEB_AUTO_QUEUE       the Celery queue for runs with device "auto" (default "cpu")
    RLWEB_TORCH_THREADS    torch threads per training run in a worker (default 1)
    RLWEB_HEARTBEAT_TIMEOUT  seconds without a heartbeat before a running run counts as lost (default 600)
"""

import os
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    """A boolean variable must read exactly True or False; anything else stops startup."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    if raw in ("True", "False"):
        return raw == "True"
    raise ImproperlyConfigured(f"{name} must be True or False, not {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {raw!r}") from None


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def stored_secret_key(path: Path) -> str:
    """The key kept in `path`, written once (atomically, owner-only) on first start."""
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_text().strip()
        if key:
            return key
        raise ImproperlyConfigured(f"{path} is empty: delete it to generate a new secret key") from None
    with os.fdopen(handle, "w") as file:
        file.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


def broker_url(redis_url: str) -> str:
    """Kombu spells a Redis unix socket `redis+socket://`; redis-py spells it `unix://`."""
    if redis_url.startswith("unix://"):
        path, _, query = redis_url[len("unix://"):].partition("?")
        database = dict(part.split("=", 1) for part in query.split("&") if "=" in part).get("db", "0")
        return f"redis+socket://{path}?virtual_host={database}"
    return redis_url


VAR_DIR = Path(os.environ.get("RLWEB_VAR_DIR") or BASE_DIR / "var").resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)

SECRET_KEY = os.environ.get("RLWEB_SECRET_KEY") or stored_secret_key(VAR_DIR / "secret_key")
DEBUG = env_bool("RLWEB_DEBUG", False)
ALLOWED_HOSTS = env_list("RLWEB_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("RLWEB_CSRF_TRUSTED_ORIGINS", "")
ALLOW_SIGNUP = env_bool("RLWEB_ALLOW_SIGNUP", True)
AUTO_QUEUE = os.environ.get("RLWEB_AUTO_QUEUE", "cpu")
TORCH_THREADS = env_int("RLWEB_TORCH_THREADS", 1)
HEARTBEAT_TIMEOUT = env_int("RLWEB_HEARTBEAT_TIMEOUT", 600)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rlweb.experiments",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "rlweb.urls"
WSGI_APPLICATION = "rlweb.wsgi.application"
ASGI_APPLICATION = "rlweb.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "rlweb.experiments.context_processors.site",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.config(default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # the web server and the worker write at the same time: WAL lets readers go on while one writes,
    # and IMMEDIATE transactions wait for the lock instead of failing halfway through.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "experiment-list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"  # collectstatic writes here (Docker); `make run` serves from the finders
STATIC_ROOT.mkdir(exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "rlweb.experiments.finders.PlotlyFinder",  # plotly.js from the installed plotly package, no CDN
]
WHITENOISE_USE_FINDERS = True  # serve straight from the finders: no collectstatic needed for `make run`
MEDIA_ROOT = VAR_DIR / "media"
MEDIA_URL = "media/"  # never served directly: downloads go through views that check ownership
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
SSE_HEARTBEAT_SECONDS = 5.0  # a comment this often keeps proxies from closing an idle live stream

# Celery (rlweb/celery.py reads every CELERY_* setting)
RUN_TIME_LIMIT = 7 * 24 * 3600  # the longest run we allow, in seconds
CELERY_BROKER_URL = broker_url(REDIS_URL)
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": RUN_TIME_LIMIT + 24 * 3600}  # outlast the longest run
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False  # a claimed run goes on; redelivery exits
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_TIME_LIMIT = RUN_TIME_LIMIT
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_DEFAULT_QUEUE = "cpu"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {"rlweb": {"level": "INFO"}},
}
