"""One validation layer for every number, file and output path that enters dlsched.

Physical quantities are parsed from human units (``dlsched.units``) and then checked here: they
must be finite and inside the documented range below, so that no input can hang a search, blow
up memory or turn into a silently wrong number. The same limits serve three kinds of caller:

* pydantic models use the annotated types (``Bandwidth``, ``Seconds``, ``ByteSize``, ...);
* CLI commands call ``Limit.check`` / ``Limit.parse`` on their options before any work starts;
* the Python API's dataclasses call the same ``check`` functions.

Each error is a ``ConfigError`` naming the field, the value and what is accepted. Files are read
by ``read_text_file`` / ``load_document_safely`` (size, type, encoding, nesting depth and YAML
alias expansion are limited), and ``check_output_path`` refuses an unwritable output before
any computation (``dlsched.cli.paths`` adds that no output may be an input or another output).
The limits are listed in docs/inputs.md.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import yaml
from pydantic import BeforeValidator

from dlsched.errors import ConfigError
from dlsched.units import (
    UnitError,
    format_bytes,
    parse_bandwidth,
    parse_bytes,
    parse_flops,
    parse_time,
)

# --- documented limits (docs/inputs.md) -------------------------------------------------------
MAX_NPUS_PER_DIM = 4096
"""NPUs in one network dimension (largest built systems: a few thousand per dimension)."""
MAX_NPUS = 1_048_576
"""NPUs in a whole topology (2**20)."""
MAX_DIMS = 8
"""Network dimensions in one topology."""
MAX_CHUNKS = 4096
"""Chunks of one collective (the Themis paper uses 64; search cost grows with the count)."""
MAX_CONCURRENCY = 64
"""Chunks one dimension may run at once."""
MAX_WORKERS = 65_536
"""Data-parallel ranks (workers) of one job."""
MAX_MICROBATCHES = 4096
"""Microbatches of one pipeline iteration (over all replica pipelines). Megatron-LM's published
runs (Narayanan et al., SC21, Table 1) use up to 3,072 (the 1T model: batch 3072, microbatch
1), which ``reproduce megatron`` simulates; the API enforces the limit as the CLI does."""
MAX_BATCH = 1_048_576
"""Samples per worker or per microbatch."""
MAX_LAYERS = 10_000
"""Layers of a profile or blocks of a chain file."""
MAX_DEVICES = 4096
"""GPUs of a pipeline device graph."""
MAX_JOBS = 64
"""Worker processes of a reproduction."""
MAX_FILE_BYTES = 16 * 2**20
"""Size of one input file (16 MiB)."""
MAX_NESTING_DEPTH = 32
"""Nesting depth of mappings and lists in one YAML/JSON file."""
MAX_DOCUMENT_NODES = 1_000_000
"""Values in one YAML/JSON file after expanding YAML aliases (guards alias bombs)."""


def _plain(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True)
class Limit:
    """A quantity's accepted range in its internal unit, and how to parse and show it.

    ``low_open`` excludes ``low`` itself (e.g. bandwidth > 0). ``parse`` turns a human string
    (or a plain number, which means the internal unit) into the internal unit.
    """

    what: str
    low: float
    high: float
    low_open: bool = False
    parse_unit: Callable[[Any], float] | None = None
    show: Callable[[float], str] = _plain
    integer: bool = False

    def accepted(self) -> str:
        """The accepted range in words, e.g. ``'> 0 and <= 1e+18 B/s'``."""
        low = f"> {self.show(self.low)}" if self.low_open else f">= {self.show(self.low)}"
        kind = "an integer" if self.integer else "a finite number"
        return f"{kind} {low} and <= {self.show(self.high)}"

    def error(self, field: str, value: Any) -> ConfigError:
        """The ConfigError for a value outside this limit."""
        prefix = f"{field}: " if field else ""
        return ConfigError(f"{prefix}{self.what} {value!r} is out of range; accepted: "
                           f"{self.accepted()}")

    def check(self, value: Any, field: str = "") -> Any:
        """``value`` (a number in the internal unit) if finite and in range, else ConfigError."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(field, value)
        if self.integer and not (isinstance(value, int) or float(value).is_integer()):
            raise self.error(field, value)
        number = float(value)
        too_low = number <= self.low if self.low_open else number < self.low
        if not math.isfinite(number) or too_low or number > self.high:
            raise self.error(field, value)
        return int(value) if self.integer else number

    def parse(self, value: Any, field: str = "") -> Any:
        """Parse ``value`` (human units or a plain number in the internal unit) and check it.

        A plain number, also written as a string (CSV cells), always means the internal unit.
        """
        if isinstance(value, str) and _is_plain_number(value):
            value = _number(value, self, field)
        if self.parse_unit is not None and isinstance(value, str):
            try:
                value = self.parse_unit(value)
            except UnitError as error:
                raise ConfigError(f"{field}: {error}" if field else str(error)) from None
        elif isinstance(value, str):
            value = _number(value, self, field)
        return self.check(value, field)

    def check_array(self, values: Any, field: str) -> None:
        """Check every entry of an array (any shape); the error names the first bad index."""
        array = np.asarray(values, dtype=float)
        low_bad = array <= self.low if self.low_open else array < self.low
        bad = ~np.isfinite(array) | low_bad | (array > self.high)
        if bad.any():
            index = np.unravel_index(int(np.argmax(bad)), array.shape)
            where = "".join(f"[{int(i)}]" for i in index)
            raise self.error(f"{field}{where}", float(array[index]))

    def validator(self, value: Any) -> Any:
        """Pydantic before-validator: parse and check (the model names the field)."""
        return self.parse(value)


