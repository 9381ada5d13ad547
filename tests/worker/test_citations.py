"""Finalization settles a report's citations against the task's passages (docs/api.md,
"Citations and source passages"): bad ids are taken out and counted, never failing it."""

from __future__ import annotations

import pytest

from reports.models import Attempt
from reports.providers.base import Completed, TextDelta, Usage
from tests.helpers import run_all, saved_report, store_passages

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
