"""Run the real application in a subprocess, as the demo does, on a throwaway database.

`manage.py runserver --noreload --insecure` (daphne's, with DEBUG off and serving its own
static files, as in the demo) with the embedded worker: one process is the whole system,
as in production on one machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench.harness import free_port

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".venv" / "bin" / "python"
if not PYTHON.exists():
    PYTHON = Path(sys.executable)

USERS = {"alice": "alice-demo-pass", "bob": "bob-demo-pass"}  # manage.py demo_users

CHROMIUM = Path("/usr/bin/chromium")  # Debian's; no browser is downloaded
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class LiveServer:
    """One server process over one data directory; stop and start it again at will.

    The database is migrated and given the demo users on first start, or copied from
    `database_from`, a data directory another server prepared (faster).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        settings: str = "project.settings",
        database_from: Path | None = None,
        **env: object,
    ):
        self.data_dir = Path(data_dir)
        self.database_from = database_from
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.data_dir / "server.log"
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": settings,
            "DJANGO_DEBUG": "0",  # as the demo runs: the product's own error pages
            "DJANGO_SECRET_KEY": "browser-tests-only-secret-key",
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DJANGO_HTTPS": "0",  # plain HTTP on the loopback, as the demo serves it
            "REPORTS_DATA_DIR": str(self.data_dir),
            "REPORTS_ALLOW_SCENARIOS": "1",
            "REPORTS_EMBEDDED_WORKER": "1",
            "REPORTS_USER_RATE_LIMIT": "10000",  # tests submit faster than people
            "REPORTS_USER_QUEUE_LIMIT": "10000",
            "PYTHONUNBUFFERED": "1",
            **{key: str(value) for key, value in env.items()},
        }
        self.process: subprocess.Popen | None = None
        self._prepared = False

    def manage(self, *args: str) -> str:
        result = subprocess.run(
            [str(PYTHON), "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stderr}")
        return result.stdout

    def prepare(self) -> LiveServer:
        """Create the database with the demo users (no server is started)."""
        if self.database_from is not None:
            for path in Path(self.database_from).glob("db.sqlite3*"):
                shutil.copy(path, self.data_dir / path.name)
        else:
            self.manage("migrate", "--no-input")
            self.manage("demo_users")
        self._prepared = True
        return self

    def start(self, timeout_s: float = 30) -> LiveServer:
        if not self._prepared:
            self.prepare()
        log = self.log_path.open("a")
        self.process = subprocess.Popen(
            [
                str(PYTHON),
                "manage.py",
                "runserver",
                f"127.0.0.1:{self.port}",
                "--noreload",
                "--insecure",  # static files, with DEBUG off, as the demo serves them
            ],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/accounts/login/", timeout=2) as reply:
                    if reply.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the server did not answer in {timeout_s} s:\n{self.log()}")

    def stop(self, *, crash: bool = False) -> None:
        """Stop the server; `crash` kills it at once, as a power cut would."""
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL if crash else signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self.process = None

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""
