"""testproject's SECRET_KEY: DJANGO_SECRET_KEY, else one generated on first use and kept in a git-ignored file.

No key is committed: a site started from this repository never signs sessions with a key
that anyone can read on GitHub.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

# The key an earlier version committed as its fallback; refused, so an old .env cannot bring it back.
COMMITTED_FALLBACK = "testproject-insecure-key-only-for-the-demo-and-tests"


def secret_key(path: Path, *, debug: bool) -> str:
    key = os.environ.get("DJANGO_SECRET_KEY") or _generated(path)
    if key == COMMITTED_FALLBACK and not debug:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is the key that was committed to the repository; with DEBUG off that "
            "would let anyone forge sessions. Unset it (a key is generated in .pgdata/secret_key) or set your own."
        )
    return key


def _generated(path: Path) -> str:
    """Read the key file, or create it: written aside, then linked into place, so that processes
    starting together all read the same complete key."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    # Made 0600 by open() itself: written first and chmodded after, the key is readable in between.
    with os.fdopen(os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(secrets.token_urlsafe(50))
    try:
        os.link(aside, path)
    except FileExistsError:
        pass  # another process won the race: use its key
    finally:
        aside.unlink()
    return path.read_text().strip()
