from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from .helpers import raw_connect


@pytest.fixture
def raw_conn(transactional_db: None) -> Iterator[psycopg.Connection]:
    """A second connection in its own transaction (not autocommit), rolled back and closed after the test."""
    conn = raw_connect()
    try:
        yield conn
    finally:
        conn.rollback()
        conn.close()
