"""Grid files: which domain, which parameters vary (products and zipped groups), which are
fixed, which metrics to keep; expanded into a deterministic list of scenarios.

A scenario is a flat dict holding every parameter of its domain (defaults filled in,
units parsed: bytes, seconds), identified by a stable key (a hash of domain and parameters),
so a resumed sweep recognizes finished scenarios whatever the order or executor.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dlsched.config import validate
from dlsched.errors import ConfigError
from dlsched.sweep.domains import DOMAINS, Domain, get_domain
from dlsched.sweep.store import scenario_key
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

    @cached_property
    def identities(self) -> list[str]:
        """Each entry's identity (``_identity``), in order."""
        return [_identity(self.entry(i)) for i in range(self.size)]

    @cached_property
    def first_index(self) -> dict[str, int]:
        """Identity -> index of its first entry."""
        first: dict[str, int] = {}
        for index, identity in enumerate(self.identities):
            first.setdefault(identity, index)
        return first


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

    @property
    def distinct_count(self) -> int:
        """Number of distinct scenarios (as ``scenario_key`` tells them apart), counted without
        listing them: blocks set disjoint parameters, so it is the product of each block's
        distinct entries."""
        return math.prod(len(set(block.identities)) for block in self.blocks)

    def scenarios(self) -> Iterator[dict[str, Any]]:
        """Every scenario (all parameters of the domain), product order: first block slowest."""
        for entries in itertools.product(*(range(b.size) for b in self.blocks)):
            yield self._params(entries)

    def scenario(self, index: int) -> dict[str, Any]:
        """Scenario ``index`` of ``scenarios()`` (0 <= index < count), computed directly."""
        entries = []
        for block in reversed(self.blocks):
            index, entry = divmod(index, block.size)
            entries.append(entry)
        return self._params(reversed(entries))

    def index_of(self, params: dict[str, Any]) -> int | None:
        """The index of the first scenario whose varied parameters equal those in ``params``
        (e.g. a stored row), or None when some block has no such entry."""
        index = 0
        for block in self.blocks:
            entry = block.first_index.get(_identity({name: params.get(name)
                                                     for name in block.values}))
            if entry is None:
                return None
            index = index * block.size + entry
        return index

    def _params(self, entries: Iterable[int]) -> dict[str, Any]:
        params = dict(self.fixed)
        for block, index in zip(self.blocks, entries, strict=True):
            params.update(block.entry(index))
        return params


class GridScenarios(Sequence[dict[str, Any]]):
    """A grid's scenarios as a sequence computed on demand (a grid may hold 10**7)."""

    def __init__(self, grid: Grid) -> None:
        self.grid = grid

    def __len__(self) -> int:
        return self.grid.count

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self.grid.scenario(i) for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        return self.grid.scenario(index % len(self))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.grid.scenarios()

    def distinct(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """(index, scenario) of each distinct scenario, first occurrences in order, without
        remembering those seen: blocks set disjoint parameters, so a scenario repeats an
        earlier one exactly when some block's entry repeats an earlier entry of that block."""
        grid = self.grid
        firsts = [sorted(block.first_index.values()) for block in grid.blocks]
        for entries in itertools.product(*firsts):
            index = 0
            for block, entry in zip(grid.blocks, entries, strict=True):
                index = index * block.size + entry
            yield index, grid._params(entries)


def _identity(values: dict[str, Any]) -> str:
    """What tells two blocks' entries apart: their JSON text, as in ``scenario_key``."""
    return json.dumps(sorted(values.items()), separators=(",", ":"), default=str)


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


def _check_baseline(baseline: str | None, policy_param: str, fixed: dict[str, Any],
                    blocks: list[Block]) -> None:
    """The grid's ``baseline`` must be one of the policies it runs (``summary`` and ``plot``
    compare against it): refused before any scenario runs, naming the policies. ``fixed``:
    the parameters the grid file fixes (not the domain's defaults)."""
    if baseline is None:
        return
    policies = [fixed[policy_param]] if policy_param in fixed else []
    for block in blocks:
        policies += block.values.get(policy_param, [])
    if baseline not in policies:
        raise ConfigError(f"baseline: {baseline!r} is not a {policy_param} of this grid; "
                          "accepted: " + ", ".join(dict.fromkeys(map(str, policies))))


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
    _check_baseline(spec.baseline, domain.policy_param,
                    {name: fixed[name] for name in spec.fixed}, normal)
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


__all__ = ["DOMAINS", "Grid", "GridScenarios", "GridSpec", "build_grid", "grid_from_data",
           "load_grid", "scenario_key"]
