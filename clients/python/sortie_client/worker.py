"""Worker: runs jobs of one queue through the HTTP API, by their kind.

The loop: fetch with a long-poll, run each claimed job's handler, report
how it ended. A keeper thread heartbeats every claimed job at a third of
its lease and sends the reports in batches. On stop (SIGTERM or SIGINT
when run on the main thread), fetching ends at once, the running job gets
a grace period to finish and is reported, or else it is released for
another worker; jobs claimed and not started are released too.
"""

import json
import logging
import os
import socket
import threading
import time

from . import _signals
from ._keeper import Keeper
from .client import Interrupt, SortieError
from .durations import format_duration
from .job import STOP_TIMEOUT, Job
from .outcomes import Cancel, Fail, Release, Snooze

__all__ = ["Worker"]

# Fetch errors with these statuses are the worker's own mistake (a bad
# queue or kind name, a wrong token): retrying cannot help.
_FATAL_STATUSES = (400, 401, 403, 404, 413)

_MAX_BACKOFF = 30.0


class Worker:
    """Runs the jobs of one queue with a handler per kind.

    client is a Client; handlers a dict from kind to handler, or register
    them with handle(). A handler takes a Job and returns the job's result
    (JSON-able, or None) or raises: Cancel, Fail, Snooze, Release, or any
    other exception to fail the job and let the server retry it.

    batch jobs are claimed at a time (1 to 1,000) and run one after the
    other; lease (seconds) is how long a claim holds without a heartbeat,
    and the keeper heartbeats at a third of it; wait (seconds, at most 60)
    is the long-poll of a fetch; grace (seconds) is how long a running job
    may go on after stop() before it is released; max_jobs > 0 stops after
    that many jobs; name is the worker's name on its jobs (attempted_by).
    """

    def __init__(self, client, queue="default", handlers=None, batch=1, lease=30.0, wait=20.0,
                 grace=10.0, max_jobs=0, name=None, logger=None):
        if not 1 <= batch <= 1000:
            raise ValueError("batch must be 1 to 1000, got %r" % (batch,))
        if lease < 1:
            raise ValueError("lease must be at least 1 second, got %r" % (lease,))
        if not 0 <= wait <= 60:
            raise ValueError("wait must be 0 to 60 seconds, got %r" % (wait,))
        if grace < 0:
            raise ValueError("grace must not be negative, got %r" % (grace,))
        self.client = client
        self.queue = queue
        self.batch = batch
        self.lease = lease
        self.wait = wait
        self.grace = grace
        self.max_jobs = max_jobs
        self.name = name or "py-%s-%d" % (socket.gethostname(), os.getpid())
        self.log = logger or logging.getLogger("sortie_client")
        self._handlers = {}
        for kind, fn in (handlers or {}).items():
            self.handle(kind, fn)
        self._stopping = threading.Event()  # read by jobs without the lock
        self._cond = threading.Condition()  # guards the fields below
        self._deadline = None  # monotonic time a running job is released at
        self._interrupt = None  # the waiting fetch's
        self._done = 0

    def handle(self, kind, fn=None):
        """Registers fn as the handler of kind; without fn, a decorator."""
        if not kind or not isinstance(kind, str):
            raise ValueError("a kind is a non-empty string, got %r" % (kind,))
        if fn is None:
            return lambda f: self.handle(kind, f)
        if not callable(fn):
            raise TypeError("the handler of %r must be callable, got %r" % (kind, fn))
        self._handlers[kind] = fn
        return fn

    def run(self):
        """Works until stop() is called or max_jobs have run.

        Called on the main thread, it stops on SIGTERM or SIGINT too (a
        second one releases the running job without waiting for the grace
        period), and puts the previous handlers back when it returns. A
        fetch the server refuses for a reason retrying cannot fix (a bad
        token, a bad queue name) raises SortieError.
        """
        if not self._handlers:
            raise ValueError("no handlers: register one per kind with handle()")
        self.log.info("worker %s: working queue %s, kinds %s", self.name, self.queue, ", ".join(sorted(self._handlers)))
        if threading.current_thread() is threading.main_thread():
            _signals.run_with_signals(self._loop, self._on_signal)
        else:
            self._loop()

    def stop(self, grace=None):
        """Stops the worker: no more fetches (a waiting one is abandoned);
        the running job has grace seconds (default the worker's) to finish,
        then it is released. Safe from any thread; returns at once."""
        grace = self.grace if grace is None else grace
        with self._cond:
            self._stopping.set()
            deadline = time.monotonic() + grace
            if self._deadline is None or deadline < self._deadline:
                self._deadline = deadline
            interrupt = self._interrupt
            self._cond.notify_all()
        if interrupt is not None:
            interrupt.interrupt()

    def _on_signal(self, signum, count):
        if count == 1:
            self.log.info("worker %s: %s: stopping; the running job has %gs to finish (a second signal releases it now)",
                          self.name, signum.name, self.grace)
            self.stop()
        else:
            self.log.info("worker %s: %s again: releasing the running job now", self.name, signum.name)
            self.stop(grace=0)

    # The loop.

    def _loop(self):
        keeper = Keeper(self.client, self.lease, logger=self.log)
        keeper.start()
        try:
            backoff = 0.0
            while self._wants_more():
                try:
                    jobs = self._fetch()
                except SortieError as e:
                    if e.status in _FATAL_STATUSES:
                        raise
                    backoff = min(_MAX_BACKOFF, max(1.0, backoff * 2))
                    self.log.warning("worker %s: fetch failed, trying again in %gs: %s", self.name, backoff, e)
                    self._pause(backoff)
                    continue
                backoff = 0.0
                keeper.hold(jobs)
                self._work_batch(keeper, jobs)
                keeper.flush()
        finally:
            keeper.stop()
            self.log.info("worker %s: stopped after %d jobs", self.name, self._done)

    def _wants_more(self):
        return not self._stopping.is_set() and (self.max_jobs <= 0 or self._done < self.max_jobs)

    def _fetch(self):
        """Claims the next jobs, waiting for some; [] when stopping."""
        limit = self.batch
        if self.max_jobs > 0:
            limit = min(limit, self.max_jobs - self._done)
        with self._cond:
            if self._stopping.is_set():
                return []
            interrupt = self._interrupt = Interrupt()
        try:
            data = self.client.fetch(self.queue, kinds=sorted(self._handlers), limit=limit, worker=self.name,
                                     lease=self.lease, wait=self.wait, interrupt=interrupt)
        finally:
            with self._cond:
                self._interrupt = None
        return [Job(d, self._stopping, self.client) for d in data]

    def _pause(self, seconds):
        """Waits seconds, or until stop()."""
        with self._cond:
            self._cond.wait_for(self._stopping.is_set, timeout=seconds)

    def _work_batch(self, keeper, jobs):
        """Runs the claimed jobs in turn; on stop, releases those not started."""
        for i, job in enumerate(jobs):
            if self._stopping.is_set():
                for left in jobs[i:]:
                    keeper.add(left, _release(left))
                return
            keeper.add(job, self._work(job))
            self._done += 1

    def _work(self, job):
        """Runs one job's handler on its own thread and returns its report:
        how the handler ended, or a release if stop's grace period passed
        first (the handler is left to finish on its own, unreported)."""
        run = _Run(job, self._handlers.get(job.kind), self)
        job._started()
        thread = threading.Thread(target=run.run, name="sortie-job-%d" % job.id, daemon=True)
        thread.start()
        with self._cond:
            while not run.finished:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left <= 0:
                    self.log.warning("worker %s: job %d (%s) did not finish within the grace period: released",
                                     self.name, job.id, job.kind)
                    return _release(job)
                self._cond.wait(left)
        return run.report

    def _finished(self, run):
        """Called on a job's thread when its handler has ended."""
        with self._cond:
            run.finished = True
            self._cond.notify_all()


