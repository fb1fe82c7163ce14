#!/usr/bin/env python3
"""A sortie worker in Python, through the HTTP API of `sortie serve`.

Standard library only. It claims up to 10 jobs of one queue with a
long-polling fetch, runs each by its kind, and reports how they ended, all
in one request, with each job's claim_token: complete with a result, fail
(retried with sortie's backoff), or cancel for a job that can never
succeed. A job that runs longer than a third of its lease is heartbeated,
and stopped if the server says the claim is lost or the job was cancelled.
A report waits at most a second for others to go with it, well within the
lease.

    sortie serve &
    python3 examples/remote-worker/worker.py --queue text
    curl -s localhost:8080/api/v1/jobs -d '{"kind": "word.count", "queue": "text", "args": {"text": "to be or not"}}'
"""

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

LEASE_SECONDS = 30


class Permanent(Exception):
    """A failure that retrying cannot fix: the job is discarded."""


def word_count(args, still_held):
    text = args.get("text")
    if not isinstance(text, str):
        raise Permanent("args.text must be a string")
    return {"words": len(text.split())}


def sleep(args, still_held):
    # A long job: it checks, between steps, that it should go on.
    for _ in range(int(args.get("seconds", 1) * 10)):
        if not still_held():
            raise RuntimeError("stopped: claim lost or job cancelled")
        time.sleep(0.1)
    return {"slept": args.get("seconds", 1)}


HANDLERS = {"word.count": word_count, "sleep": sleep}


class API:
    def __init__(self, base, token):
        self.base = base.rstrip("/")
        self.token = token

    def post(self, path, body, timeout=70):
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(), method="POST")
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as res:
                return res.status, json.load(res)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)


class Heartbeat(threading.Thread):
    """Extends a running job's lease every third of it."""

    def __init__(self, api, job):
        super().__init__(daemon=True)
        self.api, self.job = api, job
        self.held = True
        self.done = threading.Event()

    def run(self):
        while not self.done.wait(LEASE_SECONDS / 3):
            status, out = self.api.post(
                "/jobs/%d/heartbeat" % self.job["id"],
                {"claim_token": self.job["claim_token"], "lease": "%ds" % LEASE_SECONDS},
            )
            if status != 200 or not out["held"] or out["cancel_requested"]:
                self.held = False
                return


def work(api, job):
    """Runs one job and returns its report (POST /reports takes a list)."""
    report = {"id": job["id"], "claim_token": job["claim_token"]}
    handler = HANDLERS[job["kind"]]  # the fetch asked for these kinds only
    beat = Heartbeat(api, job)
    beat.start()
    try:
        result = handler(job["args"], lambda: beat.held)
        report.update(outcome="complete", result=result)
    except Permanent as e:
        report.update(outcome="cancel", error=str(e))
    except Exception as e:  # retried with sortie's backoff
        report.update(outcome="fail", error="%s: %s" % (type(e).__name__, e))
    finally:
        beat.done.set()
    return report


class Reporter(threading.Thread):
    """Reports finished jobs, many in one request (POST /reports).

    The worker adds each job's report when it ends and flushes after each
    fetched batch; this thread also flushes every second, so a finished job
    is never held back past its lease by a slow job after it.
    """

    def __init__(self, api):
        super().__init__(daemon=True)
        self.api = api
        self.lock = threading.Lock()  # guards pending; one flush at a time
        self.pending = []  # (kind, report)
        self.done = threading.Event()

    def add(self, kind, report):
        with self.lock:
            self.pending.append((kind, report))

    def run(self):
        while not self.done.wait(1):
            self.flush()

    def flush(self):
        with self.lock:
            if not self.pending:
                return
            kinds = {r["id"]: kind for kind, r in self.pending}
            status, out = self.api.post("/reports", {"reports": [r for _, r in self.pending]})
            self.pending = []
        if status != 200:
            # Nothing was recorded: the jobs run again once their leases end.
            print("reports: %d %s" % (status, out.get("error")), file=sys.stderr)
            return
        # A refused report (409: the claim was lost when the lease ran out)
        # runs again elsewhere; the others are recorded.
        for r in out["results"]:
            print("job %d (%s): %s" % (r["id"], kinds[r["id"]], r.get("state", r.get("error"))), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default=os.environ.get("SORTIE_URL", "http://127.0.0.1:8080/api/v1"))
    p.add_argument("--queue", default="default")
    p.add_argument("--max-jobs", type=int, default=0, help="stop after this many jobs (0: run until SIGTERM)")
    args = p.parse_args()
    api = API(args.url, os.environ.get("SORTIE_TOKEN", ""))
    worker = "py-%s-%d" % (socket.gethostname(), os.getpid())
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    reporter = Reporter(api)
    reporter.start()
    done = 0
    while not stopping.is_set() and (args.max_jobs == 0 or done < args.max_jobs):
        limit = 10 if args.max_jobs == 0 else min(10, args.max_jobs - done)
        status, out = api.post(
            "/fetch",
            {"queue": args.queue, "kinds": list(HANDLERS), "limit": limit, "worker": worker,
             "lease": "%ds" % LEASE_SECONDS, "wait": "20s"},
        )
        if status != 200:
            print("fetch: %d %s" % (status, out.get("error")), file=sys.stderr)
            time.sleep(1)
            continue
        for job in out["jobs"]:
            reporter.add(job["kind"], work(api, job))
        reporter.flush()
        done += len(out["jobs"])
    reporter.done.set()
    reporter.flush()


if __name__ == "__main__":
    main()
