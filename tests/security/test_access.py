"""Who may do what: alice owns, bob and an anonymous client are refused exactly as for a
task that does not exist; unsafe browser requests need CSRF; tokens are stored hashed and
can be revoked; task creation is rate-limited per user; logins are throttled."""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from reports.models import ApiToken, Task
from reports.worker.leases import claim_next_task
from tests.helpers import TASK_ROUTES, assert_refused, snapshot, submit, upload

pytestmark = pytest.mark.django_db


def call(client: Client, method: str, path: str, **extra):
    if method == "post":
        return client.post(path, '{"frontend_first_text_ms": 5}', "application/json", **extra)
    return client.get(path, **extra)


@pytest.mark.parametrize(("method", "path"), TASK_ROUTES)
def test_bob_gets_exactly_the_answer_for_a_missing_task(
    finished_task, bob_client, bob, method, path
):
    bob_token = ApiToken.objects.issue(bob)
    missing = call(bob_client, method, path.format(id=uuid.uuid4()))
    assert missing.status_code == 404
    for id_, client, headers in [
        (finished_task.pk, bob_client, {}),
        (finished_task.pk, Client(), {"Authorization": f"Bearer {bob_token}"}),
        ("not-a-uuid", bob_client, {}),
    ]:
        response = call(client, method, path.format(id=id_), headers=headers)
        assert response.status_code == 404
        assert response.content == missing.content
        assert response["Content-Type"] == missing["Content-Type"]
    # And nothing bob did reached alice's task.
    finished_task.refresh_from_db()
    assert finished_task.cancel_requested_at is None
    assert finished_task.frontend_first_text_ms is None


@pytest.mark.parametrize(
    ("method", "path"), [*TASK_ROUTES, ("get", "/api/tasks"), ("post", "/api/tasks")]
)
def test_an_anonymous_client_is_401_on_every_api_route(finished_task, method, path):
    response = call(Client(), method, path.format(id=finished_task.pk))
    assert_refused(response, 401, "unauthenticated")
    assert response["WWW-Authenticate"] == "Bearer"


def test_bobs_pages_and_lists_never_show_alices_task(finished_task, bob_client):
    assert bob_client.get(f"/tasks/{finished_task.pk}/").status_code == 404
    assert str(finished_task.pk) not in bob_client.get("/").content.decode()
    assert bob_client.get("/api/tasks").json()["tasks"] == []
    anonymous = Client().get(f"/tasks/{finished_task.pk}/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")


def test_the_owner_downloads_an_attachment_that_cannot_be_sniffed(finished_task, alice_client):
    response = alice_client.get(f"/api/tasks/{finished_task.pk}/result")
    assert response.status_code == 200
    name = finished_task.documents.get().name.rsplit(".", 1)[0]
    assert response["Content-Disposition"] == f'attachment; filename="{name}-report.md"'

    assert response["Content-Type"] == "text/markdown; charset=utf-8"
    assert response["X-Content-Type-Options"] == "nosniff"


# --- CSRF on unsafe browser requests ---------------------------------------------------------


@pytest.fixture
def strict_alice(alice) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    return client


@pytest.mark.parametrize("path", ["/api/tasks", "/api/tasks/{id}/cancel", "/api/tasks/{id}/timing"])
def test_a_session_post_without_the_csrf_token_is_refused(strict_alice, make_task, path):
    task = make_task()
    before = snapshot()
    response = strict_alice.post(path.format(id=task.pk), {"files": [upload()]})
    assert_refused(response, 403, "csrf_failed")
    assert snapshot() == before
    task.refresh_from_db()
    assert task.cancel_requested_at is None and task.status == "queued"


def test_a_session_post_with_the_csrf_header_is_accepted(strict_alice):
    strict_alice.get("/")
    token = strict_alice.cookies["csrftoken"].value
    response = strict_alice.post(
        "/api/tasks", {"files": [upload()]}, headers={"X-CSRFToken": token}
    )
    assert response.status_code == 201


@pytest.mark.parametrize("path", ["/accounts/login/", "/accounts/logout/", "/admin/login/"])
def test_login_and_logout_forms_need_the_csrf_token(alice, path):
    response = Client(enforce_csrf_checks=True).post(
        path, {"username": "alice", "password": "alice-pass"}
    )
    assert response.status_code == 403


def test_a_token_request_needs_no_csrf_token(alice_token):
    client = Client(enforce_csrf_checks=True)
    response = submit(client, headers={"Authorization": f"Bearer {alice_token}"})
    assert response.status_code == 201


# --- API tokens -------------------------------------------------------------------------------


