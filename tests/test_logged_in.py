"""Who is logged in, read by statements compiled once: the same answers as Django's own."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import BACKEND_SESSION_KEY
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

pytestmark = pytest.mark.django_db


def logged_in(client: Client) -> bool:
    """Whether the upload page lets `client` in, rather than sending it to log in."""
    return client.get("/").status_code == 200


def test_a_session_lets_its_user_in_until_it_expires(alice_client):
    for _ in range(2):  # the second read runs the statements compiled by the first
        assert logged_in(alice_client)
    Session.objects.update(expire_date=timezone.now() - timedelta(seconds=1))
    assert not logged_in(alice_client)


def test_a_user_made_inactive_is_let_in_no_more(alice, alice_client):
    assert logged_in(alice_client)
    alice.is_active = False
    alice.save()
    assert not logged_in(alice_client)


def test_a_session_django_logged_in_before_keeps_its_user_in(alice):
    client = Client()
    client.force_login(alice, backend="django.contrib.auth.backends.ModelBackend")
    session = Session.objects.get().get_decoded()
    assert session[BACKEND_SESSION_KEY] == "django.contrib.auth.backends.ModelBackend"
    assert logged_in(client)


def test_a_password_login_is_kept_by_the_compiled_backend(alice):
    client = Client()
    assert client.login(username="alice", password="alice-pass")
    session = Session.objects.get().get_decoded()
    assert session[BACKEND_SESSION_KEY] == "reports.serving.logged_in.UserBackend"
    assert logged_in(client)
