"""Locating problems in input files: errors that name the file, the line and the field."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from dlsched.errors import ConfigError
from dlsched.validation import read_text_file


def file_error(path: str | Path, line: int | None, field: str, message: str) -> ConfigError:
    """A ConfigError reading ``<file>:<line>: <field>: <message>`` (line 1-based, if known)."""
    where = f"{path}:{line}" if line is not None else f"{path}"
    return ConfigError(f"{where}: {field}: {message}")


def read_text(path: str | Path, what: str) -> str:
    """The file's UTF-8 text, with the shared input-file guards (missing, directory, binary,
    too large: ConfigError naming ``what`` and the path)."""
    return read_text_file(path, what)


def yaml_mapping_lines(text: str, path: str | Path) -> dict[str, list[int]]:
    """For each top-level key of a YAML mapping: the 1-based line of the key, then of each item
    of its value when the value is a list (or the value's own line otherwise). Values must be
    scalars or flat lists of scalars, so loading the text afterwards cannot blow up."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise file_error(path, line, "<document>", f"not valid YAML: {error}") from None
    if node is None or not isinstance(node, yaml.MappingNode):
        raise file_error(path, 1, "<document>", "expected a YAML mapping of keys to values")
    lines: dict[str, list[int]] = {}
    for key, value in node.value:
        items = value.value if isinstance(value, yaml.SequenceNode) else [value]
        for item in items:
            if not isinstance(item, yaml.ScalarNode):
                raise file_error(path, item.start_mark.line + 1, str(key.value),
                                 "expected a value or a list of values")
        lines[str(key.value)] = [key.start_mark.line + 1] + [i.start_mark.line + 1 for i in items]
    return lines


def json_key_line(text: str, key: str) -> int | None:
    """1-based line of the first ``"key":`` in a JSON text, None if absent."""
    match = re.search(r'"' + re.escape(key) + r'"\s*:', text)
    return None if match is None else text.count("\n", 0, match.start()) + 1
