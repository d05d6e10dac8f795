"""PgBouncer in transaction mode in front of the test database (Debian's pgbouncer)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from django.db import connection

from bench import pgbouncer


@pytest.fixture
def bouncer(db_url: str) -> Iterator[pgbouncer.PgBouncer]:
    """PgBouncer, pool_mode=transaction, default_pool_size=4, pooling the test database."""
    if not pgbouncer.available():
        if os.environ.get("CI"):
            pytest.fail("pgbouncer is not installed; .ci/run installs it (apt-get install pgbouncer)")
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    with pgbouncer.PgBouncer.start(connection.settings_dict, pool_size=4) as running:
        yield running
