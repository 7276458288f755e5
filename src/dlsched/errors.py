"""Errors raised at dlsched's edges for bad input; the CLI turns them into exit code 2."""

from __future__ import annotations


class ConfigError(ValueError):
    """Invalid user input: the message names the field, the value and what is accepted."""
