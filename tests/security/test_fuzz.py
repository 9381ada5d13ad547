"""Fuzzing the parsers and the Markdown rendering with hypothesis.

Briefly here (REPORTS_FUZZ_EXAMPLES, default 40 per target); at length with `scripts/fuzz`.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.security import fuzz_targets as targets

fuzz = settings(
    max_examples=int(os.environ.get("REPORTS_FUZZ_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Bytes that look like what the parsers meet: markup, encodings' BOMs, NULs, high bytes.
MARKUP = st.sampled_from(
    [b"<", b">", b"</", b"<!--", b"<script>", b"&#0;", b"&amp;", b"<!DOCTYPE", b"\x00",
     b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\r\n", b"\r", b"# ", b"<p>", b"<pre>",
     b"\xe9", b"\xc3\xa9", b"\x80", b"%PDF-", b"PK\x03\x04"]
)  # fmt: skip
DOCUMENT_BYTES = st.lists(st.one_of(st.binary(max_size=40), MARKUP), max_size=60).map(b"".join)
FLIPS = st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=8)
MARKDOWN = st.lists(
    st.one_of(
        st.text(max_size=30),
        st.sampled_from(
            ["[", "](", ")", "![", "<", ">", "javascript:", "data:", "vbscript:", "//", "\\",
             "\n", "\n\n", "# ", "## ", "`", "```", "<script>", "onerror=", "&#x6A;", "%6A",
             "\t", "<img src=x ", "http://evil.example/"]
        ),
    ),
    max_size=80,
).map("".join)  # fmt: skip


@fuzz
@given(data=DOCUMENT_BYTES, extension=st.sampled_from([".txt", ".md", ".html"]))
def test_text_and_html_parsers_raise_only_their_own_errors(data, extension):
    targets.check_text_parser(data, extension)


@fuzz
@given(flips=FLIPS)
@example(flips=[(183590, 64)])  # an entry claiming zip version 6.4: Python cannot read it
def test_a_damaged_docx_raises_only_the_parsers_own_errors(flips):
    targets.check_docx(targets.mutate(targets.DOCX_SEED, flips))


@fuzz
@given(flips=FLIPS)
def test_a_docx_with_damaged_xml_raises_only_the_parsers_own_errors(flips):
    targets.check_docx(targets.docx_with_damaged_xml(flips))


@fuzz
@given(flips=FLIPS)
def test_a_damaged_pdf_raises_only_a_parse_error(flips):
    targets.check_pdf_pages(targets.mutate(targets.PDF_SEED, flips))


@fuzz
@given(text=MARKDOWN)
def test_rendered_markdown_never_carries_markup_or_unsafe_urls(text):
    targets.check_markdown(text.encode("utf-8", "surrogatepass"))


@fuzz
@given(raw=st.text(max_size=600))
def test_display_names_are_clean_whatever_the_upload_says(raw):
    targets.check_display_name(raw.encode("utf-8", "surrogatepass"))
