"""Load YAML/JSON documents and validate them against pydantic schemas with readable errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from dlsched.errors import ConfigError
from dlsched.validation import load_document_safely

SchemaT = TypeVar("SchemaT", bound=BaseModel)
FILE_SUFFIXES = (".yaml", ".yml", ".json")


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
        raise config_error(error, source, schema) from None


def own_error(error: ValidationError) -> ConfigError | None:
    """The ConfigError a schema's own validator raised inside ``error`` (its text already
    names the field), if any: a caller re-raises it unchanged."""
    for item in error.errors():
        raised = item.get("ctx", {}).get("error")
        if isinstance(raised, ConfigError):
            return raised
    return None


def validate_document(schema: type[SchemaT], data: Any, source: str, kind: str) -> SchemaT:
    """``data`` as ``schema``, a file's document (``source`` names it): a field's error as
    ``validate`` reports it; an error the schema's own checks raise as ``invalid KIND: ...``
    (``kind`` the type's name in them: ``model``, ``system``) names ``source`` instead, any
    other of its own errors unchanged."""
    try:
        return schema.model_validate(data)
    except ValidationError as error:
        own = own_error(error)
        if own is None:
            raise config_error(error, source, schema) from None
        text, prefix = str(own), f"invalid {kind}: "
        if text.startswith(prefix):
            raise ConfigError(f"invalid {source}: " + text.removeprefix(prefix)) from None
        raise own from None


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters (a whole document is not echoed)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def config_error(error: ValidationError, source: str = "input",
                 schema: type[BaseModel] | None = None) -> ConfigError:
    """``error`` as ``validate`` reports it: one line naming each bad field; with ``schema``,
    the top-level keys it does not know are named together with its fields (accepted)."""
    parts = []
    unknown = [str(item["loc"][0]) for item in error.errors()
               if schema is not None and item["type"] == "extra_forbidden"
               and len(item["loc"]) == 1]
    if unknown:
        parts.append(f"{', '.join(unknown)}: not a field of this file; accepted: "
                     + ", ".join(schema.model_fields))  # type: ignore[union-attr]
    for item in error.errors():
        if unknown and item["type"] == "extra_forbidden" and len(item["loc"]) == 1:
            continue
        message = " ".join(item["msg"].removeprefix("Value error, ").split())
        value = item.get("input")
        shown = "" if isinstance(value, dict) else f" (got {_short(value)})"
        if not item["loc"] and schema is not None and item["type"] == "model_type":
            message = (f"the document is a {type(value).__name__}, not a mapping; accepted: a "
                       f"mapping of {', '.join(schema.model_fields)}")
            shown = ""
        where = f"{_location(item['loc'])}: " if item["loc"] else ""
        parts.append(f"{where}{message}{shown}")
    return ConfigError(f"invalid {source}: " + "; ".join(parts))


@cache
def bundled_presets(filename: str) -> dict[str, Any]:
    """The bundled preset file ``presets/<filename>``: preset name -> its document."""
    return yaml.safe_load(resources.files("dlsched").joinpath(f"presets/{filename}").read_text())


@dataclass(frozen=True)
class PresetFile:
    """A bundled preset file ``presets/<filename>`` whose documents ``build(document, source)``
    turns into objects; ``field`` names the option in errors."""

    filename: str
    field: str
    build: Callable[[Any, str], Any]

    def names(self) -> list[str]:
        """Names of the bundled presets."""
        return list(bundled_presets(self.filename))

    def description(self, name: str) -> str:
        """The one-line description of preset ``name``."""
        return str(bundled_presets(self.filename)[name].get("description", ""))

    def load(self, name_or_path: str | Path) -> Any:
        """The preset ``name_or_path`` (its name added, its description left out), or the
        YAML/JSON file at that path, built; ConfigError naming ``field`` and the presets
        otherwise."""
        presets = bundled_presets(self.filename)
        key = str(name_or_path)
        if key in presets:
            data = {k: v for k, v in presets[key].items() if k != "description"}
            return self.build({"name": key, **data}, f"preset {key}")
        if Path(key).suffix.lower() in FILE_SUFFIXES:
            return self.build(load_document(key), key)
        raise ConfigError(f"{self.field}: {key!r} is neither a preset nor a .yaml/.json file; "
                          "presets: " + ", ".join(presets))
