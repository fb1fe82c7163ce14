#!/usr/bin/env python3
"""A sortie worker in Python, on the client in clients/python.

Two handlers by kind, run by sortie_client's Worker: it claims jobs of one
queue with a long-polling fetch, heartbeats them, and reports how each
ended, a complete with its result, a failure (retried with sortie's
backoff) or a cancel for a job that can never succeed. SIGTERM stops it
within a second once the running job is done (or released, after the
grace period).

    sortie serve &
    python3 examples/remote-worker/worker.py --queue text
    curl -s localhost:8080/api/v1/jobs -d '{"kind": "word.count", "queue": "text", "args": {"text": "to be or not"}}'

Installed (pip install ./clients/python), the same runs as
python3 -m sortie_client --handlers MODULE, MODULE holding HANDLERS.
"""

import os
import sys
import time

try:
    import sortie_client  # noqa: F401 (pip install ./clients/python)
except ImportError:  # run from a checkout
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))

from sortie_client import Cancel, cli  # noqa: E402


def word_count(job):
    text = job.args.get("text")
    if not isinstance(text, str):
        raise Cancel("args.text must be a string")
    return {"words": len(text.split())}


def sleep(job):
    # A long job: between steps it checks that it should go on. Raised
    # because the worker is stopping, the job is released, its attempt not
    # counted; raised because an operator cancelled it, it is cancelled.
    seconds = job.args.get("seconds", 1)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if job.should_stop():
            raise RuntimeError("stopped: " + job.stop_reason)
        time.sleep(min(0.1, max(0, end - time.monotonic())))
    return {"slept": seconds}


HANDLERS = {"word.count": word_count, "sleep": sleep}

if __name__ == "__main__":
    sys.exit(cli.main(handlers=HANDLERS))
