"""rlweb settings: everything comes from environment variables, with defaults that run locally.

Variables (all optional):
    RLWEB_VAR_DIR          where local state lives (database, media, secret key); default <repo>/var
    DATABASE_URL           default SQLite at <var>/db.sqlite3; e.g. postgres://user@host:5432/rlweb
    RLWEB_DATABASE_POOL    True: keep a pool of PostgreSQL connections per process (default False: one a request)
    REDIS_URL              live streams, cancel flags and the Celery broker; default redis://127.0.0.1:6379/0
    RLWEB_SECRET_KEY       default: generated once and kept in <var>/secret_key
    RLWEB_DEBUG            True or False (default False)
    RLWEB_ALLOWED_HOSTS    comma-separated; default localhost,127.0.0.1,[::1]
    RLWEB_CSRF_TRUSTED_ORIGINS  comma-separated origins, for a deployment behind a proxy; default none
    RLWEB_ALLOW_SIGNUP     unset (default): the first account signs up, then an admin opens or closes sign-up on
                           the Users page; True or False forces sign-up open or closed
    RLWEB_HTTPS            True or False (default False): served over HTTPS (directly or by a proxy that sets
                           X-Forwarded-Proto): secure cookies, redirect http to https, HSTS
    RLWEB_HSTS_SECONDS     the HSTS max-age when RLWEB_HTTPS is True (default 31536000, a year; 0: no HSTS)
    RLWEB_LOGIN_FAILURE_LIMIT         refused sign-ins for one username from one client address before that
                                      client waits between tries (default 5)
    RLWEB_LOGIN_FAILURE_LIMIT_PER_IP  refused sign-ins from one client address, any usernames, before it waits
                                      between tries (default 20)
    RLWEB_LOGIN_LOCKOUT_MINUTES       the longest wait: it starts at a minute and doubles with each further
                                      refusal up to this (default 15)
    RLWEB_MAX_ACTIVE_RUNS_PER_USER    queued plus running runs a user may have at once (default 8)
    RLWEB_MAX_RUNNING_PER_USER_PER_QUEUE  runs of one user training at once on one queue; the rest wait while
                                      others' runs go first (default 0: no cap); the admin sets others per user
    RLWEB_MAX_TOTAL_STEPS  environment steps a run may ask for (default 1000000000)
    RLWEB_STORAGE_QUOTA_MB megabytes of checkpoints and videos a user may keep (default 0: no limit); the admin
                           can set another for one user (Storage quotas)
    RLWEB_AUTO_QUEUE       the Celery queue for runs with device "auto" (default "cpu")
    RLWEB_QUEUES           named queues besides cpu and gpu (a host, a GPU model), comma-separated, such as
                           "host-a,a100": the form offers each as a device (default none)
    RLWEB_TORCH_THREADS    torch threads per training run in a worker (default 1)
    RLWEB_HEARTBEAT_SECONDS  how often a worker writes a running run's heartbeat (default 5)
    RLWEB_HEARTBEAT_TIMEOUT  seconds without a heartbeat before a running run counts as lost (default 30)
    RLWEB_LOGGED_RUN_SILENCE_SECONDS  seconds without a request from its script before a run logged through the API
                           counts as lost (default 600)
    RLWEB_LOGGED_FILE_MAX_MB  the largest video or checkpoint a script may upload to a logged run (default 200)
    RLWEB_LOGGED_POINTS_MAX_MB  the largest request of points a script may send to a logged run (default 16)
    RLWEB_TENSORBOARD_IMPORT_MAX_MB  the largest TensorBoard folder to import, as its archive and unpacked (default 100)
    RLWEB_ENV_MODULES      modules allowed in `module:EnvId` environment ids, comma-separated (default none)
    RLWEB_MAX_RUN_MEMORY_MB  memory one run may plan for (default 0: half of the machine's memory)
    RLWEB_S3_BUCKET        checkpoints and videos go to this S3-compatible bucket instead of <var>/media (default
                           none); with RLWEB_S3_ENDPOINT_URL (none: AWS), RLWEB_S3_ACCESS_KEY_ID,
                           RLWEB_S3_SECRET_ACCESS_KEY (none: boto3's own lookup) and RLWEB_S3_REGION
    RLWEB_S3_REDIRECT      True or False (default False): downloads and videos redirect to the bucket with a signed
                           URL instead of passing through the web server (browsers must reach the endpoint)
    RLWEB_S3_URL_SECONDS   how long such a signed URL is valid (default 600)
    RLWEB_EMAIL_HOST, RLWEB_EMAIL_PORT, RLWEB_EMAIL_HOST_USER, RLWEB_EMAIL_HOST_PASSWORD, RLWEB_EMAIL_USE_TLS,
    RLWEB_EMAIL_USE_SSL, RLWEB_EMAIL_FROM  the mail server alerts are sent through (default localhost:25, no login,
                           from rlweb@localhost); RLWEB_EMAIL_BACKEND another Django email backend
    RLWEB_WEBHOOK_ALLOW_PRIVATE  True or False (default False): alert webhooks may go to loopback, private,
                           link-local and reserved addresses (else refused: users cannot probe the server's network)
    RLWEB_ALERT_RETRY_SECONDS, RLWEB_ALERT_MAX_ATTEMPTS  a failed alert delivery is tried again after this, twice
                           as long after each further failure, up to this many tries (default 30 and 5)
    RLWEB_SITE_URL         the site's address, for links in alerts (default http://127.0.0.1:8000)
"""