def _is_plain_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _number(text: str, limit: Limit, field: str) -> float | int:
    try:
        number = float(text)
        return int(number) if limit.integer and number.is_integer() else number
    except ValueError:
        raise ConfigError(f"{field + ': ' if field else ''}cannot parse {text!r} as "
                          f"{limit.accepted()}") from None


def count(what: str, low: int, high: int) -> Limit:
    """An integer limit ``low..high`` (both included)."""
    return Limit(what, low, high, integer=True, show=lambda v: f"{int(v):,}")


# --- quantities --------------------------------------------------------------------------------
BANDWIDTH = Limit("bandwidth", 1.0, 1e30, parse_unit=parse_bandwidth,
                  show=lambda v: f"{v:g} B/s")
"""Bytes/s of one link or dimension: 1 B/s .. 10**30 B/s (tests model "infinitely fast")."""
LATENCY = Limit("latency", 0.0, 60.0, parse_unit=parse_time, show=lambda v: f"{v:g} s")
"""Seconds of one step or message start-up: 0 .. 60 s."""
DURATION = Limit("duration", 0.0, 1e6, parse_unit=parse_time, show=lambda v: f"{v:g} s")
"""Seconds of one measured computation (a layer's forward or backward): 0 .. 10**6 s."""
DATA_SIZE = Limit("data size", 0, 2**50, parse_unit=parse_bytes, integer=True,
                  show=lambda v: f"{v:g} B")
"""Bytes of a buffer, tensor, activation or memory: 0 .. 2**50 (1 PiB)."""
MESSAGE_SIZE = Limit("data size", 1, 2**50, parse_unit=parse_bytes, integer=True,
                     show=DATA_SIZE.show)
"""Bytes of a collective's buffer: 1 B .. 1 PiB."""
SECONDS_PER_BYTE = Limit("seconds per byte", 0.0, 1.0, show=lambda v: f"{v:g} s/B")
"""Inverse bandwidth (an alpha-beta model's beta): 0 .. 1 s/B (i.e. at least 1 B/s)."""
FLOP_RATE = Limit("compute rate", 1.0, 1e21, parse_unit=parse_flops,
                  show=lambda v: f"{v:g} FLOP/s")
"""FLOP/s of one accelerator: 1 .. 10**21."""
FLOP_COUNT = Limit("FLOP count", 0.0, 1e24)
"""FLOP of one layer or block per (micro)batch: 0 .. 10**24."""
FRACTION = Limit("fraction", 0.0, 1.0, low_open=True)
"""A share such as an efficiency: (0, 1]."""
RATIO = Limit("ratio", 0.0, 1e6, low_open=True)
"""A positive multiplier such as backward/forward: (0, 10**6]."""
LEARNING_RATE = Limit("learning rate", 0.0, 10.0, low_open=True)
"""An optimizer's learning rate: (0, 10]."""

NPUS_PER_DIM = count("dimension size", 2, MAX_NPUS_PER_DIM)
NPUS = count("NPU count", 1, MAX_NPUS)
CHUNKS = count("chunk count", 1, MAX_CHUNKS)
CONCURRENCY = count("concurrency", 1, MAX_CONCURRENCY)
WORKERS = count("worker count", 1, MAX_WORKERS)
MICROBATCHES = count("microbatch count", 1, MAX_MICROBATCHES)
BATCH = count("batch size", 1, MAX_BATCH)
LAYERS = count("layer count", 1, MAX_LAYERS)
DEVICES = count("GPU count", 1, MAX_DEVICES)
JOBS = count("process count", 1, MAX_JOBS)
THREADS = count("thread count", 1, 256)


