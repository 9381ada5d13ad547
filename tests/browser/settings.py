"""The application's settings, plus the test providers `long` and `hostile`."""

from project.settings import *  # noqa: F403
from project.settings import (
    REPORTS_PRICES,
    REPORTS_PROVIDER,
    REPORTS_PROVIDERS,
    env_int,
    env_number,
)

REPORTS_PROVIDERS = {
    **REPORTS_PROVIDERS,
    "long": {
        "BACKEND": "tests.browser.long_provider.LongReportProvider",
        "OPTIONS": {
            "chars": env_int("TEST_LONG_REPORT_CHARS", 60_000),
            "tokens_per_s": env_number("TEST_LONG_REPORT_TOKENS_PER_S", 10_000),
            "ttft_s": env_number("TEST_LONG_REPORT_TTFT_S", 1.0),
        },
    },
}
# Room for the whole long report (about 20,000 simulated tokens) under the output cap.
REPORTS_MAX_OUTPUT_TOKENS = 50_000
# The `hostile` test provider (REPORTS_PROVIDER=hostile): a report full of script payloads.
REPORTS_PROVIDERS["hostile"] = {
    "BACKEND": "tests.browser.hostile_provider.HostileProvider",
    "OPTIONS": {"tokens_per_s": 400, "ttft_s": 0.2},
}
# Every browser test writes reports as alice on one server: room for all of them.
REPORTS_DEFAULT_BUDGET_MICROS = 1_000 * 1_000_000
if REPORTS_PROVIDER in ("long", "hostile"):
    # A test provider's model is named after it and priced like the simulated one.
    REPORTS_MODEL = REPORTS_PROVIDER
    REPORTS_PRICES = {**REPORTS_PRICES, REPORTS_PROVIDER: REPORTS_PRICES["extractive"]}
