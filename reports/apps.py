from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps
from django.core.exceptions import ImproperlyConfigured


class AdminConfig(admin_apps.AdminConfig):
    """Django's admin, on a site whose login is throttled (reports.login_throttle)."""

    default = False  # `reports` itself is ReportsConfig
    default_site = "reports.login_throttle.ThrottledAdminSite"


class ReportsConfig(AppConfig):
    name = "reports"
    verbose_name = "Reports"

    def ready(self) -> None:
        import logging

        from django.conf import settings

        from reports import threads

        # Python's warnings go to the `py.warnings` logger (settings.LOGGING): one JSON line
        # each, not plain text among them (Django no longer routes them there itself).
        logging.captureWarnings(True)

        threads.shorten_switch_interval()

        if settings.REPORTS_OTEL:
            try:
                import reports.observability.otel  # noqa: F401 (fail at start-up, not at the first span)
            except ImportError as exc:
                raise ImproperlyConfigured(
                    "REPORTS_OTEL is on but OpenTelemetry is not installed: "
                    "install the 'otel' extra (pip install 'reportline[otel]')."
                ) from exc
        from reports import checks  # noqa: F401  (registers the system checks)
