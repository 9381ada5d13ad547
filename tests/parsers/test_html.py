from __future__ import annotations

import time

import pytest

from reports.parsers import InvalidContent, ParseError, UnsupportedContent
from reports.parsers.html import HtmlParser, html_to_text
from tests.security import hostile

parser = HtmlParser()


def test_script_style_and_other_hidden_content_is_left_out() -> None:
    html = b"""<!doctype html><html><head><title>Tab title</title>
    <style>p { color: red }</style><script>var x = "<p>in script</p>";</script></head>
    <body><p>Visible</p><script>alert("no")</script><style>.x{}</style>
    <template><p>in template</p></template><noscript>enable scripts</noscript></body></html>"""

    text = parser.extract(html)

    assert text == "# Tab title\n\nVisible"


def test_blocks_become_lines_and_headings_markdown_headings() -> None:
    html = """<h1>Main   title</h1><p>First &amp; <b>bold</b>
    paragraph.</p><div>a<br>b</div><h3>Sub</h3><ul><li>one</li><li><p>two</p></li></ul>
    <table><tr><th>A</th><th>B</th></tr><tr><td>1</td><td>2</td></tr></table>"""

    assert html_to_text(html) == (
        "# Main title\n\nFirst & bold paragraph.\n\na\nb\n\n#### Sub\n\n"
        "- one\n- two\n\n| A | B |\n| --- | --- |\n| 1 | 2 |"
    )


def test_runs_of_blank_lines_collapse_and_empty_headings_vanish() -> None:
    html = "<p>one</p><div></div><p></p><h2> </h2><br><br><br><p>two</p><ul><li></li></ul>"

    assert html_to_text(html) == "one\n\ntwo"


def test_preformatted_text_keeps_its_layout() -> None:
    assert html_to_text("<pre>def f():\n    return 1</pre>") == "def f():\n    return 1"


def test_body_content_after_an_unclosed_head_is_kept() -> None:
    assert html_to_text("<html><head><title>T</title><p>Body text") == "# T\n\nBody text"


def test_navigation_menus_and_tables_of_contents_are_left_out() -> None:
    html = """<html><head><title>Guide</title></head><body>
    <nav><a href="/">Home</a></nav><div class="menu mainmenu"><ul><li>About</li></ul></div>
    <div class="fancy_toc">Table Of Contents<div><a href="#a">1. Overview</a></div>
    <div><a href="#b">2. Usage</a></div></div>
    <h1>Guide</h1><h2>1. Overview</h2><p>Read this.</p><footer>Copyright</footer>"""

    assert html_to_text(html) == "# Guide\n\n### 1. Overview\n\nRead this."


def test_plain_text_is_acceptable_html() -> None:
    parser.check(b"Just some text, no markup at all.")

    # As in a browser, line breaks in text outside <pre> are mere spaces.
    assert parser.extract(b"Some text.\n\nTwo paragraphs.") == "Some text. Two paragraphs."


@pytest.mark.parametrize(
    "html",
    [
        b"<html><body><script>x()</script> &nbsp; </body></html>",
        b"<html><head><title>Title only</title></head><body></body></html>",
        b"<!-- a comment -->",
    ],
)
def test_a_page_without_visible_text_is_invalid(html: bytes) -> None:
    with pytest.raises(InvalidContent, match="no visible text"):
        parser.check(html)
    with pytest.raises(ParseError, match="no visible text"):
        parser.extract(html)


def test_latin1_html_is_decoded() -> None:
    html = "<p>Café crème brûlée à la façon de Noël</p>".encode("latin-1")

    parser.check(html)
    assert parser.extract(html) == "Café crème brûlée à la façon de Noël"


def test_binary_named_html_is_unsupported() -> None:
    with pytest.raises(UnsupportedContent):
        parser.check(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")


def test_check_finds_text_far_into_a_large_page() -> None:
    html = b"<div></div>" * 25_000 + b"<p>late text</p>"

    parser.check(html)
    assert parser.extract(html) == "late text"


def test_check_stays_fast_on_a_large_page_and_the_parse_stage_decides() -> None:
    # Past its parse limit, the check counts anything outside a tag; extract parses it all.
    html = b"<div></div>" * 25_000 + b"<script>not visible</script>"

    parser.check(html)
    with pytest.raises(ParseError, match="no visible text"):
        parser.extract(html)


def test_a_large_page_of_tags_alone_is_invalid() -> None:
    with pytest.raises(InvalidContent, match="no visible text"):
        parser.check(b"<div></div>" * 25_000)


# --- hostile pages: time linear in the tags, the whole parse in the sandbox -------------------


def test_deeply_nested_hidden_tags_are_read_in_time_linear_in_their_number() -> None:
    # 37,000 unclosed tags in <nav>: each tag once looked through the whole stack (11.6 s
    # for 16,000 pairs). CPU time, not wall time: other processes cannot make it pass or fail.
    started = time.process_time()
    assert html_to_text(hostile.nested_html().decode()) == ""
    assert time.process_time() - started < 2


def test_the_upload_check_of_a_deeply_nested_page_is_bounded() -> None:
    started = time.process_time()
    with pytest.raises(InvalidContent, match="no visible text"):
        parser.check(hostile.nested_html())
    assert time.process_time() - started < 1


def test_a_page_is_read_in_the_sandbox_under_its_cpu_limit(settings) -> None:
    settings.REPORTS_PARSE_CPU_S = 1
    started = time.process_time()
    with pytest.raises(ParseError, match=r"too long to read \(1 s of CPU time\)"):
        parser.extract(hostile.slow_html())
    # The child spent the CPU, not this process.
    assert time.process_time() - started < 1


def test_an_mdbook_page_whose_root_class_names_a_sidebar_is_read_whole() -> None:
    # mdBook's print page: <html class="light sidebar-visible">, prose in <main>.
    page = (
        '<!DOCTYPE html><html lang="en" class="light sidebar-visible"><head>'
        "<title>The Harbour Book</title></head><body>"
        '<nav id="sidebar" class="sidebar"><ol><li>Tides</li><li>Turbines</li></ol></nav>'
        '<div id="page-wrapper"><main><h1>Tides</h1>'
        "<p>The tide turns twice a day at the harbour mouth.</p></main></div></body></html>"
    )

    text = html_to_text(page)

    assert "The tide turns twice a day at the harbour mouth." in text
    assert "Turbines" not in text  # the real sidebar is still furniture


def test_a_page_that_is_all_furniture_is_read_whole_rather_than_refused() -> None:
    page = "<body><div class='menu'><p>Opening hours of the harbour office.</p></div></body>"

    assert html_to_text(page) == "Opening hours of the harbour office."
    HtmlParser().check(page.encode())  # accepted at upload
