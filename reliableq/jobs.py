"""ReliableQ's own job kinds, discovered like any app's jobs.py."""

from __future__ import annotations

from importlib.util import find_spec

# `django.task` runs Django Tasks; it exists only where a Tasks framework does
# (django.tasks on Django 6, the django-tasks backport on Django 5.2).
if find_spec("django.tasks") or find_spec("django_tasks"):
    from . import backends  # noqa: F401