class _Run:
    """One run of a handler, on its own thread: report is how it ended."""

    def __init__(self, job, handler, worker):
        self.job = job
        self.handler = handler
        self.worker = worker
        self.finished = False  # guarded by worker._cond
        self.report = None

    def run(self):
        try:
            self.report = self._outcome()
        finally:
            self.worker._finished(self)

    def _outcome(self):
        job = self.job
        if self.handler is None:
            return _report(job, "fail", error="no handler for kind %r in this worker" % job.kind)
        try:
            result = self.handler(job)
        except BaseException as e:  # the job's outcome (even SystemExit), not the worker's
            return self._raised(e)
        try:
            json.dumps(result)
        except (TypeError, ValueError) as e:
            return _report(job, "fail", error="result is not JSON: %s" % e)
        return _report(job, "complete", result=result)

    def _raised(self, e):
        """Returns the report of a handler that raised e."""
        job = self.job
        if isinstance(e, Cancel):
            return _report(job, "cancel", error=str(e))
        if isinstance(e, Snooze):
            return _report(job, "snooze", run_in=format_duration(e.run_in))
        if isinstance(e, Release):
            return _release(job)
        if isinstance(e, Fail):
            retry_in = None if e.retry_in is None else format_duration(e.retry_in)
            return _report(job, "fail", error=str(e), retry_in=retry_in)
        message = "%s: %s" % (type(e).__name__, e)
        if job._cancelled():
            return _report(job, "cancel", error="cancelled on request while running: " + message)
        if self.worker._stopping.is_set() and not job._lost_claim():
            return _release(job)
        self.worker.log.warning("job %d (%s) failed", job.id, job.kind, exc_info=e)
        if job._timed_out():
            message = "%s (%s): %s" % (STOP_TIMEOUT, job.data.get("timeout"), message)
        return _report(job, "fail", error=message)


def _report(job, outcome, **fields):
    """Returns a report of job for POST /reports, without empty fields."""
    report = {"id": job.id, "claim_token": job.claim_token, "outcome": outcome}
    report.update((k, v) for k, v in fields.items() if v is not None)
    return report


def _release(job):
    return _report(job, "release")
