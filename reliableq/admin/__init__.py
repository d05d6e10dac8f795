"""The operators' admin: a fast, read-only job list, attempt history, replay and cancel, a
dashboard, the workers panel, workflows drawn as graphs, schedules to add, change and run.

No business rules here: replay, cancel, pause and resume call reliableq.services, as the API
does. Importing the package registers every ModelAdmin (Django's autodiscovery imports it).
"""

from .common import MAX_SELECTION, ReadOnlyAdmin, RefusesNul, register_effect_link, status_badge
from .dashboard import QueueDashboardAdmin
from .filters import MAX_KIND_CHOICES, MAX_QUEUE_CHOICES
from .jobs import JobAdmin
from .schedules import ScheduleAdmin
from .workers import WorkerAdmin
from .workflows import WorkflowAdmin

__all__ = [
    "MAX_KIND_CHOICES",
    "MAX_QUEUE_CHOICES",
    "MAX_SELECTION",
    "JobAdmin",
    "QueueDashboardAdmin",
    "ReadOnlyAdmin",
    "RefusesNul",
    "ScheduleAdmin",
    "WorkerAdmin",
    "WorkflowAdmin",
    "register_effect_link",
    "status_badge",
]
