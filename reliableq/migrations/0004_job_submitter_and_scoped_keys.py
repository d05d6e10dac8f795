from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("reliableq", "0003_task_return_values"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="job",
            options={
                "ordering": ["-created_at"],
                "permissions": [
                    ("submit_job", "Can submit jobs over HTTP"),
                    ("replay_job", "Can replay a dead job"),
                    ("cancel_job", "Can cancel a job"),
                    ("pause_queue", "Can pause and resume a queue"),
                ],
            },
        ),
        migrations.AddField(
            model_name="job",
            name="dedupe_scope",
            field=models.CharField(blank=True, db_default="", default="", editable=False, max_length=80),
        ),
        migrations.AddField(
            model_name="job",
            name="submitted_by",
            field=models.CharField(blank=True, db_default="", default="", editable=False, max_length=150),
        ),
        migrations.AlterField(
            model_name="job",
            name="dedupe_key",
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                fields=("dedupe_scope", "dedupe_key"), name="reliableq_job_dedupe_unique"
            ),
        ),
    ]
