"""``dlsched sweep`` refuses damaged results files and grids whose rows would be mislabelled."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

GRID = {"name": "small", "domain": "collective",
        "axes": {"topology": ["2D-SW_SW"], "size": ["1 MB", "64 MB"],
                 "policy": ["baseline", "themis"], "chunks": [1, 2, 3, 4, 5, 6, 7, 8]}}
PAGE = 4096


@pytest.fixture
def results(tmp_path: Path, run_cli) -> tuple[Path, Path]:
    """A grid file and its finished results file (32 rows)."""
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump(GRID))
    db = tmp_path / "g.db"
    code, _, err = run_cli("sweep", str(grid), "--db", str(db), "--jobs", "1", "--quiet")
    assert code == 0, err
    return grid, db


@pytest.mark.parametrize("page", [3, 5, 6])
def test_a_results_file_with_damaged_pages_is_refused_in_one_line(
        results: tuple[Path, Path], run_cli, page: int) -> None:
    """Bytes of one page overwritten (page 3: the meta table's text; 5, 6: the scenarios
    table's tree): --resume and summary (and export, which reads no meta, for a damaged
    tree) exit 2 with one line naming the file, instead of a traceback."""
    grid, db = results
    data = bytearray(db.read_bytes())
    assert len(data) >= (page + 1) * PAGE
    for index in range(page * PAGE + 100, (page + 1) * PAGE, 50):
        data[index] = 0xAB
    db.write_bytes(bytes(data))
    export = ("sweep", "export", str(db), "--csv", str(db.with_suffix(".csv")))
    for args in (("sweep", str(grid), "--db", str(db), "--resume", "--jobs", "1"),
                 ("sweep", "summary", str(db)), *([export] if page != 3 else [])):
        code, _, err = run_cli(*args)
        assert code == 2, (args, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert f"'{db}' is damaged" in err
