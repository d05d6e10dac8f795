"""Many processes post one Idempotency-Key at once to the live charge service (gunicorn)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from charges.models import Charge, ChargeRequest

pytestmark = [pytest.mark.slow]

# Each client connects first, says "ready", waits for "go" on stdin, then sends its request:
# the parent releases all of them at once, a barrier across processes.
CLIENT = r"""
import http.client, json, sys
host, port, token, key = sys.argv[1:5]
conn = http.client.HTTPConnection(host, int(port), timeout=30)
conn.connect()
body = json.dumps({"amount": 1234, "currency": "EUR", "description": "race"})
headers = {"Content-Type": "application/json", "Authorization": "Token " + token, "Idempotency-Key": key}
print("ready", flush=True)
sys.stdin.readline()
conn.request("POST", "/v1/charges", body=body, headers=headers)
response = conn.getresponse()
print(json.dumps({"status": response.status, "body": response.read().decode(errors="replace")}), flush=True)
"""


def test_eight_processes_posting_one_key_at_once_make_one_charge_one_201_and_seven_200(charge_service):
    key = f"test:{uuid.uuid4()}"
    host, port = charge_service.url.removeprefix("http://").split(":")
    clients = [
        subprocess.Popen(
            [sys.executable, "-c", CLIENT, host, port, charge_service.token, key],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    try:
        for c in clients:
            assert c.stdout.readline().strip() == "ready", c.stderr.read()
        for c in clients:
            c.stdin.write("go\n")
            c.stdin.flush()
        answers = []
        for c in clients:
            out, err = c.communicate(timeout=30)
            assert c.returncode == 0, err
            answers.append(json.loads(out))
    finally:
        for c in clients:
            if c.poll() is None:
                c.kill()
                c.wait()

    assert sorted(a["status"] for a in answers) == [200] * 7 + [201], answers
    charge = Charge.objects.get(idempotency_key=key)
    assert {json.loads(a["body"])["id"] for a in answers} == {str(charge.id)}
    assert Charge.objects.count() == 1
    assert ChargeRequest.objects.filter(idempotency_key=key).count() == 8
