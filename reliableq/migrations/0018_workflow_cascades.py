from django.db import migrations, models
from django.db.models.functions import Now


def callbacks_in_their_submitters_scope(apps, schema_editor):
    """A callback's dedupe key moves from the scope `workflow:<id>` (key `<run>:<event>`) to its
    workflow's submitter's scope (key `workflow:<id>:<run>:<event>`), so that it counts against that
    submitter's bound of unfinished jobs; it stays unique, and an end still finds it by that key."""
    Job = apps.get_model("reliableq", "Job")
    table = Job._meta.db_table
    workflow = apps.get_model("reliableq", "Workflow")._meta.db_table
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {table} j
               SET dedupe_scope = w.dedupe_scope, submitted_by = w.submitted_by,
                   dedupe_key = 'workflow:' || w.id::text || ':' || j.dedupe_key
              FROM {workflow} w
             WHERE j.workflow_id = w.id AND j.member_name IS NULL AND j.dedupe_scope = 'workflow:' || w.id::text
            """
        )


class Migration(migrations.Migration):
    dependencies = [("reliableq", "0017_upstream_function")]

    operations = [
        migrations.CreateModel(
            name="WorkflowCascade",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("member", models.UUIDField(unique=True)),
                ("workflow", models.UUIDField()),
                ("created_at", models.DateTimeField(db_default=Now())),
            ],
        ),
        migrations.RunPython(callbacks_in_their_submitters_scope, migrations.RunPython.noop),
    ]
