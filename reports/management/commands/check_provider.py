import asyncio

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from reports.providers import get_provider
from reports.providers.check import (
    THRESHOLDS_MS,
    CheckFailed,
    Stage,
    measure_connection,
    measure_request,
    verdict,
)


class Command(BaseCommand):
    help = (
        "Measure DNS lookup, TCP connect, TLS handshake, time to first byte and time to "
        "first token against the configured provider (one small streaming request), and "
        "say which is slow. Thresholds (ms): "
        + ", ".join(f"{key} {ms:.0f}" for key, ms in THRESHOLDS_MS.items())
        + ". Exits 1 when a stage fails."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--provider",
            default=None,
            help="A name in REPORTS_PROVIDERS (default: REPORTS_PROVIDER).",
        )
        parser.add_argument(
            "--timeout", type=float, default=10.0, help="Seconds for each connection stage."
        )

    def handle(self, *args, provider, timeout, **options):
        name = provider or settings.REPORTS_PROVIDER
        try:
            adapter = get_provider(name)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        base_url = getattr(adapter, "base_url", None)
        if base_url is None:
            raise CommandError(
                f"The {name!r} provider makes no network calls: there is nothing to check. "
                "Set REPORTS_PROVIDER=openai, or pass --provider openai."
            )
        self.stdout.write(f"Checking {name} at {base_url} (model {adapter.model})")
        stages: list[Stage] = []
        try:
            for stage in measure_connection(base_url, timeout_s=timeout):
                stages.append(self._show(stage))
            if not base_url.startswith("https:"):
                self.stdout.write(f"  {'TLS handshake':<22}{'-':>10}    plain http, no TLS")
            for stage in asyncio.run(measure_request(adapter)):
                stages.append(self._show(stage))
        except CheckFailed as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(verdict(stages))

    def _show(self, stage: Stage) -> Stage:
        mark = "SLOW" if stage.slow else "ok"
        self.stdout.write(
            f"  {stage.label:<22}{stage.ms:>8.1f} ms  {mark} (slow over "
            f"{stage.threshold_ms:.0f} ms)"
        )
        return stage
