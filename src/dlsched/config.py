"""Load YAML/JSON documents and validate them against pydantic schemas with readable errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from dlsched.errors import ConfigError
from dlsched.validation import load_document_safely

SchemaT = TypeVar("SchemaT", bound=BaseModel)


def load_document(path: str | Path) -> Any:
    """Read a YAML (``.yaml``/``.yml``) or JSON file into plain Python data.

    Guarded by ``dlsched.validation``: the file must be UTF-8 text of at most
    ``MAX_FILE_BYTES``, nested at most ``MAX_NESTING_DEPTH`` deep, without YAML alias bombs or
    NaN/infinite numbers; every refusal is a ConfigError naming the file.
    """
    return load_document_safely(path)


def _location(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "<root>"


def validate(schema: type[SchemaT], data: Any, source: str = "input") -> SchemaT:
    """Validate ``data`` against ``schema``; raise a one-line ConfigError naming each bad
    field (``invalid SOURCE: field: message (got value); field: ...``)."""
    try:
        return schema.model_validate(data)
    except ValidationError as error:
        parts = []
        for item in error.errors():
            message = " ".join(item["msg"].removeprefix("Value error, ").split())
            value = item.get("input")
            shown = "" if isinstance(value, dict) else f" (got {value!r})"
            where = f"{_location(item['loc'])}: " if item["loc"] else ""
            parts.append(f"{where}{message}{shown}")
        raise ConfigError(f"invalid {source}: " + "; ".join(parts)) from None
