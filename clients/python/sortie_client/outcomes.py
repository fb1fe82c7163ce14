"""Outcomes a handler raises to end its job otherwise than complete or fail.

A handler that returns completes its job with the returned value as the
result; one that raises any other exception fails it, and the server's retry
policy for the kind decides when it runs again. These exceptions say
something else.
"""

__all__ = ["Cancel", "Fail", "Release", "Snooze"]


class Cancel(Exception):
    """Cancels the job for good, with this message: it can never succeed
    (bad arguments, a deleted account) and is not retried."""


class Fail(Exception):
    """Fails the job with this message, to run again after retry_in seconds
    (default: the kind's retry policy on the server)."""

    def __init__(self, message, retry_in=None):
        super().__init__(message)
        self.retry_in = retry_in


class Snooze(Exception):
    """Runs the job again after run_in seconds without counting the attempt
    (waiting for something outside, such as a rate limit)."""

    def __init__(self, run_in):
        super().__init__("snoozed for %ss" % (run_in,))
        self.run_in = run_in


class Release(Exception):
    """Puts the job back at once without counting the attempt, for a handler
    that stops early because job.should_stop() says the worker is stopping."""
