"""Read-only share links: made by the owner, opened by anyone, revoked, expired, throttled."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import pytest
from django.core.cache import cache
from django.core.cache.backends.redis import RedisCache
from django.db import connection
from django.test import Client
from django.utils import timezone

from reports import rendering
from reports.models import ShareLink, Status, Task, sharing
from reports.serving import throttle
from tests.helpers import (
    JAPANESE_REPORT,
    SAMPLE,
    form_cut_short,
    run_all,
    store_passages,
    submit,
    task_of,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_counts():
    """Start every test with no request counted against any address."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def report(alice_client, worker) -> Task:
    """Alice's report, written and saved, its citations linked to its passages."""
    task = task_of(submit(alice_client))
    run_all(worker)
    task.refresh_from_db()
    assert task.status == Status.SUCCEEDED and 'data-citation="S1"' in task.report_html
    return task


def share(client, task, **fields):
    return client.post(f"/api/tasks/{task.pk}/share", fields)


def shared_path(client, task, **fields) -> str:
    response = share(client, task, **fields)
    assert response.status_code == 201, response.content
    return urlsplit(response.json()["share_url"]).path


def test_anyone_with_the_link_reads_the_report_and_its_sources_and_nothing_else(
    alice_client, report
):
    response = share(alice_client, report)
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"share_url", "expires_at"}
    url = urlsplit(body["share_url"])
    assert (url.scheme, url.netloc) == ("http", "testserver")
    token = re.fullmatch(r"/shared/([\w-]+)/", url.path)[1]
    assert len(token) >= 43  # 32 random bytes, URL-safe base64

    reader = Client()  # signed in as nobody
    page = reader.get(url.path)
    assert page.status_code == 200
    html = page.content.decode()
    assert "data-report-rendered" in html and "Summary" in html
    assert 'href="sources/S1/"' in html
    # Its title says which report it is, as its tab and a screen reader name the page.
    title = rendering.report_title(report.report_html)
    assert title and f"<title>{title} · Shared report · Reportline</title>" in html
    assert "no-store" in page["Cache-Control"].split(", ")
    assert page["X-Robots-Tag"] == "noindex"
    assert page["Referrer-Policy"] == "no-referrer"
    assert (
        page["Content-Security-Policy"] == reader.get("/accounts/login/")["Content-Security-Policy"]
    )
    assert page["X-Content-Type-Options"] == "nosniff"

    source = reader.get(f"{url.path}sources/S1/")
    assert source.status_code == 200
    passage = report.passages.get(number=1)
    assert "data-source-passage" in source.content.decode()
    assert passage.document in source.content.decode()
    assert f"<title>S1 · {title} · Shared report" in source.content.decode()

    for shown in (page, source):
        text = shown.content.decode()
        assert str(report.pk) not in text and report.pk.hex not in text
        assert "alice" not in text
        assert "budget" not in text.lower() and "$" not in text
        assert "<script" not in text and "csrf" not in text.lower()
        assert "data-action" not in text and "/api/" not in text
    # Signed in, the owner sees the same read-only page: no name of hers is added to it.
    assert "alice" not in alice_client.get(url.path).content.decode()


def test_a_shared_report_says_its_language_where_it_is_not_the_pages(alice_client, report):
    # So that a browser draws its kanji in Japanese shapes, not in Chinese ones.
    path = shared_path(alice_client, report)
    rendered = re.compile(r"<article[^>]*data-report-rendered[^>]*>")
    assert "lang=" not in rendered.search(Client().get(path).content.decode()).group()

    report.report_html = rendering.render_markdown(JAPANESE_REPORT)
    report.save(update_fields=["report_html"])
    assert 'lang="ja"' in rendered.search(Client().get(path).content.decode()).group()


