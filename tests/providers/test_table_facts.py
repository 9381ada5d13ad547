"""What the simulated report says of a document's tables: a reader checks the figures."""

from __future__ import annotations

import io

import docx
import pytest

from reports.parsers import parser_for
from reports.parsers.passages import cut
from reports.providers.base import SourceDocument
from reports.providers.report_writer import write_report
from reports.providers.table_facts import Table, describe, figure, rows_of
from reports.validation import validate_report

BUDGET = [
    ["Department", "2025", "2026"],
    ["Engineering", "350,000", "412,000"],
    ["Hosting", "100,000", "118,000"],
    ["Marketing", "80,000", "82,000"],
]


def _budget_docx() -> bytes:
    document = docx.Document()
    document.add_heading("Budget 2026", 0)
    document.add_paragraph("The budget grows in every department, as the table shows for each.")
    document.add_paragraph("Table 1: Spending by department")
    table = document.add_table(rows=len(BUDGET), cols=3)
    for r, row in enumerate(BUDGET):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_paragraph("Hosting grows because of the new region. Marketing stays flat.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _sections(report: str) -> dict[str, str]:
    parts = report.split("\n## ")[1:]
    return {p.split("\n", 1)[0]: p.split("\n", 1)[1].strip() for p in parts}


def test_a_word_tables_figures_reach_the_report():
    text = parser_for("budget.docx").extract(_budget_docx())

    report = write_report([SourceDocument("budget.docx", text)], "")

    assert validate_report(report, max_kb=200) == []
    tables = _sections(report)["Tables"]
    assert "Table 1: Spending by department" in tables
    assert "412,000 (Engineering, 2026)" in tables
    assert "Hosting, from 100,000 to 118,000 (+18 %) between 2025 and 2026" in tables


def test_a_report_written_from_notes_still_says_what_the_table_holds():
    text = parser_for("budget.docx").extract(_budget_docx())
    document = SourceDocument("budget.docx", text)
    passages = cut([document], 150)  # the table whole in one passage
    halves = [passages[: len(passages) // 2], passages[len(passages) // 2 :]]
    notes = [write_report([], "", purpose="notes", passages=part) for part in halves]

    report = write_report([document], "", notes=notes)

    assert "412,000 (Engineering, 2026)" in _sections(report)["Tables"]
    # Cited to the passage the table was read from.
    assert any(p.id in _sections(report)["Tables"] for p in passages if "412,000" in p.text)


def test_the_biggest_change_compares_amounts_with_amounts_not_with_percentages():
    rows = [
        ["Region", "2025 (t)", "2026 (t)", "Change"],
        ["North", "47,349", "44,366", "-6.3%"],
        ["South", "40,714", "38,843", "-4.6%"],
        ["West", "10,948", "14,694", "+34.2%"],
    ]
    said = describe(Table(rows, "Table 4: Throughput by region"))
    assert "West, from 10,948 to 14,694 (+34 %) between 2025 (t) and 2026 (t)" in said
    assert "(-100 %)" not in said and "and Change" not in said


def test_a_report_from_notes_counts_every_table_the_parts_held():
    rows = "| Region | 2025 | 2026 |\n| --- | --- | --- |\n| North | 1,000 | 1,200 |\n"
    text = "".join(f"Table {n}: Throughput {n}\n\n{rows}\n" for n in range(1, 21))
    document = SourceDocument("annual.md", text)
    passages = cut([document], 400)
    parts = [passages[: len(passages) // 2], passages[len(passages) // 2 :]]
    notes = [write_report([], "", purpose="notes", passages=part) for part in parts]

    tables = _sections(write_report([document], "", notes=notes))["Tables"]

    listed = tables.count("Table ")  # each listed table by its caption
    assert tables.endswith(f"- And {20 - listed} more tables.")


def test_a_document_without_tables_has_no_tables_section():
    report = write_report([SourceDocument("a.txt", "Tides turn twice a day, every day.")], "")
    assert "## Tables" not in report


@pytest.mark.parametrize(
    ("cell", "value"),
    [("412,000", 412000), ("1.5", 1.5), ("-3", -3), ("+18 %", 18), ("$1,200", 1200), ("n/a", None)],
)
def test_a_cell_is_read_as_a_reader_reads_a_figure(cell: str, value: float | None):
    assert figure(cell) == value


def test_a_markdown_table_and_a_table_of_words_are_described_without_figures():
    rows = rows_of(["| Fruit | Colour |", "| --- | --- |", "| apple | red |", "| plum | red |"])
    assert rows == [["Fruit", "Colour"], ["apple", "red"], ["plum", "red"]]
    assert describe(Table(rows)) == "A table (Fruit, Colour; 2 rows)."


def test_lines_that_are_not_all_rows_are_no_table():
    assert rows_of(["a | b", "just a sentence"]) is None
    assert rows_of(["a | b", "c | d | e"]) is None


def test_a_pipe_inside_a_cell_stays_in_its_cell():
    rows = rows_of(["| Plan | Cost |", "| --- | --- |", "| A \\| B | 1,200 |", "| C |  |"])

    assert rows == [["Plan", "Cost"], ["A | B", "1,200"], ["C", ""]]
