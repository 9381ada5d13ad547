from __future__ import annotations

import pytest

import reports.parsers
from reports.parsers import SUPPORTED_EXTENSIONS, Parser, parser_for


def test_exactly_the_five_documented_extensions_are_supported() -> None:
    assert set(SUPPORTED_EXTENSIONS) == {".txt", ".md", ".html", ".pdf", ".docx"}


@pytest.mark.parametrize("extension", SUPPORTED_EXTENSIONS)
def test_every_supported_extension_has_a_parser_that_claims_it(extension: str) -> None:
    parser = parser_for(f"document{extension}")

    assert isinstance(parser, Parser)
    assert extension in parser.extensions


@pytest.mark.parametrize(
    ("filename", "extension"),
    [("Report.PDF", ".pdf"), ("a.b.Docx", ".docx"), ("README.md", ".md"), (" notes.txt ", ".txt")],
)
def test_the_extension_is_matched_without_regard_to_case(filename: str, extension: str) -> None:
    assert parser_for(filename) is parser_for(f"x{extension}")


@pytest.mark.parametrize(
    "filename", ["page.htm", "archive.tar.gz", "report.doc", "pdf", "noextension", ".md", ""]
)
def test_other_names_have_no_parser(filename: str) -> None:
    assert parser_for(filename) is None


def test_parsers_are_cached_and_shared_by_the_extensions_of_one_format() -> None:
    assert parser_for("a.txt") is parser_for("b.txt")
    assert parser_for("a.md") is parser_for("b.MD")


def test_parser_version_names_every_parser_and_its_version() -> None:
    version = reports.parsers.PARSER_VERSION

    parsers = {type(parser_for(f"x{extension}")) for extension in SUPPORTED_EXTENSIONS}
    assert isinstance(version, str)
    assert len(version.split(",")) == len(parsers)
    for parser in parsers:
        assert f"={parser.version}" in version


def test_an_unknown_attribute_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        reports.parsers.NOT_A_NAME  # noqa: B018
