"""The inputs every domain's scenario schema is made of, as shared pydantic field types: what
runs on what (a topology, a device graph, ASTRA-sim files), how it is parallelised (chunks,
concurrency) and the pieces each domain builds its own fields from (limits, names, units).

A scenario schema (``collectives/scenario.py``, ``dataparallel/scenario.py``,
``pipeline/scenario.py``, ``training/scenario.py``) is the one declaration of its command's
options: each field's name, description (the option's help), default, unit and limits. The
command line (``dlsched.cli.schema_options`` makes a command's options from the schema), the
sweep grid and the Python API validate with the same schema and run the same object.

Defaults are written as the user writes them ("1 GB") and parsed like any value
(``validate_default``); the metadata classes below say what a field is on the command line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field

from dlsched.errors import ConfigError
from dlsched.hardware import Topology, load_topology
from dlsched.hardware.device_config import load_devices
from dlsched.units import UnitError, parse_bytes
from dlsched.validation import CHUNKS, CONCURRENCY, limited, policy_name

STRICT = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True, validate_default=True)
"""Every scenario schema's settings: unknown fields, NaN and infinity refused, defaults parsed."""


@dataclass(frozen=True)
class Choices:
    """Field metadata: the names a field accepts (listed in its option's help)."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class Several:
    """Field metadata: the command compares several values at once, given comma-separated
    (``default`` when the option is left out; ``every``, when set, names them all), one per
    scenario; a sweep varies the field one value per scenario."""

    default: str
    every: str | None = None


@dataclass(frozen=True)
class Flag:
    """Field metadata: a switch given only as ``--name`` (no ``--no-name`` spelling)."""


@dataclass(frozen=True)
class Text:
    """Field metadata: given as text in human units ("4 GiB") and parsed by the field."""


def one_of(value: str, accepted: Any, what: str) -> str:
    """``value`` when it is one of ``accepted``; ConfigError naming ``what`` otherwise."""
    if value not in accepted:
        raise ConfigError(f"unknown {what} {value!r}; accepted: " + ", ".join(map(str, accepted)))
    return value


def checked(check: Callable[[Any], object], kind: Any = str) -> Any:
    """A value (a name by default) accepted when ``check(value)`` (which loads what it names or
    builds what it configures) does not raise; its error is the field's."""
    return Annotated[kind, AfterValidator(lambda value: (check(value), value)[1])]


def choice(accepted: Sequence[str], what: str) -> Any:
    """A name that must be one of ``accepted`` (ConfigError naming ``what`` otherwise)."""
    return Annotated[str, AfterValidator(lambda value: one_of(value, accepted, what)),
                     Choices(tuple(accepted))]


def policy_choice(accepted: Sequence[str], what: str) -> Any:
    """A policy name among ``accepted``; ``ours`` is stored as ``dlsched``."""
    return Annotated[str, AfterValidator(lambda value: policy_name(value, accepted, what)),
                     Choices(tuple(accepted))]


def _names(value: Any) -> str:
    """A comma-separated list given as a list or a number (``[1, 2]``, ``4``) as text."""
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


NameList = Annotated[str, BeforeValidator(_names)]
"""Comma-separated names or numbers, also given as a list (a grid's ``[1, 2]``)."""


def _data_size(value: Any) -> int:
    """Bytes from a data size ("4 GiB") or a plain number; ConfigError otherwise."""
    try:
        return parse_bytes(value)
    except UnitError as error:
        raise ConfigError(str(error)) from None


DataSize = Annotated[int, BeforeValidator(_data_size), Text()]
"""Bytes from a data size ("4 GiB", "1343 MiB") or a plain number of bytes."""

AnyFloat = Annotated[float, Field(allow_inf_nan=True)]
"""A float that may be NaN or infinite, for a check that refuses it with its own message."""


# --- what it runs on -------------------------------------------------------------------------
@lru_cache(maxsize=256)
def cached_topology(name: str, latency_scale: float) -> Topology:
    """A topology preset or file with every step latency times ``latency_scale`` (cached)."""
    return load_topology(name).with_latency_scale(latency_scale)


TopologyName = Annotated[checked(lambda name: cached_topology(name, 1.0)),
                         Field(description="Topology preset name (dlsched topologies) or "
                               "YAML/JSON file.")]
LatencyScale = Annotated[float, Field(ge=0.0, le=1e6, description=(
    "Multiplies every step latency of the topology; 0 removes them."))]
DevicesName = Annotated[checked(load_devices), Field(
    description="Device preset (dlsched pipeline devices) or YAML/JSON file.")]
AstraNetwork = Annotated[str | None, Field(
    description="ASTRA-sim 2.x network YAML; replaces --topology (docs/interop.md).")]
AstraSystem = Annotated[str | None, Field(
    description="ASTRA-sim system JSON: chunks, active chunks per dimension, algorithms.")]
AstraCompat = Annotated[bool, Flag(), Field(
    description="Emulate ASTRA-sim 2.x: reduction pass (local-mem-bw), FullyConnected direct "
    "on all links, its Themis tracker (docs/interop.md).")]

# --- how it is parallelised ------------------------------------------------------------------
Chunks = Annotated[limited(CHUNKS, int), Field(description="Chunks per collective.")]
Concurrency = Annotated[limited(CONCURRENCY, int),
                        Field(description="Chunks a dimension runs at once.")]
