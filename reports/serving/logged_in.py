"""Who is logged in: the session a request's cookie names and the user it logged in as,
each read by one statement compiled once (`reports.models.compiled`).

Every page, call and socket of a logged-in user reads both, and Django's own reads were
built and compiled by the ORM for each request: about 2 ms of a page's 7 ms in process on
SQLite, for well under a millisecond of the database's work. What they read and how they
check it is Django's (`django.contrib.sessions.backends.db`, `ModelBackend`).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.sessions.backends import db
from django.contrib.sessions.models import Session
from django.utils import timezone

from reports.models import CompiledRead


class SessionStore(db.SessionStore):
    """The database's sessions (`SESSION_ENGINE`)."""

    def _get_session_from_db(self):
        found = _SESSION.instance(self.session_key, timezone.now())
        if found is None:
            self._session_key = None
        return found


class UserBackend(ModelBackend):
    """Django's backend of users and passwords (`AUTHENTICATION_BACKENDS`)."""

    def get_user(self, user_id):
        user = _USER.instance(user_id)
        return user if user is not None and self.user_can_authenticate(user) else None


_SESSION = CompiledRead(
    lambda key, now: Session.objects.filter(session_key=key, expire_date__gt=now)[:1],
    lambda key, now: [  # the ORM's order: by name
        (Session._meta.get_field("expire_date"), now),
        (Session._meta.pk, key),
    ],
)
_USER = CompiledRead(
    lambda user_id: get_user_model()._default_manager.filter(pk=user_id)[:1],
    lambda user_id: [(get_user_model()._meta.pk, user_id)],
)
