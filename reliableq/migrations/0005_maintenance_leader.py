from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("reliableq", "0004_job_submitter_and_scoped_keys"),
    ]

    operations = [
        migrations.CreateModel(
            name="Leader",
            fields=[
                ("name", models.CharField(max_length=100, primary_key=True, serialize=False)),
                ("holder", models.CharField(max_length=200)),
                ("token", models.UUIDField()),
                ("expires_at", models.DateTimeField()),
            ],
        ),
    ]
