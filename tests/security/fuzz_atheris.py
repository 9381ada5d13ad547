"""Coverage-guided fuzzing of the same targets with atheris (the `fuzz` extra).

    scripts/fuzz atheris TARGET [libFuzzer options, e.g. -max_total_time=600 corpus/]

TARGET is one of: text, html, docx, pdf, markdown, name. A crash prints the input that
broke a promise and saves it as crash-<sha1>.
"""

from __future__ import annotations

import os
import sys

import atheris
import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()

with atheris.instrument_imports(
    include=["reports", "pypdfium2", "docx", "markdown_it", "nh3", "charset_normalizer"]
):
    from tests.security import fuzz_targets as targets

TARGETS = {
    "text": targets.check_text_parser,
    "html": lambda data: targets.check_text_parser(data, ".html"),
    # The binary formats are fuzzed as damage to a valid document: from nothing, a fuzzer
    # rarely gets past their signatures and archive structure.
    "docx": lambda data: targets.check_docx(
        targets.docx_with_damaged_xml(targets.flips_from(data) or [(0, 0x3C)])
    ),
    "pdf": lambda data: targets.check_pdf_pages(
        targets.mutate(targets.PDF_SEED, targets.flips_from(data) or [(0, 0x25)])
    ),
    "markdown": targets.check_markdown,
    "name": targets.check_display_name,
}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: scripts/fuzz atheris {{{','.join(TARGETS)}}} [libFuzzer options]")
    target = TARGETS[sys.argv[1]]
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
