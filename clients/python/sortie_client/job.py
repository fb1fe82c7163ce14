"""Job: a claimed job as a Worker hands it to a handler."""

import json
import threading
import time

from .client import SortieError
from .durations import parse_duration

__all__ = ["Job", "StepReused"]

# Why a job should stop, as Job.stop_reason says it.
STOP_WORKER = "the worker is stopping"
STOP_LOST = "the claim was lost (the lease ran out, or the job was deleted)"
STOP_CANCEL = "the job was cancelled on request"
STOP_TIMEOUT = "the job's timeout passed"


class Job:
    """A job claimed by a Worker: its fields, and whether it should stop.

    id, kind, queue, args, attempt (1 for the first run), max_attempts,
    claim_token, meta and tags are the fetched job's; timeout is its timeout
    in seconds, or None; data is the whole fetched JSON. A handler that runs
    long checks should_stop() between steps and returns or raises when it
    says so.
    """

    def __init__(self, data, stopping, client=None):
        self.data = data
        self.id = data["id"]
        self.kind = data["kind"]
        self.queue = data.get("queue", "default")
        self.args = data.get("args")
        self.attempt = data.get("attempt", 1)
        self.max_attempts = data.get("max_attempts")
        self.claim_token = data["claim_token"]
        self.meta = data.get("meta")
        self.tags = data.get("tags") or []
        self.timeout = parse_duration(data["timeout"]) if data.get("timeout") else None
        self._stopping = stopping  # the worker's threading.Event
        self._client = client  # the Client that claimed the job, for steps
        self._steps = None  # name -> recorded step, read at the first step
        self._used = set()  # the step names this attempt used
        self._lock = threading.Lock()  # guards the fields below
        self._lost = False
        self._cancel_requested = False
        self._progress = None
        self._progress_sent = None
        self._deadline = None

    def __repr__(self):
        return "Job(id=%d, kind=%r, attempt=%d)" % (self.id, self.kind, self.attempt)

    def should_stop(self):
        """Whether the handler should stop now (stop_reason says why)."""
        return self.stop_reason is not None

    @property
    def stop_reason(self):
        """Why the handler should stop, or None: the claim was lost, the job
        was cancelled, its timeout passed, or the worker is stopping."""
        with self._lock:
            if self._lost:
                return STOP_LOST
            if self._cancel_requested:
                return STOP_CANCEL
            if self._deadline is not None and time.monotonic() >= self._deadline:
                return STOP_TIMEOUT
        if self._stopping.is_set():
            return STOP_WORKER
        return None

    def set_progress(self, percent):
        """Records the job's progress, 0 to 100, sent with the next heartbeat."""
        if not 0 <= percent <= 100:
            raise ValueError("progress must be 0 to 100, got %r" % (percent,))
        with self._lock:
            self._progress = percent

    def step(self, name, fn):
        """Runs fn() once per job, durably, and returns its result.

        The first time, fn's result (a JSON value) is recorded in the store
        under this attempt's claim before step returns it; every later
        attempt of the job (after a failure, a snooze, a crash of this
        process) gets the recorded result back without calling fn. So code
        inside steps runs once per job, and code outside them on every
        attempt. step returns the result as recorded (decoded from JSON),
        the first time too.

        An exception from fn records nothing and propagates (the job is
        retried, as usual). A name used twice in one attempt raises
        StepReused; a result that is not JSON raises TypeError or
        ValueError; a claim lost meanwhile raises SortieError with status
        409 (nothing recorded: return, the job runs elsewhere). Names
        identify steps across deploys: keep them stable.
        """
        if not isinstance(name, str) or not name or len(name.encode("utf-8")) > 255:
            raise ValueError("step name must be 1 to 255 bytes of text, got %r" % (name,))
        with self._lock:
            if name in self._used:
                raise StepReused("step %r of job %d: the name was used already in this attempt" % (name, self.id))
            self._used.add(name)
            steps = self._steps
        if steps is None:
            steps = {s["name"]: s for s in self._client.job_steps(self.id)}
            with self._lock:
                self._steps = steps
        recorded = steps.get(name)
        if recorded is not None:
            if recorded["kind"] != "step":
                raise ValueError("step %r of job %d was recorded as a %s, not a step" % (name, self.id, recorded["kind"]))
            return recorded.get("result")
        try:
            result = fn()
            json.dumps(result)
        except BaseException:
            with self._lock:
                self._used.discard(name)
            raise
        try:
            answer = self._client.record_step(self.id, self.claim_token, name, result)
        except SortieError as e:
            with self._lock:
                self._used.discard(name)
                self._lost = self._lost or e.status == 409
            raise
        with self._lock:
            steps[name] = answer["step"]
        return answer["step"].get("result")

    # What the Worker tells the job, and asks it.

    def _started(self):
        with self._lock:
            if self.timeout:
                self._deadline = time.monotonic() + self.timeout

    def _heard(self, held, cancel_requested):
        with self._lock:
            self._lost = self._lost or not held
            self._cancel_requested = self._cancel_requested or cancel_requested

    def _lost_claim(self):
        with self._lock:
            return self._lost

    def _cancelled(self):
        with self._lock:
            return self._cancel_requested

    def _timed_out(self):
        with self._lock:
            return self._deadline is not None and time.monotonic() >= self._deadline

    def _progress_to_send(self):
        """Returns the progress not yet sent, or None."""
        with self._lock:
            if self._progress == self._progress_sent:
                return None
            self._progress_sent = self._progress
            return self._progress


class StepReused(Exception):
    """A handler used one step name twice in one attempt: each step needs a
    name of its own, stable across deploys."""
