"""Durations as the API writes them, to seconds and back."""

import datetime
import unittest

import support  # noqa: F401 (puts the package on sys.path)
from sortie_client import format_duration, parse_duration


class DurationTest(unittest.TestCase):

    def test_format(self):
        for value, want in [(0, "0s"), (90, "90s"), (1.0, "1s"), (0.25, "250ms"), (1.5, "1500ms"),
                            (datetime.timedelta(minutes=2), "120s"), ("1h30m", "1h30m")]:
            self.assertEqual(format_duration(value), want, value)

    def test_format_refuses(self):
        for value, error in [(-1, ValueError), (None, TypeError), (True, TypeError), ([1], TypeError)]:
            with self.assertRaises(error, msg=repr(value)):
                format_duration(value)

    def test_parse_what_go_writes(self):
        for text, want in [("0s", 0), ("0", 0), ("90s", 90), ("1m30s", 90), ("1h0m0s", 3600), ("250ms", 0.25),
                           ("1.5s", 1.5), ("2\u00b5s", 2e-6), ("3us", 3e-6), ("7ns", 7e-9), ("-1s", -1),
                           ("1h2m3.5s", 3723.5)]:
            self.assertAlmostEqual(parse_duration(text), want, msg=text)

    def test_parse_refuses(self):
        for text in ["", "s", "1", "1x", "1s2", "1.2.3s", " 1s", "1 s"]:
            with self.assertRaises(ValueError, msg=text):
                parse_duration(text)


if __name__ == "__main__":
    unittest.main()
