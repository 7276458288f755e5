"""The results store: one SQLite file, one row per scenario, committed as results arrive.

Table ``scenarios``: ``key`` (scenario identity), ``idx`` (position in the grid), one column per
parameter and per metric (SI units: seconds, bytes), ``status`` ('ok' or 'error', indexed),
``error`` (exception text), ``wall_s`` (seconds the evaluation took on its worker),
``dlsched_version`` and ``finished_at`` (UTC, ISO 8601). Columns are typed: a parameter by its
scenario schema (INTEGER, REAL, TEXT), a metric NUMERIC. Table ``sweep``: what the file holds
(name, domain, grid). The file's layout version is SQLite's ``user_version``
(``SCHEMA_VERSION``); a file of another version is refused in one line, never altered.
Only the process driving the sweep writes; WAL journaling makes every committed row survive a
crash or ``kill -9`` of any process.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dlsched.errors import ConfigError

IDENTITY = ("key", "idx")
BOOKKEEPING = ("status", "error", "wall_s", "dlsched_version", "finished_at")
TABLE = "scenarios"
SCHEMA_VERSION = 2
"""Layout of a results file (``PRAGMA user_version``): 2 = typed columns and the status index;
files written before (version 0: untyped columns) are refused."""
COLUMN_TYPES = {"key": "TEXT", "idx": "INTEGER", "status": "TEXT", "error": "TEXT",
                "wall_s": "REAL", "dlsched_version": "TEXT", "finished_at": "TEXT"}
SQL_TYPES = ("INTEGER", "REAL", "TEXT", "NUMERIC")


def _meta(db: sqlite3.Connection, path: str | Path) -> dict[str, Any]:
    with _damaged_as_config_error(path):
        rows = db.execute("SELECT name, value FROM sweep").fetchall()
    try:
        return {name: json.loads(value) for name, value in rows}
    except (TypeError, ValueError):
        raise ConfigError(f"results: {str(path)!r} is damaged: its 'sweep' table is not JSON; "
                          "accepted: a results file written by 'dlsched sweep'") from None


def scenario_key(domain: str, params: dict[str, Any]) -> str:
    """Stable identity of a scenario: SHA-256 (hex, 20 chars) of domain and sorted parameters."""
    text = json.dumps([domain, sorted(params.items())], separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _open(path: str | Path) -> sqlite3.Connection:
    """An existing results file, opened for reading after checking that it is intact."""
    if not Path(path).is_file():
        raise ConfigError(f"results: file {str(path)!r} does not exist")
    db = sqlite3.connect(path)
    try:
        with _damaged_as_config_error(path):
            _check_intact(db)
            _check_version(db, path)
    except ConfigError:
        db.close()
        raise
    return db


@contextmanager
def _damaged_as_config_error(path: str | Path) -> Iterator[None]:
    """Turn SQLite's errors about a damaged or foreign file into one ConfigError naming it."""
    try:
        yield
    except sqlite3.DatabaseError as error:
        reason = " ".join(str(error).split(" with text")[0].split())[:120]
        raise ConfigError(f"results: {str(path)!r} is damaged or not a dlsched sweep file "
                          f"(SQLite: {reason!r}); accepted: a results file written by "
                          "'dlsched sweep' (use --overwrite or another --db to start over)"
                          ) from None


def _check_intact(db: sqlite3.Connection) -> None:
    """Raise sqlite3.DatabaseError when the file's pages are damaged (PRAGMA quick_check)."""
    problems = [row[0] for row in db.execute("PRAGMA quick_check(1)")]
    if problems != ["ok"]:
        raise sqlite3.DatabaseError(problems[0])


