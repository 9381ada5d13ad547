"""The pages: login, ownership, the hooks of docs/pages.md and a CSP-clean document."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from html import escape

import pytest
from django.utils import timezone

from reports import presentation, rendering
from reports.models import Task
from reports.providers.base import Completed, TextDelta, Usage
from reports.serving import paging
from reports.streaming.consumers import HEARTBEAT_S, outcome_fragments
from tests.helpers import (
    JAPANESE_REPORT,
    NESTED_REPORT,
    assert_every_tree,
    run_all,
    store_passages,
    submit,
    task_of,
    tasks_of_every_kind,
    upload,
)
from tests.parsers import samples

pytestmark = pytest.mark.django_db


def assert_no_inline_code(html: str) -> None:
    """No inline script, event handler attribute or style attribute (CSP allows none)."""
    for tag in re.findall(r"<script\b[^>]*>", html, flags=re.IGNORECASE):
        assert " src=" in tag, tag
    assert not re.search(r"<[^>]*\son[a-z]+\s*=", html, flags=re.IGNORECASE)
    assert not re.search(r"<[^>]*\sstyle\s*=", html, flags=re.IGNORECASE)
    assert "<style" not in html.lower()


def assert_secure_headers(response) -> None:
    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp
    assert "unsafe-inline" not in csp
    assert response["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize("path", ["/", pytest.param(f"/tasks/{uuid.uuid4()}/", id="task-page")])
def test_pages_redirect_anonymous_users_to_login(client, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith(f"/accounts/login/?next={path}")


def test_login_page_renders_clean(client):
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    assert b'name="username"' in response.content
    assert_secure_headers(response)
    assert_no_inline_code(response.content.decode())


def test_login_logs_in_and_lands_on_home(client, alice):
    response = client.post(
        "/accounts/login/", {"username": "alice", "password": "alice-pass"}, follow=True
    )
    assert response.redirect_chain[-1][0] == "/"
    assert b"data-upload" in response.content


def test_a_refused_login_describes_each_field_by_the_refusal(client, alice):
    response = client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
    html = response.content.decode()
    assert re.search(r'<div id="login-error"[^>]*role="alert"', html)
    for name in ("username", "password"):
        field = re.search(rf'<input[^>]*name="{name}"[^>]*>', html)[0]
        assert 'aria-describedby="login-error"' in field
        assert 'aria-invalid="true"' in field
    fresh = client.get("/accounts/login/").content.decode()
    assert "aria-invalid" not in fresh and "login-error" not in fresh


def test_home_has_the_upload_form_and_the_users_tasks(alice_client, bob_client, settings):
    settings.REPORTS_ALLOW_SCENARIOS = True
    mine = task_of(submit(alice_client))
    theirs = task_of(submit(bob_client))
    response = alice_client.get("/")
    html = response.content.decode()
    assert response.status_code == 200
    assert re.search(r"<form[^>]*data-upload", html)
    assert 'type="file" name="files" multiple' in html
    assert 'name="instructions"' in html
    assert 'select id="upload-scenario" name="scenario"' in html
    assert re.search(r'data-idempotency-key="[0-9a-f-]{36}"', html)
    assert f"/tasks/{mine.pk}/" in html
    assert f"/tasks/{theirs.pk}/" not in html
    assert 'hx-trigger="every 3s"' in html  # a queued task: the list keeps itself current
    assert_secure_headers(response)
    assert_no_inline_code(html)


def test_each_render_of_the_form_has_a_fresh_idempotency_key(alice_client):
    keys = {
        re.search(r'data-idempotency-key="([^"]+)"', alice_client.get("/").content.decode())[1]
        for _ in range(2)
    }
    assert len(keys) == 2


def test_scenario_picker_only_where_allowed(alice_client, settings):
    settings.REPORTS_ALLOW_SCENARIOS = False
    assert b'name="scenario"' not in alice_client.get("/").content


def test_no_scenario_picker_for_a_real_model_which_would_ignore_it(alice_client, settings):
    # The demo on a local model allows scenarios, but only the simulated provider plays them.
    settings.REPORTS_ALLOW_SCENARIOS = True
    assert b'name="scenario"' in alice_client.get("/").content
    settings.REPORTS_PROVIDER = "openai"
    assert b'name="scenario"' not in alice_client.get("/").content


def test_home_list_fragment_for_htmx(alice_client, worker):
    task_of(submit(alice_client))
    run_all(worker)
    response = alice_client.get("/", headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="task-list"')
    assert "data-upload" not in html
    assert "hx-trigger" not in html  # nothing active: polling stops
    assert "HX-Request" in response["Vary"]


# --- the home page's pages of reports (docs/pages.md) ------------------------------------


def one_minute_apart(tasks: list[Task]) -> list[Task]:
    """Give the tasks distinct submission times, in the order given: the list's order is
    then theirs, whatever the clock's resolution."""
    start = timezone.now() - timedelta(minutes=len(tasks))
    for i, task in enumerate(tasks):
        Task.objects.filter(pk=task.pk).update(created_at=start + timedelta(minutes=i))
    return tasks


