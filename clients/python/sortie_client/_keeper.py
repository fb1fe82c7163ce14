"""The Worker's keeper: heartbeats its claims and sends its reports.

Every job a worker claimed is held until its report is sent: the keeper
extends the lease of each held job every third of the lease, whether it is
waiting its turn, running or finished, and sends the reports of finished
jobs in one request (POST /reports), when the worker asks and at least once
a second, so a finished job is never held back by a slow one after it.
"""

import logging
import threading
import time

from .client import SortieError

# A report whose request failed without an answer, or with a 5xx, is sent
# again at the next tick; a 4xx one is dropped (the server will not take it).
_RETRY_STATUSES = (None, 408, 429, 500, 502, 503, 504)

# At most this many reports go in one request (the API's limit).
_MAX_REPORTS = 1000


class Keeper:
    """Heartbeats held jobs and sends reports, on one thread it owns.

    start() starts the thread; stop() stops it and sends the last reports.
    """

    def __init__(self, client, lease, flush_interval=1.0, logger=None):
        self._client = client
        self._lease = lease
        self._beat_every = lease / 3.0
        self._tick = min(flush_interval, lease / 6.0)
        self._log = logger or logging.getLogger("sortie_client")
        self._done = threading.Event()
        self._thread = None
        self._lock = threading.Lock()  # guards _held and _pending
        self._held = {}  # job id -> [Job, monotonic time of its next heartbeat]
        self._pending = []  # (Job, report dict), in the order they ended

    def start(self):
        """Starts the keeper's thread."""
        self._thread = threading.Thread(target=self._run, name="sortie-keeper", daemon=True)
        self._thread.start()

    def stop(self):
        """Stops the thread and sends the reports still pending, once."""
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self.flush()
        with self._lock:
            left = list(self._pending)
        for job, report in left:
            self._log.warning("job %d (%s): %s not reported; it runs again once its lease ends",
                              job.id, job.kind, report["outcome"])

    def hold(self, jobs):
        """Heartbeats jobs from now until they are reported."""
        due = time.monotonic() + self._beat_every
        with self._lock:
            for job in jobs:
                self._held[job.id] = [job, due]

    def add(self, job, report):
        """Queues the report of a job that ended, for the next flush."""
        with self._lock:
            self._pending.append((job, report))

    def flush(self):
        """Sends the pending reports, up to 1,000 a request."""
        while True:
            with self._lock:
                batch, self._pending = self._pending[:_MAX_REPORTS], self._pending[_MAX_REPORTS:]
            if not batch or not self._send(batch):
                return

    def _run(self):
        while not self._done.wait(self._tick):
            self.flush()
            self._beat_due()

    def _send(self, batch):
        """Sends one batch of reports; False if it must wait for a retry."""
        try:
            results = self._client.report([r for _, r in batch])
        except SortieError as e:
            if e.status in _RETRY_STATUSES:
                self._log.warning("reports not sent, trying again: %s", e)
                with self._lock:
                    self._pending[:0] = batch
                return False
            self._log.error("reports refused, %d jobs run again once their leases end: %s", len(batch), e)
            self._release_hold(job for job, _ in batch)
            return True
        for (job, _), res in zip(batch, results):
            if res.get("recorded"):
                self._log.info("job %d (%s): %s", job.id, job.kind, res.get("state"))
            else:
                self._log.warning("job %d (%s): not recorded: %s", job.id, job.kind, res.get("error"))
        self._release_hold(job for job, _ in batch)
        return True

    def _release_hold(self, jobs):
        with self._lock:
            for job in jobs:
                self._held.pop(job.id, None)

    def _beat_due(self):
        """Heartbeats the held jobs whose turn has come."""
        now = time.monotonic()
        with self._lock:
            due = [job for job, at in self._held.values() if at <= now]
        for job in due:
            if self._done.is_set():
                return
            self._beat(job)

    def _beat(self, job):
        """Extends one job's lease and tells the job what the server said."""
        try:
            out = self._client.heartbeat(job.id, job.claim_token, lease=self._lease, progress=job._progress_to_send())
        except SortieError as e:
            if e.status == 404:
                out = {"held": False, "cancel_requested": False}
            else:
                self._log.warning("job %d: heartbeat failed, trying again: %s", job.id, e)
                self._reschedule(job, self._tick)
                return
        job._heard(out.get("held", False), out.get("cancel_requested", False))
        if not out.get("held", False):
            self._log.warning("job %d (%s): claim lost (its lease ran out, or it was deleted): its report will be refused",
                              job.id, job.kind)
            self._release_hold([job])
            return
        self._reschedule(job, self._beat_every)

    def _reschedule(self, job, after):
        with self._lock:
            entry = self._held.get(job.id)
            if entry is not None:
                entry[1] = time.monotonic() + after
