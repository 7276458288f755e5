"""The CLI starts without the heavy libraries: they are imported where they are used."""

from __future__ import annotations

import os
import subprocess
import sys


def test_cli_import_loads_no_matplotlib_scipy_or_torch() -> None:
    """``import dlsched.cli.app`` (what ``dlsched --help``/``--version`` run) leaves
    matplotlib, scipy and torch unimported (they took 1.9-2.9 s at start-up)."""
    code = ("import sys, dlsched.cli.app; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'matplotlib', 'scipy', 'torch'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "[]"
