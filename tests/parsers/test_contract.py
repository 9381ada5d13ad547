"""What every parser promises, whatever its format."""

from __future__ import annotations

import pytest

from reports.parsers import InvalidContent, ParseError, UnsupportedContent
from tests.parsers import samples
from tests.parsers.cases import CASES, Case

# Documents of other kinds that an upload may carry under a wrong name; a key equal to a
# case's kind marks the one parser that accepts it.
FOREIGN = {
    "png": samples.PNG,
    "pdf": samples.text_pdf("A PDF"),
    "docx": samples.docx_bytes(lambda document: document.add_paragraph("A Word document")),
    "gzip": bytes.fromhex("1f8b0800000000000003") + b"\x00" * 10,
}


@pytest.fixture(params=CASES, ids=[case.kind for case in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    return request.param


def test_the_parser_claims_its_extension(case: Case) -> None:
    extension = "." + case.filename.rsplit(".", 1)[1].lower()

    assert extension in case.parser.extensions


def test_a_good_sample_passes_check_and_yields_its_text(case: Case) -> None:
    case.parser.check(case.good)
    text = case.parser.extract(case.good)

    for expected in case.expected:
        assert expected in text


def test_extracted_text_has_no_nul_and_only_unix_newlines(case: Case) -> None:
    text = case.parser.extract(case.good)

    assert "\x00" not in text
    assert "\r" not in text


@pytest.mark.parametrize("data", [b"", b"  \r\n\t "], ids=["empty", "whitespace"])
def test_an_empty_file_is_invalid_at_submit(case: Case, data: bytes) -> None:
    with pytest.raises(InvalidContent):
        case.parser.check(data)
    with pytest.raises(ParseError):
        case.parser.extract(data)


def test_a_document_without_text_is_rejected_at_submit_or_at_parse(case: Case) -> None:
    try:
        case.parser.check(case.textless)
    except InvalidContent:
        return
    with pytest.raises(ParseError):
        case.parser.extract(case.textless)


@pytest.mark.parametrize(
    ("case", "kind"),
    [
        pytest.param(case, kind, id=f"{kind}-named-{case.filename}")
        for case in CASES
        for kind in FOREIGN
        if kind != case.kind
    ],
)
def test_content_that_does_not_match_the_name_is_unsupported(case: Case, kind: str) -> None:
    with pytest.raises(UnsupportedContent):
        case.parser.check(FOREIGN[kind])


@pytest.mark.parametrize(
    "data",
    [b"\x00\x01\x02garbage\xff\xfe\xfd" * 50, b"%PDF-1.7\n" + b"\x00\xff" * 100, b"PK\x03\x04junk"],
    ids=["binary", "broken-pdf", "broken-zip"],
)
def test_extract_raises_only_parse_error_on_garbage(case: Case, data: bytes) -> None:
    with pytest.raises(ParseError) as raised:
        case.parser.extract(data)

    message = str(raised.value)
    assert message and "Traceback" not in message