import os
import re
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


def env_optional_bool(name: str) -> bool | None:
    """None when unset or empty (docker-compose passes an unset variable as empty), else as env_bool."""
    return env_bool(name, False) if os.environ.get(name) else None


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


QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,49}")


def named_queues(name: str) -> list[str]:
    """The admin's extra queues: names of letters, digits and `_ . -` (at most 50), none of cpu, gpu, auto, cuda, jobs."""
    queues = env_list(name, "")
    for queue in queues:
        if not QUEUE_NAME.fullmatch(queue) or queue in ("cpu", "gpu", "auto", "cuda", "jobs"):
            raise ImproperlyConfigured(f"{name}: {queue[:60]!r} is not a queue name (letters, digits, _ . -, at "
                                       "most 50; not cpu, gpu, auto, cuda or jobs)")
    return list(dict.fromkeys(queues))


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


def media_storage() -> dict:
    """Where checkpoints and videos live: the bucket when RLWEB_S3_BUCKET is set, else the local media folder
    (inside MEDIA_ROOT, and no partial file, ever). Other RLWEB_S3_* settings without a bucket stop startup:
    each host would otherwise keep its files on its own disk."""
    if os.environ.get("RLWEB_S3_BUCKET"):
        return s3_storage()
    stray = [name for name in ("RLWEB_S3_ENDPOINT_URL", "RLWEB_S3_ACCESS_KEY_ID", "RLWEB_S3_SECRET_ACCESS_KEY")
             if os.environ.get(name)]
    if stray:
        raise ImproperlyConfigured(f"{', '.join(stray)} set without RLWEB_S3_BUCKET")
    return {"BACKEND": "rlweb.storage.MediaStorage"}


def s3_storage() -> dict:
    """The bucket named by RLWEB_S3_BUCKET as django-storages' S3Storage. Names stay unique as in the media
    folder (a new file never overwrites one), objects stay private, and a file opened for reading spills to
    a temporary file past a few MB rather than filling memory."""
    options = {
        "bucket_name": os.environ["RLWEB_S3_BUCKET"],
        "endpoint_url": os.environ.get("RLWEB_S3_ENDPOINT_URL") or None,
        "access_key": os.environ.get("RLWEB_S3_ACCESS_KEY_ID") or None,
        "secret_key": os.environ.get("RLWEB_S3_SECRET_ACCESS_KEY") or None,
        "region_name": os.environ.get("RLWEB_S3_REGION") or None,
        "signature_version": "s3v4",
        "file_overwrite": False,
        "default_acl": None,
        "querystring_auth": True,
        "querystring_expire": env_int("RLWEB_S3_URL_SECONDS", 600),
        "max_memory_size": 4 * 1024 * 1024,
    }
    if options["endpoint_url"]:  # MinIO and most other S3-compatible servers: bucket in the path, not the host
        options["addressing_style"] = "path"
    return {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": options}


VAR_DIR = Path(os.environ.get("RLWEB_VAR_DIR") or BASE_DIR / "var").resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)

