"""A command's options made from its domain's scenario schema, so that each is declared once.

``@options_from(Schema)`` replaces the command's ``given`` parameter by one typer option per
schema field: ``--field-name``, its help the field's description (with its limits from the
field's ``Limit`` or ``Field(ge=, le=)``, and the accepted names of a field that takes
several), its default the field's as the user writes it ("1 GB"), its type the field's (text
for a quantity in human units). The command receives the values as ``Given``, which validates
them with the schema (a ConfigError naming ``--field-name`` otherwise) when the command asks,
after its own checks (output files first).
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar

import annotated_types
import typer
from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

from dlsched.cli.options import parse_names, scenario_from_options
from dlsched.inputs import Choices, Flag, Several, Text
from dlsched.validation import Limit

Scenario = TypeVar("Scenario", bound=BaseModel)
Command = TypeVar("Command", bound=Callable[..., Any])


@dataclass(frozen=True)
class FieldOption:
    """What a schema field is on the command line: its option name, the type click parses,
    the default shown and taken, the help, and the ``Several`` it takes (None: one value)."""

    name: str
    kind: Any
    default: Any
    help: str
    several: Several | None
    choices: tuple[str, ...]
    flag: bool


def _metadata(annotation: Any) -> tuple[Any, list[Any], bool]:
    """``annotation`` taken apart: its base type, every Annotated metadata item on the way
    (also inside ``X | None``), and whether None is allowed."""
    metadata: list[Any] = []
    optional = False
    while True:
        if typing.get_origin(annotation) is Annotated:
            metadata.extend(annotation.__metadata__)
            annotation = annotation.__origin__
            continue
        if typing.get_origin(annotation) in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            optional = optional or len(members) < len(typing.get_args(annotation))
            if len(members) == 1:
                annotation = members[0]
                continue
        return annotation, metadata, optional


def _limits(limit: Limit | None, metadata: list[Any]) -> str:
    """The accepted range as the help shows it ("1..4,096"; "> 0 and <= 1"), from the field's
    ``Limit`` (unless it parses units, whose description says its range in words) or its
    ``Field`` bounds; "" when none."""
    if limit is not None:
        if limit.parse_unit is not None:
            return ""
        low = f"> {limit.show(limit.low)} and <= " if limit.low_open else \
            f"{limit.show(limit.low)}.."
        return low + limit.show(limit.high)
    low = next((m.ge for m in metadata if isinstance(m, annotated_types.Ge)), None)
    high = next((m.le for m in metadata if isinstance(m, annotated_types.Le)), None)
    if low is None or high is None:
        return ""
    return f"{low:g}..{high:g}"


def field_option(name: str, field: FieldInfo) -> FieldOption:
    """The option a schema field becomes (``FieldOption``)."""
    base, metadata, optional = _metadata(field.annotation)
    metadata = [*metadata, *field.metadata]
    several = next((m for m in metadata if isinstance(m, Several)), None)
    choices = next((m.names for m in metadata if isinstance(m, Choices)), ())
    limit = next((m for m in metadata if isinstance(m, Limit)), None)
    text = several is not None or any(isinstance(m, Text) for m in metadata) or (
        limit is not None and limit.parse_unit is not None)
    kind = str if text else base
    help_text = (field.description or "").rstrip(".")
    if several is not None:
        every = f", or {several.every}" if several.every else ""
        help_text += (f"; several comma-separated{every}: " + ", ".join(choices)
                      + " (ours = dlsched)")
    limits = _limits(limit, metadata)
    if limits:
        help_text += f" ({limits})"
    return FieldOption(name, kind | None if optional else kind,
                       several.default if several is not None else field.default,
                       help_text + ".", several, choices,
                       any(isinstance(m, Flag) for m in metadata))


def schema_options(schema: type[BaseModel]) -> list[FieldOption]:
    """Every field of ``schema`` as an option, in schema order."""
    return [field_option(name, field) for name, field in schema.model_fields.items()]


@dataclass(frozen=True)
class Given(Generic[Scenario]):
    """A command's schema options as given (``values``: names as the schema's fields, values
    as typed), validated by ``schema`` on demand."""

    schema: type[Scenario]
    values: Mapping[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def names(self, name: str) -> list[str]:
        """The values of a field that takes several (``--policy a,b``), each checked by the
        schema's field (aliases such as ``ours`` read as their name), without repeats."""
        option = field_option(name, self.schema.model_fields[name])
        text = str(self.values[name])
        assert option.several is not None, f"{name} takes one value"
        if option.several.every is not None and text == option.several.every:
            return list(option.choices)
        field = self.schema.model_fields[name]
        adapter = TypeAdapter(Annotated[field.annotation, *field.metadata] if field.metadata
                              else field.annotation)
        return list(dict.fromkeys(
            adapter.validate_python(value)
            for value in parse_names(text, option.choices, f"--{_dashed(name)}")))

    def scenarios(self) -> list[Scenario]:
        """The scenarios the options describe: one per value of the field that takes several
        (the first validated with every other option), else one."""
        several = [option.name for option in schema_options(self.schema)
                   if option.several is not None]
        values = dict(self.values)
        names = {name: self.names(name) for name in several}
        first = scenario_from_options(self.schema, values | {n: v[0] for n, v in names.items()})
        if not names:
            return [first]
        (field, chosen), = names.items()
        return [first.model_copy(update={field: value}) for value in chosen]

    def scenario(self) -> Scenario:
        """The first scenario the options describe (``scenarios()[0]``)."""
        return self.scenarios()[0]


def _dashed(name: str) -> str:
    return name.replace("_", "-")


def _parameter(option: FieldOption) -> inspect.Parameter:
    decls = (f"--{_dashed(option.name)}",) if option.flag else ()
    info = typer.Option(*decls, help=option.help, show_default=option.default is not None)
    return inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY,
                             default=option.default, annotation=Annotated[option.kind, info])


def options_from(schema: type[Scenario]) -> Callable[[Command], Command]:
    """Decorate a command whose parameter ``given`` (``Given[schema]``) stands for every
    field of ``schema``: typer sees one option per field in its place."""
    options = schema_options(schema)

    def decorate(command: Command) -> Command:
        hints = typing.get_type_hints(command, include_extras=True)
        own = [parameter.replace(annotation=hints.get(parameter.name, parameter.annotation),
                                 kind=inspect.Parameter.KEYWORD_ONLY)
               for parameter in inspect.signature(command).parameters.values()]
        clash = {option.name for option in options} & {p.name for p in own}
        assert not clash, f"{command.__name__} declares schema fields itself: {clash}"
        at = [p.name for p in own].index("given")
        parameters = [*own[:at], *map(_parameter, options), *own[at + 1:]]

        @functools.wraps(command)
        def run(**kwargs: Any) -> Any:
            values = {option.name: kwargs.pop(option.name) for option in options}
            return command(**kwargs, given=Given(schema, values))

        run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        return run  # type: ignore[return-value]

    return decorate
