"""The meter of a fan-out run: what its streams cost the processes of one layout
(CPU, memory) and the stores they share (PostgreSQL, Redis). `python -m bench.costs`
prints its figures; bench/fanout.py runs it beside every scale-out step."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from bench.harness import Process

EVENT_TABLE = "reports_taskevent"


def database_counters(url: str, *, settled: bool = False) -> dict:
    """Return the database's cumulative counters; with settled, once the app's sessions
    have ended (each reports its counts as it ends)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        deadline = time.monotonic() + (10 if settled else 0)
        while (
            time.monotonic() < deadline
            and conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()[0]
        ):
            time.sleep(0.1)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        commits, inserted, updated, deleted = conn.execute(
            "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted"
            " FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        wal_bytes = conn.execute("SELECT wal_bytes FROM pg_stat_wal").fetchone()[0]
        events = conn.execute(
            "SELECT pg_total_relation_size(%s), (SELECT count(*) FROM reports_taskevent)",
            [EVENT_TABLE],
        ).fetchone()
    return {
        "commits": commits,
        "rows_written": inserted + updated + deleted,
        "rows_inserted": inserted,
        "wal_bytes": int(wal_bytes),
        "event_table_bytes": events[0],
        "event_rows": events[1],
    }


def redis_counters(url: str) -> dict:
    """Return the Redis server's calls so far, by command, and its CPU seconds."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        stats, cpu = client.info("commandstats"), client.info("cpu")
    finally:
        client.close()
    return {
        "calls": {name.removeprefix("cmdstat_"): v["calls"] for name, v in stats.items()},
        "cpu_s": cpu["used_cpu_user"] + cpu["used_cpu_sys"],
    }


@dataclass
class Meter:
    """Counts what a run of streams costs the processes and the stores of one layout."""

    web: list[Process]
    workers: list[Process]
    proxy: list[Process]
    database_url: str = ""
    redis_url: str = ""
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)
    web_rss_kb: list[int] = field(default_factory=list)  # before, then the peak
    _sampling: threading.Event = field(default_factory=threading.Event)
    _sampler: threading.Thread | None = None

    def _cpu(self) -> dict:
        return {
            role: [p.cpu_s() for p in processes]
            for role, processes in (
                ("web", self.web),
                ("worker", self.workers),
                ("proxy", self.proxy),
            )
        }

    def _stores(self, *, settled: bool = False) -> dict:
        stores = {}
        if self.database_url:
            stores["database"] = database_counters(self.database_url, settled=settled)
        if self.redis_url:
            stores["redis"] = redis_counters(self.redis_url)
        return stores

    def start(self) -> None:
        """Call once every process is up, before the clients start."""
        self.before = {**self._stores(), "cpu": self._cpu(), "at": time.monotonic()}
        self.web_rss_kb = [sum(p.rss_kb() for p in self.web)] * 2
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while not self._sampling.wait(0.2):
            try:
                rss_kb = sum(p.rss_kb() for p in self.web)
            except OSError:  # a process ended: the run is over
                return
            self.web_rss_kb[1] = max(self.web_rss_kb[1], rss_kb)

    def stop(self) -> None:
        """Call when the clients are done, while the processes still run."""
        self._sampling.set()
        if self._sampler:
            self._sampler.join()
        self.after = {"cpu": self._cpu(), "at": time.monotonic()}

    def stopped(self) -> None:
        """Call once the processes have stopped (their database sessions report on exit)."""
        self.after.update(self._stores(settled=True))

    def figures(self, streams: int, report_s: float | None) -> dict:
        """Return the costs per report and, with the reports' mean duration, per
        concurrent stream (a stream open for report_s seconds)."""
        wall = self.after["at"] - self.before["at"]
        cpu = {
            role: sum(self.after["cpu"][role]) - sum(self.before["cpu"][role])
            for role in self.before["cpu"]
        }
        out: dict = {
            "report_s": report_s,
            "web_kb_per_stream": (self.web_rss_kb[1] - self.web_rss_kb[0]) / streams,
            "web_peak_rss_mb": self.web_rss_kb[1] / 1024,
        }
        for role, seconds in cpu.items():
            out[f"{role}_cpu_s_per_report"] = seconds / streams
            out[f"{role}_cpu_share"] = seconds / wall  # cores, all processes of the role
        per_report = {}
        if "database" in self.before:
            db_before, db_after = self.before["database"], self.after["database"]
            for name in ("commits", "rows_written", "rows_inserted", "wal_bytes", "event_rows"):
                per_report[f"pg_{name}"] = db_after[name] - db_before[name]
            per_report["pg_event_table_bytes"] = (
                db_after["event_table_bytes"] - db_before["event_table_bytes"]
            )
        if "redis" in self.before:
            redis_before, redis_after = self.before["redis"], self.after["redis"]
            calls = {
                name: count - redis_before["calls"].get(name, 0)
                for name, count in redis_after["calls"].items()
            }
            calls = {name: n for name, n in calls.items() if n}
            per_report["redis_calls"] = sum(calls.values())
            per_report["redis_messages"] = calls.get("publish", 0)  # one per message sent
            per_report["redis_cpu_s"] = redis_after["cpu_s"] - redis_before["cpu_s"]
            out["redis_calls_by_command"] = calls
        for name, total in per_report.items():
            out[f"{name}_per_report"] = total / streams
            out[f"{name}_per_s"] = total / wall
        if report_s:
            for role in cpu:
                out[f"{role}_cores_per_stream"] = out[f"{role}_cpu_s_per_report"] / report_s
            for name in ("pg_commits", "pg_rows_written", "pg_wal_bytes", "redis_calls"):
                if f"{name}_per_report" in out:
                    out[f"{name}_per_stream_s"] = out[f"{name}_per_report"] / report_s
            if "redis_cpu_s_per_report" in out:
                out["redis_cores_per_stream"] = out["redis_cpu_s_per_report"] / report_s
        return out


COST_KEYS = (
    "report_s",
    "web_cpu_s_per_report",
    "worker_cpu_s_per_report",
    "proxy_cpu_s_per_report",
    "web_cores_per_stream",
    "worker_cores_per_stream",
    "web_kb_per_stream",
    "pg_commits_per_report",
    "pg_rows_written_per_report",
    "pg_event_table_bytes_per_report",
    "pg_wal_bytes_per_report",
    "pg_commits_per_stream_s",
    "pg_commits_per_s",
    "redis_calls_per_report",
    "redis_messages_per_report",
    "redis_calls_per_stream_s",
    "redis_calls_per_s",
    "redis_messages_per_s",
    "redis_cpu_s_per_report",
    "redis_cores_per_stream",
)
