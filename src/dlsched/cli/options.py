"""Argument helpers shared by the CLI modules: policy names, numeric options and output files.

Every command checks its outputs before any work (``Outputs``), writes all policies' traces
into ONE Chrome-trace file (each policy its own process), and prints what it wrote.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from dlsched import progress
from dlsched.cli.paths import check_files
from dlsched.errors import ConfigError
from dlsched.report import plot_timelines, rows_to_csv, to_json, write_chrome_traces, write_text
from dlsched.sim import Timeline
from dlsched.validation import POLICY_ALIASES

# Piped output (CI logs, files) gets a wide fixed width so tables are not squeezed.
console = Console(width=None if sys.stdout.isatty() else 140)
status_console = progress.console

CSV_HELP = "Write the result rows as CSV to this file (raw SI units)."
TRACE_HELP = ("Write one Chrome-trace JSON file (open in Perfetto) holding every policy as its "
              "own process.")
PLOT_HELP = "Write a PNG timeline to this .png file, one panel per policy."
CsvOption = Annotated[Path | None, typer.Option(help=CSV_HELP)]
TraceOption = Annotated[Path | None, typer.Option(help=TRACE_HELP)]
PlotOption = Annotated[Path | None, typer.Option(help=PLOT_HELP)]
"""The output files most commands take, declared once (``csv: CsvOption = None``)."""

Scenario = TypeVar("Scenario")


def scenario_from_options(schema: type[Scenario], options: Mapping[str, Any]) -> Scenario:
    """The command's options (by name; those that are not fields of ``schema``, such as output
    files, are left out; paths as text) validated by the domain's scenario schema (e.g.
    ``pipeline.scenario``), which the sweep grid and the API use too; a ConfigError naming the
    option (``--field-name``, in place of the field's own name where the
    message starts with it) and the schema's message otherwise."""
    from pydantic import ValidationError

    fields = schema.model_fields  # type: ignore[attr-defined]
    try:
        return schema.model_validate(  # type: ignore[attr-defined]
            {name: str(value) if isinstance(value, Path) else value
             for name, value in options.items() if name in fields})
    except ValidationError as error:
        item = error.errors()[0]
        message = " ".join(item["msg"].removeprefix("Value error, ").split())
        cause = item.get("ctx", {}).get("error")
        if not item["loc"]:  # a whole-scenario check's: its own ConfigError keeps its field
            raise (cause if isinstance(cause, ConfigError) and str(cause) == message
                   else ConfigError(message)) from None
        field = str(item["loc"][0])
        raise ConfigError(f"--{field.replace('_', '-')}: {message.removeprefix(f'{field}: ')}"
                          ) from None


def named_by_option(error: ConfigError, fields: Iterable[str] = (),
                    files: Mapping[str, object] | None = None) -> ConfigError:
    """``error`` raised past the edge, named by its option: one of field ``device`` (or a
    message starting ``device: ``) among ``fields`` as ``--device: ...``; one naming a file of
    ``files`` (``{option: path}``) by that option in place of its field; any other unchanged.
    ``fields`` may map each field to its option where the two are spelled apart
    (``{"timeout_s": "--timeout"}``)."""
    text = str(error)
    if text.startswith("--"):
        return error
    options = fields if isinstance(fields, Mapping) else {
        name: f"--{name.replace('_', '-')}" for name in fields}
    if error.field in options:
        return error.renamed(options[error.field])
    for name, option in options.items():
        if text.startswith(f"{name}: "):
            return ConfigError(text.removeprefix(f"{name}: "), option)
    for option, path in (files or {}).items():
        if path is not None and str(path) in text:
            return error.renamed(option)
    return error


INPUT_FILE_SUFFIXES = (".yaml", ".yml", ".json", ".csv", ".txt")
"""What marks an option's value as an input file (not a preset or a formula) for
``input_files``."""


def input_files(inputs: Mapping[str, object]) -> dict[str, object]:
    """The ``{option: value}`` of ``inputs`` that name files, for ``named_by_option``."""
    return {option: value for option, value in inputs.items()
            if value is not None and str(value).lower().endswith(INPUT_FILE_SUFFIXES)}


