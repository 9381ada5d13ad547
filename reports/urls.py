from django.urls import path

from reports import api, health, views
from reports.observability import views as observability_views
from reports.sharing import api as sharing_api
from reports.sharing import views as sharing_views
from reports.streaming import sse
from reports.webhooks import api as webhooks_api
from reports.webhooks import pages as webhooks_pages

urlpatterns = [
    # pages
    path("", views.home, name="home"),
    path("tasks/<uuid:task_id>/", views.task, name="task"),
    path("tasks/<uuid:task_id>/retry/", views.retry, name="task-retry"),
    path("tasks/<uuid:task_id>/sources/<str:passage_id>/", views.source, name="task-source"),
    path("tasks/<uuid:task_id>/share/", sharing_views.create, name="task-share"),
    path("tasks/<uuid:task_id>/share/revoke/", sharing_views.revoke, name="task-share-revoke"),
    # read-only share links, open to anyone who has one (docs/sharing.md)
    path("shared/<str:token>/", sharing_views.report, name="shared-report"),
    path(
        "shared/<str:token>/sources/<str:passage_id>/", sharing_views.source, name="shared-source"
    ),
    path("settings/webhooks/", webhooks_pages.settings_page, name="settings-webhooks"),
    path(
        "settings/webhooks/<str:webhook_id>/remove",
        webhooks_pages.remove,
        name="settings-webhook-remove",
    ),
    path(
        "settings/webhooks/<str:webhook_id>/secret",
        webhooks_pages.new_secret,
        name="settings-webhook-secret",
    ),
    # the JSON API and the event stream (docs/api.md)
    path("api/tasks", api.tasks, name="api-tasks"),
    path("api/tasks/<str:task_id>", api.task_detail, name="api-task"),
    path("api/tasks/<str:task_id>/events", sse.events, name="api-task-events"),
    path("api/tasks/<str:task_id>/cancel", api.cancel, name="api-task-cancel"),
    path("api/tasks/<str:task_id>/retry", api.retry, name="api-task-retry"),
    path("api/tasks/<str:task_id>/result", api.result, name="api-task-result"),
    path("api/tasks/<str:task_id>/timing", api.timing, name="api-task-timing"),
    path("api/tasks/<str:task_id>/sources/<str:passage_id>", api.source, name="api-task-source"),
    path("api/tasks/<str:task_id>/share", sharing_api.share, name="api-task-share"),
    path("api/webhooks", webhooks_api.webhooks, name="api-webhooks"),
    path("api/webhooks/<str:webhook_id>", webhooks_api.webhook, name="api-webhook"),
    path(
        "api/webhooks/<str:webhook_id>/secret",
        webhooks_api.secret,
        name="api-webhook-secret",
    ),
    # observability (docs/observability.md)
    path("version", observability_views.version, name="version"),
    path("metrics", observability_views.metrics_view, name="metrics"),
    path("staff/latency/", observability_views.latency_page, name="staff-latency"),
    # load balancers and orchestrators (docs/production.md)
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
]
