"""Finalization settles a report's citations against the task's passages (docs/api.md,
"Citations and source passages"): bad ids are taken out and counted, never failing it; with
REPORTS_CITE_QUOTES on, a sentence copied from a passage is cited first."""

from __future__ import annotations

from urllib.parse import urlsplit

import lxml.html
import pytest
from django.test import Client

from reports.models import Attempt
from reports.providers.base import Completed, TextDelta, Usage
from tests.helpers import lines_of, run_all, saved_report, store_passages

pytestmark = pytest.mark.django_db

CITING = (
    "# Report\n\n## Summary\n\nTides are predictable. [S2] Sites vary. [S9999]\n\n"
    "## Findings\n\nNarrow entrances help [S3, S12a]. `x[S77]`\n\n## Sources\n\n- S1 — invented\n"
)


def listed(passage) -> str:
    place = passage.section or (f"page {passage.page}" if passage.page else "its beginning")
    return f"- {passage.id} — doc.md, {place}\n"


async def citing_report(request, clock):
    yield TextDelta(CITING)
    yield Completed("stop", Usage(10, 20, None, "provider"))


def test_unknown_citations_are_removed_counted_and_the_report_ends_with_its_sources(
    make_task, scripted_worker
):
    task = make_task()
    cut = store_passages(task)
    run_all(scripted_worker(citing_report))

    task.refresh_from_db()
    assert task.status == "succeeded"
    report = saved_report(task)
    assert "Tides are predictable. [S2] Sites vary.\n" in report
    assert "Narrow entrances help [S3]. `x[S77]`" in report
    assert report.endswith("## Sources\n\n" + listed(cut[1]) + listed(cut[2]))
    assert "invented" not in report
    assert 'data-citation="S3"' in task.report_html
    attempt = Attempt.objects.get(task=task)
    assert attempt.removed_citations == 2
    assert attempt.text == CITING  # the attempt keeps what the model wrote


UNCITED = "# Report\n\n## Summary\n\nTides are predictable.\n\n## Findings\n\nSites vary. [S9999]\n"


async def uncited_report(request, clock):
    yield TextDelta(UNCITED)
    yield Completed("stop", Usage(10, 20, None, "provider"))


def citation_notice(client, path: str) -> str:
    page = lxml.html.fromstring(client.get(path).content)
    notice = page.xpath("//*[@data-citation-notice][not(@hidden)]")
    return notice[0].text_content() if notice else ""


def test_the_page_says_which_citations_were_taken_out(make_task, scripted_worker, alice_client):
    task = make_task()
    store_passages(task)
    run_all(scripted_worker(citing_report))

    said = citation_notice(alice_client, f"/tasks/{task.pk}/")
    assert "The model also cited 2 passages the documents do not have" in said
    assert "the statements they followed cite no passage" in said


def test_a_report_citing_nothing_says_so_on_its_page_and_its_shared_page(
    make_task, scripted_worker, alice_client
):
    task = make_task()
    store_passages(task)
    run_all(scripted_worker(uncited_report))
    task.refresh_from_db()
    assert task.status == "succeeded"

    said = citation_notice(alice_client, f"/tasks/{task.pk}/")
    assert said.startswith("The report cites no passage of the documents")
    assert "The model cited 1 passage the documents do not have" in said
    link = alice_client.post(f"/api/tasks/{task.pk}/share").json()["share_url"]
    shared = urlsplit(link).path
    assert citation_notice(Client(), shared).startswith("The report cites no passage")
    # Nor does the shared page promise citations that open passages.
    assert "Each citation such as S3" not in Client().get(shared).content.decode()


def test_a_report_whose_citations_all_stand_has_no_notice(make_task, worker, alice_client):
    task = make_task()
    run_all(worker)
    assert citation_notice(alice_client, f"/tasks/{task.pk}/") == ""


TIDES = (
    "Tidal energy is a predictable source of power. Small harbours see two tides a day, and "
    "the difference between high and low water can drive a turbine.\n\n"
    "Each turbine runs for eight hours on every tide.\n"
)
QUOTING = (
    "# Tides\n\n## Summary\n\nIn short, tidal energy is a predictable source of power. Small "
    "harbours see two tides a day, and the difference between high and low water can drive a "
    "turbine.\n\n## Key points\n\n- Harbours grow power of their own.\n"
)


async def quoting_report(request, clock):
    yield TextDelta(QUOTING)
    yield Completed("stop", Usage(10, 20, None, "provider"))


def test_with_cite_quotes_on_a_copied_sentence_cites_its_passage_and_the_sources_list_it(
    make_task, scripted_worker, alice_client, settings, logged
):
    settings.REPORTS_CITE_QUOTES = True
    task = make_task(TIDES)
    run_all(scripted_worker(quoting_report))

    cited = QUOTING.replace("power.", "power. [S1]").replace("turbine.", "turbine. [S1]")
    assert saved_report(task) == cited.rstrip() + "\n\n## Sources\n\n- S1 — doc.md, its beginning\n"
    assert 'data-citation="S1"' in task.report_html
    assert citation_notice(alice_client, f"/tasks/{task.pk}/") == ""
    validated = next(line for line in lines_of(logged) if line.get("stage") == "validate")
    assert validated["quotes_cited"] == 2
    assert Attempt.objects.get(task=task).text == QUOTING  # the attempt keeps what was written


def test_by_default_a_copied_sentence_is_saved_as_written_citing_nothing(
    make_task, scripted_worker, alice_client
):
    task = make_task(TIDES)
    run_all(scripted_worker(quoting_report))

    assert (
        saved_report(task) == QUOTING.rstrip() + "\n\n## Sources\n\nThe report cites no passage.\n"
    )
    said = citation_notice(alice_client, f"/tasks/{task.pk}/")
    assert said.startswith("The report cites no passage of the documents")