def _check_version(db: sqlite3.Connection, path: str | Path) -> None:
    """ConfigError unless the file is empty or of this ``SCHEMA_VERSION``."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    tables = db.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
    if tables and version != SCHEMA_VERSION:
        raise ConfigError(f"results: {str(path)!r} has results layout version {version}, this "
                          f"dlsched reads version {SCHEMA_VERSION}; accepted: a file written by "
                          "this version (use --overwrite or another --db to start over)")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class ResultStore:
    """A sweep's results file (``":memory:"`` for a throw-away store)."""

    def __init__(self, path: str | Path, columns: Sequence[str] | Mapping[str, str],
                 meta: dict[str, Any] | None = None) -> None:
        """Open or create the store with parameter+metric ``columns`` (a mapping gives each its
        SQL type, one of ``SQL_TYPES``; names alone are NUMERIC; bookkeeping columns are
        added); columns missing from an existing file are added to it. An existing file is
        checked page by page and for its layout version first: a damaged one or one of another
        version is a ConfigError naming it."""
        self.path = str(path)
        reserved = IDENTITY + BOOKKEEPING
        types = dict(columns) if isinstance(columns, Mapping) else dict.fromkeys(columns,
                                                                                  "NUMERIC")
        self.types = COLUMN_TYPES | {c: t for c, t in types.items() if c not in reserved}
        self.columns = [*IDENTITY, *(c for c in types if c not in reserved), *BOOKKEEPING]
        self._db = sqlite3.connect(self.path)
        try:
            with _damaged_as_config_error(self.path):
                self._create(meta)
        except ConfigError:
            self._db.close()
            raise
        self._insert = (f"INSERT OR REPLACE INTO {TABLE} ("
                        + ", ".join(map(_quote, self.columns)) + ") VALUES ("
                        + ", ".join("?" * len(self.columns)) + ")")

    def _create(self, meta: dict[str, Any] | None) -> None:
        if self.path != ":memory:":
            _check_intact(self._db)
        _check_version(self._db, self.path)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        unknown = {t for t in self.types.values() if t not in SQL_TYPES}
        if unknown:
            raise ValueError(f"column types {sorted(unknown)}; accepted: {SQL_TYPES}")
        with self._db:
            self._db.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (key TEXT PRIMARY KEY)")
            self._db.execute("CREATE TABLE IF NOT EXISTS sweep (name TEXT PRIMARY KEY, value TEXT)")
            present = {row[1] for row in self._db.execute(f"PRAGMA table_info({TABLE})")}
            for column in self.columns:
                if column not in present:
                    self._db.execute(f"ALTER TABLE {TABLE} ADD COLUMN {_quote(column)} "
                                     f"{self.types[column]}")
            self._db.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_status ON {TABLE} (status)")
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            for name, value in (meta or {}).items():
                self._db.execute("INSERT OR REPLACE INTO sweep VALUES (?, ?)",
                                 (name, json.dumps(value)))

    def _select(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        with _damaged_as_config_error(self.path):
            return self._db.execute(query, params).fetchall()

    def meta(self) -> dict[str, Any]:
        """The ``sweep`` table as a dict (name -> decoded JSON value)."""
        return _meta(self._db, self.path)

    def keys(self, status: str | None = None) -> set[str]:
        """Keys of the stored scenarios (only those with ``status`` when given)."""
        if status is None:
            return {k for (k,) in self._select(f"SELECT key FROM {TABLE}")}
        return {k for (k,) in self._select(f"SELECT key FROM {TABLE} WHERE status = ?", status)}

    def results(self, column: str) -> dict[str, tuple[Any, str | None]]:
        """``{key: (value of column, error text)}`` for every stored scenario."""
        return {key: (value, error) for key, value, error in self._select(
            f"SELECT key, {_quote(column)}, error FROM {TABLE}")}

    def stored(self, keys: Sequence[str], status: str | None = None) -> set[str]:
        """Those of ``keys`` that have a row (with ``status`` when given): one query per call,
        so a resumed sweep checks its scenarios batch by batch instead of loading every key."""
        if not keys:
            return set()
        marks = ", ".join("?" * len(keys))
        if status is None:
            return {k for (k,) in self._select(
                f"SELECT key FROM {TABLE} WHERE key IN ({marks})", *keys)}
        return {k for (k,) in self._select(
            f"SELECT key FROM {TABLE} WHERE status = ? AND key IN ({marks})", status, *keys)}

    def count(self, status: str | None = None) -> int:
        """Number of stored scenarios (only those with ``status`` when given)."""
        if status is None:
            return self._select(f"SELECT COUNT(*) FROM {TABLE}")[0][0]
        return self._select(f"SELECT COUNT(*) FROM {TABLE} WHERE status = ?", status)[0][0]

    def write(self, rows: Iterable[dict[str, Any]]) -> None:
        """Insert (or replace) rows and commit them in one transaction."""
        with self._db:
            self._db.executemany(self._insert,
                                 [tuple(row.get(c) for c in self.columns) for row in rows])

    def close(self) -> None:
        """Close the connection (everything written is already committed)."""
        self._db.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_rows(path: str | Path, where: str = "") -> list[dict[str, Any]]:
    """Every row of a results file in grid order (``where``: a filter as ``sweep.filters``
    reads it, e.g. ``status = ok AND size >= 1e6``; its values are bound, never pasted)."""
    from dlsched.sweep.filters import parse_where

    db = _open(path)
    try:
        db.row_factory = sqlite3.Row
        try:
            columns = [row[1] for row in db.execute(f"PRAGMA table_info({TABLE})")]
            condition, values = parse_where(where, columns)
            query = f"SELECT * FROM {TABLE}" + (f" WHERE {condition}" if condition else "")
            return [dict(row) for row in db.execute(f"{query} ORDER BY idx, key", values)]
        except sqlite3.OperationalError as error:
            raise ConfigError(f"results: {path} is not a dlsched sweep file or the query is "
                              f"invalid ({error})") from None
    finally:
        db.close()


def read_meta(path: str | Path) -> dict[str, Any]:
    """The ``sweep`` table of a results file (domain, grid, name)."""
    db = _open(path)
    try:
        return _meta(db, path)
    finally:
        db.close()
