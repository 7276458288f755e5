"""Outputs appear whole or not at all (``report/files.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlsched.report import atomic_output, write_text


def test_a_failed_writer_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    """The writer raises halfway: the destination keeps its old bytes, nothing else remains."""
    path = tmp_path / "keep.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_output(path) as temporary:
        temporary.write_text("half")
        raise RuntimeError("stopped")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.json"]


def test_a_finished_writer_replaces_the_file_in_place(tmp_path: Path) -> None:
    """The temporary file lies beside the destination with its suffix (writers that infer the
    format from it work), and the new text replaces the old; permissions are kept."""
    path = tmp_path / "sub" / "out.csv"
    write_text(path, "a\n")
    path.chmod(0o640)
    with atomic_output(path) as temporary:
        assert temporary.parent == path.parent and temporary.suffix == ".csv"
        temporary.write_text("b\n")
    assert path.read_text() == "b\n" and path.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in path.parent.iterdir()) == ["out.csv"]


def test_writing_through_a_symlink_replaces_the_link_not_its_target(tmp_path: Path) -> None:
    """``os.replace`` renames over the link itself: the file it pointed to is untouched (the
    guard refuses an output that is an input before this can matter)."""
    target = tmp_path / "target.txt"
    target.write_text("input")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    write_text(link, "output")
    assert target.read_text() == "input" and link.read_text() == "output"
    assert not link.is_symlink()
