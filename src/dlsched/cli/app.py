"""The ``dlsched`` command: a thin layer that parses arguments and calls the library.

Each domain adds its commands from its own module (``cli/<domain>.py``) through a
``register(app, reproduce)`` function, so the domains stay independent. The domains are
imported when a command runs (``commands()``), not for ``dlsched --version``.

Exit codes: 0 done; 2 bad input (``ConfigError``, ``UnitError``, the parser's usage errors);
1 a run that could not finish (``RunFailure``: a rank died or hung) or a bug in dlsched (any
other exception: one line saying so; ``--debug`` shows the traceback).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from dlsched import __version__
from dlsched.errors import ConfigError, RunFailure
from dlsched.units import UnitError

app = typer.Typer(
    help="Plan and simulate distributed deep-learning training schedules.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
reproduce = typer.Typer(help="Reproduce the published papers' tables.", no_args_is_help=True)
app.add_typer(reproduce, name="reproduce")

_REGISTERED = [False]


def commands() -> typer.Typer:
    """The app with every domain's commands, imported and registered on the first call."""
    if not _REGISTERED[0]:
        from dlsched.cli import (
            collective,
            compute,
            dataparallel,
            pipeline,
            runtime,
            sweep,
            training,
        )

        for domain in (collective, compute, dataparallel, pipeline, runtime, training, sweep):
            domain.register(app, reproduce)
        _REGISTERED[0] = True
    return app


DEBUG = [False]
"""Set by ``--debug``: errors show their traceback (and a failed run every rank's log)."""


def _print_version(value: bool) -> None:
    if value:
        print(f"dlsched {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option(
        "--version", help="Print the version and exit.", is_eager=True,
        callback=_print_version)] = False,
    debug: Annotated[bool, typer.Option(
        "--debug", help="On an error, show the full traceback and logs.")] = False,
) -> None:
    """Plan and simulate distributed deep-learning training schedules."""
    DEBUG[0] = debug


def _fail(message: str, code: int = 2) -> None:
    """Print ``error: message`` on one line (whitespace runs collapsed; taken literally, not as
    rich markup) on stderr and exit with ``code``."""
    Console(stderr=True, soft_wrap=True).print(
        f"[bold red]error:[/] {escape(' '.join(message.split()))}", highlight=False)
    sys.exit(code)


def main() -> None:
    """Entry point: one line on stderr for every error; exit code 2 for bad input, 1 for a
    failed run or a bug (see the module docstring)."""
    DEBUG[0] = False
    try:
        if sys.argv[1:] != ["--version"]:
            commands()
        app(standalone_mode=False)
    except (ConfigError, UnitError) as error:
        _fail(str(error))
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        _fail("interrupted", 130)
    except RunFailure as error:
        if DEBUG[0] and error.details:
            print(error.details, file=sys.stderr)
        _fail(f"{error}" + ("" if DEBUG[0] else " (every rank's log: rerun with --debug)"), 1)
    except Exception as error:
        code, message = getattr(error, "exit_code", None), getattr(error, "format_message", None)
        if code is not None and message is not None:  # the parser's errors: unknown option, ...
            _usage_error(error, code, message())
        if DEBUG[0]:
            raise
        _fail(f"internal error, a bug in dlsched (please report it with the command): "
              f"{type(error).__name__}: {error}; rerun with --debug for the traceback", 1)


def _usage_error(error: Exception, code: int, message: str) -> None:
    """Show the parser's error on one line (the help when no arguments were given) and exit."""
    if not message:
        error.show()  # type: ignore[attr-defined]
        sys.exit(code)
    context = getattr(error, "ctx", None)
    where = f" (see '{context.command_path} --help')" if context is not None else ""
    _fail(f"{message}{where}", code)
