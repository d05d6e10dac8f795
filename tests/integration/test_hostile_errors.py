"""A handler's exception may carry what no text column holds (NUL, a lone surrogate): its failure is
still recorded, in the finish's one statement, with those characters written out."""

from __future__ import annotations

import pytest

import reliableq
from reliableq.models import Attempt, Job, JobStatus
from reliableq.testing import run_due

pytestmark = pytest.mark.django_db


def raise_garbage(job: object) -> None:
    raise reliableq.PermanentError("bad\x00byte and a lone \ud800 surrogate")


def test_an_error_with_nul_and_a_lone_surrogate_is_stored_written_out() -> None:
    reliableq.handler("test.garbage_error")(raise_garbage)
    job = reliableq.enqueue("test.garbage_error", {})
    [ran] = run_due()
    assert ran.status == JobStatus.DEAD
    stored = Job.objects.get(pk=job.id)
    assert stored.last_error.startswith("PermanentError: bad\\x00byte and a lone ? surrogate")
    attempt = Attempt.objects.get(job=stored)
    assert "\\x00" in attempt.traceback and "\x00" not in attempt.traceback
