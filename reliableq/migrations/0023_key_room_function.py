"""A per-key claim's room for a key, read under the key's lock in a snapshot of its own by a PL/pgSQL
function (reliableq.queue.functions), so that the claim is one statement."""

from django.db import migrations

from ._functions import function


class Migration(migrations.Migration):
    dependencies = [("reliableq", "0022_job_replayed_at_attempt")]

    operations = [function("KEY_ROOM_CREATE", "KEY_ROOM_DROP")]
