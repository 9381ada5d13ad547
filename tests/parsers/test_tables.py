"""Tables reach the model as Markdown pipe tables, whatever the document's format."""

from __future__ import annotations

from reports.parsers import parser_for
from reports.parsers.html import html_to_text
from reports.parsers.markdown import markdown_to_text
from reports.parsers.passages import cut
from reports.parsers.tables import MAX_CELL_CHARS, markdown_table
from reports.providers.base import GenerationRequest, SourceDocument
from reports.providers.prompts import build_messages
from tests.parsers import samples

BUDGET = [
    ["Department", "2025", "2026"],
    ["Engineering", "350,000", "412,000"],
    ["Hosting", "100,000", "118,000"],
]
BUDGET_TABLE = (
    "| Department | 2025 | 2026 |\n"
    "| --- | --- | --- |\n"
    "| Engineering | 350,000 | 412,000 |\n"
    "| Hosting | 100,000 | 118,000 |"
)


def _budget(document) -> None:
    document.add_heading("Budget 2026", 0)
    document.add_paragraph("Spending by department.")
    table = document.add_table(rows=len(BUDGET), cols=3)
    for r, row in enumerate(BUDGET):
        for c, value in enumerate(row):
            table.cell(r, c).text = value


def _prompt(name: str, text: str) -> str:
    passages = tuple(cut([SourceDocument(name, text)]))
    request = GenerationRequest("t", 1, (), passages=passages)
    return build_messages(request)[-1]["content"]


def test_a_word_table_reaches_the_model_as_a_markdown_table() -> None:
    text = parser_for("budget.docx").extract(samples.docx_bytes(_budget))

    assert BUDGET_TABLE in _prompt("budget.docx", text)


def test_an_html_table_keeps_its_header_and_its_columns_through_spanning_cells() -> None:
    html = """<p>Spending by department.</p>
    <table><caption>Table 1: Budget</caption>
    <thead><tr><th>Department</th><th>2025</th><th>2026</th></tr></thead>
    <tbody><tr><td>Engineering</td><td>350,000</td><td>412,000</td></tr>
    <tr><td rowspan="2">Hosting<br>and cloud</td><td colspan="2">100,000 | flat</td></tr>
    <tr><td>1</td><td><table><tr><td>2</td><td>3</td></tr></table></td></tr></tbody></table>"""

    assert html_to_text(html) == (
        "Spending by department.\n\nTable 1: Budget\n\n"
        "| Department | 2025 | 2026 |\n| --- | --- | --- |\n"
        "| Engineering | 350,000 | 412,000 |\n"
        # A cell on one line, its pipe escaped; a spanned column left empty.
        "| Hosting and cloud | 100,000 \\| flat |  |\n"
        # Under a rowspan the row keeps its columns; a nested table is read into its cell.
        "|  | 1 | 2 3 |"
    )


def test_a_table_in_a_list_item_stands_as_a_paragraph_of_its_own() -> None:
    html = "<ul><li><table><tr><th>a</th><th>b</th></tr></table></li><li>next</li></ul>"

    assert html_to_text(html) == "| a | b |\n| --- | --- |\n\n- next"


def test_a_markdown_pipe_table_is_kept_as_a_table_with_its_rows() -> None:
    markdown = (
        "Spending by department.\n\n"
        "| Department | 2025 | 2026 |\n|:--|--:|--:|\n"
        "| **Engineering** | 350,000 | 412,000 |\n| Hosting | 100,000 | 118,000 |\n"
    )

    assert markdown_to_text(markdown) == "Spending by department.\n\n" + BUDGET_TABLE


def test_a_pdf_table_set_in_columns_reaches_the_model_as_a_markdown_table() -> None:
    rows = [[*row, f"+{n} %"] for n, row in enumerate(BUDGET)]
    rows[0][-1] = "Change"
    pdf = samples.columns_pdf(
        [
            "Spending by department, as the survey found it.",
            rows,
            "Two aligned columns are a list of pairs, not a table:",
            [["sha256_ctx", "[Context struct]"], ["sha384_ctx", "[Context struct]"]] * 2,
        ]
    )

    text = parser_for("budget.pdf").extract(pdf)

    assert (
        "| Department | 2025 | 2026 | Change |\n| --- | --- | --- | --- |\n"
        "| Engineering | 350,000 | 412,000 | +1 % |\n| Hosting | 100,000 | 118,000 | +2 % |"
    ) in _prompt("budget.pdf", text)
    assert "| sha256_ctx" not in text


def test_a_wide_table_is_bounded_and_says_what_it_left_out() -> None:
    header = [f"c{i}" for i in range(30)]
    row = ["x" * 5000] + ["1"] * 29

    lines = markdown_table([header, row]).split("\n")

    assert lines[0].endswith("| c19 | … (10 more columns left out) |")
    assert len(lines[2]) < MAX_CELL_CHARS + 21 * 4 + 10


def test_passages_cut_a_long_table_between_its_rows() -> None:
    rows = [["Year", "What happened"]] + [
        [str(1900 + i), f"Prices rose. Then they fell. Year {i} ended."] for i in range(100)
    ]
    text = "# Prices\n\n" + markdown_table(rows)

    passages = cut([SourceDocument("prices.md", text)])

    assert len(passages) > 2
    for passage in passages:
        lines = passage.text.removeprefix("# Prices\n\n").split("\n")
        assert all(line.startswith("| ") and line.endswith(" |") for line in lines)
