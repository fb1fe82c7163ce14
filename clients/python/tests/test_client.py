"""Client against a real `sortie serve`: each endpoint, and how refusals
become SortieError."""

import datetime
import os
import socket
import threading
import time
import unittest
from unittest import mock

import support
from sortie_client import Client, Interrupt, SortieError, Worker


class ServerTest(unittest.TestCase):
    """A test with one `sortie serve` for the class."""

    server_args = ()
    server_env = {}

    @classmethod
    def setUpClass(cls):
        cls.server = support.Server(*cls.server_args, env=cls.server_env).start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        self.client = Client(self.server.url, token="")
        self.queue = support.fresh_queue()

    def claim(self, **enqueue_opts):
        """Enqueues one job on the test's queue and claims it."""
        job_id = self.client.enqueue("test.job", {"n": 1}, queue=self.queue, **enqueue_opts)["id"]
        jobs = self.client.fetch(self.queue, limit=1, worker="py-test")
        self.assertEqual([j["id"] for j in jobs], [job_id])
        return jobs[0]

    def refused(self, status, fn, *args, **kwargs):
        """Calls fn, which must raise SortieError with status; returns it."""
        with self.assertRaises(SortieError) as cm:
            fn(*args, **kwargs)
        self.assertEqual(cm.exception.status, status, str(cm.exception))
        return cm.exception


