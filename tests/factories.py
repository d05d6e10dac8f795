"""factory_boy factories for jobs in any state, written straight to the database."""

from __future__ import annotations

import uuid

import factory
from django.utils import timezone

from reliableq.models import Attempt, Job, JobStatus, Outcome


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

    kind = "demo.noop"
    payload = factory.Sequence(lambda n: {"n": n})
    max_attempts = 5


class RunningJobFactory(JobFactory):
    """A job claimed by `worker_id` under a lease, with its open attempt."""

    class Meta:
        skip_postgeneration_save = True  # the hook only adds the attempt; the job needs no second save

    status = JobStatus.RUNNING
    attempts = 1
    lease_token = factory.LazyFunction(uuid.uuid4)
    lease_expires_at = factory.LazyFunction(lambda: timezone.now() + timezone.timedelta(seconds=30))
    worker_id = "w-old"

    @factory.post_generation
    def attempt(obj: Job, create: bool, extracted: object, **kwargs: object) -> None:
        if create:
            Attempt.objects.create(
                job=obj,
                number=obj.attempts,
                worker_id=obj.worker_id,
                lease_token=obj.lease_token,
                outcome=Outcome.RUNNING,
            )
