"""The API's token lookup as a PL/pgSQL function whose plan the server keeps (reliableq.api.tokenfunction).

Created only where the lookup reads: PostgreSQL, rest_framework.authtoken installed, and the user
table in this database (with the queue on a database of its own, the user table is elsewhere and
the lookup sends its plain statement). Written from the models as they are when it runs; a later
release that changes the lookup replaces the function in a migration of its own.
"""

from django.apps import apps as installed
from django.conf import settings
from django.core.exceptions import FieldDoesNotExist
from django.db import migrations


def create(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql" or not installed.is_installed("rest_framework.authtoken"):
        return
    from rest_framework.authtoken.models import Token

    from reliableq.api import tokenfunction

    user_model = apps.get_model(settings.AUTH_USER_MODEL)
    tables = set(connection.introspection.table_names())
    if user_model._meta.db_table not in tables:
        return
    try:
        user_model._meta.get_field("user_permissions")
        user_model._meta.get_field("groups")
    except FieldDoesNotExist:  # a user model without PermissionsMixin: the lookup's permissions do not apply
        return
    schema_editor.execute(tokenfunction.create_sql(user_model, Token._meta.db_table))
    tokenfunction.forget()


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        from reliableq.api import tokenfunction

        schema_editor.execute(tokenfunction.drop_sql())
        tokenfunction.forget()


class Migration(migrations.Migration):
    dependencies = [
        ("reliableq", "0009_time_ordered_ids_one_attempt_index"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [migrations.RunPython(create, drop)]