def parse_names(text: str, accepted: Iterable[str], field: str) -> list[str]:
    """Comma-separated names, each one of ``accepted`` (``ours`` means ``dlsched``), without
    repeats; ConfigError naming ``field`` otherwise."""
    choices = list(accepted)
    names = [POLICY_ALIASES.get(name.strip(), name.strip()) for name in text.split(",")
             if name.strip()]
    unknown = [name for name in names if name not in choices]
    if unknown or not names:
        aliases = [f"{alias} (= {name})" for alias, name in POLICY_ALIASES.items()
                   if name in choices]
        raise ConfigError(f"{field}: unknown {unknown or text!r}; accepted: "
                          + ", ".join(choices + aliases) + " (comma-separated for several)")
    return list(dict.fromkeys(names))


def refuse_overrides(ctx: typer.Context, source: str, path: Path,
                     settings: Mapping[str, tuple[Any, Any, str]]) -> None:
    """Refuse an option the user gave that a file ``path`` (given to ``source``) also sets
    to another value, e.g. ``--chunks 8`` with a system file of 64 splits: ``settings`` maps
    each parameter name to (the option's value, the file's value, the file's key). An option
    left at its default silently takes the file's value, as documented."""
    for name, (given, from_file, key) in settings.items():
        origin = ctx.get_parameter_source(name)  # typer's own copy of click's enum: by name
        if origin is None or origin.name not in ("COMMANDLINE", "ENVIRONMENT"):
            continue
        if given != from_file:
            option = "--" + name.replace("_", "-")
            raise ConfigError(f"{option}: {given} contradicts {source} {str(path)!r}, whose "
                              f"{key} is {from_file}; accepted: {from_file}, or leave "
                              f"{option} out (the file sets it)")


def suffixed(path: Path, suffix: str, many: bool) -> Path:
    """``path`` with ``-suffix`` before its extension when several results share one option."""
    return path.with_name(f"{path.stem}-{suffix}{path.suffix}") if many else path


def announce(what: str, path: Path, json_out: bool) -> None:
    """Say on one line that ``what`` was written to ``path`` (on stderr when stdout carries
    JSON)."""
    (status_console if json_out else console).print(f"wrote {what}: {path}", highlight=False,
                                                    soft_wrap=True)


@dataclass(frozen=True)
class Outputs:
    """The files one command writes; constructing it checks every path before any work, in
    one ``check_files`` call (``cli/paths.py``) with the command's ``others`` outputs (e.g.
    ``--save``) and ``inputs``: no two outputs and no output and input may be the same file."""

    json_out: bool = False
    csv: Path | None = None
    trace: Path | None = None
    plot: Path | None = None
    others: Mapping[str, tuple[Path | None, tuple[str, ...]]] = field(default_factory=dict)
    inputs: Mapping[str, str | Path | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_files({"--csv": (self.csv, (".csv",)), "--trace": (self.trace, (".json",)),
                            "--plot": (self.plot, (".png",)), **self.others}, self.inputs)

    def timelines(self, named: Sequence[tuple[str, str, Timeline]], color_by: str) -> None:
        """Write ``(name, plot title, timeline)`` triples: one trace file with a process per
        name, one PNG with a panel per timeline."""
        if self.trace is not None:
            write_chrome_traces([(name, timeline) for name, _, timeline in named], self.trace)
            announce(f"Chrome trace ({len(named)} timelines, one process each)", self.trace,
                     self.json_out)
        if self.plot is not None:
            plot_timelines([(title, timeline) for _, title, timeline in named], self.plot,
                           color_by=color_by)
            announce(f"PNG plot ({len(named)} panels)", self.plot, self.json_out)

    def rows(self, rows: Sequence[dict[str, Any]], extra: dict[str, Any] | None = None) -> None:
        """Write CSV when asked and print ``{"rows": [...], **extra}`` as JSON with ``--json``."""
        emit_rows(rows, self.json_out, self.csv, extra)

    def document(self, document: dict[str, Any]) -> None:
        """Write ``document["rows"]`` as CSV when asked and print ``document`` as JSON with
        ``--json``."""
        emit_document(document, self.json_out, self.csv)


def emit_document(document: dict[str, Any], json_out: bool, csv_path: Path | None) -> None:
    """Print ``document`` as JSON when asked, and write its ``rows`` as CSV when a path is
    given."""
    if csv_path is not None:
        write_text(csv_path, rows_to_csv(document["rows"]))
        announce(f"CSV ({len(document['rows'])} rows)", csv_path, json_out)
    if json_out:
        print(to_json(document))


def emit_rows(rows: Sequence[dict[str, Any]], json_out: bool, csv_path: Path | None,
              extra: dict[str, Any] | None = None) -> None:
    """Print ``{"rows": [...], **extra}`` as JSON when asked, and write CSV when a path is given."""
    emit_document({"rows": list(rows), **(extra or {})}, json_out, csv_path)
