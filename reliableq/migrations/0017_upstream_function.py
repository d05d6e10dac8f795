"""A workflow member's upstream values, read by the claim through a PL/pgSQL function
(reliableq.queue.functions) instead of a subquery every claim planned and set up."""

from django.db import migrations

from ._functions import function


class Migration(migrations.Migration):
    dependencies = [("reliableq", "0016_fair_share")]

    operations = [function("UPSTREAM_CREATE", "UPSTREAM_DROP")]
