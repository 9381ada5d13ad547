"""A long-running process's start-up objects, kept out of the garbage collector's passes.

Once Django, the app and the modules they load are in place, some 120,000 objects live as
long as the process. Python's full collection walks every one of them each time it runs:
in the fan-out benchmark (docs/benchmarks.md) once a run, 0.1 s of CPU with the event loop
held, and every page's text waiting for it. `gc.freeze()` moves them to a permanent
generation that collections skip; whatever is made after start is collected as before.
"""

import gc


def freeze_startup_objects() -> None:
    """Keep the objects alive now out of every later collection; call once, at start."""
    gc.collect()  # so that no garbage of the start is kept for good with them
    gc.freeze()
