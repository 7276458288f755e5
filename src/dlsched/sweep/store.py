"""The results store: one SQLite file, one row per scenario, committed as results arrive.

Table ``scenarios``: ``key`` (scenario identity), ``idx`` (position in the grid), one column per
parameter and per metric (SI units: seconds, bytes), ``status`` ('ok' or 'error'), ``error``
(exception text), ``wall_s`` (seconds the evaluation took on its worker), ``dlsched_version``
and ``finished_at`` (UTC, ISO 8601). Table ``sweep``: what the file holds (name, domain, grid).
Only the process driving the sweep writes; WAL journaling makes every committed row survive a
crash or ``kill -9`` of any process.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from dlsched.errors import ConfigError

IDENTITY = ("key", "idx")
BOOKKEEPING = ("status", "error", "wall_s", "dlsched_version", "finished_at")
TABLE = "scenarios"


def _meta(db: sqlite3.Connection) -> dict[str, Any]:
    return {name: json.loads(value) for name, value in db.execute("SELECT name, value FROM sweep")}


def _open(path: str | Path) -> sqlite3.Connection:
    """An existing results file, opened for reading."""
    if not Path(path).is_file():
        raise ConfigError(f"results: file {str(path)!r} does not exist")
    return sqlite3.connect(path)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class ResultStore:
    """A sweep's results file (``":memory:"`` for a throw-away store)."""

    def __init__(self, path: str | Path, columns: Sequence[str],
                 meta: dict[str, Any] | None = None) -> None:
        """Open or create the store with parameter+metric ``columns`` (bookkeeping columns are
        added); columns missing from an existing file are added to it."""
        self.path = str(path)
        reserved = IDENTITY + BOOKKEEPING
        self.columns = [*IDENTITY, *(c for c in columns if c not in reserved), *BOOKKEEPING]
        self._db = sqlite3.connect(self.path)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        with self._db:
            self._db.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (key TEXT PRIMARY KEY)")
            self._db.execute("CREATE TABLE IF NOT EXISTS sweep (name TEXT PRIMARY KEY, value TEXT)")
            present = {row[1] for row in self._db.execute(f"PRAGMA table_info({TABLE})")}
            for column in self.columns:
                if column not in present:
                    self._db.execute(f"ALTER TABLE {TABLE} ADD COLUMN {_quote(column)}")
            for name, value in (meta or {}).items():
                self._db.execute("INSERT OR REPLACE INTO sweep VALUES (?, ?)",
                                 (name, json.dumps(value)))
        self._insert = (f"INSERT OR REPLACE INTO {TABLE} ("
                        + ", ".join(map(_quote, self.columns)) + ") VALUES ("
                        + ", ".join("?" * len(self.columns)) + ")")

    def meta(self) -> dict[str, Any]:
        """The ``sweep`` table as a dict (name -> decoded JSON value)."""
        return _meta(self._db)

    def keys(self, status: str | None = None) -> set[str]:
        """Keys of the stored scenarios (only those with ``status`` when given)."""
        if status is None:
            return {k for (k,) in self._db.execute(f"SELECT key FROM {TABLE}")}
        return {k for (k,) in self._db.execute(f"SELECT key FROM {TABLE} WHERE status = ?",
                                               (status,))}

    def results(self, column: str) -> dict[str, tuple[Any, str | None]]:
        """``{key: (value of column, error text)}`` for every stored scenario."""
        return {key: (value, error) for key, value, error in self._db.execute(
            f"SELECT key, {_quote(column)}, error FROM {TABLE}")}

    def count(self) -> int:
        """Number of stored scenarios."""
        return self._db.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone()[0]

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


def read_rows(path: str | Path, where: str = "", order: str = "idx, key") -> list[dict[str, Any]]:
    """Every row of a results file (``where``: an SQL condition), in grid order by default."""
    db = _open(path)
    try:
        db.row_factory = sqlite3.Row
        query = f"SELECT * FROM {TABLE}" + (f" WHERE {where}" if where else "")
        try:
            return [dict(row) for row in db.execute(f"{query} ORDER BY {order}")]
        except sqlite3.DatabaseError as error:
            raise ConfigError(f"results: {path} is not a dlsched sweep file or the query is "
                              f"invalid ({error})") from None
    finally:
        db.close()


def read_meta(path: str | Path) -> dict[str, Any]:
    """The ``sweep`` table of a results file (domain, grid, name)."""
    db = _open(path)
    try:
        return _meta(db)
    except sqlite3.DatabaseError as error:
        raise ConfigError(f"results: {path} is not a dlsched sweep file ({error})") from None
    finally:
        db.close()