def limited(limit: Limit, kind: type) -> Any:
    """A pydantic field parsed and range-checked by ``limit`` (which a schema option's help
    shows: the limit travels with the field)."""
    return Annotated[kind, BeforeValidator(limit.validator), limit]


Bandwidth = limited(BANDWIDTH, float)
"""Pydantic field: bytes/s from "200 GB/s", "100 Gb/s" or a plain number of B/s."""
Seconds = limited(LATENCY, float)
"""Pydantic field: a latency in seconds from "700 ns" or a plain number of seconds."""
Duration = limited(DURATION, float)
"""Pydantic field: a computation time in seconds."""
ByteSize = limited(DATA_SIZE, int)
"""Pydantic field: bytes from "1 GiB", "100 MB" or a plain number of bytes."""
FlopRate = limited(FLOP_RATE, float)
"""Pydantic field: FLOP/s from "312 TFLOP/s" or a plain number."""
FlopCount = limited(FLOP_COUNT, float)
"""Pydantic field: FLOP per (micro)batch."""
PositiveFinite = limited(RATIO, float)
"""Pydantic field: a finite number > 0 (at most 10**6)."""
Fraction = limited(FRACTION, float)
"""Pydantic field: a finite number in (0, 1]."""
DimSize = limited(NPUS_PER_DIM, int)
"""Pydantic field: NPUs of one dimension."""
DeviceCount = limited(DEVICES, int)
"""Pydantic field: GPUs."""


POLICY_ALIASES = {"ours": "dlsched"}
"""Input aliases every policy/planner name accepts (``ours`` is dlsched's own policy)."""


def policy_name(value: str, accepted: Any, what: str) -> str:
    """``value`` (an alias such as ``ours`` read as its policy) if it is one of ``accepted``;
    ConfigError naming ``what`` (e.g. "collective policy") and the accepted names otherwise."""
    choices = [str(name) for name in accepted]
    name = POLICY_ALIASES.get(value.strip(), value.strip())
    if name not in choices:
        aliases = [f"{alias} (= {target})" for alias, target in POLICY_ALIASES.items()
                   if target in choices]
        raise ConfigError(f"unknown {what} {value!r}; accepted: "
                          + ", ".join(choices + aliases))
    return name


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# --- input files -------------------------------------------------------------------------------
def read_text_file(path: str | Path, what: str = "file") -> str:
    """The UTF-8 text of an input file; ConfigError (naming the file) for a missing path, a
    directory, a file above ``MAX_FILE_BYTES`` or bytes that are not UTF-8 text."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{what} {str(path)!r} is a directory; give a file")
    if not path.exists():
        raise ConfigError(f"{what} {str(path)!r} does not exist")
    if not path.is_file():
        raise ConfigError(f"{what} {str(path)!r} is not a regular file")
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError(f"{what} {str(path)!r} has {size:,} bytes; accepted: at most "
                              f"{MAX_FILE_BYTES:,} bytes ({format_bytes(MAX_FILE_BYTES)})")
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"{what} {str(path)!r} cannot be read: {error.strerror}") from None
    if b"\x00" in data:
        raise ConfigError(f"{what} {str(path)!r} is a binary file; expected UTF-8 text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{what} {str(path)!r} is not UTF-8 text (byte {error.start})") from None


def _check_yaml_shape(text: str, source: str) -> None:
    """Walk YAML events (no recursion) and refuse deep nesting and alias expansion bombs.

    Every scalar and collection counts one value and every alias counts the values of the node
    it names, so ``total`` is the size of the document once aliases are expanded.
    """
    anchors: dict[str, int] = {}
    open_nodes: list[list[Any]] = []  # [anchor, expanded size] of each open mapping/list
    total = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.CollectionStartEvent):
            if len(open_nodes) >= MAX_NESTING_DEPTH:
                raise ConfigError(f"{source}: nested deeper than {MAX_NESTING_DEPTH} levels "
                                  f"(line {event.start_mark.line + 1}); accepted: at most "
                                  f"{MAX_NESTING_DEPTH}")
            open_nodes.append([event.anchor, 1])
            total += 1
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, size = open_nodes.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, size = event.anchor, 1
            total += 1
        elif isinstance(event, yaml.AliasEvent):
            anchor, size = None, anchors.get(event.anchor, 1)
            total += size
        else:
            continue
        if anchor is not None:
            anchors[anchor] = size
        if open_nodes:
            open_nodes[-1][1] += size
        if total > MAX_DOCUMENT_NODES:
            raise ConfigError(f"{source}: expands to more than {MAX_DOCUMENT_NODES:,} values "
                              f"(YAML aliases?); accepted: at most {MAX_DOCUMENT_NODES:,}")


def _walk(data: Any, source: str) -> None:
    """Refuse NaN/infinite numbers and too-deep nesting anywhere in loaded data (iteratively)."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    seen = 0
    while stack:
        value, where, depth = stack.pop()
        seen += 1
        if seen > MAX_DOCUMENT_NODES:
            raise ConfigError(f"{source}: more than {MAX_DOCUMENT_NODES:,} values")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{source}: {where or '<root>'}: {value!r} is not a finite number; "
                              "accepted: finite numbers (or strings with units)")
        children: Iterator[tuple[str, Any]]
        if isinstance(value, Mapping):
            children = ((f"{where}.{key}" if where else str(key), item)
                        for key, item in value.items())
        elif isinstance(value, list):
            children = ((f"{where}[{index}]", item) for index, item in enumerate(value))
        else:
            continue
        if depth >= MAX_NESTING_DEPTH:
            raise ConfigError(f"{source}: nested deeper than {MAX_NESTING_DEPTH} levels; "
                              f"accepted: at most {MAX_NESTING_DEPTH}")
        stack.extend((item, name, depth + 1) for name, item in children)


