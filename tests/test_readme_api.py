"""The README's Python API example runs as printed (the front door's code is not allowed to
rot): every line executes, prints what it says and writes its trace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    block, = re.findall(r"## Python API\n\n```python\n(.*?)```", README.read_text(), re.S)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, str(README), "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:6]] == ["baseline", "themis", "dlsched", "wfbp",
                                                      "usbyte", "dlsched"]
    assert re.fullmatch(r"TP8 PP2 DP4 .* \d+\.\d\d s  MFU \d+\.\d%", lines[6]), lines[6]
    assert len(lines) == 7 and (tmp_path / "dlsched.json").stat().st_size > 0
