"""What reaches a browser cannot run script: rendered reports, pages and their headers."""

from __future__ import annotations

import pytest
from django.test import Client

from reports.models import Status
from reports.providers.base import Completed, TextDelta, Usage
from reports.rendering import render_markdown
from tests.helpers import run_all, submit, task_of, upload
from tests.security.hostile import assert_inert

PAYLOADS = [
    "<script>window.__xss=1</script>",
    '<img src=x onerror="window.__xss=1">',
    "<svg onload=window.__xss=1>",
    '<a href="javascript:window.__xss=1">raw link</a>',
    "[js](javascript:window.__xss=1)",
    "[js-encoded](jav&#x61;script:window.__xss=1)",
    "[js-tab](java\tscript:window.__xss=1)",
    "[js-percent](%6Aavascript:window.__xss=1)",
    "[vb](vbscript:msgbox(1))",
    "[data](data:text/html;base64,PHNjcmlwdD53aW5kb3cuX194c3M9MTwvc2NyaXB0Pg==)",
    "![pixel](https://evil.example/track.png)",
    "![proto-relative](//evil.example/track.png)",
    "![backslash](/\\evil.example/track.png)",
    "![data-image](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)",
    "<iframe src=https://evil.example></iframe>",
    '<div style="background:url(https://evil.example/x)">styled</div>',
    "[ref]\n\n[ref]: javascript:window.__xss=1",
    "<details open ontoggle=window.__xss=1>",
    "`<script>in code</script>`",
    "```html\n<script>window.__xss=1</script>\n```",
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_payload_in_a_report_renders_inert(payload):
    html = render_markdown(f"# Report\n\n## Summary\n\n{payload}\n\n## More\n\ntext {payload}\n")
    assert_inert(html)


def test_safe_markdown_still_renders():
    html = render_markdown("# T\n\n[site](https://example.org) ![logo](/static/logo.png)\n")
    assert '<a href="https://example.org" rel="nofollow noopener noreferrer">site</a>' in html
    assert '<img src="/static/logo.png" alt="logo">' in html


# --- pages and headers --------------------------------------------------------------------------


def csp_of(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {
        name: values
        for name, *values in (part.split() for part in header.split(";") if part.strip())
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path", ["/", "/tasks/{id}/", "/accounts/login/", "/admin/", "/admin/reports/task/"]
)
def test_every_page_forbids_inline_script_and_foreign_origins(alice, make_task, path):
    alice.is_staff = alice.is_superuser = True
    alice.save()
    client = Client()
    client.force_login(alice)
    response = client.get(path.format(id=make_task().pk))
    assert response.status_code == 200
    policy = csp_of(response)
    for directive in ("default-src", "script-src", "style-src", "img-src", "connect-src"):
        assert policy[directive] == ["'self'"], (directive, policy)
    assert policy["object-src"] == ["'none'"] and policy["base-uri"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["X-Frame-Options"] == "DENY"


@pytest.mark.django_db
def test_api_answers_cannot_be_sniffed_as_html(alice_client):
    response = submit(alice_client, upload("<script>x</script>.md"))
    assert response["Content-Type"] == "application/json"
    assert response["X-Content-Type-Options"] == "nosniff"


@pytest.mark.django_db
def test_payloads_in_names_instructions_and_output_are_escaped_in_the_page(
    alice_client, scripted_worker
):
    async def hostile(request, clock):
        yield TextDelta("# Report <script>window.__xss=1</scr")
        yield TextDelta("ipt>\n\n## Summary\n\n<img src=x oner")
        yield TextDelta('ror="window.__xss=1">\n\n## More\n\n[x](javascript:alert(1))\n')
        yield Completed("stop", Usage(1, 2, None, "provider"))

    name = "<img src=x onerror=window.__xss=1>.md"
    response = submit(alice_client, upload(name), instructions="<script>window.__xss=2</script>")
    run_all(scripted_worker(hostile))
    task = task_of(response)
    assert task.status == Status.SUCCEEDED, task.user_message
    page = alice_client.get(f"/tasks/{task.pk}/").content.decode()
    home = alice_client.get("/").content.decode()
    for html in (page, home):
        assert "<img src=x" not in html
        assert "<script>window.__xss" not in html
    assert "&lt;img src=x onerror=window.__xss=1&gt;.md" in home
    assert_inert(task.report_html)
