"""The ``dlsched`` command: the table of commands, exit codes and one-line errors.

Each domain adds its commands from its own module (``cli/<domain>.py``) through a
``register(app, reproduce)`` function, so the domains stay independent. A domain is imported
when one of its commands runs (``cli/lazy.py``), not for ``dlsched --help`` or ``--version``.

Exit codes: 0 done; 2 bad input (``ConfigError``, ``UnitError``, the parser's usage errors);
1 a run that could not finish (``RunFailure``: a rank died or hung) or a bug in dlsched (any
other exception: one line saying so; ``--debug`` shows the traceback).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from dlsched import __version__
from dlsched.cli.lazy import Entry, LazyGroup, register
from dlsched.errors import ConfigError, RunFailure
from dlsched.units import UnitError

COMMANDS = {
    "collective": Entry(("collective",), "Simulate one chunked collective under one or more "
                        "policies and compare them."),
    "topologies": Entry(("collective",), "List the bundled topology presets (bandwidth per NPU, "
                        "latency per step)."),
    "dataparallel": Entry(("dataparallel",), "Schedule one data-parallel iteration's gradient "
                          "all-reduces under each policy."),
    "profile": Entry(("runtime",), "Profile a torch module: per-parameter forward/backward "
                     "seconds and gradient sizes, in\nthe format ``dlsched dataparallel "
                     "--profile`` reads."),
    "calibrate": Entry(("runtime", "calibration"), "Time all-reduces across spawned ranks "
                       "and fit alpha-beta, ring and piecewise models;\nwrite the network "
                       "file ``dlsched dataparallel --network`` reads."),
    "reproduce": Entry(()),
    "compute": Entry(("compute",), "Predicted compute time and MFU of a zoo model on a GPU."),
    "plan": Entry(("plan",), "Plan a whole training job: TP x PP x DP, schedule, "
                  "recomputation, ZeRO; iteration\ntime, FLOP rates, memory per GPU and "
                  "exposed communication, against the baselines."),
    "validate": Entry(("validate",), "Score dlsched against published training runs: each "
                      "ledger row predicted, its error\nand 90% interval, per source the "
                      "mean error, bias, worst row and coverage, per GPU the\nsame with how "
                      "its preset's constants were obtained, and each row that leaves settings"
                      "\nunpublished against dlsched's best over them."),
    "pipeline": Entry(("pipeline",), "Synchronous pipeline planning (partition, mapping, "
                      "schedule)."),
    "train": Entry(("training",), "Simulate whole training iterations of a workload under "
                   "collective policies."),
    "run": Entry(("pipeline", "runtime"), "Execute plans on spawned torch.distributed ranks and "
                 "compare measured with predicted times."),
    "sweep": Entry(("sweep",), "Design-space sweeps: run a grid file (dlsched sweep GRID.yaml), "
                   "then export, summarize or plot the results file."),
}
"""Every top-level command in ``--help`` order: the modules that add it and its help's first
paragraph (``tests/cli/test_lazy_commands.py`` checks both against the commands)."""
REPRODUCTIONS = {"themis": Entry(("collective",)), "megatron": Entry(("compute",)),
                 "usbyte": Entry(("dataparallel",)), "pipeline": Entry(("pipeline",)),
                 "themis-training": Entry(("training",)), "vtrain": Entry(("vtrain",)),
                 "layouts": Entry(("layouts",)), "attention": Entry(("attention",))}
"""``dlsched reproduce`` commands: their modules (``reproduce --help`` imports all eight)."""


class _Commands(LazyGroup):
    entries = COMMANDS

    def source(self) -> typer.Typer:
        return app

    def load(self, modules: Iterable[str]) -> None:
        register(modules, app, reproduce)


class _Reproductions(_Commands):
    entries = REPRODUCTIONS

    def source(self) -> typer.Typer:
        return reproduce


app = typer.Typer(
    cls=_Commands,
    help="Plan and simulate distributed deep-learning training schedules.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
reproduce = typer.Typer(cls=_Reproductions, help="Reproduce the published papers' tables.",
                        no_args_is_help=True)
app.add_typer(reproduce, name="reproduce")


def commands() -> typer.Typer:
    """The app with every domain's commands imported and registered (the CLI itself imports a
    domain when one of its commands runs)."""
    register(("collective", "compute", "dataparallel", "pipeline", "plan", "runtime",
              "training", "sweep", "validate", "vtrain", "layouts", "attention",
              "calibration"), app,
             reproduce)
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
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:  # typer returns an Exit's code (Ctrl-C: 130)
            sys.exit(code)
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
    group = getattr(context, "command", None)
    if message.startswith("No such command") and hasattr(group, "list_commands"):
        names = group.list_commands(context)  # type: ignore[union-attr]
        message, where = message.rstrip("."), f"; accepted: {', '.join(names)}{where}"
    _fail(f"{message}{where}", code)
