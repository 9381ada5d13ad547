from django.urls import path

websocket_urlpatterns: list = []
