"""axe-core in the page: the accessibility rules a page breaks, by rule and element."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from tests.browser.server import ROOT

# Unpacked from the npm package by scripts/test (not vendored: it is a test tool).
AXE = ROOT / ".cache" / "axe-core-4.14.1" / "axe.min.js"


def violations(page: Page) -> list[str]:
    """Return the page's axe-core violations as "rule: element, …" lines."""
    if not AXE.exists():
        pytest.skip("axe-core is not installed here: scripts/test fetches it")
    # Evaluated through the browser's debugging protocol, which the page's CSP does not govern.
    page.evaluate(AXE.read_text())
    return page.evaluate(
        """async () => {
            const result = await axe.run(document, {resultTypes: ["violations"]});
            return result.violations.map(
                v => `${v.id}: ${v.nodes.map(n => n.target.join(" ")).join(", ")}`
            );
        }"""
    )
