from django.urls import path

from reports.streaming.consumers import TaskConsumer

websocket_urlpatterns = [
    path("ws/tasks/<str:task_id>/", TaskConsumer.as_asgi()),
]
