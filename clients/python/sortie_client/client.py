"""Client: the HTTP API of `sortie serve`, one method per endpoint.

Requests and answers are the API's JSON as Python dicts and lists
(docs/http-api.md describes each field); durations are seconds or Go
duration strings, times are aware datetimes or RFC 3339 strings. A refused
request raises SortieError with the HTTP status and the API's message.
"""

import datetime
import http.client
import json
import os
import socket
import threading
import urllib.parse

from .durations import format_duration, parse_duration

__all__ = ["Client", "SortieError", "Interrupt", "DEFAULT_URL"]

#: Where `sortie serve` listens by default.
DEFAULT_URL = "http://127.0.0.1:8080/api/v1"

class SortieError(Exception):
    """A request the API refused or that did not reach it.

    status is the HTTP status (404, 409, ...), or None when no answer came
    (connection refused, timeout); error is the API's {"error": ...} text,
    or what went wrong on the way; method and path name the request.
    """

    def __init__(self, status, error, method="", path=""):
        self.status = status
        self.error = error
        self.method = method
        self.path = path
        where = ("%s %s: " % (method, path)) if method else ""
        if status is None:
            super().__init__("%s%s" % (where, error))
        else:
            super().__init__("%s%d %s" % (where, status, error))


class Interrupt:
    """Ends a waiting fetch early, from another thread.

    Pass one to Client.fetch and call interrupt() to abandon the long-poll:
    the request's connection is half-closed, the server stops waiting, and
    the fetch returns the jobs the server had already sent, or none. An
    Interrupt serves one fetch; interrupt() before the fetch starts makes it
    return at once.
    """

    def __init__(self):
        self._lock = threading.Lock()  # guards the fields below
        self._sock = None
        self._fired = False

    def interrupt(self):
        """Abandons the fetch this Interrupt was given to."""
        with self._lock:
            self._fired = True
            sock = self._sock
        if sock is not None:
            _half_close(sock)

    @property
    def fired(self):
        """Whether interrupt() was called."""
        with self._lock:
            return self._fired

    def _attach(self, sock):
        """Records the fetch's socket; False if already interrupted."""
        with self._lock:
            self._sock = sock
            return not self._fired


def _half_close(sock):
    # The server sees the request end and stops waiting; an answer already
    # on its way can still be read.
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # already closed


