"""PostgreSQL array columns without django.contrib.postgres.

ArrayField makes Django (6.x) require django.contrib.postgres in INSTALLED_APPS, a change to a
user's settings for two columns that only the queue's own SQL writes. psycopg reads and writes
these arrays as Python lists by itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import models

if TYPE_CHECKING:
    _Field = models.Field[Any, Any]
else:
    _Field = models.Field  # generic in the stubs only


class BigIntegerArrayField(_Field):
    description = "An array of bigint"

    def db_type(self, connection: Any) -> str:
        return "bigint[]"


class IntegerArrayField(_Field):
    description = "An array of integer"

    def db_type(self, connection: Any) -> str:
        return "integer[]"


class UUIDArrayField(_Field):
    description = "An array of uuid"

    def db_type(self, connection: Any) -> str:
        return "uuid[]"
