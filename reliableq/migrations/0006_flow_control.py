from django.db import migrations, models

import reliableq.fields


class Migration(migrations.Migration):
    dependencies = [
        ("reliableq", "0005_maintenance_leader"),
    ]

    operations = [
        migrations.CreateModel(
            name="QueueState",
            fields=[
                ("name", models.CharField(max_length=100, primary_key=True, serialize=False)),
                ("paused_at", models.DateTimeField(blank=True, null=True)),
                ("paused_until", models.DateTimeField(blank=True, help_text="Empty: until resumed.", null=True)),
                ("paused_by", models.CharField(blank=True, default="", max_length=150)),
            ],
            options={
                "verbose_name": "queue",
            },
        ),
        migrations.CreateModel(
            name="RateWindow",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("kind", models.CharField(max_length=200)),
                ("shard", models.PositiveSmallIntegerField(default=0)),
                ("buckets", reliableq.fields.BigIntegerArrayField(default=list)),
                ("counts", reliableq.fields.IntegerArrayField(default=list)),
            ],
        ),
        migrations.AddField(
            model_name="job",
            name="cancel_requested_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="concurrency_key",
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="snoozes",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="job",
            name="unique_key",
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.AlterField(
            model_name="attempt",
            name="outcome",
            field=models.CharField(
                choices=[
                    ("RUNNING", "Running"),
                    ("SUCCEEDED", "Succeeded"),
                    ("FAILED_TRANSIENT", "Failed Transient"),
                    ("FAILED_PERMANENT", "Failed Permanent"),
                    ("TIMED_OUT", "Timed Out"),
                    ("LEASE_EXPIRED", "Lease Expired"),
                    ("LEASE_LOST", "Lease Lost"),
                    ("SNOOZED", "Snoozed"),
                    ("CANCELLED", "Cancelled"),
                ],
                default="RUNNING",
                max_length=16,
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("concurrency_key__isnull", False), ("status", "RUNNING")),
                fields=["kind", "concurrency_key"],
                name="reliableq_job_key_running",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status__in", ["PENDING", "RUNNING"]), ("unique_key__isnull", False)),
                fields=("kind", "dedupe_scope", "unique_key"),
                name="reliableq_job_unique_active",
            ),
        ),
        migrations.AddConstraint(
            model_name="ratewindow",
            constraint=models.UniqueConstraint(fields=("kind", "shard"), name="reliableq_ratewindow_kind_shard"),
        ),
    ]
