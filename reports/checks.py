"""Start-up checks: configuration that would only fail later, at a user's submit."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, register


@register()
def model_has_a_price(app_configs, **kwargs) -> list[Error]:
    """Every task reserves money at the configured model's price: it must have one."""
    if settings.REPORTS_MODEL in settings.REPORTS_PRICES:
        return []
    return [
        Error(
            f"No price for REPORTS_MODEL={settings.REPORTS_MODEL!r}.",
            hint="Add it to REPORTS_PRICES or set REPORTS_MODEL_PRICE='input,output,cached_input' "
            "(US dollars per million tokens).",
            id="reports.E001",
        )
    ]
