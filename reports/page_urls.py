from django.urls import path

from reports import views

urlpatterns = [
    path("", views.home, name="home"),
    path("tasks/<uuid:task_id>/", views.task, name="task"),
    path("tasks/<uuid:task_id>/fresh/", views.fresh, name="task-fresh"),
]
