import asyncio
import logging
import signal

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from prometheus_client import start_http_server

from reports.observability import loop_lag
from reports.serving.heap import freeze_startup_objects
from reports.streaming import follower
from reports.worker import probes
from reports.worker.supervisor import Supervisor

log = logging.getLogger("reports.worker")


class Command(BaseCommand):
    help = "Run report attempts in this process, within the global and per-lane caps."

    def add_arguments(self, parser):
        parser.add_argument("--slots", type=int, default=4, help="Attempts at once (default 4).")
        parser.add_argument(
            "--lanes",
            default="short,long",
            help="Lanes to take work from, comma-separated (default short,long).",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            help="Serve this process's event-loop and database-queue figures (Prometheus) on "
            "127.0.0.1 at this port (default: not served; the task figures are on the web's "
            "/metrics).",
        )
        parser.add_argument(
            "--health-port",
            type=int,
            default=0,
            help="Answer GET /healthz and /readyz on this port (default 0: off).",
        )
        parser.add_argument(
            "--health-host",
            default="127.0.0.1",
            help="Address the probes listen on (default 127.0.0.1; 0.0.0.0 for a pod's probes).",
        )

    def handle(self, *args, slots, lanes, metrics_port, health_port, health_host, **options):
        lanes = self._lanes(lanes)
        if metrics_port is not None:
            try:
                start_http_server(metrics_port, addr="127.0.0.1", registry=loop_lag.registry)
            except OSError as exc:
                raise CommandError(f"--metrics-port {metrics_port}: {exc.strerror}.") from None
        freeze_startup_objects()
        asyncio.run(self._serve(slots, lanes, health_host, health_port))

    @staticmethod
    def _lanes(given: str) -> tuple[str, ...]:
        """The lanes named, as far as REPORTS_LANE_LIMITS runs them; a name that is no lane,
        or none left at all, stops the worker here rather than leave it idle for good."""
        named = [lane.strip() for lane in given.split(",") if lane.strip()]
        unknown = [lane for lane in named if lane not in ("short", "long")]
        if unknown or not named:
            raise CommandError(f"--lanes takes short, long or both (short,long), not {given!r}.")
        lanes = tuple(lane for lane in named if lane in settings.REPORTS_LANE_LIMITS)
        if not lanes:
            raise CommandError(
                f"--lanes {given} names no lane that REPORTS_LANE_LIMITS runs "
                f"({', '.join(settings.REPORTS_LANE_LIMITS)})."
            )
        return lanes

    async def _serve(self, slots: int, lanes: tuple[str, ...], host: str, port: int) -> None:
        loop_lag.watch_running_loop()
        # Built now, not by the first claim: over Redis, building the channel layer imports
        # its client, some 0.1 s of CPU on the way of the first report's first text.
        follower.layer_across_processes()
        supervisor = Supervisor(slots=slots, lanes=lanes)
        if port:
            try:
                await probes.serve(host, port, supervisor.is_current)
            except OSError as exc:  # a port taken, an address not this machine's
                raise CommandError(f"--health-port {port} on {host}: {exc.strerror}.") from None
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        runner = asyncio.create_task(supervisor.run_forever())
        await stopping.wait()
        # A JSON line on standard error, as every other (docs/observability.md).
        log.info("stopping: no new claims; letting running attempts end")
        await supervisor.shutdown()
        runner.cancel()