def listed(html: str) -> list[str]:
    return re.findall(r'class="task-link" href="/tasks/([0-9a-f-]+)/"', html)


def page_link(html: str, which: str) -> str | None:
    found = re.search(rf'<a id="tasks-{which}" href="([^"]+)" rel="\w+" data-page-{which}>', html)
    return found[1].replace("&amp;", "&") if found else None


def test_the_oldest_report_is_reached_through_the_older_link(alice, alice_client):
    tasks = one_minute_apart(tasks_of_every_kind(alice, paging.PAGE_SIZE + 1))
    oldest = str(tasks[0].pk)

    first = alice_client.get("/").content.decode()
    assert len(listed(first)) == paging.PAGE_SIZE and oldest not in listed(first)
    assert page_link(first, "newer") is None
    assert page_link(first, "older") == "/?page=2"

    second = alice_client.get(page_link(first, "older"))
    html = second.content.decode()
    assert second.status_code == 200
    assert listed(html) == [oldest]
    assert "Your reports, page 2" in html
    assert page_link(html, "older") is None
    assert page_link(html, "newer") == "/"
    assert set(listed(first)) | set(listed(html)) == {str(t.pk) for t in tasks}


def test_the_older_and_newer_links_walk_every_page_both_ways(alice, alice_client, monkeypatch):
    monkeypatch.setattr(paging, "PAGE_SIZE", 2)
    tasks = one_minute_apart(tasks_of_every_kind(alice, 5))
    newest_first = [str(t.pk) for t in reversed(tasks)]

    seen, url, pages = [], "/", []
    while url is not None:
        html = alice_client.get(url).content.decode()
        seen += listed(html)
        pages.append(url)
        url = page_link(html, "older")
    assert pages == ["/", "/?page=2", "/?page=3"]
    assert seen == newest_first

    back = []
    url = "/?page=3"
    while url is not None:
        back.append(url)
        url = page_link(alice_client.get(url).content.decode(), "newer")
    assert back == ["/?page=3", "/?page=2", "/"]


def test_the_list_polls_the_page_it_is_on(alice, alice_client, monkeypatch):
    monkeypatch.setattr(paging, "PAGE_SIZE", 2)
    # The oldest task is queued (tasks_of_every_kind: queued, running, succeeded…); the
    # second page holds it and the one after it, both on their way.
    tasks = one_minute_apart(tasks_of_every_kind(alice, 4))
    page_two = {str(tasks[0].pk), str(tasks[1].pk)}

    html = alice_client.get("/?page=2").content.decode()
    assert 'hx-get="/?page=2" hx-trigger="every 3s"' in html

    poll = alice_client.get("/?page=2", headers={"HX-Request": "true"})
    fragment = poll.content.decode()
    assert fragment.lstrip().startswith('<section id="task-list"')
    assert set(listed(fragment)) == page_two
    assert 'hx-get="/?page=2" hx-trigger="every 3s"' in fragment  # it stays on page 2
    assert page_link(fragment, "newer") == "/"
    assert "HX-Request" in poll["Vary"]


