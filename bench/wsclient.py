"""Clients for the benchmarks: submit a report over HTTP, follow it over the WebSocket,
note when each message arrived (machine monotonic clock) and what it carried.

Run as a process of its own (`python -m bench.wsclient < config.json`) so that the
clients' CPU is not the server's; prints one JSON document with every stream.
"""

from __future__ import annotations

import asyncio
import html
import json
import random
import re
import sys
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import websockets

BATCH = re.compile(r'<template data-batch data-seq="(\d+)">')
SUBMITTERS = 6  # asyncio's default on two cores, which every earlier figure used
DELTA = re.compile(
    r'<template data-delta data-seq="(\d+)" data-attempt="\d+">(.*?)</template>', re.S
)


@dataclass
class Stream:
    key: str  # the task id (or the bare stream's key)
    messages: list = field(default_factory=list)  # [received_at, batch_seq, [[seq, text]...]]
    close_codes: list = field(default_factory=list)
    connects: int = 0
    error: str = ""


def parse(message: str) -> tuple[int, list[list]]:
    batch = BATCH.search(message)
    deltas = [[int(seq), html.unescape(text)] for seq, text in DELTA.findall(message)]
    return (int(batch.group(1)) if batch else 0), deltas


def upload_request(
    base_url: str,
    token: str,
    name: str,
    data: bytes,
    content_type: str,
    *,
    fields: dict | None = None,
    key: str = "",
) -> urllib.request.Request:
    """Return the POST /api/tasks of one file and text `fields` (a scenario), with the
    idempotency `key` (a fresh one when empty: a client resending it sends the same)."""
    boundary = uuid.uuid4().hex
    texts = "".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"\r\n\r\n{value}\r\n'
        for field, value in (fields or {}).items()
    )
    body = (
        (
            f"{texts}"
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; '
            f'filename="{name}"\r\n'
            f"Content-Type: {content_type}\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return urllib.request.Request(
        f"{base_url}/api/tasks",
        data=body,
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Idempotency-Key": key or uuid.uuid4().hex,
        },
    )


def submit(base_url: str, token: str, path: str) -> str:
    # The same document for every stream: each is written anew (reuse only on request).
    document = Path(path).read_bytes()
    request = upload_request(base_url, token, "article.md", document, "text/markdown")
    with urllib.request.urlopen(request, timeout=60) as reply:
        body = reply.read()
    try:
        return json.loads(body)["task_id"]
    except (ValueError, KeyError):
        raise RuntimeError(
            f"the upload answered {reply.status} from {reply.url} with "
            f"{reply.headers.get('Content-Type')}: {body[:300]!r}"
        ) from None


async def follow(stream: Stream, url: str, headers: dict, *, drop_after: int = 0) -> int:
    """Read one connection to its close; with drop_after, hang up after that many messages.

    Return the last batch seq received (where a reconnect resumes).
    """
    last_seq = 0
    stream.connects += 1
    async with websockets.connect(url, additional_headers=headers, max_size=None) as ws:
        try:
            async for message in ws:
                seq, deltas = parse(message)
                stream.messages.append([time.monotonic(), seq, deltas])
                last_seq = max(last_seq, seq)
                if drop_after and len(stream.messages) >= drop_after:
                    return last_seq
        except websockets.ConnectionClosed:
            pass
        stream.close_codes.append(ws.close_code)
    return last_seq


async def one_stream(config: dict, stream: Stream, index: int, rng: random.Random) -> None:
    base, ws_base = config["base_url"], config["base_url"].replace("http", "ws", 1)
    headers = {"Origin": base, "Cookie": f"sessionid={config.get('cookie', '')}"}
    await asyncio.sleep(index * config.get("stagger_s", 0.0))
    if config["mode"] == "bare":
        stream.key = f"bare{index}"
        await follow(stream, f"{ws_base}/ws/bare/{stream.key}/?{config['query']}", headers)
        return
    task_id = await asyncio.to_thread(submit, base, config["token"], config["document"])
    stream.key = task_id
    after, drops = 0, config.get("reconnects", 0)
    try:
        while True:
            drop_after = len(stream.messages) + rng.randint(1, 12) if drops else 0
            after_seq = await follow(
                stream,
                f"{ws_base}/ws/tasks/{task_id}/?after={after}",
                headers,
                drop_after=drop_after,
            )
            after = max(after, after_seq)
            if not drops or (stream.close_codes and stream.close_codes[-1] == 1000):
                return
            drops -= 1
    except Exception as exc:  # a stream that failed is counted, not fatal to the run
        stream.error = repr(exc)


async def run(config: dict) -> list[Stream]:
    """Run every stream; those still open after `timeout_s` are cut and marked so."""
    rng = random.Random(config.get("seed", 0))
    # Uploads go through a fixed number of threads (asyncio's default depends on the
    # machine's cores): how many are sent at once paces how many streams are open at once.
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(config.get("submitters", SUBMITTERS))
    )
    streams = [Stream("") for _ in range(config["streams"])]
    tasks = [
        asyncio.create_task(one_stream(config, stream, i, random.Random(rng.random())))
        for i, stream in enumerate(streams)
    ]
    _, late = await asyncio.wait(tasks, timeout=config.get("timeout_s", 300))
    for task in late:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for stream, task in zip(streams, tasks, strict=True):
        if task in late:
            stream.error = "timed out"
    return streams


async def hold(config: dict) -> None:
    """Open `connections` idle WebSockets to `urls` (round robin), say so, hold them."""
    headers = {"Origin": config["base_url"], "Cookie": f"sessionid={config.get('cookie', '')}"}
    sockets = []
    for i in range(config["connections"]):
        url = config["urls"][i % len(config["urls"])]
        sockets.append(await websockets.connect(url, additional_headers=headers))
    print("ready", flush=True)
    await asyncio.sleep(config["hold_s"])
    for ws in sockets:
        await ws.close()


def main() -> None:
    config = json.loads(sys.stdin.read())
    if config["mode"] == "hold":
        asyncio.run(hold(config))
        return
    streams = asyncio.run(run(config))
    print(json.dumps([s.__dict__ for s in streams]))


if __name__ == "__main__":
    main()
