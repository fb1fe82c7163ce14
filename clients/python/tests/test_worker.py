"""Worker against a real `sortie serve`: outcomes, heartbeats, cancels, and
stopping, in this process and as `python3 -m sortie_client` on SIGTERM."""

import os
import signal
import subprocess
import sys
import threading
import time
import unittest

import support
from sortie_client import Cancel, Client, Fail, Snooze, Worker

# How long the worker processes took to exit after their last signal, for
# the summary at the end of the run.
EXIT_TIMES = []

_quiet = support.quiet_logger()


def setUpModule():
    global server
    server = support.Server().start()


def tearDownModule():
    server.stop()
    if EXIT_TIMES:
        print("\nworker exit after its last signal: %s" % ", ".join("%s %.3fs" % t for t in EXIT_TIMES),
              file=sys.stderr)


class InProcessTest(unittest.TestCase):
    """A Worker on a thread of the test (so without signal handling)."""

    def setUp(self):
        self.client = Client(server.url, token="")
        self.queue = support.fresh_queue("w")

    def start(self, handlers, **opts):
        """Runs a Worker on the test's queue on a thread; returns it and the thread."""
        opts.setdefault("wait", 5)
        worker = Worker(self.client, queue=self.queue, handlers=handlers, logger=_quiet, **opts)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()

        def stop():
            worker.stop(grace=0)
            thread.join(10)
        self.addCleanup(stop)
        return worker, thread

    def job(self, job_id):
        return self.client.get_job(job_id)

    def wait_state(self, job_id, state, timeout=10.0):
        """Returns the job once it is in state."""
        def in_state():
            job = self.job(job_id)
            return job if job["state"] == state else None
        return support.wait_until("job %d %s" % (job_id, state), in_state, timeout)

    def test_outcomes(self):
        def fail(job):
            raise Fail("later", retry_in=3600)

        def snooze(job):
            raise Snooze(3600)

        def cancel(job):
            raise Cancel("bad args")

        def boom(job):
            raise ValueError("boom")

        handlers = {"ok": lambda job: {"echo": job.args}, "none": lambda job: None, "cancel": cancel, "boom": boom,
                    "fail": fail, "snooze": snooze, "not.json": lambda job: object()}
        ids = {kind: self.client.enqueue(kind, {"k": kind}, queue=self.queue)["id"] for kind in handlers}
        _, thread = self.start(handlers, batch=3, max_jobs=len(handlers))
        thread.join(30)
        self.assertFalse(thread.is_alive(), "worker still running after max_jobs")
        got = {kind: self.job(job_id) for kind, job_id in ids.items()}

        def last_error(kind):
            return got[kind]["errors"][-1]["message"]
        self.assertEqual((got["ok"]["state"], got["ok"]["result"]), ("completed", {"echo": {"k": "ok"}}))
        self.assertEqual((got["none"]["state"], got["none"].get("result")), ("completed", None))
        self.assertEqual((got["cancel"]["state"], last_error("cancel")), ("cancelled", "bad args"))
        self.assertEqual((got["boom"]["state"], last_error("boom")), ("retrying", "ValueError: boom"))
        self.assertEqual((got["fail"]["state"], last_error("fail")), ("retrying", "later"))
        self.assertEqual((got["snooze"]["state"], got["snooze"]["attempt"]), ("scheduled", 0))
        self.assertEqual(got["not.json"]["state"], "retrying")
        self.assertIn("result is not JSON", last_error("not.json"))

    def test_heartbeats_keep_a_long_job(self):
        go_on = threading.Event()

        def long(job):
            job.set_progress(42)
            go_on.wait(30)
            return "done"

        job_id = self.client.enqueue("long", queue=self.queue)["id"]
        self.start({"long": long}, lease=1)
        self.wait_state(job_id, "running")
        seen = set()

        def extended_three_times():
            j = self.job(job_id)
            seen.add(j.get("lease_until"))
            return j.get("progress") == 42 and len(seen) >= 4  # 3 heartbeats: past the first 1 s lease
        support.wait_until("3 heartbeats of job %d" % job_id, extended_three_times)
        go_on.set()
        done = self.wait_state(job_id, "completed")
        self.assertEqual((done["result"], done["attempt"]), ("done", 1))

    def test_cancel_request_stops_the_job(self):
        def patient(job):
            while not job.should_stop():
                time.sleep(0.01)
            raise RuntimeError(job.stop_reason)

        job_id = self.client.enqueue("patient", queue=self.queue)["id"]
        self.start({"patient": patient}, lease=1)
        self.wait_state(job_id, "running")
        self.client.cancel_job(job_id)
        done = self.wait_state(job_id, "cancelled")
        self.assertEqual(done["errors"][-1]["message"],
                         "cancelled on request while running: RuntimeError: the job was cancelled on request")

    def test_a_job_that_stops_for_the_worker_is_released(self):
        started = threading.Event()

        def cooperative(job):
            started.set()
            while not job.should_stop():
                time.sleep(0.01)
            raise RuntimeError(job.stop_reason)

        job_id = self.client.enqueue("cooperative", queue=self.queue)["id"]
        worker, thread = self.start({"cooperative": cooperative})
        self.assertTrue(started.wait(10), "the job did not start")
        worker.stop(grace=10)
        thread.join(5)
        self.assertFalse(thread.is_alive(), "worker still running 5s after stop()")
        job = self.job(job_id)
        self.assertEqual((job["state"], job["attempt"], job.get("errors")), ("available", 0, None))

    def test_stop_abandons_the_long_poll(self):
        worker, thread = self.start({"x": lambda job: None}, wait=30)
        support.wait_until("the worker's fetch", lambda: worker._interrupt is not None)
        start = time.monotonic()
        worker.stop()
        thread.join(5)
        self.assertFalse(thread.is_alive(), "worker still running 5s after stop()")
        self.assertLess(time.monotonic() - start, 1.0)

    def test_stop_finishes_the_running_job_and_releases_the_others(self):
        started, go_on = threading.Event(), threading.Event()

        def first(job):
            started.set()
            go_on.wait(30)
            return "finished"

        ids = [self.client.enqueue(kind, queue=self.queue)["id"] for kind in ["first", "later", "later"]]
        worker, thread = self.start({"first": first, "later": lambda job: "ran"}, batch=3)
        self.assertTrue(started.wait(10), "the first job did not start")
        worker.stop(grace=10)
        go_on.set()
        thread.join(10)
        self.assertFalse(thread.is_alive(), "worker still running 10s after stop()")
        states = [(j["state"], j["attempt"], j.get("result")) for j in map(self.job, ids)]
        self.assertEqual(states, [("completed", 1, "finished"), ("available", 0, None), ("available", 0, None)])