def test_every_link_of_the_list_has_an_id_so_a_refresh_keeps_the_focus(
    alice, alice_client, monkeypatch
):
    # htmx gives the focus back, after it replaces the list, to the element with the id of
    # the one that had it: a link without one would drop a keyboard user's place.
    monkeypatch.setattr(paging, "PAGE_SIZE", 2)
    one_minute_apart(tasks_of_every_kind(alice, 5))
    fragment = alice_client.get("/?page=2", headers={"HX-Request": "true"}).content.decode()
    links = re.findall(r"<a\b[^>]*>", fragment)
    ids = [re.search(r'\bid="([^"]+)"', link) for link in links]
    assert len(links) == 4  # two reports, Newer and Older
    assert all(ids) and len({found[1] for found in ids}) == len(links)


@pytest.mark.parametrize("htmx", [False, True], ids=["page", "list-poll"])
@pytest.mark.parametrize(
    "page", ["0", "-1", "", "two", "1e3", "²", "1000001", str(10**20), "9" * 5000]
)
def test_a_home_page_number_that_is_not_one_is_the_400_page(alice_client, page, htmx):
    headers = {"HX-Request": "true"} if htmx else {}
    response = alice_client.get("/", {"page": page}, headers=headers)
    assert response.status_code == 400
    assert b'data-error-page="400"' in response.content


@pytest.mark.parametrize("page", ["2", "1000000"])
def test_a_home_page_past_the_last_report_is_the_404_page(alice, alice_client, page):
    tasks_of_every_kind(alice, 3)
    response = alice_client.get("/", {"page": page})
    assert response.status_code == 404
    assert b'data-error-page="404"' in response.content


def test_the_first_page_with_no_reports_says_so_and_offers_no_other_page(alice_client):
    html = alice_client.get("/?page=1").content.decode()
    assert "No reports yet" in html
    assert page_link(html, "newer") is None and page_link(html, "older") is None


def test_queued_task_page_has_the_hooks(alice_client):
    task = task_of(submit(alice_client))
    response = alice_client.get(f"/tasks/{task.pk}/")
    html = response.content.decode()
    assert response.status_code == 200
    assert 'data-task-status="queued"' in html
    assert "next in line" in html
    # Read as one line, the badge and its detail are parted: "Queued: next in line".
    line = re.search(r'<p id="task-status".*?</p>', html, re.DOTALL)[0]
    assert " ".join(re.sub(r"<[^>]+>", "", line).split()) == "Queued: next in line"
    assert re.search(r"data-report-stream[^>]*data-seq=\"0\"", html)
    assert re.search(r"<article[^>]*data-report-rendered[^>]*hidden", html)
    assert re.search(r"data-incomplete hidden", html)
    assert 'data-action="cancel"' in html
    assert "data-download" not in html
    assert f'data-socket-url="/ws/tasks/{task.pk}/"' in html
    # The page judges a silent socket by the consumer's own heartbeat, not a second number.
    assert f'data-heartbeat-ms="{round(HEARTBEAT_S * 1000)}"' in html
    assert 'aria-live="polite"' in html
    assert_secure_headers(response)
    assert response["Cache-Control"] == "no-store, private"
    assert_no_inline_code(html)


@pytest.mark.parametrize(("embedded", "worker"), [(True, "embedded"), (False, "separate")])
def test_the_page_knows_where_its_report_is_written(alice_client, settings, embedded, worker):
    # So that a lost connection says the truth: an embedded worker stops with the server.
    settings.REPORTS_EMBEDDED_WORKER = embedded
    task = task_of(submit(alice_client))
    html = alice_client.get(f"/tasks/{task.pk}/").content.decode()
    assert f'data-worker="{worker}"' in html