def test_a_link_opens_the_passages_the_report_cites_with_their_neighbours_and_no_more(
    alice_client, report
):
    """The owner shares a report, not the documents: a reader walking on from passage to
    passage stops at the context of what the report cites."""
    report.passages.all().delete()
    cut = store_passages(report, SAMPLE * 3, max_chars=120)
    assert len(cut) >= 7
    report.report_html = rendering.render_markdown("The one finding [S4].")
    report.save(update_fields=["report_html"])
    path = shared_path(alice_client, report)

    reader = Client()
    pages = {n: reader.get(f"{path}sources/S{n}/") for n in range(1, len(cut) + 1)}
    assert {n for n, page in pages.items() if page.status_code == 200} == {3, 4, 5}
    never = reader.get(f"/shared/{'x' * 43}/sources/S1/")
    assert pages[1].status_code == pages[7].status_code == never.status_code == 404
    assert pages[7].content == never.content  # as if the link did not exist
    cited, before = pages[4].content.decode(), pages[3].content.decode()
    assert "data-passage-prev" in cited and "data-passage-next" in cited
    assert "data-passage-next" in before and "data-passage-prev" not in before


def headers_of(response) -> dict:
    """The answer's headers but its request id, which every request has of its own."""
    return {k: v for k, v in response.headers.items() if k != "X-Request-ID"}


def test_a_revoked_link_answers_exactly_as_one_that_never_existed(alice_client, report):
    path = shared_path(alice_client, report)
    other = shared_path(alice_client, report)
    never = "/shared/" + "A" * 43 + "/"
    reader = Client()
    assert reader.get(path).status_code == 200

    revoked = alice_client.delete(f"/api/tasks/{report.pk}/share")
    assert revoked.status_code == 204

    for gone, unknown in [
        (path, never),
        (other, never),
        (f"{path}sources/S1/", f"{never}sources/S1/"),
    ]:
        answer, missing = reader.get(gone), reader.get(unknown)
        assert answer.status_code == missing.status_code == 404
        assert answer.content == missing.content
        assert headers_of(answer) == headers_of(missing)
    # A link made after the revoke works.
    assert reader.get(shared_path(alice_client, report)).status_code == 200


def test_a_link_stops_working_when_it_expires(alice_client, report, clock, monkeypatch):
    monkeypatch.setattr(sharing, "now", clock.wall)
    path = shared_path(alice_client, report, expires_in_days="2")
    assert ShareLink.objects.get().expires_at == clock.wall() + timedelta(days=2)
    clock.advance(2 * 86400 - 1)
    assert Client().get(path).status_code == 200
    clock.advance(1)
    assert Client().get(path).status_code == 404


def test_a_report_not_written_cannot_be_shared(alice_client, make_task):
    task = make_task(scenario="fail")
    for status in (Status.QUEUED, Status.FAILED):
        Task.objects.filter(pk=task.pk).update(status=status)
        response = share(alice_client, task)
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "task_not_succeeded"
    assert not ShareLink.objects.exists()


@pytest.mark.parametrize("days", ["0", "91", "-1", "7.5", "seven", "", "9" * 5000])
def test_a_link_lasts_one_to_ninety_days(alice_client, report, days):
    response = share(alice_client, report, expires_in_days=days)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert not ShareLink.objects.exists()


