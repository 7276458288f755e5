"""The ledger: published, measured training runs, one bundled YAML file per source.

``load_ledger()`` reads every source, ``load_ledger("sc21")`` one; rows come back validated
(``dlsched.ledger.schema.LedgerRow``) in file order. Sources: ``SOURCES``; what each row holds
and which published rows were left out: docs/validation.md and each file's header.
"""

from __future__ import annotations

from importlib import resources
from typing import get_args

import yaml
from pydantic import ValidationError

from dlsched.errors import ConfigError
from dlsched.ledger.schema import LedgerRow, Source

SOURCES: tuple[str, ...] = get_args(Source)


def load_ledger(source: str | None = None) -> list[LedgerRow]:
    """The rows of ``source`` (one of ``SOURCES``), or of every source when None. A file
    whose rows break the schema, repeat an id or sit under another source raises
    ``ConfigError`` naming the file and the row."""
    if source is not None and source not in SOURCES:
        raise ConfigError(f"source: {source!r} is not a ledger source; "
                          f"accepted: {', '.join(SOURCES)}")
    rows: list[LedgerRow] = []
    seen: set[str] = set()
    for name in SOURCES if source is None else (source,):
        for row in _read_source(name):
            if row.id in seen:
                raise ConfigError(f"ledger/data/{name}.yaml: id {row.id!r} appears twice")
            seen.add(row.id)
            rows.append(row)
    return rows


def _read_source(name: str) -> list[LedgerRow]:
    path = f"ledger/data/{name}.yaml"
    raw = yaml.safe_load(resources.files("dlsched").joinpath(path).read_text())
    if not isinstance(raw, list):
        raise ConfigError(f"{path}: expected a list of rows")
    rows = []
    for index, entry in enumerate(raw):
        try:
            row = LedgerRow.model_validate(entry)
        except ValidationError as error:
            label = entry.get("id", f"row {index}") if isinstance(entry, dict) else index
            raise ConfigError(f"{path}: {label}: {error}") from error
        if row.source != name:
            raise ConfigError(f"{path}: {row.id}: source {row.source!r} is not {name!r}")
        rows.append(row)
    return rows
