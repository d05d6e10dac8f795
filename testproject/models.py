"""The test project's own table: what the steps demo counts from PostgreSQL."""

from __future__ import annotations

from django.db import models


class StepRun(models.Model):
    """One run of a step's function of the demo.three_steps job (manage.py demo_steps), committed on its
    own as the function starts: evidence apart from the queue's records, as the charge demo counts the
    requests that reached the charge service."""

    job_id = models.UUIDField(db_index=True)
    step = models.CharField(max_length=64)
    attempt = models.PositiveIntegerField()
    pid = models.IntegerField()  # the worker process that ran it
    ran_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.step} of {self.job_id} in attempt {self.attempt}"
