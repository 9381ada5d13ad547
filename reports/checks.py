"""System checks: configuration mistakes reported when the server starts, not mid-task."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, register


@register("reports")
def check_provider_settings(app_configs, **kwargs) -> list[Error]:
    if settings.REPORTS_PROVIDER == "openai" and not settings.REPORTS_MODEL:
        return [
            Error(
                "REPORTS_MODEL is empty while REPORTS_PROVIDER is 'openai'.",
                hint="Set REPORTS_MODEL to the model's name on the server, for example "
                "gpt-4.1-mini on OpenAI or llama3.2 on Ollama.",
                id="reports.E001",
            )
        ]
    return []


@register("reports")
def model_has_a_price(app_configs, **kwargs) -> list[Error]:
    """Every task reserves money at the configured model's price: it must have one."""
    if settings.REPORTS_MODEL in settings.REPORTS_PRICES:
        return []
    if settings.REPORTS_PROVIDER == "openai" and not settings.REPORTS_MODEL:
        return []  # E001 says what is wrong
    return [
        Error(
            f"No price for REPORTS_MODEL={settings.REPORTS_MODEL!r}.",
            hint="Add it to REPORTS_PRICES or set REPORTS_MODEL_PRICE='input,output,cached_input' "
            "(US dollars per million tokens).",
            id="reports.E002",
        )
    ]
