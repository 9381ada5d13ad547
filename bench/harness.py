"""What every benchmark shares: processes to run the app in, percentiles, the output.

A benchmark prints a table of measure, figure, baseline, ratio and target, and writes
the same rows to `bench/results/<name>.json` (the figures and plots in
docs/benchmarks.md are made from those files).
"""

from __future__ import annotations

import atexit
import json
import math
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"
if not PYTHON.exists():
    PYTHON = Path(sys.executable)
RESULTS = ROOT / "bench" / "results"
SAMPLE = ROOT / "tests" / "fixtures" / "sample_article.md"
# Scale-out runs flush this database first: give them one of their own.
POSTGRES_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/bench")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


def lengthen(report: str, chars: int) -> str:
    """Return `report` with its sections repeated until it has about `chars` characters
    (still a valid report: the title and the summary come first)."""
    sections = report.partition("\n## ")[2]
    body, part = [report], 1
    while sum(map(len, body)) < chars:
        body.append(f"\n\n## Part {part}: {sections}")
        part += 1
    return "".join(body)


# --- figures ------------------------------------------------------------------------------


def percentile(values, p: float) -> float | None:
    """Return the p-th percentile (nearest rank) of `values`, None when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def ratio(value, baseline) -> float | None:
    if value is None or not baseline:
        return None
    return value / baseline


def machine() -> dict:
    cpu = ""
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


@dataclass
class Row:
    measure: str
    value: float | None
    unit: str = ""
    baseline: float | None = None
    target: str = ""
    met: bool | None = None

    @property
    def ratio(self) -> float | None:
        return ratio(self.value, self.baseline)


@dataclass
class Results:
    """The rows one benchmark prints and saves."""

    name: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)

    def add(self, measure: str, value, unit: str = "", **kwargs) -> Row:
        row = Row(measure, value, unit, **kwargs)
        self.rows.append(row)
        return row

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(text, flush=True)

    def show(self) -> None:
        print(f"\n== {self.name} ==  (machine: {machine()})")
        print(f"{'measure':58s} {'figure':>12s} {'baseline':>12s} {'ratio':>7s}  target")
        for row in self.rows:
            met = {True: "met", False: "MISSED", None: ""}[row.met]
            print(
                f"{row.measure:58s} {_fmt(row.value, row.unit):>12s} "
                f"{_fmt(row.baseline, row.unit):>12s} {_fmt(row.ratio, 'x'):>7s}  "
                f"{row.target} {met}"
            )

    def save(self) -> Path:
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / f"{self.name}.json"
        body = {
            "name": self.name,
            "machine": machine(),
            "rows": [{**row.__dict__, "ratio": row.ratio} for row in self.rows],
            "notes": self.notes,
            "data": self.data,
        }
        path.write_text(json.dumps(body, indent=1, default=str) + "\n")
        return path


def _fmt(value, unit: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        if abs(value) < 0.1:  # a cost per stream: two significant digits, not 0.00
            text = f"{value:.2g}"
        else:
            text = f"{value:.2f}" if abs(value) < 10 else f"{value:.0f}"
    else:
        text = f"{int(value)}"
    return f"{text} {unit}".strip() if unit and unit != "x" else text + ("x" if unit else "")


# --- the system under test, in its own processes ------------------------------------------


def scratch_dir() -> Path:
    """Return a new data directory, removed when the benchmark ends (BENCH_KEEP=1 keeps
    it, with the servers' logs and probe files)."""
    path = Path(tempfile.mkdtemp(prefix="reportline-bench-"))
    if not os.environ.get("BENCH_KEEP"):
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def free_port() -> int:
    """Return a loopback port nothing listens on, chosen below the kernel's ephemeral range.

    A port the kernel hands out for `bind(0)` comes from the range it also gives outgoing
    connections their source ports from: between this call and the server's own bind, a
    database or Redis connection of any process could take it. Below the range, only
    another listener can."""
    low = _ephemeral_low()
    for port in random.sample(range(max(1024, low - 12000), low), 200):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


@dataclass
class Layout:
    """Where the app keeps its state: embedded (SQLite, in-memory layer) or scale-out."""

    name: str  # "embedded" | "scale-out"
    data_dir: Path
    env: dict

    @classmethod
    def embedded(cls, data_dir: Path | None = None) -> Layout:
        data_dir = data_dir or scratch_dir()
        return cls("embedded", data_dir, {"DATABASE_URL": "", "REDIS_URL": ""})

    @classmethod
    def scale_out(
        cls, data_dir: Path | None = None, database_url: str = "", redis_url: str = ""
    ) -> Layout:
        data_dir = data_dir or scratch_dir()
        env = {"DATABASE_URL": database_url or POSTGRES_URL, "REDIS_URL": redis_url or REDIS_URL}
        return cls("scale-out", data_dir, env)

    def environ(self, **extra) -> dict:
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "project.settings",
            "DJANGO_DEBUG": "0",
            "DJANGO_HTTPS": "0",  # served over plain HTTP on the loopback
            "DJANGO_SECRET_KEY": "bench-only-secret-key",
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "REPORTS_DATA_DIR": str(self.data_dir),
            "REPORTS_LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
            # One user submits and follows every stream at once: lift the per-user creation
            # limit, their share of the queue, the cap of open streams and the budget, which
            # would otherwise refuse all but the first few dozen; and their share of the
            # running slots, which never holds a user alone back, but would have each claim
            # look through the whole queue for another user's task first.
            "REPORTS_USER_RATE_LIMIT": "100000",
            "REPORTS_USER_QUEUE_LIMIT": "100000",
            "REPORTS_USER_MAX_RUNNING": "100000",
            "REPORTS_MAX_STREAMS_PER_USER": "100000",
            "REPORTS_DEFAULT_BUDGET_USD": "100000",
            **self.env,
            **{key: str(value) for key, value in extra.items()},
        }

    def django(self, command: str, *args: str, env: dict) -> dict:
        """Run `bench.db <command>` against this layout's database; return its JSON."""
        result = subprocess.run(
            [str(PYTHON), "-m", "bench.db", command, *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode != 0:
            raise RuntimeError(f"bench.db {command} failed:\n{result.stderr[-3000:]}")
        return json.loads(result.stdout.strip().splitlines()[-1])


class Process:
    """One process of the system (server or worker), in its own process group."""

    def __init__(
        self,
        args: list[str],
        env: dict,
        log_path: Path,
        port: int | None = None,
        program: str | Path = PYTHON,
    ):
        self.port = port
        self.log_path = log_path
        with log_path.open("a") as log:
            self.popen = subprocess.Popen(
                [str(program), *args],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, path: str = "/accounts/login/", timeout_s: float = 60) -> Process:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"the server exited:\n{self.log()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + path, timeout=2):
                    return self
            except urllib.error.HTTPError:
                return self  # it answers
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        raise RuntimeError(f"no answer in {timeout_s} s:\n{self.log()[-3000:]}")

    def cpu_s(self) -> float:
        """Return the CPU seconds this process and its children (nginx's workers, a
        worker's document readers) have used so far (user + system)."""
        return _cpu_ticks(self.popen.pid) / os.sysconf("SC_CLK_TCK")

    def rss_kb(self) -> int:
        with open(f"/proc/{self.popen.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""


def _cpu_ticks(pid: int) -> int:
    """Return the CPU ticks of `pid`, of its children that ended and of those still running."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        running = [
            int(child)
            for thread in Path(f"/proc/{pid}/task").iterdir()  # a child is its thread's
            for child in (thread / "children").read_text().split()
        ]
    except FileNotFoundError:  # a child that has just ended is counted by its parent
        return 0
    return sum(int(f) for f in fields[11:15]) + sum(_cpu_ticks(child) for child in running)


def serve(
    layout: Layout, env: dict, *, server: str = "daphne", extra: tuple = (), port: int = 0
) -> Process:
    """Start the app (or the bare baseline with extra=("--bare",)) under `server`, on
    `port` (a free one when 0: a restarted server keeps its predecessor's)."""
    port = port or free_port()
    args = ["-m", "bench.serve", "--server", server, "--port", str(port), *extra]
    return Process(args, env, layout.data_dir / f"server-{port}.log", port)


def work(layout: Layout, env: dict, *, slots: int, extra: tuple = (), index: int = 0) -> Process:
    """Start a separate `reportworker` process (scale-out)."""
    args = ["-m", "bench.serve", "--worker", "--slots", str(slots), *extra]
    return Process(args, env, layout.data_dir / f"worker-{index}.log")


NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def write_nginx_conf(prefix: Path, connections: int) -> None:
    """Write `prefix`/nginx.conf: one nginx worker in the foreground, everything it writes
    under `prefix`, room for `connections` clients each with an upstream connection, and
    the site from `prefix`/site.conf."""
    (prefix / "nginx.conf").write_text(
        f"""{"user root;" if os.geteuid() == 0 else ""}
worker_processes 1;
worker_rlimit_nofile {4 * connections + 1024};
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections {2 * connections + 512}; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    include {prefix}/site.conf;
}}
"""
    )


def balance(layout: Layout, servers: list[Process], connections: int) -> Process:
    """Start nginx with the production site (deploy/nginx.conf) in front of `servers`, over
    plain HTTP on the loopback (TLS would only add nginx's own cost)."""
    port = free_port()
    prefix = Path(tempfile.mkdtemp(prefix="nginx-", dir=layout.data_dir))
    site = (ROOT / "deploy" / "nginx.conf").read_text()
    upstream = "".join(f"    server 127.0.0.1:{s.port};\n" for s in servers)
    site = re.sub(r"(upstream reportline_web \{\n)(    server .*\n)+", rf"\g<1>{upstream}", site)
    site = re.sub(r"^\s*ssl_.*\n", "", site, flags=re.M)
    site = site.replace("listen 443 ssl;", f"listen 127.0.0.1:{port};")
    site = site.replace("listen 80;", f"listen 127.0.0.1:{free_port()};")  # the redirect
    (prefix / "site.conf").write_text(site)
    # Each stream holds a client and an upstream connection; keep room for both.
    write_nginx_conf(prefix, connections)
    args = ["-p", str(prefix), "-c", str(prefix / "nginx.conf")]
    return Process(args, dict(os.environ), layout.data_dir / "nginx.log", port, program=NGINX)
