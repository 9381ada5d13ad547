"""Report validity (docs/api.md): each rule on its own gives exactly one problem."""

from __future__ import annotations

import pytest

from reports.validation import validate_report

VALID = """# Quarterly review

## Summary

Sales rose in every region, led by the north.

## Key points

- Costs fell.
"""


def test_a_valid_report_has_no_problems():
    assert validate_report(VALID, max_kb=200) == []


def test_leading_blank_lines_and_a_lowercase_summary_are_fine():
    text = "\n  \n" + VALID.replace("## Summary", "## summary")
    assert validate_report(text, max_kb=200) == []


@pytest.mark.parametrize("text", ["", "   \n\t\n"])
def test_empty(text):
    assert validate_report(text, max_kb=200) == ["The report is empty."]


def test_lone_surrogate_is_not_utf8():
    problems = validate_report(VALID.replace("north", "north \ud800"), max_kb=200)
    assert len(problems) == 1
    assert "UTF-8" in problems[0]


def test_oversize():
    text = VALID.replace("led by the north.", "led by the north. " + "More detail. " * 200)
    assert len(text.encode()) > 2048
    problems = validate_report(text, max_kb=2)
    assert len(problems) == 1
    assert "limit is 2 KiB" in problems[0]
    assert validate_report(text, max_kb=3) == []


def test_size_counts_utf8_bytes_not_characters():
    text = VALID.replace("north.", "north. " + "é" * 1100)  # 1,100 characters, 2,200 bytes
    assert len(validate_report(text, max_kb=2)) == 1


@pytest.mark.parametrize(
    "text",
    [
        "Intro line.\n\n" + VALID,  # text before the title
        VALID.replace("# Quarterly review", "## Quarterly review"),  # not level 1
        VALID.replace("# Quarterly review", "Quarterly review\n================"),  # setext
        "[ref]: https://example.com\n" + VALID,  # a definition before the title
        "```\n# Quarterly review\n```\n" + VALID.split("\n", 1)[1],  # inside a code fence
    ],
    ids=["text-first", "level-2", "setext", "reference-first", "fenced"],
)
def test_must_begin_with_a_level_1_heading(text):
    problems = validate_report(text, max_kb=200)
    assert problems == ["The report does not begin with a level-1 heading (# Title)."]


def test_missing_summary():
    problems = validate_report(VALID.replace("## Summary", "## Overview"), max_kb=200)
    assert problems == ["The report has no “## Summary” section."]


def test_summary_inside_a_code_fence_does_not_count():
    text = VALID.replace(
        "## Summary\n\nSales rose in every region, led by the north.\n",
        "```\n## Summary\n\nSales rose.\n```\n",
    )
    assert validate_report(text, max_kb=200) == ["The report has no “## Summary” section."]


@pytest.mark.parametrize(
    "body", ["", "   \n\n", "### Details\n\nText under a sub-heading is not the summary's.\n"]
)
def test_summary_without_text(body):
    text = VALID.replace("Sales rose in every region, led by the north.\n", body)
    assert validate_report(text, max_kb=200) == ["The Summary section has no text."]


def test_no_other_level_2_section():
    text = VALID.replace("## Key points", "### Key points")
    assert validate_report(text, max_kb=200) == [
        "The report has no level-2 section besides the Summary."
    ]


def test_several_problems_are_all_reported():
    problems = validate_report("Just some prose, no structure at all.", max_kb=200)
    assert len(problems) == 3
