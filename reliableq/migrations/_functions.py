"""The operation of a migration that creates one of the server-side functions whose SQL
reliableq.queue.functions holds (read when the migration runs), and drops it when reversed.
Django's loader passes over this module: its name starts with an underscore."""

from django.db import migrations


def function(create: str, drop: str) -> migrations.RunPython:
    """Run functions.<create> forward and functions.<drop> backward, on PostgreSQL only."""

    def forward(apps, schema_editor):
        _execute(schema_editor, create)

    def backward(apps, schema_editor):
        _execute(schema_editor, drop)

    return migrations.RunPython(forward, backward)


def _execute(schema_editor, name: str) -> None:
    if schema_editor.connection.vendor == "postgresql":
        from reliableq.queue import functions

        schema_editor.execute(getattr(functions, name))
