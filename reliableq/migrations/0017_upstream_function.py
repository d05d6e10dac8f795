"""A workflow member's upstream values, read by the claim through a PL/pgSQL function
(reliableq.queue.functions) instead of a subquery every claim planned and set up."""

from django.db import migrations


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        from reliableq.queue import functions

        schema_editor.execute(functions.UPSTREAM_CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        from reliableq.queue import functions

        schema_editor.execute(functions.UPSTREAM_DROP)


class Migration(migrations.Migration):
    dependencies = [("reliableq", "0016_fair_share")]

    operations = [migrations.RunPython(create, drop)]
