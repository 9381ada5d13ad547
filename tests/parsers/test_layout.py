from __future__ import annotations

from reports.parsers.layout import Line, OutlineEntry, structure

BODY = 10.0


def _page(*lines: tuple[str, float] | str, top: float = 750.0) -> list[Line]:
    """Lines from the top of a page down, 12 points apart; a tuple gives (text, size)."""
    page = []
    for i, line in enumerate(lines):
        text, size = line if isinstance(line, tuple) else (line, BODY)
        page.append(Line(text=text, size=size, top=top - 12 * i, left=72.0))
    return page


def test_running_headers_and_page_numbers_are_left_out() -> None:
    birds = ["Owls hunt at night.", "Swifts sleep in flight.", "Crows use tools.", "Geese fly."]
    pages = [
        _page("Field Guide", "A bird:", bird, "That is all.", str(n + 1))
        for n, bird in enumerate(birds)
    ]

    text = structure(pages, [], "")

    assert "Field Guide" not in text
    assert all(bird in text for bird in birds)
    assert not any(line.strip().isdigit() for line in text.splitlines())


def test_a_title_that_runs_small_on_every_page_is_still_the_first_pages_big_title() -> None:
    # As LaTeX prints a specification: its title big on the cover, small atop every page.
    birds = ["Owls hunt at night.", "Swifts sleep in flight.", "Crows use tools."]
    pages = [_page(("Field Guide", 24.0), ("The Bird Society", 17.0), "Birds are many.")]
    pages += [_page("Field Guide", f"Chapter {n}:", bird) for n, bird in enumerate(birds)]

    text = structure(pages, [], "")

    assert text.startswith("# Field Guide\n\nThe Bird Society")
    assert text.count("Field Guide") == 1


def test_the_outline_gives_the_headings_and_an_index_section_is_left_out() -> None:
    pages = [
        _page(("Owl Manual", 20.0), "by the authors"),
        _page(("1 Introduction", 14.0), "Owls are birds.", "They hunt at night."),
        _page(("2 Usage", 14.0), ("2.1 Feeding", 12.0), "Feed them mice."),
        _page(("Index", 14.0), "mice 3", "owls 1, 2", "night 2", "birds 1", "hunt 2"),
    ]
    outline = [
        OutlineEntry(0, "1 Introduction", 1),
        OutlineEntry(0, "2 Usage", 2),
        OutlineEntry(1, "2.1 Feeding", 2),
        OutlineEntry(0, "Index", 3),
    ]

    text = structure(pages, outline, "")

    # A form feed marks where each page after the first begins.
    assert text == (
        "# Owl Manual\n\nby the authors\n\n\f\n\n## 1 Introduction\n\n"
        "Owls are birds. They hunt at night.\n\n\f\n\n## 2 Usage\n\n### 2.1 Feeding\n\n"
        "Feed them mice."
    )


def test_outline_titles_without_their_numbers_still_find_numbered_heading_lines() -> None:
    pages = [
        _page(("Owl Manual", 20.0), "by the authors"),
        _page(("1 Introduction", 14.0), "Owls are birds.", "In the wild they hunt."),
        _page(("2.1 Feeding", 12.0), "Feed them mice."),
    ]
    outline = [OutlineEntry(0, "Introduction", 1), OutlineEntry(1, "Feeding", 2)]

    text = structure(pages, outline, "")

    assert text == (
        "# Owl Manual\n\nby the authors\n\n\f\n\n## 1 Introduction\n\n"
        "Owls are birds. In the wild they hunt.\n\n\f\n\n### 2.1 Feeding\n\nFeed them mice."
    )


def test_without_an_outline_bigger_and_bold_lines_are_headings() -> None:
    pages = [
        _page(("Owl Manual", 20.0), "Owls are birds that hunt at night and sleep by day."),
        _page(("Feeding", 14.0), "Feed them mice.", "Diet", "Mostly rodents."),
    ]
    pages[1][2].bold = True

    text = structure(pages, [], "")

    assert text.splitlines()[0] == "# Owl Manual"
    assert "## Feeding" in text
    assert "### Diet" in text


def test_metadata_title_wins_and_generic_ones_are_ignored() -> None:
    pages = [_page(("Cover words", 20.0), "The body text, longer than the cover words.")]

    assert structure(pages, [], "The Real Title").startswith("# The Real Title\n")
    assert structure(pages, [], "Microsoft Word - draft7.docx").startswith("# Cover words\n")


def test_hyphenated_words_are_mended_and_contents_lines_dropped() -> None:
    page = _page(
        "Contents",
        "1 Introduction . . . . . . . . 3",
        "2 Usage . . . . . . . . . . . 5",
        "A well-known prob-",
        "lem is solved here.",
    )

    assert structure([page], [], "") == "A well-known problem is solved here."


def test_fixed_pitch_lines_become_a_code_block() -> None:
    page = _page("Call it so:", "x = run()", "print(x)", "and read the result.")
    page[1].mono = page[2].mono = True

    text = structure([page], [], "")

    assert text == "Call it so:\n\n```\nx = run()\nprint(x)\n```\n\nand read the result."