class SignalTest(unittest.TestCase):
    """The worker command line, stopped by signals."""

    def setUp(self):
        self.client = Client(server.url, token="")
        self.queue = support.fresh_queue("sig")

    def start(self, *args):
        """Starts python3 -m sortie_client with the test handlers on the
        test's queue; returns the process and its stdout and stderr lines."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([support.PACKAGE_ROOT, support.TESTS_DIR])
        env.pop("SORTIE_TOKEN", None)
        cmd = [sys.executable, "-m", "sortie_client", "--handlers", "handlers", "--url", server.url,
               "--queue", self.queue, "--wait", "20"] + list(args)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, universal_newlines=True)
        out, err = support.Lines(proc.stdout), support.Lines(proc.stderr)
        self.addCleanup(self._cleanup, proc, out, err)
        return proc, out, err

    def _cleanup(self, proc, *lines):
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in lines:
            stream.close()

    def stopped_by(self, proc, sig, stderr):
        """Sends sig and returns the seconds until the process exited 0."""
        start = time.monotonic()
        proc.send_signal(sig)
        try:
            code = proc.wait(10)
        except subprocess.TimeoutExpired:
            self.fail("worker still running 10s after %s; stderr: %s" % (sig.name, stderr.seen))
        took = time.monotonic() - start
        EXIT_TIMES.append((self.id().rsplit(".", 1)[-1], took))
        self.assertEqual(code, 0, "worker exited with %d; stderr: %s" % (code, stderr.seen))
        return took

    def test_sigterm_while_a_quick_job_runs(self):
        job_id = self.client.enqueue("quick", {"seconds": 0.2}, queue=self.queue)["id"]
        proc, out, err = self.start()
        out.wait_for(r"^started %d$" % job_id)
        took = self.stopped_by(proc, signal.SIGTERM, err)
        self.assertLess(took, 1.0)
        done = self.client.get_job(job_id)
        self.assertEqual((done["state"], done["result"]), ("completed", {"done": job_id}))

    def test_sigterm_while_waiting_for_jobs(self):
        job_id = self.client.enqueue("quick", {"seconds": 0}, queue=self.queue)["id"]
        proc, out, err = self.start()
        out.wait_for(r"^started %d$" % job_id)
        support.wait_until("job %d completed" % job_id, lambda: self.client.get_job(job_id)["state"] == "completed")
        # The worker reported its job: it is long-polling for the next.
        took = self.stopped_by(proc, signal.SIGTERM, err)
        self.assertLess(took, 1.0)
        # The abandoned fetch claimed nothing.
        later = self.client.enqueue("quick", queue=self.queue)["id"]
        self.assertEqual([j["id"] for j in self.client.fetch(self.queue)], [later])

    def test_sigterm_releases_a_job_past_the_grace_period(self):
        job_id = self.client.enqueue("stuck", queue=self.queue)["id"]
        proc, out, err = self.start("--grace", "0.5")
        out.wait_for(r"^started %d$" % job_id)
        took = self.stopped_by(proc, signal.SIGTERM, err)
        self.assertLess(took, 0.5 + 1.0)
        self.assert_released(job_id)

    def test_second_signal_releases_at_once(self):
        job_id = self.client.enqueue("stuck", queue=self.queue)["id"]
        proc, out, err = self.start("--grace", "60")
        out.wait_for(r"^started %d$" % job_id)
        proc.send_signal(signal.SIGTERM)
        err.wait_for("SIGTERM: stopping")
        self.assertEqual(self.client.get_job(job_id)["state"], "running")
        took = self.stopped_by(proc, signal.SIGINT, err)
        self.assertLess(took, 1.0)
        self.assert_released(job_id)

    def assert_released(self, job_id):
        """The job is available again, its attempt not counted, no error."""
        job = self.client.get_job(job_id)
        self.assertEqual((job["state"], job["attempt"], job.get("errors")), ("available", 0, None))
        again = self.client.fetch(self.queue)
        self.assertEqual([(j["id"], j["attempt"]) for j in again], [(job_id, 1)])


if __name__ == "__main__":
    unittest.main()
