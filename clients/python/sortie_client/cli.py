"""The worker's command line: python3 -m sortie_client --handlers MODULE ...

It imports the handlers (a dict from kind to function) from a module and
runs a Worker on them until SIGTERM or SIGINT, logging each job's outcome.
A program with its own handlers calls main(handlers=...) instead.
"""

import argparse
import importlib
import logging
import sys

from .client import Client, SortieError
from .worker import Worker

__all__ = ["main"]

_DESCRIPTION = """Runs sortie jobs of one queue through the HTTP API of `sortie serve`:
long-polling fetches, a handler per kind, heartbeats, batched reports.
SIGTERM or SIGINT stops it: no more fetches, the running job gets --grace
seconds to finish, then it is released for another worker."""


def main(argv=None, handlers=None):
    """Runs the worker command line on argv (default sys.argv[1:]) and
    returns its exit status: 0 once stopped, 1 when the server refused the
    worker (a bad token, a bad queue name), 2 for a usage error. handlers,
    when given, are used instead of --handlers."""
    args = _parser(need_handlers=handlers is None).parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    if handlers is None:
        try:
            handlers = load_handlers(args.handlers)
        except (ImportError, AttributeError, TypeError) as e:
            print("sortie_client: --handlers %s: %s" % (args.handlers, e), file=sys.stderr)
            return 2
    try:
        client = Client(args.url, token=args.token)
        worker = Worker(client, queue=args.queue, handlers=handlers, batch=args.batch, lease=args.lease,
                        wait=args.wait, grace=args.grace, max_jobs=args.max_jobs, name=args.name)
    except ValueError as e:
        print("sortie_client: %s" % e, file=sys.stderr)
        return 2
    try:
        worker.run()
    except SortieError as e:
        print("sortie_client: the server refused the worker: %s" % e, file=sys.stderr)
        return 1
    return 0


def load_handlers(spec):
    """Returns the handlers named by spec, "MODULE" or "MODULE:NAME": the
    module's dict NAME (default HANDLERS) from kind to function."""
    module_name, _, attr = spec.partition(":")
    handlers = getattr(importlib.import_module(module_name), attr or "HANDLERS")
    if not isinstance(handlers, dict) or not handlers:
        raise TypeError("%s is not a non-empty dict from kind to function" % (attr or "HANDLERS"))
    return handlers


def _parser(need_handlers):
    p = argparse.ArgumentParser(prog="python3 -m sortie_client", description=_DESCRIPTION)
    if need_handlers:
        p.add_argument("--handlers", required=True, metavar="MODULE[:NAME]",
                       help="the module whose dict NAME (default HANDLERS) maps each kind to its handler")
    p.add_argument("--url", help="the API (default $SORTIE_URL, else http://127.0.0.1:8080/api/v1)")
    p.add_argument("--token", help="the bearer token (default $SORTIE_TOKEN)")
    p.add_argument("--queue", default="default", help="the queue to work (default %(default)s)")
    p.add_argument("--batch", type=int, default=1, help="jobs claimed per fetch, run in turn (default %(default)s)")
    p.add_argument("--lease", type=float, default=30.0, help="seconds a claim holds between heartbeats (default %(default)s)")
    p.add_argument("--wait", type=float, default=20.0, help="seconds a fetch long-polls, at most 60 (default %(default)s)")
    p.add_argument("--grace", type=float, default=10.0,
                   help="seconds the running job may take to finish after SIGTERM before it is released (default %(default)s)")
    p.add_argument("--max-jobs", type=int, default=0, help="stop after this many jobs (default 0: until SIGTERM)")
    p.add_argument("--name", help="the worker's name on its jobs (default py-HOST-PID)")
    p.add_argument("--quiet", action="store_true", help="log warnings and errors only, not each job")
    return p