class Client:
    """A client of the HTTP API of `sortie serve`.

    url is the API's base, such as "http://127.0.0.1:8080/api/v1" (default
    $SORTIE_URL, else that); token the bearer token (default $SORTIE_TOKEN,
    none when empty); timeout the seconds a request may take (a fetch adds
    its wait). One Client may be shared by threads: each request uses its
    own connection.
    """

    def __init__(self, url=None, token=None, timeout=30.0):
        url = url or os.environ.get("SORTIE_URL") or DEFAULT_URL
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("url must be http(s)://HOST[:PORT]/api/v1, got %r" % (url,))
        self.url = url.rstrip("/")
        self._scheme = parts.scheme
        self._netloc = parts.netloc
        self._prefix = parts.path.rstrip("/")
        self.token = token if token is not None else os.environ.get("SORTIE_TOKEN", "")
        self.timeout = timeout

    def __repr__(self):
        return "Client(%r)" % (self.url,)

    # Enqueueing and inspecting.

    def enqueue(self, kind, args=None, **opts):
        """Enqueues one job of kind with args (a dict or list, default {}).

        opts are the API's enqueue fields: queue, priority, run_at (an aware
        datetime or RFC 3339 text), run_in, timeout (seconds or "90s"),
        max_attempts, unique_key, tags, meta, partition_key, depends_on,
        ignore_dep_failure. Returns {"id", "duplicate", "state"}; duplicate
        is True, with the holder's id, when the unique key is held; with
        "warnings" too when the server has something to say (a queue it did
        not know was created: a misspelt name?).
        """
        return self._call("POST", "/jobs", _job_body(kind, args, opts))

    def enqueue_many(self, jobs):
        """Enqueues 1 to 1,000 jobs, all or none.

        Each job is a dict with "kind" and the fields of enqueue ("args",
        "queue", "run_in", ...). Returns one {"id", "duplicate", "state"} per
        job, in order.
        """
        body = []
        for job in jobs:
            job = dict(job)
            kind = job.pop("kind", None)
            args = job.pop("args", None)
            body.append(_job_body(kind, args, job))
        return self._call("POST", "/jobs/batch", {"jobs": body})["results"]

    def get_job(self, job_id):
        """Returns one job with its args, result, progress and errors."""
        return self._call("GET", "/jobs/%d" % job_id)

    def list_jobs(self, queue=None, state=None, kind=None, workflow=None, after=None, limit=None, desc=False,
                  tag=None, unique_key=None, error=None, args=None, created_after=None, created_before=None,
                  scan_max=None):
        """Returns a page of jobs: {"jobs": [...], "next_after"}.

        Pass the page's next_after as after for the next page; it is
        missing on the last one. limit is 1 to 1,000 (default 100).

        queue, state, kind and workflow are indexed. The search filters
        are checked job by job on at most scan_max jobs a call (default
        10,000): tag, unique_key, error (a text in the last error, any
        case), args (a dict of path to value, {"user.id": 42}: the value
        at each dot-separated path must equal the JSON of the value),
        created_after and created_before (datetimes or RFC 3339 strings).
        A search page also has "scanned" and "capped": capped says the
        call stopped at scan_max before filling the page; go on with
        after=next_after.
        """
        query = {"queue": queue, "state": state, "kind": kind, "workflow": workflow, "after": after, "limit": limit,
                 "tag": tag, "unique_key": unique_key, "error": error, "scan_max": scan_max,
                 "created_after": _rfc3339(created_after, "created_after") if created_after is not None else None,
                 "created_before": _rfc3339(created_before, "created_before") if created_before is not None else None}
        pairs = [(k, v) for k, v in query.items() if v is not None]
        if desc:
            pairs.append(("desc", "true"))
        for path_, value in (args or {}).items():
            pairs.append(("args", "%s=%s" % (path_, json.dumps(value, separators=(",", ":")))))
        path = "/jobs"
        if pairs:
            path += "?" + urllib.parse.urlencode(pairs)
        return self._call("GET", path)

    def iter_jobs(self, **filters):
        """Yields every job matching filters (those of list_jobs), page by page."""
        while True:
            page = self.list_jobs(**filters)
            yield from page["jobs"]
            if not page.get("next_after"):
                return
            filters["after"] = page["next_after"]

    def retry_job(self, job_id):
        """Runs a finished job again; returns the job."""
        return self._call("POST", "/jobs/%d/retry" % job_id)

    def cancel_job(self, job_id):
        """Cancels a job; a running one is asked to stop at its next heartbeat."""
        return self._call("POST", "/jobs/%d/cancel" % job_id)

    def delete_job(self, job_id):
        """Deletes a job that is not running; returns it as it was."""
        return self._call("DELETE", "/jobs/%d" % job_id)

    def bulk(self, action, queue=None, state=None, kind=None, workflow=None, max=None, after=None):
        """Retries, cancels or deletes (action) every job a filter (queue,
        state, kind, workflow: at least one) matches, up to max (default
        1,000) newest first. Returns {"changed", "failed": [{"id", "error"}],
        "next_after"}: a next_after other than 0 means more match; call
        again with after set to it."""
        body = {"action": action, "queue": queue, "state": state, "kind": kind, "workflow": workflow,
                "max": max, "after": after}
        return self._call("POST", "/jobs/bulk", {k: v for k, v in body.items() if v is not None})

    def queues(self):
        """Returns every queue: name, paused, jobs per state, limits."""
        return self._call("GET", "/queues")["queues"]

    def queue_history(self, since=None, step=None, queue=None):
        """Returns the jobs finished per outcome over a period before now,
        from the counts the store keeps: since is "1h" (the default),
        "24h", "7d" or seconds; step is whole minutes ("15m", or seconds);
        queue limits it to one queue. The answer has "totals", "points"
        (one per step with counts, oldest first) and "queues"."""
        query = {"since": format_duration(since) if since is not None else None,
                 "step": format_duration(step) if step is not None else None, "queue": queue}
        query = {k: v for k, v in query.items() if v is not None}
        path = "/queues/history"
        if query:
            path += "?" + urllib.parse.urlencode(query)
        return self._call("GET", path)

    def processes(self):
        """Returns every client process on the store: id, host, pid,
        version, queues, busy, started_at, last_beat, alive, quiet, stop."""
        return self._call("GET", "/processes")["processes"]

    def pause_queue(self, name):
        """Pauses a queue for every process sharing the store; returns it."""
        return self._call("POST", "/queues/%s/pause" % _segment(name))

    def resume_queue(self, name):
        """Resumes a paused queue; returns it."""
        return self._call("POST", "/queues/%s/resume" % _segment(name))

    def configure_queue(self, name, **settings):
        """Changes some of a queue's settings for every process and returns
        the queue: max_running, rate_limit and rate_period, partition_max_running,
        partition_rate_limit and partition_rate_period, max_depth and overflow
        ("reject" or "drop-oldest"); 0 turns a limit off, periods are seconds
        or "1s", and the settings not given stay."""
        if not settings:
            raise ValueError("configure_queue needs at least one setting, such as max_running=5")
        body = {}
        for field, value in settings.items():
            if field.endswith("_period") and value is not None:
                value = format_duration(value)
            body[field] = value
        return self._call("PATCH", "/queues/%s" % _segment(name), body)

    def health(self):
        """Returns True when the server and its store answer."""
        return self._call("GET", "/health").get("ok") is True

    # Working jobs remotely.

    def fetch(self, queue="default", kinds=None, limit=1, worker=None, lease=None, wait=None, interrupt=None):
        """Claims up to limit jobs of queue and returns them (a list of dicts).

        kinds restricts the claim to those kinds; worker names the claimer
        (the job's attempted_by); lease (seconds, default the server's, 30 s)
        is how long the claim holds without a heartbeat; wait (seconds, up to
        60) long-polls for jobs when none is ready. Each job carries its
        claim_token, for the reports and heartbeats. interrupt, an Interrupt,
        lets another thread end the wait early: the fetch then returns the
        jobs already sent, or [].
        """
        body = {"queue": queue, "limit": limit}
        if kinds is not None:
            body["kinds"] = list(kinds)
        if worker:
            body["worker"] = worker
        if lease is not None:
            body["lease"] = format_duration(lease)
        if wait is not None:
            body["wait"] = format_duration(wait)
        timeout = self.timeout
        if wait is not None:
            timeout += parse_duration(body["wait"])
        try:
            out = self._call("POST", "/fetch", body, timeout=timeout, interrupt=interrupt)
        except SortieError:
            if interrupt is not None and interrupt.fired:
                return []
            raise
        return out.get("jobs") or []

    def complete(self, job_id, claim_token, result=None):
        """Completes a claimed job with result (JSON, at most 64 KiB)."""
        body = {"claim_token": claim_token}
        if result is not None:
            body["result"] = result
        return self._call("POST", "/jobs/%d/complete" % job_id, body)

    def fail(self, job_id, claim_token, error="", retry_in=None, discard=False):
        """Fails a claimed job: retried after retry_in (default the kind's
        retry policy on the server) until out of attempts, or, with
        discard, cancelled for good."""
        body = {"claim_token": claim_token, "error": error}
        if retry_in is not None:
            body["retry_in"] = format_duration(retry_in)
        if discard:
            body["discard"] = True
        return self._call("POST", "/jobs/%d/fail" % job_id, body)

    def snooze(self, job_id, claim_token, run_in):
        """Runs a claimed job again after run_in, the attempt not counted."""
        body = {"claim_token": claim_token, "run_in": format_duration(run_in)}
        return self._call("POST", "/jobs/%d/snooze" % job_id, body)

    def release(self, job_id, claim_token):
        """Puts a claimed job back at once, the attempt not counted."""
        return self._call("POST", "/jobs/%d/release" % job_id, {"claim_token": claim_token})

    def heartbeat(self, job_id, claim_token, lease=None, progress=None):
        """Extends a claimed job's lease (seconds, default the server's) and
        records its progress (0 to 100). Returns {"held", "cancel_requested"}:
        stop the job when held is False or cancel_requested is True."""
        body = {"claim_token": claim_token}
        if lease is not None:
            body["lease"] = format_duration(lease)
        if progress is not None:
            body["progress"] = progress
        return self._call("POST", "/jobs/%d/heartbeat" % job_id, body)

    def job_steps(self, job_id):
        """Returns a job's durable steps in the order recorded, each a dict
        with "name", "kind" (step, sleep or spawn), "attempt",
        "recorded_at" and its "result" (a step's) or "child_ids" (a
        spawn's)."""
        return self._call("GET", "/jobs/%d/steps" % job_id)["steps"]

    def record_step(self, job_id, claim_token, name, result):
        """Records durable step name of a claimed job with result (any JSON
        value, None included). Returns {"recorded", "step"}: recorded is
        False when the job had a step of that name already, and step is
        that earlier record, whose result the worker uses. A stale claim
        raises SortieError with status 409, and nothing is recorded."""
        body = {"claim_token": claim_token, "name": name, "result": result}
        return self._call("POST", "/jobs/%d/steps" % job_id, body)

    def report(self, reports):
        """Records how many claims ended, in one request and one store write.

        Each report is a dict: "id", "claim_token", "outcome" (complete,
        fail, cancel, snooze or release) and the outcome's fields (result;
        error and retry_in; error; run_in); durations may be seconds.
        Returns one result per report, in order: {"id", "recorded": True,
        "state"}, or {"id", "recorded": False, "status", "error"} for a
        stale claim (409) or a missing job (404).
        """
        body = []
        for r in reports:
            r = dict(r)
            for field in ("retry_in", "run_in"):
                if r.get(field) is not None:
                    r[field] = format_duration(r[field])
            body.append(r)
        return self._call("POST", "/reports", {"reports": body})["results"]

    # The wire.

    def _call(self, method, path, body=None, timeout=None, interrupt=None):
        """Sends one request and returns its decoded JSON answer."""
        data = None
        headers = {"Accept": "application/json"}
        if body is not None:
            data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        try:
            status, raw = self._send(method, self._prefix + path, data, headers, timeout or self.timeout, interrupt)
        except (OSError, http.client.HTTPException) as e:
            raise SortieError(None, "no answer from %s: %s" % (self.url, _reason(e)), method, path) from None
        return _decode(status, raw, method, path)

    def _send(self, method, target, data, headers, timeout, interrupt):
        """Sends a request on a new connection; returns (status, body)."""
        if self._scheme == "https":
            conn = http.client.HTTPSConnection(self._netloc, timeout=timeout)
        else:
            conn = http.client.HTTPConnection(self._netloc, timeout=timeout)
        try:
            conn.connect()
            if interrupt is not None and not interrupt._attach(conn.sock):
                raise ConnectionAbortedError("interrupted")
            conn.request(method, target, body=data, headers=headers)
            res = conn.getresponse()
            return res.status, res.read()
        finally:
            conn.close()


