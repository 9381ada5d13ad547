from django.urls import path

from reports import api, ops

urlpatterns = [
    path("api/tasks", api.tasks, name="api-tasks"),
    path("api/tasks/<str:task_id>", api.task_detail, name="api-task"),
    path("api/tasks/<str:task_id>/events", api.events, name="api-task-events"),
    path("api/tasks/<str:task_id>/cancel", api.cancel, name="api-task-cancel"),
    path("api/tasks/<str:task_id>/result", api.result, name="api-task-result"),
    path("api/tasks/<str:task_id>/timing", api.timing, name="api-task-timing"),
    # observability (docs/observability.md)
    path("version", ops.version, name="version"),
    path("metrics", ops.metrics_view, name="metrics"),
    path("staff/latency/", ops.latency_page, name="staff-latency"),
]
