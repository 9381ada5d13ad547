"""The README and docs/ against the repository: each link leads to a file and heading that
exist and none leads outside it, each path and management command they name exists with
the options they give it, and each page hook docs/pages.md names is on a page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def prose(path: Path) -> str:
    """The text of a Markdown file without its fenced blocks."""
    return FENCE.sub("", path.read_text())


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings, as the usual renderers make them."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6}\s+(.*)$", prose(path), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        number = 1
        unique = slug
        while unique in found:
            unique, number = f"{slug}-{number}", number + 1
        found.add(unique)
    return found


def links() -> list[tuple[str, str]]:
    return [
        (doc.relative_to(ROOT).as_posix(), link)
        for doc in DOCS
        for link in LINK.findall(prose(doc))
        if link != "…"  # api.md shows a link's form, `[S3](…)`
    ]


def test_every_link_between_the_docs_leads_to_a_file_and_heading_that_exist():
    broken = []
    for doc, link in links():
        if re.match(r"[a-z]+:", link):
            continue  # the next test
        path, _, anchor = link.partition("#")
        target = (ROOT / doc).parent / path if path else ROOT / doc
        if not target.exists() or (target.suffix == ".md" and anchor not in anchors(target) | {""}):
            broken.append((doc, link))
    assert len(links()) > 50
    assert broken == []


def test_no_link_leads_outside_the_repository():
    """The docs speak for themselves: a reader needs no other site to follow them."""
    outside = [
        (doc, link)
        for doc, link in links()
        if re.match(r"[a-z]+:", link) and not re.match(r"https?://(127\.0\.0\.1|localhost)", link)
    ]
    assert outside == []


def test_every_path_the_docs_name_exists():
    folders = "reports|project|static|templates|deploy|tests|bench|scripts"
    named = re.compile(rf"(?<![\w/.-])((?:{folders})/[\w./{{}},-]*)")
    missing = sorted(
        {
            (doc.relative_to(ROOT).as_posix(), path)
            for doc in DOCS
            for path in (found.rstrip(".,") for found in named.findall(doc.read_text()))
            if "{" not in path  # a set of names, as a shell writes one
            and not path.startswith("reports/task/")  # the admin's URLs, /admin/reports/task/…
            and not (ROOT / path).exists()
        }
    )
    assert missing == []


def commands_named() -> list[tuple[str, str, list[str]]]:
    """(doc, command, its options) for each `manage.py <command> …` the docs show."""
    found = []
    for doc in DOCS:
        for name, rest in re.findall(r"manage\.py ([a-z_]+)([^`|\n]*)", doc.read_text()):
            options = re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest.split("#")[0])
            found.append((doc.relative_to(ROOT).as_posix(), name, options))
    return found


def test_every_management_command_the_docs_name_exists_with_those_options():
    commands = get_commands()
    wrong = []
    for doc, name, options in commands_named():
        if name not in commands:
            wrong.append((doc, name))
            continue
        parser = load_command_class(commands[name], name).create_parser("manage.py", name)
        known = {flag for action in parser._actions for flag in action.option_strings}
        wrong += [(doc, f"{name} {option}") for option in options if option not in known]
    assert len(commands_named()) > 20
    assert wrong == []


@pytest.fixture(scope="module")
def page_sources() -> str:
    kinds = {".html", ".js", ".py"}
    return "\n".join(
        path.read_text()
        for folder in ("templates", "static/js", "reports")
        for path in (ROOT / folder).rglob("*")
        if path.suffix in kinds
    )


def test_every_hook_pages_md_names_is_on_a_page(page_sources):
    hooks = set(re.findall(r"data-[a-z][a-z-]*", (ROOT / "docs" / "pages.md").read_text()))
    assert len(hooks) > 80
    assert sorted(hook for hook in hooks if hook not in page_sources) == []