def parse_document(text: str, source: str, json_format: bool = False) -> Any:
    """Parse YAML (or JSON) text safely: depth, alias expansion and non-finite numbers are
    refused with a ConfigError naming ``source``."""
    kind = "JSON" if json_format else "YAML"
    try:
        if json_format:
            data = json.loads(text)
        else:
            _check_yaml_shape(text, source)
            data = yaml.load(text, Loader=_LOADER)
    except (RecursionError, json.JSONDecodeError, yaml.YAMLError) as error:
        # PyYAML >= 6.0.4 stops at its own limit (1,000 flow levels) while scanning, before
        # the event walk above reaches MAX_NESTING_DEPTH: the same input error for the user
        if isinstance(error, RecursionError) or "nesting depth" in str(
                getattr(error, "problem", "")):
            raise ConfigError(f"{source}: nested too deeply; accepted: at most "
                              f"{MAX_NESTING_DEPTH} levels") from None
        raise ConfigError(f"{source}: not valid {kind}: {error}") from None
    _walk(data, source)
    return data


def load_document_safely(path: str | Path, what: str = "file") -> Any:
    """Read a YAML (``.yaml``/``.yml``) or JSON file into plain data with every guard on."""
    path = Path(path)
    text = read_text_file(path, what)
    return parse_document(text, str(path), path.suffix.lower() == ".json")


# --- output paths ------------------------------------------------------------------------------
_REFUSED_ROOTS = (Path("/proc"), Path("/sys"))


def check_output_path(path: str | Path, option: str, suffixes: tuple[str, ...] = ()) -> Path:
    """Check that ``path`` can be written as a file, before any work starts.

    Refused: a directory, a path under /proc or /sys, a wrong suffix (when ``suffixes`` is
    given), a parent that is a file or not writable, an existing file that is not writable.
    Missing parent folders are fine: writers create them. ConfigError names the option.
    """
    path = Path(path)
    resolved = Path(os.path.abspath(path))
    accepted = ("a writable file path" + (f" ending in {' or '.join(suffixes)}"
                                          if suffixes else ""))
    if any(resolved == root or root in resolved.parents for root in _REFUSED_ROOTS):
        raise ConfigError(f"{option}: {str(path)!r} is under a system folder; accepted: "
                          f"{accepted}")
    if path.is_dir():
        example = path / ("out" + (suffixes[0] if suffixes else ""))
        raise ConfigError(f"{option}: {str(path)!r} is a directory; accepted: {accepted} "
                          f"(e.g. {str(example)!r})")
    if suffixes and path.suffix.lower() not in suffixes:
        raise ConfigError(f"{option}: {str(path)!r} has suffix {path.suffix or 'none'!r}; "
                          f"accepted: {accepted}")
    if path.exists():
        if not path.is_file() or not os.access(path, os.W_OK):
            raise ConfigError(f"{option}: {str(path)!r} exists and cannot be overwritten; "
                              f"accepted: {accepted}")
        return path
    parent = resolved.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{option}: {str(path)!r}: {str(parent)!r} is a file, not a folder; "
                          f"accepted: {accepted}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{option}: {str(path)!r}: folder {str(parent)!r} is not writable; "
                          f"accepted: {accepted}")
    return path
