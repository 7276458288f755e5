"""The ``dlsched`` command: a thin layer that parses arguments and calls the library.

Each domain adds its commands from its own module (``cli/<domain>.py``) through a
``register(app, reproduce)`` function, so the domains stay independent.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console

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


def main() -> None:
    """Entry point: bad input exits with code 2 and a one-paragraph message on stderr."""
    try:
        app(standalone_mode=False)
    except (ConfigError, UnitError, ValueError) as error:
        Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {error}",
                                                   highlight=False)
        sys.exit(2)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except typer.Abort:
        sys.exit(1)
    except Exception as error:  # click usage errors carry their own exit code
        code = getattr(error, "exit_code", None)
        if code is None:
            raise
        show = getattr(error, "show", None)
        if show is not None:
            show()
        sys.exit(code)
