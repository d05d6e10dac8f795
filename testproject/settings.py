"""Settings of the project that hosts the demo and the tests.

The database is DATABASE_URL when it is set, otherwise an embedded PostgreSQL 18 that starts
on first use (see testproject/embedded.py). QUEUE_DATABASE_URL, when set, puts the queue on a
database of its own (the alias "queue"). Every RELIABLEQ key can be overridden from the
environment as RELIABLEQ_<KEY>, which is how the tests and the demo tune leases and faults.
"""

from __future__ import annotations

import json
import os
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from reliableq.conf import DEFAULTS

from . import dburl, secret

BASE_DIR = Path(__file__).resolve().parent.parent
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
SECRET_KEY = secret.secret_key(BASE_DIR / ".pgdata" / "secret_key", debug=DEBUG)
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver", "[::1]"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "reliableq",
    "charges",
    "testproject",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",  # X-Frame-Options: DENY
]

ROOT_URLCONF = "testproject.urls"
WSGI_APPLICATION = "testproject.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": dburl.parse(os.environ["DATABASE_URL"])}
    if os.environ.get("LISTEN_DATABASE_URL"):
        # A direct connection for LISTEN when DATABASE_URL goes through a pooler
        # (RELIABLEQ_LISTEN_DATABASE=direct names it).
        DATABASES["direct"] = dburl.parse(os.environ["LISTEN_DATABASE_URL"])
else:
    from . import embedded

    DATABASES = {"default": embedded.database_settings()}

# The queue on a database of its own (issue 13): QUEUE_DATABASE_URL is its URL, or "embedded" for
# a second embedded PostgreSQL 18 (another cluster, in .pgdata/queue). The alias "queue" then holds
# ReliableQ's tables, and only them; the rest (users, sessions, the admin's log, charges) stays on
# default. CI runs the integration suite once this way.
QUEUE_DATABASE_URL = os.environ.get("QUEUE_DATABASE_URL", "")
if QUEUE_DATABASE_URL:
    if QUEUE_DATABASE_URL == "embedded":
        from . import embedded

        DATABASES["queue"] = embedded.database_settings(embedded.QUEUE_DATA_DIR)
    else:
        DATABASES["queue"] = dburl.parse(QUEUE_DATABASE_URL)
    DATABASE_ROUTERS = ["reliableq.routers.QueueRouter"]

for _alias in ("default", "queue"):
    if _alias in DATABASES:
        # Keep connections across requests (each new one costs a PostgreSQL backend fork).
        DATABASES[_alias].setdefault("CONN_MAX_AGE", 60)
        DATABASES[_alias].setdefault("CONN_HEALTH_CHECKS", True)
        test: dict[str, Any] = {} if _alias == "default" else {"DEPENDENCIES": []}  # made without default
        if os.environ.get("RELIABLEQ_TEST_DB"):
            # Lets two test runs share one server without dropping each other's test database.
            test["NAME"] = os.environ["RELIABLEQ_TEST_DB"] + ("" if _alias == "default" else f"_{_alias}")
        if test:
            DATABASES[_alias]["TEST"] = test

# @task functions run on ReliableQ (testproject/tasks.py): django.tasks on Django 6, the
# django-tasks backport (an installed app) on Django 5.2 when it is installed.
TASKS = {
    "default": {"BACKEND": "reliableq.backends.ReliableQBackend", "QUEUES": ["default", "reports"]},
    # A second alias of the same backend: a result names the alias its task was enqueued through.
    "other": {"BACKEND": "reliableq.backends.ReliableQBackend", "QUEUES": ["default", "reports"]},
}
if not find_spec("django.tasks") and find_spec("django_tasks"):
    INSTALLED_APPS.append("django_tasks")

REST_FRAMEWORK = {
    # The throttles' rates (reliableq_submit, reliableq_read, charges): their defaults, unless the
    # variables set others (the benchmarks raise the submit rate, some tests lower them).
    "DEFAULT_THROTTLE_RATES": {
        **json.loads(os.environ.get("TESTPROJECT_THROTTLE_RATES", "{}")),
        **(
            {"reliableq_submit": os.environ["TESTPROJECT_SUBMIT_RATE"]}
            if "TESTPROJECT_SUBMIT_RATE" in os.environ
            else {}
        ),
    },
}

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
# The admin's CSS and JS are served by the project itself (WhiteNoise, from the demo extra), so the
# admin is styled under gunicorn and under runserver with DEBUG off. collectstatic copies them into
# STATIC_ROOT, a git-ignored folder, and WhiteNoise serves that copy, as a deployment would (the
# demo's set-up runs it). Until it has run (a fresh clone's runserver, the test run) WhiteNoise
# reads the apps' static folders instead, so the admin is styled either way.
STATIC_ROOT = BASE_DIR / "staticfiles"
if find_spec("whitenoise"):
    MIDDLEWARE.insert(
        MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1,
        "whitenoise.middleware.WhiteNoiseMiddleware",
    )
    WHITENOISE_USE_FINDERS = not (STATIC_ROOT / "admin").is_dir()
    # WhiteNoise warns about a missing STATIC_ROOT, and the tests turn warnings into errors.
    STATIC_ROOT.mkdir(exist_ok=True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def _from_env(key: str, default: Any) -> Any:
    raw = os.environ.get(f"RELIABLEQ_{key}")
    if raw is None:
        return default
    if raw == "None":
        return None  # RELIABLEQ_MAX_PENDING_PER_SUBMITTER=None
    if default is None:
        try:
            return json.loads(raw)  # RELIABLEQ_CHILD_MAX_JOBS=2 is a number
        except ValueError:
            return raw  # RELIABLEQ_LISTEN_DATABASE=direct
    if isinstance(default, bool):
        return raw.lower() in ("1", "true", "yes", "on")
    if isinstance(default, dict | list):
        return json.loads(raw)  # RELIABLEQ_RETENTION_SECONDS='{"SUCCEEDED": 60}', RELIABLEQ_HTTP_QUEUES='["*"]'
    return type(default)(raw)


RELIABLEQ = {key: _from_env(key, default) for key, default in DEFAULTS.items()}
if "RELIABLEQ_STATS_CACHE_SECONDS" not in os.environ:
    # The tests read the dashboard and the metrics right after changing the jobs they count.
    RELIABLEQ["STATS_CACHE_SECONDS"] = 0.0
if QUEUE_DATABASE_URL and "RELIABLEQ_DATABASE" not in os.environ:
    RELIABLEQ["DATABASE"] = "queue"

# The charges app's own settings, from the environment as CHARGES_<KEY> (CHARGES_SERVICE_URL,
# CHARGES_SERVICE_TOKEN); a key left unset takes the app's default. (Not read from charges.conf,
# so that settings_without_charges never imports the app.)
CHARGES = {
    key: os.environ[f"CHARGES_{key}"] for key in ("SERVICE_URL", "SERVICE_TOKEN") if f"CHARGES_{key}" in os.environ
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"reliableq": {"handlers": ["stderr"], "level": os.environ.get("RELIABLEQ_LOG_LEVEL", "INFO")}},
}
