"""Test support: a real `sortie serve` on a temporary SQLite file.

The sortie binary is $SORTIE_BIN (the Makefile builds one), else it is
built once per test run with `go build` from the repository. Without Go and
without $SORTIE_BIN the tests that need a server skip, loudly, except under
CI=true, where they fail.
"""

import atexit
import logging
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(TESTS_DIR)  # clients/python
REPO_ROOT = os.path.dirname(os.path.dirname(PACKAGE_ROOT))

# The package under test, from this checkout, whatever the working directory.
if PACKAGE_ROOT not in sys.path:
    sys.path.insert(0, PACKAGE_ROOT)

_LISTENING = re.compile(r"API on (http://\S+/api/v1)")

_binary = None
_binary_lock = threading.Lock()


def unavailable(why):
    """Skips the test for a missing tool, or fails it under CI=true."""
    if os.environ.get("CI") == "true":
        raise AssertionError(why + " (CI=true: not skipped)")
    raise unittest.SkipTest("SKIPPED: " + why)


def sortie_binary():
    """Returns the path of the sortie binary: $SORTIE_BIN, else one built
    once for this test run."""
    global _binary
    with _binary_lock:
        if _binary is None:
            _binary = os.environ.get("SORTIE_BIN") or _build()
        return _binary


def _build():
    go = shutil.which("go")
    if go is None:
        unavailable("go is not installed and $SORTIE_BIN is not set, so there is no sortie to serve the API")
    out = tempfile.mkdtemp(prefix="sortie-bin-")
    atexit.register(shutil.rmtree, out, True)
    path = os.path.join(out, "sortie")
    res = subprocess.run([go, "build", "-o", path, "./cmd/sortie"], cwd=REPO_ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    if res.returncode != 0:
        raise RuntimeError("go build ./cmd/sortie failed:\n" + res.stdout)
    return path


class Lines:
    """The lines a subprocess writes to one stream, read on a thread, so
    a test waits for a line with a deadline."""

    def __init__(self, stream):
        self._stream = stream
        self._lines = queue.Queue()
        self.seen = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def close(self):
        """Closes the stream once the process has ended and all is read."""
        self._thread.join(10)
        self._stream.close()

    def _read(self, stream):
        for line in stream:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def wait_for(self, pattern, timeout=10.0):
        """Returns the match of the first next line matching pattern."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self._lines.get(timeout=max(0.0, left))
            except queue.Empty:
                raise AssertionError("no line matching %r within %gs; got %r" % (pattern, timeout, self.seen)) from None
            if line is None:
                raise AssertionError("stream closed before a line matching %r; got %r" % (pattern, self.seen))
            self.seen.append(line)
            m = re.search(pattern, line)
            if m:
                return m


class Server:
    """`sortie serve` on 127.0.0.1, a free port, and a fresh SQLite file.

    extra are more serve flags (--token ...), env more environment
    ($SORTIE_TOKENS ...). url is the API's base once started.
    """

    def __init__(self, *extra, env=None):
        self.extra = list(extra)
        self.env = dict(env or {})
        self.url = None
        self._dir = None
        self._proc = None

    def start(self):
        binary = sortie_binary()
        self._dir = tempfile.mkdtemp(prefix="sortie-serve-")
        self._stderr = open(os.path.join(self._dir, "stderr.log"), "w+")
        args = [binary, "serve", "--addr", "127.0.0.1:0", "--store", os.path.join(self._dir, "jobs.db")] + self.extra
        env = dict(os.environ)
        env.pop("SORTIE_TOKEN", None)  # only the tokens given here
        env.pop("SORTIE_TOKENS", None)
        env.update(self.env)
        self._proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._stderr, env=env,
                                      universal_newlines=True)
        self._stdout = Lines(self._proc.stdout)
        try:
            self.url = self._stdout.wait_for(_LISTENING.pattern, timeout=30).group(1)
        except AssertionError as e:
            self.stop()
            raise AssertionError("sortie serve did not start: %s\n%s" % (e, self.stderr())) from None
        return self

    def stderr(self):
        """What the server logged."""
        self._stderr.seek(0)
        return self._stderr.read()

    def stop(self):
        """Stops the server as an operator would (SIGTERM) and cleans up."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc is not None:
            self._stdout.close()
        self._stderr.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def wait_until(what, fn, timeout=10.0, interval=0.02):
    """Calls fn until it returns a true value, and returns it; fails the
    test, naming what, when timeout seconds pass first."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = fn()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError("%s: not within %gs" % (what, timeout))
        time.sleep(interval)


def quiet_logger():
    """A logger for workers under test that logs nothing (the tests look
    at the jobs, not the log)."""
    log = logging.getLogger("sortie_client.tests")
    if not log.handlers:
        log.addHandler(logging.NullHandler())
        log.propagate = False
    return log


_queue_count = [0]
_queue_lock = threading.Lock()


def fresh_queue(prefix="q"):
    """Returns a queue name no other test uses."""
    with _queue_lock:
        _queue_count[0] += 1
        return "%s-%d" % (prefix, _queue_count[0])
