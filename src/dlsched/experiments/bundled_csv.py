"""The bundled measurement tables of the reproductions (``experiments/data/*.csv``): read from
the package, parsed row by row with a ConfigError that names the table and the line."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from importlib import resources
from typing import TypeVar

from dlsched.errors import ConfigError

T = TypeVar("T")


def bundled_text(name: str) -> str:
    """The text of ``experiments/data/<name>`` (UTF-8)."""
    return resources.files("dlsched.experiments").joinpath("data", name).read_text("utf-8")


def parse_csv(text_: str, header: tuple[str, ...], what: str,
              parse: Callable[[list[str]], T],
              errors: tuple[type[Exception], ...] = (ValueError,)) -> list[T]:
    """Each row of the CSV ``text_`` after its header, which must be ``header``, made by
    ``parse`` from its cells; a header that differs, or a row whose ``parse`` raises one of
    ``errors``, is a ConfigError naming ``what`` (the table) and the line (from 1, the header's)."""
    reader = csv.reader(io.StringIO(text_))
    found = tuple(next(reader, ()))
    if found != header:
        raise ConfigError(f"{what}: header {found!r}; accepted: {header!r}")
    rows = []
    for line, cells in enumerate(reader, start=2):
        try:
            rows.append(parse(cells))
        except errors as failure:
            raise ConfigError(f"{what}: line {line}: {cells!r} ({failure})") from None
    return rows