def test_succeeded_task_page_shows_the_rendered_report_and_download(alice_client, worker):
    task = task_of(submit(alice_client))
    run_all(worker)
    task.refresh_from_db()
    assert task.status == "succeeded"
    response = alice_client.get(f"/tasks/{task.pk}/")
    html = response.content.decode()
    assert 'data-task-status="succeeded"' in html
    # The report's title under the page's own, which names the documents: one h1 a page.
    assert re.search(r"<article[^>]*data-report-rendered(?![^>]*hidden)[^>]*>\s*<h2>", html)
    assert html.count("<h1") == 1
    assert f'href="/api/tasks/{task.pk}/result"' in html
    assert "data-download" in html
    assert 'data-action="cancel"' not in html
    assert re.search(r"data-report-stream[^>]*hidden", html)
    assert "data-socket-url" not in html  # nothing more will happen
    assert f'data-seq="{task.last_seq}"' in html
    assert 'class="align-right"' in html  # the terms table, aligned without inline style
    assert_no_inline_code(html)


def test_a_report_in_another_language_than_the_page_says_its_own_where_it_is_shown(
    alice_client, worker
):
    # An English page's browser draws kanji in Chinese shapes, unless the report says it is
    # Japanese: on the page, and in the outcome a page that followed the report receives.
    task = task_of(submit(alice_client))
    run_all(worker)
    task.refresh_from_db()
    rendered = re.compile(r"(<article[^>]*data-report-rendered[^>]*>)(.*?)</article>", re.S)

    def shown() -> tuple[re.Match, re.Match]:
        page = alice_client.get(f"/tasks/{task.pk}/").content.decode()
        outcome = outcome_fragments(task, presentation.task_state(task))
        return rendered.search(page), rendered.search(outcome)

    for english in shown():
        assert "<p>" in english.group(2) and "lang=" not in english.group(0)

    task.report_html = rendering.render_markdown(JAPANESE_REPORT)
    task.save(update_fields=["report_html"])
    for japanese in shown():
        assert 'lang="ja"' in japanese.group(1)
        assert "<p>三つの港湾の水深を調査した。" in japanese.group(2)
        assert '<p lang="en">Northgate was surveyed' in japanese.group(2)


def test_a_report_nested_deeper_than_it_is_laid_out_keeps_every_items_words_on_its_page(
    alice_client, scripted_worker
):
    async def nested_report(request, clock):
        yield TextDelta(NESTED_REPORT)
        yield Completed("stop", Usage(10, 20, None, "provider"), request_id="req-1")

    task = task_of(submit(alice_client))
    run_all(scripted_worker(nested_report))

    html = alice_client.get(f"/tasks/{task.pk}/").content.decode()
    report = re.search(r"<article[^>]*data-report-rendered[^>]*>(.*?)</article>", html, re.S)
    assert_every_tree(re.sub(r"<[^>]+>", " ", report.group(1)))


@pytest.mark.parametrize(
    ("scenario", "reason"),
    [
        ("error", "dropped the connection"),
        ("truncated", "stream ended early"),
        ("empty", "without writing any text"),
        ("invalid", "did not have the shape of a report"),
    ],
)
def test_failed_task_page_keeps_the_text_and_says_why(alice_client, worker, scenario, reason):
    task = task_of(submit(alice_client, scenario=scenario))
    run_all(worker)
    task.refresh_from_db()
    assert task.status == "failed"
    html = alice_client.get(f"/tasks/{task.pk}/").content.decode()
    assert 'data-task-status="failed"' in html
    incomplete = re.search(r'<div id="task-incomplete"[^>]*>(.*?)</div>', html, re.S)
    assert incomplete and "hidden" not in incomplete.group(0).split(">")[0]
    assert reason in incomplete.group(1)
    assert re.search(r"<article[^>]*data-report-rendered[^>]*hidden", html)
    assert "data-download" not in html
    stream = re.search(r"<div[^>]*data-report-stream[^>]*>(.*?)</div>", html, re.S).group(1)
    assert bool(stream) is (scenario != "empty")
    assert_no_inline_code(html)


def test_an_unreadable_document_says_why_first_and_offers_another_file_not_a_retry(
    alice_client, worker
):
    task = task_of(submit(alice_client, upload("scan.pdf", samples.image_pdf())))
    run_all(worker)
    task.refresh_from_db()
    assert (task.status, task.error_type) == ("failed", "invalid_input")

    html = alice_client.get(f"/tasks/{task.pk}/").content.decode()

    incomplete = re.search(r'<div id="task-incomplete"[^>]*>(.*?)</div>', html, re.S).group(1)
    headline = re.search(r'<p class="incomplete-reason">(.*?)</p>', incomplete).group(1)
    assert "no text layer" in headline  # the reader's reason, not "could not be read"
    assert "Technical details" not in incomplete
    assert 'data-action="upload-another"' in incomplete
    assert re.search(r'<form class="retry-form"[^>]*hidden', html)  # a retry cannot help