def test_a_refused_number_of_days_on_the_page_marks_its_field(alice_client, report):
    response = alice_client.post(
        f"/tasks/{report.pk}/share/", {"expires_in_days": "0"}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 400
    html = response.content.decode()
    field = re.search(r'<input id="share-days"[^>]*>', html)[0]
    assert 'aria-invalid="true"' in field
    assert 'aria-describedby="share-days-unit share-error"' in field
    assert re.search(r'<p id="share-error"[^>]*data-share-error', html)


@pytest.mark.parametrize(
    ("body", "days"), [({"expires_in_days": 1}, 1), ({}, 7), ({"expires_in_days": "3"}, 3)]
)
def test_a_json_body_is_read_as_the_form_is(alice_client, report, body, days):
    response = alice_client.post(f"/api/tasks/{report.pk}/share", body, "application/json")
    assert response.status_code == 201, response.content
    expires_at = datetime.fromisoformat(response.json()["expires_at"])
    assert abs(expires_at - timezone.now() - timedelta(days=days)) < timedelta(minutes=1)


@pytest.mark.parametrize(
    "body", ['{"expires_in_days": 7.5}', '{"expires_in_days": true}', "[1]", "{"]
)
def test_a_json_body_without_a_whole_number_of_days_makes_no_link(alice_client, report, body):
    response = alice_client.post(f"/api/tasks/{report.pk}/share", body, "application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert not ShareLink.objects.exists()


def test_a_form_cut_by_the_upload_limit_makes_no_link(alice_client, report, settings):
    """The days after an oversize part were never read: not a link of the default 7."""
    settings.REPORTS_MAX_FILE_MB = 1
    body, content_type = form_cut_short("expires_in_days", "1")
    response = alice_client.post(f"/api/tasks/{report.pk}/share", body, content_type)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "file_too_large"
    assert not ShareLink.objects.exists()


def test_shared_pages_are_throttled_per_client_address(alice_client, report, settings):
    settings.REPORTS_SHARE_RATE_LIMIT = 3
    path = shared_path(alice_client, report)
    guesser = Client(REMOTE_ADDR="2001:db8::1")
    for n in range(3):
        # A forged forwarding header does not make a new client: the proxy's word is
        # already in REMOTE_ADDR; nor does another address of the same IPv6 /64.
        other = Client(REMOTE_ADDR=f"2001:db8::{n + 2}", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}")
        assert other.get(f"/shared/guess-{n}/").status_code == 404
    refused = guesser.get(path)
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= settings.REPORTS_SHARE_RATE_WINDOW_S
    assert "Too many requests" in refused.content.decode()
    assert "no-store" in refused["Cache-Control"]
    # Another client reads on.
    assert Client(REMOTE_ADDR="198.51.100.7").get(path).status_code == 200


def test_only_a_digest_of_the_token_is_stored(alice_client, report):
    response = alice_client.post(
        f"/tasks/{report.pk}/share/", {"expires_in_days": "7"}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    url = re.search(r'value="(http://testserver/shared/[\w-]+/)"', response.content.decode())[1]
    token = url.rsplit("/", 2)[1]
    link = ShareLink.objects.get()
    assert link.token_hash == hashlib.sha256(token.encode()).hexdigest()
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM reports_sharelink")
        assert token not in repr(cursor.fetchall())
    # The task page lists the link, and cannot show its address again.
    page = alice_client.get(f"/tasks/{report.pk}/").content.decode()
    assert "data-share-link" in page and token not in page
    assert Client().get(urlsplit(url).path).status_code == 200


def test_the_admin_lists_a_tasks_links_without_their_digests(admin_client, alice_client, report):
    shared_path(alice_client, report)
    alice_client.delete(f"/api/tasks/{report.pk}/share")
    page = admin_client.get(f"/admin/reports/task/{report.pk}/change/").content.decode()
    assert "Share links" in page
    assert ShareLink.objects.get().token_hash not in page


def test_a_report_has_a_bounded_number_of_live_links(alice_client, report, settings):
    settings.REPORTS_SHARE_MAX_LINKS = 2
    shared_path(alice_client, report)
    shared_path(alice_client, report)
    refused = share(alice_client, report)
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "share_limit_reached"
    alice_client.delete(f"/api/tasks/{report.pk}/share")
    assert share(alice_client, report).status_code == 201


def test_with_the_count_out_of_reach_a_shared_page_is_refused_not_served(
    alice_client, report, monkeypatch
):
    path = shared_path(alice_client, report)
    unreachable = RedisCache("redis://127.0.0.1:1/0", {})  # nothing listens on port 1
    monkeypatch.setattr(throttle, "cache", unreachable)
    response = Client(raise_request_exception=False).get(path)
    assert response.status_code == 503
    assert "unavailable for a moment" in response.content.decode()
    assert "data-report-rendered" not in response.content.decode()
