"""ReliableQ's HTTP routes: include("reliableq.urls") at the root."""

from django.urls import path

from .api import event_views, schedule_views, schema, views, workflow_views

app_name = "reliableq"
urlpatterns = [
    path("v1/jobs", views.JobListView.as_view(), name="job-list"),
    path("v1/jobs/batch", views.JobBatchView.as_view(), name="job-batch"),  # before <job_id>, which it would match
    path("v1/jobs/<str:job_id>", views.JobDetailView.as_view(), name="job-detail"),
    path("v1/jobs/<str:job_id>/replay", views.ReplayView.as_view(), name="job-replay"),
    path("v1/jobs/<str:job_id>/cancel", views.CancelView.as_view(), name="job-cancel"),
    path("v1/workflows", workflow_views.WorkflowListView.as_view(), name="workflow-list"),
    path("v1/workflows/<str:workflow_id>", workflow_views.WorkflowDetailView.as_view(), name="workflow-detail"),
    path("v1/workflows/<str:workflow_id>/cancel", workflow_views.WorkflowCancelView.as_view(), name="workflow-cancel"),
    path("v1/queues", views.QueueListView.as_view(), name="queue-list"),
    path("v1/queues/<str:name>/pause", views.QueuePauseView.as_view(), name="queue-pause"),
    path("v1/queues/<str:name>/resume", views.QueueResumeView.as_view(), name="queue-resume"),
    path("v1/events/<str:name>", event_views.EventEmitView.as_view(), name="event-emit"),
    path("v1/schedules", schedule_views.ScheduleListView.as_view(), name="schedule-list"),
    path("v1/stats", views.StatsView.as_view(), name="stats"),
    path("v1/schema", schema.SchemaView.as_view(), name="schema"),
    path("v1/ready", views.ReadyView.as_view(), name="ready"),
    path("v1/metrics", views.MetricsView.as_view(), name="metrics"),
]
