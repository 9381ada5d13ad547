"""System checks: configuration mistakes reported when the server starts, not mid-task."""

from django.conf import settings
from django.core.checks import Error, register


@register("reports")
def check_provider_settings(app_configs, **kwargs):
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
