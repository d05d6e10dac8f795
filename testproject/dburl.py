"""DATABASE_URL <-> Django DATABASES entries, for PostgreSQL (TCP or a socket dir) and SQLite."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit


def parse(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": unquote(parts.path[1:]) or ":memory:"}
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"DATABASE_URL must start with postgres:// (or sqlite:// for checks); got {parts.scheme}://")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    host = query.pop("host", None) or unquote(parts.hostname or "")
    port = query.pop("port", None) or str(parts.port or "")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")) or "postgres",
        "USER": unquote(parts.username or "postgres"),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": port,
        "OPTIONS": query,
    }


def build(db: dict[str, Any], *, name: str | None = None) -> str:
    """The URL of a PostgreSQL DATABASES entry, optionally for another database name."""
    user = quote(db.get("USER") or "postgres", safe="")
    password = db.get("PASSWORD") or ""
    auth = f"{user}:{quote(password, safe='')}@" if password else f"{user}@"
    host = db.get("HOST") or ""
    query = dict(db.get("OPTIONS") or {})
    netloc = auth
    if host.startswith("/") or "," in host:
        # A socket directory can hold sockets for several ports; a libpq host list (a failover
        # pair: "h1,h2" with ports "p1,p2") has no form in the URL's authority.
        query["host"] = host
        if db.get("PORT"):
            query["port"] = str(db["PORT"])
    else:
        netloc += host
        if db.get("PORT"):
            netloc += f":{db['PORT']}"
    suffix = f"?{urlencode(query)}" if query else ""
    return f"postgresql://{netloc}/{quote(name or db['NAME'])}{suffix}"
