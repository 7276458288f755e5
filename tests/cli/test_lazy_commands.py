"""The CLI lists its commands without importing them and imports a command's modules when it
runs: the listed help is each command's own, and the modules named for a command add it."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import pytest
import typer

from dlsched.cli import app as cli


def _python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)}
                          ).stdout.strip()


def _first_paragraph(command: typer.core.TyperCommand) -> str:
    return inspect.cleandoc(command.help or "").split("\n\n")[0].strip()


def test_listed_commands_are_the_registered_ones_with_their_own_help() -> None:
    """Every command the domains register is listed with the first paragraph of its own
    help (a changed docstring fails here until the entry follows it)."""
    built = typer.main.get_group(cli.commands())
    assert set(built.commands) == set(cli.COMMANDS)
    for name, entry in cli.COMMANDS.items():
        if entry.help is not None:
            assert entry.help == _first_paragraph(built.commands[name]), name
    assert set(built.commands["reproduce"].commands) == set(cli.REPRODUCTIONS)


def _module_sets() -> list[tuple[str, ...]]:
    return sorted({entry.modules for table in (cli.COMMANDS, cli.REPRODUCTIONS)
                   for entry in table.values() if entry.modules})


@pytest.mark.parametrize("modules", _module_sets(), ids=",".join)
def test_the_modules_named_for_a_command_add_it(modules: tuple[str, ...]) -> None:
    """In a fresh process, registering only the modules an entry names adds its command."""
    probe = ("import json, typer; from dlsched.cli import app as a; "
             f"a.register({modules!r}, a.app, a.reproduce); g = typer.main.get_group(a.app); "
             "print(json.dumps([list(g.commands), list(g.commands['reproduce'].commands)]))")
    top, reproductions = (set(names) for names in json.loads(_python(probe)))
    assert {n for n, e in cli.COMMANDS.items() if e.modules == modules} <= top
    assert {n for n, e in cli.REPRODUCTIONS.items() if e.modules == modules} <= reproductions


def test_help_lists_every_command_without_importing_any() -> None:
    """``dlsched --help`` imports no domain module, numpy or pydantic (it took 1.0-1.4 s at
    load 0.3 when every domain was imported to list them) and lists every command."""
    probe = ("import sys; sys.argv = ['dlsched', '--help']; from dlsched.cli.app import main\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m.startswith('dlsched.cli.') or "
             "m.split('.')[0] in ('numpy', 'pydantic', 'scipy', 'matplotlib', 'torch')))")
    lines = _python(probe).splitlines()
    assert lines[-1] == "['dlsched.cli.app', 'dlsched.cli.lazy']"
    listed = "\n".join(lines[:-1])
    assert all(f" {name} " in listed for name in cli.COMMANDS)


def test_a_command_imports_only_its_domain(run_cli) -> None:
    """``dlsched topologies`` imports the collective domain's CLI module (which registers
    ``reproduce themis`` too) and neither other domains nor the sweep's domains with every
    domain's scenario schema (the reproductions' runner used to import them through
    ``dlsched.sweep``)."""
    probe = ("import sys; sys.argv = ['dlsched', 'topologies', '--json']; "
             "from dlsched.cli.app import main\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m.startswith(('dlsched.cli.', "
             "'dlsched.sweep.', 'dlsched.pipeline.', 'dlsched.dataparallel.'))))")
    loaded = _python(probe).splitlines()[-1]
    assert "'dlsched.cli.collective'" in loaded and "'dlsched.sweep.runner'" in loaded
    assert "dlsched.cli.pipeline" not in loaded and "dlsched.cli.dataparallel" not in loaded
    assert "dlsched.sweep.domains" not in loaded and "dlsched.pipeline.scenario" not in loaded
    assert "dlsched.dataparallel.scenario" not in loaded


def test_a_mistyped_command_is_refused_with_suggestions_from_every_command(run_cli) -> None:
    code, _, err = run_cli("reproduc")
    assert code == 2 and "No such command 'reproduc'" in err and "'reproduce'" in err
    code, _, err = run_cli("reproduce", "themis-trainin")
    assert code == 2 and "'themis-training'" in err


def test_command_built_before_all_its_modules_is_built_again() -> None:
    """In a fresh process, ``profile`` adds the runtime module, which also adds the ``run``
    group with ``run dataparallel`` before the pipeline module adds ``run pipeline``; a later
    ``run --help`` in the same process lists both (it listed one before)."""
    out = _python(
        "import contextlib, sys\n"
        "from dlsched.cli.app import main\n"
        "for argv in (['profile', '--help'], ['run', '--help']):\n"
        "    sys.argv = ['dlsched', *argv]\n"
        "    with contextlib.suppress(SystemExit):\n"
        "        main()\n"
        "    print('END')\n")
    run_help = out.split("END")[1]
    assert " dataparallel " in run_help and " pipeline " in run_help
