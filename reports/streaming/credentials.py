"""What opened each open stream, checked again while the stream stays open (docs/security.md).

A stream's access is checked when it opens: its session or token, then the task's owner.
The owner of a task never changes, but what let the caller in can end while the stream
goes on: a logout in another tab, a password change, sessions deleted by an admin, a user
deactivated, a token revoked (`manage.py revoke_token`). So one ticker per process, not a
task per stream, checks the credential of every open stream every RECHECK_S, in a fixed
number of queries however many streams are open (the sessions, their users, the tokens:
one query each, and only for the kinds in use; the sessions are decoded and the hashes
compared off the pages' read threads, which the pages' own queries wait on), and ends
the streams whose credential no longer holds: a page's socket closes with 4401
(`consumers.SIGNED_OUT`), an event stream ends. A credential is checked as at the
stream's opening, as Django checks a request's.

A check that fails (the database out of reach) ends nothing: the next one decides.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import import_module
from typing import Protocol

from django.conf import settings
from django.contrib import auth
from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from reports import threads
from reports.models import ApiToken

log = logging.getLogger(__name__)

# How often the open streams' credentials are checked again: the longest a stream goes on
# after its session ended or its token was revoked. One round of a few queries a process.
RECHECK_S = 20.0


@dataclass(frozen=True, slots=True)
class SessionCredential:
    """A stream opened by a browser session: its key, and the user it logged in."""

    key: str
    user_id: object


@dataclass(frozen=True, slots=True)
class TokenCredential:
    """A stream opened with an API token: its digest (the token itself is never kept)."""

    digest: str


Credential = SessionCredential | TokenCredential


class Watched(Protocol):
    """An open stream: what opened it (None once it ended), and how it ends when that no
    longer holds."""

    credential: Credential | None

    async def credential_ended(self) -> None: ...


def session_hash_holds(session_hash: str | None, user) -> bool:
    """Return whether a session's hash of the password is the user's, under the secret key
    or one of SECRET_KEY_FALLBACKS (as `django.contrib.auth.get_user` checks it)."""
    if not session_hash:
        return False
    hashes = [user.get_session_auth_hash(), *user.get_session_auth_fallback_hash()]
    return any(constant_time_compare(session_hash, h) for h in hashes)


@dataclass(slots=True)
class Readings:
    """What the database says of a round of credentials, read in one step: the sessions
    (each as its stored text, or as loaded by an engine that keeps no rows), the users the
    streams opened as, and the tokens that still hold."""

    session_rows: dict[str, str]
    sessions_loaded: dict[str, dict]
    users: dict[object, object]
    digests: set[str]


def read(credentials: set[Credential]) -> Readings:
    """Read what `credentials` rest on: at most three queries, whatever their number. Only
    reads: the sessions are decoded and the hashes compared by `held_of`, off the pages'
    read threads."""
    sessions = {c for c in credentials if isinstance(c, SessionCredential)}
    digests = {c.digest for c in credentials if isinstance(c, TokenCredential)}
    readings = Readings({}, {}, {}, set())
    if sessions:
        store = import_module(settings.SESSION_ENGINE).SessionStore
        keys = {c.key for c in sessions}
        if hasattr(store, "get_model_class"):  # the database engines: one query for them all
            rows = store.get_model_class().objects.filter(
                session_key__in=keys, expire_date__gt=timezone.now()
            )
            readings.session_rows = dict(rows.values_list("pk", "session_data"))
        else:  # another engine reads each session its own way (a cache, a file)
            readings.sessions_loaded = {key: store(key).load() for key in keys}
        # A session counts only for the user its stream opened as: those are the users.
        manager = auth.get_user_model()._default_manager
        readings.users = manager.in_bulk({c.user_id for c in sessions})
    if digests:
        # As `ApiToken.objects.user_for`: a token that exists, of a user who is active.
        valid = ApiToken.objects.filter(digest__in=digests, user__is_active=True)
        readings.digests = set(valid.values_list("digest", flat=True))
    return readings


def held_of(readings: Readings, credentials: set[Credential]) -> set[Credential]:
    """Return those of `credentials` that still let their stream in, by `readings`.

    A session, as `reports.routing.session_user` checks one handshake: it exists and has
    not expired; it names the stream's user, who may still log in through the backend the
    session names; and its hash of the password is still the user's (a password change
    logs every other session out). A token: it exists, and its user is active."""
    sessions = dict(readings.sessions_loaded)
    if readings.session_rows:
        decode = import_module(settings.SESSION_ENGINE).SessionStore().decode
        sessions.update((key, decode(data)) for key, data in readings.session_rows.items())
    pk = auth.get_user_model()._meta.pk
    backends: dict[str, object] = {}
    held: set[Credential] = set()
    for credential in credentials:
        if isinstance(credential, TokenCredential):
            if credential.digest in readings.digests:
                held.add(credential)
            continue
        session = sessions.get(credential.key)
        user = readings.users.get(credential.user_id)
        if session is None or user is None:
            continue
        try:
            user_id = pk.to_python(session[auth.SESSION_KEY])
            backend = session[auth.BACKEND_SESSION_KEY]
        except (KeyError, ValueError, ValidationError):
            continue
        if user_id != credential.user_id or backend not in settings.AUTHENTICATION_BACKENDS:
            continue
        if backend not in backends:
            backends[backend] = auth.load_backend(backend)
        may_log_in = getattr(backends[backend], "user_can_authenticate", None)
        if may_log_in is not None and not may_log_in(user):
            continue
        if session_hash_holds(session.get(auth.HASH_SESSION_KEY), user):
            held.add(credential)
    return held


class _Rechecks:
    """One ticker per process for every open stream, as `consumers._Heartbeats` is for
    the pages: every RECHECK_S it checks what opened each stream, all at once, and ends
    those whose credential no longer holds.

    The event streams are watched here one by one; the pages are read from the set their
    own ticker keeps (`add_source`): a second weak set of them cost an idle page more
    than half a kilobyte (benchmark 6).
    """

    def __init__(self) -> None:
        self.streams: weakref.WeakSet[Watched] = weakref.WeakSet()
        self.sources: list[Callable[[], Iterable[Watched]]] = []
        self.ticker: asyncio.Task | None = None

    def add_source(self, source: Callable[[], Iterable[Watched]]) -> None:
        """Check the streams `source()` holds too (those with a credential)."""
        self.sources.append(source)

    def watch(self, stream: Watched | None = None) -> None:
        """Check `stream` from now on (a stream of a source: None), and keep checking."""
        if stream is not None:
            self.streams.add(stream)
        loop = asyncio.get_running_loop()
        if self.ticker is None or self.ticker.done() or self.ticker.get_loop() is not loop:
            # Outside any request's context: the request of the stream that starts the
            # ticker ends long before the others, and its thread goes with it.
            self.ticker = loop.create_task(self._tick(), context=contextvars.Context())

    def forget(self, stream: Watched) -> None:
        self.streams.discard(stream)

    def _open(self) -> list[Watched]:
        held = [stream for source in self.sources for stream in source()]
        return [*self.streams, *(stream for stream in held if stream.credential is not None)]

    async def _tick(self) -> None:
        while self._open():
            await asyncio.sleep(RECHECK_S)
            await self.check()

    async def check(self) -> None:
        """Check every open stream's credential now; end the streams whose one ended."""
        streams = self._open()
        if not streams:
            return
        try:
            round_ = {s.credential for s in streams}
            readings = await threads.on_page_reads(read)(round_)
            held = await threads.in_blocking_pool(held_of)(readings, round_)
        except Exception:
            log.warning("could not check the open streams' credentials", exc_info=True)
            return
        for stream in streams:
            # Skipped: a stream that ended meanwhile (it forgot its credential or was
            # forgotten here).
            if stream.credential is None or stream.credential in held:
                continue
            if stream in self.streams:
                self.streams.discard(stream)
            try:
                await stream.credential_ended()
            except Exception:  # a stream closing meanwhile: its own end cleans up
                log.debug("a stream ended while its credential was checked", exc_info=True)


_rechecks = _Rechecks()
watch = _rechecks.watch
forget = _rechecks.forget
add_source = _rechecks.add_source
check_now = _rechecks.check