def test_a_provider_failure_still_offers_a_retry(alice_client, worker):
    task = task_of(submit(alice_client, scenario="error"))
    run_all(worker)
    html = alice_client.get(f"/tasks/{task.pk}/").content.decode()
    assert not re.search(r'<form class="retry-form"[^>]*hidden', html)
    assert 'data-action="upload-another"' not in html


def test_cancelled_task_page_says_cancelled_by_you(alice_client):
    task = task_of(submit(alice_client))
    assert alice_client.post(f"/api/tasks/{task.pk}/cancel").status_code == 202
    html = alice_client.get(f"/tasks/{task.pk}/").content.decode()
    assert 'data-task-status="cancelled"' in html
    assert "Cancelled by you." in html


def test_other_users_task_page_is_404(bob_client, alice_client):
    task = task_of(submit(alice_client))
    assert bob_client.get(f"/tasks/{task.pk}/").status_code == 404


def test_missing_task_page_is_404(alice_client):
    assert alice_client.get(f"/tasks/{uuid.uuid4()}/").status_code == 404
    assert alice_client.get("/tasks/not-a-uuid/").status_code == 404


def test_page_is_a_snapshot_at_one_seq(alice_client, worker):
    """The text shown is exactly what the events up to data-seq say."""
    task = task_of(submit(alice_client))
    run_all(worker)
    task = Task.objects.get(pk=task.pk)
    html = alice_client.get(f"/tasks/{task.pk}/").content.decode()
    seq = int(re.search(r'data-live[^>]*data-seq="(\d+)"', html)[1])
    assert seq == task.last_seq


def test_pages_refuse_post(alice_client):
    assert alice_client.post("/").status_code == 405


@pytest.mark.parametrize("htmx", [False, True], ids=["page", "list-poll"])
@pytest.mark.parametrize(("count", "url"), [(45, "/"), (95, "/?page=2")], ids=["first", "second"])
def test_home_runs_a_fixed_number_of_queries_for_any_number_of_tasks(
    alice, alice_client, htmx, count, url, django_assert_max_num_queries
):
    # The page shows 45 tasks, the oldest of them 15 queued ones, whichever page it is.
    one_minute_apart(tasks_of_every_kind(alice, count))
    headers = {"HX-Request": "true"} if htmx else {}

    # session, user, the page's tasks with their places in line, their documents; the
    # whole page adds the budget (made on a first visit, in a savepoint) and what of it
    # awaits an admin
    with django_assert_max_num_queries(4 if htmx else 9):
        response = alice_client.get(url, headers=headers)

    html = response.content.decode()
    assert html.count('data-status="queued"') == 15
    assert "15th in line" in html and "next in line" in html


@pytest.mark.parametrize("kind", ["queued", "running", "succeeded"])
def test_a_task_page_runs_a_fixed_number_of_queries(
    alice, alice_client, kind, django_assert_max_num_queries
):
    queued, running, succeeded = tasks_of_every_kind(alice, 3)
    task = {"queued": queued, "running": running, "succeeded": succeeded}[kind]

    # session, user, the task, its events, its documents (for the title), the first one's
    # name (for the download's name: the read every report's outcome line makes, compiled
    # once), and the status line's own: a queued task's place, the provider's circuit
    # (docs/providers.md), the wait estimate and whether its owner's running reports let
    # other people's go first; a running task's times; a finished report's live share
    # links and the citations its finalization took out.
    with django_assert_max_num_queries({"queued": 10, "running": 7, "succeeded": 8}[kind]):
        response = alice_client.get(f"/tasks/{task.pk}/")

    assert f'data-task-status="{kind}"' in response.content.decode()


# --- source passages (docs/pages.md, "Citations") --------------------------------------


