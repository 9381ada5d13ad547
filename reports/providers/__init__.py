"""Model adapters: pick the configured one by name."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from reports.clock import Clock
from reports.providers.base import Provider

# The ways the simulated provider misbehaves on purpose (docs/providers.md), in its table's order.
SCENARIOS: tuple[str, ...] = (
    "ok",
    "slow",
    "error",
    "truncated",
    "empty",
    "stall",
    "rate_limited",
    "invalid",
)


def get_provider(name: str | None = None, *, clock: Clock | None = None) -> Provider:
    """Build the provider named `name`, or `settings.REPORTS_PROVIDER`, from its settings."""
    backend, options = _configured(name)
    return backend(clock=clock, **options)


def provider_class(name: str | None = None) -> type[Provider]:
    """Return the class of the provider `get_provider` would build, without building it."""
    return _configured(name)[0]


def _configured(name: str | None) -> tuple[type[Provider], dict]:
    key = name or settings.REPORTS_PROVIDER
    providers = getattr(settings, "REPORTS_PROVIDERS", {})
    config = providers.get(key)
    if config is None:
        known = ", ".join(sorted(providers)) or "none"
        raise ImproperlyConfigured(
            f"Unknown report provider {key!r}: REPORTS_PROVIDERS configures {known}."
        )
    try:
        backend = import_string(config["BACKEND"])
    except (KeyError, ImportError) as exc:
        raise ImproperlyConfigured(
            f"REPORTS_PROVIDERS[{key!r}] needs a BACKEND that can be imported: {exc}"
        ) from exc
    return backend, config.get("OPTIONS", {})
