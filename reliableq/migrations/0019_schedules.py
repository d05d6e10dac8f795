"""Schedules: a periodic job's row, whether code or an operator declared it."""

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("reliableq", "0018_workflow_cascades"),
    ]

    operations = [
        migrations.CreateModel(
            name="Schedule",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=200, unique=True)),
                ("kind", models.CharField(max_length=200)),
                ("cron", models.CharField(help_text="Five fields, or six with seconds first.", max_length=200)),
                ("payload", models.JSONField(blank=True, default=dict)),
                (
                    "timezone",
                    models.CharField(default="UTC", help_text="An IANA name, like Europe/Paris.", max_length=64),
                ),
                ("enabled", models.BooleanField(default=True)),
                (
                    "catch_up",
                    models.CharField(
                        choices=[("latest", "Latest"), ("all", "All"), ("none", "None")], default="latest", max_length=8
                    ),
                ),
                (
                    "overlap",
                    models.CharField(choices=[("allow", "Allow"), ("skip", "Skip")], default="allow", max_length=8),
                ),
                ("queue", models.CharField(default="default", max_length=100)),
                ("priority", models.IntegerField(default=0, help_text="Lower runs first.")),
                ("from_code", models.BooleanField(default=False, editable=False, verbose_name="declared in code")),
                ("last_slot", models.DateTimeField(blank=True, editable=False, null=True)),
                ("last_job", models.UUIDField(blank=True, editable=False, null=True)),
                ("next_slot", models.DateTimeField(blank=True, editable=False, null=True)),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now(), editable=False),
                ),
                (
                    "updated_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now(), editable=False),
                ),
            ],
            options={
                "ordering": ["name"],
                "indexes": [
                    models.Index(
                        condition=models.Q(("enabled", True)), fields=["next_slot"], name="reliableq_schedule_due"
                    )
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("catch_up__in", ["latest", "all", "none"])),
                        name="reliableq_schedule_catch_up_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("overlap__in", ["allow", "skip"])), name="reliableq_schedule_overlap_valid"
                    ),
                ],
            },
        ),
    ]
