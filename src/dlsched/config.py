"""Load YAML/JSON documents and validate them against pydantic schemas with readable errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from dlsched.errors import ConfigError

SchemaT = TypeVar("SchemaT", bound=BaseModel)


def load_document(path: str | Path) -> Any:
    """Read a YAML (``.yaml``/``.yml``) or JSON file into plain Python data."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"file {str(path)!r} does not exist")
    text = path.read_text()
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text)
        return yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: not valid {path.suffix.lstrip('.').upper() or 'YAML'}: "
                          f"{error}") from error


def _location(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "<root>"


def validate(schema: type[SchemaT], data: Any, source: str = "input") -> SchemaT:
    """Validate ``data`` against ``schema``; raise ConfigError naming each bad field."""
    try:
        return schema.model_validate(data)
    except ValidationError as error:
        lines = []
        for item in error.errors():
            message = item["msg"].removeprefix("Value error, ")
            value = item.get("input")
            shown = "" if isinstance(value, dict) else f" (got {value!r})"
            lines.append(f"  {_location(item['loc'])}: {message}{shown}")
        raise ConfigError(f"invalid {source}:\n" + "\n".join(lines)) from None
