"""job.step against a real `sortie serve`: each step runs once per job, a
later attempt gets the recorded results back, and a stale claim records
nothing."""

import threading
import unittest

import support
from sortie_client import Client, Fail, Job, SortieError, StepReused, Worker

_quiet = support.quiet_logger()


def setUpModule():
    global server
    server = support.Server().start()


def tearDownModule():
    server.stop()


class StepsTest(unittest.TestCase):

    def setUp(self):
        self.client = Client(server.url, token="")
        self.queue = support.fresh_queue("steps")

    def run_worker(self, handlers, max_jobs):
        """Runs a Worker on the test's queue until it has run max_jobs jobs."""
        worker = Worker(self.client, queue=self.queue, handlers=handlers, logger=_quiet, wait=5, max_jobs=max_jobs)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        thread.join(30)
        self.assertFalse(thread.is_alive(), "worker still running after max_jobs")

    def test_steps_run_once_per_job(self):
        calls = {"charge": 0, "receipt": 0, "ledger": 0, "handler": 0}

        def run(name, value):
            def fn():
                calls[name] += 1
                return value
            return fn

        def order(job):
            calls["handler"] += 1
            charge = job.step("charge", run("charge", {"charge_id": "ch_%d" % calls["handler"]}))
            receipt = job.step("receipt", run("receipt", ["sent", calls["handler"]]))
            if job.attempt == 1:
                raise Fail("the ledger is down", retry_in=0)
            ledger = job.step("ledger", run("ledger", None))
            return {"charge": charge, "receipt": receipt, "ledger": ledger}

        job_id = self.client.enqueue("order", {"id": 7}, queue=self.queue)["id"]
        self.run_worker({"order": order}, max_jobs=2)
        done = self.client.get_job(job_id)
        self.assertEqual(done["state"], "completed")
        self.assertEqual(done["result"], {"charge": {"charge_id": "ch_1"}, "receipt": ["sent", 1], "ledger": None})
        self.assertEqual(calls, {"charge": 1, "receipt": 1, "ledger": 1, "handler": 2})
        steps = self.client.job_steps(job_id)
        self.assertEqual([(s["name"], s["kind"], s["attempt"]) for s in steps],
                         [("charge", "step", 1), ("receipt", "step", 1), ("ledger", "step", 2)])
        self.assertEqual(steps[0]["result"], {"charge_id": "ch_1"})
        self.assertEqual([s["name"] for s in done["steps"]], ["charge", "receipt", "ledger"])

    def test_step_mistakes(self):
        seen = {}

        def mistakes(job):
            job.step("once", lambda: 1)
            try:
                job.step("once", lambda: 2)
            except StepReused as e:
                seen["reused"] = str(e)
            try:
                job.step("not-json", lambda: object())
            except TypeError as e:
                seen["not json"] = str(e)

            def boom():
                raise RuntimeError("card declined")
            try:
                job.step("charge", boom)
            except RuntimeError:
                seen["raised"] = True
            return job.step("charge", lambda: "charged on retry")

        job_id = self.client.enqueue("mistakes", queue=self.queue)["id"]
        self.run_worker({"mistakes": mistakes}, max_jobs=1)
        done = self.client.get_job(job_id)
        self.assertEqual((done["state"], done["result"]), ("completed", "charged on retry"))
        self.assertIn("used already", seen["reused"])
        self.assertIn("not JSON serializable", seen["not json"])
        self.assertTrue(seen["raised"])
        self.assertEqual([s["name"] for s in self.client.job_steps(job_id)], ["once", "charge"])

    def test_stale_claim_records_nothing(self):
        job_id = self.client.enqueue("late", queue=self.queue)["id"]
        data = self.client.fetch(self.queue, lease=60)[0]
        self.client.complete(job_id, data["claim_token"])
        job = Job(data, threading.Event(), self.client)
        with self.assertRaises(SortieError) as caught:
            job.step("too-late", lambda: 1)
        self.assertEqual(caught.exception.status, 409)
        self.assertTrue(job.should_stop())
        self.assertEqual(self.client.job_steps(job_id), [])
        with self.assertRaises(SortieError) as caught:
            self.client.job_steps(987654321)
        self.assertEqual(caught.exception.status, 404)


if __name__ == "__main__":
    unittest.main()
