"""A client of sortie's HTTP API in Python, standard library only.

Client calls the API of `sortie serve`: enqueue, inspect and administer
jobs and queues, and fetch, heartbeat and report jobs as a remote worker.

    from sortie_client import Client

    client = Client("http://127.0.0.1:8080/api/v1")
    client.enqueue("word.count", {"text": "to be or not"}, queue="text")
"""

from .client import DEFAULT_URL, Client, Interrupt, SortieError
from .durations import format_duration, parse_duration

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_URL",
    "Client",
    "Interrupt",
    "SortieError",
    "format_duration",
    "parse_duration",
]
