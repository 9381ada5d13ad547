"""The bare baseline: a plain ASGI app (no Django, no database, no channel layer) that
streams the same simulated provider's text on the same schedule.

    /ws/bare/<key>/?profile=openai&seed=0&per_token=0&raw=0&chars=0
        WebSocket: the same frames the app sends (coalesced the same way, or one per
        delta; raw=1: the bare text of each frame), then close 1000; chars: the report
        lengthened to about that many characters
    /page/?…          a bare page fed by that socket, appending each frame's text
    /ws/idle/         WebSocket: accepted, then nothing (memory of an idle connection)
    /text/?chars=N    a static page holding the first N characters of that text
    /page/?page=naive&raw=1&…   a naive page: re-renders the whole text as Markdown on
        every message (innerHTML), as chat UIs that froze on long answers did

Served by the same ASGI server as the app, it is the floor the app is compared with.
"""

from __future__ import annotations

import asyncio
import html
import os
import time
from pathlib import Path
from urllib.parse import parse_qs

from bench.harness import lengthen
from reports.providers import pacing
from reports.providers.base import SourceDocument
from reports.providers.report_writer import write_report

SAMPLE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "sample_article.md"
TEXT = write_report((SourceDocument("article.md", SAMPLE.read_text()),), "")
# As reports.worker.attempt_core coalesces (it needs Django set up, so the numbers are repeated).
FLUSH_INTERVAL_S, FLUSH_CHARS, FIRST_TEXT_UNCOALESCED_S = 0.1, 400, 0.15
_probe_path = os.environ.get("BENCH_PROBE")
_probe = open(_probe_path, "a", buffering=1) if _probe_path else None  # noqa: SIM115

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>bare</title></head>
<body><button data-start>Start</button><div data-report-stream style="white-space: pre-wrap"></div>
<script>
var out = document.querySelector("[data-report-stream]");
var node = out.appendChild(document.createTextNode(""));
var query = new URLSearchParams(location.search);
var full = "";
function markdown(text) {  // naive on purpose: the whole text, every time
  return text.split(/\\n\\n+/).map(function (block) {
    var safe = block.replace(/&/g, "&amp;").replace(/</g, "&lt;");
    var h = /^(#{1,6}) (.*)/.exec(safe);
    if (h) return "<h" + h[1].length + ">" + h[2] + "</h" + h[1].length + ">";
    return "<p>" + safe.replace(/\\*\\*(.+?)\\*\\*/g, "<b>$1</b>") + "</p>";
  }).join("");
}
function take(data) {
  if (query.get("raw") === "1") return data;
  var t = document.createElement("template");
  t.innerHTML = data;
  var batch = t.content.querySelector("template[data-batch]");
  var text = "";
  batch.content.querySelectorAll("template[data-delta]").forEach(function (d) {
    text += d.content.textContent;
  });
  return text;
}
document.querySelector("[data-start]").addEventListener("click", function () {
  var ws = new WebSocket("ws://" + location.host + "/ws/bare/" + Math.random().toString(36).slice(2)
                         + "/" + location.search);
  ws.onmessage = function (m) {
    var text = take(m.data);
    if (query.get("page") === "naive") {
      full += text;
      out.innerHTML = markdown(full);
    } else {
      node.appendData(text);
    }
  };
  ws.onclose = function () { window.__done = true; };
});
</script></body></html>"""


STATIC_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>static</title></head>
<body><div data-report-stream style="white-space: pre-wrap">{text}</div></body></html>"""


def frame(seq: int, text: str) -> str:
    return (
        f'<template data-batch data-seq="{seq}"><template data-delta data-seq="{seq}" '
        f'data-attempt="1">{html.escape(text, quote=False)}</template></template>'
    )


async def push(send, key: str, query: dict) -> None:
    profile = pacing.profile_named(query.get("profile", "openai"))
    per_token, raw = query.get("per_token", "0") == "1", query.get("raw", "0") == "1"
    text = lengthen(TEXT, int(query.get("chars", "0")))
    schedule = pacing.plan(profile, text, seed=int(query.get("seed", "0")), key=f"{key}:1")
    t0 = time.monotonic()
    if _probe:
        _probe.write(f"stream {key} 1 {t0}\n")
    first_due = t0 + schedule.ttft_s
    pending: list[str] = []
    since, seq, first_text_at = 0.0, 0, None

    async def flush() -> None:
        nonlocal seq
        seq += 1
        text = "".join(pending)
        await send({"type": "websocket.send", "text": text if raw else frame(seq, text)})
        pending.clear()

    for offset, chunk in schedule.chunks:
        due = first_due + offset
        while pending and since + FLUSH_INTERVAL_S < due:  # the runner's timer flush
            await asyncio.sleep(max(0.0, since + FLUSH_INTERVAL_S - time.monotonic()))
            await flush()
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        now = time.monotonic()
        first_text_at = first_text_at or now
        if not pending:
            since = now
        pending.append(chunk)
        early = now - first_text_at < FIRST_TEXT_UNCOALESCED_S
        if per_token or early or sum(map(len, pending)) >= FLUSH_CHARS:
            await flush()
    if pending:
        await flush()
    await send({"type": "websocket.close", "code": 1000})


async def app(scope, receive, send) -> None:
    if scope["type"] == "websocket":
        if (await receive())["type"] != "websocket.connect":
            return
        await send({"type": "websocket.accept"})
        if scope["path"].startswith("/ws/idle/"):  # a connection that only waits
            while (await receive())["type"] != "websocket.disconnect":
                pass
            return
        key = scope["path"].strip("/").split("/")[-1]
        query = {k: v[-1] for k, v in parse_qs(scope["query_string"].decode()).items()}
        sender = asyncio.create_task(push(send, key, query))
        while (await receive())["type"] != "websocket.disconnect":
            pass
        sender.cancel()
    elif scope["type"] == "http":
        await receive()
        body = PAGE
        if scope["path"].startswith("/text/"):  # a static page holding the same text
            query = {k: v[-1] for k, v in parse_qs(scope["query_string"].decode()).items()}
            chars = int(query.get("chars", "0"))
            text = html.escape(lengthen(TEXT, chars)[:chars], quote=False)
            body = STATIC_PAGE.format(text=text)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/html; charset=utf-8")],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})
