"""A client of sortie's HTTP API and a worker that runs its jobs in Python.

Client calls the API of `sortie serve`: enqueue, inspect and administer
jobs and queues, and fetch, heartbeat and report jobs as a remote worker.
Worker runs the jobs of a queue with a handler per kind and stops cleanly
on SIGTERM; a handler runs its work in durable steps with job.step(name,
fn), each run once per job. Standard library only.

    from sortie_client import Client, Worker

    client = Client("http://127.0.0.1:8080/api/v1")
    client.enqueue("word.count", {"text": "to be or not"}, queue="text")

    worker = Worker(client, queue="text")

    @worker.handle("word.count")
    def word_count(job):
        return {"words": len(job.args["text"].split())}

    worker.run()  # until SIGTERM or SIGINT
"""

from .client import DEFAULT_URL, Client, Interrupt, SortieError
from .durations import format_duration, parse_duration
from .job import Job, StepReused
from .outcomes import Cancel, Fail, Release, Snooze
from .worker import Worker

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_URL",
    "Cancel",
    "Client",
    "Fail",
    "Interrupt",
    "Job",
    "Release",
    "Snooze",
    "SortieError",
    "StepReused",
    "Worker",
    "format_duration",
    "parse_duration",
]