class EnqueueAndInspectTest(ServerTest):

    def test_health(self):
        self.assertTrue(self.client.health())

    def test_enqueue_fetch_complete(self):
        res = self.client.enqueue("email.send", {"to": "ada@example.com"}, queue=self.queue,
                                  tags=["a"], meta={"by": "test"}, timeout=90)
        # No process works this queue (the server's own client works none,
        # and no remote worker fetched from it yet): the server says so.
        warnings = res.pop("warnings", [])
        self.assertEqual(len(warnings), 1, warnings)
        self.assertIn('no running worker works queue "%s"' % self.queue, warnings[0])
        self.assertEqual(res, {"id": res["id"], "duplicate": False, "state": "available"})
        jobs = self.client.fetch(self.queue, kinds=["email.send"], worker="py-test", lease=10)
        self.assertEqual(len(jobs), 1)
        job = jobs[0]
        self.assertEqual((job["id"], job["kind"], job["args"], job["attempt"], job["timeout"]),
                         (res["id"], "email.send", {"to": "ada@example.com"}, 1, "1m30s"))
        self.assertEqual(self.client.get_job(job["id"])["state"], "running")
        done = self.client.complete(job["id"], job["claim_token"], result={"sent": True})
        self.assertEqual(done, {"id": job["id"], "state": "completed"})
        got = self.client.get_job(job["id"])
        self.assertEqual((got["state"], got["result"], got["attempted_by"], got["tags"], got["meta"]),
                         ("completed", {"sent": True}, "py-test", ["a"], {"by": "test"}))

    def test_enqueue_scheduled_and_unique(self):
        later = self.client.enqueue("x", queue=self.queue, run_in=3600)
        self.assertEqual(later["state"], "scheduled")
        at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
        self.assertEqual(self.client.enqueue("x", queue=self.queue, run_at=at)["state"], "scheduled")
        # The fetches of a remote worker make the queue worked: no warning.
        self.client.fetch(self.queue, limit=1, worker="py-test", kinds=["nothing"])
        first = self.client.enqueue("x", queue=self.queue, unique_key="k-" + self.queue)
        self.assertNotIn("warnings", first)
        again = self.client.enqueue("x", queue=self.queue, unique_key="k-" + self.queue)
        self.assertEqual(again, {"id": first["id"], "duplicate": True, "state": "available"})
        self.assertEqual(self.client.fetch(self.queue, limit=10, worker="py-test")[0]["id"], first["id"])

    def test_enqueue_many_and_list(self):
        results = self.client.enqueue_many([{"kind": "x", "args": {"i": i}, "queue": self.queue} for i in range(5)])
        self.assertEqual([r["state"] for r in results], ["available"] * 5)
        page = self.client.list_jobs(queue=self.queue, limit=2)
        self.assertEqual([j["id"] for j in page["jobs"]], [r["id"] for r in results[:2]])
        self.assertIn("next_after", page)
        every = [j["args"]["i"] for j in self.client.iter_jobs(queue=self.queue, limit=2)]
        self.assertEqual(every, [0, 1, 2, 3, 4])
        newest = self.client.list_jobs(queue=self.queue, desc=True, limit=1)["jobs"][0]
        self.assertEqual(newest["id"], results[-1]["id"])

    def test_search(self):
        before = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=1)
        jobs = [{"kind": "x", "args": {"user": {"id": i}, "email": "u%d@example.com" % i}, "queue": self.queue,
                 "tags": ["vip"] if i == 3 else []} for i in range(6)]
        ids = [r["id"] for r in self.client.enqueue_many(jobs)]
        page = self.client.list_jobs(queue=self.queue, args={"user.id": 4})
        self.assertEqual([j["id"] for j in page["jobs"]], [ids[4]])
        self.assertFalse(page["capped"])
        page = self.client.list_jobs(queue=self.queue, args={"email": "u2@example.com", "user.id": 2})
        self.assertEqual([j["id"] for j in page["jobs"]], [ids[2]])
        self.assertEqual([j["id"] for j in self.client.list_jobs(queue=self.queue, tag="vip")["jobs"]], [ids[3]])
        self.assertEqual(len(self.client.list_jobs(queue=self.queue, created_after=before)["jobs"]), 6)
        self.assertEqual(self.client.list_jobs(queue=self.queue, created_before=before)["jobs"], [])
        page = self.client.list_jobs(queue=self.queue, args={"user.id": 5}, scan_max=2, limit=1)
        self.assertEqual((page["jobs"], page["capped"], page["next_after"]), ([], True, ids[1]))
        with self.assertRaisesRegex(ValueError, "created_after must be an aware datetime"):
            self.client.list_jobs(created_after=datetime.datetime(2026, 1, 1))

    def test_history_and_processes(self):
        job_id = self.client.enqueue("x", queue=self.queue)["id"]
        job = self.client.fetch(self.queue, worker="py-test")[0]
        self.client.complete(job_id, job["claim_token"])
        h = self.client.queue_history(since="1h", queue=self.queue)
        self.assertEqual(h["totals"].get("completed"), 1)
        self.assertEqual([q["name"] for q in h["queues"]], [self.queue])
        self.assertEqual(sum(p.get("completed", 0) for p in h["points"]), 1)
        self.assertIsInstance(self.client.processes(), list)
        e = self.refused(400, self.client.queue_history, since="forever")
        self.assertIn("since", e.error)

    def test_retry_cancel_delete(self):
        job_id = self.client.enqueue("x", queue=self.queue)["id"]
        self.assertEqual(self.client.cancel_job(job_id)["state"], "cancelled")
        self.assertEqual(self.client.retry_job(job_id)["state"], "available")
        self.assertEqual(self.client.delete_job(job_id)["id"], job_id)
        self.refused(404, self.client.get_job, job_id)

    def test_bulk(self):
        ids = [r["id"] for r in self.client.enqueue_many([{"kind": "x", "queue": self.queue}] * 3)]
        res = self.client.bulk("cancel", queue=self.queue, max=2)
        self.assertEqual((res["changed"], res.get("failed") or []), (2, []))
        self.assertNotEqual(res["next_after"], 0)
        res = self.client.bulk("cancel", queue=self.queue, after=res["next_after"])
        self.assertEqual(res["changed"], 1)
        self.assertEqual({self.client.get_job(i)["state"] for i in ids}, {"cancelled"})
        e = self.refused(400, self.client.bulk, "cancel")
        self.assertIn("a filter is required", e.error)

    def test_configure_queue(self):
        self.client.enqueue("x", queue=self.queue)
        q = self.client.configure_queue(self.queue, max_running=3, rate_limit=10, rate_period=1)
        self.assertEqual((q["name"], q["settings"]), (self.queue, {"max_running": 3, "rate_limit": 10, "rate_period": "1s"}))
        q = self.client.configure_queue(self.queue, max_running=0)
        self.assertEqual(q["settings"], {"rate_limit": 10, "rate_period": "1s"})
        e = self.refused(400, self.client.configure_queue, self.queue, overflow="sideways")
        self.assertIn("overflow", e.error)

    def test_pause_and_resume(self):
        self.client.enqueue("x", queue=self.queue)
        self.assertTrue(self.client.pause_queue(self.queue)["paused"])
        listed = {q["name"]: q for q in self.client.queues()}
        self.assertTrue(listed[self.queue]["paused"])
        self.assertEqual(listed[self.queue]["counts"].get("available"), 1)
        self.assertEqual(self.client.fetch(self.queue, worker="py-test"), [])
        self.assertFalse(self.client.resume_queue(self.queue)["paused"])
        self.assertEqual(len(self.client.fetch(self.queue, worker="py-test")), 1)


