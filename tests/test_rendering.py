"""Report HTML: raw HTML as text, links and images sanitised, tables rendered."""

from __future__ import annotations

import re
import time

import pytest

from reports.rendering import render_markdown, report_title, under_page_title
from tests.helpers import assert_every_tree, nested_list
from tests.security import hostile

REL = 'rel="nofollow noopener noreferrer"'


def hrefs(html: str) -> list[str]:
    return re.findall(r'href="([^"]*)"', html)


def test_script_shows_as_text():
    html = render_markdown("Hello <script>alert(1)</script>\n\n<div onclick=x>hi</div>")
    assert "<script" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<div" not in html


@pytest.mark.parametrize(
    "markdown",
    [
        "[x](javascript:alert(1))",
        "[x](JAVASCRIPT:alert(1))",
        "[x](java%0ascript:alert(1))",
        "[x](&#106;avascript:alert(1))",
        "<javascript:alert(1)>",
        "[x][r]\n\n[r]: javascript:alert(1)",
        "[x](vbscript:msgbox(1))",
        "[x](data:text/html,<script>alert(1)</script>)",
        "[x](file:///etc/passwd)",
    ],
)
def test_dangerous_links_stay_text(markdown):
    html = render_markdown(markdown)
    assert "<a" not in html
    assert hrefs(html) == []


def test_foreign_images_become_their_alt_text():
    # A relative path is ours in name only: it resolves against whichever page shows the
    # report, so only absolute paths on our host load.
    for src in [
        "https://evil.example/x.png",
        "//evil.example/x.png",
        "/\\evil.example/x.png",
        "evil.example/x.png",
    ]:
        html = render_markdown(f"![a chart]({src})")
        assert "<img" not in html
        assert "evil.example" not in html
        assert "a chart" in html
    html = render_markdown("![pixel](data:image/png;base64,iVBORw0KGgo=)")
    assert "<img" not in html


def test_same_origin_images_are_kept():
    html = render_markdown("![a *chart*](/static/chart.png)")
    assert '<img src="/static/chart.png" alt="a chart">' in html


def test_links_get_rel_nofollow():
    html = render_markdown("[docs](https://example.com/docs) and <https://example.org>")
    assert html.count(REL) == 2
    assert hrefs(html) == ["https://example.com/docs", "https://example.org"]


def test_safe_links_are_kept():
    html = render_markdown("[mail](mailto:a@example.com) [here](#summary) [up](../other.md)")
    assert hrefs(html) == ["mailto:a@example.com", "#summary", "../other.md"]


def test_tables_render():
    html = render_markdown("| Term | Count |\n| --- | ---: |\n| heat | 11 |\n")
    assert "<table>" in html
    assert "<th>Term</th>" in html
    assert '<td class="align-right">11</td>' in html


def test_headings_lists_and_code_survive_the_second_pass():
    html = render_markdown("# T\n\n## S\n\n- *a* **b**\n\n1. one\n\n```py\nx = 1 < 2\n```\n")
    assert "<h1>T</h1>" in html and "<h2>S</h2>" in html
    assert "<li><em>a</em> <strong>b</strong></li>" in html
    assert "<ol>" in html
    assert "<pre><code>x = 1 &lt; 2\n</code></pre>" in html


def test_under_a_page_title_each_heading_is_a_level_down_and_text_is_left_alone():
    markdown = "# T\n\n## S\n\n###### deep\n\nA `<h1>` in code, and <h2> as text.\n"
    html = under_page_title(render_markdown(markdown))
    assert "<h2>T</h2>" in html and "<h3>S</h3>" in html
    assert "<h6>deep</h6>" in html  # no h7: the deepest stays
    assert "<code>&lt;h1&gt;</code>" in html and "&lt;h2&gt; as text" in html
    assert "<h1" not in html


def test_table_alignment_is_a_class_not_an_inline_style():
    html = render_markdown("| term | count |\n|:-----|------:|\n| tide | 12 |\n")
    assert "style=" not in html  # the page's CSP refuses inline styles
    assert '<th class="align-right">count</th>' in html
    assert '<td class="align-left">tide</td>' in html


# --- citations --------------------------------------------------------------------------


def citation(passage_id: str) -> str:
    return (
        f'<a href="sources/{passage_id}/" data-citation="{passage_id}" '
        f'rel="nofollow noopener noreferrer">{passage_id}</a>'
    )


def test_each_citation_links_to_its_source_page_inside_its_brackets():
    html = render_markdown("Trees cool streets. [S12] Shade helps [S3, S7]. *Also [S4]*.")
    assert f"Trees cool streets. [{citation('S12')}]" in html
    assert f"Shade helps [{citation('S3')}, {citation('S7')}]." in html
    assert f"<em>Also [{citation('S4')}]</em>" in html


def test_ids_in_code_escaped_or_in_links_are_not_citations():
    html = render_markdown(
        "Use `[S1]` and \\[S2\\] and [S3](https://example.com) and [S3a] and [S0].\n\n"
        "```\n[S4]\n```\n\n    [S5]\n"
    )
    assert "data-citation" not in html
    assert "<code>[S1]</code>" in html and "[S2]" in html and "[S3a]" in html


def test_the_sources_section_links_each_passage():
    html = render_markdown(
        "# T\n\n## Summary\n\nA. [S1]\n\n## Sources\n\n- S1 — a.pdf, Intro\n- S12 — b.md, page 3\n"
    )
    assert f"<li>{citation('S1')} — a.pdf, Intro</li>" in html
    assert f"<li>{citation('S12')} — b.md, page 3</li>" in html


def test_a_citation_cannot_carry_markup_or_a_foreign_link():
    html = render_markdown('[S1"><script>alert(1)</script>] [S1](javascript:alert(1)) [<b>S2</b>]')
    assert "<script" not in html and 'href="javascript' not in html
    assert "data-citation" not in html


def test_a_reports_title_is_its_first_headings_text():
    html = render_markdown("# Costs & *risks*\n\n## Summary\n\nText.")
    assert report_title(html) == "Costs & risks"
    assert report_title(render_markdown("No heading.")) == ""


def test_a_list_nested_deeper_than_it_is_laid_out_keeps_every_items_words():
    html = render_markdown(nested_list())

    assert_every_tree(re.sub(r"<[^>]+>", " ", html))
    # Ten levels are lists; the items under them are lines of the tenth, as written.
    assert html.count("<li>") == 11
    assert "<li>Juniper tree<br>\n- Kapok tree<br>\n1. Larch tree<br>" in html


def test_a_citation_nested_deeper_than_it_is_laid_out_still_links_to_its_source():
    html = render_markdown(nested_list().replace("Nutmeg tree", "Nutmeg tree [S4]"))

    assert 'Nutmeg tree [<a href="sources/S4/" data-citation="S4"' in html


@pytest.mark.parametrize("shape", sorted(hostile.deeply_nested_markdown()))
def test_markdown_nested_ten_thousand_deep_keeps_its_words_in_bounded_time(shape):
    markdown = hostile.deeply_nested_markdown()[shape]

    started = time.process_time()
    html = render_markdown(markdown)

    assert time.process_time() - started < 1
    assert "deepest words" in html
    # No deeper than the deepest level laid out: the parse never recursed thousands deep.
    assert html.count("<blockquote>") <= 20 and html.count("<li>") <= 10
