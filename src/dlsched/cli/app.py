"""The ``dlsched`` command: a thin layer that parses arguments and calls the library.

Each domain adds its commands from its own module (``cli/<domain>.py``) through a
``register(app, reproduce)`` function, so the domains stay independent.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from dlsched import __version__
from dlsched.cli import collective, dataparallel, pipeline, runtime, sweep, training
from dlsched.errors import ConfigError
from dlsched.units import UnitError

app = typer.Typer(
    help="Plan and simulate distributed deep-learning training schedules.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
reproduce = typer.Typer(help="Reproduce the published papers' tables.", no_args_is_help=True)
app.add_typer(reproduce, name="reproduce")

for domain in (collective, dataparallel, pipeline, runtime, training, sweep):
    domain.register(app, reproduce)


def _print_version(value: bool) -> None:
    if value:
        print(f"dlsched {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option(
        "--version", help="Print the version and exit.", is_eager=True,
        callback=_print_version)] = False) -> None:
    """Plan and simulate distributed deep-learning training schedules."""


def _fail(message: str, code: int = 2) -> None:
    """Print ``error: message`` on one line (whitespace runs collapsed; taken literally, not as
    rich markup) on stderr and exit with ``code``."""
    Console(stderr=True, soft_wrap=True).print(
        f"[bold red]error:[/] {escape(' '.join(message.split()))}", highlight=False)
    sys.exit(code)


def main() -> None:
    """Entry point: bad input exits with code 2 and a one-line message on stderr."""
    try:
        app(standalone_mode=False)
    except (ConfigError, UnitError, ValueError) as error:
        _fail(str(error))
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except typer.Abort:
        sys.exit(1)
    except Exception as error:  # typer's click errors: unknown option, bad integer, ...
        code, message = getattr(error, "exit_code", None), getattr(error, "format_message", None)
        if code is None or message is None:
            raise
        if not message():  # no arguments at all: click shows the help
            error.show()  # type: ignore[attr-defined]
            sys.exit(code)
        context = getattr(error, "ctx", None)
        where = f" (see '{context.command_path} --help')" if context is not None else ""
        _fail(f"{message()}{where}", code)
