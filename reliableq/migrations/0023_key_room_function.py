"""A per-key claim's room for a key, read under the key's lock in a snapshot of its own by a PL/pgSQL
function (reliableq.queue.functions), so that the claim is one statement."""

from django.db import migrations


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        from reliableq.queue import functions

        schema_editor.execute(functions.KEY_ROOM_CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        from reliableq.queue import functions

        schema_editor.execute(functions.KEY_ROOM_DROP)


class Migration(migrations.Migration):
    dependencies = [("reliableq", "0022_job_replayed_at_attempt")]

    operations = [migrations.RunPython(create, drop)]