SECRET_KEY = os.environ.get("RLWEB_SECRET_KEY") or stored_secret_key(VAR_DIR / "secret_key")
DEBUG = env_bool("RLWEB_DEBUG", False)
ALLOWED_HOSTS = env_list("RLWEB_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("RLWEB_CSRF_TRUSTED_ORIGINS", "")
ALLOW_SIGNUP = env_optional_bool("RLWEB_ALLOW_SIGNUP")  # None: the first account, then the admin's switch
LOGIN_FAILURE_LIMIT = env_int("RLWEB_LOGIN_FAILURE_LIMIT", 5)
LOGIN_FAILURE_LIMIT_PER_IP = env_int("RLWEB_LOGIN_FAILURE_LIMIT_PER_IP", 20)
LOGIN_LOCKOUT_MINUTES = env_int("RLWEB_LOGIN_LOCKOUT_MINUTES", 15)  # the cap on the growing delay
LOGIN_FIRST_DELAY_SECONDS = 60  # the wait at the limit; each further refusal doubles it (rlweb/accounts/throttle.py)
LOGIN_FAILURE_HOURS = 24  # how long a refused sign-in counts
MAX_ACTIVE_RUNS_PER_USER = env_int("RLWEB_MAX_ACTIVE_RUNS_PER_USER", 8)
MAX_RUNNING_PER_USER_PER_QUEUE = env_int("RLWEB_MAX_RUNNING_PER_USER_PER_QUEUE", 0)  # scheduler.py; 0: no cap
MAX_TOTAL_STEPS = env_int("RLWEB_MAX_TOTAL_STEPS", 10**9)
STORAGE_QUOTA_MB = env_int("RLWEB_STORAGE_QUOTA_MB", 0)  # per user; 0: no limit (rlweb/experiments/storage_use.py)
AUTO_QUEUE = os.environ.get("RLWEB_AUTO_QUEUE", "cpu")
JOBS_QUEUE = "jobs"  # checkpoint jobs (evaluate, record a video): a worker of its own serves it (checkpoint_jobs.py)
# True where the deployment runs a jobs worker (`make run`, docker-compose): work for it always goes to JOBS_QUEUE and
# waits there while that worker restarts. False: to JOBS_QUEUE only while a live worker serves it (workers.py).
JOBS_WORKER_DEPLOYED = env_bool("RLWEB_JOBS_WORKER_DEPLOYED", False)
NAMED_QUEUES = named_queues("RLWEB_QUEUES")  # routed to by the form's device choice; the worker's -Q lists them
WORKER_BEAT_SECONDS = 10  # a worker rewrites its registry entry this often (rlweb/experiments/workers.py)
WORKER_TTL_SECONDS = 30  # and the entry of a worker that stopped beating is gone after this
TORCH_THREADS = env_int("RLWEB_TORCH_THREADS", 1)
HEARTBEAT_SECONDS = env_int("RLWEB_HEARTBEAT_SECONDS", 5)  # a thread of the worker, whatever training does
HEARTBEAT_TIMEOUT = env_int("RLWEB_HEARTBEAT_TIMEOUT", 30)  # reaped every 10 s: a dead worker is seen in < 45 s
LOGGED_RUN_SILENCE_SECONDS = env_int("RLWEB_LOGGED_RUN_SILENCE_SECONDS", 600)  # rlweb/logged: then it is lost
LOGGED_FILE_MAX_MB = env_int("RLWEB_LOGGED_FILE_MAX_MB", 200)  # per uploaded file of a logged run
LOGGED_POINTS_MAX_MB = env_int("RLWEB_LOGGED_POINTS_MAX_MB", 16)  # per points request (5,000 points, many metrics)
TENSORBOARD_IMPORT_MAX_MB = env_int("RLWEB_TENSORBOARD_IMPORT_MAX_MB", 100)  # rlweb/logged/tensorboard.py
API_RATE_PER_MINUTE = env_int("RLWEB_API_RATE_PER_MINUTE", 600)  # per API token (rlweb/api/throttle.py)
# alerts (rlweb/alerts, docs/alerts.md): mail through Django's email backend, webhooks only to public addresses
EMAIL_BACKEND = os.environ.get("RLWEB_EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.environ.get("RLWEB_EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("RLWEB_EMAIL_PORT", 25)
EMAIL_HOST_USER = os.environ.get("RLWEB_EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("RLWEB_EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("RLWEB_EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("RLWEB_EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = os.environ.get("RLWEB_EMAIL_FROM", "rlweb@localhost")
WEBHOOK_ALLOW_PRIVATE = env_bool("RLWEB_WEBHOOK_ALLOW_PRIVATE", False)
ALERT_RETRY_SECONDS = env_int("RLWEB_ALERT_RETRY_SECONDS", 30)
ALERT_MAX_ATTEMPTS = env_int("RLWEB_ALERT_MAX_ATTEMPTS", 5)
SITE_URL = os.environ.get("RLWEB_SITE_URL", "http://127.0.0.1:8000").rstrip("/")
# read by `trainer` itself from the environment (it never imports Django); shown here for the admin
ENV_MODULES = env_list("RLWEB_ENV_MODULES", "")
MAX_RUN_MEMORY_MB = env_int("RLWEB_MAX_RUN_MEMORY_MB", 0)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rlweb.accounts",
    "rlweb.experiments",
    "rlweb.sweeps",
    "rlweb.suites",
    "rlweb.api",
    "rlweb.logged",
    "rlweb.projects",
    "rlweb.alerts",
    "ninja",  # the API's docs page takes Swagger UI from ninja's static files, not from a CDN a lab may not reach
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
                "rlweb.accounts.signup.context",
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
elif env_bool("RLWEB_DATABASE_POOL", False):
    # each process keeps up to 20 PostgreSQL connections open (psycopg_pool) instead of opening one per request: a
    # new one costs a backend process and about 7 ms, 20 times a second under scripts logging (docs/benchmarks.md)
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {"min_size": 1, "max_size": 20, "timeout": 30}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = ["rlweb.accounts.throttle.ThrottledModelBackend"]  # ModelBackend with login throttling
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
]
WHITENOISE_USE_FINDERS = True  # serve straight from the finders: no collectstatic needed for `make run`
# plotly.js's cartesian bundle (static/vendor/plotly, `make vendor-plotly`; no CDN) has its version in its name:
# browsers keep it (immutable, ten years) instead of asking again every minute; a new version is a new URL
WHITENOISE_IMMUTABLE_FILE_TEST = r"/vendor/plotly/plotly-[a-z]+-\d+\.\d+\.\d+\.min\.js$"
MEDIA_ROOT = VAR_DIR / "media"
MEDIA_URL = "media/"  # never served directly: downloads go through views that check ownership
S3_REDIRECT = env_bool("RLWEB_S3_REDIRECT", False)  # read by rlweb/experiments/files.py
if S3_REDIRECT and not os.environ.get("RLWEB_S3_BUCKET"):
    raise ImproperlyConfigured("RLWEB_S3_REDIRECT=True needs RLWEB_S3_BUCKET: the media folder has no signed URLs")
STORAGES = {
    "default": media_storage(),  # checkpoints and videos: the media folder or a bucket
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

# HTTPS: on in a deployment (docker-compose), off for `make run` on plain http://127.0.0.1
HTTPS = env_bool("RLWEB_HTTPS", False)
if HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")  # a TLS proxy in front says so
SECURE_SSL_REDIRECT = SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = env_int("RLWEB_HSTS_SECONDS", 365 * 24 * 3600) if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
# the preload list is a promise for a whole domain that only its owner can make: not ours to make by default
SILENCED_SYSTEM_CHECKS = ["security.W021"]

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
