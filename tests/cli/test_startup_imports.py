"""The CLI starts without the heavy libraries: they are imported where they are used."""

from __future__ import annotations

import os
import subprocess
import sys


def _heavy_modules_after(code: str) -> str:
    probe = (f"import sys; {code}; print(sorted({{m.split('.')[0] for m in sys.modules}} & "
             "{'matplotlib', 'scipy', 'torch', 'numpy', 'pydantic'}))")
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)}
                          ).stdout.strip()


def test_cli_with_every_command_loads_no_matplotlib_scipy_or_torch() -> None:
    """The CLI with every command registered (what ``dlsched --help`` runs) leaves
    matplotlib, scipy and torch unimported (they took 1.9-2.9 s at start-up)."""
    loaded = _heavy_modules_after("import dlsched.cli.app as a; a.commands()")
    assert "matplotlib" not in loaded and "scipy" not in loaded and "torch" not in loaded


def test_version_loads_only_the_cli_parser() -> None:
    """``import dlsched`` and the CLI module (what ``dlsched --version`` runs) import no
    numpy or pydantic either: the library's names load on first use."""
    assert _heavy_modules_after("import dlsched, dlsched.cli.app") == "[]"
    assert _heavy_modules_after("from dlsched import run_collective") != "[]"


def test_lazy_exports_are_listed_and_unknown_names_refused() -> None:
    """``dlsched`` and ``dlsched.sweep`` list their lazy names and refuse others by name."""
    import pytest

    import dlsched
    import dlsched.sweep

    assert "run_collective" in dir(dlsched) and "ResultStore" in dir(dlsched.sweep)
    assert dlsched.sweep.scenario_key.__module__ == "dlsched.sweep.store"
    for package in (dlsched, dlsched.sweep):
        with pytest.raises(AttributeError, match=f"module '{package.__name__}' has no"):
            package.no_such_name  # noqa: B018
