"""Does a repetition penalty keep a small model's report from looping, and at what cost?

    .venv/bin/python -m bench.repetition [--seeds 3] [--settings today,repeat,dry]
                                         [--documents N] [--add]

The `local` provider (SmolLM2-135M-Instruct unless REPORTS_LOCAL_MODEL names another GGUF
file) starts its own llama-server, as the worker does, and writes the report of each short
document of bench/fixtures/repetition (a meeting's notes, a policy, a table of figures, an
incident review: 1.3-1.7 KB each) with the request the pipeline makes: the document read
by its parser, cut into passages, planned (one call) and asked for by
`plan_store.request_for`, in the provider's default shape (the skeleton). Each sampling
setting is the same request with llama-server's own fields added to its body:

* today — nothing added: the server's defaults (temperature 0.8, no penalty);
* repeat — `repeat_penalty` 1.1 over the last 128 tokens (`repeat_last_n`);
* dry — the DRY sampler: `dry_multiplier` 0.8, `dry_base` 1.75, `dry_allowed_length` 2.

Every setting gets the same seeds (`seed` in the body; the product sends none, and the
server then draws one), so the runs differ by the setting alone. `--add` keeps the runs of
an earlier run of the same model and settings and makes only those missing: more seeds
can be measured in a run of their own.

The stream is fed to the loop check (reports/worker/loops.py) piece by piece as the
attempt core feeds it; the call is not stopped when the check fires, so the record says
both where the product would have stopped it and what the model wrote to the end. A run
is valid as the product decides: not stopped for looping, ended with `stop`, and the
report, its citations settled, passes reports/validation.py.

Recorded per run: whether and where the loop check fired, the output's characters and
tokens, tokens a second (the model's tokens over the time from its first text to its
completion signal), the validation's problems, two rough signs of the text's quality (the
share of its words, four letters or more, that the document uses; the share of its word
pairs that are distinct) and the text itself. A quality measurement on a shared machine:
the seconds vary with its load. Results: bench/results/repetition.json, written after
each run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import json
import re
import time
from pathlib import Path

from bench.small_model import local_model, problems_of, setup_django

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "bench" / "fixtures" / "repetition"
RESULTS = ROOT / "bench" / "results" / "repetition.json"
SETTINGS = {
    "today": {},
    "repeat": {"repeat_penalty": 1.1, "repeat_last_n": 128},
    "dry": {"dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2},
}
SEEDS = (11, 22, 33, 44, 55, 66, 77, 88, 99)
# The server's own sampling defaults, as its /props gives them, kept with the results.
SAMPLING_FIELDS = (
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "repeat_penalty",
    "repeat_last_n",
    "presence_penalty",
    "frequency_penalty",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "dry_sequence_breakers",
)
# What makes two runs comparable (`--add`).
SAME = ("model", "window", "slots", "report_shape", "max_output_tokens", "settings")
_WORD = re.compile(r"[^\W\d_]{4,}")


def documents(count: int | None) -> list:
    from reports.parsers import parser_for
    from reports.providers.base import SourceDocument

    paths = sorted(FIXTURES.iterdir())[:count]
    return [
        SourceDocument(path.name, parser_for(path.name).extract(path.read_bytes()))
        for path in paths
    ]


async def request_of(provider, document):
    """Return the request the pipeline makes for a report of `document`, and its passages."""
    from django.conf import settings

    from reports.parsers import planning
    from reports.parsers.passages import cut
    from reports.worker.plan_store import TaskInput, ocr_pages_of, request_for

    passages = cut([document])
    counting = planning.Counting(
        context_tokens=settings.REPORTS_CONTEXT_TOKENS,
        max_output_tokens=settings.REPORTS_MAX_OUTPUT_TOKENS,
        chars_per_token=await provider.chars_per_token(document.text),
        max_calls=settings.REPORTS_MAX_PARTS,
    )
    plan = planning.make(passages, "", counting, ocr_pages_of([document]))
    if not plan.single:
        raise SystemExit(f"{document.name} needs a plan of calls: choose a shorter document")
    task = TaskInput("bench", 1, "", "ok")
    return request_for(task, plan.final, plan, passages, {}, (document,)), passages


def source_share(text: str, source: str) -> float | None:
    """Return the share of the text's words (four letters or more) that the source uses."""
    words = [word.casefold() for word in _WORD.findall(text)]
    if not words:
        return None
    known = {word.casefold() for word in _WORD.findall(source)}
    return round(sum(word in known for word in words) / len(words), 3)


