"""The instructions a model is given, and their version.

`PROMPT_VERSION` is stored with every attempt: change it whenever the wording below
changes, so a report is never reused across prompts that differ.
"""

from __future__ import annotations

PROMPT_VERSION = "report-1"
