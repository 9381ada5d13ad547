"""A test provider whose report is full of script payloads, streamed in small pieces so that
each payload arrives split across several chunks (tests/browser/test_xss.py)."""

from __future__ import annotations

from reports.providers.base import GenerationRequest
from reports.providers.simulated import SimulatedProvider

# Each payload, if it ran, would set window.__xss or open a dialog.
PAYLOADS = (
    "<script>window.__xss='script'</script>",
    "<img src=x onerror=\"window.__xss='img'\">",
    "<svg onload=\"window.__xss='svg'\"></svg>",
    "<iframe srcdoc=\"<script>parent.__xss='iframe'</script>\"></iframe>",
    "[click me](javascript:window.__xss='link')",
    "[data link](data:text/html,<script>alert('data')</script>)",
    "[vb link](vbscript:msgbox('vb'))",
    "![tracker](https://evil.example/pixel.png)",
    "<a href=\"javascript:window.__xss='raw-a'\">raw anchor</a>",
    "<details open ontoggle=\"window.__xss='details'\">x</details>",
    "<style>body{background:url(https://evil.example/css)}</style>",
)

HOSTILE_REPORT = (
    "# Report <img src=x onerror=\"window.__xss='title'\">\n\n"
    "## Summary\n\n"
    + "\n\n".join(PAYLOADS)
    + "\n\n## Details\n\nPlain text after the payloads, so the report is valid.\n"
)


class HostileProvider(SimulatedProvider):
    """The simulated provider's pacing, with the hostile report in place of the extract."""

    name = "hostile"

    def write(self, request: GenerationRequest) -> str:
        return HOSTILE_REPORT
