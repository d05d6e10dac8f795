"""Run by tests/test_boundaries.py in a process whose settings leave the charges app out.

Migrates a database of its own, then exercises what an operator and a client touch: the schema,
readiness, the admin's job list, a job's page and the dashboard, and a job run in-process. It
fails if anything imported the charges package along the way.
"""

from __future__ import annotations

import json
import sys

import django

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402

import reliableq  # noqa: E402
from reliableq import registry  # noqa: E402


def main() -> None:
    call_command("migrate", verbosity=0)
    call_command("check", fail_level="WARNING")
    admin = User.objects.create_superuser("root", email="root@example.com", password=None)
    client = Client()
    client.force_login(admin)
    job = reliableq.enqueue("demo.noop", {"n": 1})

    schema = client.get("/v1/schema")
    answers = {
        "schema": schema.status_code,
        "ready": client.get("/v1/ready").status_code,
        "job list": client.get("/admin/reliableq/job/").status_code,
        "job page": client.get(f"/admin/reliableq/job/{job.id}/change/").status_code,
        "dashboard": client.get("/admin/reliableq/queuedashboard/").status_code,
        "api job": client.get(f"/v1/jobs/{job.id}").status_code,
        "charges route": client.get("/v1/charges/x").status_code,
    }
    print(
        json.dumps(
            {
                "answers": answers,
                "schema_mentions_charges": "charge" in schema.content.decode().lower(),
                "charge_kind_registered": "charge" in registry.kinds(),
                "charges_imported": sorted(m for m in sys.modules if m == "charges" or m.startswith("charges.")),
            }
        )
    )


if __name__ == "__main__":
    main()
