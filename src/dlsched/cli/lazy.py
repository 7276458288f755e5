"""Command groups whose commands are imported when they run, not when ``--help`` lists them.

Each domain's CLI module (``cli/<domain>.py``) imports its library (numpy, pydantic schemas,
planners, ...) and adds its commands through ``register(app, reproduce)``. A ``LazyGroup``
knows, for each command name, which modules add it (``Entry``); it imports and registers those
modules the first time the command is looked up to run, and lists the commands in ``--help``
from the entries' one-line help without importing anything (``tests/cli/test_lazy_commands.py``
checks that each entry's help is the command's own).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup

_REGISTERED: set[str] = set()


@dataclass(frozen=True)
class Entry:
    """A command of a lazy group: the ``dlsched.cli`` modules whose ``register`` adds it, and
    its help's first paragraph as ``--help`` lists it (None: the group's ``--help`` imports
    the modules to read it)."""

    modules: tuple[str, ...]
    help: str | None = None


def register(modules: Iterable[str], app: typer.Typer, reproduce: typer.Typer) -> None:
    """Import each ``dlsched.cli.<module>`` not yet registered and add its commands to ``app``
    and ``reproduce``."""
    for name in modules:
        if name not in _REGISTERED:
            importlib.import_module(f"dlsched.cli.{name}").register(app, reproduce)
            _REGISTERED.add(name)


class LazyGroup(TyperGroup):
    """A group listing ``entries`` (in order) whose commands load on first use. A subclass
    gives ``entries``, ``source`` (the typer app the commands are built from) and ``load``
    (registers modules on the CLI's apps)."""

    entries: ClassVar[dict[str, Entry]] = {}
    _listing = False

    def source(self) -> typer.Typer:
        """The typer app whose registered commands this group shows."""
        raise NotImplementedError

    def load(self, modules: Iterable[str]) -> None:
        """Import and register ``modules``."""
        raise NotImplementedError

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return [*self.entries, *(name for name in self.commands if name not in self.entries)]

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:
        entry = self.entries.get(cmd_name)
        if cmd_name in self.commands and (entry is None
                                          or _REGISTERED.issuperset(entry.modules)):
            return self.commands[cmd_name]
        if self._listing and entry is not None and entry.help is not None:
            return TyperCommand(name=cmd_name, help=entry.help)
        # A name no entry lists loads every module, so that the parser's suggestions for a
        # mistyped command see every command.
        self.load(entry.modules if entry is not None else
                  dict.fromkeys(m for known in self.entries.values() for m in known.modules))
        # A command built before all its modules were added (the ``run`` group, first added
        # by the runtime module, before the pipeline module adds ``run pipeline``) is built
        # again now.
        self.commands.update(typer.main.get_group(self.source()).commands)
        return self.commands.get(cmd_name)

    def format_help(self, ctx: typer.Context, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False
