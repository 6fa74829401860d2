"""Which errors are the user's: bad input is a `ConfigError`, anything else a bug.

A `ConfigError` is a value the user gave (a config key, a command-line flag, a file they pointed at) that
cannot work; its message names the value and what to do instead, and the commands print it as one line and
exit 2 (runners/cli.py). An `UnsupportedConfig` is the narrower case of a configuration that is valid but that
these models or this backend cannot run: a comparison reports its candidate as unsupported, a study records
the trial as such, and both go on. Any other exception, a plain `ValueError` included, is a bug: it keeps its
traceback and the command exits 1.

Both subclass `ValueError`, so code that catches `ValueError` (and tests that expect one) still does.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A value the user gave cannot work; the message names it and the allowed values (one line, exit 2)."""


class UnsupportedConfig(ConfigError):
    """A valid configuration these models or this backend cannot run (the candidate is unsupported, not broken)."""
