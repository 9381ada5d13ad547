"""What one stream costs, measured during a fan-out run: the inputs of the capacity model
(docs/capacity.md).

    python -m bench.costs [--streams 100] [--web 1] [--workers 1] [--server uvicorn]

Runs one scale-out step of the fan-out benchmark (PostgreSQL, Redis, nginx in front of
the web processes; bench/fanout.py) and prints, per report and per concurrent stream:

* CPU seconds in the web processes, the workers (with the document readers they start)
  and nginx, from /proc/<pid>/stat;
* PostgreSQL: transactions committed, rows written and bytes of WAL, from
  pg_stat_database and pg_stat_wal, and the growth of the event table;
* Redis: its CPU seconds (INFO cpu), commands run (by name, INFO commandstats) and
  channel-layer messages sent (the PUBLISH calls: the layer publishes each message once,
  whatever the number of processes subscribed);
* web memory per open stream: the web processes' peak resident size during the run,
  less their size before it.

PostgreSQL's WAL and Redis's CPU and command counts are the whole server's: take the figures on
an otherwise idle machine (a database and a Redis of the benchmark's own).
"""

from __future__ import annotations

import argparse

from bench.fanout import run_steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--web", type=int, default=1, help="web processes behind nginx")
    parser.add_argument("--workers", type=int, default=1, help="worker processes")
    parser.add_argument("--server", default="uvicorn", choices=("daphne", "uvicorn"))
    parser.add_argument("--name", default="costs", help="of the results file")
    args = parser.parse_args()
    run_steps(args.streams, [args.server], [(args.web, args.workers)], args.name)


if __name__ == "__main__":
    main()
