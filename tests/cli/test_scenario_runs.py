"""The options every ``dlsched reproduce`` command shares are declared once
(``cli.scenario_runs.reproduction_command``): each reproduction has all of them, in the place
of its ``run`` parameter, and receives them as one ``Reproduction``."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from dlsched.cli.app import REPRODUCTIONS, commands
from dlsched.cli.scenario_runs import Reproduction, reproduction_command

SHARED = ["json_out", "csv", "executor", "workers", "address", "db", "resume"]


def test_the_shared_options_stand_in_the_place_of_run_and_arrive_as_one_reproduction():
    received = {}

    @reproduction_command
    def toy(first: int = 1, *, run: Reproduction, last: str = "z") -> None:
        received.update(first=first, run=run, last=last)

    assert list(inspect.signature(toy).parameters) == ["first", *SHARED, "last"]
    app = typer.Typer()
    app.command()(toy)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(app, ["toy", "--first", "3", "--jobs", "2", "--db", "r.db",
                                      "--json", "--last", "a"])
    assert result.exit_code == 0, result.output
    assert received == {"first": 3, "last": "a", "run": Reproduction(
        json_out=True, workers=2, db=Path("r.db"))}


@pytest.mark.parametrize("name", list(REPRODUCTIONS))
def test_every_reproduction_has_every_shared_option(name: str) -> None:
    """All five run their scenarios through the one runner, so all five take its options."""
    command = typer.main.get_group(commands()).commands["reproduce"].commands[name]
    options = [param.name for param in command.params]
    assert [o for o in options if o in SHARED] == SHARED