def test_tokens_are_stored_only_as_their_digest(alice, alice_token):
    row = ApiToken.objects.get(user=alice)
    assert row.digest == hashlib.sha256(alice_token.encode()).hexdigest()
    stored = [str(value) for value in ApiToken.objects.values().get().values()]
    assert not any(alice_token in value for value in stored)


def test_a_revoked_token_is_refused_like_an_unknown_one(alice, alice_token, capsys):
    ApiToken.objects.issue(alice, label="ci")
    headers = {"Authorization": f"Bearer {alice_token}"}
    assert Client().get("/api/tasks", headers=headers).status_code == 200

    call_command("revoke_token", "alice", "--label", "ci")
    assert "Revoked 1 token(s) of alice." in capsys.readouterr().out
    assert Client().get("/api/tasks", headers=headers).status_code == 200

    call_command("revoke_token", "alice")
    response = Client().get("/api/tasks", headers=headers)
    assert_refused(response, 401, "unauthenticated", "token")
    assert not ApiToken.objects.exists()


def test_revoking_the_tokens_of_an_unknown_user_is_an_error():
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="No user named 'carol'"):
        call_command("revoke_token", "carol")


def test_an_admin_revokes_a_token_by_deleting_it(alice, alice_token):
    admin = Client()
    admin.force_login(alice.__class__.objects.create_superuser("root", password="root-pass"))
    token = ApiToken.objects.get(user=alice)
    response = admin.post(f"/admin/reports/apitoken/{token.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    response = Client().get("/api/tasks", headers={"Authorization": f"Bearer {alice_token}"})
    assert_refused(response, 401, "unauthenticated")


def test_a_token_of_a_deactivated_user_is_refused(alice, alice_token):
    alice.is_active = False
    alice.save()
    response = Client().get("/api/tasks", headers={"Authorization": f"Bearer {alice_token}"})
    assert_refused(response, 401, "unauthenticated")


# --- per-user rate limit on task creation -------------------------------------------------------


def test_task_creation_over_the_per_user_rate_is_429_with_retry_after(
    alice_client, bob_client, settings
):
    settings.REPORTS_USER_RATE_LIMIT = 2
    settings.REPORTS_USER_RATE_WINDOW_S = 600
    assert submit(alice_client, upload("a.md")).status_code == 201
    assert submit(alice_client, upload("b.md")).status_code == 201
    before = snapshot()

    response = submit(alice_client, upload("c.md"))

    assert_refused(response, 429, "rate_limited", "2 reports", "600 s")
    assert re.fullmatch(r"[1-9]\d*", response["Retry-After"])
    assert 590 <= int(response["Retry-After"]) <= 600
    assert snapshot() == before
    # Another user has a limit of their own.
    assert submit(bob_client, upload("d.md")).status_code == 201
    # Once the window has passed over them, the earlier tasks no longer count.
    Task.objects.filter(owner__username="alice").update(
        created_at=timezone.now() - timedelta(seconds=601)
    )
    assert submit(alice_client, upload("c.md")).status_code == 201


def test_one_user_cannot_fill_the_queue_everyone_shares(alice_client, bob_client, settings):
    """10 of one user's tasks may wait at once (the default): the 11th is refused, while the
    queue (100) still takes other users' tasks; once one of theirs starts, they may add one."""
    settings.REPORTS_USER_QUEUE_LIMIT = 10
    for number in range(10):
        assert submit(alice_client, upload(f"{number}.md")).status_code == 201
    before = snapshot()

    response = submit(alice_client, upload("eleventh.md"))

    assert_refused(response, 429, "rate_limited", "10 reports waiting", "once one has started")
    assert re.fullmatch(r"[1-9]\d*", response["Retry-After"])
    assert snapshot() == before
    assert submit(bob_client, upload("bobs.md")).status_code == 201
    assert claim_next_task("w1") is not None  # alice's oldest starts
    assert submit(alice_client, upload("eleventh.md")).status_code == 201


def test_a_users_uploads_in_a_day_are_bounded(alice_client, bob_client, settings):
    """Every upload is kept: past REPORTS_USER_UPLOAD_MB_PER_DAY in 24 hours a user's next
    task is refused, stores nothing, and is accepted once the older uploads leave the day."""
    settings.REPORTS_USER_UPLOAD_MB_PER_DAY = 0.01  # 10,485 bytes
    document = ("Tidal energy is a predictable source of power. " * 125)[:6000]
    assert submit(alice_client, upload("first.md", document)).status_code == 201
    before = snapshot()

    response = submit(alice_client, upload("second.md", document))

    assert_refused(response, 429, "rate_limited", "in the last 24 hours", "0.01 MB a day")
    assert 86_000 < int(response["Retry-After"]) <= 86_400
    assert snapshot() == before
    assert submit(bob_client, upload("bobs.md", document)).status_code == 201
    Task.objects.filter(owner__username="alice").update(
        created_at=timezone.now() - timedelta(hours=25)
    )
    assert submit(alice_client, upload("second.md", document)).status_code == 201


def test_an_idempotent_replay_is_not_counted_against_the_rate(alice_client, settings):
    settings.REPORTS_USER_RATE_LIMIT = 1
    key = {"Idempotency-Key": "once"}
    assert submit(alice_client, headers=key).status_code == 201
    assert submit(alice_client, headers=key).status_code == 200
    assert submit(alice_client, upload("other.md")).status_code == 429


# --- login throttling -------------------------------------------------------------------------


@pytest.fixture
def throttle(settings):
    settings.REPORTS_LOGIN_MAX_FAILURES = 3
    settings.REPORTS_LOGIN_LOCKOUT_S = 600
    cache.clear()
    yield
    cache.clear()


def login(path: str, password: str, address: str = "10.0.0.1", username: str = "alice"):
    return Client(REMOTE_ADDR=address).post(path, {"username": username, "password": password})


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_repeated_failed_logins_lock_that_username_from_that_address(alice, throttle, path):
    alice.is_staff = True
    alice.save()
    for spelling in ("alice", " alice", "alice "):  # the form strips names: all are alice
        assert login(path, "wrong", username=spelling).status_code == 200  # the form again
    refused = login(path, "alice-pass")
    assert refused.status_code == (429 if path == "/accounts/login/" else 200)
    assert "Too many failed logins" in refused.content.decode()
    assert "_auth_user_id" not in refused.client.session
    # Another address is not locked out by this one's failures.
    assert login(path, "alice-pass", address="10.0.0.2").status_code == 302


def test_a_successful_login_clears_the_count(alice, throttle):
    for _ in range(2):
        login("/accounts/login/", "wrong")
    assert login("/accounts/login/", "alice-pass").status_code == 302
    for _ in range(2):
        login("/accounts/login/", "wrong")
    assert login("/accounts/login/", "alice-pass").status_code == 302


LOOK_ALIKES = ["ｃａｒｏｌ", "𝐜𝐚𝐫𝐨𝐥", "𝖼𝖺𝗋𝗈𝗅", " carol"]  # noqa: RUF001 - look-alikes on purpose


@pytest.fixture(params=["local memory", "redis"])
def throttle_cache(request, settings, throttle):
    """Each cache the throttle may count in: this process's memory, or the shared Redis."""
    if request.param == "redis":
        settings.CACHES = {
            "default": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": settings.TEST_REDIS_URL,
            }
        }
        try:
            cache.clear()
        except Exception:
            pytest.skip("no Redis server to count in")
    yield
    cache.clear()


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_look_alike_spellings_of_a_locked_name_are_locked_with_it(
    django_user_model, throttle_cache, path
):
    django_user_model.objects.create_user("carol", password="carol-pass", is_staff=True)
    for _ in range(3):
        login(path, "wrong", username="carol")
    for spelling in LOOK_ALIKES:
        # Django's login form reads each of these as carol: none gets fresh guesses...
        refused = login(path, "wrong", username=spelling)
        assert "Too many failed logins" in refused.content.decode()
        # ...nor logs in with the right password.
        refused = login(path, "carol-pass", username=spelling)
        assert "Too many failed logins" in refused.content.decode()
        assert "_auth_user_id" not in refused.client.session


def test_failures_under_look_alike_spellings_add_up_to_one_count(alice, throttle):
    for spelling in ["ａｌｉｃｅ", "𝐚𝐥𝐢𝐜𝐞", "𝖺𝗅𝗂𝖼𝖾"]:  # noqa: RUF001
        assert login("/accounts/login/", "wrong", username=spelling).status_code == 200
    assert login("/accounts/login/", "alice-pass").status_code == 429


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_with_the_count_out_of_reach_a_login_is_refused_not_a_500(alice, settings, path):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens on port 1
        }
    }
    client = Client(REMOTE_ADDR="10.0.0.1", raise_request_exception=False)
    response = client.post(path, {"username": "alice", "password": "alice-pass"})
    assert response.status_code == (503 if path == "/accounts/login/" else 200)
    assert "Logging in is unavailable" in response.content.decode()
    assert "_auth_user_id" not in client.session
