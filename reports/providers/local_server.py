"""The `local` provider's model server: llama.cpp's own `llama-server`, run from Python.

Run as a process of its own (`python -m reports.providers.local_server --model M.gguf`),
so the model never shares a Reportline process's event loop or GIL. It loads the model,
starts the server (xllamacpp, the `local` extra), prints one JSON line on standard output
naming the address it listens on, and serves until it is sent SIGTERM or SIGINT, or its
parent process is gone. The worker supervisor starts, watches and restarts it
(reports/providers/local.py).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

# How often the server looks whether the process that started it is still there: an
# orphaned model server would hold its memory and a port for nothing.
PARENT_CHECK_S = 1.0
STOP_GRACE_S = 3.0  # the server's own shutdown, at most


# Tokens the server reads of a prompt at a time. llama-server says how far it has read
# after each batch; at its default of 2,048 a page of text is one batch, and the page would
# show "0 of 1,326 tokens" until the reading is over. 512 is the size of the batches it
# computes in anyway (its n_ubatch), so it reads no slower; a CPU reading 100-200 tokens a
# second reports every few seconds, and the page counts down in between.
BATCH_TOKENS = 512


def server_params(xlc, args: argparse.Namespace):
    """Return xllamacpp's parameters for `args`."""
    params = xlc.CommonParams()
    params.model.path = args.model
    params.model_alias = args.alias
    params.hostnames = [args.host]
    params.port = args.port
    # llama-server splits its context between the slots: each slot's window is n_ctx / slots.
    params.n_ctx = args.context * args.slots
    params.n_parallel = args.slots
    params.n_batch = args.batch
    params.n_ubatch = min(params.n_ubatch, args.batch)
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.endpoint_metrics = True
    params.endpoint_slots = True
    return params


def serve(args: argparse.Namespace) -> None:
    import xllamacpp as xlc

    params = server_params(xlc, args)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    parent = os.getppid()
    server = xlc.Server(params)  # returns once the model is loaded and the server listens
    try:
        print(json.dumps({"url": server.listening_address}), flush=True)
    except BrokenPipeError:
        os._exit(1)  # nobody is listening: the parent is gone
    while not stop.wait(PARENT_CHECK_S):
        if os.getppid() != parent:
            # Orphaned: end at once; the system frees what the server's threads hold.
            os._exit(1)
    # Stop the server's threads before the process exits, but never hang on the way out.
    watchdog = threading.Timer(STOP_GRACE_S, os._exit, (0,))
    watchdog.daemon = True
    watchdog.start()
    del server


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m reports.providers.local_server")
    parser.add_argument("--model", required=True, help="the GGUF file to serve")
    parser.add_argument("--alias", default="local", help="the model's name in the API")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--context", type=int, default=4096, help="tokens of each slot")
    parser.add_argument("--slots", type=int, default=2, help="requests served at once")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads")
    parser.add_argument(
        "--batch", type=int, default=BATCH_TOKENS, help="prompt tokens read at a time"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    try:
        serve(arguments())
    except KeyboardInterrupt:
        sys.exit(0)
