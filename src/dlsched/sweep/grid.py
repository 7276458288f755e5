"""Grid files: which domain, which parameters vary (products and zipped groups), which are
fixed, which metrics to keep; expanded into a deterministic list of scenarios.

A scenario is a flat dict holding every parameter of its domain (defaults filled in,
units parsed: bytes, seconds), identified by a stable key (a hash of domain and parameters),
so a resumed sweep recognizes finished scenarios whatever the order or executor.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dlsched.config import validate
from dlsched.errors import ConfigError
from dlsched.sweep.domains import DOMAINS, Domain, get_domain
from dlsched.validation import load_document_safely

MAX_SCENARIOS = 10_000_000
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class GridSpec(BaseModel):
    """The grid file's schema (see docs/sweeps.md)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True)
    name: str = "sweep"
    domain: str
    axes: dict[str, list[Any]] = {}
    zipped: list[dict[str, list[Any]]] = Field(default=[], alias="zip")
    fixed: dict[str, Any] = {}
    metrics: list[str] | None = None
    baseline: str | None = None

    @field_validator("domain")
    @classmethod
    def _domain(cls, value: str) -> str:
        if value not in DOMAINS:
            raise ValueError(f"unknown domain; accepted: {', '.join(DOMAINS)}")
        return value

    @field_validator("axes")
    @classmethod
    def _axes(cls, axes: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for name, values in axes.items():
            if not values:
                raise ValueError(f"axis {name!r} has no values")
        return axes

    @field_validator("zipped")
    @classmethod
    def _zipped(cls, groups: list[dict[str, list[Any]]]) -> list[dict[str, list[Any]]]:
        for index, group in enumerate(groups):
            lengths = {name: len(values) for name, values in group.items()}
            if not group or len(set(lengths.values())) != 1 or 0 in lengths.values():
                raise ValueError(f"zip group {index} needs lists of one non-zero length "
                                 f"(got lengths {lengths})")
        return groups


@dataclass(frozen=True)
class Block:
    """Parameters that vary together: one axis, or one zip group; ``where`` names it in errors."""

    where: str
    values: dict[str, list[Any]]

    @property
    def size(self) -> int:
        """Number of entries (the common list length)."""
        return len(next(iter(self.values.values())))

    def entry(self, index: int) -> dict[str, Any]:
        """The parameters of entry ``index``."""
        return {name: values[index] for name, values in self.values.items()}


@dataclass(frozen=True)
class Grid:
    """A validated grid: its domain, blocks of normalized values, fixed parameters, metrics."""

    spec: GridSpec
    domain: Domain
    blocks: tuple[Block, ...]
    fixed: dict[str, Any]
    metrics: tuple[str, ...]

    @property
    def count(self) -> int:
        """Number of scenarios."""
        return math.prod(block.size for block in self.blocks)

    @property
    def varied(self) -> tuple[str, ...]:
        """Parameters that take more than one value, in file order."""
        return tuple(name for block in self.blocks if block.size > 1 for name in block.values)

    def scenarios(self) -> Iterator[dict[str, Any]]:
        """Every scenario (all parameters of the domain), product order: first block slowest."""
        for entries in itertools.product(*(range(b.size) for b in self.blocks)):
            params = dict(self.fixed)
            for block, index in zip(self.blocks, entries, strict=True):
                params.update(block.entry(index))
            yield params


def scenario_key(domain: str, params: dict[str, Any]) -> str:
    """Stable identity of a scenario: SHA-256 (hex, 20 chars) of domain and sorted parameters."""
    text = json.dumps([domain, sorted(params.items())], separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _check_names(spec: GridSpec, domain: Domain) -> tuple[list[Block], dict[str, str]]:
    accepted = domain.param_names
    blocks = [Block(f"axes.{name}", {name: values}) for name, values in spec.axes.items()]
    blocks += [Block(f"zip[{i}]", group) for i, group in enumerate(spec.zipped)]
    seen: dict[str, str] = {name: "fixed" for name in spec.fixed}
    for block in blocks:
        for name in block.values:
            if name in seen:
                raise ConfigError(f"{block.where}: parameter {name!r} is also set in "
                                  f"{seen[name]}; give each parameter one place")
            seen[name] = block.where
    for name, where in seen.items():
        if name not in accepted or not _NAME.match(name):
            raise ConfigError(f"{where}: unknown parameter {name!r} for domain "
                              f"{domain.name!r}; accepted: " + ", ".join(accepted))
    return blocks, seen


def _normalize(domain: Domain, values: dict[str, Any], where: Callable[[str], str]
               ) -> dict[str, Any]:
    """Validate ``values`` with the domain schema; the normalized values (units parsed).
    ``where(field)`` names the place in the grid file a bad field came from."""
    try:
        model = domain.params.model_validate(values)
    except ValidationError as error:
        item = error.errors()[0]
        field = str(item["loc"][0]) if item["loc"] else "?"
        message = item["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{where(field)}: {message} (got "
                          f"{values.get(field, item.get('input'))!r})") from None
    return model.model_dump()


def _place(where: str, field: str, index: int) -> str:
    """``axes.size[2]``, ``zip[0].size[2]`` or ``fixed.size``: where a value sits in the file."""
    if where == "fixed":
        return f"fixed.{field}"
    return f"{where}[{index}]" if where.startswith("axes.") else f"{where}.{field}[{index}]"


def build_grid(spec: GridSpec) -> Grid:
    """Check names against the domain, validate every value, normalize units."""
    domain = get_domain(spec.domain)
    blocks, seen = _check_names(spec, domain)
    count = math.prod(block.size for block in blocks)
    if count > MAX_SCENARIOS:
        raise ConfigError(f"axes: the grid has {count:,} scenarios; at most {MAX_SCENARIOS:,} "
                          "are accepted")
    fixed = _normalize(domain, spec.fixed, lambda field: f"fixed.{field}")
    base = fixed | {name: v[0] for block in blocks for name, v in block.values.items()}
    _normalize(domain, base, lambda field: _place(seen.get(field, "fixed"), field, 0))
    normal = []
    for block in blocks:
        entries = [_normalize(domain, base | block.entry(i),
                              lambda field, i=i, b=block: _place(b.where, field, i))
                   for i in range(block.size)]
        normal.append(Block(block.where, {name: [e[name] for e in entries]
                                          for name in block.values}))
    metrics = tuple(spec.metrics) if spec.metrics is not None else domain.metrics
    unknown = [m for m in metrics if m not in domain.metrics]
    if unknown or not metrics:
        raise ConfigError(f"metrics: unknown {unknown or metrics!r} for domain {domain.name!r}; "
                          "accepted: " + ", ".join(domain.metrics))
    return Grid(spec, domain, tuple(normal), fixed, metrics)


def grid_from_data(data: Any, source: str = "grid") -> Grid:
    """A Grid from parsed YAML/JSON data; ConfigError naming the field on bad input."""
    return build_grid(validate(GridSpec, data, source))


def load_grid(path: str | Path) -> Grid:
    """Read and validate a YAML or JSON grid file."""
    return grid_from_data(load_document_safely(path, "grid"), str(path))


__all__ = ["DOMAINS", "Grid", "GridSpec", "build_grid", "grid_from_data",
           "load_grid", "scenario_key"]
