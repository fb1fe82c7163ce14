"""Handlers for the worker subprocesses of test_worker.py
(python3 -m sortie_client --handlers handlers).

Each prints "started ID" on stdout when it starts, so a test knows the job
is running before it signals the worker.
"""

import threading
import time


def quick(job):
    """Takes args.seconds (default 0.2), then completes."""
    print("started %d" % job.id, flush=True)
    time.sleep(job.args.get("seconds", 0.2))
    return {"done": job.id}


def stuck(job):
    """Never ends on its own and ignores should_stop()."""
    print("started %d" % job.id, flush=True)
    threading.Event().wait()


HANDLERS = {"quick": quick, "stuck": stuck}
