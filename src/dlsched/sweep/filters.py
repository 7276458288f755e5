"""``sweep export --where``: a restricted row filter, parsed here and never pasted into SQL.

A filter is one or more clauses joined by ``AND`` (any case); a clause is ``COLUMN OP VALUE``
with ``OP`` one of ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=`` or ``like`` (SQL's pattern
match: ``%`` any text, ``_`` one character). ``COLUMN`` must be a column of the results table;
``VALUE`` is a number, or text (quoted with ``'`` or ``"`` unless it is made of letters,
digits and ``_ . + - % : /``). The SQL
built from it names only checked columns (quoted) and fixed operators, and binds every value
as a parameter, so no input can change the query's shape.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from dlsched.errors import ConfigError

OPERATORS = ("=", "!=", "<=", ">=", "<", ">", "like")
_CLAUSE = re.compile(r"""\s*(?P<column>[A-Za-z_][A-Za-z0-9_]*)\s*
                         (?P<op><=|>=|!=|=|<|>|(?i:like)(?=[\s'"]))\s*
                         (?P<value>'[^']*'|"[^"]*"|[\w.+\-%:/]+)\s*""", re.VERBOSE)
_AND = re.compile(r"(?i:and)\s+")
ACCEPTED = ("COLUMN OP VALUE clauses joined by AND, OP one of " + ", ".join(OPERATORS)
            + ", e.g. \"status = ok AND size >= 1000000\"")


def _value(text: str) -> Any:
    """A quoted token as its text, a bare one as an int, a float or else its text."""
    if text[:1] in "'\"":
        return text[1:-1]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def parse_where(text: str, columns: Collection[str]) -> tuple[str, list[Any]]:
    """``(sql condition with ? placeholders, values)`` for a filter over ``columns``;
    ConfigError naming ``--where`` for anything else (an empty filter keeps every row)."""
    if not text.strip():
        return "", []
    parts: list[str] = []
    values: list[Any] = []
    position = 0
    while True:
        match = _CLAUSE.match(text, position)
        if match is None:
            raise ConfigError(f"--where: cannot read {text[position:]!r}; accepted: {ACCEPTED}")
        column, op = match["column"], match["op"].lower()
        if column not in columns:
            raise ConfigError(f"--where: unknown column {column!r}; accepted: "
                              + ", ".join(sorted(columns)))
        quoted = column.replace('"', '""')
        parts.append(f'"{quoted}" {op.upper()} ?')
        values.append(_value(match["value"]))
        position = match.end()
        if position == len(text):
            return " AND ".join(parts), values
        joined = _AND.match(text, position)
        if joined is None:
            raise ConfigError(f"--where: expected AND or the end at {text[position:]!r}; "
                              f"accepted: {ACCEPTED}")
        position = joined.end()
