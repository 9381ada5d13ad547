from __future__ import annotations

from reports.parsers.markdown import markdown_to_text


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