def _job_body(kind, args, opts):
    """Returns the JSON of one job to enqueue."""
    if not kind or not isinstance(kind, str):
        raise ValueError("a job needs a kind (a non-empty string), got %r" % (kind,))
    body = {"kind": kind}
    if args is not None:
        body["args"] = args
    for name, value in opts.items():
        if value is None:
            continue
        if name in ("run_in", "timeout"):
            value = format_duration(value)
        elif name == "run_at":
            value = _rfc3339(value)
        body[name] = value
    return body


def _rfc3339(t, name="run_at"):
    """Returns t, an aware datetime or a string, as RFC 3339 text; name is
    the argument's, for the error."""
    if isinstance(t, str):
        return t
    if not isinstance(t, datetime.datetime) or t.tzinfo is None:
        raise ValueError("%s must be an aware datetime (with tzinfo) or RFC 3339 text, got %r" % (name, t))
    return t.isoformat()


def _segment(name):
    """Quotes name as one path segment."""
    return urllib.parse.quote(name, safe="")


def _reason(e):
    if isinstance(e, socket.timeout):
        return "timed out"
    return str(e) or type(e).__name__


def _decode(status, raw, method, path):
    """Returns the JSON of a 2xx answer; raises SortieError for others."""
    text = raw.decode("utf-8", errors="replace")
    try:
        out = json.loads(text) if text.strip() else {}
    except ValueError:
        out = None
    if 200 <= status < 300:
        if not isinstance(out, dict):
            raise SortieError(status, "answer is not a JSON object: %r" % text[:200], method, path)
        return out
    if isinstance(out, dict) and isinstance(out.get("error"), str):
        raise SortieError(status, out["error"], method, path)
    raise SortieError(status, text.strip()[:200] or http.client.responses.get(status, "error"), method, path)