def distinct_pairs(text: str) -> float | None:
    """Return the share of the text's word pairs that are distinct (1.0: none repeats)."""
    words = re.findall(r"\w+", text.casefold())
    pairs = list(itertools.pairwise(words))
    return round(len(set(pairs)) / len(pairs), 3) if pairs else None


def sample_with(provider) -> dict[str, dict]:
    """Make `provider` add to each call's body the fields registered (in the dict returned)
    for its request's task id: every report of a run has its own, however many run at once
    and however many calls each makes."""
    fields: dict[str, dict] = {}
    own = provider.extra_body
    provider.extra_body = lambda request: {**own(request), **fields.get(request.task_id, {})}
    return fields


async def run_once(
    provider, sampled: dict, request, passages, document, setting: str, seed: int
) -> dict:
    """Return the record of one report of `document` with `setting` and `seed`; `sampled`
    is what `sample_with(provider)` returned."""

    from reports.providers.base import Completed, ProviderError, TextDelta
    from reports.worker.loops import LoopCheck

    task = f"bench-{setting}-{seed}-{document.name}"  # not in the prompt: the cache holds
    request = dataclasses.replace(request, task_id=task)
    sampled[task] = {**SETTINGS[setting], "seed": seed}
    loops = LoopCheck()
    text, completed, error, loop_at = "", None, None, None
    started = time.monotonic()
    first_text_at = None
    try:
        async with contextlib.aclosing(provider.stream(request)) as items:
            async for item in items:
                if isinstance(item, TextDelta) and item.text:
                    first_text_at = first_text_at or time.monotonic()
                    text += item.text
                    if loop_at is None and loops.feed(item.text):
                        loop_at = len(text)
                elif isinstance(item, Completed):
                    completed = item
    except ProviderError as exc:
        error = exc.message
    finally:
        del sampled[task]
    ended = time.monotonic()
    problems = problems_of(text, passages, completed, error)
    finish = completed.finish_reason if completed else None
    if loop_at is not None:
        problems.append(f"The loop check stopped it after {loop_at:,} characters.")
    tokens = completed.usage.output_tokens if completed else None
    writing = ended - first_text_at if first_text_at else None
    return {
        "setting": setting,
        "document": document.name,
        "seed": seed,
        "looped": loop_at is not None,
        "loop_at_chars": loop_at,
        "valid": not problems and bool(text.strip()),
        "problems": problems or ([] if text.strip() else ["The report is empty."]),
        "finish_reason": finish,
        "chars": len(text),
        "output_tokens": tokens,
        "seconds": round(ended - started, 1),
        "tokens_per_s": round(tokens / writing, 1) if tokens and writing else None,
        "source_words": source_share(text, document.text),
        "distinct_pairs": distinct_pairs(text),
        "text": text,
    }


def summary(runs: list[dict]) -> dict:
    def mean(key: str) -> float | None:
        values = [run[key] for run in runs if run[key] is not None]
        return round(sum(values) / len(values), 3) if values else None

    return {
        "runs": len(runs),
        "looped": sum(run["looped"] for run in runs),
        "valid": sum(run["valid"] for run in runs),
        "mean_chars": mean("chars"),
        "mean_output_tokens": mean("output_tokens"),
        "mean_tokens_per_s": mean("tokens_per_s"),
        "mean_source_words": mean("source_words"),
        "mean_distinct_pairs": mean("distinct_pairs"),
    }