class ReportTest(ServerTest):

    def test_fail_then_retrying(self):
        job = self.claim()
        self.client.fail(job["id"], job["claim_token"], error="smtp: 421 try later", retry_in=3600)
        got = self.client.get_job(job["id"])
        self.assertEqual(got["state"], "retrying")
        self.assertEqual([(e["attempt"], e["message"]) for e in got["errors"]], [(1, "smtp: 421 try later")])
        self.assertEqual(self.client.retry_job(job["id"])["state"], "available")
        again = self.client.fetch(self.queue, worker="py-test")
        self.assertEqual((again[0]["id"], again[0]["attempt"]), (job["id"], 2))

    def test_fail_last_attempt_is_dead_and_discard_cancels(self):
        job = self.claim(max_attempts=1)
        self.assertEqual(self.client.fail(job["id"], job["claim_token"], error="boom")["state"], "dead")
        job = self.claim()
        self.assertEqual(self.client.fail(job["id"], job["claim_token"], error="bad args", discard=True)["state"],
                         "cancelled")

    def test_snooze_and_release_do_not_count_the_attempt(self):
        job = self.claim()
        self.assertEqual(self.client.snooze(job["id"], job["claim_token"], run_in=3600)["state"], "scheduled")
        self.assertEqual(self.client.get_job(job["id"])["attempt"], 0)
        job = self.claim()
        self.assertEqual(self.client.release(job["id"], job["claim_token"])["state"], "available")
        got = self.client.get_job(job["id"])
        self.assertEqual((got["attempt"], got.get("errors")), (0, None))

    def test_heartbeat(self):
        job = self.claim()
        self.assertEqual(self.client.heartbeat(job["id"], job["claim_token"], lease=60, progress=40),
                         {"held": True, "cancel_requested": False})
        self.assertEqual(self.client.get_job(job["id"])["progress"], 40)
        self.client.cancel_job(job["id"])
        self.assertEqual(self.client.heartbeat(job["id"], job["claim_token"]),
                         {"held": True, "cancel_requested": True})
        self.assertEqual(self.client.heartbeat(job["id"], job["claim_token"] + 1)["held"], False)

    def test_batched_reports(self):
        a, b, c = self.claim(), self.claim(), self.claim()
        results = self.client.report([
            {"id": a["id"], "claim_token": a["claim_token"], "outcome": "complete", "result": [1]},
            {"id": b["id"], "claim_token": b["claim_token"], "outcome": "fail", "error": "e", "retry_in": 60},
            {"id": c["id"], "claim_token": c["claim_token"] + 1, "outcome": "release"},
        ])
        self.assertEqual([(r["id"], r["recorded"], r.get("state"), r.get("status")) for r in results],
                         [(a["id"], True, "completed", None), (b["id"], True, "retrying", None),
                          (c["id"], False, None, 409)])
        self.assertEqual(self.client.get_job(c["id"])["state"], "running")


