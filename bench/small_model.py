"""How often a small model's report passes validation, by the way it is asked.

    .venv/bin/python -m bench.small_model [--documents 6] [--chars 2400] [--max-tokens 400]
                                          [--shapes free,skeleton,grammar] [--add]

The `local` provider's model server (SmolLM2-135M-Instruct unless REPORTS_LOCAL_MODEL names
another GGUF file) writes a one-call report of each of the first N documents of the parser
corpus (tests/fixtures/corpus), each cut to its first `--chars` characters of text and given
as passages, as the product gives them. Each report is settled (citations, Sources) and
validated as the product does before it saves one; a report counts as valid when its stream
ended with the completion signal (`stop`) and validation found nothing wrong. The shapes
(REPORTS_LOCAL_REPORT_SHAPE, reports/providers/prompts.py):

* free — the model writes the whole report, told the format in words (the prompt alone);
* skeleton — the title and headings are ours, the model writes each section's text;
* grammar — the model writes it all, held to the shape by a llama.cpp grammar.

`--max-tokens` is the output cap of each call (a skeleton's sections are capped by it
too); `--add` keeps the shapes an earlier run of the same documents, cut and cap measured,
so a slow shape can be measured in a run of its own.

A quality measurement, not a timing one: the seconds are printed for a sense of the cost
and vary with the machine's load. Results: bench/results/small_model.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "fixtures" / "corpus"
RESULTS = ROOT / "bench" / "results" / "small_model.json"
# Small documents of every format first: a small model's window is small.
DOCUMENTS = (
    "flask-README.md",
    "nh3-README.md",
    "markdown-it-py-README.md",
    "sqlite-flextypegood.txt",
    "sqlite-quirks.html",
    "sqlite-wal.docx",
    "sqlite-whentouse-two-column.pdf",
    "sqlite-appfileformat.html",
    "sqlite-isolation.docx",
    "bzip2-manual.html",
)
TEXT_CHARS = 300  # of each report, kept in the results to be read
SAME = ("model", "documents", "chars", "max_tokens")  # what makes two runs comparable


def setup_django() -> None:
    os.environ["REPORTS_PROVIDER"] = "local"
    os.environ.setdefault("DJANGO_DEBUG", "1")  # no secret key needed for a measurement
    # A busy CPU may read a prompt for minutes before it answers: a quality measurement
    # waits for it.
    os.environ.setdefault("REPORTS_PROVIDER_RESPONSE_TIMEOUT_S", "1800")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()


def documents(count: int, chars: int) -> list:
    from reports.parsers import parser_for
    from reports.providers.base import SourceDocument

    picked = []
    for name in DOCUMENTS[:count]:
        text = parser_for(name).extract((CORPUS / name).read_bytes())
        picked.append(SourceDocument(name, text[:chars]))
    return picked


def problems_of(text: str, passages, completed, error: str | None) -> list[str]:
    """Return why a report the model wrote would not be kept: what the product's validation
    says of it, a provider's error, a stream that did not end by itself."""
    from django.conf import settings

    from reports.validation import settle_citations, validate_report

    report, _ = settle_citations(text, passages)
    problems = validate_report(report, max_kb=settings.REPORTS_MAX_REPORT_KB) if text else []
    finish = completed.finish_reason if completed else None
    if error:
        problems.append(f"The provider failed: {error}")
    elif finish != "stop":
        problems.append(f"The stream ended with {finish or 'no completion signal'}.")
    return problems


async def report_of(provider, document, max_tokens: int) -> dict:

    from reports.parsers.passages import cut
    from reports.providers.base import Completed, GenerationRequest, ProviderError, TextDelta

    passages = tuple(cut([document]))
    request = GenerationRequest(
        "bench", 1, (document,), passages=passages, max_output_tokens=max_tokens
    )
    text, completed, error = "", None, None
    started = time.monotonic()
    try:
        async with contextlib.aclosing(provider.stream(request)) as items:
            async for item in items:
                if isinstance(item, TextDelta):
                    text += item.text
                elif isinstance(item, Completed):
                    completed = item
    except ProviderError as exc:
        error = exc.message
    seconds = time.monotonic() - started
    problems = problems_of(text, passages, completed, error)
    finish = completed.finish_reason if completed else None
    return {
        "document": document.name,
        "valid": not problems and bool(text.strip()),
        "problems": problems or ([] if text.strip() else ["The report is empty."]),
        "finish_reason": finish,
        "output_tokens": completed.usage.output_tokens if completed else None,
        "seconds": round(seconds, 1),
        "text": text[:TEXT_CHARS],
    }


@contextlib.asynccontextmanager
async def local_model():
    """Yield the `local` provider once its model server is ready; stop the server after."""
    from reports.providers import get_provider

    provider = get_provider("local")
    serving = asyncio.create_task(provider.serve())
    await asyncio.sleep(0)  # the server starts
    try:
        await provider.wait_until_ready()
        yield provider
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)


async def measure(args: argparse.Namespace) -> dict:
    async with local_model() as provider:
        picked = documents(args.documents, args.chars)
        results = {
            "model": Path(provider.server.model).name,
            "window": provider.window,
            "documents": len(picked),
            "chars": args.chars,
            "max_tokens": args.max_tokens,
            "shapes": {},
        }
        if args.add and args.out.exists():  # other shapes, measured alike in an earlier run
            earlier = json.loads(args.out.read_text())
            if all(earlier.get(key) == results[key] for key in SAME):
                results["shapes"] = earlier["shapes"]
        for shape in args.shapes.split(","):
            provider.report_shape = shape
            seats = asyncio.Semaphore(provider.slots or 1)  # the server's slots, all busy
            runs = results["shapes"][shape] = {"valid": 0, "runs": []}

            async def one(document, shape=shape, seats=seats, runs=runs):
                async with seats:
                    run = await report_of(provider, document, args.max_tokens)
                print(
                    f"{shape:9} {run['document']:32} valid={run['valid']!s:5} "
                    f"{run['seconds']:6.1f} s  {'; '.join(run['problems'])}",
                    flush=True,
                )
                runs["runs"].append(run)
                runs["valid"] += run["valid"]
                # Written after each report: a long run interrupted keeps what it measured.
                args.out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")

            await asyncio.gather(*(one(document) for document in picked))
        return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.small_model")
    parser.add_argument("--documents", type=int, default=6)
    parser.add_argument("--chars", type=int, default=2400)
    parser.add_argument("--max-tokens", type=int, default=400)
    parser.add_argument("--shapes", default="free,skeleton,grammar")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--add", action="store_true", help="keep the other shapes of an earlier run alike"
    )
    args = parser.parse_args(argv)
    setup_django()
    results = asyncio.run(measure(args))
    for shape, outcome in results["shapes"].items():
        print(f"{shape}: {outcome['valid']} of {len(outcome['runs'])} valid")


if __name__ == "__main__":
    main()