def seeds_of(runs: list[dict]) -> dict[str, list[int]]:
    """Return the seeds each document was measured with (with every setting, when a run
    went to its end)."""
    seeds: dict[str, set[int]] = {}
    for run in runs:
        seeds.setdefault(run["document"], set()).add(run["seed"])
    return {document: sorted(numbers) for document, numbers in sorted(seeds.items())}


async def server_defaults(provider) -> dict:
    import httpx2

    async with httpx2.AsyncClient(timeout=10) as http:
        props = (await http.get(provider.server.url + "/props")).json()
    params = (props.get("default_generation_settings") or {}).get("params") or {}
    return {field: params.get(field) for field in SAMPLING_FIELDS}


async def measure(args: argparse.Namespace) -> dict:
    async with local_model() as provider:
        picked = documents(args.documents)
        requests = [await request_of(provider, document) for document in picked]
        chosen = args.settings.split(",")
        results = {
            "model": Path(provider.server.model).name,
            "window": provider.window,
            "slots": provider.slots,
            "report_shape": provider.report_shape,
            "max_output_tokens": requests[0][0].max_output_tokens,
            "server_defaults": await server_defaults(provider),
            "settings": {name: SETTINGS[name] for name in chosen},
            "documents": [document.name for document in picked],
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "summary": {},
            "runs": [],
        }
        done = set()
        if args.add and args.out.exists():  # the runs an earlier run, alike, made
            earlier = json.loads(args.out.read_text())
            if all(earlier.get(key) == results[key] for key in SAME):
                results["runs"] = earlier["runs"]
                results["started"] = earlier["started"]
                done = {(r["document"], r["seed"], r["setting"]) for r in results["runs"]}
        # Every setting of one document and seed side by side: the machine's load moves
        # all of them alike. The server's slots are kept busy, as the worker keeps them.
        jobs = [
            (document, request, passages, setting, seed)
            for document, (request, passages) in zip(picked, requests, strict=True)
            for seed in SEEDS[: args.seeds]
            for setting in chosen
            if (document.name, seed, setting) not in done
        ]
        seats = asyncio.Semaphore(provider.slots or 1)
        sampled = sample_with(provider)

        async def one(document, request, passages, setting, seed):
            async with seats:
                run = await run_once(provider, sampled, request, passages, document, setting, seed)
            print(
                f"{setting:7} {document.name:24} seed={seed:<3} looped={run['looped']!s:5} "
                f"valid={run['valid']!s:5} {run['chars']:5} chars {run['seconds']:6.1f} s "
                f"{run['tokens_per_s'] or 0:5.1f} tok/s",
                flush=True,
            )
            results["runs"].append(run)
            results["seeds"] = seeds_of(results["runs"])
            results["summary"] = {
                name: summary([r for r in results["runs"] if r["setting"] == name])
                for name in chosen
            }
            # Written after each run: a long run interrupted keeps what it measured.
            args.out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")

        await asyncio.gather(*(one(*job) for job in jobs))
        results["ended"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        args.out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
        return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.repetition")
    parser.add_argument("--seeds", type=int, default=3, help=f"at most {len(SEEDS)}")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--documents", type=int, default=None, help="the first N only")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--add", action="store_true", help="keep the runs of an earlier run alike")
    args = parser.parse_args(argv)
    unknown = set(args.settings.split(",")) - set(SETTINGS)
    if unknown:
        parser.error(f"unknown settings: {', '.join(sorted(unknown))}")
    setup_django()
    results = asyncio.run(measure(args))
    for name, outcome in results["summary"].items():
        print(
            f"{name}: {outcome['looped']} of {outcome['runs']} looped, "
            f"{outcome['valid']} valid, {outcome['mean_tokens_per_s']} tokens/s"
        )


if __name__ == "__main__":
    main()