def page_without_token(response) -> str:
    """The page as any request sees it: the CSRF token is masked afresh for each."""
    return re.sub(r"[\w-]{64}", "<token>", response.content.decode())


TABLED = (
    "# Throughput\n\nThe year in figures, by region.\n\nTable 1: Throughput\n\n"
    "| Region | 2025 (t) | 2026 (t) |\n| --- | --- | --- |\n"
    "| North | 43,994 | 48,018 |\n| West \\| coast | 10,948 | 14,694 |\n\nWest grew most.\n"
)


def test_a_table_in_a_passage_is_shown_as_a_table_among_its_text(alice_client, make_task):
    task = make_task()
    [passage] = store_passages(task, TABLED, max_chars=1500)
    html = alice_client.get(f"/tasks/{task.pk}/sources/{passage.id}/").content.decode()
    shown = re.search(r"<blockquote[^>]*data-source-passage[^>]*>(.*?)</blockquote>", html, re.S)
    assert shown is not None
    shown = shown.group(1)
    assert shown.startswith(
        "# Throughput\n\nThe year in figures, by region.\n\nTable 1: Throughput<table"
    )
    assert '<th scope="col">2026 (t)</th>' in shown
    assert "<td>West | coast</td><td>10,948</td><td>14,694</td>" in shown
    assert shown.endswith("</table>West grew most.")
    assert "| --- |" not in shown


def test_the_source_page_shows_the_passage_with_its_place_and_neighbours(alice_client, make_task):
    task = make_task()
    cut = store_passages(task)
    middle = next(p for p in cut[1:-1] if p.section)
    before, after = cut[middle.number - 2], cut[middle.number]
    response = alice_client.get(f"/tasks/{task.pk}/sources/{middle.id}/")
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store, private"
    html = response.content.decode()
    assert_no_inline_code(html)
    shown = re.search(r"<blockquote[^>]*data-source-passage[^>]*>(.*?)</blockquote>", html, re.S)
    assert shown is not None and shown.group(1) == escape(middle.text)
    assert "doc.md" in html and escape(middle.section) in html
    assert f'href="/tasks/{task.pk}/sources/{before.id}/"' in html
    assert f'href="/tasks/{task.pk}/sources/{after.id}/"' in html
    assert "data-passage-prev" in html and "data-passage-next" in html
    assert f'href="/tasks/{task.pk}/"' in html

    first = alice_client.get(f"/tasks/{task.pk}/sources/S1/").content.decode()
    last = alice_client.get(f"/tasks/{task.pk}/sources/{cut[-1].id}/").content.decode()
    assert "data-passage-prev" not in first and "data-passage-next" in first
    assert "data-passage-next" not in last and "data-passage-prev" in last


@pytest.mark.parametrize("passage_id", ["S999", "S0", "s1", "S1a", "S01", "1", "S" + "9" * 30])
def test_an_unknown_passage_is_404_exactly_like_a_missing_task(alice_client, make_task, passage_id):
    task = make_task()
    store_passages(task)
    missing = alice_client.get(f"/tasks/{uuid.uuid4()}/sources/S1/")
    response = alice_client.get(f"/tasks/{task.pk}/sources/{passage_id}/")
    assert response.status_code == missing.status_code == 404
    assert page_without_token(response) == page_without_token(missing)


def test_another_users_passage_is_404_exactly_like_a_missing_task(
    alice_client, bob_client, make_task
):
    task = make_task()
    store_passages(task)
    missing = bob_client.get(f"/tasks/{uuid.uuid4()}/sources/S1/")
    response = bob_client.get(f"/tasks/{task.pk}/sources/S1/")
    assert response.status_code == missing.status_code == 404
    assert page_without_token(response) == page_without_token(missing)
    assert bob_client.get("/tasks/not-a-uuid/sources/S1/").status_code == 404
    assert alice_client.get(f"/tasks/{task.pk}/sources/S1/").status_code == 200


def test_the_source_page_sends_anonymous_users_to_login(client, make_task):
    task = make_task()
    store_passages(task)
    path = f"/tasks/{task.pk}/sources/S1/"
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith(f"/accounts/login/?next={path}")