class ErrorTest(ServerTest):

    def test_not_found(self):
        e = self.refused(404, self.client.get_job, 999999999)
        self.assertEqual(e.error, "job 999999999 not found")
        self.assertEqual((e.method, e.path), ("GET", "/jobs/999999999"))
        self.assertEqual(str(e), "GET /jobs/999999999: 404 job 999999999 not found")
        self.refused(404, self.client.retry_job, 999999999)
        self.refused(404, self.client.complete, 999999999, 1)

    def test_bad_request_names_the_field(self):
        e = self.refused(400, self.client.enqueue, "x", run_at="yesterday")
        self.assertIn("run_at must be an RFC 3339 time", e.error)
        e = self.refused(400, self.client.enqueue_many, [{"kind": "x"}, {"kind": "x", "run_in": "soon"}])
        self.assertIn("jobs[1].run_in", e.error)
        e = self.refused(400, self.client.enqueue, "x", colour="red")
        self.assertIn("colour", e.error)
        e = self.refused(400, self.client.fetch, "no spaces here")
        self.assertIn("queue", e.error)
        self.assertEqual(self.client.list_jobs(queue="no-such-queue")["jobs"], [])

    def test_stale_claim_conflicts(self):
        job = self.claim()
        e = self.refused(409, self.client.complete, job["id"], job["claim_token"] + 1)
        self.assertIn("no longer the job's", e.error)

    def test_no_server(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        e = self.refused(None, Client("http://127.0.0.1:%d/api/v1" % port).health)
        self.assertIn("no answer from", e.error)

    def test_bad_arguments_fail_before_a_request(self):
        with self.assertRaises(ValueError):
            Client("127.0.0.1:8080")
        with self.assertRaises(ValueError):
            self.client.enqueue("", {})
        with self.assertRaises(ValueError):
            self.client.enqueue("x", run_at=datetime.datetime(2030, 1, 1))  # naive: which zone?


class _Connected(Interrupt):
    """An Interrupt that says when its fetch has connected."""

    def __init__(self):
        super().__init__()
        self.connected = threading.Event()

    def _attach(self, sock):
        ok = super()._attach(sock)
        self.connected.set()
        return ok


class InterruptTest(ServerTest):

    def test_interrupt_ends_a_waiting_fetch(self):
        interrupt = _Connected()
        got = []
        t = threading.Thread(target=lambda: got.append(self.client.fetch(self.queue, wait=30, interrupt=interrupt)))
        t.start()
        self.assertTrue(interrupt.connected.wait(10), "the fetch did not connect")
        start = time.monotonic()
        interrupt.interrupt()
        t.join(5)
        self.assertFalse(t.is_alive(), "fetch still waiting 5s after interrupt()")
        self.assertLess(time.monotonic() - start, 1.0)
        self.assertEqual(got, [[]])
        # Nothing was left claimed by the abandoned fetch.
        job_id = self.client.enqueue("x", queue=self.queue)["id"]
        self.assertEqual([j["id"] for j in self.client.fetch(self.queue)], [job_id])

    def test_interrupt_before_the_fetch(self):
        interrupt = Interrupt()
        interrupt.interrupt()
        self.client.enqueue("x", queue=self.queue)
        self.assertEqual(self.client.fetch(self.queue, wait=30, interrupt=interrupt), [])
        self.assertEqual(len(self.client.fetch(self.queue)), 1)


class TokenTest(ServerTest):

    server_args = ("--token", "s3cret,other")


    def test_refused_without_the_token(self):
        e = self.refused(401, Client(self.server.url, token="").enqueue, "x")
        self.assertIn("missing bearer token", e.error)
        e = self.refused(401, Client(self.server.url, token="wrong").enqueue, "x")
        self.assertEqual(e.error, "bearer token not accepted")
        self.assertTrue(Client(self.server.url, token="").health())  # health needs none

    def test_token_from_argument_or_environment(self):
        self.assertEqual(Client(self.server.url, token="other").enqueue("x", queue=self.queue)["state"], "available")
        with mock.patch.dict(os.environ, {"SORTIE_TOKEN": "s3cret"}):
            self.assertEqual(len(Client(self.server.url).list_jobs(queue=self.queue)["jobs"]), 1)
        with mock.patch.dict(os.environ, {"SORTIE_TOKEN": "s3cret"}):
            self.refused(401, Client(self.server.url, token="wrong").queues)


ADMIN, WORK, ENQUEUE = "admin-secret-0123456789", "work-secret-0123456789", "enqueue-secret-0123456789"


class ScopeTest(ServerTest):

    server_env = {"SORTIE_TOKENS": "ops admin %s; worker work %s; app enqueue %s" % (ADMIN, WORK, ENQUEUE)}

    def test_a_token_without_the_scope_is_refused(self):
        admin, worker = Client(self.server.url, token=ADMIN), Client(self.server.url, token=WORK)
        job_id = admin.enqueue("x", queue=self.queue)["id"]
        self.assertEqual([j["id"] for j in worker.fetch(self.queue)], [job_id])
        e = self.refused(403, worker.enqueue, "x", queue=self.queue)
        self.assertIn("enqueue", e.error)
        self.refused(403, worker.delete_job, job_id)

    def test_a_worker_without_the_work_scope_stops_with_the_error(self):
        worker = Worker(Client(self.server.url, token=ENQUEUE), queue=self.queue, handlers={"x": lambda job: None},
                        logger=support.quiet_logger())
        e = self.refused(403, worker.run)  # on the main thread: through the signal-handling path
        self.assertIn("work", e.error)


if __name__ == "__main__":
    unittest.main()
