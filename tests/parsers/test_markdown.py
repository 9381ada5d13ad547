from __future__ import annotations

import time

import pytest

from reports.parsers.markdown import markdown_to_text
from tests.helpers import assert_every_tree, nested_list
from tests.security import hostile


def test_links_keep_their_text_and_badges_and_tags_are_dropped() -> None:
    markdown = """# Tool

[![CI](https://ci.example/badge.svg)](https://ci.example)
<p align="center"><img alt="logo" src="logo.svg"></p>

Read the [tutorial][tut] and `run()` it, see <https://example.org>.

[tut]: Documentation/tutorial.txt
"""

    assert markdown_to_text(markdown) == (
        "# Tool\n\nRead the tutorial and run() it, see https://example.org."
    )


def test_lists_tables_and_code_stay_what_they_are() -> None:
    markdown = """## Use

- one
- two
  - nested

| A | B |
|---|---|
| 1 | 2 |

```python
# not a heading
print("hi")
```
"""

    assert markdown_to_text(markdown) == (
        "## Use\n\n- one\n- two\n  - nested\n\n| A | B |\n| --- | --- |\n| 1 | 2 |\n\n"
        '```\n# not a heading\nprint("hi")\n```'
    )


def test_a_list_nested_deeper_than_it_is_laid_out_keeps_every_items_words() -> None:
    text = markdown_to_text(nested_list())

    assert_every_tree(text)
    # Ten levels stay a list; the items under them are the tenth item's text.
    assert "  1. Juniper tree - Kapok tree 1. Larch tree - Maple tree 1. Nutmeg tree\n" in text


@pytest.mark.parametrize("shape", sorted(hostile.deeply_nested_markdown()))
def test_markdown_nested_ten_thousand_deep_keeps_its_words_in_bounded_time(shape) -> None:
    started = time.process_time()
    assert markdown_to_text(hostile.deeply_nested_markdown()[shape]).endswith("deepest words")
    assert time.process_time() - started < 1
